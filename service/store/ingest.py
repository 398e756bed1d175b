"""The measurement-ingest transaction's statements, in as few round trips as the database allows.

A batch of measurement requests (``service.api.services.ingest.commit_batch``) reads under lock
(:func:`lock_for_ingest`: which keys are still active, the runs locked, their MFU histograms and step
buckets), decides in Python what to store, then writes (:func:`write_ingest`: the measurements, the
runs' histograms and summaries, the tenant and fleet histograms, the step buckets).

Two ways:

* SQLite, and PostgreSQL's writer thread (``lock_for_ingest``, ``write_ingest``): the store's
  statements one after the other. On SQLite they are calls into the library; on PostgreSQL the thread
  takes only the batches the loop's way does not (large ones, whose rows COPY takes; those that need a
  lookup or rebuild step buckets; those that failed on the loop).
* PostgreSQL on the event loop (``lock_for_ingest_async``, ``write_ingest_async``; the common batch),
  over an asyncio connection. Each call is a pipeline of prepared statements (``_pg_pipeline``: sent
  in one flush, read as they arrive): one wait each (BEGIN rides with the lock, COMMIT with the
  writes), and a wait is an ``await``. In the thread a batch had
  made about a dozen waits (the pool's pre-ping, BEGIN, the key check, the lock, the insert, the
  histogram upsert and read-back, the summaries, the fleet and tenant moves, COMMIT), each one
  releasing the GIL and winning it back from the event loop: ~0.5-1 ms a wait under load, where the
  database answered in ~0.2 ms (5.8 ms a batch of ~8 one-measurement requests at 16 connections,
  half the 2-core machine idle, 1,400 requests/s). There the rows go as JSON parameters, since
  psycopg adapts list parameters element by element in Python.

Either way the histogram is not read back after the upsert: the run is locked, so the histogram read
with the lock plus the batch's counts is what the upsert leaves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import orjson
import psycopg
from sqlalchemy import (
    ARRAY,
    BigInteger,
    CompoundSelect,
    Connection,
    Integer,
    Select,
    Table,
    any_,
    bindparam,
    cast,
    func,
    literal_column,
    select,
    union_all,
)
from sqlalchemy.dialects.postgresql.psycopg import dialect as psycopg_dialect
from sqlalchemy.engine import Dialect

from service.domain.fleet import SeriesBin
from service.store import _pg_pipeline
from service.store import runs as run_store
from service.store.tables import (
    api_keys,
    fleet_mfu_bins,
    measurements,
    run_mfu_bins,
    run_series_bins,
    runs,
    tenant_mfu_bins,
)
from service.store.types import UtcDateTime

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

    def applied_to(self, run: run_store.RunRecord) -> run_store.RunRecord:
        if run.pk != self.pk:
            raise ValueError(f"run {self.id}: the record given is of another run")
        return run_store.replace_run(run, self.summary)


_LOCKED_COLUMNS = (runs.c.pk, runs.c.id, runs.c.tenant, *(runs.c[name] for name in run_store.SUMMARY_COLUMNS))
_LOCKED_TIMES = tuple(
    index for index, column in enumerate(_LOCKED_COLUMNS) if isinstance(column.type, UtcDateTime)
)


def _locked_run(row: Sequence[Any], *, utc: bool) -> LockedRun:
    values = list(row)
    if utc:  # read at the driver, in the session's time zone: as SQLAlchemy's UtcDateTime reads them
        read = UtcDateTime().process_result_value
        for index in _LOCKED_TIMES:
            values[index] = read(values[index], None)  # type: ignore[arg-type]  # the dialect is unused
    summary = dict(zip(run_store.SUMMARY_COLUMNS, values[3:], strict=True))
    summary["median_mfu"] = run_store.median_as_read(summary["median_mfu"])
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
    transaction the caller holds (SQLite; PostgreSQL's writer thread)."""
    parameters = _lock_parameters(key_ids, run_ids, series_above)
    queries = _lock_queries(connection.dialect.name)
    return _locked(
        [connection.execute(statement, parameters).all() for statement in queries.statements], utc=False
    )


