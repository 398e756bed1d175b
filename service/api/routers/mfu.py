"""Model FLOPs Utilization from a measured throughput; a batch form for schedulers."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Request
from pydantic import TypeAdapter, ValidationError
from starlette.responses import Response

from service.api import json_body, problems
from service.api.deps import SettingsDep
from service.api.handlers import domain_problem, validation_detail, validation_errors
from service.api.json_body import StrictJsonRoute
from service.api.openapi import register_component
from service.api.resolve import resolve_accelerator, resolve_model, resolve_throughput, with_field_prefix
from service.api.schemas.efficiency import (
    AcceleratorBrief,
    MfuBatchRead,
    MfuBatchRequest,
    MfuRead,
    MfuRequest,
)
from service.domain import mfu
from service.domain.errors import DomainError

router = APIRouter(tags=["mfu"], route_class=StrictJsonRoute)
# The batch route reads its own body; its envelope schema is documented through the components.
register_component(MfuBatchRequest)


def mfu_answer(request: MfuRequest) -> MfuRead:
    """Resolve the request's references and compute its MFU (shared by the single and batch forms)."""
    spec = resolve_model(request.model)
    accelerator = resolve_accelerator(request.hardware)
    throughput = resolve_throughput(request.throughput)
    result = with_field_prefix(
        "body",
        lambda: mfu.compute_mfu_for_model(
            spec,
            request.seq_len_tokens,
            accelerator=accelerator,
            device_count=request.hardware.device_count,
            precision=request.precision,
            throughput=throughput,
            convention=request.convention,
            recompute=request.recompute,
            embedding_policy=request.embedding_policy,
            parameter_count=request.parameter_count,
        ),
    )
    return MfuRead(
        mfu=result.mfu,
        hfu=result.hfu,
        achieved_tflops_per_device=result.achieved_tflops_per_device,
        hardware_tflops_per_device=result.hardware_tflops_per_device,
        peak_tflops_per_device=result.peak_tflops_per_device,
        model_flops_per_token=result.model_flops_per_token,
        hardware_flops_per_token=result.hardware_flops_per_token,
        tokens_per_second=result.tokens_per_second,
        tokens_per_second_per_device=result.tokens_per_second_per_device,
        device_count=result.device_count,
        accelerator=AcceleratorBrief(id=accelerator.id, display_name=accelerator.display_name),
        precision=request.precision,
        convention=request.convention,
        recompute=request.recompute,
        band=result.band,
        reading=result.reading,
        mfu_vs_bf16_peak=result.mfu_vs_bf16_peak,
        bf16_peak_tflops_per_device=result.bf16_peak_tflops_per_device,
    )


@router.post(
    "/mfu",
    summary="MFU and HFU from a model, hardware, precision and one measured throughput",
    description="MFU = model FLOPs per token × tokens/s ÷ (devices × dense peak). Model FLOPs exclude "
    "recomputation (HFU includes it). An MFU above 1 is a 422 `implausible-result` naming the likely cause "
    "(a sparse peak, a per-device rate given as global, a wrong device count).",
)
async def compute_mfu(request: MfuRequest) -> MfuRead:
    return mfu_answer(request)


_ITEM_ADAPTER: TypeAdapter[MfuRequest] = TypeAdapter(MfuRequest)
_ITEMS_FIELD = "body.items"


def _item_error(kind: problems.ProblemKind, detail: str, **extensions: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": kind.type_uri,
        "title": kind.title,
        "status": kind.status,
        "detail": detail,
    }
    body.update({key: value for key, value in extensions.items() if value is not None})
    return body


def _validation_item_error(index: int, exc: ValidationError) -> dict[str, Any]:
    errors = validation_errors(exc.errors(), root=f"{_ITEMS_FIELD}[{index}]")
    return _item_error(
        problems.VALIDATION_ERROR, validation_detail(errors, total=exc.error_count()), errors=errors
    )


def _batch_item(index: int, raw: Any) -> dict[str, Any]:
    try:
        item = _ITEM_ADAPTER.validate_python(raw)
    except ValidationError as exc:
        return {"index": index, "ok": False, "error": _validation_item_error(index, exc)}
    try:
        answer = mfu_answer(item)
    except DomainError as exc:
        kind, extensions = domain_problem(exc)
        for error in extensions.get("errors", []):
            error["field"] = f"{_ITEMS_FIELD}[{index}].{str(error['field']).removeprefix('body.')}"
        return {"index": index, "ok": False, "error": _item_error(kind, exc.message, **extensions)}
    return {"index": index, "ok": True, "result": answer.model_dump(mode="json")}


@router.post(
    "/mfu/batch",
    summary="Many MFU requests in one call; each item answers or fails on its own, in order",
    description="Up to TEFF_MAX_BATCH_ITEMS (default 1,000) items. The call answers 200 when the envelope is "
    "valid; each item carries either `result` or `error` (a problem document). A malformed envelope "
    "(no `items`, too many items) is a 422 for the whole call.",
    response_model=MfuBatchRead,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/MfuBatchRequest"}}},
        }
    },
)
async def compute_mfu_batch(request: Request, settings: SettingsDep) -> Response:
    # The body is parsed here, not by FastAPI, so that one bad item fails alone instead of the whole call.
    raw_body = await request.body()
    payload = json_body.loads(raw_body)
    items = payload.get("items") if isinstance(payload, dict) else None
    extra_keys = set(payload) - {"items"} if isinstance(payload, dict) else set()
    limit = settings.max_batch_items
    problem: str | None = None
    if not isinstance(items, list) or not items:
        problem = "body.items: give a non-empty list of MFU requests"
    elif len(items) > limit:
        problem = f"body.items: at most {limit} items per call (got {len(items)}); split the batch"
    elif extra_keys:
        problem = f"body: unknown field(s) {', '.join(sorted(extra_keys))}; the envelope has only `items`"
    if problem is not None:
        raise problems.ProblemError(
            problems.VALIDATION_ERROR,
            problem,
            errors=[
                {
                    "field": problem.split(":", 1)[0],
                    "message": problem.split(": ", 1)[1],
                    "code": "value_error",
                }
            ],
        )
    assert isinstance(items, list)
    answers = [_batch_item(index, raw) for index, raw in enumerate(items)]
    succeeded = sum(1 for answer in answers if answer["ok"])
    body = {"items": answers, "succeeded": succeeded, "failed": len(answers) - succeeded}
    return Response(orjson.dumps(body), media_type="application/json")
