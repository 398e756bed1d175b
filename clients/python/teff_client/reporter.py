"""A training loop's reporter: ``log()`` returns at once and never raises; a background thread delivers.

The calling thread only appends a tuple to a deque (no lock, no I/O, no formatting, no validation, no
counter: one length check against a bound that also says "closed", one clock read, one append); a
daemon thread polls the deque, turns the tuples into measurements and posts them to
``POST /v1/runs/{id}/measurements`` in batches. Run events (``event()``, ``checkpoint_save()``,
``evaluation()``, ...: the goodput timeline of issue 21) travel through the same deque and go to
``POST /v1/runs/{id}/events``, idempotent by an event id made on the training thread.

Delivery is at least once from here and exactly once in the store: the service keys a measurement by
(run, step) and ignores a step it already has ("first write wins", listed in ``ignored_steps``), so a
batch whose answer was lost is simply sent again. While the service is down the reports wait, in
memory up to ``max_pending`` and then in an optional JSON-lines ``spill_path`` (oldest first), and go
out when it answers again; without a spill file the oldest reports beyond the bound are dropped and
counted. A batch the service rejects as invalid (422) is split in halves until the offending reports
are isolated; those are dropped (counted in ``rejected``) and the rest are stored. Events follow the
same rules, keyed by their event id (the service ignores an id it already has).
"""

from __future__ import annotations

import atexit
import contextlib
import datetime as _dt
import itertools
import json
import logging
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from teff_client.errors import (
    Forbidden,
    NotFound,
    PayloadTooLarge,
    ProblemError,
    ServiceUnreachable,
    Unauthorized,
    ValidationFailed,
)
from teff_client.retry import NO_RETRY

if TYPE_CHECKING:
    from teff_client._sync_client import Client

logger = logging.getLogger("teff_client.reporter")

_UTC = _dt.UTC
_now = time.time  # bound once: log() reads the clock without two attribute lookups


class _Event:
    """Marks an event's tuple in the queue (a measurement's tuple starts with its step)."""


_EVENT = _Event()

#: The kinds ``POST /v1/runs/{id}/events`` takes (service/domain/goodput.py ``EventKind``); an event of
#: another kind is refused here, on the sender thread, rather than costing the batch a 422.
EVENT_KINDS = frozenset(
    {
        "job_started",
        "startup_done",
        "first_step",
        "checkpoint_save_begin",
        "checkpoint_save_end",
        "checkpoint_restore_begin",
        "checkpoint_restore_end",
        "evaluation_begin",
        "evaluation_end",
        "data_stall",
        "hang_detected",
        "failure",
        "restart",
        "job_ended",
    }
)


class _TryAgain(Exception):
    """The run's attempt number moved on; create again."""


@dataclass
class ReporterStats:
    """What the reporter did so far (read from any thread; figures only grow)."""

    #: reports taken from the queue by the sender so far (``log()`` itself counts nothing)
    logged: int = 0
    #: reports the service acknowledged (stored now or stored before: a repeated step)
    delivered: int = 0
    stored: int = 0
    ignored_steps: int = 0
    #: invalid reports the service refused (422), dropped
    rejected: int = 0
    #: reports lost to the memory bound (no spill file) or to a fatal answer (401, 403, 404)
    dropped: int = 0
    spilled: int = 0
    failed_posts: int = 0
    #: events the service acknowledged (stored now, or an id it already had)
    events_delivered: int = 0
    events_stored: int = 0
    #: events refused (an unknown kind here, or 422 from the service), dropped
    events_rejected: int = 0
    latest_mfu: float | None = None
    median_mfu: float | None = None
    latest_summary: dict[str, Any] = field(default_factory=dict)
    #: set when the service refused the run for good (key revoked, run deleted)
    fatal: str | None = None


