"""Engine set-up: one engine per URL, with the pragmas and pool each database needs.

SQLite (the embedded default): WAL journal so readers never block the writer, foreign keys on, a busy
timeout, and write transactions that take the write lock when they begin (``BEGIN IMMEDIATE``): a
deferred transaction that reads first and writes later can fail with "database is locked" when
another writer got there in between; an immediate one waits on the busy timeout instead.

PostgreSQL (several replicas): psycopg 3 with a bounded pool and pre-ping, so a server that went away
and came back is reconnected without a restart. The server process's engine also has deadlines
(``statement_timeout_ms``), so that a database that stops answering (a network black hole, a hung
host) is an error within seconds, not a wait as long as TCP's:

* ``connect_timeout``: opening a connection, TCP and start-up, takes at most that;
* ``statement_timeout`` on every session: the server cancels a statement that runs longer;
* TCP keepalives (``keepalives_idle`` 5 s, 3 probes 2 s apart) and ``tcp_user_timeout``: the kernel
  drops a connection whose peer vanished (no answer to probes, or unacknowledged data);
* a watchdog: a call into the driver (a statement, the pool's ping, COMMIT, ROLLBACK) still without
  an answer one second after the statement timeout has its socket shut down, so the call fails at
  once (the server's cancellation cannot arrive when the server cannot be reached, and keepalives
  are answered by whatever holds the other end of a half-dead connection: a proxy, a NAT).

A connection whose call was cut is invalidated by SQLAlchemy and the request answers 503 (service.api
.handlers). Every engine hides SQL parameters in its error messages (``hide_parameters``): they
carry tenants' data and key digests, and tracebacks go to the logs.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url

# Execution option that marks a connection as a writer (see _sqlite_begin).
WRITE_OPTION = "teff_write"
# How often a connection waiting to switch a new file to WAL tries again (see _enable_wal).
_WAL_RETRY_SECONDS = 0.02
# What the watchdog allows past the statement timeout: the server's own cancellation comes first.
_WATCHDOG_GRACE_MS = 1000
# How often the watchdog looks (its precision).
_WATCHDOG_POLL_SECONDS = 0.25


def build_engine(
    url: str,
    *,
    pool_size: int = 10,
    busy_timeout_ms: int = 30_000,
    statement_timeout_ms: int | None = None,
    connect_timeout_seconds: int = 5,
    pool_timeout_seconds: float = 10,
) -> Engine:
    """``statement_timeout_ms``: PostgreSQL's statement timeout and the watchdog's limit (that plus a
    second); None (the CLI's and the migrations' engines: an index build may take minutes): neither."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(
            url,
            pool_size=pool_size,
            busy_timeout_ms=busy_timeout_ms,
            pool_timeout_seconds=pool_timeout_seconds,
        )
    connect_args: dict[str, Any] = {
        "connect_timeout": connect_timeout_seconds,
        # libpq's TCP keepalives: a peer silent for 5 s is probed every 2 s, dropped after 3 misses.
        "keepalives": 1,
        "keepalives_idle": 5,
        "keepalives_interval": 2,
        "keepalives_count": 3,
    }
    if statement_timeout_ms is not None:
        connect_args["options"] = f"-c statement_timeout={int(statement_timeout_ms)}"
        # Data sent and unacknowledged this long drops the connection (Linux TCP_USER_TIMEOUT, ms).
        connect_args["tcp_user_timeout"] = int(statement_timeout_ms) + _WATCHDOG_GRACE_MS
    engine = create_engine(
        url,
        pool_size=pool_size,
        max_overflow=max_connections(pool_size) - pool_size,
        pool_pre_ping=True,
        pool_recycle=1800,
        pool_timeout=pool_timeout_seconds,
        connect_args=connect_args,
        hide_parameters=True,
    )
    if statement_timeout_ms is not None:
        _guard_driver_calls(engine, (statement_timeout_ms + _WATCHDOG_GRACE_MS) / 1000)
    return engine


def max_connections(pool_size: int) -> int:
    """Connections one engine opens at most (its pool plus as many overflow)."""
    return 2 * pool_size


def _sqlite_engine(url: str, *, pool_size: int, busy_timeout_ms: int, pool_timeout_seconds: float) -> Engine:
    database = make_url(url).database
    if database and database != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": busy_timeout_ms / 1000},
        pool_pre_ping=False,
        pool_size=pool_size,
        max_overflow=max_connections(pool_size) - pool_size,
        pool_timeout=pool_timeout_seconds,
        hide_parameters=True,
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


