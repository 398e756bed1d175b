"""The run store: runs, tags, measurements, MFU histograms and Idempotency-Key records.

Repository functions over a connection inside a unit of work (the caller commits). Every query on
runs names the tenant; a run of another tenant is simply not found. Nothing here computes a formula:
the values (MFU, bins, medians) come in already computed by the domain.

Concurrency: SQLite write units hold the database write lock from BEGIN, so a read-then-write is
safe. On PostgreSQL the run row is locked (``SELECT ... FOR UPDATE``) before its measurements or
summary change, uniqueness lives in constraints (a lost race is an IntegrityError the caller maps),
and histogram rows are always changed in one order (tenant table, then fleet table, bins ascending)
so two ingests never deadlock.
"""

from __future__ import annotations

import itertools
import operator
import secrets
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, Literal

import orjson
from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Connection,
    Row,
    Select,
    Table,
    bindparam,
    case,
    delete,
    exists,
    func,
    insert,
    literal,
    select,
    tuple_,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError, IntegrityError

from service.domain.fleet import SeriesBin
from service.store.tables import (
    NO_MFU,
    fleet_mfu_bins,
    idempotency_keys,
    measurements,
    run_mfu_bins,
    run_series_bins,
    run_tags,
    runs,
    tenant_mfu_bins,
)

RUN_ID_PREFIX = "run_"
#: The accelerator value of caller-described parts: their peaks are the caller's, so they are
#: counted in the caller's own statistics but not across tenants.
CUSTOM_ACCELERATOR = "custom"


def new_run_id() -> str:
    return RUN_ID_PREFIX + secrets.token_hex(10)


# --------------------------------------------------------------------------------------------------
# Records


@dataclass(frozen=True, slots=True)
class RunRecord:
    pk: int
    id: str
    tenant: str
    status: str
    started_at: datetime
    finished_at: datetime | None
    created_at: datetime
    updated_at: datetime
    spec: dict[str, Any]
    model_name: str
    parameters_total: int
    parameters_active: int
    parameters_non_embedding: int
    size_class: str
    accelerator: str
    accelerator_name: str
    device_count: int
    precision: str
    seq_len_tokens: int
    global_batch_tokens: int
    convention: str
    recompute: str
    model_flops_per_token: float
    hardware_flops_per_token: float
    peak_tflops_per_device: float
    framework: str | None
    cluster: str | None
    scheduler_job_id: str | None
    attempt: int | None
    token_budget_tokens: int | None
    price_per_device_hour: float | None
    measurement_count: int
    first_measured_at: datetime | None
    latest_step: int | None
    latest_measured_at: datetime | None
    latest_mfu: float | None
    latest_tokens_per_second: float | None
    median_mfu: float | None
    fleet_bin: int | None
    tags: tuple[str, ...] = ()

    @property
    def in_fleet(self) -> bool:
        """Whether the run counts in the cross-tenant statistics."""
        return self.accelerator != CUSTOM_ACCELERATOR


_RUN_FIELDS = tuple(name for name in RunRecord.__dataclass_fields__ if name != "tags")


#: The columns of a RunRecord, in its field order: every query that builds records selects exactly
#: these, so a row is the record's arguments as they stand (no lookup by name per field; that was
#: most of an ingest batch's time in ``getattr``).
_RUN_COLUMNS = tuple(runs.c[name] for name in _RUN_FIELDS)
_MEDIAN_AT = _RUN_FIELDS.index("median_mfu")
_new_record: Callable[..., RunRecord] = RunRecord  # positional: mypy cannot see the row's arity


_ALL_RUN_FIELDS = tuple(RunRecord.__dataclass_fields__)
_run_values = operator.attrgetter(*_ALL_RUN_FIELDS)
_RUN_FIELD_AT = {name: index for index, name in enumerate(_ALL_RUN_FIELDS)}


def replace_run(run: RunRecord, values: Mapping[str, Any]) -> RunRecord:
    """``dataclasses.replace(run, **values)`` at half its cost (one C call reads every field; ingest
    replaces each run's summary in every batch)."""
    fields = list(_run_values(run))
    for name, value in values.items():
        fields[_RUN_FIELD_AT[name]] = value
    return _new_record(*fields)


def _select_runs() -> Select[Any]:
    return select(*_RUN_COLUMNS)


def median_as_read(stored: float | None) -> float | None:
    """A run's median as its summary reads: None for NO_MFU, the column's "none yet" that sorts last."""
    return None if stored is not None and stored < 0 else stored


def _record(row: Row[Any], tags: Sequence[str] = ()) -> RunRecord:
    """A record from a row of :func:`_select_runs`."""
    median = row[_MEDIAN_AT]
    if median is not None and median_as_read(median) is None:  # stored NO_MFU
        values = list(row)
        values[_MEDIAN_AT] = None
        return _new_record(*values, tags=tuple(tags))
    return _new_record(*row, tags=tuple(tags))


# --------------------------------------------------------------------------------------------------
# Runs


def create_run(
    connection: Connection, *, tenant: str, values: Mapping[str, Any], tags: Sequence[str]
) -> RunRecord:
    """Insert a run (``values``: the runs columns except pk, id, tenant, the summary) and its tags.

    Raises IntegrityError when (tenant, cluster, scheduler_job_id, attempt) is taken.
    """
    run_id = new_run_id()
    pk = connection.execute(
        insert(runs)
        .values(id=run_id, tenant=tenant, measurement_count=0, median_mfu=NO_MFU, **values)
        .returning(runs.c.pk)
    ).scalar_one()
    _insert_tags(connection, tenant=tenant, run_pk=pk, tags=tags)
    record = get_run(connection, tenant=tenant, run_id=run_id)
    assert record is not None
    return record


