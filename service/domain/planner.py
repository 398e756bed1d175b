"""Parallel-layout search: every layout that fits, ranked by predicted throughput.

Enumerates tensor (``tp`` dividing the heads, within a node unless allowed otherwise), pipeline (``pp``
up to the layer count; uneven splits as :func:`service.domain.memory.stage_layer_counts` makes them, or
the first/last stage layer counts pinned), checkpointing policies (every-k-th layer, per-op selective),
hybrid sharding groups, context (``cp``) and expert (``ep``) parallel sizes, ``dp = devices/(tp·pp·cp)``,
micro-batches dividing the per-replica batch, recompute modes, ZeRO stages and interleaving ``v``
(dividing ``L/pp``, with the micro-batch count a multiple of ``pp`` as Megatron-LM requires). Each
candidate is checked for memory (:mod:`service.domain.memory`) and, when it fits, timed
(:mod:`service.domain.performance`). Infeasible candidates are counted by reason with a few examples.

Speed: the per-(model, sequence, tp, cp, ep, micro-batch) costs are cached in
:mod:`service.domain.performance`, so a candidate costs a memory check and a few dozen float operations
(``benchmarks/planner_speed.py`` prints candidates per second).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from service.domain.errors import DomainError, InvalidInput
from service.domain.flops import RECOMPUTE_MODES, Convention, Recompute
from service.domain.hardware import Precision
from service.domain.hardware_behaviour import NO_CALIBRATION, Calibration
from service.domain.memory import (
    SELECTIVE_POLICIES,
    AttentionKernel,
    GatherUnit,
    Optimizer,
    ParallelLayout,
    SelectivePolicy,
    estimate_memory,
    stage_layer_counts,
)
from service.domain.models import ModelSpec
from service.domain.parallel_layout import interleaving_fits
from service.domain.performance import Cluster, StepPrediction, _predict

#: Examples kept per infeasibility reason.
EXAMPLES_PER_REASON = 3


@dataclass(frozen=True, slots=True)
class PlannerConstraints:
    """What the search may vary. ``None`` = no restriction (the model and cluster decide).

    ``tp_values``/``pp_values``/``dp_values`` pin sizes (e.g. a published layout); ``sequence_parallel``
    None = on whenever tp > 1; ``max_virtual_stages`` bounds interleaving (1 = off).
    """

    max_tp: int | None = None
    tp_within_node: bool = True
    tp_values: tuple[int, ...] | None = None
    pp_values: tuple[int, ...] | None = None
    dp_values: tuple[int, ...] | None = None
    cp_values: tuple[int, ...] = (1,)
    ep_values: tuple[int, ...] = (1,)
    recompute_modes: tuple[Recompute, ...] = ("none", "selective", "full")
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    max_virtual_stages: int = 8
    min_micro_batch: int = 1
    max_micro_batch: int | None = None
    sequence_parallel: bool | None = None
    flash_attention: bool = True
    fp32_grad_accumulation: bool = False
    overlap_tp_comm: bool = False
    overlap_dp_comm: bool = True
    overlap_pp_comm: bool = True
    max_results: int = 50
    recompute_every_k_values: tuple[int, ...] = (1,)
    selective_policies: tuple[SelectivePolicy, ...] = ("attention_core",)
    virtual_stage_values: tuple[int, ...] | None = None
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    shard_group_sizes: tuple[int | None, ...] = (None,)
    reshard_after_forward: bool = True
    regather_for_recompute: bool = False
    overlap_ep_comm: bool = False
    expert_load_imbalance: float = 1.0
    attention_kernel: AttentionKernel = "best"
    pooled_nic_collectives: bool = True
    fused_elementwise: bool = True
    zero3_gather_unit: GatherUnit = "layer"
    gradient_accumulation_fusion: bool = True
    async_tp_backward: bool = False

    def __post_init__(self) -> None:
        for mode in self.recompute_modes:
            if mode not in RECOMPUTE_MODES:
                raise InvalidInput(
                    f"recompute_modes may hold {', '.join(RECOMPUTE_MODES)}, got {mode!r}.",
                    field="recompute_modes",
                )
        for stage in self.zero_stages:
            if stage not in (0, 1, 2, 3):
                raise InvalidInput(f"zero_stages may hold 0-3, got {stage!r}.", field="zero_stages")
        for name in ("min_micro_batch", "max_virtual_stages", "max_results"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInput(f"{name} must be a positive integer, got {value!r}.", field=name)
        if self.max_micro_batch is not None and self.max_micro_batch < self.min_micro_batch:
            raise InvalidInput("max_micro_batch must be ≥ min_micro_batch.", field="max_micro_batch")
        for policy in self.selective_policies:
            if policy not in SELECTIVE_POLICIES:
                raise InvalidInput(
                    f"selective_policies may hold {', '.join(SELECTIVE_POLICIES)}, got {policy!r}.",
                    field="selective_policies",
                )
        for k in self.recompute_every_k_values:
            if isinstance(k, bool) or not isinstance(k, int) or k < 1:
                raise InvalidInput(
                    f"recompute_every_k_values must hold positive integers, got {k!r}.",
                    field="recompute_every_k_values",
                )
        if not self.recompute_modes or not self.zero_stages:
            raise InvalidInput(
                "give at least one recompute mode and one ZeRO stage.", field="recompute_modes"
            )


@dataclass(frozen=True, slots=True)
class PlanCandidate:
    """One feasible layout with its prediction (``prediction.memory`` holds the memory estimate)."""

    layout: ParallelLayout
    prediction: StepPrediction

    @property
    def tokens_per_second(self) -> float:
        return self.prediction.tokens_per_second

    @property
    def mfu(self) -> float:
        return self.prediction.mfu

    @property
    def memory_bytes(self) -> float:
        return self.prediction.memory.total_bytes


@dataclass(frozen=True, slots=True)
class InfeasibleGroup:
    """Candidates dropped for one reason: how many, and a few of them."""

    reason: str
    count: int
    examples: tuple[ParallelLayout, ...]


@dataclass(frozen=True, slots=True)
class PlanResult:
    """Feasible layouts ranked by predicted tokens/s (best first, at most ``max_results``), with counts."""

    candidates: tuple[PlanCandidate, ...]
    feasible_count: int
    evaluated_count: int
    infeasible: tuple[InfeasibleGroup, ...]
    convention: str

    @property
    def best(self) -> PlanCandidate | None:
        return self.candidates[0] if self.candidates else None


@dataclass(slots=True)
class _Rejections:
    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[ParallelLayout]] = field(default_factory=dict)

    def add(self, reason: str, layout: ParallelLayout | None, n: int = 1) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + n
        if layout is not None:
            kept = self.examples.setdefault(reason, [])
            if len(kept) < EXAMPLES_PER_REASON:
                kept.append(layout)

    def groups(self) -> tuple[InfeasibleGroup, ...]:
        order = sorted(self.counts.items(), key=lambda kv: -kv[1])
        return tuple(InfeasibleGroup(r, c, tuple(self.examples.get(r, ()))) for r, c in order)


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def plan_parallelism(
    spec: ModelSpec,
    seq_len_tokens: int,
    cluster: Cluster,
    global_batch_sequences: int,
    precision: Precision = "bf16",
    constraints: PlannerConstraints | None = None,
    calibration: Calibration | None = None,
    *,
    optimizer: Optimizer = "adam",
    convention: Convention = "megatron",
    dropout: bool = True,
) -> PlanResult:
    """Every layout (module docstring) evaluated; feasible ones ranked by predicted throughput."""
    c = constraints or PlannerConstraints()
    cal = calibration or NO_CALIBRATION
    if isinstance(seq_len_tokens, bool) or not isinstance(seq_len_tokens, int) or seq_len_tokens <= 0:
        raise InvalidInput(
            f"seq_len_tokens must be a positive integer, got {seq_len_tokens!r}.", field="seq_len_tokens"
        )
    if (
        isinstance(global_batch_sequences, bool)
        or not isinstance(global_batch_sequences, int)
        or global_batch_sequences <= 0
    ):
        raise InvalidInput(
            f"global_batch_sequences must be a positive integer, got {global_batch_sequences!r}.",
            field="global_batch_sequences",
        )
    devices = cluster.device_count
    dpn = cluster.devices_per_node
    rejected = _Rejections()
    feasible: list[PlanCandidate] = []
    evaluated = 0

    tp_options = [t for t in _divisors(devices) if c.tp_values is None or t in c.tp_values]
    for tp in tp_options:
        reason = None
        if spec.n_heads % tp:
            reason = "tp does not divide n_heads"
        elif c.max_tp is not None and tp > c.max_tp:
            reason = "tp above max_tp"
        elif c.tp_within_node and tp > dpn:
            reason = "tp exceeds devices per node"
        if reason:
            rejected.add(reason, None)
            evaluated += 1
            continue
        for cp in c.cp_values:
            if devices % (tp * cp) or seq_len_tokens % cp:
                rejected.add("cp does not divide the devices or the sequence", None)
                evaluated += 1
                continue
            for pp in _divisors(devices // (tp * cp)):
                if c.pp_values is not None and pp not in c.pp_values:
                    continue
                if pp > spec.n_layers:
                    rejected.add("pp exceeds n_layers", None)
                    evaluated += 1
                    continue
                first_l, last_l = (c.first_stage_layers, c.last_stage_layers) if pp > 1 else (None, None)
                try:
                    counts = stage_layer_counts(spec.n_layers, pp, first_l, last_l)
                except DomainError:
                    rejected.add("the pinned first/last stage layers do not fit this pp", None)
                    evaluated += 1
                    continue
                dp = devices // (tp * cp * pp)
                if c.dp_values is not None and dp not in c.dp_values:
                    continue
                if global_batch_sequences % dp:
                    rejected.add("dp does not divide the global batch", None)
                    evaluated += 1
                    continue
                per_replica = global_batch_sequences // dp
                sp_flag = (tp > 1) if c.sequence_parallel is None else (c.sequence_parallel and tp > 1)
                v_options = [1]
                if pp > 1:
                    # Interleaving: each stage's chunks; with uneven stages, as many chunks as the smallest
                    # stage has layers (Megatron-core splits uneven stages into uneven chunks).
                    fewest = min(counts[0], counts[2], counts[1] if pp > 2 else counts[0])
                    if spec.n_layers % pp == 0 and first_l is None and last_l is None:
                        v_options = [v for v in _divisors(spec.n_layers // pp) if v <= c.max_virtual_stages]
                    else:
                        uneven = set(_divisors(fewest))
                        if (spec.n_layers + 2) % pp == 0:
                            # Or an even split once the embedding and the loss count as a layer each
                            # (Megatron-LM's account-for-embedding/loss split: 126 + 2 layers = 16 · 8).
                            split = _divisors((spec.n_layers + 2) // pp)
                            uneven |= {v for v in split if interleaving_fits(counts, pp, v)}
                        v_options = sorted(v for v in uneven if v <= c.max_virtual_stages)
                    if c.virtual_stage_values is not None:
                        v_options = [v for v in v_options if v in c.virtual_stage_values] or [
                            v for v in c.virtual_stage_values if interleaving_fits(counts, pp, v)
                        ]
                for ep in c.ep_values:
                    if (
                        (dp * cp) % ep
                        or (spec.n_experts and spec.n_experts % ep)
                        or (not spec.n_experts and ep > 1)
                    ):
                        rejected.add("ep does not divide dp·cp or the experts", None)
                        evaluated += 1
                        continue
                    for b in _divisors(per_replica):
                        if b < c.min_micro_batch or (c.max_micro_batch is not None and b > c.max_micro_batch):
                            continue
                        m = per_replica // b
                        evaluated += _evaluate_block(
                            spec, seq_len_tokens, cluster, global_batch_sequences, precision, c, cal,
                            optimizer, convention, dropout, tp, pp, dp, cp, ep, b, m, sp_flag, v_options,
                            first_l, last_l, rejected, feasible,
                        )  # fmt: skip
    feasible.sort(key=lambda cand: -cand.prediction.tokens_per_second)
    return PlanResult(
        candidates=tuple(feasible[: c.max_results]),
        feasible_count=len(feasible),
        evaluated_count=evaluated,
        infeasible=rejected.groups(),
        convention=convention,
    )


def _evaluate_block(
    spec: ModelSpec,
    seq_len_tokens: int,
    cluster: Cluster,
    global_batch: int,
    precision: Precision,
    c: PlannerConstraints,
    cal: Calibration,
    optimizer: Optimizer,
    convention: Convention,
    dropout: bool,
    tp: int,
    pp: int,
    dp: int,
    cp: int,
    ep: int,
    b: int,
    m: int,
    sp_flag: bool,
    v_options: list[int],
    first_l: int | None,
    last_l: int | None,
    rejected: _Rejections,
    feasible: list[PlanCandidate],
) -> int:
    evaluated = 0
    policies: list[tuple[Recompute, int, SelectivePolicy]] = []
    for recompute in c.recompute_modes:
        if recompute == "full":
            policies += [("full", k, "attention_core") for k in c.recompute_every_k_values]
        elif recompute == "selective":
            policies += [("selective", 1, p) for p in c.selective_policies]
        else:
            policies.append(("none", 1, "attention_core"))
    shard_options = [g for g in c.shard_group_sizes if g is None or ((dp * cp) % g == 0 and g < dp * cp)]
    for v in v_options:
        for zero in c.zero_stages:
            for group in shard_options if zero > 0 else [None]:
                for recompute, every_k, policy in policies:
                    evaluated += 1
                    layout = ParallelLayout(
                        tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, virtual_stages=v, micro_batch_sequences=b,
                        sequence_parallel=sp_flag, zero_stage=zero, recompute=recompute,
                        flash_attention=c.flash_attention, fp32_grad_accumulation=c.fp32_grad_accumulation,
                        overlap_tp_comm=c.overlap_tp_comm, overlap_dp_comm=c.overlap_dp_comm,
                        overlap_pp_comm=c.overlap_pp_comm, first_stage_layers=first_l, last_stage_layers=last_l,
                        recompute_every_k_layers=every_k, selective_policy=policy,
                        reshard_after_forward=c.reshard_after_forward,
                        regather_for_recompute=c.regather_for_recompute, shard_group_size=group,
                        overlap_ep_comm=c.overlap_ep_comm, expert_load_imbalance=c.expert_load_imbalance,
                        attention_kernel=c.attention_kernel, pooled_nic_collectives=c.pooled_nic_collectives,
                        fused_elementwise=c.fused_elementwise, zero3_gather_unit=c.zero3_gather_unit,
                        gradient_accumulation_fusion=c.gradient_accumulation_fusion,
                        async_tp_backward=c.async_tp_backward,
                    )  # fmt: skip
                    if v > 1 and m % pp:
                        rejected.add("interleaving needs micro-batches to be a multiple of pp", layout)
                        continue
                    if zero > 0 and dp * cp == 1:
                        rejected.add("ZeRO needs data parallelism (dp·cp > 1)", layout)
                        continue
                    try:
                        memory = estimate_memory(
                            spec, seq_len_tokens, layout, precision=precision, optimizer=optimizer,
                            accelerator=cluster.accelerator, global_batch_sequences=global_batch,
                            dropout=dropout,
                        )  # fmt: skip
                    except DomainError as exc:
                        rejected.add(f"invalid: {exc.message}", layout)
                        continue
                    if memory.fits is False:
                        rejected.add("does not fit in device memory", layout)
                        continue
                    prediction = _predict(spec, seq_len_tokens, cluster, layout, global_batch, m, precision,
                                          cal, optimizer, convention, dropout, memory)  # fmt: skip
                    feasible.append(PlanCandidate(layout, prediction))
    return evaluated
