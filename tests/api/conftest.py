"""Fixtures for the run-store endpoints: an app on a migrated database (SQLite and PostgreSQL) with
API keys for two tenants, and helpers to record runs and measurements."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from service.app import create_app
from service.store import keys, migrate
from service.store.engine import build_engine
from service.store.uow import UnitOfWork
from tests.conftest import create_postgres_database, drop_postgres_database, make_settings

_job_numbers = itertools.count(1)


@dataclass
class StoreClient:
    """A client of the app plus keys: ``writer`` (tenant ``team-a``: read, write), ``reader``
    (``team-a``: read), ``other`` (tenant ``team-b``: read, write)."""

    client: TestClient
    engine: Engine
    database_url: str
    writer: dict[str, str] = field(default_factory=dict)
    reader: dict[str, str] = field(default_factory=dict)
    other: dict[str, str] = field(default_factory=dict)

    def key(self, tenant: str, scopes: str) -> str:
        with UnitOfWork(self.engine, write=True) as uow:
            key = keys.create_key(
                uow.connection, tenant=tenant, scopes=keys.parse_scopes(scopes), name="test"
            )
            uow.commit()
        return key

    def headers(self, tenant: str, scopes: str) -> dict[str, str]:
        return {"X-API-Key": self.key(tenant, scopes)}

    def create_run(self, headers: dict[str, str] | None = None, **overrides: Any) -> dict[str, Any]:
        response = self.client.post("/v1/runs", json=run_body(**overrides), headers=headers or self.writer)
        assert response.status_code == 201, response.text
        body: dict[str, Any] = response.json()
        return body

    def add(
        self, run_id: str, items: list[dict[str, Any]] | dict[str, Any], headers: dict[str, str] | None = None
    ) -> dict[str, Any]:
        response = self.client.post(
            f"/v1/runs/{run_id}/measurements", json=items, headers=headers or self.writer
        )
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body


def run_body(**overrides: Any) -> dict[str, Any]:
    """A valid run description: Llama-3 8B on 64 H100s (overrides replace top-level fields)."""
    body: dict[str, Any] = {
        "model": {"preset": "llama3-8b"},
        "hardware": {"accelerator": "h100-sxm", "device_count": 64},
        "precision": "bf16",
        "seq_len_tokens": 8192,
        "global_batch_tokens": 4_194_304,
        "parallelism": {"tp": 2, "pp": 1, "cp": 1},
        "framework": "megatron-lm",
        "cluster": "eu-west-a",
        "scheduler_job_id": f"job-{next(_job_numbers)}",
        "tags": ["pretrain"],
    }
    body.update(overrides)
    return {key: value for key, value in body.items() if value is not None}


T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


def measurement(step: int, tokens_per_second: float = 1.0e6, **extra: Any) -> dict[str, Any]:
    """A measurement at ``step``, taken ``step`` seconds after 10:00 UTC on 2 December 2026."""
    return {
        "step": step,
        "time": (T0 + timedelta(seconds=step)).isoformat(),
        "throughput": {"tokens_per_second": tokens_per_second},
        **extra,
    }


@pytest.fixture(params=["sqlite", "postgresql"])
def store_client(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreClient]:
    """The app on a fresh migrated database of each kind, with keys for two tenants."""
    with open_store_client(request.param, tmp_path) as store:
        yield store


@contextmanager
def open_store_client(kind: str, tmp_path: Path, **settings: Any) -> Iterator[StoreClient]:
    """:func:`store_client` on a database of ``kind`` with settings overridden."""
    url = f"sqlite:///{tmp_path / 'teff.db'}" if kind == "sqlite" else create_postgres_database()
    engine = None
    try:
        migrate.upgrade(url)
        engine = build_engine(url, pool_size=5)
        app = create_app(make_settings(url, **{"max_measurements_per_request": 10_000, **settings}))
        with TestClient(app, raise_server_exceptions=False) as client:
            store = StoreClient(client=client, engine=engine, database_url=url)
            store.writer = store.headers("team-a", "read,write")
            store.reader = store.headers("team-a", "read")
            store.other = store.headers("team-b", "read,write")
            yield store
    finally:
        if engine is not None:
            engine.dispose()
        if kind == "postgresql":
            drop_postgres_database(url)
