"""The database goes away under the real server process, then comes back.

PostgreSQL: the server reaches the shared server through a loopback TCP proxy; stopping the proxy
refuses new connections and cuts the pooled ones (the shared server itself is never touched). While
it is down, readiness and every store operation answer 503 problem+json with Retry-After and the
stateless estimates keep answering; once it is back everything recovers without a restart, and
nothing sent while it was down was written.

SQLite: the file cannot "go away" the same way (it is opened by the process itself). The meaningful
failure is another process holding the database's write lock past the busy timeout (a backup, an
operator's `sqlite3` shell): writes answer 503 with Retry-After instead of hanging or failing with a
500, reads keep answering, and writes succeed again once the lock is released. (Making the file's
directory unwritable is not a meaningful variant: the server already has the database, its WAL and
shared-memory files open, and as root — how these tests run in CI — permission bits are not
enforced at all.)
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.conftest import measurement, run_body
from tests.conftest import create_postgres_database, drop_postgres_database
from tests.e2e.conftest import LiveServer, server_env, start_server, stop_server, teff
from tests.support.live_api import assert_problem, cli_key, stored_steps
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.slow

STATELESS: list[tuple[str, str, dict[str, Any] | None]] = [
    (
        "POST",
        "/v1/mfu",
        {
            "model": {"preset": "llama3.1-8b"},
            "hardware": {"accelerator": "h100-sxm", "device_count": 8},
            "precision": "bf16",
            "seq_len_tokens": 8192,
            "throughput": {"tokens_per_second_per_device": 5762},
        },
    ),
    ("POST", "/v1/flops", {"model": {"preset": "llama3-8b"}, "seq_len_tokens": 8192}),
    (
        "POST",
        "/v1/schedules/lr",
        {
            "kind": "cosine_with_min_lr",
            "min_lr_ratio": 0.1,
            "peak_lr": 3e-4,
            "points": 50,
            "total_steps": 100_000,
            "warmup_steps": 2000,
        },
    ),
    ("GET", "/v1/hardware", None),
    ("GET", "/v1/hardware/h100-sxm", None),
]


def _store_operations(run_id: str, other_id: str) -> dict[str, tuple[str, str, Any]]:
    """Every store operation, with a body that would succeed (or write) if the database answered."""
    return {
        "create_run": ("POST", "/v1/runs", run_body(cluster="down", scheduler_job_id="written-while-down")),
        "add_measurements": (
            "POST",
            f"/v1/runs/{run_id}/measurements",
            [measurement(step) for step in range(100, 110)],
        ),
        "list_runs": ("GET", "/v1/runs", None),
        "get_run": ("GET", f"/v1/runs/{run_id}", None),
        "update_run": ("PATCH", f"/v1/runs/{run_id}", {"add_tags": ["written-while-down"]}),
        "delete_run": ("DELETE", f"/v1/runs/{other_id}", None),
        "list_measurements": ("GET", f"/v1/runs/{run_id}/measurements", None),
        "get_run_efficiency": ("GET", f"/v1/runs/{run_id}/efficiency", None),
        "compare_runs": ("POST", "/v1/runs/compare", {"run_ids": [run_id, other_id]}),
        "get_fleet_mfu_stats": ("GET", "/v1/stats/mfu", None),
        "get_fleet_mfu_stats_for_a_run": ("GET", f"/v1/stats/mfu?run_id={run_id}", None),
    }


WRITES = {"create_run", "add_measurements", "update_run", "delete_run"}


def _assert_stateless_endpoints_answer(http: httpx.Client) -> None:
    for method, url, body in STATELESS:
        response = http.request(method, url, json=body)
        assert response.status_code == 200, (method, url, response.text)


def _seed(http: httpx.Client) -> tuple[str, str]:
    """Two runs, the first with ten measurements (steps 0-9)."""
    run = http.post("/v1/runs", json=run_body(cluster="down", tags=["before"]))
    other = http.post("/v1/runs", json=run_body(cluster="down"))
    assert run.status_code == other.status_code == 201, (run.text, other.text)
    run_id, other_id = run.json()["id"], other.json()["id"]
    added = http.post(f"/v1/runs/{run_id}/measurements", json=[measurement(step) for step in range(10)])
    assert added.status_code == 200, added.text
    return run_id, other_id


# --------------------------------------------------------------------------------------------------
# PostgreSQL: the connection is cut


@pytest.fixture
def proxied_postgres(tmp_path: Path) -> Iterator[tuple[str, TcpProxy]]:
    """A migrated PostgreSQL database, and its URL through a TcpProxy (started)."""
    url = create_postgres_database()
    proxy = TcpProxy("127.0.0.1", 5432)
    try:
        migrated = teff("db", "upgrade", env=server_env(url, 8000))
        assert migrated.returncode == 0, migrated.stderr
        proxy.start()
        yield url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}"), proxy
    finally:
        proxy.stop()
        drop_postgres_database(url)


def test_postgres_going_away_is_503_on_store_operations_and_recovers_without_restart(
    proxied_postgres: tuple[str, TcpProxy], tmp_path: Path
) -> None:
    url, proxy = proxied_postgres
    server: LiveServer = start_server(url, tmp_path / "server.log")
    try:
        key = cli_key(server.env, "ops")
        with httpx.Client(base_url=server.base_url, headers={"X-API-Key": key}, timeout=30) as http:
            run_id, other_id = _seed(http)
            assert http.get("/readyz").status_code == 200

            proxy.stop()
            started = time.monotonic()
            gone = http.get("/readyz")
            assert gone.status_code == 503
            assert gone.json()["database"] == "unreachable"
            assert int(gone.headers["Retry-After"]) > 0
            for name, (method, path, body) in _store_operations(run_id, other_id).items():
                response = http.request(method, path, json=body)
                problem = assert_problem(response, 503, "database-unavailable")
                assert int(response.headers["Retry-After"]) > 0, name
                assert problem["request_id"] == response.headers["x-request-id"], name
            # A retry that carries an Idempotency-Key meets the same outage.
            keyed = http.post(
                "/v1/runs",
                json=run_body(cluster="down", scheduler_job_id="keyed"),
                headers={"Idempotency-Key": "retry-after-outage"},
            )
            assert_problem(keyed, 503, "database-unavailable")
            _assert_stateless_endpoints_answer(http)
            assert http.get("/healthz").status_code == 200
            # Refused connections fail fast: no request waited for a connect timeout.
            assert time.monotonic() - started < 10

            proxy.start()
            deadline = time.monotonic() + 15
            while http.get("/readyz").status_code != 200:
                assert time.monotonic() < deadline, "readyz did not recover"
                time.sleep(0.2)

            # Every read answers again.
            for name, (method, path, body) in _store_operations(run_id, other_id).items():
                if name not in WRITES:
                    assert http.request(method, path, json=body).status_code == 200, name
            # Nothing sent while the database was gone was written.
            assert stored_steps(http, run_id) == list(range(10))
            run = http.get(f"/v1/runs/{run_id}").json()
            assert run["tags"] == ["before"]
            assert run["summary"]["measurement_count"] == 10
            assert http.get(f"/v1/runs/{other_id}").status_code == 200
            listed = http.get("/v1/runs", params={"cluster": "down", "limit": 200}).json()["items"]
            assert {item["id"] for item in listed} == {run_id, other_id}

            # And writes work again, on the same process: the refused keyed request, retried with its
            # key, is created (its key was never claimed), then replayed.
            retried = http.post(
                "/v1/runs",
                json=run_body(cluster="down", scheduler_job_id="keyed"),
                headers={"Idempotency-Key": "retry-after-outage"},
            )
            assert retried.status_code == 201, retried.text
            assert "Idempotent-Replayed" not in retried.headers
            again = http.post(
                "/v1/runs",
                json=run_body(cluster="down", scheduler_job_id="keyed"),
                headers={"Idempotency-Key": "retry-after-outage"},
            )
            assert again.status_code == 201 and again.headers["Idempotent-Replayed"] == "true"
            assert again.content == retried.content
            resumed = http.post(
                f"/v1/runs/{run_id}/measurements", json=[measurement(step) for step in range(100, 110)]
            )
            assert resumed.status_code == 200, resumed.text
            assert resumed.json()["stored"] == 10
            assert stored_steps(http, run_id) == [*range(10), *range(100, 110)]
            assert http.delete(f"/v1/runs/{other_id}").status_code == 204
        assert server.process.poll() is None, "the server must ride out the outage, not exit"
    finally:
        stop_server(server)


# --------------------------------------------------------------------------------------------------
# SQLite: another process holds the write lock


def test_sqlite_writes_are_503_while_another_process_holds_the_lock_and_recover_after(
    tmp_path: Path,
) -> None:
    path = tmp_path / "teff.db"
    url = f"sqlite:///{path}"
    env = server_env(url, 8000)
    migrated = teff("db", "upgrade", env=env)
    assert migrated.returncode == 0, migrated.stderr
    busy_timeout_ms = 300
    server = start_server(url, tmp_path / "server.log", TEFF_DB_BUSY_TIMEOUT_MS=str(busy_timeout_ms))
    holder = None
    try:
        key = cli_key(server.env, "ops")
        with httpx.Client(base_url=server.base_url, headers={"X-API-Key": key}, timeout=30) as http:
            run_id, other_id = _seed(http)

            holder = sqlite3.connect(path, isolation_level=None)
            holder.execute("BEGIN EXCLUSIVE")  # WAL: blocks writers, not readers
            operations = _store_operations(run_id, other_id)
            for name, (method, path_, body) in operations.items():
                started = time.monotonic()
                response = http.request(method, path_, json=body)
                if name in WRITES:
                    assert_problem(response, 503, "database-unavailable")
                    assert int(response.headers["Retry-After"]) > 0
                    # It waited for the lock (the busy timeout), then gave up: no hang.
                    assert busy_timeout_ms / 1000 * 0.9 < time.monotonic() - started < 10, name
                else:
                    assert response.status_code == 200, (name, response.text)
            assert http.get("/readyz").status_code == 200  # the database answers reads
            _assert_stateless_endpoints_answer(http)
            holder.rollback()
            holder.close()
            holder = None

            assert stored_steps(http, run_id) == list(range(10))
            assert http.get(f"/v1/runs/{run_id}").json()["tags"] == ["before"]
            listed = http.get("/v1/runs", params={"cluster": "down"}).json()["items"]
            assert {item["id"] for item in listed} == {run_id, other_id}
            for name in sorted(WRITES):
                method, path_, body = operations[name]
                response = http.request(method, path_, json=body)
                assert response.is_success, (name, response.text)
            assert stored_steps(http, run_id) == [*range(10), *range(100, 110)]
        assert server.process.poll() is None
    finally:
        if holder is not None:
            holder.close()
        stop_server(server)


# --------------------------------------------------------------------------------------------------
# Start-up during an outage (issue 17, defect 5)


def test_serve_starts_while_postgres_is_down_when_the_schema_check_is_off(tmp_path: Path) -> None:
    """`teff serve` with TEFF_CHECK_SCHEMA_ON_START=false and no database to reach: it starts, the
    stateless endpoints answer 200, readiness and the store 503 with Retry-After (before, it checked
    the schema anyway and exited, so replicas crash-looped through the outage)."""
    unreachable = TcpProxy("127.0.0.1", 5432)  # never started: its port refuses connections
    url = f"postgresql+psycopg://postgres@127.0.0.1:{unreachable.port}/teff"
    server = start_server(url, tmp_path / "server.log", TEFF_CHECK_SCHEMA_ON_START="false")
    try:
        with httpx.Client(base_url=server.base_url, timeout=30) as http:
            _assert_stateless_endpoints_answer(http)
            ready = http.get("/readyz")
            assert ready.status_code == 503 and int(ready.headers["Retry-After"]) > 0
            keyed = {"X-API-Key": "teff_abcdefgh_" + "x" * 32}
            for method, path, body in [
                ("GET", "/v1/runs", None),
                ("POST", "/v1/runs", run_body(cluster="down")),
                ("GET", "/v1/stats/mfu", None),
            ]:
                response = http.request(method, path, json=body, headers=keyed)
                assert_problem(response, 503, "database-unavailable")
                assert int(response.headers["Retry-After"]) > 0
        assert server.process.poll() is None
    finally:
        stop_server(server)


def test_serve_with_the_schema_check_on_refuses_to_start_without_a_database(tmp_path: Path) -> None:
    unreachable = TcpProxy("127.0.0.1", 5432)
    url = f"postgresql+psycopg://postgres:s3cret-pw@127.0.0.1:{unreachable.port}/teff"
    result = teff("serve", env=server_env(url, unreachable.port))
    assert result.returncode == 1
    assert "cannot reach the database" in result.stderr
    assert "s3cret-pw" not in result.stderr
