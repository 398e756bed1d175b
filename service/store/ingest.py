"""The measurement-ingest transaction's statements (the batch's logic: ``service.usecases.measurements``).

A batch reads under lock (:func:`lock_for_ingest`: which keys are still active, the runs locked, their
MFU histograms and step buckets, in two statements), decides in Python what to store, then writes
(:func:`write_ingest`: the measurements, the runs' histograms and summaries, the tenant and fleet
histograms, the step buckets). The histogram is not read back after the upsert: the run is locked, so
the histogram read with the lock plus the batch's counts is what the upsert leaves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    CompoundSelect,
    Connection,
    Integer,
    Select,
    any_,
    bindparam,
    cast,
    func,
    literal_column,
    select,
    union_all,
)

from service.domain.fleet import SeriesBin
from service.store import histograms as histograms_store
from service.store import measurements as measurements_store
from service.store import records as records_store
from service.store import runs as run_store
from service.store import series as series_store
from service.store.tables import (
    api_keys,
    run_mfu_bins,
    run_series_bins,
    runs,
)

# --------------------------------------------------------------------------------------------------
# Reads, under lock


@dataclass(frozen=True, slots=True)
class LockedForIngest:
    """What a batch reads before it writes; the runs stay locked until its transaction ends."""

    #: Of the keys asked about, those that exist and are not revoked.
    active_key_ids: frozenset[int]
    #: The runs asked about that exist (any tenant: the caller checks), by id: what can change
    #: since the caller's copy of the run was read (its summary).
    runs: dict[str, LockedRun]
    #: Their MFU histograms by run pk ({bin: n}, empty bins left out).
    histograms: dict[int, dict[int, int]]
    #: (width in steps, lowest bucket, highest bucket) of the stored step buckets of those with more
    #: than ``series_above`` measurements that have any.
    series_extents: dict[int, tuple[int, int, int]]


@dataclass(frozen=True, slots=True)
class LockedRun:
    """A locked run's identity and its summary as it stands (``runs.SUMMARY_COLUMNS``; times UTC,
    a median not yet known None). The rest of a run is fixed at creation (or, like its status and
    tags, not ingest's business), so a cached record plus these is the run as it stands:
    :meth:`applied_to`. Why not the whole row: 40 columns (and the spec's JSON) read per run per
    batch cost more than the rest of the lock (PostgreSQL, 8 runs: 0.12 of its 0.42 ms of CPU)."""

    pk: int
    id: str
    tenant: str
    summary: dict[str, Any]

    def applied_to(self, run: records_store.RunRecord) -> records_store.RunRecord:
        if run.pk != self.pk:
            raise ValueError(f"run {self.id}: the record given is of another run")
        return records_store.replace_run(run, self.summary)


_LOCKED_COLUMNS = (runs.c.pk, runs.c.id, runs.c.tenant, *(runs.c[name] for name in run_store.SUMMARY_COLUMNS))


def _locked_run(row: Sequence[Any]) -> LockedRun:
    values = list(row)
    summary = dict(zip(run_store.SUMMARY_COLUMNS, values[3:], strict=True))
    summary["median_mfu"] = records_store.median_as_read(summary["median_mfu"])
    return LockedRun(pk=values[0], id=values[1], tenant=values[2], summary=summary)


def _id_in(column: Any, name: str, dialect_name: str) -> Any:
    """``column IN (ids)``: an array parameter on PostgreSQL (one statement text, compiled once,
    whatever the count), an expanding list on SQLite."""
    if dialect_name == "postgresql":
        return column == any_(bindparam(name, type_=ARRAY(column.type)))
    return column.in_(bindparam(name, expanding=True))


@dataclass(frozen=True, slots=True)
class _LockQueries:
    #: The runs, locked (first: what the facts read is read under the lock).
    lock_runs: Select[Any]
    #: One row per fact, tagged by kind (_KEY, _BIN, _EXTENT): the active keys, the locked runs' MFU
    #: histograms and their step-bucket extents, in one statement (each statement costs the writer
    #: more than its rows do).
    facts: CompoundSelect

    @property
    def statements(self) -> tuple[Select[Any] | CompoundSelect, ...]:
        return (self.lock_runs, self.facts)


_KEY, _BIN, _EXTENT = 0, 1, 2


def _fact(kind: int, *values: Any) -> Select[Any]:
    """A select of (kind, four BIGINT values; missing ones NULL): the union's common shape."""
    padded = [*values, *[literal_column("NULL")] * (4 - len(values))]
    columns = [cast(value, BigInteger).label(name) for value, name in zip(padded, "abcd", strict=True)]
    return select(literal_column(str(kind)).label("kind"), *columns)


@lru_cache(maxsize=2)
def _lock_queries(dialect_name: str) -> _LockQueries:
    """Built once per dialect (constructing a statement costs more than running it here)."""
    of_runs = select(runs.c.pk).where(_id_in(runs.c.id, "run_ids", dialect_name))
    h, s = run_mfu_bins, run_series_bins
    keys = _fact(_KEY, api_keys.c.id).where(
        _id_in(api_keys.c.id, "key_ids", dialect_name), api_keys.c.revoked_at.is_(None)
    )
    bins = _fact(_BIN, h.c.run_pk, h.c.mfu_bin, h.c.n_measurements).where(
        h.c.run_pk.in_(of_runs.scalar_subquery()), h.c.n_measurements > literal_column("0")
    )
    extents = (
        _fact(_EXTENT, s.c.run_pk, func.max(s.c.width_steps), func.min(s.c.bucket), func.max(s.c.bucket))
        .where(
            s.c.run_pk.in_(
                of_runs.where(
                    runs.c.measurement_count > bindparam("series_above", type_=Integer)
                ).scalar_subquery()
            )
        )
        .group_by(s.c.run_pk)
    )
    return _LockQueries(
        # Primary-key order: two writers locking overlapping sets never deadlock.
        lock_runs=select(*_LOCKED_COLUMNS)
        .where(_id_in(runs.c.id, "run_ids", dialect_name))
        .order_by(runs.c.pk)
        .with_for_update(),
        facts=union_all(keys, bins, extents),
    )


def lock_for_ingest(
    connection: Connection, *, key_ids: Sequence[int], run_ids: Sequence[str], series_above: int
) -> LockedForIngest:
    """Lock the runs (primary-key order), then check the keys and read the runs' histograms and, for
    those with more than ``series_above`` measurements, their step-bucket extents, in a write
    transaction the caller holds."""
    parameters = _lock_parameters(key_ids, run_ids, series_above)
    queries = _lock_queries(connection.dialect.name)
    return _locked([connection.execute(statement, parameters).all() for statement in queries.statements])


def _lock_parameters(key_ids: Sequence[int], run_ids: Sequence[str], series_above: int) -> dict[str, Any]:
    return {"key_ids": sorted(set(key_ids)), "run_ids": sorted(set(run_ids)), "series_above": series_above}


def _locked(results: Sequence[Sequence[Sequence[Any]]]) -> LockedForIngest:
    if len(results) != 2:
        raise RuntimeError(f"{len(results)} results for the lock's 2 statements")
    run_rows, fact_rows = results
    active: set[int] = set()
    histograms: dict[int, dict[int, int]] = {}
    extents: dict[int, tuple[int, int, int]] = {}
    for kind, first, second, third, fourth in fact_rows:
        if kind == _BIN:
            histograms.setdefault(int(first), {})[int(second)] = int(third)
        elif kind == _EXTENT:
            extents[int(first)] = (int(second), int(third), int(fourth))
        else:
            active.add(int(first))
    return LockedForIngest(
        active_key_ids=frozenset(active),
        runs={row[1]: _locked_run(row) for row in run_rows},
        histograms=histograms,
        series_extents=extents,
    )


# --------------------------------------------------------------------------------------------------
# Writes


@dataclass(frozen=True, slots=True)
class IngestWrites:
    """What a batch writes, in the order it is written."""

    #: New measurements as driver parameters (``runs.measurement_parameters``).
    measurements: Sequence[tuple[Any, ...]] = ()
    #: Counts to add per run pk and MFU bin.
    histogram_counts: Mapping[int, Mapping[int, int]] = field(default_factory=dict)
    #: Runs as their summary columns should now read.
    summaries: Sequence[records_store.RunRecord] = ()
    #: Runs' medians moving between fleet bins: (run, old bin, new bin).
    moves: Sequence[tuple[records_store.RunRecord, int | None, int | None]] = ()
    #: Runs whose step buckets are built from their stored measurements (these included): pk → width.
    series_rebuilds: Mapping[int, int] = field(default_factory=dict)
    #: Runs whose stored step buckets are replaced: pk → (width, buckets).
    series_replacements: Mapping[int, tuple[int, Sequence[SeriesBin]]] = field(default_factory=dict)
    #: Buckets added to the stored ones, at their width: pk → (width, buckets).
    series_additions: Mapping[int, tuple[int, Sequence[SeriesBin]]] = field(default_factory=dict)


def write_ingest(connection: Connection, writes: IngestWrites) -> None:
    """Write a batch in the caller's transaction (the runs locked by :func:`lock_for_ingest`): the
    store's statements in turn (SQLite; PostgreSQL's writer thread, where COPY takes the rows)."""
    measurements_store.insert_measurements(connection, parameters=writes.measurements)
    histograms_store.add_to_run_histograms(connection, counts=writes.histogram_counts)
    run_store.update_summaries(connection, summaries=writes.summaries)
    histograms_store.move_runs_in_histograms(connection, moves=writes.moves)
    for run_pk, width in sorted(writes.series_rebuilds.items()):
        series_store.rebuild_series(connection, run_pk=run_pk, width=width)
    for run_pk, (width, bins) in sorted(writes.series_replacements.items()):
        series_store.replace_series(connection, run_pk=run_pk, width=width, bins=bins)
    series_store.add_to_series(connection, additions=writes.series_additions)
