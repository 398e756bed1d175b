"""Every example the published contract offers answers 2xx on the demo fleet (issue 20): each
operation's media-type ``examples`` (Swagger UI's dropdown), with its path and query parameters filled
in from their first ``examples`` the way "Try it out" fills them, and each other path example too.

The demo is loaded as ``teff demo`` loads it (the same use case and the same API computations), so
what this test answers is what a newcomer's Execute answers after ``python3 dev.py demo``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.cli import _ApiRecorder
from service.store import migrate
from service.store.engine import build_engine
from service.usecases import demo
from tests.conftest import make_settings

# Writes last, DELETE at the very end: each example must answer on the demo as a visitor finds it.
_ORDER = {"get": 0, "post": 1, "put": 2, "patch": 3, "delete": 4}


@pytest.fixture(scope="module")
def demo_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, str]]:
    url = f"sqlite:///{Path(tmp_path_factory.mktemp('demo')) / 'teff.db'}"
    migrate.upgrade(url)
    engine = build_engine(url, pool_size=1)
    try:
        loaded = demo.load_demo(engine, recorder=_ApiRecorder())
    finally:
        engine.dispose()
    with TestClient(create_app(make_settings(url))) as client:
        yield client, loaded.key


def _first_examples(parameters: list[dict[str, Any]], where: str) -> dict[str, Any]:
    return {
        parameter["name"]: next(iter(parameter["examples"].values()))["value"]
        for parameter in parameters
        if parameter["in"] == where and parameter.get("examples")
    }


def _calls(spec: dict[str, Any]) -> Iterator[tuple[str, str, str, dict[str, Any], Any]]:
    """(label, method, url, query, body) for every example, in _ORDER."""
    operations = [
        (method, path, operation)
        for path, item in spec["paths"].items()
        for method, operation in item.items()
        if method in _ORDER
    ]
    for method, path, operation in sorted(operations, key=lambda found: _ORDER[found[0]]):
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


def test_every_documented_example_answers_2xx_on_the_demo_fleet(demo_client: tuple[TestClient, str]) -> None:
    client, key = demo_client
    spec = client.get("/openapi.json").json()
    failures = []
    tried = 0
    for label, method, url, query, body in _calls(spec):
        response = client.request(method.upper(), url, params=query, json=body, headers={"X-API-Key": key})
        tried += 1
        if not 200 <= response.status_code < 300:
            failures.append((label, response.status_code, response.text[:300]))
    assert failures == [], "\n".join(map(str, failures))
    # every operation at least once, and the dropdowns' other examples
    assert tried >= len([m for item in spec["paths"].values() for m in item if m in _ORDER]) + 20


def test_the_run_examples_name_the_demo_runs_and_delete_offers_the_failed_one_first(
    demo_client: tuple[TestClient, str],
) -> None:
    client, _ = demo_client
    spec = client.get("/openapi.json").json()
    ids = {run.id for run in demo.DEMO_RUNS}
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            for parameter in operation.get("parameters", []) if method in _ORDER else []:
                if parameter["name"] == "run_id" and parameter["in"] == "path":
                    offered = [example["value"] for example in parameter["examples"].values()]
                    assert set(offered) == ids, (method, path)
                    failed = next(run.id for run in demo.DEMO_RUNS if run.status == "failed")
                    assert (offered[0] == failed) == (method == "delete"), (method, path)
