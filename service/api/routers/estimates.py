"""Wall-clock, device-hours, cost and energy for a token budget."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Request

from service.api.calibration import CALIBRATION_PROBLEMS, calibration_read, resolve_calibration
from service.api.json_body import StrictJsonRoute
from service.api.presenters.memory import GIB, domain_layout, layout_read
from service.api.presenters.plans import describe_layout, search_layouts
from service.api.presenters.predictions import largest_loss, make_cluster, run_prediction
from service.api.resolve import resolve_accelerator, resolve_model, with_field_prefix
from service.api.schemas.efficiency import (
    AcceleratorBrief,
    JobCostRead,
    TrainingEstimateRead,
    TrainingEstimateRequest,
)
from service.api.schemas.performance import PredictionSummaryRead
from service.api.schemas.plans import PlanConstraintsIn
from service.domain import estimates, flops, hardware, performance
from service.domain.errors import ImplausibleResult, InvalidInput
from service.domain.models import ModelSpec

router = APIRouter(tags=["estimates"], route_class=StrictJsonRoute)
SECONDS_PER_DAY = 86_400.0


def _cost(job: estimates.JobCost) -> JobCostRead:
    return JobCostRead(
        mfu=job.mfu,
        wall_clock_seconds=job.wall_clock_seconds,
        wall_clock_days=job.wall_clock_seconds / SECONDS_PER_DAY,
        device_hours=job.device_hours,
        cost=job.cost,
        energy_kwh_upper_bound=job.energy_kwh_upper_bound,
        devices_to_match_wall_clock=job.devices_to_match_wall_clock,
    )


def _summary(result: estimates.TrainingEstimate, prediction: PredictionSummaryRead | None) -> str:
    given = result.at_given_mfu
    lines = [] if prediction is None else [f"MFU predicted: {prediction.reading}"]
    lines += [
        f"At MFU {given.mfu:.0%} the job takes {given.wall_clock_seconds / SECONDS_PER_DAY:.3g} days on "
        f"{result.device_count} devices ({given.device_hours:,.0f} device-hours)."
    ]
    low = next((job for job in result.at_other_mfus if abs(job.mfu - 0.30) < 1e-9), None)
    high = next((job for job in result.at_other_mfus if abs(job.mfu - 0.60) < 1e-9), None)
    if low and high:
        lines.append(
            f"Raising MFU from 30% to 60% halves the wall-clock ({low.wall_clock_seconds / SECONDS_PER_DAY:.3g} → "
            f"{high.wall_clock_seconds / SECONDS_PER_DAY:.3g} days); at 30% it would take "
            f"{low.devices_to_match_wall_clock} devices to match MFU {given.mfu:.0%} on {result.device_count}."
        )
    return " ".join(lines)


async def predicted_mfu(
    request: TrainingEstimateRequest, spec: ModelSpec, accelerator: hardware.Accelerator, http: Request
) -> PredictionSummaryRead:
    """The MFU of ``request.predict``: ``predict_step`` on its layout, or on the planner's fastest layout
    when it gives none (under the request's convention, passed explicitly)."""
    given = request.predict
    seq_len = request.seq_len_tokens
    assert given is not None and seq_len is not None  # the request's validator checked both
    if given.global_batch_sequences is not None:
        batch, batch_field = given.global_batch_sequences, "body.predict.global_batch_sequences"
    elif given.global_batch_tokens is not None:
        batch, batch_field = given.global_batch_tokens // seq_len, "body.predict.global_batch_tokens"
    else:
        assert request.global_batch_tokens is not None
        batch, batch_field = request.global_batch_tokens // seq_len, "body.global_batch_tokens"
    fields = {
        "device_count": "body.hardware.device_count",
        "global_batch_sequences": batch_field,
        "optimizer": "body.predict.optimizer",
        **{
            name: f"body.predict.{name}"
            for name in (
                "devices_per_node",
                "inter_node_bandwidth_bytes_per_second",
                "intra_node_bandwidth_bytes_per_second",
            )
        },
    }
    cluster = make_cluster(
        accelerator,
        device_count=request.hardware.device_count,
        devices_per_node=given.devices_per_node,
        inter_node_bandwidth_bytes_per_second=given.inter_node_bandwidth_bytes_per_second,
        intra_node_bandwidth_bytes_per_second=given.intra_node_bandwidth_bytes_per_second,
        fields=fields,
    )
    with_field_prefix("body", lambda: hardware.peak_flops(accelerator, request.precision))
    calibration = await resolve_calibration(
        given.calibration, accelerator=accelerator, request=http, field="body.predict.calibration"
    )
    prediction: performance.StepPrediction
    if given.layout is not None:
        layout = domain_layout(given.layout, field="body.predict.layout")
        prediction = run_prediction(
            spec, seq_len, cluster, layout, batch, precision=request.precision, calibration=calibration,
            optimizer=given.optimizer, convention=request.convention, dropout=given.dropout,
            layout_field="body.predict.layout", fields=fields,
        )  # fmt: skip
        source: Literal["given", "planner_best"] = "given"
    else:
        result, _ = await search_layouts(
            spec, seq_len, cluster, batch, given.constraints or PlanConstraintsIn(),
            precision=request.precision, calibration=calibration, optimizer=given.optimizer,
            convention=request.convention, dropout=given.dropout,
            constraints_field="body.predict.constraints", fields=fields,
        )  # fmt: skip
        if result.best is None:
            top = result.infeasible[0].reason if result.infeasible else "no layout was evaluated"
            raise InvalidInput(
                f"no layout of the {result.evaluated_count} evaluated fits this job (most dropped because: "
                f"{top}); give predict.layout, more devices or a smaller batch, or give mfu.",
                field="body.predict",
            )
        prediction, source = result.best.prediction, "planner_best"
    if not 0 < prediction.mfu <= 1:
        raise ImplausibleResult(
            f"the predicted MFU under the {request.convention} convention is {prediction.mfu:.3g}, outside (0, 1]; "
            "use convention megatron_causal (causal attention) or give mfu.",
            field="body.convention",
        )
    loss, share = largest_loss(prediction)
    label = "planner's best layout" if source == "planner_best" else "given layout"
    layout_used = layout_read(prediction.layout)
    return PredictionSummaryRead(
        layout_source=source,
        layout=layout_used,
        global_batch_sequences=batch,
        step_time_seconds=prediction.step_time_seconds,
        tokens_per_second=prediction.tokens_per_second,
        mfu=prediction.mfu,
        hfu=prediction.hfu,
        fits=prediction.memory.fits,
        memory_per_device_gib=prediction.memory.total_bytes / GIB,
        largest_loss=loss,
        calibration=calibration_read(prediction.calibration),
        reading=f"{prediction.mfu:.1%} ({request.convention}) on the {label}, {describe_layout(layout_used)}: "
        f"{prediction.step_time_seconds:.3g} s per step"
        + (", although it does not fit in device memory" if prediction.memory.fits is False else "")
        + f"; largest loss {loss.replace('_', ' ')} ({share:.0%} of the step).",
    )


@router.post(
    "/estimates/training",
    summary="Wall-clock, device-hours, cost and energy of a training job at an MFU, beside 30–60% MFU",
    openapi_extra=CALIBRATION_PROBLEMS,
)
async def estimate_training(request: TrainingEstimateRequest, http: Request) -> TrainingEstimateRead:
    """Time = total model FLOPs ÷ (devices × dense peak × MFU), at the given MFU and at 30–60% beside it.

    The MFU is either given (`mfu`) or predicted (`predict`): `POST /v1/predictions/step` on
    `predict.layout`, or, without a layout, on the fastest layout `POST /v1/plans/parallelism` finds;
    `mfu_source` and `prediction` say which. A prediction counts FLOPs under the request's `convention`
    (default `palm`), the same count the total FLOPs use.
    """
    accelerator = resolve_accelerator(request.hardware)
    model_flops_per_token: float | None = None
    prediction: PredictionSummaryRead | None = None
    mfu = request.mfu
    if request.model is not None and request.seq_len_tokens is not None:
        spec = resolve_model(request.model)
        seq_len = request.seq_len_tokens
        model_flops_per_token = with_field_prefix(
            "body", lambda: flops.flops_per_token(spec, seq_len, convention=request.convention)
        ).training_flops_per_token
        if request.predict is not None:
            prediction = await predicted_mfu(request, spec, accelerator, http)
            mfu = prediction.mfu
    assert mfu is not None  # the request's validator requires mfu or predict (which needs model)
    job_mfu = mfu
    result = with_field_prefix(
        "body",
        lambda: estimates.estimate_training(
            accelerator=accelerator,
            device_count=request.hardware.device_count,
            precision=request.precision,
            mfu=job_mfu,
            total_training_flops=request.total_training_flops,
            model_flops_per_token=model_flops_per_token,
            token_budget_tokens=request.token_budget_tokens,
            total_steps=request.total_steps,
            global_batch_tokens=request.global_batch_tokens,
            price_per_device_hour=request.price_per_device_hour,
        ),
    )
    return TrainingEstimateRead(
        mfu_source="given" if prediction is None else "predicted",
        prediction=prediction,
        total_training_flops=result.total_training_flops,
        tokens=result.tokens,
        model_flops_per_token=model_flops_per_token,
        device_count=result.device_count,
        accelerator=AcceleratorBrief(id=accelerator.id, display_name=accelerator.display_name),
        precision=result.precision,
        peak_tflops_per_device=result.peak_flops_per_device / 1e12,
        price_per_device_hour=result.price_per_device_hour,
        convention=request.convention,
        at_given_mfu=_cost(result.at_given_mfu),
        at_other_mfus=[_cost(job) for job in result.at_other_mfus],
        summary=_summary(result, prediction),
    )
