"""Group commit: many small writes share one transaction, and each caller is answered after it commits.

One writer per process owns the writes. While it commits a batch, the next callers queue, and it then
takes all of them at once, so a transaction's statements and commit are paid once per batch (SQLite
admits one writer at a time). There is no timer: under light load a batch is a single job.

Durability: a caller's future resolves only after the transaction holding its job has committed (or
failed), so an acknowledged write is a committed one.

Failures: ``process`` answers each job with a result or a per-job exception (a job it rejects leaves
nothing written). When the batch transaction fails, an operational error (database down, locked past
the busy timeout, disk full) fails every job of the batch; any other error (a constraint, a bug) is
retried job by job, so one bad job cannot fail the others.

Where a batch is committed: by the writer thread; on SQLite, light jobs on the event loop when the
write lock is free (``inline_max_weight``: the thread hand-offs cost a light request more than its
statements; on PostgreSQL the loop would wait on round trips)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError, OperationalError

from service.store.uow import UnitOfWork, WriteLockBusy

logger = logging.getLogger(__name__)

Job = TypeVar("Job")
Result = TypeVar("Result")

#: What ``process`` answers per job: its result, or the exception that job alone failed with.
Outcome = Any


class WriterClosed(RuntimeError):
    """A job was submitted to (or was still queued in) a writer that has been closed."""


@dataclass(slots=True)
class _Pending(Generic[Job]):
    job: Job
    weight: int
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any] = field(repr=False)


_STOP = object()

#: Turns of the event loop an inline batch stays open after its first job: a request's bytes are read
#: in one turn and its handler reaches ``submit`` in a later one, so closing the batch at the end of the
#: first job's turn would leave out requests read in the same poll. An idle loop turns in
#: microseconds, so a lone request waits no longer than that.
INLINE_WAIT_TURNS = 2


def _resolve(future: asyncio.Future[Any], outcome: Any) -> None:
    if future.done():  # the caller went away (cancelled); the job was committed all the same
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


class GroupCommitWriter(Generic[Job, Result]):
    """One writer thread that commits queued jobs in batches of up to ``max_batch_weight``.

    ``process(connection, jobs)`` runs inside a write unit of work and returns one outcome per job, in
    order: a result, or an exception instance for a job it rejected without writing anything for it.
    ``weight(job)`` sizes a job (say, its rows); a batch holds at least one job, however heavy.
    ``on_batch(jobs, seconds)`` is told each transaction's job count and duration (for metrics).
    ``inline_max_weight``: jobs up to this weight are committed on the caller's event loop, all those
    of a couple of its turns in one transaction, never waiting for the write lock (when it is held
    they go to the thread); 0 (the default) sends every job to the thread. SQLite only.
    """

    def __init__(
        self,
        engine: Engine,
        process: Callable[[Connection, Sequence[Job]], Sequence[Outcome]],
        *,
        weight: Callable[[Job], int] = lambda _job: 1,
        max_batch_weight: int = 50_000,
        name: str = "group-commit",
        on_batch: Callable[[int, float], None] | None = None,
        inline_max_weight: int = 0,
    ) -> None:
        self._engine = engine
        self._process = process
        self._weight = weight
        self._max_batch_weight = max_batch_weight
        self._name = name
        self._on_batch = on_batch
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._closed = False
        self._inline_max_weight = inline_max_weight if engine.dialect.name == "sqlite" else 0
        self._inline: list[_Pending[Job]] = []  # light jobs of this turn of the loop
        self._inline_loop: asyncio.AbstractEventLoop | None = None  # the one the inline path runs on
        # Its own connection, held for the writer's life: a pool checkout on the event loop could
        # wait for connections that requests release only through that loop.
        self._inline_connection: Connection | None = engine.connect() if self._inline_max_weight else None
        # The writer thread's connection, held between batches (see _thread_transaction).
        self._thread_connection: Connection | None = None
        self.batches = 0  # committed or failed transactions, for tests and metrics
        self.jobs = 0
        self.inline_batches = 0  # of which committed on the event loop

    async def submit(self, job: Job) -> Result:
        """Queue ``job``; return its result once its batch has committed (or raise its error)."""
        if self._closed:
            raise WriterClosed(f"{self._name} writer is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        pending = _Pending(job, self._weight(job), loop, future)
        if pending.weight <= self._inline_max_weight and self._inline_loop in (None, loop):
            self._inline_loop = loop
            if not self._inline:
                loop.call_soon(self._commit_inline_later, loop, INLINE_WAIT_TURNS)
            self._inline.append(pending)
        else:
            self._to_thread([pending])
        result: Result = await future
        return result

    def _to_thread(self, batch: list[_Pending[Job]]) -> None:
        self._ensure_thread()
        for pending in batch:
            self._queue.put(pending)

    def close(self, timeout_seconds: float = 30.0) -> None:
        """Finish what is queued, then stop the thread (idempotent). Call it from the loop that
        submits (an app's shutdown) or once that loop has stopped."""
        waiting, self._inline = self._inline, []
        with self._start_lock:
            self._closed = True
            thread = self._thread
        if waiting:  # light jobs of the loop's last turn: their callback may never run now
            self._to_thread(waiting)
            thread = self._thread
        if thread is not None:
            self._queue.put(_STOP)
            thread.join(timeout_seconds)
        if self._inline_connection is not None:
            self._inline_connection.close()
            self._inline_connection = None

    def _ensure_thread(self) -> None:
        if self._thread is not None:
            return
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()

    # ----------------------------------------------------------------------------------------------
    # On the event loop

    def _commit_inline_later(self, loop: asyncio.AbstractEventLoop, turns: int) -> None:
        """Commit after ``turns`` more turns of the loop (no timer: an idle loop turns at once)."""
        if turns > 0:
            loop.call_soon(self._commit_inline_later, loop, turns - 1)
        else:
            self._commit_inline()

    def _commit_inline(self) -> None:
        """The light jobs of these turns of the loop, committed here unless the write lock is taken
        (one transaction: a few milliseconds at most, since each is light)."""
        batch, self._inline = self._inline, []
        if batch and not self._commit(batch, inline=True):
            self._to_thread(batch)

    # ----------------------------------------------------------------------------------------------
    # The writer thread

    def _run(self) -> None:
        stop = False
        while not stop:
            batch: list[_Pending[Job]] = []
            total = 0
            block = True  # wait for a first job; then take what is already queued, up to the weight
            while total < self._max_batch_weight:
                try:
                    pending = self._queue.get(block=block)
                except queue.Empty:
                    break
                if pending is _STOP:
                    stop = True
                    break
                batch.append(pending)
                total += pending.weight
                block = False
            if batch:
                self._commit(batch)
        self._drain_closed()
        self._drop_thread_connection()

    def _drain_closed(self) -> None:
        while True:
            try:
                pending = self._queue.get_nowait()
            except queue.Empty:
                return
            if pending is not _STOP:
                self._answer([pending], [WriterClosed(f"{self._name} writer is closed")])

    def _commit(self, batch: list[_Pending[Job]], *, inline: bool = False) -> bool:
        """Commit ``batch`` and answer its callers. ``inline``: on the event loop, never waiting for
        the write lock; False (nothing done) when it is taken."""
        started = time.perf_counter()
        try:
            jobs = [pending.job for pending in batch]
            outcomes = (
                self._transaction_on(self._inline_connection, jobs, wait=False)
                if inline
                else self._thread_transaction(jobs)
            )
        except WriteLockBusy:
            return False
        except Exception as exc:
            if len(batch) == 1 or _fails_every_job(exc):
                outcomes = [exc] * len(batch)
            elif inline:  # the thread retries it job by job, where waiting for the lock is allowed
                return False
            else:
                logger.warning(
                    "%s: a batch of %d jobs failed (%s); retrying them one by one",
                    self._name,
                    len(batch),
                    type(exc).__name__,
                )
                outcomes = [self._alone(pending.job) for pending in batch]
        if self._on_batch is not None:
            self._on_batch(len(batch), time.perf_counter() - started)
        if inline:
            self.inline_batches += 1
        self._answer(batch, outcomes, on_loop=inline)
        return True

    def _alone(self, job: Job) -> Outcome:
        try:
            return self._thread_transaction([job])[0]
        except Exception as exc:
            return exc

    def _thread_transaction(self, jobs: list[Job]) -> Sequence[Outcome]:
        """PostgreSQL: on the thread's own connection, held from batch to batch (no pool checkout and
        pre-ping per batch). A connection that died while idle (a database restart, an idle timeout)
        shows as a lost connection on the batch's first statement; the batch then runs once more on a
        new connection. A connection lost later in a batch (perhaps during COMMIT) also runs it once
        more; a job whose writes did commit is then answered as a repeat of itself (for ingest: its
        steps listed as ignored, stored once)."""
        if self._engine.dialect.name == "sqlite":  # no pre-ping to save; a checkout per batch as before
            return self._transaction_on(None, jobs, wait=True)
        for attempt in (1, 2):
            if self._thread_connection is None:
                self._thread_connection = self._engine.connect()
            try:
                return self._transaction_on(self._thread_connection, jobs, wait=True)
            except DBAPIError as exc:
                if not exc.connection_invalidated:
                    raise
                self._drop_thread_connection()
                if attempt == 2:
                    raise
                logger.warning("%s: the database connection was lost; running the batch again", self._name)
        raise AssertionError("unreachable")  # pragma: no cover

    def _drop_thread_connection(self) -> None:
        connection, self._thread_connection = self._thread_connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                connection.close()

    def _transaction_on(
        self, connection: Connection | None, jobs: list[Job], *, wait: bool
    ) -> Sequence[Outcome]:
        with UnitOfWork(self._engine, write=True, wait=wait, connection=connection) as uow:
            outcomes = self._process(uow.connection, jobs)
            if len(outcomes) != len(jobs):
                raise RuntimeError(f"{self._name}: {len(outcomes)} outcomes for {len(jobs)} jobs")
            uow.commit()
        return outcomes

    def _answer(
        self, batch: list[_Pending[Job]], outcomes: Sequence[Outcome], *, on_loop: bool = False
    ) -> None:
        self.batches += 1
        self.jobs += len(batch)
        for pending, outcome in zip(batch, outcomes, strict=True):
            if on_loop:  # the inline path, on the callers' loop
                _resolve(pending.future, outcome)
                continue
            # RuntimeError: that event loop has closed, so nobody is waiting any more.
            with contextlib.suppress(RuntimeError):
                pending.loop.call_soon_threadsafe(_resolve, pending.future, outcome)


def _fails_every_job(exc: Exception) -> bool:
    """Errors of the database rather than of a job: retrying job by job would only repeat them."""
    return isinstance(exc, OperationalError) or (isinstance(exc, DBAPIError) and exc.connection_invalidated)
