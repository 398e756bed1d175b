"""Add measurements: the write transaction of a batch of measurement requests.

The app's group-commit writer (:mod:`service.store.group_commit`) collects the requests that arrive
while a batch is in the database and hands the next ones to :func:`record_batch` in one transaction;
each request is answered once that transaction has committed. Inside it:

1. the runs are locked and the keys checked again (a key revoked since it was cached writes nothing:
   :class:`KeyRevoked`; a run deleted meanwhile, or another tenant's: :class:`RunNotFound`);
2. a (run, step) is stored once and the first write wins, across requests and within one (a repeat
   is listed in ``ignored_steps``); requests of one batch behave as if run one after the other;
3. each run's summary follows :meth:`service.domain.run.RunSummary.after`, its MFU histogram the
   batch's counts, and runs past the exact-series limit keep step buckets (``fleet.SeriesBin``).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from service.domain import fleet
from service.domain.run import SUMMARY_FIELDS, FreshMeasurements, NewMeasurement, RunSummary
from service.store import histograms as histograms_store
from service.store import ingest as ingest_store
from service.store import measurements as measurements_store
from service.store import records as records_store
from service.store import runs as run_store
from service.store import series as series_store
from service.store.pipeline import pipelined
from service.store.uow import Transaction
from service.usecases.errors import KeyRevoked, RunNotFound


@dataclass(frozen=True, slots=True)
class MeasurementJob:
    """One request's computed rows, waiting for the writer."""

    key_id: int
    tenant: str
    run_id: str
    #: The run as cached (its fields fixed at creation hold; the summary is read again under lock).
    run: records_store.RunRecord
    #: Value tuples in ``measurements_store.MEASUREMENT_COLUMNS`` order.
    values: list[tuple[Any, ...]]
    #: Their driver parameters (``measurements_store.measurement_parameters``), built before the write lock.
    parameters: measurements_store.MeasurementParameters


@dataclass(frozen=True, slots=True)
class Added:
    """What one request stored, and its run as committed."""

    run: records_store.RunRecord
    received: int
    stored: int
    ignored_steps: list[int]


# Where a value tuple (measurements_store.MEASUREMENT_COLUMNS order) holds what the summary and the series read.
_STEP = measurements_store.MEASUREMENT_COLUMNS.index("step")
_MEASURED_AT = measurements_store.MEASURED_AT
_TOKENS_PER_SECOND = measurements_store.MEASUREMENT_COLUMNS.index("tokens_per_second")
_MFU = measurements_store.MEASUREMENT_COLUMNS.index("mfu")
_SERIES_FIELDS = operator.itemgetter(_STEP, _MEASURED_AT, _MFU, _TOKENS_PER_SECOND)
_STEP_OF = operator.itemgetter(_STEP)
_MEASURED_AT_OF = operator.itemgetter(_MEASURED_AT)


def summary_after(
    run: records_store.RunRecord,
    fresh: Sequence[tuple[Any, ...]],
    histogram: dict[int, int],
    *,
    now: datetime,
) -> records_store.RunRecord:
    """The run record once ``fresh`` value tuples (of steps it did not have) are stored, given its MFU
    histogram with them counted (the rule: :meth:`RunSummary.after`)."""
    if not fresh:
        return run
    before = RunSummary(**{name: getattr(run, name) for name in SUMMARY_FIELDS})
    # Read from the value tuples directly (builtins over 10,000 rows a request, no object per row).
    top = max(fresh, key=_STEP_OF)
    after = before.after(
        FreshMeasurements(
            len(fresh),
            min(map(_MEASURED_AT_OF, fresh)),
            NewMeasurement(top[_STEP], top[_MEASURED_AT], top[_MFU], top[_TOKENS_PER_SECOND]),
        ),
        histogram,
    )
    changed = {name: getattr(after, name) for name in SUMMARY_FIELDS}
    if after.first_measured_at == before.first_measured_at:
        del changed["first_measured_at"]  # as read: its time zone too
    if after.latest_step == before.latest_step:
        for name in ("latest_step", "latest_measured_at", "latest_mfu", "latest_tokens_per_second"):
            del changed[name]
    return records_store.replace_run(run, {**changed, "updated_at": now})


@dataclass(slots=True)
class _RunInBatch:
    run: records_store.RunRecord  # as locked at the start of the batch
    steps: set[int] = field(default_factory=set)  # steps stored by earlier jobs of the batch
    fresh: list[tuple[Any, ...]] = field(default_factory=list)  # value tuples
    # Of the fresh rows, a part per job.
    parameters: list[measurements_store.MeasurementParameters] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Accepted:
    run_pk: int
    received: int
    stored: int
    ignored_steps: list[int]


