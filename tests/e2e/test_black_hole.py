"""A PostgreSQL that stops answering (issue 17, defect 4): before, with the database black-holed
(connections open, no replies), requests and /readyz waited until it came back (45 s, 70 s and more).

The server reaches PostgreSQL through a TcpProxy that holds everything (``black_hole``), as a network
partition does. With the default deadlines every store request, the measurement ingest and /readyz
answer 503 with Retry-After within 10 s (the documented bound: TEFF_REQUEST_DEADLINE_SECONDS, 8 s);
the stateless endpoints keep answering at once; once the proxy forwards again the same process
serves the store again.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.conftest import measurement, run_body
from tests.conftest import create_postgres_database, drop_postgres_database
from tests.e2e.conftest import server_env, start_server, stop_server, teff
from tests.support.live_api import assert_problem, cli_key
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.slow

BOUND_SECONDS = 10.0


@pytest.fixture
def proxied_postgres() -> Iterator[tuple[str, TcpProxy]]:
    url = create_postgres_database()
    proxy = TcpProxy("127.0.0.1", 5432)
    try:
        migrated = teff("db", "upgrade", env=server_env(url, 8000))
        assert migrated.returncode == 0, migrated.stderr
        proxy.start()
        yield url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}"), proxy
    finally:
        proxy.restore()
        proxy.stop()
        drop_postgres_database(url)


def _timed(base_url: str, key: str, method: str, path: str, body: Any) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    with httpx.Client(base_url=base_url, headers={"X-API-Key": key}, timeout=60) as http:
        response = http.request(method, path, json=body)
    return response, time.monotonic() - started


def test_a_silent_postgres_gives_503_within_the_bound_and_recovers(
    proxied_postgres: tuple[str, TcpProxy], tmp_path: Path
) -> None:
    url, proxy = proxied_postgres
    server = start_server(url, tmp_path / "server.log")
    try:
        key = cli_key(server.env, "hole")
        with httpx.Client(base_url=server.base_url, headers={"X-API-Key": key}, timeout=30) as http:
            created = http.post("/v1/runs", json=run_body(cluster="hole"))
            assert created.status_code == 201, created.text
            run_id = created.json()["id"]
            added = http.post(
                f"/v1/runs/{run_id}/measurements", json=[measurement(step) for step in range(5)]
            )
            assert added.status_code == 200, added.text
            assert http.get("/readyz").status_code == 200

            proxy.black_hole()
            requests: dict[str, tuple[str, str, Any]] = {
                "readyz": ("GET", "/readyz", None),
                "get_run": ("GET", f"/v1/runs/{run_id}", None),
                "list_runs": ("GET", "/v1/runs", None),
                "create_run": ("POST", "/v1/runs", run_body(cluster="hole")),
                "add_measurements": ("POST", f"/v1/runs/{run_id}/measurements", [measurement(50)]),
                "stats": ("GET", "/v1/stats/mfu", None),
            }
            with ThreadPoolExecutor(len(requests)) as pool:
                futures = {
                    name: pool.submit(_timed, server.base_url, key, method, path, body)
                    for name, (method, path, body) in requests.items()
                }
                # Meanwhile the stateless endpoints answer at once.
                stateless_started = time.monotonic()
                flops = http.post(
                    "/v1/flops", json={"model": {"preset": "llama3-8b"}, "seq_len_tokens": 8192}
                )
                assert flops.status_code == 200, flops.text
                assert http.get("/healthz").status_code == 200
                assert time.monotonic() - stateless_started < 2
                results = {name: future.result() for name, future in futures.items()}
            times = {name: round(elapsed, 2) for name, (_response, elapsed) in results.items()}
            print(f"\nblack hole: seconds to 503 {times}")
            for name, (response, elapsed) in results.items():
                assert response.status_code == 503, (name, response.text)
                assert int(response.headers["Retry-After"]) > 0, name
                if name != "readyz":
                    assert_problem(response, 503, "database-unavailable")
                assert elapsed < BOUND_SECONDS, (name, elapsed)

            proxy.restore()
            deadline = time.monotonic() + 30
            while http.get("/readyz").status_code != 200:
                assert time.monotonic() < deadline, "readyz did not recover"
                time.sleep(0.5)
            assert http.get(f"/v1/runs/{run_id}").status_code == 200
            again = http.post(f"/v1/runs/{run_id}/measurements", json=[measurement(100)])
            assert again.status_code == 200, again.text
            assert http.post("/v1/runs", json=run_body(cluster="hole")).status_code == 201
        assert server.process.poll() is None
    finally:
        stop_server(server)
