"""SQLite on a full disk: the API answers a clear problem, keeps every acknowledged measurement, stores
nothing of the refused request, and the database stays intact; once there is space again, the same
process carries on.

Two ways to fill the disk:

* ``PRAGMA max_page_count`` on each of the app's connections (set on checkout, so the test can "free
  space" by raising it): SQLite then fails a write exactly as on a full disk (SQLITE_FULL, "database
  or disk is full"). Runs everywhere.
* A real 2 MiB tmpfs holding the database, its WAL and shared-memory files, filled with a ballast file
  (ENOSPC from the kernel; freeing space = deleting the ballast). Needs to mount a filesystem (root,
  and a sandbox that allows it); skipped with the reason where that is refused.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg.errors
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event
from sqlalchemy.exc import DBAPIError

from service.app import create_app
from service.store import migrate
from service.store.engine import build_engine
from tests.api.conftest import StoreClient, measurement
from tests.conftest import make_settings

BATCH = 100
PROBLEM = "application/problem+json"


def _batch(first_step: int) -> list[dict[str, Any]]:
    return [measurement(step, 1.0e6 + step % 97) for step in range(first_step, first_step + BATCH)]


def _integrity(path: Path) -> list[str]:
    connection = sqlite3.connect(path)
    try:
        checks = [row[0] for row in connection.execute("PRAGMA integrity_check")]
        foreign = connection.execute("PRAGMA foreign_key_check").fetchall()
    finally:
        connection.close()
    return checks + [f"foreign key: {row}" for row in foreign]


def _steps(store: StoreClient, run_id: str) -> list[int]:
    steps: list[int] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 1000, **({"cursor": cursor} if cursor else {})}
        page = store.client.get(f"/v1/runs/{run_id}/measurements", params=params, headers=store.reader)
        assert page.status_code == 200, page.text
        steps += [item["step"] for item in page.json()["items"]]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            return steps


def _fill_then_free(
    store: StoreClient, path: Path, *, fill: Callable[[], None], free: Callable[[], None]
) -> None:
    """The scenario both variants share."""
    run = store.create_run()
    run_id = run["id"]
    fill()

    acknowledged: list[int] = []
    refused = None
    for first_step in range(0, 200 * BATCH, BATCH):
        response = store.client.post(
            f"/v1/runs/{run_id}/measurements", json=_batch(first_step), headers=store.writer
        )
        if response.status_code != 200:
            refused = (first_step, response)
            break
        assert response.json()["stored"] == BATCH
        acknowledged += range(first_step, first_step + BATCH)
    assert refused is not None, "the disk never filled up"
    assert len(acknowledged) >= BATCH, "the disk was full before the first batch: no headroom to test"
    first_refused, response = refused

    # A clear, retryable problem: not a 500, not "cannot reach the database".
    assert response.status_code == 503, response.text
    assert response.headers["content-type"] == PROBLEM
    problem = response.json()
    assert problem["type"] == "/problems/storage-full"
    assert "disk is full" in problem["detail"]
    assert int(response.headers["Retry-After"]) > 0
    # The same request again still does not fit: the refusal is stable, not a transient blip.
    assert (
        store.client.post(
            f"/v1/runs/{run_id}/measurements", json=_batch(first_refused), headers=store.writer
        ).status_code
        == 503
    )

    # Every acknowledged measurement is there once, and none of the refused request (all or nothing).
    assert _steps(store, run_id) == acknowledged
    summary = store.client.get(f"/v1/runs/{run_id}", headers=store.reader).json()["summary"]
    assert summary["measurement_count"] == len(acknowledged)
    assert summary["latest_step"] == acknowledged[-1]
    # Reads keep answering on the full disk.
    assert store.client.get(f"/v1/runs/{run_id}/efficiency", headers=store.reader).status_code == 200
    assert store.client.get("/v1/stats/mfu", headers=store.reader).status_code == 200
    assert _integrity(path) == ["ok"]

    # Space again: the refused request, retried, is stored whole by the same process.
    free()
    retried = store.client.post(
        f"/v1/runs/{run_id}/measurements", json=_batch(first_refused), headers=store.writer
    )
    assert retried.status_code == 200, retried.text
    assert retried.json()["stored"] == BATCH
    assert retried.json()["summary"]["measurement_count"] == len(acknowledged) + BATCH
    assert _steps(store, run_id) == [*acknowledged, *range(first_refused, first_refused + BATCH)]
    assert _integrity(path) == ["ok"]


@contextmanager
def _store_client(url: str, engine: Engine) -> Iterator[StoreClient]:
    app = create_app(make_settings(url), engine=engine)
    with TestClient(app, raise_server_exceptions=False) as client:
        store = StoreClient(client=client, engine=engine, database_url=url)
        store.writer = store.headers("team-a", "read,write")
        store.reader = store.headers("team-a", "read")
        yield store


def test_a_full_database_refuses_the_write_clearly_and_keeps_what_it_acknowledged(tmp_path: Path) -> None:
    path = tmp_path / "teff.db"
    url = f"sqlite:///{path}"
    migrate.upgrade(url)
    engine = build_engine(url)
    max_pages: list[int | None] = [None]

    @event.listens_for(engine, "checkout")
    def _limit_pages(dbapi_connection: sqlite3.Connection, _record: Any, _proxy: Any) -> None:
        # Not below the current size (SQLite would clamp it there anyway); None: no limit.
        limit = max_pages[0] if max_pages[0] is not None else 1_073_741_823
        dbapi_connection.execute(f"PRAGMA max_page_count={limit}")

    def page_count() -> int:
        with engine.connect() as connection:
            return int(connection.exec_driver_sql("PRAGMA page_count").scalar_one())

    def fill() -> None:
        max_pages[0] = page_count() + 40  # 160 KiB of 4 KiB pages: a few batches

    def free() -> None:
        max_pages[0] = None

    try:
        with _store_client(url, engine) as store:
            _fill_then_free(store, path, fill=fill, free=free)
    finally:
        engine.dispose()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs mounted at a fresh directory (unmounted afterwards)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip(
            "a real full disk needs to mount a 2 MiB tmpfs: only root can (the page-limit test covers SQLITE_FULL)"
        )
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        timeout=10,
    )
    if mounted.returncode != 0:
        pytest.skip(
            f"mounting a tmpfs was refused here ({mounted.stderr.strip()}); the page-limit test covers SQLITE_FULL"
        )
    try:
        yield mount_point
    finally:
        unmounted = subprocess.run(["umount", str(mount_point)], capture_output=True, text=True, timeout=10)
        if unmounted.returncode != 0:
            subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, timeout=10)


def test_a_real_full_disk_refuses_the_write_clearly_and_keeps_what_it_acknowledged(small_disk: Path) -> None:
    path = small_disk / "teff.db"
    url = f"sqlite:///{path}"
    migrate.upgrade(url)
    engine = build_engine(url)
    ballast = small_disk / "ballast"

    def fill() -> None:
        # Leave ~200 KiB for the WAL to grow into: a few batches, then ENOSPC.
        free_bytes = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
        with ballast.open("wb") as file:
            file.write(b"\0" * max(free_bytes - 200 * 1024, 0))

    def free() -> None:
        ballast.unlink()

    try:
        with _store_client(url, engine) as store:
            _fill_then_free(store, path, fill=fill, free=free)
    finally:
        engine.dispose()


def test_postgres_disk_full_answers_the_same_problem(tmp_path: Path) -> None:
    """PostgreSQL's disk_full (SQLSTATE 53100) is the same condition: the same answer. (The shared
    PostgreSQL server cannot be filled up in a test; the driver error it raises is built here and
    wrapped the way the store wraps driver errors.)"""
    url = f"sqlite:///{tmp_path / 'teff.db'}"
    migrate.upgrade(url)
    app = create_app(make_settings(url))

    @app.post("/v1/disk-full")
    def disk_full() -> None:
        error = psycopg.errors.DiskFull('could not extend file "base/16384/16385": No space left on device')
        raise DBAPIError.instance("COPY measurements FROM STDIN", None, error, psycopg.errors.Error)

    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.post("/v1/disk-full", json={})
    assert response.status_code == 503
    assert response.headers["content-type"] == PROBLEM
    assert response.json()["type"] == "/problems/storage-full"
    assert int(response.headers["Retry-After"]) > 0
    assert "base/16384" not in response.text  # the driver's message stays in the server
