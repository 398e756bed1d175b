from __future__ import annotations

import sqlite3
import threading
import time
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import Engine, insert, select, text
from sqlalchemy.exc import OperationalError

from service.store.tables import api_keys
from service.store.uow import UnitOfWork


def test_sqlite_runs_in_wal_mode_with_foreign_keys(sqlite_url: str) -> None:
    from service.store.engine import build_engine

    engine = build_engine(sqlite_url)
    with engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
    engine.dispose()


def test_a_new_file_switches_to_wal_once_another_writer_lets_go(tmp_path: Path) -> None:
    """SQLite refuses the switch to WAL at once, without its busy handler, while another connection
    holds the write lock on a file still in rollback-journal mode (two `teff db upgrade` on a new
    file): the connection waits for it like a busy timeout instead of failing."""
    from service.store.engine import build_engine

    path = tmp_path / "new.db"
    other_writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other_writer.execute("BEGIN IMMEDIATE")
    other_writer.execute("CREATE TABLE first_writer (x INTEGER)")
    release = threading.Timer(0.3, lambda: other_writer.execute("COMMIT"))
    release.start()
    engine = build_engine(f"sqlite:///{path}", busy_timeout_ms=10_000)
    try:
        started = time.monotonic()
        with engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert connection.exec_driver_sql("SELECT count(*) FROM first_writer").scalar() == 0
        assert time.monotonic() - started >= 0.2  # it did wait for the other writer
    finally:
        release.join()
        engine.dispose()
        other_writer.close()


def test_the_switch_to_wal_gives_up_after_the_busy_timeout(tmp_path: Path) -> None:
    from service.store.engine import build_engine

    path = tmp_path / "new.db"
    other_writer = sqlite3.connect(path, isolation_level=None)
    other_writer.execute("BEGIN IMMEDIATE")
    other_writer.execute("CREATE TABLE first_writer (x INTEGER)")
    engine = build_engine(f"sqlite:///{path}", busy_timeout_ms=200)
    try:
        with pytest.raises(OperationalError, match="locked"):
            engine.connect()
    finally:
        engine.dispose()
        other_writer.execute("ROLLBACK")
        other_writer.close()


def _key_row(prefix: str, created_at: datetime) -> dict[str, object]:
    return {
        "prefix": prefix,
        "key_hash": "0" * 64,
        "tenant": "t",
        "name": "",
        "scopes": "read",
        "created_at": created_at,
    }


def test_timestamps_come_back_timezone_aware_in_utc(engine: Engine) -> None:
    written = datetime(2026, 5, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    with UnitOfWork(engine, write=True) as uow:
        uow.connection.execute(insert(api_keys).values(**_key_row("p1", written)))
        uow.commit()
    with UnitOfWork(engine, write=False) as uow:
        read = uow.connection.execute(select(api_keys.c.created_at)).scalar_one()
    assert read.tzinfo is not None
    assert read.utcoffset() == timedelta(0)
    assert read == written


def test_a_unit_of_work_that_is_not_committed_writes_nothing(engine: Engine) -> None:
    with UnitOfWork(engine, write=True) as uow:
        uow.connection.execute(insert(api_keys).values(**_key_row("p2", datetime.now(UTC))))
    with UnitOfWork(engine, write=False) as uow:
        assert uow.connection.execute(text("SELECT count(*) FROM api_keys")).scalar_one() == 0


def test_concurrent_read_then_write_transactions_never_see_database_is_locked(engine: Engine) -> None:
    # Each writer reads the count, then inserts: the pattern that fails with "database is locked"
    # on SQLite when transactions start deferred.
    errors: list[BaseException] = []

    def writer(worker: int) -> None:
        try:
            for index in range(15):
                with UnitOfWork(engine, write=True) as uow:
                    uow.connection.execute(text("SELECT count(*) FROM api_keys")).scalar_one()
                    uow.connection.execute(
                        insert(api_keys).values(**_key_row(f"w{worker}-{index}", datetime.now(UTC)))
                    )
                    uow.commit()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(worker,)) for worker in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with UnitOfWork(engine, write=False) as uow:
        assert uow.connection.execute(text("SELECT count(*) FROM api_keys")).scalar_one() == 90
