"""Unauthenticated clients cannot make the server hold memory (issue 17, defect 1).

A real server process (`teff serve`, SQLite) takes concurrent 7 MB bodies without a key on keyed
routes, then oversized headers; its resident memory (VmRSS of the process) may grow by less than
100 MB over the whole flood. Before the change, FastAPI parsed each body before the key was checked:
16 such requests took the process from 87 to 758 MB, 32 to 2.6 GB; 8 x 64 MiB headers added 450 MB.
Loopback only, bounded: two rounds of 32 requests.
"""

from __future__ import annotations

import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import measurement, run_body
from tests.e2e.conftest import LiveServer, server_env, start_server, stop_server, teff
from tests.support.live_api import cli_key

pytestmark = pytest.mark.slow

CONCURRENT = 32
ROUNDS = 2
BODY_TARGET_BYTES = 7 * 1024 * 1024
RSS_GROWTH_LIMIT_BYTES = 100 * 1024 * 1024


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _measurements_body() -> bytes:
    """A JSON list of measurements of about BODY_TARGET_BYTES (well-formed: were it parsed, it
    would cost what the issue measured)."""
    one = len(json.dumps(measurement(10**6)).encode()) + 2
    return json.dumps([measurement(step) for step in range(BODY_TARGET_BYTES // one)]).encode()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> LiveServer:
    directory = tmp_path_factory.mktemp("flood")
    url = f"sqlite:///{directory / 'teff.db'}"
    migrated = teff("db", "upgrade", env=server_env(url, 8000))
    assert migrated.returncode == 0, migrated.stderr
    live = start_server(url, directory / "server.log", TEFF_MAX_BODY_BYTES=str(16 * 1024 * 1024))
    yield live  # type: ignore[misc]
    stop_server(live)


def _post(base_url: str, path: str, body: bytes, headers: dict[str, str]) -> int:
    try:
        with httpx.Client(base_url=base_url, timeout=60) as http:
            return http.post(
                path, content=body, headers={"Content-Type": "application/json", **headers}
            ).status_code
    except httpx.HTTPError:
        # The server answered 401 before reading the body and may close while the body is still being
        # sent; a refused upload is what an unauthenticated flood should get.
        return -1


def test_unauthenticated_large_bodies_do_not_grow_memory(server: LiveServer) -> None:
    key = cli_key(server.env, "flood")
    with httpx.Client(base_url=server.base_url, headers={"X-API-Key": key}, timeout=30) as http:
        created = http.post("/v1/runs", json=run_body(cluster="flood"))
        assert created.status_code == 201, created.text
        run_id = created.json()["id"]
        # Warm the paths the flood takes (first-use allocations are not growth).
        assert http.post(f"/v1/runs/{run_id}/measurements", json=[measurement(0)]).status_code == 200
    body = _measurements_body()
    assert len(body) > 6 * 1024 * 1024
    targets = [f"/v1/runs/{run_id}/measurements", "/v1/runs"]
    headers_by_kind = [{}, {"X-API-Key": "teff_bogus_" + "x" * 40}]

    before = _rss_bytes(server.process.pid)
    peak = before
    statuses: list[int] = []
    started = time.monotonic()
    with ThreadPoolExecutor(CONCURRENT) as pool:
        for _round in range(ROUNDS):
            futures = [
                pool.submit(_post, server.base_url, targets[i % 2], body, headers_by_kind[(i // 2) % 2])
                for i in range(CONCURRENT)
            ]
            while not all(future.done() for future in futures):
                peak = max(peak, _rss_bytes(server.process.pid))
                time.sleep(0.05)
            statuses += [future.result() for future in futures]
    elapsed = time.monotonic() - started
    after = _rss_bytes(server.process.pid)
    print(
        f"\nflood: {ROUNDS}x{CONCURRENT} x {len(body) / 2**20:.1f} MiB unauthenticated in {elapsed:.1f} s; "
        f"RSS before {before / 2**20:.0f} MiB, peak {peak / 2**20:.0f} MiB, after {after / 2**20:.0f} MiB"
    )
    answered = [status for status in statuses if status != -1]
    assert answered and set(answered) == {401}, statuses
    assert peak - before < RSS_GROWTH_LIMIT_BYTES, (before, peak)
    assert after - before < RSS_GROWTH_LIMIT_BYTES, (before, after)
    # The server still answers at once.
    assert httpx.get(server.base_url + "/healthz", timeout=2).status_code == 200


def test_oversized_headers_are_refused_while_read(server: LiveServer) -> None:
    before = _rss_bytes(server.process.pid)
    host, port = server.base_url.removeprefix("http://").split(":")
    header_value = b"a" * (1024 * 1024)
    answers = []
    for _ in range(8):
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ")
            try:
                # 64 MiB would be the header; the server stops reading long before.
                for _chunk in range(64):
                    sock.sendall(header_value)
            except OSError:
                pass  # closed by the server after its answer
            answers.append(sock.recv(65536))
    after = _rss_bytes(server.process.pid)
    print(
        f"\nheaders: 8 x (up to 64 MiB); RSS before {before / 2**20:.0f} MiB, after {after / 2**20:.0f} MiB"
    )
    for answer in answers:
        assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
        assert b"/problems/headers-too-large" in answer
    assert after - before < RSS_GROWTH_LIMIT_BYTES
