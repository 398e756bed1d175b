"""The client's retry and error logic, against httpx.MockTransport (no server): what is retried, how
long it waits, that the Idempotency-Key survives retries, and how problem+json maps to exceptions."""

from __future__ import annotations

import asyncio
import random
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import teff_client
import yaml
from teff_client import AsyncClient, Client, RetryPolicy, errors
from teff_client import models as client_models

PROBLEM = {"content-type": "application/problem+json"}
CONTRACT = Path(__file__).resolve().parents[2] / "openapi.yaml"


class Recorder:
    """A MockTransport handler that answers from a script and records every request."""

    def __init__(self, *answers: httpx.Response | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def problem(status: int, slug: str, detail: str = "", **extra: Any) -> httpx.Response:
    body = {"type": f"/problems/{slug}", "title": slug, "status": status, "detail": detail, **extra}
    return httpx.Response(status, json=body, headers=PROBLEM)


def no_sleep_policy(waits: list[float], **options: Any) -> RetryPolicy:
    return RetryPolicy(rng=random.Random(7), **options)


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """time.sleep inside the sync client, recorded instead of slept."""
    recorded: list[float] = []
    monkeypatch.setattr("teff_client._sync_client.time.sleep", recorded.append)
    return recorded


def make_client(handler: Recorder, **options: Any) -> Client:
    return Client(
        "http://teff.test", api_key="teff_abc_secret", transport=httpx.MockTransport(handler), **options
    )


def test_every_operation_of_the_contract_is_a_method_of_both_clients() -> None:
    contract = yaml.safe_load(CONTRACT.read_text())
    operation_ids = {
        operation["operationId"]
        for methods in contract["paths"].values()
        for method, operation in methods.items()
        if method in {"get", "post", "put", "patch", "delete"}
    }
    assert len(operation_ids) >= 29
    missing_sync = sorted(name for name in operation_ids if not callable(getattr(Client, name, None)))
    missing_async = sorted(
        name for name in operation_ids if not asyncio.iscoroutinefunction(getattr(AsyncClient, name, None))
    )
    assert missing_sync == [] and missing_async == []
    # The generated models know the same operations as the contract file in this checkout.
    assert set(client_models.OPERATIONS) == operation_ids


def test_the_generated_files_are_current(tmp_path: Path) -> None:
    import subprocess
    import sys

    scripts = Path(teff_client.__file__).resolve().parents[1] / "scripts"
    checked = subprocess.run(
        [sys.executable, scripts / "generate_async.py", "--check"], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stderr
    sys.path.insert(0, str(scripts))
    try:
        import generate_models

        rendered = generate_models.render(yaml.safe_load(CONTRACT.read_text()))
    finally:
        sys.path.remove(str(scripts))
    assert (Path(teff_client.__file__).parent / "models.py").read_text() == rendered, (
        "models.py is stale: run clients/python/scripts/generate_models.py"
    )


def test_a_503_with_retry_after_is_waited_for_then_the_answer_returned(waits: list[float]) -> None:
    handler = Recorder(
        httpx.Response(
            503,
            json={"type": "/problems/database-unavailable", "title": "x", "status": 503, "detail": "db"},
            headers={**PROBLEM, "Retry-After": "3"},
        ),
        httpx.Response(200, json={"status": "ok"}),
    )
    client = make_client(handler, retry=RetryPolicy(rng=random.Random(1)))
    assert client.list_model_presets() == {"status": "ok"}
    assert len(handler.requests) == 2
    # Retry-After 3 s, plus at most 10% jitter (capped at 1 s).
    assert len(waits) == 1 and 3.0 <= waits[0] <= 3.3


def test_429_and_connection_errors_back_off_exponentially_with_jitter(waits: list[float]) -> None:
    handler = Recorder(
        httpx.ConnectError("refused"),
        httpx.ConnectError("refused"),
        problem(429, "too-many-requests"),
        httpx.ConnectError("refused"),
        httpx.Response(200, json={"items": [], "count": 0}),
    )
    policy = RetryPolicy(attempts=5, backoff_base_seconds=0.5, backoff_max_seconds=1.5, rng=random.Random(3))
    client = make_client(handler, retry=policy)
    assert client.list_accelerators() == {"items": [], "count": 0}
    assert len(handler.requests) == 5
    ceilings = [0.5, 1.0, 1.5, 1.5]  # base·2^(n-1), capped
    assert len(waits) == 4
    assert all(0.0 <= wait <= ceiling for wait, ceiling in zip(waits, ceilings, strict=True))
    assert len(set(waits)) == 4, "full jitter draws a different wait each time"


def test_retries_run_out_into_the_problem_or_service_unreachable(waits: list[float]) -> None:
    client = make_client(
        Recorder(problem(503, "database-unavailable", "down")), retry=RetryPolicy(attempts=3)
    )
    with pytest.raises(errors.ServiceUnavailable) as raised:
        client.get_run("r1")
    assert raised.value.status == 503 and raised.value.slug == "database-unavailable"
    assert len(waits) == 2

    unreachable = make_client(Recorder(httpx.ConnectError("refused")), retry=RetryPolicy(attempts=2))
    with pytest.raises(errors.ServiceUnreachable):
        unreachable.get_run("r1")


def test_a_client_error_is_not_retried(waits: list[float]) -> None:
    handler = Recorder(problem(404, "not-found", "no run r1"))
    with pytest.raises(errors.NotFound) as raised:
        make_client(handler).get_run("r1")
    assert len(handler.requests) == 1 and waits == []
    assert "no run r1" in str(raised.value)


def test_a_retry_after_beyond_the_limit_is_not_waited_for(waits: list[float]) -> None:
    response = httpx.Response(
        503,
        json={"type": "/problems/storage-full", "title": "t", "status": 503, "detail": "d"},
        headers={**PROBLEM, "Retry-After": "3600"},
    )
    with pytest.raises(errors.ServiceUnavailable) as raised:
        make_client(Recorder(response)).list_runs()
    assert raised.value.retry_after_seconds == 3600 and waits == []


def test_run_creation_sends_one_idempotency_key_on_every_retry(waits: list[float]) -> None:
    handler = Recorder(
        httpx.ReadTimeout("lost answer"),
        problem(503, "database-unavailable"),
        httpx.Response(201, json={"id": "run_1"}),
    )
    run = make_client(handler).create_run({"model": {"preset": "llama3-8b"}})
    assert run["id"] == "run_1"
    keys = [request.headers["Idempotency-Key"] for request in handler.requests]
    assert len(keys) == 3 and len(set(keys)) == 1
    uuid.UUID(keys[0])  # a UUID
    assert handler.requests[0].headers["Authorization"] == "Bearer teff_abc_secret"

    second = Recorder(httpx.Response(201, json={"id": "run_2"}))
    make_client(second).create_run({"model": {"preset": "llama3-8b"}})
    assert second.requests[0].headers["Idempotency-Key"] != keys[0], "a new creation gets a new key"

    given = Recorder(httpx.Response(201, json={"id": "run_3"}))
    make_client(given).create_run({}, idempotency_key="job-42-attempt-0")
    assert given.requests[0].headers["Idempotency-Key"] == "job-42-attempt-0"


@pytest.mark.parametrize(
    ("status", "slug", "expected"),
    [
        (422, "validation-error", errors.ValidationFailed),
        (422, "unknown-reference", errors.UnknownReference),
        (422, "implausible-result", errors.ImplausibleResult),
        (401, "unauthorized", errors.Unauthorized),
        (403, "forbidden", errors.Forbidden),
        (404, "not-found", errors.NotFound),
        (409, "conflict", errors.Conflict),
        (409, "idempotency-in-flight", errors.IdempotencyInFlight),
        (413, "payload-too-large", errors.PayloadTooLarge),
        (415, "unsupported-media-type", errors.NotAcceptable),
        (500, "internal-error", errors.ServerError),
    ],
)
def test_problems_map_to_their_family(status: int, slug: str, expected: type[errors.ProblemError]) -> None:
    response = problem(
        status,
        slug,
        "change this",
        errors=[{"field": "body.hardware.device_count", "message": "must be > 0", "code": "greater_than"}],
        request_id="req-1",
        existing_run_id="run_9",
    )
    with pytest.raises(expected) as raised:
        make_client(Recorder(response), retry=RetryPolicy(attempts=1)).compute_mfu({})
    error = raised.value
    assert isinstance(error, errors.ProblemError)
    assert (error.status, error.type, error.detail, error.request_id) == (
        status,
        f"/problems/{slug}",
        "change this",
        "req-1",
    )
    assert error.fields == ["body.hardware.device_count"] and error.errors[0].code == "greater_than"
    if isinstance(error, errors.Conflict):
        assert error.existing_run_id == "run_9"


def test_a_non_problem_error_body_still_raises_by_status() -> None:
    response = httpx.Response(502, text="<html>bad gateway</html>")
    with pytest.raises(errors.ServerError) as raised:
        make_client(Recorder(response), retry=RetryPolicy(attempts=1)).get_health()
    assert raised.value.status == 502 and "bad gateway" in raised.value.detail


def test_list_parameters_repeat_and_unset_ones_are_left_out() -> None:
    handler = Recorder(httpx.Response(200, json={"items": [], "next_cursor": None}))
    make_client(handler).list_runs(tag=["a", "b"], min_mfu=0.3, status=None)
    assert handler.requests[0].url.params.multi_items() == [("tag", "a"), ("tag", "b"), ("min_mfu", "0.3")]


def test_async_client_retries_like_the_sync_one(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr("teff_client._async_client.asyncio.sleep", fake_sleep)
    answers = [
        httpx.ConnectError("refused"),
        problem(503, "database-unavailable"),
        httpx.Response(201, json={"id": "r"}),
    ]
    seen: list[httpx.Request] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def scenario() -> dict[str, Any]:
        async with AsyncClient(
            "http://teff.test", api_key="k", transport=httpx.MockTransport(handler)
        ) as client:
            return dict(await client.create_run({}))

    assert asyncio.run(scenario()) == {"id": "r"}
    assert len(seen) == 3 and len({request.headers["Idempotency-Key"] for request in seen}) == 1
    assert len(waits) == 2
