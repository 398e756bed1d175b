"""Helpers for tests that talk HTTP to a real server process (tests/e2e): API keys made with the CLI,
problem+json checks, reading a run's whole measurement history, and waiting for the server's log."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from tests.e2e.conftest import LiveServer, teff

PROBLEM = "application/problem+json"


def cli_key(env: dict[str, str], tenant: str, scopes: str = "read,write", name: str = "e2e") -> str:
    """A new API key, made the way an operator makes one: `teff keys create` on the server's database."""
    created = teff("keys", "create", "--tenant", tenant, "--scopes", scopes, "--name", name, env=env)
    assert created.returncode == 0, created.stderr
    return created.stdout.strip()


def cli_revoke(env: dict[str, str], key: str) -> None:
    """`teff keys revoke <prefix>` on the server's database."""
    revoked = teff("keys", "revoke", key.split("_")[1], env=env)
    assert revoked.returncode == 0, revoked.stderr


def assert_problem(response: httpx.Response, status: int, slug: str | None = None) -> dict[str, Any]:
    """The response is an RFC 9457 problem with this status (and type); returns its body."""
    assert response.status_code == status, (response.request.method, response.request.url, response.text)
    assert response.headers["content-type"] == PROBLEM, response.headers
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    if slug is not None:
        assert body["type"] == f"/problems/{slug}", body
    return body


def stored_steps(http: httpx.Client, run_id: str) -> list[int]:
    """Every step of a run's measurement history, in the order the API pages it."""
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


def wait_for_log_line(server: LiveServer, request_id: str, timeout: float = 10) -> list[dict[str, Any]]:
    """The server's JSON log lines, once the access line of ``request_id`` is in the file (the line is
    written after the response is sent, so reading the log right after a response can miss it)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]
        if any(line.get("request_id") == request_id and "status" in line for line in lines):
            return lines
        assert time.monotonic() < deadline, f"no log line for request {request_id} after {timeout} s"
        time.sleep(0.05)
