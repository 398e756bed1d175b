"""Unit of work: the one door to a database transaction (cosmicpython ch. 6).

``with UnitOfWork(engine, write=True) as uow: ...; uow.commit()`` — anything not committed is
rolled back when the block ends, so a request that fails half-way writes nothing. Write units take
SQLite's write lock at BEGIN (see engine.py); read units never block writers.

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

from service.store.engine import WRITE_OPTION

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
    def __init__(self, engine: Engine, *, write: bool) -> None:
        self._engine = engine
        self._write = write
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
            self._held = _writer_lock(self._engine)
            if self._held is not None:
                self._held.acquire()
        try:
            connection = self._engine.connect()
            if self._write:
                connection = connection.execution_options(**{WRITE_OPTION: True})
            connection.begin()
        except BaseException:
            self._release()
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
            if connection is None:
                return
            try:
                if connection.in_transaction():
                    connection.rollback()
            finally:
                connection.close()
        finally:
            self._release()