class Reporter:
    """Reports a run's steps to the service without ever holding up the training loop.

    ``log(step, step_time_seconds=…)`` (tokens per step default to the run's global batch) or
    ``log(step, tokens=…)`` (tokens since the previous ``log``; the reporter times the interval) or
    ``log(step, tokens_per_second=…)``. ``close()`` (also on ``with`` exit and at interpreter exit)
    delivers what is left within ``close_timeout_seconds``.
    """

    def __init__(
        self,
        client: Client,
        run_id: str | None = None,
        *,
        run: Mapping[str, Any] | None = None,
        global_batch_tokens: int | None = None,
        batch_size: int = 500,
        flush_interval_seconds: float = 2.0,
        max_queue: int = 200_000,
        max_pending: int = 100_000,
        max_pending_events: int = 10_000,
        poll_seconds: float = 0.05,
        spill_path: str | os.PathLike[str] | None = None,
        backoff_max_seconds: float = 30.0,
        close_timeout_seconds: float = 10.0,
        register_atexit: bool = True,
        start: bool = True,
    ) -> None:
        if (run_id is None) == (run is None):
            raise TypeError("Reporter needs a run_id or a run description (run=...)")
        self.client = client
        self.run_id = run_id
        #: the description the sender thread creates (or resumes) the run from, when no run_id is given
        self.run_description = dict(run) if run is not None else None
        self.run: dict[str, Any] | None = None
        self._idempotency_key = str(uuid.uuid4())
        self.finished_status: str | None = None
        self.global_batch_tokens = global_batch_tokens
        self.batch_size = max(1, batch_size)
        self.flush_interval_seconds = flush_interval_seconds
        self.max_queue = max_queue
        self.max_pending = max_pending
        self.spill_path = Path(spill_path) if spill_path is not None else None
        self.backoff_max_seconds = backoff_max_seconds
        self.close_timeout_seconds = close_timeout_seconds
        self.stats = ReporterStats()
        # The hand-off between the training thread and the sender: deque.append and popleft are
        # atomic in CPython, so neither side takes a lock for it. ``_room`` is the queue's bound while
        # the reporter is open and 0 once it is closed: log() makes one comparison for both.
        self._queue: deque[tuple[Any, ...]] = deque()
        self._room = max(1, max_queue)
        self._pending: deque[dict[str, Any]] = deque()
        self._pending_events: deque[dict[str, Any]] = deque()
        self.max_pending_events = max_pending_events
        # Event ids: unique per reporter (a random prefix) and per event (a counter), made on the
        # training thread so that a retried POST or a spilled copy carries the same id.
        self._event_prefix = uuid.uuid4().hex[:12]
        self._event_numbers = itertools.count(1)
        #: how often the sender looks at the queue: log() does not wake it (that costs a Python call)
        self.poll_seconds = min(poll_seconds, flush_interval_seconds)
        self._wake = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._closing = False
        self._closed = False
        self._deadline: float | None = None
        self._previous_time: float | None = _now()
        self._spill_offset = 0
        self._down_since: float | None = None
        self._failures = 0
        self._next_try = 0.0
        self._thread: threading.Thread | None = None
        if start:
            self.start()
        if register_atexit:
            atexit.register(self._close_at_exit)

    # -- the training thread's side -----------------------------------------------------------------

    def log(
        self,
        step: int,
        *,
        step_time_seconds: float | None = None,
        tokens: int | None = None,
        tokens_per_second: float | None = None,
        sequences: int | None = None,
        loss: float | None = None,
        memory_bytes: int | None = None,
    ) -> None:
        """Queue one report of ``step`` (completed optimizer steps). Returns at once; never raises.

        The hot path: one bound check (which is also the closed check), one clock read, one append.
        Validation, formatting and counting happen on the sender thread."""
        try:
            queue = self._queue
            if len(queue) < self._room:
                queue.append(
                    (
                        step,
                        _now(),
                        step_time_seconds,
                        tokens,
                        tokens_per_second,
                        sequences,
                        loss,
                        memory_bytes,
                    )
                )
            else:
                self.stats.dropped += 1
        except Exception:  # the training step never fails because of reporting
            pass

    def event(
        self,
        kind: str,
        *,
        step: int | None = None,
        reason: str | None = None,
        duration_seconds: float | None = None,
        attempt: int | None = None,
        event_id: str | None = None,
        at: float | None = None,
    ) -> str | None:
        """Queue one run event (``POST /v1/runs/{id}/events``): ``kind`` is one of
        :data:`EVENT_KINDS`; ``at`` a ``time.time()`` stamp (default: now); ``event_id`` the
        idempotency key (default: unique to this reporter and event). Returns the event id, or None
        when the reporter is closed or full. Never raises, never blocks."""
        try:
            if event_id is None:
                event_id = f"{kind}-{self._event_prefix}-{next(self._event_numbers)}"
            queue = self._queue
            if len(queue) >= self._room:
                self.stats.dropped += 1
                return None
            queue.append(
                (
                    _EVENT,
                    kind,
                    _now() if at is None else at,
                    step,
                    reason,
                    duration_seconds,
                    attempt,
                    event_id,
                )
            )
            self._wake.set()  # events are rare: send them without waiting for the poll
            return event_id
        except Exception:
            return None

    @contextlib.contextmanager
    def _span(self, begin: str, end: str, step: int | None) -> Iterator[None]:
        self.event(begin, step=step)
        try:
            yield
        finally:
            self.event(end, step=step)

    def checkpoint_save(self, step: int | None = None) -> contextlib.AbstractContextManager[None]:
        """``with reporter.checkpoint_save(step): save(...)``: checkpoint_save_begin / _end."""
        return self._span("checkpoint_save_begin", "checkpoint_save_end", step)

    def checkpoint_restore(self, step: int | None = None) -> contextlib.AbstractContextManager[None]:
        """``with reporter.checkpoint_restore(step): load(...)``: checkpoint_restore_begin / _end."""
        return self._span("checkpoint_restore_begin", "checkpoint_restore_end", step)

    def evaluation(self, step: int | None = None) -> contextlib.AbstractContextManager[None]:
        """``with reporter.evaluation(step): evaluate(...)``: evaluation_begin / _end."""
        return self._span("evaluation_begin", "evaluation_end", step)

    def end(self, status: str = "finished", *, reason: str | None = None, step: int | None = None) -> None:
        """The job's end: a ``job_ended`` event (``failure`` with ``reason`` when ``status`` is
        ``failed``), then :meth:`close` marking the run ``status``."""
        if status == "failed":
            self.event("failure", step=step, reason=(reason or "failed")[:500])
        else:
            self.event("job_ended", step=step)
        self.close(status=status)

    def flush(self, timeout_seconds: float = 10.0) -> bool:
        """Wait until everything logged so far is delivered (or spilled); True when it was."""
        deadline = time.monotonic() + timeout_seconds
        self._idle.clear()
        self._wake.set()
        while time.monotonic() < deadline:
            if self._idle.wait(0.05) and self._nothing_left():
                return True
            self._wake.set()
        return self._nothing_left()

    def _nothing_left(self) -> bool:
        return not self._queue and not self._pending and not self._pending_events and not self._spill_left()

    def close(self, timeout_seconds: float | None = None, *, status: str | None = None) -> None:
        """Deliver what is left (within the timeout), spill what could not be, stop the thread; with
        ``status`` (``finished`` or ``failed``) then mark the run so."""
        if self._closed:
            return
        self._closed = True
        self._room = 0  # log() and event() refuse from now on
        with contextlib.suppress(Exception):
            atexit.unregister(self._close_at_exit)
        timeout = self.close_timeout_seconds if timeout_seconds is None else timeout_seconds
        self._deadline = time.monotonic() + timeout
        self._closing = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout + 1.0)
        if self._thread is None or not self._thread.is_alive():
            self._drain_queue()
            self._give_up_pending()
        left = len(self._pending) + len(self._pending_events)
        if left:
            logger.warning("teff reporter: %d reports of run %s not delivered at close", left, self.run_id)
        if status is not None:
            self._mark(status, max(1.0, (self._deadline or 0.0) - time.monotonic()))

    def _mark(self, status: str, budget_seconds: float) -> None:
        from teff_client.retry import RetryPolicy

        if self.run_id is None and not self.stats.fatal:
            with contextlib.suppress(Exception):
                self._ensure_run()
        if self.run_id is None or self.stats.fatal:
            logger.warning("teff reporter: run not marked %s (no run on the service)", status)
            return
        policy = RetryPolicy(
            attempts=3,
            backoff_base_seconds=min(1.0, budget_seconds / 4),
            max_retry_after_seconds=budget_seconds,
        )
        try:
            self.client.request("PATCH", f"/v1/runs/{self.run_id}", json={"status": status}, retry=policy)
            self.finished_status = status
        except Exception as error:  # the job's exit must not fail because of reporting
            logger.warning("teff reporter: could not mark run %s %s: %s", self.run_id, status, error)

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _close_at_exit(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    # -- the sender thread ----------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"teff-reporter-{self.run_id}", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        last_delivery = time.monotonic()
        while True:
            woken = self._wake.wait(self.poll_seconds)
            self._wake.clear()
            now = time.monotonic()
            if not (
                woken
                or self._closing
                or len(self._queue) >= self.batch_size
                or now - last_delivery >= self.flush_interval_seconds
            ):
                continue  # the poll: nothing worth a batch yet
            last_delivery = now
            try:
                self._drain_queue()
                self._bound_memory()
                if time.monotonic() >= self._next_try or self._closing:
                    self._deliver()
            except Exception:  # a bug here must not kill reporting for the rest of the run
                logger.exception("teff reporter: unexpected error; continuing")
            if self._nothing_left():
                self._idle.set()
            if self._closing:
                deadline = self._deadline or 0.0
                if self._nothing_left() or time.monotonic() >= deadline or self.stats.fatal:
                    self._give_up_pending()
                    return
                if self._down_since is not None:
                    time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
                self._wake.set()

    def _drain_queue(self) -> None:
        queue, pending, events = self._queue, self._pending, self._pending_events
        taken = 0
        while queue:
            try:
                item = queue.popleft()
            except IndexError:
                break
            if item[0] is _EVENT:
                event = self._event_body(item)
                if event is not None:
                    events.append(event)
                continue
            taken += 1
            try:
                measurement = self._measurement(item)
            except (TypeError, ValueError, OverflowError, OSError) as error:
                self._reject_local(item[0], str(error))
                continue
            if measurement is not None:
                pending.append(measurement)
        self.stats.logged += taken

    def _event_body(self, item: tuple[Any, ...]) -> dict[str, Any] | None:
        _, kind, when, step, reason, duration, attempt, event_id = item
        if kind not in EVENT_KINDS:
            self.stats.events_rejected += 1
            logger.warning("teff reporter: event kind %r unknown (one of %s)", kind, sorted(EVENT_KINDS))
            return None
        try:
            body: dict[str, Any] = {
                "event_id": str(event_id)[:100],
                "kind": kind,
                "time": _dt.datetime.fromtimestamp(float(when), _UTC).isoformat(),
            }
            if step is not None:
                body["step"] = int(step)
            if attempt is not None:
                body["attempt"] = int(attempt)
            if duration is not None:
                body["duration_seconds"] = float(duration)
            if reason is not None:
                body["reason"] = str(reason)[:500]
        except (TypeError, ValueError, OverflowError, OSError) as error:
            self.stats.events_rejected += 1
            logger.warning("teff reporter: event %s not sent: %s", kind, error)
            return None
        return body

    def _measurement(self, item: tuple[Any, ...]) -> dict[str, Any] | None:
        step, when, step_time, tokens, rate, sequences, loss, memory = item
        previous, self._previous_time = self._previous_time, when
        throughput: dict[str, Any]
        if rate is not None:
            throughput = {"tokens_per_second": float(rate)}
        elif step_time is not None:
            throughput = {"step_time_seconds": float(step_time)}
            if tokens is not None:
                throughput["global_batch_tokens"] = int(tokens)
            elif sequences is not None:
                throughput["global_batch_sequences"] = int(sequences)
            elif self.global_batch_tokens is not None:
                throughput["global_batch_tokens"] = int(self.global_batch_tokens)
            # else: the run's global batch is filled in by _post, once read from the service
        elif tokens is not None and previous is not None and when > previous:
            throughput = {"tokens_per_second": float(tokens) / (when - previous)}
        else:
            self._reject_local(step, "no throughput: give step_time_seconds, tokens or tokens_per_second")
            return None
        measurement: dict[str, Any] = {
            "step": int(step),
            "time": _dt.datetime.fromtimestamp(when, _UTC).isoformat(),
            "throughput": throughput,
        }
        if loss is not None:
            measurement["loss"] = float(loss)
        if memory is not None:
            measurement["memory_bytes"] = int(memory)
        return measurement

    def _reject_local(self, step: Any, reason: str) -> None:
        self.stats.rejected += 1
        if self.stats.rejected <= 3:
            logger.warning("teff reporter: step %s not reported: %s", step, reason)

    def _bound_memory(self) -> None:
        for pending, bound, what in (
            (self._pending, self.max_pending, "measurement"),
            (self._pending_events, self.max_pending_events, "event"),
        ):
            excess = len(pending) - bound
            if excess <= 0:
                continue
            oldest = [pending.popleft() for _ in range(excess)]
            if self.spill_path is not None:
                self._spill(oldest, what)
            else:
                self.stats.dropped += excess
                logger.warning(
                    "teff reporter: %d oldest %ss dropped (over the bound, no spill_path)", excess, what
                )

    # -- the spill file ---------------------------------------------------------------------------------

    def _spill(self, items: list[dict[str, Any]], what: str = "measurement") -> None:
        """Append reports (``what`` = "measurement") or events (``what`` = "event") to the spill file."""
        assert self.spill_path is not None
        try:
            self.spill_path.parent.mkdir(parents=True, exist_ok=True)
            with self.spill_path.open("a", encoding="utf-8") as spill:
                for item in items:
                    spill.write(json.dumps({"run_id": self.run_id, what: item}) + "\n")
            self.stats.spilled += len(items)
        except OSError as error:
            self.stats.dropped += len(items)
            logger.warning(
                "teff reporter: cannot spill to %s (%s): %d %ss dropped",
                self.spill_path,
                error,
                len(items),
                what,
            )

    def _spill_left(self) -> bool:
        if self.spill_path is None:
            return False
        try:
            return self.spill_path.stat().st_size > self._spill_offset
        except OSError:
            return False

    def _read_spill(self, limit: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
        """Up to ``limit`` spilled reports and events from the current offset, and the offset after."""
        assert self.spill_path is not None
        measurements: list[dict[str, Any]] = []
        events: list[dict[str, Any]] = []
        with self.spill_path.open("rb") as spill:
            spill.seek(self._spill_offset)
            offset = self._spill_offset
            while len(measurements) + len(events) < limit:
                line = spill.readline()
                if not line.endswith(b"\n"):
                    break  # a line being written (or torn by a crash): read it next time or never
                offset += len(line)
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(record, dict) or record.get("run_id") not in (self.run_id, None):
                    continue
                if isinstance(record.get("measurement"), dict):
                    measurements.append(record["measurement"])
                elif isinstance(record.get("event"), dict):
                    events.append(record["event"])
        return measurements, events, offset

    def _spill_delivered(self, offset: int) -> None:
        assert self.spill_path is not None
        self._spill_offset = offset
        with contextlib.suppress(OSError):
            if self.spill_path.stat().st_size <= offset:
                self.spill_path.unlink()
                self._spill_offset = 0

    # -- delivery ---------------------------------------------------------------------------------------

    def _ensure_run(self) -> None:
        """Create (or resume) the run from its description; raises while the service is down."""
        if self.run_id is not None or self.run_description is None:
            return
        from teff_client.errors import Conflict

        try:
            run = self.client.request(
                "POST",
                "/v1/runs",
                json=self.run_description,
                retry=NO_RETRY,
                headers={"Idempotency-Key": self._idempotency_key},
            ).json()
        except Conflict as conflict:
            if conflict.existing_run_id is None:
                raise
            run = self.client.request("GET", f"/v1/runs/{conflict.existing_run_id}", retry=NO_RETRY).json()
            if run.get("status") != "running":
                # The job's earlier attempt ended: this process is the next attempt.
                self.run_description["attempt"] = int(run.get("attempt") or 0) + 1
                self._idempotency_key = str(uuid.uuid4())
                raise _TryAgain() from None
        self.run = run
        self.run_id = str(run["id"])
        if self.global_batch_tokens is None:
            self.global_batch_tokens = int(run["global_batch_tokens"])
        logger.info("teff reporter: reporting to run %s", self.run_id)

    def _deliver(self) -> None:
        if self.run_id is None:
            try:
                while True:
                    try:
                        self._ensure_run()
                        break
                    except _TryAgain:
                        continue
            except (Unauthorized, Forbidden, ValidationFailed, NotFound) as error:
                self.stats.fatal = str(error)
                logger.error("teff reporter: the run cannot be created: %s; reporting stops", error)
                self._drop(list(self._pending) + list(self._pending_events), "fatal")
                self._pending.clear()
                self._pending_events.clear()
                return
            except (ProblemError, ServiceUnreachable, httpx.HTTPError, OSError, ValueError) as error:
                self._service_down(error)
                return
        while not self.stats.fatal:
            if self._spill_left():
                batch, events, offset = self._read_spill(self.batch_size)
                if events and not self._post_events(events):
                    return
                if batch and not self._post(batch):
                    return
                self._spill_delivered(offset)
                continue
            if self._pending_events:
                count = min(self.batch_size, len(self._pending_events))
                if not self._post_events([self._pending_events[index] for index in range(count)]):
                    return
                for _ in range(count):
                    self._pending_events.popleft()
                continue
            if not self._pending:
                return
            count = min(self.batch_size, len(self._pending))
            batch = [self._pending[index] for index in range(count)]
            if not self._post(batch):
                return
            for _ in range(count):
                self._pending.popleft()
            if self._queue and len(self._pending) < self.batch_size:
                self._drain_queue()

    def _post_events(self, batch: list[dict[str, Any]]) -> bool:
        """Deliver events; True when the service has them (or refused them for good)."""
        try:
            answer = self.client.request(
                "POST", f"/v1/runs/{self.run_id}/events", json=batch, retry=NO_RETRY
            ).json()
        except ValidationFailed as error:
            if len(batch) == 1:
                self.stats.events_rejected += 1
                logger.warning("teff reporter: event %s refused: %s", batch[0].get("event_id"), error)
                return True
            half = len(batch) // 2
            return self._post_events(batch[:half]) and self._post_events(batch[half:])
        except (Unauthorized, Forbidden, NotFound) as error:
            self.stats.fatal = str(error)
            logger.error("teff reporter: run %s: %s; reporting stops", self.run_id, error)
            self._drop(batch, "fatal")
            return True
        except (ProblemError, ServiceUnreachable, httpx.HTTPError, OSError, ValueError) as error:
            self._service_down(error)
            return False
        self._back_up()
        self.stats.events_delivered += len(batch)
        self.stats.events_stored += int(answer.get("stored", 0))
        return True

    def _post(self, batch: list[dict[str, Any]]) -> bool:
        """Deliver a batch; True when the service has it (or refused parts of it for good)."""
        try:
            self._fill_batch_tokens(batch)
            answer = self.client.request(
                "POST", f"/v1/runs/{self.run_id}/measurements", json=batch, retry=NO_RETRY
            ).json()
        except ValidationFailed as error:
            return self._split_invalid(batch, error)
        except PayloadTooLarge as error:
            if len(batch) == 1:
                self._drop(batch, f"rejected: {error}")
                return True
            half = len(batch) // 2
            return self._post(batch[:half]) and self._post(batch[half:])
        except (Unauthorized, Forbidden, NotFound) as error:
            self.stats.fatal = str(error)
            logger.error("teff reporter: run %s: %s; reporting stops", self.run_id, error)
            self._drop(batch, "fatal")
            return True
        except (ProblemError, ServiceUnreachable, httpx.HTTPError, OSError, ValueError) as error:
            self._service_down(error)
            return False
        self._delivered(batch, answer)
        return True

    def _fill_batch_tokens(self, batch: list[dict[str, Any]]) -> None:
        """A ``step_time_seconds`` report without tokens takes the run's global batch."""
        missing = [
            m["throughput"]
            for m in batch
            if "step_time_seconds" in m["throughput"]
            and "global_batch_tokens" not in m["throughput"]
            and "global_batch_sequences" not in m["throughput"]
        ]
        if not missing:
            return
        if self.global_batch_tokens is None:
            run = self.client.request("GET", f"/v1/runs/{self.run_id}", retry=NO_RETRY).json()
            self.global_batch_tokens = int(run["global_batch_tokens"])
        for throughput in missing:
            throughput["global_batch_tokens"] = self.global_batch_tokens

    def _split_invalid(self, batch: list[dict[str, Any]], error: ValidationFailed) -> bool:
        if len(batch) == 1:
            self.stats.rejected += 1
            if self.stats.rejected <= 3:
                logger.warning("teff reporter: step %s refused: %s", batch[0].get("step"), error)
            return True
        half = len(batch) // 2
        # All or nothing on the service's side: halve until the bad reports stand alone.
        return self._post(batch[:half]) and self._post(batch[half:])

    def _drop(self, batch: list[dict[str, Any]], reason: str) -> None:
        self.stats.dropped += len(batch)
        logger.debug("teff reporter: %d reports dropped (%s)", len(batch), reason)

    def _back_up(self) -> None:
        if self._down_since is not None:
            logger.warning(
                "teff reporter: service back after %.1f s; delivering", time.monotonic() - self._down_since
            )
        self._down_since = None
        self._failures = 0
        self._next_try = 0.0

    def _delivered(self, batch: list[dict[str, Any]], answer: Mapping[str, Any]) -> None:
        self._back_up()
        stats = self.stats
        stats.delivered += len(batch)
        stats.stored += int(answer.get("stored", 0))
        stats.ignored_steps += len(answer.get("ignored_steps", ()))
        summary = answer.get("summary") or {}
        stats.latest_summary = dict(summary)
        stats.latest_mfu = summary.get("latest_mfu")
        stats.median_mfu = summary.get("median_mfu")

    def _service_down(self, error: Exception) -> None:
        self.stats.failed_posts += 1
        self._failures += 1
        if self._down_since is None:
            self._down_since = time.monotonic()
            logger.warning("teff reporter: service unreachable (%s); keeping reports", error)
        retry_after = getattr(error, "retry_after_seconds", None)
        wait = retry_after if retry_after is not None else self.client.retry.backoff_seconds(self._failures)
        self._next_try = time.monotonic() + min(self.backoff_max_seconds, max(0.05, wait))

    def _give_up_pending(self) -> None:
        """At close: what could not be delivered goes to the spill file (delivered by the next run)."""
        if self.spill_path is None or self.stats.fatal:
            return
        if self._pending_events:
            self._spill(list(self._pending_events), "event")
            self._pending_events.clear()
        if self._pending:
            self._spill(list(self._pending))
            self._pending.clear()
