"""The published contract: FastAPI's schema plus the problem+json answers every operation can give.

Every operation lists the problem responses it can send (422, 413/415 with a body, 404 with a path
parameter, 401/403 with an API key, 503 when it uses the store, 500 always), so the spec matches
what is sent and clients can generate error handling from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel
from starlette.routing import BaseRoute

from service.api.examples import add_examples
from service.api.problems import ALL_KINDS, PROBLEM_CONTENT_TYPE

PROBLEM_SCHEMA: dict[str, Any] = {
    "title": "Problem",
    "type": "object",
    "description": "RFC 9457 problem details. `type` is stable per error kind; see /problems/{slug}.",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string", "enum": sorted(kind.type_uri for kind in ALL_KINDS)},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string", "description": "what went wrong and what to change"},
        "instance": {"type": "string"},
        "request_id": {"type": "string"},
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["field", "message"],
                "properties": {
                    "field": {"type": "string"},
                    "message": {"type": "string"},
                    "code": {"type": ["string", "null"]},
                },
            },
        },
        "close_matches": {"type": "array", "items": {"type": "string"}},
    },
}

# Schemas documented for operations that parse their own body (e.g. the MFU batch, where each item
# fails on its own): not reachable from a route signature, so they are registered here.
_EXTRA_COMPONENTS: list[type[BaseModel]] = []


def register_component(model: type[BaseModel]) -> type[BaseModel]:
    _EXTRA_COMPONENTS.append(model)
    return model


_DESCRIPTIONS = {
    "401": "API key missing, not valid or revoked",
    "403": "API key lacks the scope",
    "404": "Not found",
    "406": "The Accept header asks for a representation this operation cannot produce",
    "409": "Conflict",
    "413": "Request body too large",
    "415": "Body is not application/json",
    "422": "Request not valid, or the inputs cannot be answered",
    "500": "Internal error (quote request_id)",
    "503": "Database unavailable; retry after Retry-After seconds",
}


def _problem_response(status: str) -> dict[str, Any]:
    return {
        "description": _DESCRIPTIONS[status],
        "content": {PROBLEM_CONTENT_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
    }


def build_openapi(app: FastAPI, *, routes: Sequence[BaseRoute] | None = None) -> dict[str, Any]:
    """``routes``: in the order the document lists them (default: the app's, in matching order)."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes if routes is None else routes,
        tags=app.openapi_tags,
        servers=app.servers,
    )
    components = schema.setdefault("components", {})
    component_schemas = components.setdefault("schemas", {})
    component_schemas["Problem"] = PROBLEM_SCHEMA
    for model in _EXTRA_COMPONENTS:
        extra = model.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, definition in extra.pop("$defs", {}).items():
            component_schemas.setdefault(name, definition)
        component_schemas.setdefault(model.__name__, extra)
    component_schemas.pop("HTTPValidationError", None)
    component_schemas.pop("ValidationError", None)
    for path, operations in schema.get("paths", {}).items():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            extra = operation.pop("x-problems", [])
            statuses = {"500", *extra}
            if operation.get("parameters") or operation.get("requestBody"):
                statuses.add("422")
            if operation.get("requestBody"):
                statuses.update({"413", "415"})
            if "{" in path:
                statuses.add("404")
            if operation.get("security"):
                statuses.update({"401", "403", "503"})
            for status in sorted(statuses):
                existing = responses.get(status)
                if existing is None or (
                    "application/json" in existing.get("content", {}) and status != "200"
                ):
                    responses[status] = _problem_response(status)
    add_examples(schema)
    app.openapi_schema = schema
    return schema