def find_run_by_job(
    connection: Connection, *, tenant: str, cluster: str, scheduler_job_id: str, attempt: int
) -> str | None:
    """The id of the tenant's run for this scheduler job attempt, if any."""
    return connection.execute(
        select(runs.c.id).where(
            runs.c.tenant == tenant,
            runs.c.cluster == cluster,
            runs.c.scheduler_job_id == scheduler_job_id,
            runs.c.attempt == attempt,
        )
    ).scalar_one_or_none()


_RUN_BY_ID = _select_runs().where(runs.c.id == bindparam("run_id"), runs.c.tenant == bindparam("tenant"))
_RUN_BY_ID_FOR_UPDATE = _RUN_BY_ID.with_for_update()


def get_run(
    connection: Connection, *, tenant: str, run_id: str, for_update: bool = False, with_tags: bool = True
) -> RunRecord | None:
    """The tenant's run with this id; None for an unknown id or another tenant's run.

    ``for_update`` locks the row until the transaction ends (PostgreSQL; SQLite writers already hold
    the database lock). ``with_tags=False`` skips the tags query (ingest never needs them).
    """
    query = _RUN_BY_ID_FOR_UPDATE if for_update else _RUN_BY_ID
    row = connection.execute(query, {"run_id": run_id, "tenant": tenant}).first()
    if row is None:
        return None
    return _record(row, tags_of(connection, [row.pk]).get(row.pk, ()) if with_tags else ())


def get_runs(connection: Connection, *, tenant: str, run_ids: Sequence[str]) -> dict[str, RunRecord]:
    """The tenant's runs among ``run_ids``, by id (missing ids are absent)."""
    rows = connection.execute(
        _select_runs().where(runs.c.tenant == tenant, runs.c.id.in_(list(run_ids)))
    ).all()
    tags = tags_of(connection, [row.pk for row in rows])
    return {row.id: _record(row, tags.get(row.pk, ())) for row in rows}


_TAGS_OF = (
    select(run_tags.c.run_pk, run_tags.c.tag)
    .where(run_tags.c.run_pk.in_(bindparam("pks", expanding=True)))
    .order_by(run_tags.c.run_pk, run_tags.c.tag)
)


def tags_of(connection: Connection, run_pks: Sequence[int]) -> dict[int, tuple[str, ...]]:
    if not run_pks:
        return {}
    found: dict[int, list[str]] = {}
    for run_pk, tag in connection.execute(_TAGS_OF, {"pks": list(run_pks)}):
        found.setdefault(run_pk, []).append(tag)
    return {pk: tuple(values) for pk, values in found.items()}


def _insert_tags(connection: Connection, *, tenant: str, run_pk: int, tags: Iterable[str]) -> None:
    rows = [{"run_pk": run_pk, "tag": tag, "tenant": tenant} for tag in sorted(set(tags))]
    if rows:
        connection.execute(insert(run_tags), rows)


def replace_tags(connection: Connection, *, tenant: str, run_pk: int, tags: Iterable[str]) -> None:
    connection.execute(delete(run_tags).where(run_tags.c.run_pk == run_pk))
    _insert_tags(connection, tenant=tenant, run_pk=run_pk, tags=tags)


def update_run(connection: Connection, *, run_pk: int, values: Mapping[str, Any]) -> None:
    """Set columns of a run (the caller checked the tenant and locked the row)."""
    if values:
        connection.execute(update(runs).where(runs.c.pk == run_pk).values(**values))


def delete_run(connection: Connection, *, run: RunRecord) -> None:
    """Delete a run; its measurements, tags and histogram go with it (ON DELETE CASCADE), and its
    median leaves the tenant and fleet histograms in the same transaction."""
    if run.fleet_bin is not None:
        move_run_in_histograms(connection, run=run, old_bin=run.fleet_bin, new_bin=None)
    connection.execute(delete(runs).where(runs.c.pk == run.pk, runs.c.tenant == run.tenant))


# --------------------------------------------------------------------------------------------------
# Listing with keyset pagination


@dataclass(frozen=True, slots=True)
class RunFilters:
    accelerator: str | None = None
    model: str | None = None
    min_parameters: int | None = None
    max_parameters: int | None = None
    tags: tuple[str, ...] = ()
    cluster: str | None = None
    status: str | None = None
    started_after: datetime | None = None
    started_before: datetime | None = None
    min_mfu: float | None = None
    max_mfu: float | None = None


SortField = Literal["started_at", "median_mfu"]


def list_runs(
    connection: Connection,
    *,
    tenant: str,
    filters: RunFilters,
    sort: SortField,
    descending: bool,
    limit: int,
    after: tuple[Any, int] | None = None,
) -> list[RunRecord]:
    """One page of the tenant's runs ordered by (``sort``, pk), starting after the keyset ``after``
    ((sort value, pk) of the last row of the previous page). Runs inserted while a client pages never
    shift the rows it has yet to see: the position is a value, not an offset.
    """
    column = runs.c.started_at if sort == "started_at" else runs.c.median_mfu
    query: Select[Any] = _select_runs().where(
        runs.c.tenant == tenant, *_conditions(tenant, filters, ordered_by_mfu=sort == "median_mfu")
    )
    if after is not None:
        key = tuple_(column, runs.c.pk)
        position = tuple_(_bind_like(column, after[0]), _bind_like(runs.c.pk, after[1]))
        query = query.where(key < position if descending else key > position)
    if descending:
        query = query.order_by(column.desc(), runs.c.pk.desc())
    else:
        query = query.order_by(column.asc(), runs.c.pk.asc())
    rows = connection.execute(query.limit(limit)).all()
    tags = tags_of(connection, [row.pk for row in rows])
    return [_record(row, tags.get(row.pk, ())) for row in rows]


def _bind_like(column: Any, value: Any) -> ColumnElement[Any]:
    return literal(value, type_=column.type)


