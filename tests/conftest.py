"""Shared fixtures: real databases (a SQLite file, a fresh PostgreSQL database), apps and clients.

PostgreSQL tests use the server at TEFF_TEST_POSTGRES_URL (default: the local server at
127.0.0.1:5432). Where none answers they are skipped with a visible notice; CI sets
TEFF_TEST_REQUIRE_ALL=1, which turns that skip (and the browser test's) into a failure.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, create_engine, text

from service.app import create_app
from service.settings import Settings
from service.store import migrate
from service.store.engine import build_engine

ADMIN_POSTGRES_URL = os.environ.get(
    "TEFF_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
REQUIRE_ALL = os.environ.get("TEFF_TEST_REQUIRE_ALL") == "1"
_notices: list[str] = []


def skip_or_fail(reason: str) -> None:
    """Skip with a notice on a laptop; fail in CI, where everything must run."""
    if REQUIRE_ALL:
        pytest.fail(f"{reason} (TEFF_TEST_REQUIRE_ALL=1: CI runs every test)")
    if reason not in _notices:
        _notices.append(reason)
    pytest.skip(reason)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for notice in _notices:
        terminalreporter.write_sep("!", f"NOTICE: {notice}", yellow=True, bold=True)


_postgres_reachable: bool | None = None


def _postgres_available() -> bool:
    global _postgres_reachable
    if _postgres_reachable is None:
        try:
            engine = create_engine(ADMIN_POSTGRES_URL, connect_args={"connect_timeout": 3})
            with engine.connect() as connection:
                connection.execute(text("SELECT 1"))
            engine.dispose()
            _postgres_reachable = True
        except Exception:
            _postgres_reachable = False
    return _postgres_reachable


def _swap_database(url: str, database: str) -> str:
    return url.rsplit("/", 1)[0] + "/" + database


def create_postgres_database() -> str:
    """Create an empty database for one test and return its URL (drop it with drop_postgres_database)."""
    if not _postgres_available():
        skip_or_fail(f"PostgreSQL tests skipped: no server answers at {ADMIN_POSTGRES_URL}")
    name = f"teff_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(ADMIN_POSTGRES_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return _swap_database(ADMIN_POSTGRES_URL, name)


def drop_postgres_database(url: str) -> None:
    name = url.rsplit("/", 1)[1]
    admin = create_engine(ADMIN_POSTGRES_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'teff.db'}"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    url = create_postgres_database()
    try:
        yield url
    finally:
        drop_postgres_database(url)


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database on each backend (store tests run on both)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'teff.db'}"
        return
    url = create_postgres_database()
    try:
        yield url
    finally:
        drop_postgres_database(url)


@pytest.fixture
def database_url(empty_database_url: str) -> str:
    """A migrated database on each backend."""
    migrate.upgrade(empty_database_url)
    return empty_database_url


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = build_engine(database_url, pool_size=5)
    yield engine
    engine.dispose()


def make_settings(database_url: str, **overrides: object) -> Settings:
    return Settings(database_url=database_url, **overrides)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def _session_sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'teff.db'}"
    migrate.upgrade(url)
    return url


@pytest.fixture(scope="session")
def app(_session_sqlite_url: str) -> FastAPI:
    """One app on a migrated SQLite file, for the stateless endpoints."""
    return create_app(make_settings(_session_sqlite_url))


@pytest.fixture(scope="session")
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client
