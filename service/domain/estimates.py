"""Training-job estimates: total FLOPs, wall-clock, device-hours, cost and energy at an MFU.

Time = FLOPs ÷ (devices × dense peak FLOP/s × MFU) (the MFU definition of
``reference/flops_and_mfu.md`` solved for time; :func:`compute_time_seconds` is the one place it
lives). Energy is devices × TDP × time: an **upper bound**, since devices rarely draw their TDP
throughout and host, network and cooling power are not included.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from service.domain.errors import InvalidInput
from service.domain.hardware import Accelerator, Precision, peak_flops

#: The MFUs shown beside the caller's own: the typical 30-60% range of LLM training
#: (reference/flops_and_mfu.md).
COMPARISON_MFUS: tuple[float, ...] = (0.30, 0.40, 0.50, 0.60)

SECONDS_PER_HOUR = 3600.0
JOULES_PER_KWH = 3.6e6


def _positive(value: float | None, field: str) -> float:
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{field} is required and must be a number.", field=field)
    if not math.isfinite(value) or value <= 0:
        raise InvalidInput(f"{field} must be a positive finite number, got {value!r}.", field=field)
    return float(value)


def _fraction(mfu: float, field: str = "mfu") -> float:
    value = _positive(mfu, field)
    if value > 1:
        raise InvalidInput(
            f"{field} is a fraction in (0, 1], got {value!r}; give 0.45 for 45%.",
            field=field,
        )
    return value


def compute_time_seconds(
    flops: float, *, device_count: int, peak_flops_per_device: float, mfu: float
) -> float:
    """Seconds to execute ``flops`` of model FLOPs on ``device_count`` devices at ``mfu``.

    The same formula gives a step time (FLOPs per step) and a job's wall-clock (FLOPs of the job).
    """
    return flops / (device_count * peak_flops_per_device * mfu)


@dataclass(frozen=True, slots=True)
class JobCost:
    """One job at one MFU."""

    mfu: float
    wall_clock_seconds: float
    device_hours: float
    cost: float | None
    energy_kwh_upper_bound: float | None
    devices_to_match_wall_clock: int


@dataclass(frozen=True, slots=True)
class TrainingEstimate:
    """A training job at the caller's MFU, with the same job at :data:`COMPARISON_MFUS` beside it.

    ``devices_to_match_wall_clock`` (in each :class:`JobCost`) is how many devices that MFU needs to
    finish in the caller's wall-clock: the device-count an MFU gain is worth. Energy is at TDP, an
    upper bound (None where the part has no published TDP).
    """

    total_training_flops: float
    tokens: float | None
    device_count: int
    peak_flops_per_device: float
    precision: Precision
    price_per_device_hour: float | None
    at_given_mfu: JobCost
    at_other_mfus: tuple[JobCost, ...]


def devices_to_match(device_count: int, mfu: float, other_mfu: float) -> int:
    """Devices needed at ``other_mfu`` to match the wall-clock of ``device_count`` devices at ``mfu``.

    Time ∝ 1 / (devices × MFU), so devices scale by ``mfu / other_mfu`` (rounded up to whole devices).
    """
    return max(1, math.ceil(device_count * mfu / other_mfu - 1e-9))


def estimate_training(
    *,
    accelerator: Accelerator,
    device_count: int,
    precision: Precision,
    mfu: float,
    total_training_flops: float | None = None,
    model_flops_per_token: float | None = None,
    token_budget_tokens: float | None = None,
    total_steps: int | None = None,
    global_batch_tokens: int | None = None,
    price_per_device_hour: float | None = None,
) -> TrainingEstimate:
    """Wall-clock, device-hours, cost and energy of a training job.

    Give either ``total_training_flops``, or ``model_flops_per_token`` with a token budget:
    ``token_budget_tokens``, or ``total_steps`` × ``global_batch_tokens``. ``model_flops_per_token`` is training FLOPs per token without
    recomputation (MFU counts model FLOPs), e.g. :attr:`FlopsBreakdown.training_flops_per_token`.
    """
    if isinstance(device_count, bool) or not isinstance(device_count, int) or device_count <= 0:
        raise InvalidInput(
            f"device_count must be a positive integer, got {device_count!r}.", field="device_count"
        )
    given_mfu = _fraction(mfu)
    peak = peak_flops(accelerator, precision)
    price = (
        None if price_per_device_hour is None else _positive(price_per_device_hour, "price_per_device_hour")
    )

    budget_tokens: float | None = None
    if total_training_flops is not None:
        if model_flops_per_token is not None or token_budget_tokens is not None or total_steps is not None:
            raise InvalidInput(
                "give either total_training_flops, or model_flops_per_token with a token budget; not both.",
                field="total_training_flops",
            )
        total = _positive(total_training_flops, "total_training_flops")
    else:
        per_token = _positive(model_flops_per_token, "model_flops_per_token")
        if token_budget_tokens is not None:
            if total_steps is not None or global_batch_tokens is not None:
                raise InvalidInput(
                    "give token_budget_tokens, or total_steps with global_batch_tokens; not both.",
                    field="token_budget_tokens",
                )
            budget_tokens = _positive(token_budget_tokens, "token_budget_tokens")
        elif total_steps is not None or global_batch_tokens is not None:
            budget_tokens = _positive(total_steps, "total_steps") * _positive(
                global_batch_tokens, "global_batch_tokens"
            )
        else:
            raise InvalidInput(
                "give a token budget: token_budget_tokens, or total_steps with global_batch_tokens (or "
                "total_training_flops).",
                field="token_budget_tokens",
            )
        total = per_token * budget_tokens

    def at(job_mfu: float) -> JobCost:
        seconds = compute_time_seconds(
            total, device_count=device_count, peak_flops_per_device=peak, mfu=job_mfu
        )
        device_hours = seconds * device_count / SECONDS_PER_HOUR
        energy = (
            None
            if accelerator.tdp_watts is None
            else accelerator.tdp_watts * device_count * seconds / JOULES_PER_KWH
        )
        cost = None if price is None else device_hours * price
        if not all(math.isfinite(v) for v in (seconds, device_hours, cost or 0.0, energy or 0.0)):
            # A float cannot hold the answer (e.g. an MFU of 5e-324): say which input took it there.
            raise InvalidInput(
                f"at MFU {job_mfu:g} this job's time, device-hours or cost is beyond a float's range "
                f"(total training FLOPs {total:g} on {device_count} × {peak:g} FLOP/s); give a realistic "
                "MFU (0.2-0.6 is typical) and budget.",
                field="mfu" if job_mfu == given_mfu else "total_training_flops",
            )
        return JobCost(
            mfu=job_mfu,
            wall_clock_seconds=seconds,
            device_hours=device_hours,
            cost=cost,
            energy_kwh_upper_bound=energy,
            devices_to_match_wall_clock=devices_to_match(device_count, given_mfu, job_mfu),
        )

    return TrainingEstimate(
        total_training_flops=total,
        tokens=budget_tokens,
        device_count=device_count,
        peak_flops_per_device=peak,
        precision=precision,
        price_per_device_hour=price,
        at_given_mfu=at(given_mfu),
        at_other_mfus=tuple(at(m) for m in COMPARISON_MFUS),
    )
