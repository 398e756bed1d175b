"""The app factory: settings in, a FastAPI app out. No work at import time."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.routing import APIRoute
from sqlalchemy import Engine
from starlette.routing import BaseRoute

from service import __version__
from service.api.baseline import router as baseline_router
from service.api.cursors import CursorCodec
from service.api.deps import PrincipalCache
from service.api.docs import install_docs
from service.api.fleet_metrics import fleet_metrics_registry
from service.api.handlers import install_handlers
from service.api.middleware import RequestContextMiddleware
from service.api.openapi import build_openapi
from service.api.ops import router as ops_router
from service.api.routers import MATCH_ORDER, ROUTERS, TAGS
from service.observability import LOGGER_NAME
from service.settings import Settings, load_settings
from service.store import migrate
from service.store.engine import build_engine, max_connections
from service.usecases.ingest import MeasurementIngest

logger = logging.getLogger(LOGGER_NAME)

DESCRIPTION = """\
How efficient is a training run, what should it reach, and how should it be configured?

* **Estimates** (no key needed): FLOPs per token, MFU/HFU from a measured throughput, training time
  and cost, memory per device, predicted step time with the gap to peak broken down, parallel-layout
  plans, learning-rate schedules and advice, critical batch size, compute-optimal sizing.
* **Runs** (API key): record runs and their measured throughput, compare runs, fleet MFU statistics.

Conventions: FLOPs multiply-adds count 2; peaks are dense (no 2:4 sparsity); MFU excludes
recomputation, HFU includes it; batch sizes are in tokens unless a field says sequences; loss in nats
per token. Errors are RFC 9457 `application/problem+json` with a stable `type`
(see `/problems/{slug}`). Unknown fields in a body are rejected (422), so a misspelt field never
silently changes an answer.
"""


def _operation_id(route: APIRoute) -> str:
    return route.name


def create_app(
    settings: Settings | None = None, *, engine: Engine | None = None, freeze_heap_on_start: bool = False
) -> FastAPI:
    """``freeze_heap_on_start``: for the process that serves (`teff serve`): once started, what the
    start-up made (modules, schemas, routes: most of the heap) is moved out of the cyclic garbage
    collector's sight (``gc.freeze``). A full collection otherwise walks all of it, and under load one
    ran every few seconds for 80-100 ms, stalling every request on the event loop for as long. Not for
    a process that makes many apps (tests): a frozen app that becomes garbage is never collected."""
    settings = settings or load_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        own_engine = engine is None
        app.state.engine = engine or build_engine(
            settings.effective_database_url,
            pool_size=settings.db_pool_size,
            busy_timeout_ms=settings.db_busy_timeout_ms,
            statement_timeout_ms=settings.db_statement_timeout_ms,
            connect_timeout_seconds=settings.db_connect_timeout_seconds,
            pool_timeout_seconds=settings.db_pool_timeout_seconds,
        )
        # Admission for requests that use the database (see deps.get_engine): a request holds at most
        # two connections at once, so half the pool's connections may be in flight; the rest wait on
        # the event loop, holding neither a thread nor a connection. Without it, 64 concurrent store
        # requests starved: threads waited for connections held by requests waiting for a thread.
        app.state.database_admission = asyncio.Semaphore(max(1, max_connections(settings.db_pool_size) // 2))
        if settings.check_schema_on_start:
            # Refuse to serve on an out-of-date schema (a deploy runs `teff db upgrade` first).
            migrate.ensure_schema_current(app.state.engine)
        if freeze_heap_on_start:
            gc.collect()  # start-up's garbage first, so that only live objects are frozen
            gc.freeze()
        try:
            yield
        finally:
            ingest = getattr(app.state, "measurement_ingest", None)
            if ingest is not None:  # commit what is queued before the engine goes
                await ingest.aclose()
                app.state.measurement_ingest = None
            if own_engine:
                app.state.engine.dispose()

    app = FastAPI(
        title="Training-efficiency service",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        generate_unique_id_function=_operation_id,
        openapi_tags=TAGS,
    )
    app.state.settings = settings
    app.state.cursor_codec = CursorCodec.for_settings(settings)
    app.state.principal_cache = principal_cache = PrincipalCache()
    app.state.fleet_metrics = fleet_metrics_registry(lambda: app.state.engine)

    def make_measurement_ingest() -> MeasurementIngest:
        return MeasurementIngest(
            app.state.engine,
            admission=getattr(app.state, "database_admission", None),
            on_revoked_key=principal_cache.forget,
        )

    app.state.make_measurement_ingest = make_measurement_ingest
    if engine is not None:
        app.state.engine = engine
    install_handlers(app)
    app.include_router(ops_router)
    for router in MATCH_ORDER:
        app.include_router(router, prefix="/v1")
    install_docs(app)
    if settings.benchmark_routes:
        app.include_router(baseline_router)
    app.openapi = lambda: build_openapi(app, routes=_in_document_order(app.routes))  # type: ignore[method-assign]
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "PATCH", "DELETE"],
            allow_headers=["Content-Type", "X-API-Key", "Authorization", "Idempotency-Key", "X-Request-ID"],
        )
    app.add_middleware(RequestContextMiddleware, max_body_bytes=settings.max_body_bytes, settings=settings)
    return app


def _in_document_order(routes: list[BaseRoute]) -> list[BaseRoute]:
    """The app's routes with the /v1 routers in ROUTERS order (the contract's), wherever MATCH_ORDER
    put them; the rest keep their places."""
    rank = {id(router): index for index, router in enumerate(ROUTERS)}

    def router_rank(route: BaseRoute) -> int | None:
        return rank.get(id(getattr(route, "original_router", None)))

    places = [index for index, route in enumerate(routes) if router_rank(route) is not None]
    ordered = sorted((routes[index] for index in places), key=lambda route: router_rank(route) or 0)
    result = list(routes)
    for index, route in zip(places, ordered, strict=True):
        result[index] = route
    return result


def app_from_environment() -> FastAPI:
    """Entry for `uvicorn --factory service.app:app_from_environment` (used by `teff serve`)."""
    from service.observability import configure_logging

    settings = load_settings()
    configure_logging(settings.log_level, settings.log_format)
    return create_app(settings, freeze_heap_on_start=True)
