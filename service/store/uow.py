"""Unit of work: the one door to a database transaction (cosmicpython ch. 6).

``with UnitOfWork(engine, write=True) as uow: ...; uow.commit()`` — anything not committed is
rolled back when the block ends, so a request that fails half-way writes nothing. Write units take
SQLite's write lock at BEGIN (see engine.py); read units never block writers.
"""

from __future__ import annotations

from types import TracebackType

from sqlalchemy import Connection, Engine

from service.store.engine import WRITE_OPTION


class UnitOfWork:
    def __init__(self, engine: Engine, *, write: bool) -> None:
        self._engine = engine
        self._write = write
        self._connection: Connection | None = None
        self._committed = False

    @property
    def connection(self) -> Connection:
        if self._connection is None:
            raise RuntimeError("unit of work used outside its `with` block")
        return self._connection

    def __enter__(self) -> UnitOfWork:
        connection = self._engine.connect()
        if self._write:
            connection = connection.execution_options(**{WRITE_OPTION: True})
        connection.begin()
        self._connection = connection
        return self

    def commit(self) -> None:
        self.connection.commit()
        self._committed = True

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        connection = self._connection
        self._connection = None
        if connection is None:
            return
        try:
            if connection.in_transaction():
                connection.rollback()
        finally:
            connection.close()
