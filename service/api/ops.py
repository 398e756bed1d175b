"""Operations endpoints: liveness, readiness, Prometheus metrics, problem-type documentation."""

from __future__ import annotations

import os

from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest, multiprocess
from sqlalchemy import text
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, Response

from service.api.problems import KINDS_BY_SLUG, NOT_FOUND, ProblemError
from service.store import migrate

router = APIRouter(tags=["operations"])


@router.get("/healthz", summary="Liveness: the process is up", operation_id="get_health")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="Readiness: the database answers and its schema is current",
    operation_id="get_readiness",
    responses={503: {"description": "database unreachable or schema behind"}},
)
def readyz(request: Request) -> JSONResponse:
    engine = request.app.state.engine
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        current = migrate.current_revisions(engine)
    except Exception as exc:
        return JSONResponse(
            {"status": "unavailable", "database": "unreachable", "error": type(exc).__name__},
            status_code=503,
            headers={"Retry-After": "5"},
        )
    heads = migrate.head_revisions()
    if current != heads:
        return JSONResponse(
            {
                "status": "unavailable",
                "database": "schema behind",
                "schema": list(current),
                "expected": list(heads),
            },
            status_code=503,
            headers={"Retry-After": "30"},
        )
    return JSONResponse({"status": "ok", "database": "reachable", "schema": list(current)})


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    operation_id="get_metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}}},
)
async def metrics(request: Request) -> Response:
    if "PROMETHEUS_MULTIPROC_DIR" in os.environ:
        # Several uvicorn workers: aggregate every worker's samples.
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        data = generate_latest(registry)
    else:
        data = generate_latest(REGISTRY)
    # The fleet aggregates read the database (service.api.fleet_metrics): off the event loop.
    data += await run_in_threadpool(generate_latest, request.app.state.fleet_metrics)
    return Response(data, media_type=CONTENT_TYPE_LATEST)


@router.get(
    "/problems/{slug}",
    summary="What a problem type means",
    operation_id="get_problem_type",
    tags=["operations"],
)
async def problem_type(slug: str) -> dict[str, object]:
    kind = KINDS_BY_SLUG.get(slug)
    if kind is None:
        raise ProblemError(NOT_FOUND, f"No problem type {slug!r}; known: {', '.join(sorted(KINDS_BY_SLUG))}.")
    return {
        "type": kind.type_uri,
        "status": kind.status,
        "title": kind.title,
        "description": kind.description,
    }
