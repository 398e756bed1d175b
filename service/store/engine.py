"""Engine set-up: one engine per URL, with the pragmas and pool each database needs.

SQLite (the embedded default): WAL journal so readers never block the writer, foreign keys on, a busy
timeout, and write transactions that take the write lock when they begin (``BEGIN IMMEDIATE``): a
deferred transaction that reads first and writes later can fail with "database is locked" when
another writer got there in between; an immediate one waits on the busy timeout instead.

PostgreSQL (several replicas): psycopg 3 with a bounded pool and pre-ping, so a server that went away
and came back is reconnected without a restart.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

# Execution option that marks a connection as a writer (see _sqlite_begin).
WRITE_OPTION = "teff_write"
# How often a connection waiting to switch a new file to WAL tries again (see _enable_wal).
_WAL_RETRY_SECONDS = 0.02


def build_engine(url: str, *, pool_size: int = 10, busy_timeout_ms: int = 30_000) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(url, pool_size=pool_size, busy_timeout_ms=busy_timeout_ms)
    return create_engine(
        url,
        pool_size=pool_size,
        max_overflow=max_connections(pool_size) - pool_size,
        pool_pre_ping=True,
        pool_recycle=1800,
        pool_timeout=10,
        connect_args={"connect_timeout": 5},
    )


def max_connections(pool_size: int) -> int:
    """Connections one engine opens at most (its pool plus as many overflow)."""
    return 2 * pool_size


def _sqlite_engine(url: str, *, pool_size: int, busy_timeout_ms: int) -> Engine:
    database = make_url(url).database
    if database and database != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": busy_timeout_ms / 1000},
        pool_pre_ping=False,
        pool_size=pool_size,
        max_overflow=max_connections(pool_size) - pool_size,
        pool_timeout=10,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event issue BEGIN itself (pysqlite's implicit BEGIN is deferred).
        dbapi_connection.isolation_level = None
        _enable_wal(dbapi_connection, busy_timeout_ms)
        cursor = dbapi_connection.cursor()
        # NORMAL in WAL mode: a committed transaction survives a process crash (SIGKILL);
        # only an OS crash or power loss can roll back the last transactions.
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _sqlite_begin(connection: Any) -> None:
        mode = "IMMEDIATE" if connection.get_execution_options().get(WRITE_OPTION) else "DEFERRED"
        connection.exec_driver_sql(f"BEGIN {mode}")

    return engine


def _enable_wal(dbapi_connection: sqlite3.Connection, busy_timeout_ms: int) -> None:
    """Switch the file to WAL, waiting as a busy timeout would.

    The switch needs the exclusive lock, and SQLite answers "database is locked" at once, without
    calling its busy handler, while another connection holds the write lock on a file still in
    rollback-journal mode: two instances running `teff db upgrade` on a new file hit exactly that.
    WAL persists in the file, so only the first connections to a new database ever wait here.
    """
    deadline = time.monotonic() + busy_timeout_ms / 1000
    while True:
        try:
            dbapi_connection.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() >= deadline:
                raise
            time.sleep(_WAL_RETRY_SECONDS)