def _conditions(
    tenant: str, filters: RunFilters, *, ordered_by_mfu: bool = True
) -> list[ColumnElement[bool]]:
    c = runs.c
    # An MFU range is rarely selective, yet without statistics SQLite's planner would walk the
    # (tenant, median_mfu) index for it and sort every match by time: 70 ms at 200k runs, 500 ms at
    # 1M (benchmarks/results). When the page is ordered by time, `median_mfu + 0` keeps the range a
    # plain filter, so the time-ordered indexes serve the page (1.3 ms).
    mfu = c.median_mfu if ordered_by_mfu else c.median_mfu + 0
    conditions: list[ColumnElement[bool]] = []
    if filters.accelerator is not None:
        conditions.append(c.accelerator == filters.accelerator)
    if filters.model is not None:
        conditions.append(c.model_name == filters.model)
    if filters.min_parameters is not None:
        conditions.append(c.parameters_total >= filters.min_parameters)
    if filters.max_parameters is not None:
        conditions.append(c.parameters_total <= filters.max_parameters)
    if filters.cluster is not None:
        conditions.append(c.cluster == filters.cluster)
    if filters.status is not None:
        # Most runs end finished, so `finished` is the least selective filter there is; beside an
        # accelerator or model (each with its own time-ordered index) SQLite's planner, which has no
        # statistics, would still walk the (tenant, status) index and test every finished run of the
        # tenant (~1,100 rows for a 51-run page at 20k runs, against ~160 through the model index).
        # `status || ''` keeps it a plain filter then. Running and failed runs are few: their index stays.
        status: ColumnElement[Any] = c.status
        if filters.status == "finished" and (filters.model is not None or filters.accelerator is not None):
            status = c.status + ""
        conditions.append(status == filters.status)
    if filters.started_after is not None:
        conditions.append(c.started_at >= filters.started_after)
    if filters.started_before is not None:
        conditions.append(c.started_at < filters.started_before)
    if filters.min_mfu is not None or filters.max_mfu is not None:
        conditions.append(mfu >= (filters.min_mfu if filters.min_mfu is not None else 0.0))
    if filters.max_mfu is not None:
        conditions.append(mfu <= filters.max_mfu)
    for tag in filters.tags:
        conditions.append(
            exists().where(run_tags.c.tenant == tenant, run_tags.c.tag == tag, run_tags.c.run_pk == c.pk)
        )
    return conditions


# --------------------------------------------------------------------------------------------------
# Measurements


def existing_steps(connection: Connection, *, run_pk: int, first: int, last: int) -> set[int]:
    """Steps of the run already stored in [first, last] (a range scan of the primary key)."""
    query = select(measurements.c.step).where(
        measurements.c.run_pk == run_pk, measurements.c.step >= first, measurements.c.step <= last
    )
    return set(connection.execute(query).scalars())


#: The measurements table's columns in order: what a measurement value tuple holds (ingest computes
#: them as tuples: ~2x cheaper than dicts at 10,000 a request), and COPY's column order.
MEASUREMENT_COLUMNS: tuple[str, ...] = tuple(column.name for column in measurements.columns)
MEASURED_AT = MEASUREMENT_COLUMNS.index("measured_at")


@dataclass(frozen=True, slots=True)
class _DriverInsert:
    sql: str
    # Positional drivers (SQLite): row dict → parameter tuple, and the columns in the order bound.
    as_tuple: Callable[[dict[str, Any]], tuple[Any, ...]] | None
    column_order: tuple[str, ...] = ()


@lru_cache(maxsize=4)
def _measurement_insert(dialect: Dialect) -> _DriverInsert:
    """The INSERT in the driver's parameter style (compiled once per dialect)."""
    compiled = insert(measurements).compile(dialect=dialect, column_keys=list(MEASUREMENT_COLUMNS))
    if compiled.positional:
        order = tuple(compiled.positiontup or ())
        return _DriverInsert(str(compiled), operator.itemgetter(*order), order)
    return _DriverInsert(str(compiled), None)


def _sqlite_time(value: datetime) -> str:
    """What UtcDateTime binds on SQLite, without its per-value dispatch: naive UTC text in
    SQLAlchemy's format (so rows written here and through Core read back and sort alike)."""
    offset = value.utcoffset()
    if offset is None:
        raise ValueError("naive datetime given; timestamps must be timezone-aware")
    if offset:
        value = value.astimezone(UTC)
    return value.isoformat(" ", "microseconds")[:26]


def _sqlite_times(times: Sequence[datetime]) -> list[str]:
    """:func:`_sqlite_time` of each, in bulk (ingest binds up to 10,000 a request: ~19 ms one by
    one, ~5 ms so). orjson writes a UTC time as RFC 3339 text, ``YYYY-MM-DDTHH:MM:SS[.ffffff]Z``, in
    C; that needs only re-punctuating. Anything else (another offset, a naive time) goes through
    :func:`_sqlite_time`."""
    texts: list[str] = orjson.loads(orjson.dumps(times, option=orjson.OPT_UTC_Z))
    out = []
    for index, text in enumerate(texts):
        if len(text) == 27 and text[26] == "Z" and text[19] == ".":
            out.append(text[:10] + " " + text[11:26])
        elif len(text) == 20 and text[19] == "Z":
            out.append(text[:10] + " " + text[11:19] + ".000000")
        else:
            out.append(_sqlite_time(times[index]))
    return out


