"""Statements sent together (service.store.pipeline) on SQLite and PostgreSQL: reads return each
statement's own rows, pipelined writes commit (or fail) as SQLAlchemy's own do, and a connection lost
under a pipeline is reported as lost, so the writer reconnects."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, Integer, bindparam, func, insert, select, update
from sqlalchemy.exc import DBAPIError, IntegrityError

from service.store import migrate
from service.store.engine import build_engine
from service.store.pipeline import in_pipeline, pipelined, read_together
from service.store.tables import api_keys
from service.store.uow import UnitOfWork
from tests.support.tcp_proxy import proxied_engine

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def _key_row(prefix: str) -> dict[str, object]:
    return {
        "prefix": prefix,
        "key_hash": prefix.ljust(64, "0"),
        "tenant": "t",
        "name": "",
        "scopes": "read",
        "created_at": NOW,
    }


def _prefixes(engine: Engine) -> list[str]:
    with UnitOfWork(engine, write=False) as uow:
        return sorted(uow.connection.execute(select(api_keys.c.prefix)).scalars())


def test_reads_sent_together_return_each_statements_rows_in_order(engine: Engine) -> None:
    with UnitOfWork(engine, write=True) as uow:
        uow.connection.execute(insert(api_keys), [_key_row("r1"), _key_row("r2"), _key_row("r3")])
        uow.commit()
    limit = bindparam("limit", type_=Integer)
    by_prefix = select(api_keys.c.prefix).order_by(api_keys.c.prefix).limit(limit)
    counted = select(func.count()).select_from(api_keys).where(api_keys.c.prefix != bindparam("not_prefix"))
    with UnitOfWork(engine, write=True) as uow:
        first, second = read_together(uow.connection, [by_prefix, counted], {"limit": 2, "not_prefix": "r2"})
    assert first == [("r1",), ("r2",)]
    assert second == [(2,)]


def test_pipelined_writes_commit_with_the_transaction(engine: Engine) -> None:
    with UnitOfWork(engine, write=True) as uow:
        with pipelined(uow.connection):
            assert in_pipeline(uow.connection) is (engine.dialect.name == "postgresql")
            uow.connection.execute(insert(api_keys), [_key_row("w1"), _key_row("w2")])
            uow.connection.execute(update(api_keys).where(api_keys.c.prefix == "w2").values(name="second"))
        assert not in_pipeline(uow.connection)
        uow.commit()
    assert _prefixes(engine) == ["w1", "w2"]
    with UnitOfWork(engine, write=False) as uow:
        assert (
            uow.connection.execute(select(api_keys.c.name).where(api_keys.c.prefix == "w2")).scalar()
            == "second"
        )


def test_a_pipelined_write_refused_by_a_constraint_raises_integrity_error_and_writes_nothing(
    engine: Engine,
) -> None:
    with pytest.raises(IntegrityError), UnitOfWork(engine, write=True) as uow:
        with pipelined(uow.connection):
            uow.connection.execute(insert(api_keys), [_key_row("d1"), _key_row("d2")])
            uow.connection.execute(insert(api_keys), [_key_row("d3"), _key_row("d1")])  # d1 again
        uow.commit()
    assert _prefixes(engine) == []


def test_a_connection_lost_before_reads_sent_together_is_reported_lost(postgres_url: str) -> None:
    """What the group-commit writer reconnects on (DBAPIError.connection_invalidated): the ingest
    lock's reads are a batch's first statements."""
    migrate.upgrade(postgres_url)
    engine = build_engine(postgres_url, pool_size=2)
    try:
        with engine.connect() as doomed:
            backend_pid = doomed.connection.driver_connection.info.backend_pid  # type: ignore[union-attr]
            with engine.connect() as admin:
                admin.exec_driver_sql(f"SELECT pg_terminate_backend({int(backend_pid)})")
            doomed.begin()
            with pytest.raises(DBAPIError) as raised:
                read_together(doomed, [select(api_keys.c.prefix)], {})
            assert raised.value.connection_invalidated
            assert doomed.invalidated
            doomed.rollback()  # what the unit of work does; the connection then reconnects
            assert doomed.execute(select(func.count()).select_from(api_keys)).scalar() == 0
    finally:
        engine.dispose()


@pytest.mark.parametrize("sent", ["reads", "writes"])
def test_statements_sent_together_to_a_silent_server_are_cut_by_the_watchdog(
    postgres_url: str, sent: str
) -> None:
    """As any SQLAlchemy statement is (tests/store/test_engine_deadlines.py): the server goes silent
    (a proxy stops forwarding) and the pipeline's wait is cut 1 s past the statement timeout."""
    migrate.upgrade(postgres_url)
    with proxied_engine(postgres_url, pool_size=1, statement_timeout_ms=500) as (proxy, engine):
        with engine.connect() as connection:
            assert connection.execute(select(func.count()).select_from(api_keys)).scalar() == 0
            connection.rollback()
            proxy.black_hole()
            started = time.monotonic()
            with pytest.raises(DBAPIError) as raised:
                connection.begin()
                if sent == "reads":
                    read_together(connection, [select(api_keys.c.prefix)], {})
                else:
                    with pipelined(connection):
                        connection.execute(insert(api_keys), [_key_row("s1"), _key_row("s2")])
            elapsed = time.monotonic() - started
        assert raised.value.connection_invalidated
        assert 1.4 < elapsed < 3.0, elapsed  # 0.5 s statement timeout + 1 s grace, polled every 0.25 s