async def lock_for_ingest_async(
    connection: psycopg.AsyncConnection[Any],
    *,
    key_ids: Sequence[int],
    run_ids: Sequence[str],
    series_above: int,
    begin: bool = False,
) -> LockedForIngest:
    """:func:`lock_for_ingest` on an asyncio psycopg connection (PostgreSQL; the event loop's writer:
    service.store.group_commit.AsyncGroupCommitWriter), in one pipeline (``_pg_pipeline``): the
    statements sent together, prepared on the server (parsed and planned once a connection:
    PostgreSQL's CPU per one-measurement request halved against one query text parsed each time,
    0.24 -> 0.11 ms), one wait for the answers. ``begin``: BEGIN the transaction in the same pipeline
    (the connection is in autocommit mode)."""
    parameters = _lock_parameters(key_ids, run_ids, series_above)
    commands: list[_pg_pipeline.Command] = [b"BEGIN"] if begin else []
    commands += [statement.bind(parameters) for statement in _pg_lock_statements()]
    results = await _pg_pipeline.run(connection, commands)
    return _locked(results[1:] if begin else results, utc=True)


@lru_cache(maxsize=1)
def _pg_lock_statements() -> tuple[_pg_pipeline.Statement, ...]:
    """The lock's statements, to be prepared on the loop writer's connections."""
    return tuple(
        _pg_pipeline.Statement.from_psycopg(_driver_sql(statement, _PSYCOPG), prefix="teff_ingest")
        for statement in _lock_queries("postgresql").statements
    )


def _lock_parameters(key_ids: Sequence[int], run_ids: Sequence[str], series_above: int) -> dict[str, Any]:
    return {"key_ids": sorted(set(key_ids)), "run_ids": sorted(set(run_ids)), "series_above": series_above}


def _locked(results: Sequence[Sequence[Sequence[Any]]], *, utc: bool) -> LockedForIngest:
    """``utc``: the rows were read at the driver (times in the session's zone), not through SQLAlchemy."""
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
        runs={row[1]: _locked_run(row, utc=utc) for row in run_rows},
        histograms=histograms,
        series_extents=extents,
    )


@lru_cache(maxsize=16)
def _driver_sql(statement: Any, dialect: Dialect) -> str:
    """A statement's text in the driver's parameter style (compiled once)."""
    return str(statement.compile(dialect=dialect))


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
    summaries: Sequence[run_store.RunRecord] = ()
    #: Runs' medians moving between fleet bins: (run, old bin, new bin).
    moves: Sequence[tuple[run_store.RunRecord, int | None, int | None]] = ()
    #: Runs whose step buckets are built from their stored measurements (these included): pk → width.
    series_rebuilds: Mapping[int, int] = field(default_factory=dict)
    #: Runs whose stored step buckets are replaced: pk → (width, buckets).
    series_replacements: Mapping[int, tuple[int, Sequence[SeriesBin]]] = field(default_factory=dict)
    #: Buckets added to the stored ones, at their width: pk → (width, buckets).
    series_additions: Mapping[int, tuple[int, Sequence[SeriesBin]]] = field(default_factory=dict)


#: Settings of the sessions running the statements above on PostgreSQL (the event loop's writer).
#: Generic plans: the statements are prepared, and under the default plan_cache_mode PostgreSQL
#: compared each generic plan with custom ones and, on analyzed tables of 300,000 runs, planned both
#: lock statements afresh for every batch (`runs.id = ANY($1)`: a generic plan must guess the array's
#: length): 0.69 ms of planning a batch against 0.25 ms of execution (pg_stat_statements with
#: track_planning), and the database's CPU per one-measurement request 0.28 -> 0.19 ms with this on.
#: The generic plans are the custom ones' (index scans on uq_runs_id and the run pk).
PG_SESSION_SETTINGS = {"plan_cache_mode": "force_generic_plan"}
#: A generic plan is kept until the tables are analyzed; one made on a nearly empty database (sequential
#: scans) would outlive its growth where autovacuum is off. Plans are remade this often regardless.
PG_REPLAN_SECONDS = 60.0

