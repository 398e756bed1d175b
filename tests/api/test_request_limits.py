"""The middleware's limits (issue 17, defects 1 and 2), in process: a keyed route's body is not read
before its key is known; large bodies are read a bounded number at a time; headers are capped;
TEFF_REQUIRE_API_KEY_FOR_ESTIMATES gates the stateless endpoints (before, it was read nowhere)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from service.app import create_app
from service.store import keys
from service.store.uow import UnitOfWork
from tests.api.conftest import open_store_client, run_body
from tests.conftest import make_settings
from tests.support.live_api import assert_problem

FLOPS = {"model": {"preset": "llama3-8b"}, "seq_len_tokens": 8192}


async def _call(
    app: Any, method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes
) -> dict[str, Any]:
    """One request through the ASGI app; what it answered and how many body messages it read."""
    read = 0

    async def receive() -> dict[str, Any]:
        nonlocal read
        read += 1
        return {"type": "http.request", "body": body, "more_body": False}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"test"), (b"content-length", str(len(body)).encode()), *headers],
        "client": ("127.0.0.1", 1),
        "server": ("test", 80),
    }
    await app(scope, receive, send)
    start = next(message for message in sent if message["type"] == "http.response.start")
    return {"status": start["status"], "body_reads": read, "headers": dict(start["headers"])}


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_keyed_body_is_not_read_without_a_valid_key(kind: str, tmp_path: Path) -> None:
    with open_store_client(kind, tmp_path) as store:
        app = store.client.app
        body = b'{"whatever": ' + b"1" * 100_000 + b"}"
        json_type = (b"content-type", b"application/json")
        portal = store.client.portal  # the TestClient's event loop, where the app's state lives
        assert portal is not None
        for headers in ([json_type], [json_type, (b"x-api-key", b"teff_nope_" + b"x" * 30)]):
            for path in ("/v1/runs", "/v1/runs/00000000-0000-0000-0000-000000000000/measurements"):
                answer = portal.call(_call, app, "POST", path, headers, body)
                assert answer["status"] == 401, (path, answer)
                assert answer["body_reads"] == 0, (path, answer)
                assert answer["headers"][b"www-authenticate"].startswith(b"Bearer")
        # A valid key: the body is read and judged (422: not a run).
        valid = [json_type, (b"x-api-key", store.writer["X-API-Key"].encode())]
        answer = portal.call(_call, app, "POST", "/v1/runs", valid, body)
        assert answer["status"] == 422 and answer["body_reads"] >= 1
        # The 401s are the ones the dependencies give.
        missing = store.client.post("/v1/runs", json=run_body())
        problem = assert_problem(missing, 401, "unauthorized")
        assert "X-API-Key" in problem["detail"]


def test_large_bodies_are_read_a_bounded_number_at_a_time(tmp_path: Path) -> None:
    settings = make_settings(
        f"sqlite:///{tmp_path / 'teff.db'}",
        large_body_bytes=1024,
        max_concurrent_large_bodies=1,
        large_body_wait_seconds=0.2,
    )
    app = create_app(settings)

    async def scenario() -> tuple[int, int]:
        release = asyncio.Event()

        async def slow_receive() -> dict[str, Any]:
            await release.wait()
            return {"type": "http.request", "body": b"{}", "more_body": False}

        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/v1/flops",
            "raw_path": b"/v1/flops",
            "query_string": b"",
            "root_path": "",
            "headers": [(b"content-type", b"application/json"), (b"content-length", b"5000")],
            "client": ("127.0.0.1", 1),
            "server": ("test", 80),
        }
        holder = asyncio.ensure_future(app(dict(scope), slow_receive, send))
        await asyncio.sleep(0.05)  # the first takes the one slot and waits for its body
        second = await _call(app, "POST", "/v1/flops", [(b"content-type", b"application/json")], b"x" * 5000)
        release.set()
        await holder
        return second["status"], int(second["headers"][b"retry-after"])

    status, retry_after = asyncio.run(scenario())
    assert status == 503 and retry_after > 0


def test_headers_over_the_cap_are_refused(tmp_path: Path) -> None:
    with open_store_client("sqlite", tmp_path, max_header_bytes=8192) as store:
        response = store.client.get("/v1/hardware", headers={"X-Padding": "p" * 9000})
        assert_problem(response, 431, "headers-too-large")
        assert store.client.get("/v1/hardware", headers={"X-Padding": "p" * 1000}).status_code == 200


def test_estimates_need_a_valid_key_when_the_setting_is_on(tmp_path: Path) -> None:
    with open_store_client("sqlite", tmp_path, require_api_key_for_estimates=True) as store:
        assert_problem(store.client.post("/v1/flops", json=FLOPS), 401, "unauthorized")
        assert_problem(store.client.get("/v1/hardware"), 401, "unauthorized")
        bogus = {"X-API-Key": "teff_abcdefgh_" + "x" * 32}
        assert_problem(store.client.post("/v1/flops", json=FLOPS, headers=bogus), 401, "unauthorized")
        assert store.client.post("/v1/flops", json=FLOPS, headers=store.reader).status_code == 200
        bearer = {"Authorization": "Bearer " + store.reader["X-API-Key"]}
        assert store.client.get("/v1/hardware", headers=bearer).status_code == 200
        # Revoked: refused at once (the key is looked up on every call, not cached).
        with UnitOfWork(store.engine, write=True) as uow:
            assert keys.revoke_key(uow.connection, prefix=store.reader["X-API-Key"].split("_")[1])
            uow.commit()
        assert_problem(store.client.post("/v1/flops", json=FLOPS, headers=store.reader), 401, "unauthorized")
        # Operations endpoints stay open (probes carry no key).
        assert store.client.get("/healthz").status_code == 200


def test_estimates_need_no_key_by_default(tmp_path: Path) -> None:
    with open_store_client("sqlite", tmp_path) as store:
        assert store.client.post("/v1/flops", json=FLOPS).status_code == 200
