"""The calls the published contract documents, on the demo fleet: every operation's media-type examples
with its path and query parameters filled in from their first examples (as Swagger UI's "Try it out"
fills them), and the recorder of the success and problem answers ReDoc shows
(``service/api/response_examples.json``).

    .venv/bin/python -m tests.support.documented_examples     # record the answers again
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from service.api.examples import RESPONSE_EXAMPLES_PATH
from service.app import create_app
from service.cli import _ApiRecorder
from service.store import keys, migrate
from service.store.engine import build_engine
from service.store.uow import UnitOfWork
from service.usecases import demo
from tests.conftest import make_settings

# Writes last, DELETE at the very end: each example must answer on the demo as a visitor finds it.
ORDER = {"get": 0, "post": 1, "put": 2, "patch": 3, "delete": 4}
#: Arrays in a recorded answer are cut to this many items (the rest says nothing new).
RECORDED_ITEMS = 3


@contextmanager
def demo_app(directory: Path) -> Iterator[tuple[TestClient, str, str]]:
    """The app on a database loaded as ``teff demo`` loads it: (client, read-write key, read-only key)."""
    url = f"sqlite:///{directory / 'teff.db'}"
    migrate.upgrade(url)
    engine = build_engine(url, pool_size=1)
    try:
        loaded = demo.load_demo(engine, recorder=_ApiRecorder())
        with UnitOfWork(engine, write=True) as uow:
            read_only = keys.create_key(
                uow.connection, tenant="demo", scopes=keys.parse_scopes("read"), name="docs"
            )
            uow.commit()
    finally:
        engine.dispose()
    with TestClient(create_app(make_settings(url))) as client:
        yield client, loaded.key, read_only


def _first_examples(parameters: list[dict[str, Any]], where: str) -> dict[str, Any]:
    return {
        parameter["name"]: next(iter(parameter["examples"].values()))["value"]
        for parameter in parameters
        if parameter["in"] == where and parameter.get("examples")
    }


def calls(spec: dict[str, Any]) -> Iterator[tuple[str, str, str, dict[str, Any], Any]]:
    """(label, method, url, query, body) for every example, in ORDER."""
    operations = [
        (method, path, operation)
        for path, item in spec["paths"].items()
        for method, operation in item.items()
        if method in ORDER
    ]
    for method, path, operation in sorted(operations, key=lambda found: ORDER[found[0]]):
        parameters = operation.get("parameters", [])
        path_values = _first_examples(parameters, "path")
        missing = [p["name"] for p in parameters if p["in"] == "path" and p["name"] not in path_values]
        assert not missing, f"{method} {path}: no example for path parameter {missing}"
        query = _first_examples(parameters, "query")
        bodies: dict[str, Any] = {"no body": None}
        if "requestBody" in operation:
            media = operation["requestBody"]["content"]["application/json"]
            assert media.get("examples"), f"{method} {path}: no media-type examples"
            bodies = {name: example["value"] for name, example in media["examples"].items()}
        for name, body in bodies.items():
            yield f"{method} {path} [{name}]", method, path.format(**path_values), query, body
        if method == "get":  # each other path example too (run ids, presets, parts, problem pages)
            for parameter in parameters:
                for name, example in list(parameter.get("examples", {}).items())[1:]:
                    if parameter["in"] == "path":
                        values = {**path_values, parameter["name"]: example["value"]}
                        yield f"{method} {path} [{name}]", method, path.format(**values), query, None


def _trimmed(value: Any) -> Any:
    if isinstance(value, list):
        return [_trimmed(item) for item in value[:RECORDED_ITEMS]]
    if isinstance(value, dict):
        return {name: _trimmed(item) for name, item in value.items()}
    return value


def record(client: TestClient, key: str, read_only: str) -> dict[str, Any]:
    """Each operation's answer to its first example (JSON answers only) and one problem per error
    status, each from the request named beside it."""
    spec = client.get("/openapi.json").json()
    success: dict[str, Any] = {}
    create_example: Any = None
    for label, method, url, query, body in calls(spec):
        operation = f"{method.upper()} {label.split(' ')[1]}"
        if operation == "POST /v1/runs" and create_example is None:
            create_example = body
        if operation in success:
            continue
        response = client.request(method.upper(), url, params=query, json=body, headers={"X-API-Key": key})
        if 200 <= response.status_code < 300 and response.headers.get("content-type", "").startswith(
            "application/json"
        ):
            success[operation] = {"status": response.status_code, "value": _trimmed(response.json())}
    run_id = demo.DEMO_RUNS[0].id
    invalid = {**create_example, "seq_len_tokens": 0, "scheduler_job_id": "slurm-999999"}
    asks: dict[str, tuple[str, str, dict[str, Any]]] = {
        "401": ("GET /v1/runs without an X-API-Key", "/v1/runs", {"method": "GET"}),
        "403": ("POST /v1/runs with a read-only key", "/v1/runs",
                {"method": "POST", "json": create_example, "headers": {"X-API-Key": read_only}}),
        "404": ("GET /v1/runs/r_nosuchrun", "/v1/runs/r_nosuchrun", {"method": "GET"}),
        "406": (f"GET /v1/runs/{run_id}/efficiency with Accept: application/xml",
                f"/v1/runs/{run_id}/efficiency", {"method": "GET", "headers": {"X-API-Key": key,
                                                                               "Accept": "application/xml"}}),
        "409": ("POST /v1/runs with the example again (the same scheduler job and attempt)", "/v1/runs",
                {"method": "POST", "json": create_example}),
        "413": ("POST /v1/runs with a 9 MiB body", "/v1/runs",
                {"method": "POST", "content": b'{"tags": "' + b"x" * (9 * 1024 * 1024) + b'"}',
                 "headers": {"X-API-Key": key, "Content-Type": "application/json"}}),
        "415": ("POST /v1/runs with Content-Type: text/plain", "/v1/runs",
                {"method": "POST", "content": json.dumps(create_example).encode(),
                 "headers": {"X-API-Key": key, "Content-Type": "text/plain"}}),
        "422": ("POST /v1/runs with seq_len_tokens 0", "/v1/runs", {"method": "POST", "json": invalid}),
    }  # fmt: skip
    problems: dict[str, Any] = {}
    for status, (request, url, arguments) in asks.items():
        arguments = {"headers": {"X-API-Key": key}, **arguments}
        if status == "401":
            arguments["headers"] = {}
        method = arguments.pop("method")
        response = client.request(method, url, **arguments)
        assert str(response.status_code) == status, (request, response.status_code, response.text[:300])
        problems[status] = {"request": request, "value": response.json()}
    return {"success": success, "problems": problems}


def main() -> None:
    with tempfile.TemporaryDirectory() as directory, demo_app(Path(directory)) as (client, key, read_only):
        recorded = record(client, key, read_only)
    RESPONSE_EXAMPLES_PATH.write_text(json.dumps(recorded, indent=1, ensure_ascii=False) + "\n")
    print(
        f"wrote {RESPONSE_EXAMPLES_PATH}: {len(recorded['success'])} answers, {len(recorded['problems'])} problems"
    )


if __name__ == "__main__":
    main()