#: Up to this many measurements go in the loop's write statement on PostgreSQL (as JSON); a batch with
#: more goes to the writer thread (COPY: faster for many rows).
PIPELINED_INSERT_ROWS = 1000


def write_ingest(connection: Connection, writes: IngestWrites) -> None:
    """Write a batch in the caller's transaction (the runs locked by :func:`lock_for_ingest`): the
    store's statements in turn (SQLite; PostgreSQL's writer thread, where COPY takes the rows)."""
    run_store.insert_measurements(connection, parameters=writes.measurements)
    run_store.add_to_run_histograms(connection, counts=writes.histogram_counts)
    run_store.update_summaries(connection, summaries=writes.summaries)
    run_store.move_runs_in_histograms(connection, moves=writes.moves)
    for run_pk, width in sorted(writes.series_rebuilds.items()):
        run_store.rebuild_series(connection, run_pk=run_pk, width=width)
    for run_pk, (width, bins) in sorted(writes.series_replacements.items()):
        run_store.replace_series(connection, run_pk=run_pk, width=width, bins=bins)
    run_store.add_to_series(connection, additions=writes.series_additions)


class NeedsWriterThread(Exception):
    """The batch needs what only the thread's writer does (COPY of many rows, step buckets rebuilt or
    re-bucketed, repeated steps looked up): nothing was written; commit it there."""


async def write_ingest_async(
    connection: psycopg.AsyncConnection[Any], writes: IngestWrites, *, commit: bool = False
) -> None:
    """:func:`write_ingest` on an asyncio psycopg connection, for the common batch: up to
    ``PIPELINED_INSERT_ROWS`` measurements and no step buckets to build or widen (else
    :class:`NeedsWriterThread`, before anything is written). In pipeline mode, prepared, as the lock.
    ``commit``: COMMIT in the same pipeline (after a statement that fails, PostgreSQL skips the rest
    of the pipeline, COMMIT included: nothing is committed)."""
    if (
        len(writes.measurements) > PIPELINED_INSERT_ROWS
        or writes.series_rebuilds
        or writes.series_replacements
    ):
        raise NeedsWriterThread
    commands: list[_pg_pipeline.Command] = [
        (_pg_write_statement(sql), parameters) for sql, parameters in _pg_write_statements(writes)
    ]
    await _pg_pipeline.run(connection, [*commands, b"COMMIT"] if commit else commands)


@lru_cache(maxsize=8)
def _pg_write_statement(sql: str) -> _pg_pipeline.Statement:
    return _pg_pipeline.Statement.from_psycopg(sql, prefix="teff_ingest")


def _pg_write_statements(writes: IngestWrites) -> list[tuple[str, list[Any]]]:
    """The batch's writes as (statement, JSON parameters), in their lock order."""
    statements: list[tuple[str, list[Any]]] = [(_pg_run_writes_sql(), [*_pg_run_writes_parameters(writes)])]
    # The tenant rows before the fleet rows, each in key order: the lock order of every transaction.
    for table, rows in zip(
        (tenant_mfu_bins, fleet_mfu_bins), run_store.histogram_moves(writes.moves), strict=True
    ):
        if rows:
            names = [column.name for column in table.columns]
            statements.append(
                (
                    _pg_insert_rows_sql(table, run_store.upsert_add_clause(table, "n_runs")),
                    [orjson.dumps([[row[name] for name in names] for row in rows]).decode()],
                )
            )
    if writes.series_additions:
        names = [column.name for column in run_series_bins.columns]
        rows = [
            run_store.series_row(run_pk, width, item)
            for run_pk, (width, bins) in sorted(writes.series_additions.items())
            for item in bins
        ]
        statements.append(
            (
                _pg_insert_rows_sql(run_series_bins, run_store.series_upsert_clause()),
                [orjson.dumps([[row[name] for name in names] for row in rows]).decode()],
            )
        )
    return statements


