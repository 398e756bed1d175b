"""SIGKILL the real server while a scheduler streams measurements: after a restart, every measurement
the server acknowledged (2xx) is there, and the run's summary agrees with its history."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import create_postgres_database, drop_postgres_database
from tests.e2e.conftest import LiveServer, server_env, start_server, stop_server, teff

pytestmark = pytest.mark.slow

BATCH = 250
T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'teff.db'}"
        return
    url = create_postgres_database()
    try:
        yield url
    finally:
        drop_postgres_database(url)


def _batch(first_step: int) -> list[dict[str, Any]]:
    return [
        {
            "step": step,
            "time": (T0 + timedelta(seconds=step)).isoformat(),
            "throughput": {"tokens_per_second": 400_000.0 + step % 997},
        }
        for step in range(first_step, first_step + BATCH)
    ]


def _all_steps(http: httpx.Client, run_id: str) -> list[int]:
    steps: list[int] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 1000}
        if cursor:
            params["cursor"] = cursor
        page = http.get(f"/v1/runs/{run_id}/measurements", params=params)
        assert page.status_code == 200, page.text
        steps += [item["step"] for item in page.json()["items"]]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            return steps


def test_every_acknowledged_measurement_survives_a_sigkill_mid_ingest(
    database_url: str, tmp_path: Path
) -> None:
    env = server_env(database_url, 8000)
    migrated = teff("db", "upgrade", env=env)
    assert migrated.returncode == 0, migrated.stderr
    created = teff(
        "keys", "create", "--tenant", "e2e", "--scopes", "read,write", "--name", "scheduler", env=env
    )
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    headers = {"X-API-Key": key}

    server: LiveServer = start_server(database_url, tmp_path / "first.log")
    with httpx.Client(base_url=server.base_url, headers=headers, timeout=30) as http:
        response = http.post(
            "/v1/runs",
            json={
                "model": {"preset": "llama3-8b"},
                "hardware": {"accelerator": "h100-sxm", "device_count": 64},
                "seq_len_tokens": 8192,
                "global_batch_tokens": 4_194_304,
                "cluster": "e2e",
                "scheduler_job_id": "kill-test",
            },
        )
        assert response.status_code == 201, response.text
        run_id = response.json()["id"]

    acknowledged: set[int] = set()
    failures: list[str] = []
    stop = threading.Event()

    def scheduler(base_url: str) -> None:
        with httpx.Client(base_url=base_url, headers=headers, timeout=30) as http:
            first_step = 0
            while not stop.is_set():
                try:
                    answer = http.post(f"/v1/runs/{run_id}/measurements", json=_batch(first_step))
                except httpx.HTTPError:
                    return  # the server is gone
                if answer.is_success:
                    acknowledged.update(range(first_step, first_step + BATCH))
                else:
                    failures.append(f"{answer.status_code}: {answer.text}")
                    return
                first_step += BATCH

    sender = threading.Thread(target=scheduler, args=(server.base_url,))
    sender.start()
    try:
        deadline = time.monotonic() + 60
        while len(acknowledged) < 20 * BATCH and time.monotonic() < deadline and sender.is_alive():
            time.sleep(0.01)
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait(timeout=10)
        sender.join(timeout=30)
    finally:
        stop.set()
        sender.join(timeout=30)
        stop_server(server)
    assert not failures, failures
    assert len(acknowledged) >= 20 * BATCH, "the scheduler got too few answers before the kill"

    server = start_server(database_url, tmp_path / "second.log")
    try:
        with httpx.Client(base_url=server.base_url, headers=headers, timeout=30) as http:
            stored = _all_steps(http, run_id)
            missing = acknowledged - set(stored)
            assert not missing, (
                f"{len(missing)} acknowledged measurements were lost, e.g. {sorted(missing)[:5]}"
            )
            assert len(stored) == len(set(stored))
            # No request was half-stored: every batch is all there or not at all.
            assert len(stored) % BATCH == 0 and set(stored) == set(range(len(stored)))
            run = http.get(f"/v1/runs/{run_id}").json()
            # The summary was written in the same transaction as the rows it counts.
            assert run["summary"]["measurement_count"] == len(stored)
            assert run["summary"]["latest_step"] == max(stored)
            # And ingest carries on where the scheduler left off, repeated steps ignored.
            resumed = http.post(f"/v1/runs/{run_id}/measurements", json=_batch(max(stored) - BATCH + 1))
            assert resumed.status_code == 200, resumed.text
            assert resumed.json()["ignored_steps"] == list(range(max(stored) - BATCH + 1, max(stored) + 1))
    finally:
        stop_server(server)
