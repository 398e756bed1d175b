"""Memory answers and the request -> domain conversions the performance endpoints share: the layout,
the accelerator, and :func:`in_request`, which re-roots a domain error's bare field name at the request
path that holds it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TypeVar

from service.api.resolve import resolve_accelerator, with_field_prefix
from service.api.schemas.cluster import AcceleratorUsedRead
from service.api.schemas.common import CustomAccelerator, HardwareRef
from service.api.schemas.fields import OptimizerName
from service.api.schemas.layout import LayoutIn, LayoutRead
from service.api.schemas.memory import MemoryRead, MemoryRequest, MemorySummaryRead, OptimizerRead
from service.domain import memory as mem
from service.domain.hardware import Accelerator, Precision
from service.domain.models import ModelSpec
from service.domain.parallel_layout import FSDP_ZERO_STAGES, layout_from_knobs, layout_knobs

T = TypeVar("T")

#: The domain's layout attribute names (a domain error's ``field`` when the layout is at fault).
LAYOUT_FIELDS = frozenset(f.name for f in dataclasses.fields(mem.ParallelLayout))
GIB = float(mem.GIB)


def in_request(
    action: Callable[[], T], *, layout: str | None = "body.layout", fields: Mapping[str, str] | None = None
) -> T:
    """Run ``action``; a domain error's bare field is re-rooted at the request (with_field_prefix):
    ``fields`` maps names explicitly, a layout attribute goes under ``layout``, anything else under
    ``body``."""
    names = {name: f"{layout}.{name}" for name in LAYOUT_FIELDS} if layout is not None else {}
    return with_field_prefix("body", action, fields={**names, **(fields or {})})


def domain_layout(layout: LayoutIn, *, field: str = "body.layout") -> mem.ParallelLayout:
    """The domain layout of a request's ``layout`` (the one mapping, :func:`layout_from_knobs`), a
    domain error named at ``field``."""
    return in_request(lambda: layout_from_knobs(layout.model_dump(exclude_none=True)), layout=field)


def layout_read(layout: mem.ParallelLayout) -> LayoutRead:
    """The layout as answered (the same fields a request's ``layout`` takes, every default resolved)."""
    return LayoutRead(**layout_knobs(layout))


def layout_assumptions(given: LayoutIn) -> list[str]:
    notes = []
    if given.sequence_parallel is None and given.tp > 1:
        notes.append("sequence_parallel: on (the default whenever tp > 1)")
    if isinstance(given.zero_stage, str):
        notes.append(
            f"zero_stage {given.zero_stage!r} (FSDP) = ZeRO stage {FSDP_ZERO_STAGES[given.zero_stage]}"
        )
    if given.distributed_optimizer:
        notes.append(
            "distributed optimizer: ZeRO stage 1 over dp·cp with fp32 gradients (6 + 12/d bytes/param)"
        )
    return notes


def resolve_device(accelerator: str | None, custom: CustomAccelerator | None, *, field: str) -> Accelerator:
    """A catalog id / device name or a custom part (``field`` names where the request gave it)."""
    return resolve_accelerator(
        HardwareRef(accelerator=accelerator, custom=custom, device_count=1), field=field
    )


def accelerator_read(accelerator: Accelerator) -> AcceleratorUsedRead:
    return AcceleratorUsedRead(
        id=accelerator.id, display_name=accelerator.display_name, memory_bytes=accelerator.memory_bytes
    )


def memory_summary(estimate: mem.MemoryEstimate) -> MemorySummaryRead:
    return MemorySummaryRead.model_validate(_summary_fields(estimate))


def _summary_fields(estimate: mem.MemoryEstimate) -> dict[str, object]:
    return {
        "weights_bytes": estimate.weights_bytes,
        "gradients_bytes": estimate.gradients_bytes,
        "optimizer_state_bytes": estimate.optimizer_state_bytes,
        "model_states_bytes": estimate.model_states_bytes,
        "activations_bytes": estimate.activations_bytes,
        "buffers_bytes": estimate.buffers_bytes,
        "framework_overhead_bytes": estimate.framework_overhead_bytes,
        "fragmentation_bytes": estimate.fragmentation_bytes,
        "total_bytes": estimate.total_bytes,
        "total_gib": estimate.total_gib,
        "capacity_bytes": estimate.capacity_bytes,
        "fits": estimate.fits,
        "headroom_bytes": estimate.headroom_bytes,
        "max_micro_batch_sequences": estimate.max_micro_batch_sequences,
        "stage": estimate.stage,
    }


def fit_warnings(estimate: mem.MemoryEstimate, accelerator: Accelerator | None) -> list[str]:
    """What the caller should know about the fit (empty when it fits with room to spare)."""
    if accelerator is not None and estimate.capacity_bytes is None:
        return [f"{accelerator.display_name} has no memory size in the catalog: no fits verdict."]
    if estimate.fits is False and estimate.capacity_bytes is not None:
        short = -(estimate.headroom_bytes or 0.0) / GIB
        largest = estimate.max_micro_batch_sequences
        advice = (
            f"a micro-batch of {largest} sequences fits"
            if largest
            else "not even one sequence per micro-batch fits: shard more (zero_stage, tp, pp) or recompute"
        )
        return [
            f"does not fit: {estimate.total_gib:.1f} GiB per device on the {estimate.stage} stage, "
            f"{short:.1f} GiB more than the device's {estimate.capacity_bytes / GIB:.1f} GiB; {advice}."
        ]
    if (
        estimate.fits
        and estimate.capacity_bytes
        and (estimate.headroom_bytes or 0.0) < 0.05 * estimate.capacity_bytes
    ):
        return [
            "fits with under 5% headroom: allocator spikes (e.g. the first step) may still run out of memory."
        ]
    return []


def memory_reading(estimate: mem.MemoryEstimate) -> str:
    parts = {
        "weights": estimate.weights_bytes,
        "gradients": estimate.gradients_bytes,
        "optimizer state": estimate.optimizer_state_bytes,
        "activations": estimate.activations_bytes,
    }
    largest = max(parts, key=lambda k: parts[k])
    text = (
        f"{estimate.total_gib:.1f} GiB per device ({estimate.stage} stage); largest part: {largest} "
        f"{parts[largest] / GIB:.1f} GiB."
    )
    if estimate.capacity_bytes is None:
        return text
    capacity = estimate.capacity_bytes / GIB
    headroom = (estimate.headroom_bytes or 0.0) / GIB
    if estimate.fits:
        return (
            f"{text} Fits in {capacity:.0f} GiB with {headroom:.1f} GiB to spare; micro-batches up to "
            f"{estimate.max_micro_batch_sequences} sequences fit."
        )
    return (
        f"{text} Does not fit in {capacity:.0f} GiB (short by {-headroom:.1f} GiB); largest micro-batch "
        f"that fits: {estimate.max_micro_batch_sequences}."
    )


def optimizer_read(
    requested: OptimizerName, precision: Precision, layout: mem.ParallelLayout
) -> OptimizerRead:
    state = in_request(
        lambda: mem.optimizer_state_bytes(
            requested, precision, fp32_grad_accumulation=layout.fp32_grad_accumulation
        )
    )
    return OptimizerRead(
        requested=requested,
        name=state.name,
        weight_bytes_per_parameter=state.weight_bytes,
        gradient_bytes_per_parameter=state.gradient_bytes,
        optimizer_state_bytes_per_parameter=state.optimizer_bytes,
        total_bytes_per_parameter=state.total_bytes,
        source=state.source,
    )


def memory_read(
    estimate: mem.MemoryEstimate,
    *,
    spec: ModelSpec,
    body: MemoryRequest,
    layout: mem.ParallelLayout,
    accelerator: Accelerator | None,
) -> MemoryRead:
    assumptions = [*estimate.assumptions, *layout_assumptions(body.layout), "GiB = 2^30 bytes"]
    if not body.dropout:
        assumptions.append("no dropout masks stored (dropout: false)")
    return MemoryRead.model_validate(
        {
            **_summary_fields(estimate),
            "model": spec.name,
            "seq_len_tokens": body.seq_len_tokens,
            "precision": body.precision,
            "layout": layout_read(layout),
            "accelerator": None if accelerator is None else accelerator_read(accelerator),
            "optimizer": optimizer_read(body.optimizer, body.precision, layout),
            "parameters_on_device": estimate.parameters_on_device,
            "model_state_bytes_per_parameter": estimate.model_state_bytes_per_parameter,
            "activations_per_micro_batch_bytes": estimate.activations_per_micro_batch_bytes,
            "in_flight_micro_batches": estimate.in_flight_micro_batches,
            "first_stage_total_bytes": estimate.first_stage_total_bytes,
            "last_stage_total_bytes": estimate.last_stage_total_bytes,
            "assumptions": assumptions,
            "warnings": fit_warnings(estimate, accelerator),
            "reading": memory_reading(estimate),
        }
    )
