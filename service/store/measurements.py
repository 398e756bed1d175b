"""Measurements: their stored encodings, the bulk insert (multi-row INSERTs on SQLite, COPY on
PostgreSQL), and the reads of a run's history (pages, step ranges, points, step buckets).
"""

from __future__ import annotations

import itertools
import operator
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

import orjson
from sqlalchemy import Connection, Row, func, select
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect

from service.store.pipeline import driver_errors, in_pipeline
from service.store.tables import measurements


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
    """:func:`_sqlite_time` of each, in bulk (ingest binds up to 10,000 a request). orjson writes a UTC time as RFC 3339 text, ``YYYY-MM-DDTHH:MM:SS[.ffffff]Z``, in
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


@dataclass(frozen=True, slots=True)
class MeasurementParameters:
    """Measurements as :func:`insert_measurements` sends them to the driver, ``per_row`` values a row
    in one flat list: on PostgreSQL one value tuple a row (what COPY writes), on SQLite the row's
    column values themselves, times as text. One list rather than a container per row: a
    10,000-row request would otherwise hold 10,000 more objects for the garbage collector to
    traverse while it waits for the writer."""

    values: list[Any]
    per_row: int

    def __len__(self) -> int:
        return len(self.values) // self.per_row

    def rows_at(self, indices: Iterable[int]) -> MeasurementParameters:
        """Only the rows at ``indices``, in their order."""
        width = self.per_row
        flat = self.values
        return MeasurementParameters(
            list(
                itertools.chain.from_iterable(flat[index * width : (index + 1) * width] for index in indices)
            ),
            width,
        )

    @staticmethod
    def joined(parts: Sequence[MeasurementParameters]) -> MeasurementParameters:
        """The rows of ``parts`` (of one dialect), one part after the other."""
        if len(parts) == 1:
            return parts[0]
        width = parts[0].per_row if parts else 1
        return MeasurementParameters(
            list(itertools.chain.from_iterable(part.values for part in parts)), width
        )


def measurement_parameters(dialect: Dialect, values: Sequence[tuple[Any, ...]]) -> MeasurementParameters:
    """The driver's parameters for measurements given as value tuples (``MEASUREMENT_COLUMNS`` order,
    times tz-aware): what :func:`insert_measurements` sends. Made apart so that a caller can build them
    before it takes the write lock (ingest does, in the request's thread)."""
    if dialect.name == "postgresql":  # COPY takes the table's column order: the tuples as they are
        if any(row[MEASURED_AT].tzinfo is None for row in values):
            raise ValueError("naive datetime given; timestamps must be timezone-aware")
        return MeasurementParameters(list(values), 1)
    width = len(MEASUREMENT_COLUMNS)
    flat = list(itertools.chain.from_iterable(values))
    flat[MEASURED_AT::width] = _sqlite_times(flat[MEASURED_AT::width])
    return MeasurementParameters(flat, width)


def insert_measurements(
    connection: Connection,
    *,
    rows: Sequence[dict[str, Any]] = (),
    parameters: MeasurementParameters | None = None,
) -> None:
    """Insert measurement rows in one go at the driver: 10,000 rows per request would otherwise
    spend most of their time in SQLAlchemy's per-row parameter handling. SQLite: multi-row INSERTs;
    PostgreSQL: COPY, or inside a pipeline an executemany that rides it. ``parameters`` (from
    :func:`measurement_parameters`) replace ``rows``."""
    if parameters is None:
        parameters = measurement_parameters(connection.dialect, measurement_values(rows))
    if not parameters.values:
        return
    if connection.dialect.name == "postgresql":
        if in_pipeline(connection):  # COPY cannot be pipelined; a few rows ride the pipeline instead
            connection.exec_driver_sql(_POSTGRESQL_INSERT, parameters.values)
        else:
            _copy_measurements(connection, parameters.values)
        return
    # Multi-row INSERTs of as many rows as SQLite takes parameters for, rather than an executemany:
    # the sqlite3 module releases the GIL around every step, and retaking it costs up to a switch
    # interval (5 ms) while other threads run Python; the fewer the statements, the fewer the waits.
    columns, values = _sqlite_columns_with_values(parameters.values)
    driver = connection.connection.driver_connection
    assert isinstance(driver, sqlite3.Connection)
    width = len(columns)
    rows_per_insert = max(1, driver.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // width)
    for start in range(0, len(parameters), rows_per_insert):
        row_count = min(rows_per_insert, len(parameters) - start)
        connection.exec_driver_sql(
            _sqlite_insert(columns, row_count), tuple(values[start * width : (start + row_count) * width])
        )


def _sqlite_columns_with_values(flat: list[Any]) -> tuple[tuple[str, ...], list[Any]]:
    """Of rows given as their values one after the other, the columns that hold a value in at least
    one row, and the rows' values of those columns, row after row. A column that is NULL in every
    row is left out of the INSERT (it defaults to NULL): the sqlite3 module binds None only after
    looking for an adapter for it (two failed attribute lookups per value), which makes a typical
    row, most of whose optional fields are absent, cost about twice what its values do. Columns are
    sliced out of the flat list in C rather than read row by row."""
    width = len(MEASUREMENT_COLUMNS)
    row_count = len(flat) // width
    by_column = [flat[index::width] for index in range(width)]
    # A column's first value decides most columns without a scan (count() compares every value).
    kept = [
        index
        for index, column in enumerate(by_column)
        if column[0] is not None or column.count(None) != row_count
    ]
    if len(kept) == width:
        return MEASUREMENT_COLUMNS, flat
    values: list[Any] = [None] * (len(kept) * row_count)
    for position, index in enumerate(kept):
        values[position :: len(kept)] = by_column[index]
    return tuple(MEASUREMENT_COLUMNS[index] for index in kept), values


@lru_cache(maxsize=64)
def _sqlite_insert(columns: tuple[str, ...], row_count: int) -> str:
    """INSERT of ``row_count`` rows of ``columns`` (a cache of a few shapes: the sqlite3 module also
    caches the statements it prepared from these texts)."""
    group = f"({', '.join(['?'] * len(columns))})"
    return (
        f"INSERT INTO measurements ({', '.join(columns)}) "  # nosec B608: column names only
        f"VALUES {', '.join([group] * row_count)}"
    )


_COPY_MEASUREMENTS = f"COPY measurements ({', '.join(MEASUREMENT_COLUMNS)}) FROM STDIN (FORMAT BINARY)"
#: PostgreSQL's name of each SQL type the measurements table uses, as psycopg's binary COPY is told
#: them (binary rows carry no types: each value must be dumped as its column's exact type).
_POSTGRESQL_TYPE_NAMES = {
    "INTEGER": "int4",
    "BIGINT": "int8",
    "DOUBLE PRECISION": "float8",
    "TIMESTAMP WITH TIME ZONE": "timestamptz",
    "VARCHAR": "varchar",
}


@lru_cache(maxsize=1)
def copy_column_types() -> tuple[str, ...]:
    """The PostgreSQL type of each measurements column, in ``MEASUREMENT_COLUMNS`` order, from the
    table's own definition (a test compares them with the migrated database's)."""
    dialect = postgresql.dialect()
    names = []
    for column in measurements.columns:
        sql_type = column.type.compile(dialect=dialect).split("(")[0]
        names.append(_POSTGRESQL_TYPE_NAMES[sql_type])
    return tuple(names)


_POSTGRESQL_INSERT = (
    f"INSERT INTO measurements ({', '.join(MEASUREMENT_COLUMNS)}) "  # nosec B608: column names only
    f"VALUES ({', '.join(['%s'] * len(MEASUREMENT_COLUMNS))})"
)
#: Rows up to which a batch's writes are pipelined (service.store.pipeline), its measurements by an
#: executemany; a larger batch is not pipelined and its measurements go by COPY: COPY's lead grows
#: with the rows, the round trip a statement costs does not.
PIPELINED_ROWS_MAX = 256


def _copy_measurements(connection: Connection, parameters: Sequence[Sequence[Any]]) -> None:
    """PostgreSQL: COPY the rows in (inside the unit of work's transaction); several times faster
    than an executemany of INSERTs. Binary COPY: psycopg packs numbers and times instead of writing
    them as text (a 10,000-row request: ~8 ms of CPU against ~40 ms, benchmarks/results)."""
    dbapi_connection: Any = connection.connection.dbapi_connection
    with (
        driver_errors(connection, _COPY_MEASUREMENTS),
        dbapi_connection.cursor() as cursor,
        cursor.copy(_COPY_MEASUREMENTS) as copy,
    ):
        copy.set_types(list(copy_column_types()))
        for values in parameters:
            copy.write_row(values)


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
