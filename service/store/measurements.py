"""Measurements: their stored encodings, the bulk insert (multi-row INSERTs on SQLite, COPY on
PostgreSQL), and the reads of a run's history (pages, step ranges, points, step buckets).
"""

from __future__ import annotations

import itertools
import operator
import sqlite3
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

import orjson
from sqlalchemy import Connection, Row, func, insert, select
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect

from service.store.pipeline import driver_errors, in_pipeline
from service.store.tables import measurements
from service.store.upserts import _SQLITE_DIALECT, _DriverInsert, _multirow


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


def measurement_parameters(dialect: Dialect, values: Sequence[tuple[Any, ...]]) -> list[Sequence[Any]]:
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
    parameters: list[Sequence[Any]] = []
    for row, text in zip(values, times, strict=True):
        # A list with the time replaced: about 4x cheaper than building a tuple around it.
        row_parameters = list(row)
        row_parameters[at] = text
        parameters.append(row_parameters)
    return parameters


def insert_measurements(
    connection: Connection,
    *,
    rows: Sequence[dict[str, Any]] = (),
    parameters: Sequence[Sequence[Any]] | None = None,
) -> None:
    """Insert measurement rows in one go at the driver: 10,000 rows per request would otherwise
    spend most of their time in SQLAlchemy's per-row parameter handling. SQLite: multi-row INSERTs;
    PostgreSQL: COPY, or inside a pipeline an executemany that rides it. ``parameters`` (from
    :func:`measurement_parameters`) replace ``rows``."""
    if parameters is None:
        parameters = measurement_parameters(connection.dialect, measurement_values(rows))
    if not parameters:
        return
    if connection.dialect.name == "postgresql":
        if in_pipeline(connection):  # COPY cannot be pipelined; a few rows ride the pipeline instead
            connection.exec_driver_sql(_POSTGRESQL_INSERT, list(parameters))
        else:
            _copy_measurements(connection, parameters)
        return
    # Multi-row INSERTs of as many rows as SQLite takes parameters for (1,820 rows at its default of
    # 32,766) rather than an executemany: the sqlite3 module releases the GIL around every step, and
    # retaking it costs up to a switch interval (5 ms) while other threads run Python; the fewer the
    # statements, the fewer the waits.
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
