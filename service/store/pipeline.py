"""Several statements of a PostgreSQL transaction per round trip (psycopg's pipeline mode).

A batch of the ingest writer runs a handful of small statements; one at a time, each waits a round
trip for its answer, and on a loaded machine a round trip (waiting for the database's process to be
scheduled) costs more than the statement. Inside :func:`pipelined`, psycopg sends the statements
without waiting and reads every answer at the end; an ``executemany`` rides the same pipeline.
:func:`read_together` sends reads the same way and returns their rows. SQLite (in-process, no round
trips) runs the same calls one after the other.

What a pipeline cannot carry: COPY (libpq refuses it in pipeline mode), and anything that returns
rows through SQLAlchemy, a read or a single-row Core INSERT with its implicit RETURNING (SQLAlchemy
inspects a result as soon as the statement is sent, before the answer exists); the caller keeps
those outside :func:`pipelined`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from functools import lru_cache
from typing import Any

from sqlalchemy import CompoundSelect, Connection, Select
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import DBAPIError

from service.store.engine import driver_call_deadline

_POSTGRESQL = postgresql.psycopg.dialect()
#: What read_together reads.
Query = Select[Any] | CompoundSelect


@contextlib.contextmanager
def driver_errors(connection: Connection, statement: str) -> Iterator[None]:
    """Statements sent at the driver as SQLAlchemy's own: under the engine's watchdog, and their
    errors raised as SQLAlchemy raises them (an IntegrityError, an OperationalError), a lost
    connection marked invalidated, so the writer's reconnect (service.store.group_commit) and error
    handling see what they see for any statement."""
    driver_error = connection.dialect.loaded_dbapi.Error
    try:
        with driver_call_deadline(connection):
            yield
    except driver_error as exc:
        lost = connection.dialect.is_disconnect(exc, connection.connection.dbapi_connection, None)
        if lost:
            connection.invalidate(exc)
        raise DBAPIError.instance(statement, None, exc, driver_error, connection_invalidated=lost) from exc


@contextlib.contextmanager
def pipelined(connection: Connection, *, enabled: bool = True) -> Iterator[None]:
    """Writes inside are sent without waiting for each answer (PostgreSQL, when ``enabled``); the
    block's end waits for all of them and raises the first error. No reads inside (see the module's
    docstring)."""
    if connection.dialect.name != "postgresql" or not enabled:
        yield
        return
    driver: Any = connection.connection.driver_connection
    with driver_errors(connection, "pipelined writes"), driver.pipeline():
        yield


def in_pipeline(connection: Connection) -> bool:
    """Whether the connection's statements are being pipelined (PostgreSQL, inside :func:`pipelined`)."""
    if connection.dialect.name != "postgresql":
        return False
    driver: Any = connection.connection.driver_connection
    return bool(driver.info.pipeline_status)


@lru_cache(maxsize=32)
def _driver_sql(statement: Query) -> str:
    return str(statement.compile(dialect=_POSTGRESQL))


def read_together(
    connection: Connection, statements: Sequence[Query], parameters: Mapping[str, Any]
) -> list[list[tuple[Any, ...]]]:
    """The rows of each statement, all sent in one round trip on PostgreSQL (in order: a lock taken
    by the first holds for the later ones). Plain driver values: no SQLAlchemy type processing
    (timestamps as the driver returns them), so statements whose columns need it convert them."""
    if connection.dialect.name != "postgresql":
        return [
            [tuple(row) for row in connection.execute(statement, dict(parameters))]
            for statement in statements
        ]
    driver: Any = connection.connection.driver_connection
    with driver_errors(connection, "pipelined reads"), driver.pipeline():
        cursors = [driver.cursor() for _ in statements]
        for cursor, statement in zip(cursors, statements, strict=True):
            cursor.execute(_driver_sql(statement), parameters)
        try:
            return [cursor.fetchall() for cursor in cursors]
        finally:
            for cursor in cursors:
                cursor.close()
