"""Request bodies for benchmarks, read from the app's own OpenAPI document (so they stay valid as the
schemas evolve): the ``examples`` of each request schema in ``components``, and the ``examples`` of an
operation's request body where it has them (POST /v1/runs/{run_id}/measurements)."""

from __future__ import annotations

import copy
from functools import lru_cache
from typing import Any

from service.app import create_app
from service.settings import load_settings


@lru_cache(maxsize=1)
def openapi() -> dict[str, Any]:
    app = create_app(load_settings(check_schema_on_start=False))
    document: dict[str, Any] = app.openapi()
    return document


def schema_examples(schema: str) -> list[dict[str, Any]]:
    """The ``examples`` of ``components.schemas[schema]`` (deep copies)."""
    found = openapi()["components"]["schemas"][schema].get("examples") or []
    if not found:
        raise KeyError(f"the OpenAPI schema {schema} has no examples")
    return [copy.deepcopy(example) for example in found]


def request_schema(method: str, path: str) -> str:
    """The component name of an operation's JSON request body."""
    operation = openapi()["paths"][path][method.lower()]
    schema = operation["requestBody"]["content"]["application/json"]["schema"]
    return str(schema["$ref"]).rsplit("/", 1)[1]


def operation_examples(method: str, path: str) -> dict[str, Any]:
    """The named ``examples`` of an operation's JSON request body: name → value."""
    operation = openapi()["paths"][path][method.lower()]
    content = operation["requestBody"]["content"]["application/json"]
    return {name: copy.deepcopy(example["value"]) for name, example in content.get("examples", {}).items()}


def body_examples(method: str, path: str) -> list[dict[str, Any]]:
    """Every example body of an operation: its request schema's examples."""
    return schema_examples(request_schema(method, path))
