"""The server engine's deadlines and redaction (issue 17, defects 4 and 7): SQL parameters never
appear in database errors (they reach the logs in tracebacks); PostgreSQL statements are cancelled
at the statement timeout; a driver call that gets no answer at all is cut by the watchdog (the
black-hole end-to-end test, tests/e2e/test_black_hole.py, covers a silent server)."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, OperationalError

from service.store.engine import build_engine
from tests.support.tcp_proxy import proxied_engine

SECRET = "tenant-secret-4b1d"


def test_database_errors_do_not_carry_sql_parameters(empty_database_url: str) -> None:
    engine = build_engine(empty_database_url, pool_size=1, statement_timeout_ms=5000)
    try:
        with engine.connect() as connection, pytest.raises(DBAPIError) as raised:
            connection.execute(text("SELECT * FROM no_such_table WHERE name = :name"), {"name": SECRET})
        assert SECRET not in str(raised.value)
        assert "hidden due to hide_parameters" in str(raised.value)
    finally:
        engine.dispose()


def test_a_postgres_statement_is_cancelled_at_the_statement_timeout(postgres_url: str) -> None:
    engine = build_engine(postgres_url, pool_size=1, statement_timeout_ms=300)
    try:
        started = time.monotonic()
        with engine.connect() as connection, pytest.raises(OperationalError, match="statement timeout"):
            connection.execute(text("SELECT pg_sleep(5)"))
        assert time.monotonic() - started < 2
    finally:
        engine.dispose()


def test_a_driver_call_without_an_answer_is_cut_by_the_watchdog(postgres_url: str) -> None:
    """A "server" that accepts and never answers (not even the start-up): connecting gives up at the
    connect timeout; and a connection whose server goes silent mid-statement is cut 1 s past the
    statement timeout (here a real server behind a proxy that stops forwarding)."""
    silent = proxied_engine(postgres_url, pool_size=1, statement_timeout_ms=500, connect_timeout_seconds=2)
    with silent as (proxy, engine):
        with engine.connect() as connection:
            assert connection.execute(text("SELECT 1")).scalar() == 1
            proxy.black_hole()
            started = time.monotonic()
            with pytest.raises(DBAPIError) as raised:
                connection.execute(text("SELECT 2"))
            elapsed = time.monotonic() - started
        assert raised.value.connection_invalidated
        # 0.5 s statement timeout + 1 s grace, polled every 0.25 s.
        assert 1.4 < elapsed < 3.0, elapsed
        # A new connection meets the silent server and gives up at the connect timeout.
        started = time.monotonic()
        with pytest.raises(OperationalError):
            engine.connect().close()
        assert time.monotonic() - started < 4


def test_engines_without_a_statement_timeout_are_not_watched(postgres_url: str) -> None:
    """The CLI's and the migrations' engines (an index build may take minutes) have no deadline."""
    engine = build_engine(postgres_url, pool_size=1)
    try:
        with engine.connect() as connection:
            assert connection.execute(text("SHOW statement_timeout")).scalar() == "0"
    finally:
        engine.dispose()
