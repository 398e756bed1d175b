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

import jsonschema
import pytest
import yaml
from fastapi.testclient import TestClient

from service.api.examples import recorded_answers
from service.usecases import demo
from tests.support.documented_examples import ORDER, calls, demo_app, record

ROOT = Path(__file__).resolve().parents[2]
#: Statuses no request to a healthy server draws (a fault, a database that stopped answering): their
#: problems have the schema but no recorded example, rather than an invented one.
UNRECORDED_STATUSES = {"500", "503"}


@pytest.fixture(scope="module")
def demo_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, str]]:
    with demo_app(Path(tmp_path_factory.mktemp("demo"))) as (client, key, _read_only):
        yield client, key


def test_every_documented_example_answers_2xx_on_the_demo_fleet(demo_client: tuple[TestClient, str]) -> None:
    client, key = demo_client
    spec = client.get("/openapi.json").json()
    failures = []
    tried = 0
    for label, method, url, query, body in calls(spec):
        response = client.request(method.upper(), url, params=query, json=body, headers={"X-API-Key": key})
        tried += 1
        if not 200 <= response.status_code < 300:
            failures.append((label, response.status_code, response.text[:300]))
    assert failures == [], "\n".join(map(str, failures))
    # every operation at least once, and the dropdowns' other examples
    assert tried >= len([m for item in spec["paths"].values() for m in item if m in ORDER]) + 20


def test_the_run_examples_name_the_demo_runs_and_delete_offers_the_failed_one_first(
    demo_client: tuple[TestClient, str],
) -> None:
    client, _ = demo_client
    spec = client.get("/openapi.json").json()
    ids = {run.id for run in demo.DEMO_RUNS}
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            for parameter in operation.get("parameters", []) if method in ORDER else []:
                if parameter["name"] == "run_id" and parameter["in"] == "path":
                    offered = [example["value"] for example in parameter["examples"].values()]
                    assert set(offered) == ids, (method, path)
                    failed = next(run.id for run in demo.DEMO_RUNS if run.status == "failed")
                    assert (offered[0] == failed) == (method == "delete"), (method, path)


def _shape(value: Any) -> Any:
    """What a recorded answer promises a reader: its keys and the kinds of its values, not the values
    (times and ids differ from one demo to the next)."""
    if isinstance(value, dict):
        return {name: _shape(item) for name, item in value.items()}
    if isinstance(value, list):
        return [_shape(value[0])] if value else []
    return (
        "number" if isinstance(value, int | float) and not isinstance(value, bool) else type(value).__name__
    )


def test_the_recorded_answers_are_what_the_demo_answers_now(tmp_path: Path) -> None:
    """ReDoc's response samples are recorded answers; a field added, renamed or removed since they were
    recorded fails here (record again: python -m tests.support.documented_examples)."""
    with demo_app(tmp_path) as (client, key, read_only):
        fresh = record(client, key, read_only)
    stored = recorded_answers()
    assert sorted(stored["success"]) == sorted(fresh["success"])
    assert sorted(stored["problems"]) == sorted(fresh["problems"])
    for kind in ("success", "problems"):
        for name, answer in fresh[kind].items():
            assert _shape(stored[kind][name]["value"]) == _shape(answer["value"]), (kind, name)


def test_every_json_answer_of_the_contract_has_a_recorded_example_valid_by_its_schema() -> None:
    document = yaml.safe_load((ROOT / "openapi.yaml").read_text())
    checked = 0
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method not in ORDER:
                continue
            for status, response in operation["responses"].items():
                for media_type, media in response.get("content", {}).items():
                    if media_type not in ("application/json", "application/problem+json"):
                        continue
                    if media_type == "application/json" and not status.startswith("2"):
                        continue
                    if status in UNRECORDED_STATUSES:
                        continue
                    assert media.get("examples"), f"{method} {path} {status} {media_type}: no example"
                    schema = {**media["schema"], "components": document["components"]}
                    for example in media["examples"].values():
                        jsonschema.Draft202012Validator(schema).validate(example["value"])
                        checked += 1
    assert checked >= 29 + 8
