"""Wall-clock, device-hours, cost and energy for a token budget."""

from __future__ import annotations

from fastapi import APIRouter

from service.api.resolve import resolve_accelerator, resolve_model, with_field_prefix
from service.api.schemas.efficiency import (
    AcceleratorBrief,
    JobCostRead,
    TrainingEstimateRead,
    TrainingEstimateRequest,
)
from service.domain import estimates, flops

router = APIRouter(tags=["estimates"])
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


def _summary(result: estimates.TrainingEstimate) -> str:
    given = result.at_given_mfu
    lines = [
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


@router.post(
    "/estimates/training",
    summary="Wall-clock, device-hours, cost and energy of a training job at an MFU, beside 30–60% MFU",
)
async def estimate_training(request: TrainingEstimateRequest) -> TrainingEstimateRead:
    accelerator = resolve_accelerator(request.hardware)
    model_flops_per_token: float | None = None
    if request.model is not None and request.seq_len_tokens is not None:
        spec = resolve_model(request.model)
        seq_len = request.seq_len_tokens
        model_flops_per_token = with_field_prefix(
            "body", lambda: flops.flops_per_token(spec, seq_len, convention=request.convention)
        ).training_flops_per_token
    result = with_field_prefix(
        "body",
        lambda: estimates.estimate_training(
            accelerator=accelerator,
            device_count=request.hardware.count,
            precision=request.precision,
            mfu=request.mfu,
            total_training_flops=request.total_training_flops,
            model_flops_per_token=model_flops_per_token,
            tokens=request.tokens,
            steps=request.steps,
            batch_tokens=request.batch_tokens,
            price_per_device_hour=request.price_per_device_hour,
        ),
    )
    return TrainingEstimateRead(
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
        summary=_summary(result),
    )
