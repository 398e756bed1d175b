"""Measurement ingest: parse, compute each measurement's MFU, and store it with the run's summary.

The path of one request (``MeasurementIngest.add``):

1. The body is validated straight from its JSON bytes (one object or a list of up to
   ``max_measurements_per_request``; all or nothing: the first invalid item is a 422 naming it).
2. The run's compute facts (FLOPs per token, part and peak, device count, sequence length) come from a
   process-local cache or one read. They never change after creation, so a cached copy is exact.
3. Every item's tokens/s, MFU, HFU, TFLOP/s per device are computed (the domain's ``compute_mfu``;
   an MFU above 1 is a 422 that stores nothing).
4. The rows go to the app's group-commit writer (``service.store.group_commit``), which commits the
   jobs queued meanwhile in one transaction (:func:`commit_batch`) and answers each after the commit.
   Inside that transaction the key is checked again (a key revoked since it was cached writes nothing:
   401) and the run is locked and read again (deleted meanwhile: 404).

Small bodies are handled on the event loop; larger ones (``INLINE_BODY_BYTES``) are parsed and computed
in the threadpool so that a 10,000-item request never stalls the loop, and the largest
(``HELPER_BODY_BYTES``) in the app's helper process when it has one, so that they use a second core
(see ``MeasurementIngest``; the rows come back as driver parameters and are committed here).

Repeated steps: a (run, step) is stored once and the first write wins, across requests and within one;
a repeat is listed in ``ignored_steps``. Requests committed in one batch behave as if run one after the
other in arrival order; each answer's summary is the run's as committed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import operator
import os
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import AbstractAsyncContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache, partial
from typing import Annotated, Any, TypeVar

import psycopg
from pydantic import Field, TypeAdapter, ValidationError
from sqlalchemy import Connection, Engine
from starlette.concurrency import run_in_threadpool

from service.api.problems import NOT_FOUND, VALIDATION_ERROR, ProblemError, invalid_api_key
from service.api.resolve import resolve_accelerator, with_field_prefix
from service.api.schemas.common import HardwareRef
from service.api.schemas.runs import MeasurementItem, MeasurementsAdded
from service.api.services.runs import not_found, now_utc, run_summary
from service.domain import fleet, hardware, mfu
from service.domain.errors import DomainError
from service.observability import INGEST_LARGE_BODIES, observe_ingest_batch
from service.store import ingest as ingest_store
from service.store import runs as store
from service.store.group_commit import AsyncGroupCommitWriter, GroupCommitWriter
from service.store.keys import Principal
from service.store.uow import UnitOfWork
from service.usecases.helper_processes import helper_pool

logger = logging.getLogger(__name__)

MAX_REPORTED_ERRORS = 20
Result = TypeVar("Result")
#: Bodies above this are parsed and computed in the threadpool rather than on the event loop
#: (~1 ms of work at 100 items).
INLINE_BODY_BYTES = 32 * 1024
#: Bodies above this (~2,000 items) are parsed and computed in the app's helper process, when it has
#: one (see MeasurementIngest).
HELPER_BODY_BYTES = 256 * 1024
#: Rows per group-commit transaction at most (a batch always takes at least one whole request).
#: Batching pays off for small requests (a transaction's fixed cost shared); a large request gains
#: nothing from company, and merging four 10,000-row requests made their parsing and their writing
#: alternate instead of overlapping (bulk ingest 79k against 100k+ measurements/s when one a batch).
MAX_BATCH_ROWS = 2_000
#: Requests of up to this many rows are committed on the event loop, in batches of one loop turn's
#: requests, on SQLite (group_commit's inline batches: ~40 µs a row there, so at most a few ms of loop).
INLINE_COMMIT_ROWS = 64
#: Runs whose compute facts are cached per process.
RUN_CACHE_ENTRIES = 4096


# --------------------------------------------------------------------------------------------------
# Parse and compute


@lru_cache(maxsize=8)
def _adapters(max_items: int) -> tuple[TypeAdapter[Any], TypeAdapter[Any]]:
    many: TypeAdapter[Any] = TypeAdapter(
        Annotated[list[MeasurementItem], Field(min_length=1, max_length=max_items)]
    )
    one: TypeAdapter[Any] = TypeAdapter(MeasurementItem)
    return many, one


def _error_field(loc: Sequence[Any], is_list: bool) -> str:
    parts = list(loc)
    path = "body"
    if is_list and parts and isinstance(parts[0], int):
        path = f"body[{parts[0]}]"
        parts = parts[1:]
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def parse_measurements(body: bytes, *, max_items: int) -> list[dict[str, Any]]:
    """One measurement object or a list of them, validated straight from the raw JSON (pydantic's
    Rust parser; FastAPI's default path would build the Python objects twice)."""
    many, one = _adapters(max_items)
    is_list = body.lstrip()[:1] != b"{"
    try:
        parsed = many.validate_json(body) if is_list else [one.validate_json(body)]
    except ValidationError as exc:
        errors = []
        for error in exc.errors(include_url=False)[:MAX_REPORTED_ERRORS]:
            message = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
            errors.append(
                {"field": _error_field(error["loc"], is_list), "message": message, "code": error["type"]}
            )
        detail = f"{errors[0]['field']}: {errors[0]['message']}"
        if exc.error_count() > 1:
            detail += f" (and {exc.error_count() - 1} more; nothing was stored)"
        raise ProblemError(VALIDATION_ERROR, detail, errors=errors) from None
    return parsed


#: The rate forms, in the order a throughput is read (validated: exactly one form is given).
_RATE_FORMS: dict[
    str, type[mfu.GlobalTokensPerSecond | mfu.TokensPerSecondPerDevice | mfu.SamplesPerSecond]
] = {
    "tokens_per_second": mfu.GlobalTokensPerSecond,
    "tokens_per_second_per_device": mfu.TokensPerSecondPerDevice,
    "sequences_per_second": mfu.SamplesPerSecond,
}


def _sent_form(throughput: dict[str, Any]) -> tuple[str, float]:
    """The form sent and its value."""
    for form in _RATE_FORMS:
        value = throughput.get(form)
        if value is not None:
            return form, value
    return "step_time_seconds", throughput["step_time_seconds"]


def _domain_throughput(throughput: dict[str, Any]) -> mfu.Throughput:
    """The domain's throughput for the one sent."""
    form, value = _sent_form(throughput)
    if form == "step_time_seconds":
        return mfu.StepTime(
            value,
            global_batch_tokens=throughput.get("global_batch_tokens"),
            global_batch_sequences=throughput.get("global_batch_sequences"),
        )
    return _RATE_FORMS[form](value)


def run_accelerator(run: store.RunRecord) -> hardware.Accelerator:
    """The run's part as resolved at creation, with the peak stored then: a later catalog change
    never changes the MFU of the run's later measurements."""
    stored_peak: dict[str, Any] = {f"{run.precision}_tflops": run.peak_tflops_per_device}
    try:
        part = resolve_accelerator(HardwareRef.model_validate(run.spec["hardware"]))
    except DomainError:  # no longer in the catalog
        return hardware.custom_accelerator(
            name=run.accelerator_name, peak_tflops={run.precision: run.peak_tflops_per_device}
        )
    return dataclasses.replace(part, **stored_peak)


# Where a measurement value tuple (store.MEASUREMENT_COLUMNS order) holds what the summary reads.
_STEP = store.MEASUREMENT_COLUMNS.index("step")
_MEASURED_AT = store.MEASURED_AT
_TOKENS_PER_SECOND = store.MEASUREMENT_COLUMNS.index("tokens_per_second")
_MFU = store.MEASUREMENT_COLUMNS.index("mfu")
#: A value tuple's (step, time, MFU, tokens/s): what fleet.series_bins sums.
_SERIES_FIELDS = operator.itemgetter(_STEP, _MEASURED_AT, _MFU, _TOKENS_PER_SECOND)
if store.MEASUREMENT_COLUMNS != (
    "run_pk",
    "step",
    "measured_at",
    "throughput_form",
    "throughput_value",
    "global_batch_tokens",
    "global_batch_sequences",
    "tokens_per_second",
    "tokens_per_second_per_device",
    "mfu",
    "hfu",
    "achieved_tflops_per_device",
    "loss",
    "memory_bytes",
    "grad_norm_sq_small",
    "grad_norm_sq_big",
    "batch_small_tokens",
    "batch_big_tokens",
):  # measurement_values builds its tuples in this order
    raise RuntimeError("the measurements table's columns changed: update measurement_values")


def measurement_values(
    run: store.RunRecord,
    items: list[dict[str, Any]],
    *,
    now: datetime,
    accelerator: hardware.Accelerator | None = None,
) -> list[tuple[Any, ...]]:
    """Value tuples for the measurements table (``store.MEASUREMENT_COLUMNS`` order): each item's
    global tokens/s (the domain's normalisation), then MFU, HFU, achieved TFLOP/s and tokens/s per
    device as that rate times per-(token/s) factors taken from the domain's compute_mfu of the first
    item: one multiply per value, one formula."""
    if accelerator is None:
        accelerator = run_accelerator(run)
    device_count = run.device_count
    seq_len = run.seq_len_tokens

    def full(throughput: mfu.Throughput) -> mfu.MfuResult:
        return mfu.compute_mfu(
            model_flops_per_token=run.model_flops_per_token,
            hardware_flops_per_token=run.hardware_flops_per_token,
            accelerator=accelerator,
            device_count=device_count,
            precision=run.precision,  # type: ignore[arg-type]
            throughput=throughput,
            seq_len_tokens=seq_len,
            convention=run.convention,
        )

    # The first item through the domain in full; its answer gives the per-(token/s) factors, since MFU,
    # HFU, achieved TFLOP/s and tokens/s per device are all proportional to the global rate.
    first = with_field_prefix("body[0]", lambda: full(_domain_throughput(items[0]["throughput"])))
    mfu_per = first.mfu / first.tokens_per_second
    hfu_per = first.hfu / first.tokens_per_second
    tflops_per = first.achieved_tflops_per_device / first.tokens_per_second
    per_device = first.tokens_per_second_per_device / first.tokens_per_second
    lowest = mfu.MIN_PLAUSIBLE_MFU
    # Each item's global tokens/s from the domain's scale of its form (and batch): one per distinct
    # (form, batch) in the request, then a multiply or a divide per item (mfu.global_rate_scale).
    scales: dict[tuple[str, int | None, int | None], tuple[float, bool]] = {}
    values: list[tuple[Any, ...]] = []
    run_pk = run.pk
    for index, item in enumerate(items):
        throughput = item["throughput"]
        if len(throughput) == 1:  # a rate form, alone (as validated)
            ((form, value),) = throughput.items()
            batch_tokens = batch_sequences = None
        else:
            form, value = _sent_form(throughput)
            batch_tokens = throughput.get("global_batch_tokens")
            batch_sequences = throughput.get("global_batch_sequences")
        scale_key = (form, batch_tokens, batch_sequences)
        scaled = scales.get(scale_key)
        if scaled is None:
            try:
                scaled = mfu.global_rate_scale(
                    _domain_throughput(throughput), device_count=device_count, seq_len_tokens=seq_len
                )
            except DomainError as exc:
                exc.field = f"body[{index}].{exc.field or 'throughput'}"
                raise
            scales[scale_key] = scaled
        scale, inverse = scaled
        rate = scale / value if inverse else value * scale
        value_mfu = rate * mfu_per
        value_hfu = rate * hfu_per
        if not (lowest <= value_mfu <= 1.0 and value_hfu <= 1.0):
            # Outside what the domain accepts: it explains why (likely causes, corrected values).
            with_field_prefix(f"body[{index}]", partial(full, _domain_throughput(throughput)))
        get = item.get
        values.append(
            (
                run_pk,
                item["step"],
                get("time") or now,
                form,
                value,
                batch_tokens,
                batch_sequences,
                rate,
                rate * per_device,
                value_mfu,
                value_hfu,
                rate * tflops_per,
                get("loss"),
                get("memory_bytes"),
                get("grad_norm_sq_small"),
                get("grad_norm_sq_big"),
                get("batch_small_tokens"),
                get("batch_big_tokens"),
            )
        )
    return values


def measurement_rows(
    run: store.RunRecord,
    items: list[dict[str, Any]],
    *,
    now: datetime,
    accelerator: hardware.Accelerator | None = None,
) -> list[dict[str, Any]]:
    """:func:`measurement_values` as dicts by column name (for callers that patch or read columns)."""
    columns = store.MEASUREMENT_COLUMNS
    return [
        dict(zip(columns, row, strict=True))
        for row in measurement_values(run, items, now=now, accelerator=accelerator)
    ]


_gc_lock = threading.Lock()
_gc_pausers = 0
_gc_paused_here = False


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Hold off the cyclic garbage collector while a large batch is parsed and its rows computed.

    A 10,000-item request keeps ~50,000 container objects alive at once; each time that many
    survive, CPython runs a full collection over the whole heap (measured: ~40% of an ingest
    request). They hold no cycles and are freed by reference counting when the request ends, so the
    pause loses nothing. Nested and concurrent pauses are counted; a collector someone else disabled
    is left disabled.
    """
    global _gc_pausers, _gc_paused_here
    with _gc_lock:
        if _gc_pausers == 0 and gc.isenabled():
            gc.disable()
            _gc_paused_here = True
        _gc_pausers += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pausers -= 1
            if _gc_pausers == 0 and _gc_paused_here:
                _gc_paused_here = False
                gc.enable()


# --------------------------------------------------------------------------------------------------
# In the helper process


def prepare_parameters(
    run: store.RunRecord,
    accelerator: hardware.Accelerator,
    body: bytes,
    *,
    max_items: int,
    dialect_name: str,
    now: datetime,
) -> list[tuple[Any, ...]] | None:
    """The driver parameters the server would compute for a body, computed in the helper process
    (the server makes the value tuples back from them: store.measurement_values_from_parameters).
    None for a body that fails: the server then does the work itself and raises the error as usual
    (the exceptions do not survive pickling, and a bad body is the rare case)."""
    with cyclic_gc_paused():
        try:
            items = parse_measurements(body, max_items=max_items)
            values = measurement_values(run, items, now=now, accelerator=accelerator)
        except (ProblemError, DomainError):
            return None
        del items
        return store.measurement_parameters(store.dialect_named(dialect_name), values)


def _usable_cores() -> int:
    """Cores this process may run on (its affinity where the platform tells it, as in a container
    limited to some cores)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _helper_warmed_up() -> bool:
    """Run once in a new helper: by then it has imported this module (and the service with it)."""
    return True


# --------------------------------------------------------------------------------------------------
# The run summary after new measurements


def summary_after(
    run: store.RunRecord, fresh: Sequence[tuple[Any, ...]], histogram: dict[int, int], *, now: datetime
) -> store.RunRecord:
    """The run as it reads once ``fresh`` measurements (value tuples of steps it did not have) are
    stored, given its MFU histogram with them counted: count, median (from the histogram) and its
    fleet bin, first time, and the latest_* fields from the highest step (a late lower step does not
    move them)."""
    if not fresh:
        return run
    median = fleet.percentile_from_histogram(histogram, 0.5)
    if median is None:
        raise ValueError("the run's histogram is empty after adding measurements")
    values: dict[str, Any] = {
        "measurement_count": run.measurement_count + len(fresh),
        "median_mfu": median,
        "fleet_bin": fleet.mfu_bin(median),
        "updated_at": now,
    }
    first_time = min(row[_MEASURED_AT] for row in fresh)
    if run.first_measured_at is None or first_time < run.first_measured_at:
        values["first_measured_at"] = first_time.astimezone(UTC)  # as the stored summary reads
    top = max(fresh, key=operator.itemgetter(_STEP))
    if run.latest_step is None or top[_STEP] > run.latest_step:
        values.update(
            latest_step=top[_STEP],
            latest_measured_at=top[_MEASURED_AT].astimezone(UTC),
            latest_mfu=top[_MFU],
            latest_tokens_per_second=top[_TOKENS_PER_SECOND],
        )
    return store.replace_run(run, values)


# --------------------------------------------------------------------------------------------------
# One transaction for a batch of requests


@dataclass(frozen=True, slots=True)
class IngestJob:
    """One request's computed rows, waiting for the writer."""

    key_id: int
    tenant: str
    run_id: str
    #: The run as cached (its fields fixed at creation hold; the summary is read again under lock).
    run: store.RunRecord
    #: Value tuples, store.MEASUREMENT_COLUMNS order (measurement_values).
    values: list[tuple[Any, ...]]
    #: Their driver parameters (store.measurement_parameters), built before the write lock.
    parameters: list[tuple[Any, ...]]


@dataclass(slots=True)
class _RunInBatch:
    run: store.RunRecord  # as locked at the start of the batch
    steps: set[int] = field(default_factory=set)  # steps stored by earlier jobs of the batch
    fresh: list[tuple[Any, ...]] = field(default_factory=list)  # value tuples
    parameters: list[tuple[Any, ...]] = field(default_factory=list)  # of the fresh rows


@dataclass(frozen=True, slots=True)
class _Accepted:
    run_pk: int
    received: int
    stored: int
    ignored_steps: list[int]


@dataclass(frozen=True, slots=True)
class _Lock:
    """Read: lock the batch's runs and check its keys (store.ingest.lock_for_ingest)."""

    key_ids: list[int]
    run_ids: list[str]
    series_above: int


@dataclass(frozen=True, slots=True)
class _ExistingSteps:
    """Read: which of a run's steps in [first, last] are stored (store.existing_steps)."""

    run_pk: int
    first: int
    last: int


@dataclass(frozen=True, slots=True)
class _StepRange:
    """Read: a run's lowest and highest stored step (store.step_range)."""

    run_pk: int


@dataclass(frozen=True, slots=True)
class _RunSeries:
    """Read: a run's stored step buckets (store.run_series)."""

    run_pk: int


#: What a batch asks of the database, in turn (see _batch_steps).
_Io = _Lock | _ExistingSteps | _StepRange | _RunSeries | ingest_store.IngestWrites


def commit_batch(connection: Connection, jobs: Sequence[IngestJob]) -> list[Any]:
    """Store a batch of requests in the caller's write transaction; one outcome per job: its
    ``MeasurementsAdded``, or a ``ProblemError`` (revoked key: 401; run gone or another tenant's: 404)
    for a job that stored nothing. Jobs are applied in order, so the first write of a step wins.
    The reads and the writes are one call each (``service.store.ingest``); only repeated steps and a
    run's step buckets being built or widened read in between."""
    steps = _batch_steps(jobs)
    answer: Any = None
    while True:
        try:
            request = steps.send(answer)
        except StopIteration as done:
            outcomes: list[Any] = done.value
            return outcomes
        if isinstance(request, _Lock):
            answer = ingest_store.lock_for_ingest(
                connection,
                key_ids=request.key_ids,
                run_ids=request.run_ids,
                series_above=request.series_above,
            )
        elif isinstance(request, _ExistingSteps):
            answer = store.existing_steps(
                connection, run_pk=request.run_pk, first=request.first, last=request.last
            )
        elif isinstance(request, _StepRange):
            answer = store.step_range(connection, run_pk=request.run_pk)
        elif isinstance(request, _RunSeries):
            answer = store.run_series(connection, run_pk=request.run_pk)
        else:
            ingest_store.write_ingest(connection, request)
            answer = None


async def commit_batch_async(
    connection: psycopg.AsyncConnection[Any], jobs: Sequence[IngestJob]
) -> list[Any]:
    """:func:`commit_batch` on the event loop's PostgreSQL connection, for the common batch (its
    lock and its writes); anything else raises ``NeedsWriterThread`` before writing, and the batch goes
    to the writer thread (service.store.group_commit.AsyncGroupCommitWriter)."""
    steps = _batch_steps(jobs)
    answer: Any = None
    while True:
        try:
            request = steps.send(answer)
        except StopIteration as done:
            outcomes: list[Any] = done.value
            return outcomes
        if isinstance(request, _Lock):
            # The loop's writer connection is in autocommit mode: the lock begins the transaction and
            # the writes commit it, each in its pipeline (two waits a batch).
            answer = await ingest_store.lock_for_ingest_async(
                connection,
                key_ids=request.key_ids,
                run_ids=request.run_ids,
                series_above=request.series_above,
                begin=True,
            )
        elif isinstance(request, ingest_store.IngestWrites):
            await ingest_store.write_ingest_async(connection, request, commit=True)
            answer = None
        else:
            raise ingest_store.NeedsWriterThread


def _batch_steps(jobs: Sequence[IngestJob]) -> Generator[_Io, Any, list[Any]]:
    """The batch's logic, apart from how it reaches the database: it yields each read or the writes
    (``_Io``) and is sent the answer, so that the thread's writer and the event loop's share it."""
    rows_per_run: dict[str, int] = {}
    for job in jobs:
        rows_per_run[job.run_id] = rows_per_run.get(job.run_id, 0) + len(job.values)
    locks: ingest_store.LockedForIngest = yield _Lock(
        key_ids=[job.key_id for job in jobs],
        run_ids=list(rows_per_run),
        # A run can outgrow the exact series in this batch only if it has more than this already.
        series_above=fleet.EXACT_SERIES_MAX - max(rows_per_run.values(), default=0),
    )
    batch: dict[int, _RunInBatch] = {}
    outcomes: list[Any] = []
    for job in jobs:
        if job.key_id not in locks.active_key_ids:
            outcomes.append(invalid_api_key())
            continue
        locked = locks.runs.get(job.run_id)
        if locked is None or locked.tenant != job.tenant:
            outcomes.append(not_found(job.run_id))
            continue
        state = batch.get(locked.pk)
        if state is None:
            state = batch[locked.pk] = _RunInBatch(locked.applied_to(job.run))
        run = state.run
        steps = [row[_STEP] for row in job.values]
        low, high = min(steps), max(steps)
        stored: set[int] = set()
        if run.latest_step is not None and low <= run.latest_step:
            stored = yield _ExistingSteps(run.pk, low, min(high, run.latest_step))
        unique = set(steps)
        if not stored and len(unique) == len(steps) and state.steps.isdisjoint(unique):
            # The common case, decided with set operations: every row is new.
            state.steps |= unique
            state.fresh.extend(job.values)
            state.parameters.extend(job.parameters)
            outcomes.append(_Accepted(run.pk, len(steps), len(steps), []))
            continue
        ignored: set[int] = set()
        taken: list[int] = []
        for index, step in enumerate(steps):
            if step in state.steps or step in stored:
                ignored.add(step)
                continue
            state.steps.add(step)
            taken.append(index)
        state.fresh.extend(job.values[index] for index in taken)
        state.parameters.extend(job.parameters[index] for index in taken)
        outcomes.append(_Accepted(run.pk, len(job.values), len(taken), sorted(ignored)))

    grown = {pk: state for pk, state in batch.items() if state.fresh}
    after = {pk: state.run for pk, state in batch.items()}
    if grown:
        counts = {pk: fleet.bin_counts(row[_MFU] for row in state.fresh) for pk, state in grown.items()}
        now = now_utc()
        for pk, state in grown.items():
            # The run is locked: its histogram as read plus this batch's counts is what the upsert leaves.
            histogram = dict(locks.histograms.get(pk, {}))
            for mfu_bin, count in counts[pk].items():
                histogram[mfu_bin] = histogram.get(mfu_bin, 0) + count
            after[pk] = summary_after(state.run, state.fresh, histogram, now=now)
        long_runs = {
            pk: state for pk, state in grown.items() if after[pk].measurement_count > fleet.EXACT_SERIES_MAX
        }
        series = yield from _series_writes(long_runs, locks.series_extents)
        yield (
            ingest_store.IngestWrites(
                measurements=[values for state in grown.values() for values in state.parameters],
                histogram_counts=counts,
                summaries=[after[pk] for pk in grown],
                moves=[(state.run, state.run.fleet_bin, after[pk].fleet_bin) for pk, state in grown.items()],
                **series,
            )
        )

    return [
        MeasurementsAdded(
            run_id=after[outcome.run_pk].id,
            received=outcome.received,
            stored=outcome.stored,
            ignored_steps=outcome.ignored_steps,
            summary=run_summary(after[outcome.run_pk]),
        )
        if isinstance(outcome, _Accepted)
        else outcome
        for outcome in outcomes
    ]


def _series_writes(
    long_runs: dict[int, _RunInBatch], extents: dict[int, tuple[int, int, int]]
) -> Generator[_Io, Any, dict[str, Any]]:
    """How the stored step buckets (fleet.SeriesBin) of runs past the exact-series limit change: built
    from the run's measurements when it first outgrows it (or has none yet: a run from before they were
    kept), then added to, and merged into wider buckets whenever the run's steps outgrow
    fleet.SERIES_BUCKETS_MAX buckets (so the width is always the smallest that holds its steps).
    ``extents``: (width, lowest, highest bucket) of those that have buckets. Reads only in the rare
    cases (a first build, a wider width); the writes are ``IngestWrites``' series fields."""
    rebuilds: dict[int, int] = {}
    replacements: dict[int, tuple[int, list[fleet.SeriesBin]]] = {}
    additions: dict[int, tuple[int, list[fleet.SeriesBin]]] = {}
    for pk, state in long_runs.items():
        steps = [row[_STEP] for row in state.fresh]
        extent = extents.get(pk)
        if extent is None:
            first, last = min(steps), max(steps)
            if state.run.measurement_count:  # its stored steps count too (the rebuild reads them all)
                stored_first, stored_last = yield _StepRange(pk)
                first, last = min(first, stored_first), max(last, stored_last)
            rebuilds[pk] = fleet.series_width(first, last)
            continue
        width, low, high = extent
        wider = fleet.series_width(
            min(low * width, min(steps)), max(high * width, max(steps)), at_least=width
        )
        fresh = fleet.series_bins(map(_SERIES_FIELDS, state.fresh), width=wider)
        if wider == width:
            additions[pk] = (width, fresh)
            continue
        _, stored_bins = yield _RunSeries(pk)
        replacements[pk] = (
            wider,
            fleet.rebucket(
                [*fleet.rebucket(stored_bins, width=width, to_width=wider), *fresh],
                width=wider,
                to_width=wider,
            ),
        )
    return {"series_rebuilds": rebuilds, "series_replacements": replacements, "series_additions": additions}


# --------------------------------------------------------------------------------------------------
# The pipeline of one app


@dataclass(frozen=True, slots=True)
class _RunFacts:
    run: store.RunRecord  # only its fields fixed at creation are used
    accelerator: hardware.Accelerator


class MeasurementIngest:
    """Caches and the group-commit writer of one app (one per process; closed at shutdown).

    ``admission`` (the app's bound on requests holding connections, an ``asyncio.Semaphore``) is
    entered around each database read made on a cache miss; ``on_revoked_key`` is told the id of a
    key the write transaction found revoked, so the principal cache can drop it.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        admission: AbstractAsyncContextManager[Any] | None = None,
        on_revoked_key: Callable[[int], None] = lambda _key_id: None,
        max_batch_rows: int = MAX_BATCH_ROWS,
        helper_process: bool = True,
    ) -> None:
        self._engine = engine
        # The helper process (started on the first large body; used once it has started, meanwhile
        # the work is done here), on a machine with more than one core.
        self._helper_wanted = helper_process and _usable_cores() > 1
        self._helper: ProcessPoolExecutor | None = None
        self._helper_ready = False
        self._helper_lock = threading.Lock()
        self._admission = admission
        self._on_revoked_key = on_revoked_key
        self._runs: dict[tuple[str, str], _RunFacts] = {}
        self.writer: GroupCommitWriter[IngestJob, MeasurementsAdded] = GroupCommitWriter(
            engine,
            commit_batch,
            weight=lambda job: len(job.values),
            max_batch_weight=max_batch_rows,
            name="measurement-ingest",
            on_batch=observe_ingest_batch,
            inline_max_weight=INLINE_COMMIT_ROWS,
        )
        # PostgreSQL: the common batches are committed on the event loop (see AsyncGroupCommitWriter),
        # the rest by the thread's writer.
        self.loop_writer: AsyncGroupCommitWriter[IngestJob, MeasurementsAdded] | None = None
        if engine.dialect.name == "postgresql":
            self.loop_writer = AsyncGroupCommitWriter(
                engine.url.set(drivername="postgresql").render_as_string(hide_password=False),
                commit_batch_async,
                fallback=self.writer,
                weight=lambda job: len(job.values),
                max_batch_weight=max_batch_rows,
                name="measurement-ingest-loop",
                on_batch=observe_ingest_batch,
                routine=(ingest_store.NeedsWriterThread,),
                # Three batches in the database at once: while one waits for its answers, the next
                # form and start (one-measurement POSTs at 16 connections, 2-core Xeon: 2,200-2,270
                # requests/s with one lane, 2,470-2,520 with two. With the libpq pipeline, 2-core
                # EPYC, two against three in turn, 2 x 6 s each: 1,270-1,536 with two, 1,457-1,743
                # with three, the trivial POST alike).
                lanes=3,
                session_settings=ingest_store.PG_SESSION_SETTINGS,
                replan_seconds=ingest_store.PG_REPLAN_SECONDS,
            )

    async def aclose(self) -> None:
        """Close at shutdown, on the event loop: the loop's writer first (what it holds goes to the
        thread), then the thread's."""
        if self.loop_writer is not None:
            await self.loop_writer.aclose()
        self.close()

    def close(self) -> None:
        self.writer.close()
        with self._helper_lock:
            helper, self._helper = self._helper, None
        if helper is not None:
            helper.shutdown(wait=True, cancel_futures=True)

    async def add(
        self, *, principal: Principal, run_id: str, body: bytes, max_items: int
    ) -> MeasurementsAdded:
        tenant = principal.tenant
        if len(body) > HELPER_BODY_BYTES:
            job = await self._job_in_helper(principal, run_id, body, max_items)
            INGEST_LARGE_BODIES.labels("server" if job is None else "helper").inc()
            if job is not None:
                return await self._submit(principal, run_id, job)
        inline = len(body) <= INLINE_BODY_BYTES
        if inline:
            items = parse_measurements(body, max_items=max_items)
        else:
            items = await run_in_threadpool(_gc_paused, parse_measurements, body, max_items=max_items)
        facts = self._runs.get((tenant, run_id))
        if facts is None:
            facts = await self._read_run(tenant, run_id)
        if inline:
            job = self._job(principal, run_id, facts, items)
        else:
            job = await run_in_threadpool(_gc_paused, self._job, principal, run_id, facts, items)
        del items
        return await self._submit(principal, run_id, job)

    async def _submit(self, principal: Principal, run_id: str, job: IngestJob) -> MeasurementsAdded:
        try:
            if self.loop_writer is not None and len(job.values) <= ingest_store.PIPELINED_INSERT_ROWS:
                return await self.loop_writer.submit(job)
            return await self.writer.submit(job)
        except ProblemError as exc:
            if exc.kind.status == 401:
                self._on_revoked_key(principal.key_id)
            elif exc.kind is NOT_FOUND:
                self._runs.pop((principal.tenant, run_id), None)
            raise

    async def _job_in_helper(
        self, principal: Principal, run_id: str, body: bytes, max_items: int
    ) -> IngestJob | None:
        """The job computed in the helper process; None when there is no helper ready, the run is
        unknown (the caller answers: a bad body before an unknown run, as always) or the body fails."""
        helper = self._ready_helper()
        if helper is None:
            return None
        facts = self._runs.get((principal.tenant, run_id))
        if facts is None:
            try:
                facts = await self._read_run(principal.tenant, run_id)
            except ProblemError:
                return None
        try:
            parameters = await asyncio.wrap_future(
                helper.submit(
                    prepare_parameters,
                    facts.run,
                    facts.accelerator,
                    body,
                    max_items=max_items,
                    dialect_name=self._engine.dialect.name,
                    now=now_utc(),
                )
            )
        except BrokenProcessPool:
            logger.warning("the ingest helper process died; parsing in the server process until it restarts")
            with self._helper_lock:
                if self._helper is helper:
                    self._helper, self._helper_ready = None, False
            helper.shutdown(wait=False, cancel_futures=True)
            return None
        if parameters is None:
            return None
        values = await run_in_threadpool(
            _gc_paused, store.measurement_values_from_parameters, self._engine.dialect, parameters
        )
        return IngestJob(principal.key_id, principal.tenant, run_id, facts.run, values, parameters)

    @property
    def helper_ready(self) -> bool:
        """Whether large bodies go to the helper process now (it has started)."""
        return self._helper is not None and self._helper_ready

    def _ready_helper(self) -> ProcessPoolExecutor | None:
        if not self._helper_wanted:
            return None
        with self._helper_lock:
            if self._helper is None:
                helper = self._helper = helper_pool()
                helper.submit(_helper_warmed_up).add_done_callback(partial(self._helper_started, helper))
            return self._helper if self._helper_ready else None

    def _helper_started(self, helper: ProcessPoolExecutor, warm_up: Future[bool]) -> None:
        with self._helper_lock:
            if self._helper is helper and not warm_up.cancelled() and warm_up.exception() is None:
                self._helper_ready = True

    def _job(
        self, principal: Principal, run_id: str, facts: _RunFacts, items: list[dict[str, Any]]
    ) -> IngestJob:
        values = measurement_values(facts.run, items, now=now_utc(), accelerator=facts.accelerator)
        parameters = store.measurement_parameters(self._engine.dialect, values)
        return IngestJob(principal.key_id, principal.tenant, run_id, facts.run, values, parameters)

    async def _read_run(self, tenant: str, run_id: str) -> _RunFacts:
        async with self._admission or nullcontext():
            run = await run_in_threadpool(self._fetch_run, tenant, run_id)
        if run is None:
            raise not_found(run_id)
        facts = _RunFacts(run, run_accelerator(run))
        if len(self._runs) >= RUN_CACHE_ENTRIES:
            self._runs.clear()
        self._runs[(tenant, run_id)] = facts
        return facts

    def _fetch_run(self, tenant: str, run_id: str) -> store.RunRecord | None:
        with UnitOfWork(self._engine, write=False) as uow:
            return store.get_run(uow.connection, tenant=tenant, run_id=run_id, with_tags=False)


def _gc_paused(function: Callable[..., Result], *args: Any, **kwargs: Any) -> Result:
    """``function`` with the cyclic collector paused (see cyclic_gc_paused). Only around the CPU-bound
    parts: a pause held across the wait for the writer overlapped from request to request under
    sustained bulk load, so the collector would never have run."""
    with cyclic_gc_paused():
        return function(*args, **kwargs)