def record_batch(transaction: Transaction, jobs: Sequence[MeasurementJob]) -> list[Added | Exception]:
    """Store a batch of requests in the caller's write transaction; one outcome per job, in order:
    :class:`Added`, or the exception of a job that stored nothing (:class:`KeyRevoked`,
    :class:`RunNotFound`)."""
    rows_per_run: dict[str, int] = {}
    for job in jobs:
        rows_per_run[job.run_id] = rows_per_run.get(job.run_id, 0) + len(job.values)
    locks = ingest_store.lock_for_ingest(
        transaction,
        key_ids=[job.key_id for job in jobs],
        run_ids=list(rows_per_run),
        # A run can outgrow the exact series in this batch only if it has more than this already.
        series_above=fleet.EXACT_SERIES_MAX - max(rows_per_run.values(), default=0),
    )
    batch: dict[int, _RunInBatch] = {}
    outcomes: list[_Accepted | Exception] = []
    for job in jobs:
        if job.key_id not in locks.active_key_ids:
            outcomes.append(KeyRevoked(job.key_id))
            continue
        locked = locks.runs.get(job.run_id)
        if locked is None or locked.tenant != job.tenant:
            outcomes.append(RunNotFound(job.run_id))
            continue
        state = batch.get(locked.pk)
        if state is None:
            state = batch[locked.pk] = _RunInBatch(locked.applied_to(job.run))
        outcomes.append(_take_new_steps(transaction, state, job))

    grown = {pk: state for pk, state in batch.items() if state.fresh}
    after = {pk: state.run for pk, state in batch.items()}
    if grown:
        counts = {pk: fleet.bin_counts(row[_MFU] for row in state.fresh) for pk, state in grown.items()}
        now = datetime.now(UTC)
        for pk, state in grown.items():
            # The run is locked: its histogram as read plus this batch's counts is what the upsert leaves.
            histogram = dict(locks.histograms.get(pk, {}))
            for mfu_bin, count in counts[pk].items():
                histogram[mfu_bin] = histogram.get(mfu_bin, 0) + count
            after[pk] = summary_after(state.run, state.fresh, histogram, now=now)
        long_runs = {
            pk: state for pk, state in grown.items() if after[pk].measurement_count > fleet.EXACT_SERIES_MAX
        }
        parameters = measurements_store.MeasurementParameters.joined(
            [part for state in grown.values() for part in state.parameters]
        )
        # The writes, sent together (a large batch's COPY cannot be), then the step buckets: their
        # rebuild reads the run's stored rows, these included.
        with pipelined(transaction, enabled=len(parameters) <= measurements_store.PIPELINED_ROWS_MAX):
            measurements_store.insert_measurements(transaction, parameters=parameters)
            histograms_store.add_to_run_histograms(transaction, counts=counts)
            run_store.update_summaries(transaction, summaries=[after[pk] for pk in grown])
            histograms_store.move_runs_in_histograms(
                transaction,
                moves=[(state.run, state.run.fleet_bin, after[pk].fleet_bin) for pk, state in grown.items()],
            )
        _write_series(transaction, long_runs, locks.series_extents)
    return [
        Added(after[outcome.run_pk], outcome.received, outcome.stored, outcome.ignored_steps)
        if isinstance(outcome, _Accepted)
        else outcome
        for outcome in outcomes
    ]


def _take_new_steps(transaction: Transaction, state: _RunInBatch, job: MeasurementJob) -> _Accepted:
    """Add the job's rows of steps neither stored nor taken by an earlier job of the batch."""
    run = state.run
    steps = [row[_STEP] for row in job.values]
    low, high = min(steps), max(steps)
    stored: set[int] = set()
    if run.latest_step is not None and low <= run.latest_step:
        stored = measurements_store.existing_steps(
            transaction, run_pk=run.pk, first=low, last=min(high, run.latest_step)
        )
    unique = set(steps)
    if not stored and len(unique) == len(steps) and state.steps.isdisjoint(unique):
        # The common case, decided with set operations: every row is new.
        state.steps |= unique
        state.fresh.extend(job.values)
        state.parameters.append(job.parameters)
        return _Accepted(run.pk, len(steps), len(steps), [])
    ignored: set[int] = set()
    taken: list[int] = []
    for index, step in enumerate(steps):
        if step in state.steps or step in stored:
            ignored.add(step)
            continue
        state.steps.add(step)
        taken.append(index)
    state.fresh.extend(job.values[index] for index in taken)
    state.parameters.append(job.parameters.rows_at(taken))
    return _Accepted(run.pk, len(job.values), len(taken), sorted(ignored))


def _write_series(
    transaction: Transaction, long_runs: dict[int, _RunInBatch], extents: dict[int, tuple[int, int, int]]
) -> None:
    """Update the stored step buckets (fleet.SeriesBin) of runs past the exact-series limit: built from
    the run's measurements when it first outgrows it (or has none yet: a run from before they were
    kept), then added to, and merged into wider buckets whenever the run's steps outgrow
    fleet.SERIES_BUCKETS_MAX buckets (so the width is always the smallest that holds its steps).
    ``extents``: (width, lowest, highest bucket) of those that have buckets."""
    additions: dict[int, tuple[int, list[fleet.SeriesBin]]] = {}
    for pk, state in sorted(long_runs.items()):
        steps = [row[_STEP] for row in state.fresh]
        extent = extents.get(pk)
        if extent is None:  # the rebuild reads every stored step, this batch's included
            first, last = measurements_store.step_range(transaction, run_pk=pk)
            series_store.rebuild_series(transaction, run_pk=pk, width=fleet.series_width(first, last))
            continue
        width, low, high = extent
        wider = fleet.series_width(
            min(low * width, min(steps)), max(high * width, max(steps)), at_least=width
        )
        fresh = fleet.series_bins(map(_SERIES_FIELDS, state.fresh), width=wider)
        if wider == width:
            additions[pk] = (width, fresh)
            continue
        _, stored_bins = series_store.run_series(transaction, run_pk=pk)
        bins = fleet.rebucket(
            [*fleet.rebucket(stored_bins, width=width, to_width=wider), *fresh], width=wider, to_width=wider
        )
        series_store.replace_series(transaction, run_pk=pk, width=wider, bins=bins)
    series_store.add_to_series(transaction, additions=additions)
