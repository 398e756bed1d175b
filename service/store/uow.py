"""Unit of work: the one door to a database transaction (cosmicpython ch. 6).

``with UnitOfWork(engine, write=True) as uow: ...; uow.commit()`` — anything not committed is
rolled back when the block ends, so a request that fails half-way writes nothing. Write units take
SQLite's write lock at BEGIN (see engine.py); read units never block writers.

``UnitOfWork(engine, write=True, wait=False)`` never waits for the write lock: it raises
:class:`WriteLockBusy` at once when another thread or process holds it (for callers on an event loop,
which must not block; see group_commit).

SQLite admits one writer at a time. Threads of one process that wait for it inside SQLite sleep in
its busy handler (1 ms, 2 ms, 5 ms … up to 100 ms steps), so under concurrent writes most of the
time goes to sleeping, not writing. Write units on a SQLite engine therefore queue on a per-engine
lock in the process first and hand over at once; SQLite's own lock and busy timeout still arbitrate
between processes (several workers, the CLI).
"""

from __future__ import annotations

import threading
import weakref
from types import TracebackType

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import IntegrityError, OperationalError

from service.store.engine import WRITE_OPTION

#: The handles the layers above the store hold without using SQL themselves: one database (the app's
#: engine, made by its lifespan) and one open transaction's connection (a unit of work's).
Database = Engine
Transaction = Connection
#: A write a table's constraint refused (a unique key taken by another writer): the transaction is spent.
ConstraintViolation = IntegrityError


class WriteLockBusy(Exception):
    """A no-wait write unit of work found the write lock held (by this process or another)."""


_sqlite_writer_locks: weakref.WeakKeyDictionary[Engine, threading.Lock] = weakref.WeakKeyDictionary()
_registry_lock = threading.Lock()


def _writer_lock(engine: Engine) -> threading.Lock | None:
    if engine.dialect.name != "sqlite":
        return None
    with _registry_lock:
        lock = _sqlite_writer_locks.get(engine)
        if lock is None:
            lock = _sqlite_writer_locks[engine] = threading.Lock()
        return lock


class UnitOfWork:
    def __init__(
        self, engine: Engine, *, write: bool, wait: bool = True, connection: Connection | None = None
    ) -> None:
        """``connection``: one the caller holds, used (and left open) instead of one from the pool."""
        self._engine = engine
        self._write = write
        self._wait = wait
        self._own = connection
        self._restore_busy_timeout_ms: int | None = None
        self._connection: Connection | None = None
        self._committed = False
        self._held: threading.Lock | None = None

    @property
    def connection(self) -> Connection:
        if self._connection is None:
            raise RuntimeError("unit of work used outside its `with` block")
        return self._connection

    def __enter__(self) -> UnitOfWork:
        if self._write:
            lock = _writer_lock(self._engine)
            if lock is not None:
                if not lock.acquire(blocking=self._wait):
                    raise WriteLockBusy("another thread of this process is writing")
                self._held = lock
        connection: Connection | None = None
        try:
            connection = self._own if self._own is not None else self._engine.connect()
            if self._write:
                connection = connection.execution_options(**{WRITE_OPTION: True})
            if not self._wait and self._held is not None:
                self._restore_busy_timeout_ms = _set_busy_timeout(connection, 0)
            connection.begin()
        except BaseException as exc:
            if connection is not None:
                self._close(connection)
            self._release()
            if isinstance(exc, OperationalError) and not self._wait and "locked" in str(exc):
                raise WriteLockBusy("another process holds the database write lock") from exc
            raise
        self._connection = connection
        return self

    def commit(self) -> None:
        self.connection.commit()
        self._committed = True

    def _release(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.release()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        connection = self._connection
        self._connection = None
        try:
            if connection is not None:
                self._close(connection)
        finally:
            self._release()

    def _close(self, connection: Connection) -> None:
        try:
            if connection.in_transaction():
                connection.rollback()
            if self._restore_busy_timeout_ms is not None:
                _set_busy_timeout(connection, self._restore_busy_timeout_ms)
                self._restore_busy_timeout_ms = None
        finally:
            if self._own is None:
                connection.close()


def _set_busy_timeout(connection: Connection, milliseconds: int) -> int:
    """Set a SQLite connection's busy timeout, outside any transaction; returns the previous one.
    Through the driver: these are two pragmas on a hot path, and SQLAlchemy's execution costs ten
    times SQLite's here."""
    driver = connection.connection.driver_connection
    assert driver is not None
    (previous,) = driver.execute("PRAGMA busy_timeout").fetchone()
    driver.execute(f"PRAGMA busy_timeout={int(milliseconds)}")
    return int(previous)
