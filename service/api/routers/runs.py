"""Stored runs and their measurements (API key)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Path, Query, Request
from pydantic import TypeAdapter
from sqlalchemy import Engine
from starlette.responses import Response

from service import plots
from service.api import measurement_request
from service.api.cursors import CursorCodec, cursor_codec, decode_run_position
from service.api.deps import (
    SECURITY_REQUIREMENT,
    Reader,
    WritePrincipal,
    WriteUow,
    get_engine,
    get_settings,
    measurement_ingest,
    principal_rechecked_on_write,
)
from service.api.json_body import StrictJsonRoute
from service.api.negotiation import JSON, NEGOTIATED, PNG, SVG, media_response, negotiate, representations
from service.api.presenters.comparison import comparison_read
from service.api.presenters.efficiency import run_efficiency_read
from service.api.presenters.measurements import measurement_page
from service.api.presenters.run_prediction import predicted_vs_measured
from service.api.presenters.runs import run_page, run_read
from service.api.resolve import normalise_accelerator, normalise_model
from service.api.run_request import prepare_run, request_fingerprint
from service.api.schemas.fields import INT64_MAX, NO_NUL_PATTERN, RUN_ID_PATTERN, Text, UtcDatetime
from service.api.schemas.measurements import (
    MEASUREMENT_EXAMPLE,
    MEASUREMENTS_EXAMPLE,
    MeasurementItem,
    MeasurementPage,
    MeasurementsAdded,
)
from service.api.schemas.runs import (
    RunCompareRequest,
    RunComparison,
    RunCreate,
    RunEfficiency,
    RunPage,
    RunRead,
    RunSort,
    RunStatus,
    RunUpdate,
    SortOrder,
)
from service.store.run_filters import RunFilters
from service.usecases import comparison, measurement_history, record_run, run_prediction
from service.usecases import efficiency as efficiency_usecase
from service.usecases import runs as runs_usecase

router = APIRouter(tags=["runs"], route_class=StrictJsonRoute)

EngineDep = Annotated[Engine, Depends(get_engine)]
RunId = Annotated[
    str, Path(min_length=1, max_length=32, pattern=RUN_ID_PATTERN, description="the run's id (`run_…`)")
]


def _inline_refs(node: Any, definitions: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return _inline_refs(copy.deepcopy(definitions[ref.rsplit("/", 1)[1]]), definitions)
        return {key: _inline_refs(value, definitions) for key, value in node.items() if key != "$defs"}
    if isinstance(node, list):
        return [_inline_refs(value, definitions) for value in node]
    return node


def _measurements_body_schema() -> dict[str, Any]:
    """The ingest body for the contract: one MeasurementIn or a list of them (self-contained)."""
    schema = TypeAdapter(MeasurementItem).json_schema()
    item = _inline_refs(schema, schema.get("$defs", {}))
    # Generators name an inline object by its title: two copies titled alike read as one model
    # declared twice, and openapi-python-client then drops the whole operation. The batch's copy
    # gets titles of its own.
    batch_item = copy.deepcopy(item)
    batch_item["title"] = "MeasurementInBatchItem"
    batch_item["properties"]["throughput"]["title"] = "ThroughputItemBatchItem"
    return {
        "anyOf": [
            item,
            {
                "type": "array",
                "items": batch_item,
                "minItems": 1,
                "description": "up to max_measurements_per_request",
            },
        ]
    }


_MEASUREMENTS_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            JSON: {
                "schema": _measurements_body_schema(),
                "examples": {
                    "one": {"summary": "one measurement", "value": MEASUREMENT_EXAMPLE},
                    "batch": {"summary": "a batch", "value": MEASUREMENTS_EXAMPLE},
                },
            }
        },
    }
}


def _json(body: bytes, status: int, headers: dict[str, str] | None = None) -> Response:
    return Response(body, status_code=status, media_type=JSON, headers=headers)


@router.post(
    "/runs/compare",
    response_model=RunComparison,
    summary="Compare 2-20 runs side by side",
    description="MFU (median, latest), achieved TFLOP/s and tokens/s per device, cost per billion tokens "
    "where a price is known, time to the token budget; `differing_fields` names the configuration fields "
    "that differ across the runs. An id that is not the caller's tenant's answers 404 naming it. "
    "`Accept: image/svg+xml` or `image/png` answers a chart of the runs' median and latest MFU.",
    responses=representations(SVG, PNG),
    openapi_extra={"x-problems": ["404", "406"]},
)
def compare_runs(
    request_body: RunCompareRequest, request: Request, reader: Reader
) -> RunComparison | Response:
    media_type = negotiate(request, (JSON, SVG, PNG))
    with reader.unit_of_work() as uow:
        compared = comparison_read(
            comparison.compare_runs(uow, tenant=reader.principal.tenant, run_ids=request_body.run_ids)
        )
    if media_type == JSON:
        return compared
    chart = plots.run_comparison_chart(
        "svg" if media_type == SVG else "png",
        runs=[
            (
                f"{run.run_id} · {run.model_name} · {run.device_count} × {run.accelerator_id}",
                run.median_mfu,
                run.latest_mfu,
            )
            for run in compared.runs
        ],
        title=f"MFU of {len(compared.runs)} runs compared",
        best_run_id=compared.best_median_mfu_run_id,
    )
    return media_response(
        chart, media_type, filename="runs-compared." + ("svg" if media_type == SVG else "png")
    )


@router.post(
    "/runs",
    status_code=201,
    response_model=RunRead,
    summary="Record a run",
    description="Stores the run's description and what follows from it: parameter counts, size class, "
    "FLOPs per token (model FLOPs for MFU, with the declared recomputation for HFU) and the dense peak "
    "per device. `Idempotency-Key`: the same key with the same body answers the first response again "
    "(same status and body, header `Idempotent-Replayed: true`); with another body 422 "
    "`idempotency-key-reused`; while the first request is still running 409 `idempotency-in-flight`. "
    "Keys are kept 24 hours per tenant. (cluster, scheduler_job_id, attempt) names one run per tenant: "
    "a second one is 409 with `existing_run_id`.",
    openapi_extra={"x-problems": ["409"]},
    response_description="the run, with `Location` pointing at it",
)
def create_run(
    request_body: RunCreate,
    principal: WritePrincipal,
    engine: EngineDep,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            min_length=1,
            max_length=200,
            description="any unique string (a UUID); retries of one request reuse it",
        ),
    ] = None,
) -> Response:
    outcome = record_run.record_run(
        engine,
        tenant=principal.tenant,
        prepared=prepare_run(request_body, now=datetime.now(UTC)),
        present=lambda run: run_read(run).model_dump(mode="json"),
        idempotency_key=idempotency_key,
        fingerprint="" if idempotency_key is None else request_fingerprint(request_body),
    )
    headers = {"Location": f"/v1/runs/{outcome.run_id}"}
    if outcome.replayed:
        headers["Idempotent-Replayed"] = "true"
    return _json(outcome.body, outcome.status, headers)


@router.get(
    "/runs",
    response_model=RunPage,
    summary="List runs: filter, sort, page",
    description="Keyset pagination: pass `next_cursor` as `cursor` with the same filters and sort. Runs "
    "recorded while you page never make you see a run twice or miss one that existed when you began "
    "(sorting by `median_mfu`, a run whose median changes while you page may move). Runs without "
    "measurements have no median: they sort lowest. Parameter filters are total parameters.",
)
def list_runs(
    reader: Reader,
    accelerator: Annotated[
        str | None,
        Query(max_length=100, pattern=NO_NUL_PATTERN, description="catalog id or device name, or `custom`"),
    ] = None,
    model: Annotated[
        str | None, Query(max_length=200, pattern=NO_NUL_PATTERN, description="preset id or model name")
    ] = None,
    min_parameters: Annotated[int | None, Query(ge=0, le=INT64_MAX)] = None,
    max_parameters: Annotated[int | None, Query(ge=0, le=INT64_MAX)] = None,
    tag: Annotated[list[Text] | None, Query(max_length=10, description="runs with every tag given")] = None,
    cluster: Annotated[str | None, Query(max_length=200, pattern=NO_NUL_PATTERN)] = None,
    status: RunStatus | None = None,
    started_after: Annotated[UtcDatetime | None, Query(description="inclusive")] = None,
    started_before: Annotated[UtcDatetime | None, Query(description="exclusive")] = None,
    min_mfu: Annotated[float | None, Query(ge=0, le=1, description="on the run's median MFU")] = None,
    max_mfu: Annotated[float | None, Query(ge=0, le=1)] = None,
    sort: RunSort = "started_at",
    order: SortOrder = "desc",
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[str | None, Query(max_length=500, pattern=NO_NUL_PATTERN)] = None,
    cursors: CursorCodec = Depends(cursor_codec),
) -> RunPage:
    filters = RunFilters(
        accelerator=normalise_accelerator(accelerator),
        model=normalise_model(model),
        min_parameters=min_parameters,
        max_parameters=max_parameters,
        tags=tuple(dict.fromkeys(tag or ())),
        cluster=cluster,
        status=status,
        started_after=started_after,
        started_before=started_before,
        min_mfu=min_mfu,
        max_mfu=max_mfu,
    )
    after = None
    if cursor is not None:
        after = decode_run_position(cursors, cursor, filters=filters, sort=sort, order=order)
    with reader.unit_of_work() as uow:
        page = runs_usecase.list_runs(
            uow.connection,
            tenant=reader.principal.tenant,
            filters=filters,
            sort=sort,
            descending=order == "desc",
            limit=limit,
            after=after,
        )
    return run_page(page, filters=filters, sort=sort, order=order, limit=limit, cursors=cursors)


@router.get("/runs/{run_id}", response_model=RunRead, summary="Read a run")
def get_run(run_id: RunId, reader: Reader) -> RunRead:
    with reader.unit_of_work() as uow:
        return run_read(
            runs_usecase.require_run(uow.connection, tenant=reader.principal.tenant, run_id=run_id)
        )


@router.patch(
    "/runs/{run_id}",
    response_model=RunRead,
    summary="Update status, tags, finish time, budget or price",
    description="Status: `running` → `finished` | `failed`, once. Those two are final: another status "
    "is 409 (record a restart as a new run with the next attempt); the same status again changes "
    "nothing (a retried call is safe). `finished_at` defaults to now and is only accepted with a final "
    "status (422 otherwise, or when it is before `started_at`). `tags` replaces the set; `add_tags` / "
    "`remove_tags` edit it.",
    openapi_extra={"x-problems": ["409"]},
)
def update_run(run_id: RunId, request_body: RunUpdate, principal: WritePrincipal, uow: WriteUow) -> RunRead:
    changes = {name: getattr(request_body, name) for name in request_body.model_fields_set}
    updated = runs_usecase.update_run(
        uow, tenant=principal.tenant, run_id=run_id, changes=changes, now=datetime.now(UTC)
    )
    return run_read(updated)


@router.delete(
    "/runs/{run_id}",
    status_code=204,
    summary="Delete a run and its measurements",
    description="The run's measurements go with it and its median leaves the fleet statistics, in "
    "one transaction.",
    response_class=Response,
)
def delete_run(run_id: RunId, principal: WritePrincipal, uow: WriteUow) -> Response:
    runs_usecase.delete_run(uow, tenant=principal.tenant, run_id=run_id)
    return Response(status_code=204)


@router.post(
    "/runs/{run_id}/measurements",
    response_model=MeasurementsAdded,
    summary="Add one measurement or a batch",
    description="One measurement object, or a list of up to `max_measurements_per_request` (10,000 by "
    "default). Each is stored with its MFU, HFU, achieved TFLOP/s per device and tokens/s, computed from "
    "the run's FLOPs per token and peak. **All or nothing**: an invalid item (422 naming `body[i].field`) "
    "or an MFU above 1 (422 `implausible-result`) stores nothing. **Repeated steps**: a (run, step) is "
    "stored once and the first write wins; a step the run already has, or one repeated within the "
    "request, is ignored and listed in `ignored_steps`, so a retried call is idempotent. Measurements "
    "are accepted in any run status (late reports of a finished run are kept).",
    openapi_extra={**_MEASUREMENTS_BODY, "security": SECURITY_REQUIREMENT},
)
async def add_measurements(run_id: RunId, request: Request) -> Response:
    # The hot path: no FastAPI dependencies (their solving cost more than the rest of a one-item
    # request); the key is authenticated from the principal cache and checked again in the write
    # transaction (see service.usecases.measurements). Takes the raw body: validated straight from the
    # JSON bytes, where FastAPI would build the Python objects first and validate them after.
    principal = await principal_rechecked_on_write(request, "write")
    settings = await get_settings(request)
    body = await request.body()
    added = await measurement_request.add_measurements(
        measurement_ingest(request),
        principal=principal,
        run_id=run_id,
        body=body,
        max_items=settings.max_measurements_per_request,
    )
    # Serialized here: the model was built by the service, so FastAPI's re-validation of the
    # response model would only repeat it.
    return Response(content=added.model_dump_json(), media_type="application/json")


@router.get(
    "/runs/{run_id}/measurements",
    response_model=MeasurementPage,
    summary="A run's measurements, by step",
    description="Keyset pagination by step: pass `next_cursor` as `cursor`.",
)
def list_measurements(
    run_id: RunId,
    reader: Reader,
    min_step: Annotated[int | None, Query(ge=0, le=INT64_MAX)] = None,
    max_step: Annotated[int | None, Query(ge=0, le=INT64_MAX)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(max_length=500, pattern=NO_NUL_PATTERN)] = None,
    cursors: CursorCodec = Depends(cursor_codec),
) -> MeasurementPage:
    scope = f"{run_id}:{min_step}:{max_step}"
    after = None if cursor is None else cursors.decode_step(cursor, scope=scope)
    with reader.unit_of_work() as uow:
        page = measurement_history.measurement_history(
            uow.connection,
            tenant=reader.principal.tenant,
            run_id=run_id,
            limit=limit,
            after_step=after,
            min_step=min_step,
            max_step=max_step,
        )
    return measurement_page(page, limit=limit, scope=scope, cursors=cursors)


@router.get(
    "/runs/{run_id}/efficiency",
    response_model=RunEfficiency,
    summary="A run's MFU: distribution, trend, tokens so far, time to budget",
    description="Median, p10 and p90 MFU (from the run's histogram, 0.001 resolution), the latest MFU, "
    "the trend (slope per hour, first-vs-last-quarter change) and a series of at most 240 points. "
    "Tokens so far = latest step × global batch tokens. `prediction` is the performance model's "
    "prediction for the run's recorded layout (fleet-calibrated for its accelerator where 5 or more "
    "runs allow a fit) against the measured median, with the largest losses named; null with a note "
    "when the run did not record enough layout to predict. `Accept: image/svg+xml` or `image/png` "
    "answers a chart of MFU over time.",
    responses=representations(SVG, PNG),
    openapi_extra=NEGOTIATED,
)
def get_run_efficiency(run_id: RunId, request: Request, reader: Reader) -> RunEfficiency | Response:
    media_type = negotiate(request, (JSON, SVG, PNG))
    with reader.unit_of_work() as uow:
        facts = efficiency_usecase.run_efficiency(uow, tenant=reader.principal.tenant, run_id=run_id)
        predicted = run_prediction.predict_stored_run(uow.connection, facts.run)
    answer = run_efficiency_read(facts, predicted_vs_measured(predicted, convention=facts.run.convention))
    if media_type == JSON:
        return answer
    points, run = facts.series, facts.run
    chart = plots.mfu_over_time_chart(
        "svg" if media_type == SVG else "png",
        hours=[point.hours for point in points],
        mfu=[point.mfu for point in points],
        mfu_min=[point.mfu if point.mfu_min is None else point.mfu_min for point in points],
        mfu_max=[point.mfu if point.mfu_max is None else point.mfu_max for point in points],
        median=answer.mfu.median,
        model=run.model_name,
        cluster=f"{run.device_count} × {run.accelerator_name}",
        run_id=answer.run_id,
    )
    if media_type == SVG:
        return media_response(chart, SVG, filename=f"{answer.run_id}-mfu.svg")
    return media_response(chart, PNG, filename=f"{answer.run_id}-mfu.png")