def measurement_values(rows: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
    """Measurement rows given as dicts (every column) as value tuples in ``MEASUREMENT_COLUMNS`` order."""
    as_values = operator.itemgetter(*MEASUREMENT_COLUMNS)
    return [as_values(row) for row in rows]


def measurement_parameters(dialect: Dialect, values: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The driver's parameters for measurements given as value tuples (``MEASUREMENT_COLUMNS`` order,
    times tz-aware): what :func:`insert_measurements` sends. Made apart so that a caller can build them
    before it takes the write lock (ingest does, in the request's thread)."""
    if dialect.name == "postgresql":  # COPY takes the table's column order: the tuples as they are
        if any(row[MEASURED_AT].tzinfo is None for row in values):
            raise ValueError("naive datetime given; timestamps must be timezone-aware")
        return list(values)
    if _measurement_insert(dialect).column_order != MEASUREMENT_COLUMNS:
        raise RuntimeError("the compiled measurement INSERT binds the columns in another order")
    at = MEASURED_AT
    times = _sqlite_times([row[at] for row in values])
    return [(*row[:at], text, *row[at + 1 :]) for row, text in zip(values, times, strict=True)]


def insert_measurements(
    connection: Connection,
    *,
    rows: Sequence[dict[str, Any]] = (),
    parameters: Sequence[tuple[Any, ...]] | None = None,
) -> None:
    """Insert measurement rows in one go at the driver: 10,000 rows per request would otherwise
    spend most of their time in SQLAlchemy's per-row parameter handling. SQLite: multi-row INSERTs;
    PostgreSQL: COPY. ``parameters`` (from :func:`measurement_parameters`) replace ``rows``."""
    if parameters is None:
        parameters = measurement_parameters(connection.dialect, measurement_values(rows))
    if not parameters:
        return
    if connection.dialect.name == "postgresql":
        _copy_measurements(connection, parameters)
        return
    # Multi-row INSERTs of as many rows as SQLite takes parameters for (1,820 rows at its default of
    # 32,766) rather than an executemany: the sqlite3 module releases the GIL around every step, and
    # retaking it costs up to a switch interval (5 ms) while other threads run Python. An executemany
    # waited for it ~10,000 times per 10,000-row batch; 500-row statements 20 times (a 10,000-row
    # insert beside a busy thread: ~200 ms with 500 rows a statement, ~100 ms with 1,820).
    driver = connection.connection.driver_connection
    assert isinstance(driver, sqlite3.Connection)
    rows_per_insert = max(
        1, driver.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // len(MEASUREMENT_COLUMNS)
    )
    for start in range(0, len(parameters), rows_per_insert):
        chunk = parameters[start : start + rows_per_insert]
        connection.exec_driver_sql(
            _sqlite_multirow_insert(len(chunk)), tuple(itertools.chain.from_iterable(chunk))
        )


def _sqlite_multirow_insert(row_count: int) -> str:
    return _multirow(_measurement_insert(_SQLITE_DIALECT).sql, row_count)


_SQLITE_DIALECT = sqlite.dialect()


_COPY_MEASUREMENTS = f"COPY measurements ({', '.join(MEASUREMENT_COLUMNS)}) FROM STDIN"


def _copy_measurements(connection: Connection, parameters: Sequence[tuple[Any, ...]]) -> None:
    """PostgreSQL: COPY the rows in (inside the unit of work's transaction); several times faster
    than an executemany of INSERTs. psycopg sends aware datetimes as timestamptz."""
    dbapi_connection: Any = connection.connection.dbapi_connection
    driver_error = connection.dialect.loaded_dbapi.Error
    try:
        with dbapi_connection.cursor() as cursor, cursor.copy(_COPY_MEASUREMENTS) as copy:
            for values in parameters:
                copy.write_row(values)
    except driver_error as exc:
        # What SQLAlchemy raises for the same failure elsewhere (IntegrityError, OperationalError, ...).
        raise DBAPIError.instance(_COPY_MEASUREMENTS, None, exc, driver_error) from exc


def add_to_run_histogram(connection: Connection, *, run_pk: int, counts: Mapping[int, int]) -> None:
    add_to_run_histograms(connection, counts={run_pk: counts})


def add_to_run_histograms(connection: Connection, *, counts: Mapping[int, Mapping[int, int]]) -> None:
    """Add measurement counts per MFU bin to runs' histograms ({run_pk: {bin: n}}) in one go."""
    rows = [
        {"run_pk": run_pk, "mfu_bin": b, "n_measurements": n}
        for run_pk in sorted(counts)
        for b, n in sorted(counts[run_pk].items())
    ]
    # The run rows are locked by the caller: no other transaction touches these rows.
    _upsert_add(
        connection, run_mfu_bins, rows, keys=("run_pk", "mfu_bin"), counter="n_measurements", many=True
    )


def run_histogram(connection: Connection, *, run_pk: int) -> dict[int, int]:
    return run_histograms(connection, run_pks=[run_pk]).get(run_pk, {})


_RUN_HISTOGRAMS = select(run_mfu_bins.c.run_pk, run_mfu_bins.c.mfu_bin, run_mfu_bins.c.n_measurements).where(
    run_mfu_bins.c.run_pk.in_(bindparam("run_pks", expanding=True))
)


def run_histograms(connection: Connection, *, run_pks: Sequence[int]) -> dict[int, dict[int, int]]:
    """Runs' MFU histograms ({run_pk: {bin: n}}, empty bins left out) in one query."""
    if not run_pks:
        return {}
    found: dict[int, dict[int, int]] = {}
    for run_pk, b, n in connection.execute(_RUN_HISTOGRAMS, {"run_pks": sorted(set(run_pks))}):
        if n > 0:
            found.setdefault(run_pk, {})[b] = n
    return found


SUMMARY_COLUMNS = (
    "measurement_count",
    "median_mfu",
    "fleet_bin",
    "updated_at",
    "first_measured_at",
    "latest_step",
    "latest_measured_at",
    "latest_mfu",
    "latest_tokens_per_second",
)
_UPDATE_SUMMARY = (
    update(runs)
    .where(runs.c.pk == bindparam("b_pk"))
    .values({name: bindparam(f"b_{name}") for name in SUMMARY_COLUMNS})
)


def update_summaries(connection: Connection, *, summaries: Sequence[RunRecord]) -> None:
    """Write the ingest summary columns of several runs (records as they should now read) in one go.
    The caller holds the runs' locks."""
    if not summaries:
        return
    ordered = sorted(summaries, key=lambda run: run.pk)
    if connection.dialect.name == "sqlite" and len(ordered) > 1:
        # One UPDATE ... FROM (VALUES ...) rather than an executemany of one step per run (see
        # insert_measurements on the GIL); times as UtcDateTime binds them.
        values: list[Any] = []
        for run in ordered:
            values.append(run.pk)
            for name in SUMMARY_COLUMNS:
                value = getattr(run, name)
                values.append(_sqlite_time(value) if isinstance(value, datetime) else value)
        connection.exec_driver_sql(_sqlite_update_summaries(len(ordered)), tuple(values))
        return
    rows = [
        {"b_pk": run.pk, **{f"b_{name}": getattr(run, name) for name in SUMMARY_COLUMNS}} for run in ordered
    ]
    connection.execute(_UPDATE_SUMMARY, rows)


@lru_cache(maxsize=64)
def _sqlite_update_summaries(row_count: int) -> str:
    group = "(" + ", ".join(["?"] * (1 + len(SUMMARY_COLUMNS))) + ")"
    assignments = ", ".join(f"{name} = v.{name}" for name in SUMMARY_COLUMNS)
    # Only constants go into the text (column names of this module, "?" placeholders); values are bound.
    return (
        f"WITH v(pk, {', '.join(SUMMARY_COLUMNS)}) AS (VALUES {', '.join([group] * row_count)}) "  # nosec B608
        f"UPDATE runs SET {assignments} FROM v WHERE runs.pk = v.pk"
    )


def move_run_in_histograms(
    connection: Connection, *, run: RunRecord, old_bin: int | None, new_bin: int | None
) -> None:
    """Move the run's median from ``old_bin`` to ``new_bin`` (None: not counted) in the tenant
    histogram and, for catalog accelerators, the fleet histogram."""
    move_runs_in_histograms(connection, moves=[(run, old_bin, new_bin)])


def move_runs_in_histograms(
    connection: Connection, *, moves: Iterable[tuple[RunRecord, int | None, int | None]]
) -> None:
    """Move several runs' medians between bins ((run, old_bin, new_bin); None: not counted). The
    changes are summed per histogram row first (two runs crossing in opposite directions cancel out),
    then applied tenant rows first, then fleet rows, each in key order: one lock order for every
    transaction, so two ingests never deadlock."""
    tenant_rows, fleet_rows = histogram_moves(moves)
    _upsert_add(
        connection,
        tenant_mfu_bins,
        tenant_rows,
        keys=("tenant", "accelerator", "size_class", "mfu_bin"),
        counter="n_runs",
    )
    _upsert_add(
        connection,
        fleet_mfu_bins,
        fleet_rows,
        keys=("accelerator", "size_class", "mfu_bin"),
        counter="n_runs",
    )


def histogram_moves(
    moves: Iterable[tuple[RunRecord, int | None, int | None]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The tenant and fleet histogram rows (in key order, the lock order) whose ``n_runs`` change, with
    the change, for runs' medians moving between bins (see move_runs_in_histograms)."""
    tenant_deltas: dict[tuple[str, str, str, int], int] = {}
    fleet_deltas: dict[tuple[str, str, int], int] = {}
    for run, old_bin, new_bin in moves:
        if old_bin == new_bin:
            continue
        for b, delta in ((old_bin, -1), (new_bin, +1)):
            if b is None:
                continue
            key = (run.tenant, run.accelerator, run.size_class, b)
            tenant_deltas[key] = tenant_deltas.get(key, 0) + delta
            if run.in_fleet:
                fleet_key = (run.accelerator, run.size_class, b)
                fleet_deltas[fleet_key] = fleet_deltas.get(fleet_key, 0) + delta
    tenant_rows = [
        {"tenant": t, "accelerator": a, "size_class": c, "mfu_bin": b, "n_runs": d}
        for (t, a, c, b), d in sorted(tenant_deltas.items())
        if d
    ]
    fleet_rows = [
        {"accelerator": a, "size_class": c, "mfu_bin": b, "n_runs": d}
        for (a, c, b), d in sorted(fleet_deltas.items())
        if d
    ]
    return tenant_rows, fleet_rows


_SQLITE_ROWS_PER_UPSERT = 1000


@lru_cache(maxsize=64)
def _multirow(sql: str, row_count: int) -> str:
    """``INSERT ... VALUES (?, ...) [ON CONFLICT ...]`` with ``row_count`` value groups."""
    head, rest = sql.split(" VALUES ", 1)
    group_end = rest.index(")") + 1
    group, tail = rest[:group_end], rest[group_end:]
    return f"{head} VALUES {', '.join([group] * row_count)}{tail}"


@lru_cache(maxsize=16)
def _upsert_statement(dialect: Dialect, table: Table, keys: tuple[str, ...], counter: str) -> _DriverInsert:
    """INSERT ... ON CONFLICT (keys) DO UPDATE SET counter = counter + excluded.counter, compiled once
    per dialect: SQLAlchemy cannot cache ON CONFLICT statements and recompiled it on every call
    (measured: ~0.5 ms of each ingest batch's ~2 ms)."""
    statement: Any
    if dialect.name == "postgresql":
        statement = postgresql.insert(table)
    elif dialect.name == "sqlite":
        statement = sqlite.insert(table)
    else:  # pragma: no cover - the service supports these two
        raise RuntimeError(f"unsupported database {dialect.name}")
    statement = statement.on_conflict_do_update(
        index_elements=list(keys), set_={counter: table.c[counter] + statement.excluded[counter]}
    )
    compiled = statement.compile(dialect=dialect, column_keys=[*keys, counter])
    if compiled.positional:
        return _DriverInsert(str(compiled), operator.itemgetter(*(compiled.positiontup or ())))
    return _DriverInsert(str(compiled), None)








def _upsert_add(
    connection: Connection,
    table: Table,
    rows: list[dict[str, Any]],
    *,
    keys: tuple[str, ...],
    counter: str,
    many: bool = False,
) -> None:
    """Add each row's ``counter`` to the existing row with the same key (insert when there is none):
    one statement per row in the given order (the lock order), or all at once (``many``: multi-row
    statements on SQLite, an executemany on PostgreSQL)."""
    if not rows:
        return
    driver = _upsert_statement(connection.dialect, table, keys, counter)
    parameters: list[Any] = [driver.as_tuple(row) for row in rows] if driver.as_tuple else rows
    if many and driver.as_tuple is not None:  # SQLite: multi-row statements (see insert_measurements)
        for start in range(0, len(parameters), _SQLITE_ROWS_PER_UPSERT):
            chunk = parameters[start : start + _SQLITE_ROWS_PER_UPSERT]
            connection.exec_driver_sql(
                _multirow(driver.sql, len(chunk)), tuple(itertools.chain.from_iterable(chunk))
            )
        return
    if many:
        connection.exec_driver_sql(driver.sql, parameters)
        return
    for row in parameters:
        connection.exec_driver_sql(driver.sql, row)


def list_measurements(
    connection: Connection,
    *,
    run_pk: int,
    limit: int,
    after_step: int | None = None,
    min_step: int | None = None,
    max_step: int | None = None,
) -> list[Row[Any]]:
    query = select(measurements).where(measurements.c.run_pk == run_pk)
    if after_step is not None:
        query = query.where(measurements.c.step > after_step)
    if min_step is not None:
        query = query.where(measurements.c.step >= min_step)
    if max_step is not None:
        query = query.where(measurements.c.step <= max_step)
    return list(connection.execute(query.order_by(measurements.c.step).limit(limit)).all())


def step_range(connection: Connection, *, run_pk: int) -> tuple[int, int]:
    """Lowest and highest stored step of a run (two primary-key lookups: as two scalar subqueries,
    since SQLite reads min and max from the index only when each is alone in its query; together they
    scanned the run's rows, 2 ms at 20,000)."""
    of_run = measurements.c.run_pk == run_pk
    low, high = connection.execute(
        select(
            select(func.min(measurements.c.step)).where(of_run).scalar_subquery(),
            select(func.max(measurements.c.step)).where(of_run).scalar_subquery(),
        )
    ).one()
    return int(low), int(high)


def measurement_points(connection: Connection, *, run_pk: int) -> list[Row[Any]]:
    """Every measurement's (step, time, mfu, tokens/s), by step (for runs small enough to read whole)."""
    query = (
        select(
            measurements.c.step,
            measurements.c.measured_at,
            measurements.c.mfu,
            measurements.c.tokens_per_second,
        )
        .where(measurements.c.run_pk == run_pk)
        .order_by(measurements.c.step)
    )
    return list(connection.execute(query).all())


def measurement_buckets(
    connection: Connection, *, run_pk: int, first_step: int, last_step: int, buckets: int
) -> list[Row[Any]]:
    """The run's measurements grouped in the database into ``buckets`` equal step ranges: per bucket
    the count, mean/min/max MFU, mean tokens/s, first and last time, highest step."""
    span = last_step - first_step + 1
    bucket = ((measurements.c.step - first_step) * buckets // span).label("bucket")
    query = (
        select(
            bucket,
            func.count().label("n"),
            func.avg(measurements.c.mfu).label("mfu"),
            func.min(measurements.c.mfu).label("mfu_min"),
            func.max(measurements.c.mfu).label("mfu_max"),
            func.avg(measurements.c.tokens_per_second).label("tokens_per_second"),
            func.min(measurements.c.measured_at).label("first_time"),
            func.max(measurements.c.measured_at).label("last_time"),
            func.max(measurements.c.step).label("step"),
        )
        .where(measurements.c.run_pk == run_pk)
        .group_by(bucket)
        .order_by(bucket)
    )
    return list(connection.execute(query).all())


# --------------------------------------------------------------------------------------------------
# A long run's series in step buckets (service.domain.fleet.SeriesBin)

_SERIES_VALUES = (
    "n_measurements",
    "mfu_sum",
    "mfu_min",
    "mfu_max",
    "tokens_per_second_sum",
    "first_measured_at",
    "last_measured_at",
    "last_step",
)


def run_series(connection: Connection, *, run_pk: int) -> tuple[int, list[SeriesBin]]:
    """A run's stored buckets, by bucket, and their width (0 with none)."""
    t = run_series_bins
    rows = connection.execute(
        select(t.c.width_steps, t.c.bucket, *(t.c[name] for name in _SERIES_VALUES))
        .where(t.c.run_pk == run_pk)
        .order_by(t.c.bucket)
    ).all()
    if not rows:
        return 0, []
    return int(rows[0][0]), [SeriesBin(*row[1:]) for row in rows]


def series_row(run_pk: int, width: int, item: SeriesBin) -> dict[str, Any]:
    return {
        "run_pk": run_pk,
        "bucket": item.bucket,
        "width_steps": width,
        "n_measurements": item.count,
        "mfu_sum": item.mfu_sum,
        "mfu_min": item.mfu_min,
        "mfu_max": item.mfu_max,
        "tokens_per_second_sum": item.tokens_per_second_sum,
        "first_measured_at": item.first_time,
        "last_measured_at": item.last_time,
        "last_step": item.last_step,
    }


@lru_cache(maxsize=4)
def series_upsert(dialect: Dialect) -> Any:
    """INSERT ... ON CONFLICT (run_pk, bucket) DO UPDATE: counts and sums added, minima and maxima
    kept (CASE rather than LEAST/GREATEST or min/max: the same on both databases)."""
    t = run_series_bins
    statement: Any = postgresql.insert(t) if dialect.name == "postgresql" else sqlite.insert(t)
    new = statement.excluded

    def lower(name: str) -> Any:
        return case((new[name] < t.c[name], new[name]), else_=t.c[name])

    def higher(name: str) -> Any:
        return case((new[name] > t.c[name], new[name]), else_=t.c[name])

    return statement.on_conflict_do_update(
        index_elements=["run_pk", "bucket"],
        set_={
            "n_measurements": t.c.n_measurements + new.n_measurements,
            "mfu_sum": t.c.mfu_sum + new.mfu_sum,
            "mfu_min": lower("mfu_min"),
            "mfu_max": higher("mfu_max"),
            "tokens_per_second_sum": t.c.tokens_per_second_sum + new.tokens_per_second_sum,
            "first_measured_at": lower("first_measured_at"),
            "last_measured_at": higher("last_measured_at"),
            "last_step": higher("last_step"),
        },
    )


def add_to_series(
    connection: Connection, *, additions: Mapping[int, tuple[int, Sequence[SeriesBin]]]
) -> None:
    """Add buckets (run → (width, buckets), at the width the run's stored buckets have) to the
    stored ones. The caller holds the runs' locks."""
    rows = [series_row(pk, width, item) for pk, (width, bins) in sorted(additions.items()) for item in bins]
    if rows:
        connection.execute(series_upsert(connection.dialect), rows)


def replace_series(connection: Connection, *, run_pk: int, width: int, bins: Sequence[SeriesBin]) -> None:
    """A run's stored buckets replaced by ``bins`` of ``width`` steps (when the width grows)."""
    connection.execute(delete(run_series_bins).where(run_series_bins.c.run_pk == run_pk))
    if bins:
        connection.execute(insert(run_series_bins), [series_row(run_pk, width, item) for item in bins])


def rebuild_series(connection: Connection, *, run_pk: int, width: int) -> None:
    """A run's buckets of ``width`` steps built from all its stored measurements, in the database (when
    it first outgrows the exact series)."""
    m = measurements
    bucket = m.c.step // width  # integer division of non-negative integers on both databases
    grouped = (
        select(
            m.c.run_pk,
            bucket,
            literal(width, BigInteger),
            func.count(),
            func.sum(m.c.mfu),
            func.min(m.c.mfu),
            func.max(m.c.mfu),
            func.sum(m.c.tokens_per_second),
            func.min(m.c.measured_at),
            func.max(m.c.measured_at),
            func.max(m.c.step),
        )
        .where(m.c.run_pk == run_pk)
        .group_by(m.c.run_pk, bucket)
    )
    connection.execute(delete(run_series_bins).where(run_series_bins.c.run_pk == run_pk))
    connection.execute(
        insert(run_series_bins).from_select(["run_pk", "bucket", "width_steps", *_SERIES_VALUES], grouped)
    )


# --------------------------------------------------------------------------------------------------
# Statistics


GroupKey = tuple[str, str]


def fleet_histograms(
    connection: Connection, *, accelerator: str | None = None, size_class: str | None = None
) -> dict[GroupKey, dict[int, int]]:
    """Histograms of run median MFU across tenants, by (accelerator, size class)."""
    t = fleet_mfu_bins
    query = select(t.c.accelerator, t.c.size_class, t.c.mfu_bin, t.c.n_runs).where(t.c.n_runs > 0)
    if accelerator is not None:
        query = query.where(t.c.accelerator == accelerator)
    if size_class is not None:
        query = query.where(t.c.size_class == size_class)
    return _group(connection, query)


def tenant_histograms(
    connection: Connection, *, tenant: str, accelerator: str | None = None, size_class: str | None = None
) -> dict[GroupKey, dict[int, int]]:
    t = tenant_mfu_bins
    query = select(t.c.accelerator, t.c.size_class, t.c.mfu_bin, t.c.n_runs).where(
        t.c.tenant == tenant, t.c.n_runs > 0
    )
    if accelerator is not None:
        query = query.where(t.c.accelerator == accelerator)
    if size_class is not None:
        query = query.where(t.c.size_class == size_class)
    return _group(connection, query)


def _group(connection: Connection, query: Select[Any]) -> dict[GroupKey, dict[int, int]]:
    """Rows (accelerator, size class, bin, runs) grouped by (accelerator, size class). Read straight
    from the driver's cursor (plain strings and integers, nothing to convert): the fleet histogram
    can be ~100,000 rows, and building Row objects for them would take longer than the query."""
    cursor = connection.execute(query).cursor
    assert cursor is not None
    groups: dict[GroupKey, dict[int, int]] = {}
    for accelerator, size_class, mfu_bin, n in cursor.fetchall():
        key = (accelerator, size_class)
        group = groups.get(key)
        if group is None:
            group = groups[key] = {}
        group[mfu_bin] = n
    return groups


# --------------------------------------------------------------------------------------------------
# Calibration observations

#: Most runs one calibration fit reads (the most recent ones).
CALIBRATION_MAX_RUNS = 500
#: How far back a calibration read looks: the most recent runs recorded (fleet-wide: by any tenant on
#: any accelerator, a primary-key range; one tenant: its runs on the accelerator, by start time).
#: Bounds the rows a read examines whatever the size of the table.
CALIBRATION_SCAN_RUNS = 20_000


@dataclass(frozen=True, slots=True)
class CalibrationObservation:
    """One measured run as a calibration fit needs it: the description as given (``spec``: model,
    hardware, parallelism, global batch) and its median MFU under ``convention``. Carries no id and
    no tenant: fleet-wide observations only ever leave the service as fitted constants."""

    spec: dict[str, Any]
    precision: str
    seq_len_tokens: int
    device_count: int
    convention: str
    median_mfu: float


def calibration_observations(
    connection: Connection,
    *,
    accelerator: str,
    tenant: str | None,
    limit: int = CALIBRATION_MAX_RUNS,
    scan: int = CALIBRATION_SCAN_RUNS,
) -> list[CalibrationObservation]:
    """The most recent runs on ``accelerator`` (a catalog id) that have a median MFU in (0, 1] and
    record what a step prediction needs beyond the model: a micro-batch size and a global batch of
    whole sequences. ``tenant`` None: across tenants (fleet-wide; caller-described parts never
    count, their peaks are their owners'); else that tenant's runs only.

    Bounded twice: at most ``limit`` runs come back, and at most the ``scan`` most recent runs are
    looked at (fleet-wide: the last ``scan`` primary keys, a range scan; one tenant: its last
    ``scan`` runs on the accelerator, read from the (tenant, accelerator, started_at) index)."""
    if tenant is None and accelerator == CUSTOM_ACCELERATOR:
        return []
    c = runs.c
    micro_batch = c.spec[("parallelism", "micro_batch_sequences")].as_integer()
    usable = (
        c.median_mfu > 0,
        c.median_mfu <= 1,
        c.global_batch_tokens % c.seq_len_tokens == 0,
        micro_batch.is_not(None),
    )
    columns = (c.spec, c.precision, c.seq_len_tokens, c.device_count, c.convention, c.median_mfu)
    if tenant is None:
        newest = connection.execute(select(func.max(c.pk))).scalar_one_or_none()
        if newest is None:
            return []
        query = (
            select(*columns)
            .where(c.pk > newest - scan, c.accelerator == accelerator, *usable)
            .order_by(c.pk.desc())
        )
    else:
        # The tenant's last ``scan`` runs on the accelerator first (from the index, materialised by
        # the LIMIT), then their rows by primary key: the filters never widen the read.
        recent = (
            select(c.pk, c.started_at)
            .where(c.tenant == tenant, c.accelerator == accelerator)
            .order_by(c.started_at.desc())
            .limit(scan)
            .subquery("recent")
        )
        query = (
            select(*columns)
            .select_from(recent.join(runs, runs.c.pk == recent.c.pk))
            .where(*usable)
            .order_by(recent.c.started_at.desc(), recent.c.pk.desc())
        )
    return [CalibrationObservation(*row) for row in connection.execute(query.limit(limit))]


# --------------------------------------------------------------------------------------------------
# Idempotency keys


@dataclass(frozen=True, slots=True)
class IdempotencyRecord:
    operation: str
    request_hash: str
    state: str
    response_status: int | None
    response_body: str | None
    claimed_at: datetime


def claim_idempotency_key(
    connection: Connection, *, tenant: str, key: str, operation: str, request_hash: str, now: datetime
) -> bool:
    """Record ``key`` as in flight; False when the tenant already has a record for it.

    The insert either wins or meets the primary key (IntegrityError, turned into False): the database
    decides between replicas. Run it in its own short transaction, committed before the work.
    """
    try:
        with connection.begin_nested():
            connection.execute(
                insert(idempotency_keys).values(
                    tenant=tenant,
                    key=key,
                    operation=operation,
                    request_hash=request_hash,
                    state="in_flight",
                    created_at=now,
                    claimed_at=now,
                )
            )
    except IntegrityError:
        return False
    return True


def get_idempotency_record(connection: Connection, *, tenant: str, key: str) -> IdempotencyRecord | None:
    t = idempotency_keys
    row = connection.execute(
        select(
            t.c.operation, t.c.request_hash, t.c.state, t.c.response_status, t.c.response_body, t.c.claimed_at
        ).where(t.c.tenant == tenant, t.c.key == key)
    ).first()
    if row is None:
        return None
    return IdempotencyRecord(*row)


def reclaim_idempotency_key(
    connection: Connection,
    *,
    tenant: str,
    key: str,
    request_hash: str,
    stale_before: datetime,
    now: datetime,
) -> bool:
    """Take over an in-flight record for the same request whose holder went away (claimed before
    ``stale_before``: its process died and nothing of it was committed). Compare-and-set: of two
    takers only one wins."""
    t = idempotency_keys
    result = connection.execute(
        update(t)
        .where(
            t.c.tenant == tenant,
            t.c.key == key,
            t.c.request_hash == request_hash,
            t.c.state == "in_flight",
            t.c.claimed_at < stale_before,
        )
        .values(claimed_at=now)
    )
    return bool(result.rowcount)


def complete_idempotency_key(
    connection: Connection, *, tenant: str, key: str, response_status: int, response_body: str
) -> None:
    t = idempotency_keys
    connection.execute(
        update(t)
        .where(t.c.tenant == tenant, t.c.key == key)
        .values(state="done", response_status=response_status, response_body=response_body)
    )


def release_idempotency_key(connection: Connection, *, tenant: str, key: str) -> None:
    """Forget an in-flight claim whose request failed (a retry then runs it again)."""
    t = idempotency_keys
    connection.execute(delete(t).where(t.c.tenant == tenant, t.c.key == key, t.c.state == "in_flight"))


def purge_idempotency_keys(connection: Connection, *, created_before: datetime) -> None:
    """Forget every tenant's keys older than the retention (housekeeping on each claim)."""
    t = idempotency_keys
    connection.execute(delete(t).where(t.c.created_at < created_before))