_PSYCOPG = psycopg_dialect()
_SUMMARY_UPDATE_COLUMNS = ("pk", *run_store.SUMMARY_COLUMNS)


def _pg_rows(table: Table, names: Sequence[str]) -> str:
    """``SELECT`` of the rows given as one JSON parameter, an array of arrays (column values in
    ``names`` order), each value cast to its column's type. Why JSON: psycopg adapts a list parameter
    element by element in Python (~10 µs an array: most of a small batch's write), orjson writes the
    whole batch in C, and its number and time texts read back exactly (shortest round-trip floats,
    RFC 3339 times to the microsecond)."""
    values = ", ".join(
        f"(r->>{index})::{table.c[name].type.compile(dialect=_PSYCOPG)}" for index, name in enumerate(names)
    )
    # Only constants go into the text (the table's own column types, positions); values are bound.
    return f"SELECT {values} FROM json_array_elements(%s::json) AS r"  # nosec B608


@lru_cache(maxsize=1)
def _pg_run_writes_sql() -> str:
    """One statement for what a batch writes to its locked runs' own rows: the measurements, the
    runs' MFU histograms (counts added) and their summaries, each table's rows as one JSON parameter
    (:func:`_pg_rows`). The three touch different tables (the order of data-modifying CTEs is the
    database's to choose)."""
    columns = run_store.MEASUREMENT_COLUMNS
    summary = run_store.SUMMARY_COLUMNS
    # Only constants go into the text (the tables' own column names and types); values are bound.
    return (
        f"WITH new_measurements AS (INSERT INTO measurements ({', '.join(columns)}) "  # nosec B608
        f"{_pg_rows(measurements, columns)}), "
        f"run_bins AS ({_pg_insert_rows_sql(run_mfu_bins, run_store.upsert_add_clause(run_mfu_bins, 'n_measurements'))}) "
        f"UPDATE runs SET {', '.join(f'{name} = v.{name}' for name in summary)} "
        f"FROM ({_pg_rows(runs, _SUMMARY_UPDATE_COLUMNS)}) AS v({', '.join(_SUMMARY_UPDATE_COLUMNS)}) "
        "WHERE runs.pk = v.pk"
    )


def _pg_run_writes_parameters(writes: IngestWrites) -> tuple[str, str, str]:
    """The JSON parameters of :func:`_pg_run_writes_sql`. The values are validated finite (JSON has
    no NaN; orjson would write null)."""
    bins = [
        (run_pk, mfu_bin, count)
        for run_pk in sorted(writes.histogram_counts)
        for mfu_bin, count in sorted(writes.histogram_counts[run_pk].items())
    ]
    summaries = [
        tuple(getattr(run, name) for name in _SUMMARY_UPDATE_COLUMNS)
        for run in sorted(writes.summaries, key=lambda run: run.pk)
    ]
    return (
        orjson.dumps(writes.measurements).decode(),
        orjson.dumps(bins).decode(),
        orjson.dumps(summaries).decode(),
    )


@lru_cache(maxsize=8)
def _pg_insert_rows_sql(table: Table, on_conflict: str) -> str:
    """INSERT every column of ``table`` from one JSON parameter (:func:`_pg_rows`), then
    ``on_conflict`` (the store's own clause for the table)."""
    names = [column.name for column in table.columns]
    # Only constants go into the text (the table's own names and types, the store's clause).
    return f"INSERT INTO {table.name} ({', '.join(names)}) {_pg_rows(table, names)}{on_conflict}"  # nosec B608