class _Watchdog:
    """Shuts down the socket of a driver call that outlived its limit (one thread for the process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._armed: dict[int, tuple[float, int]] = {}  # id(DBAPI connection) -> (deadline, socket fd)
        self._thread: threading.Thread | None = None

    def arm(self, dbapi_connection: Any, limit_seconds: float) -> bool:
        """Watch the connection; False (and nothing to disarm) when it is not psycopg's, or when an
        outer call already watches it (a pipeline's statements: the pipeline's deadline holds)."""
        try:
            fd = int(dbapi_connection.pgconn.socket)
        except Exception:  # closed, or not psycopg: nothing to watch
            return False
        with self._lock:
            if id(dbapi_connection) in self._armed:
                return False
            self._armed[id(dbapi_connection)] = (time.monotonic() + limit_seconds, fd)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="teff-db-watchdog", daemon=True)
                self._thread.start()
        return True

    def disarm(self, dbapi_connection: Any) -> None:
        # Always before the connection can be closed (the call returned or raised), so the watchdog,
        # which cuts under the same lock, never touches a descriptor number reused by another socket.
        with self._lock:
            self._armed.pop(id(dbapi_connection), None)

    def _run(self) -> None:
        while True:
            time.sleep(_WATCHDOG_POLL_SECONDS)
            now = time.monotonic()
            with self._lock:
                for key, (deadline, fd) in list(self._armed.items()):
                    if deadline <= now:
                        del self._armed[key]
                        _shut_down(fd)


def _shut_down(fd: int) -> None:
    """Shut the socket down (both ways): the blocked driver call sees the connection end and fails.
    On a duplicate descriptor, so that the driver's own stays valid until it closes it."""
    with contextlib.suppress(OSError):
        duplicate = socket.socket(fileno=os.dup(fd))
        try:
            duplicate.shutdown(socket.SHUT_RDWR)
        finally:
            duplicate.close()


_WATCHDOG = _Watchdog()


#: The watchdog's limit per engine that has one (see driver_call_deadline).
_DRIVER_CALL_LIMITS: weakref.WeakKeyDictionary[Engine, float] = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def driver_call_deadline(connection: Connection) -> Iterator[None]:
    """Calls the store makes straight into the driver (COPY, pipelines: service.store.pipeline),
    watched as SQLAlchemy's own are: cut when they outlive the engine's statement timeout."""
    limit = _DRIVER_CALL_LIMITS.get(connection.engine)
    dbapi_connection = connection.connection.dbapi_connection
    armed = limit is not None and _WATCHDOG.arm(dbapi_connection, limit)
    try:
        yield
    finally:
        if armed:
            _WATCHDOG.disarm(dbapi_connection)


def _guard_driver_calls(engine: Engine, limit_seconds: float) -> None:
    """Every blocking call SQLAlchemy makes into the driver goes through these dialect methods (the
    store's own calls: driver_call_deadline)."""
    _DRIVER_CALL_LIMITS[engine] = limit_seconds
    dialect = engine.dialect

    def on_connection(method: Callable[..., Any]) -> Callable[..., Any]:
        def guarded(dbapi_connection: Any, *args: Any) -> Any:
            armed = _WATCHDOG.arm(dbapi_connection, limit_seconds)
            try:
                return method(dbapi_connection, *args)
            finally:
                if armed:
                    _WATCHDOG.disarm(dbapi_connection)

        return guarded

    def on_cursor(method: Callable[..., Any]) -> Callable[..., Any]:
        def guarded(cursor: Any, *args: Any) -> Any:
            connection = cursor.connection
            armed = _WATCHDOG.arm(connection, limit_seconds)
            try:
                return method(cursor, *args)
            finally:
                if armed:
                    _WATCHDOG.disarm(connection)

        return guarded

    dialect.do_ping = on_connection(dialect.do_ping)  # type: ignore[method-assign]
    dialect.do_commit = on_connection(dialect.do_commit)  # type: ignore[method-assign]
    dialect.do_rollback = on_connection(dialect.do_rollback)  # type: ignore[method-assign]
    dialect.do_execute = on_cursor(dialect.do_execute)  # type: ignore[method-assign]
    dialect.do_executemany = on_cursor(dialect.do_executemany)  # type: ignore[method-assign]
    dialect.do_execute_no_params = on_cursor(dialect.do_execute_no_params)  # type: ignore[method-assign]
