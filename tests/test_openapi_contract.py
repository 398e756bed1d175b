"""openapi.yaml is the published contract: it must equal what the app serves."""

from __future__ import annotations

from pathlib import Path

import yaml
from fastapi.testclient import TestClient

from service.cli import export_openapi_text

ROOT = Path(__file__).resolve().parents[1]


def test_openapi_yaml_matches_what_the_app_serves(client: TestClient) -> None:
    committed = yaml.safe_load((ROOT / "openapi.yaml").read_text(encoding="utf-8"))
    served = client.get("/openapi.json").json()
    assert committed == served, "openapi.yaml is stale: run `teff openapi export` and commit it"


def test_the_export_command_writes_what_is_committed() -> None:
    assert export_openapi_text() == (ROOT / "openapi.yaml").read_text(encoding="utf-8"), (
        "openapi.yaml is stale: run `teff openapi export` and commit it"
    )


def test_every_operation_documents_its_problem_answers(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            assert "500" in responses, (method, path)
            if operation.get("requestBody"):
                for status in ("413", "415", "422"):
                    assert "application/problem+json" in responses[status]["content"], (method, path, status)
            if "{" in path:
                assert "404" in responses, (method, path)


def test_every_request_body_has_an_example(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            body = operation.get("requestBody")
            if not body:
                continue
            media = body["content"]["application/json"]
            schema = media.get("schema", {})
            ref = schema.get("$ref", "")
            component = schemas.get(ref.rsplit("/", 1)[-1], {}) if ref else schema
            assert (
                "example" in media or "examples" in media or "examples" in component or "example" in component
            ), (
                method,
                path,
            )


def _example(spec: dict[str, object], operation: dict[str, object]) -> object | None:
    content = operation["requestBody"]["content"]["application/json"]  # type: ignore[index]
    if "example" in content:
        return content["example"]
    schema = content.get("schema", {})
    name = schema.get("$ref", "").rsplit("/", 1)[-1]
    component = spec["components"]["schemas"].get(name, {})  # type: ignore[index]
    examples = component.get("examples") or content.get("examples")
    if isinstance(examples, list) and examples:
        return examples[0]
    if isinstance(examples, dict) and examples:
        return next(iter(examples.values())).get("value")
    return None


def test_every_open_request_example_works_as_try_it_out_would_send_it(client: TestClient) -> None:
    """Swagger's "Try it out" sends the schema's example: it must answer 2xx, not a problem."""
    spec = client.get("/openapi.json").json()
    tried = 0
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            if not operation.get("requestBody") or operation.get("security") or "{" in path:
                continue
            example = _example(spec, operation)
            assert example is not None, (method, path)
            response = client.request(method.upper(), path, json=example)
            assert 200 <= response.status_code < 300, (method, path, response.text[:500])
            tried += 1
    assert tried == 11  # every open operation with a body (flops, mfu, batch, estimates, memory, …)
