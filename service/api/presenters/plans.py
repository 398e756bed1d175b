"""Parallel-layout search and its answer, for ``/v1/plans/parallelism`` and ``/v1/estimates/training``."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping

from starlette.concurrency import run_in_threadpool

from service.api.presenters.memory import GIB, in_request, layout_read
from service.api.presenters.predictions import check_finite, largest_loss
from service.api.schemas.layout import LayoutRead
from service.api.schemas.plans import PlanCandidateRead, PlanConstraintsIn
from service.domain import planner
from service.domain.errors import InvalidInput
from service.domain.flops import Convention
from service.domain.hardware import Precision
from service.domain.hardware_behaviour import Calibration
from service.domain.memory import Optimizer
from service.domain.models import ModelSpec
from service.domain.performance import Cluster

#: Most layouts one request may make the planner consider (an upper bound computed before the search:
#: realistic requests stay near 10^4; a second of search is about 5·10^4 layouts).
MAX_SEARCH_SIZE = 500_000

#: Request names of the planner's constraint fields where they differ from the domain's.
CONSTRAINT_FIELDS = {
    "min_micro_batch": "min_micro_batch_sequences",
    "max_micro_batch": "max_micro_batch_sequences",
}


def planner_constraints(
    given: PlanConstraintsIn, *, field: str = "body.constraints"
) -> planner.PlannerConstraints:
    fields = {
        name: f"{field}.{name}"
        for name in (
            "recompute_modes",
            "zero_stages",
            "max_virtual_stages",
            "max_results",
            "recompute_every_k_values",
            "selective_policies",
        )
    }
    fields.update({domain: f"{field}.{api}" for domain, api in CONSTRAINT_FIELDS.items()})
    return in_request(
        lambda: planner.PlannerConstraints(
            max_tp=given.max_tp,
            tp_within_node=given.tp_within_node,
            tp_values=None if given.tp_values is None else tuple(given.tp_values),
            pp_values=None if given.pp_values is None else tuple(given.pp_values),
            dp_values=None if given.dp_values is None else tuple(given.dp_values),
            cp_values=tuple(given.cp_values),
            ep_values=tuple(given.ep_values),
            recompute_modes=tuple(given.recompute_modes),
            zero_stages=tuple(given.zero_stages),
            max_virtual_stages=given.max_virtual_stages,
            min_micro_batch=given.min_micro_batch_sequences,
            max_micro_batch=given.max_micro_batch_sequences,
            sequence_parallel=given.sequence_parallel,
            flash_attention=given.flash_attention,
            fp32_grad_accumulation=given.fp32_grad_accumulation,
            overlap_tp_comm=given.overlap_tp_comm,
            overlap_dp_comm=given.overlap_dp_comm,
            overlap_pp_comm=given.overlap_pp_comm,
            max_results=given.max_results,
            recompute_every_k_values=tuple(given.recompute_every_k_values),
            selective_policies=tuple(given.selective_policies),
            virtual_stage_values=None
            if given.virtual_stage_values is None
            else tuple(given.virtual_stage_values),
            first_stage_layers=given.first_stage_layers,
            last_stage_layers=given.last_stage_layers,
            shard_group_sizes=tuple(given.shard_group_sizes),
            reshard_after_forward=given.reshard_after_forward,
            regather_for_recompute=given.regather_for_recompute,
            overlap_ep_comm=given.overlap_ep_comm,
            expert_load_imbalance=given.expert_load_imbalance,
            attention_kernel=given.attention_kernel,
            pooled_nic_collectives=given.pooled_nic_collectives,
            fused_elementwise=given.fused_elementwise,
            gradient_accumulation_fusion=given.gradient_accumulation_fusion,
            async_tp_backward=given.async_tp_backward,
            zero3_gather_unit=given.zero3_gather_unit,
        ),
        layout=None,
        fields=fields,
    )


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def search_size_bound(
    spec: ModelSpec, devices: int, devices_per_node: int, batch: int, given: PlanConstraintsIn
) -> int:
    """An upper bound on the layouts the search evaluates (a work estimate, not a feasibility rule):
    tp sizes × pp sizes × the most interleavings of one pp × micro-batch sizes × ZeRO stages × shard groups × recompute
    options (modes, selective policies, every-k intervals) × cp × ep."""
    tps = [
        t for t in _divisors(devices)
        if (given.tp_values is None or t in given.tp_values) and (given.max_tp is None or t <= given.max_tp)
        and (not given.tp_within_node or t <= devices_per_node)
    ]  # fmt: skip
    # pp need not divide the layers (uneven stages), only the devices.
    pps = [
        p
        for p in _divisors(devices)
        if p <= spec.n_layers and (given.pp_values is None or p in given.pp_values)
    ]
    low, high = given.min_micro_batch_sequences, given.max_micro_batch_sequences or batch
    micro_batches = sum(1 for b in _divisors(batch) if low <= b <= high)

    def interleavings(p: int) -> int:
        if p == 1:
            return 1
        if given.virtual_stage_values is not None:
            return len(set(given.virtual_stage_values))
        # v divides a stage's layers: floor or ceil of n_layers / p when the split is uneven.
        stage_layers = {spec.n_layers // p, -(-spec.n_layers // p)}
        return len({v for n in stage_layers for v in _divisors(n) if v <= given.max_virtual_stages})

    modes = set(given.recompute_modes)
    recompute_options = (
        ("none" in modes)
        + ("selective" in modes) * len(set(given.selective_policies))
        + ("full" in modes) * len(set(given.recompute_every_k_values))
    )
    return (
        len(tps) * len(pps) * max(map(interleavings, pps), default=1) * micro_batches * len(set(given.zero_stages))
        * len(given.shard_group_sizes) * recompute_options * len(given.cp_values) * len(given.ep_values)
    )  # fmt: skip


async def search_layouts(
    spec: ModelSpec,
    seq_len_tokens: int,
    cluster: Cluster,
    batch: int,
    given: PlanConstraintsIn,
    *,
    precision: Precision,
    calibration: Calibration,
    optimizer: Optimizer,
    convention: Convention,
    dropout: bool,
    constraints_field: str = "body.constraints",
    fields: Mapping[str, str],
) -> tuple[planner.PlanResult, float]:
    """Run the planner off the event loop (it is CPU-bound: ~0.1 s for 70B on 1024 devices) after
    bounding its work; answers the result and the seconds it took."""
    constraints = planner_constraints(given, field=constraints_field)
    bound = search_size_bound(spec, cluster.device_count, cluster.devices_per_node, batch, given)
    if bound > MAX_SEARCH_SIZE:
        raise InvalidInput(
            f"this search could evaluate up to {bound:,} layouts (at most {MAX_SEARCH_SIZE:,} per request): "
            "narrow it with constraints (max_micro_batch_sequences, tp_values, pp_values, zero_stages, "
            "recompute_modes, max_virtual_stages).",
            field=constraints_field,
        )

    def search() -> planner.PlanResult:
        return in_request(
            lambda: planner.plan_parallelism(
                spec,
                seq_len_tokens,
                cluster,
                batch,
                precision,
                constraints,
                calibration,
                optimizer=optimizer,
                convention=convention,
                dropout=dropout,
            ),
            layout=None,
            fields=fields,
        )

    started = time.perf_counter()
    result = await run_in_threadpool(search)
    return result, time.perf_counter() - started


def candidate_read(rank: int, candidate: planner.PlanCandidate) -> PlanCandidateRead:
    prediction = candidate.prediction
    check_finite(prediction, "body")
    loss, share = largest_loss(prediction)
    return PlanCandidateRead(
        rank=rank,
        layout=layout_read(candidate.layout),
        step_time_seconds=prediction.step_time_seconds,
        tokens_per_second=prediction.tokens_per_second,
        tokens_per_second_per_device=prediction.tokens_per_second_per_device,
        mfu=prediction.mfu,
        hfu=prediction.hfu,
        bubble_fraction=prediction.bubble_fraction,
        memory_per_device_bytes=prediction.memory.total_bytes,
        memory_per_device_gib=prediction.memory.total_bytes / GIB,
        headroom_bytes=prediction.memory.headroom_bytes,
        fits=prediction.memory.fits,
        largest_loss=loss,
        largest_loss_fraction=share,
        regimes=list(prediction.regimes),
        uncertainty_mfu_points=prediction.uncertainty_mfu_points,
    )


def describe_layout(lay: LayoutRead) -> str:
    text = f"tp={lay.tp} pp={lay.pp}"
    if lay.virtual_stages > 1:
        text += f" (v={lay.virtual_stages})"
    text += f" dp={lay.dp}"
    if lay.cp > 1:
        text += f" cp={lay.cp}"
    if lay.ep > 1:
        text += f" ep={lay.ep}"
    return f"{text} micro-batch {lay.micro_batch_sequences}, ZeRO-{lay.zero_stage}, recompute {lay.recompute}"


def plan_reading(candidates: list[PlanCandidateRead], result: planner.PlanResult, convention: str) -> str:
    if not candidates:
        top = result.infeasible[0].reason if result.infeasible else "no layout was evaluated"
        return (
            f"No layout of the {result.evaluated_count} evaluated fits; most were dropped because: {top}. "
            "Add devices, shorten the sequence, or relax the constraints."
        )
    best = candidates[0]
    return (
        f"Fastest of {result.feasible_count} feasible layouts ({result.evaluated_count} evaluated): "
        f"{describe_layout(best.layout)}: {best.step_time_seconds:.3g} s per step, MFU {best.mfu:.1%} ({convention}); "
        f"its largest loss is {best.largest_loss.replace('_', ' ')} ({best.largest_loss_fraction:.0%})."
    )
