"""Step-time prediction for a model, a cluster and a parallel layout, with the gap to peak explained.

An analytical per-layer model in the spirit of Calculon (Isaev et al., SC'23) and Narayanan et al. 2021
(``reference/performance_model.md``). Per micro-batch and transformer layer, on one device:

* GEMMs (QKV, output projection, MLP or experts, router; the logits on the last stage): FLOPs /
  (peak × efficiency(size)), efficiency from :mod:`service.domain.hardware_behaviour`. Backward = 2 ×
  forward (dgrad + wgrad GEMMs of the same shapes).
* Attention core: FlashAttention executes the causal half (plus one 128-token block per query block)
  at the family's fused-attention efficiency; without it Megatron's batched GEMMs compute the full
  s×s scores (the masked half is wasted) at the matmul curve for head-dim-wide GEMMs.
* Memory-bound kernels (norms, residual + bias + dropout, activation functions, RoPE, softmax and
  dropout on the score matrix, MoE permutation, cross-entropy): bytes moved / (HBM bandwidth ×
  efficiency(bytes per kernel)). Backward moves twice the forward bytes.
* Tensor-parallel: 2 all-reduces of b·s·h elements forward and 2 backward per layer (reduce-scatter +
  all-gather of the same volume with sequence parallel), ring cost 2(t − 1)/t · S / bandwidth + latency
  per step, on NVLink when t ≤ devices per node. Hidden by :data:`TP_OVERLAP_FRACTION` when overlapped.
* Context-parallel (ring attention): (cp − 1) exchanges of the local K and V forward, twice that
  backward, hidden behind the attention compute. Expert-parallel: 4 all-to-alls of the routed tokens.
* Data-parallel: gradient all-reduce (ZeRO-0), reduce-scatter + parameter all-gather (ZeRO-1/2, Megatron's
  distributed optimizer) once per step, or per micro-batch all-gathers forward and backward plus a
  reduce-scatter (ZeRO-3/FSDP). Groups span nodes through ``r`` NICs per node (r = group ranks per node;
  NCCL rings use one NIC per rank), else NVLink. With overlap, up to :data:`DP_OVERLAP_FRACTION` of the
  backward of the last micro-batch plus the pipeline drain (gradients) and the forward of the first plus
  the pipeline fill (parameters) hides it; ZeRO-3 hides behind all compute but one layer's gather.
* Pipeline: 1F1B bubble (p − 1)/v micro-batch times of the slowest stage (the last, which also runs the
  logits) plus the stage imbalance; p2p sends of b·s·h/t elements (Narayanan §4.1 scatter/gather), 2·m·v
  per device, hidden by :data:`PP_OVERLAP_FRACTION` when overlapped (the per-send latency never is).
* Recomputation: full re-runs each layer's forward (GEMMs, attention, memory-bound kernels and its two
  TP collectives); selective re-runs the attention core (Korthikanti et al. 2022 §5).
* Kernel overhead: :data:`KERNEL_OVERHEAD_SECONDS` per kernel per micro-batch (about a dozen per layer
  forward, twice that backward): the fixed cost a larger micro-batch amortises.
* Optimizer step: memory-bound over the local (ZeRO-sharded) parameters: read the state and the
  gradients, write the state and the 16-bit weights.

The breakdown is additive: ``ideal_matmul_seconds`` (the useful FLOPs — causal attention, no
recomputation — at peak) + matmul inefficiency + memory-bound + exposed TP, CP, EP, DP, PP communication
+ bubble + recomputation + optimizer step + kernel overhead = step time. ``mfu``/``hfu`` use the requested FLOPs
convention (default ``megatron``, non-causal: it can exceed the hardware view at long sequences; use
``megatron_causal`` for a bound-respecting count).

The few global constants fitted once on the 25 published runs (``benchmarks/validate_predictions.py``)
are the per-family matmul scales in :mod:`service.domain.hardware_behaviour` and the overlap fractions
below; everything else is from the sources named beside it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

from service.domain.collectives import all_to_all_seconds, ring_allreduce_seconds, ring_gather_seconds
from service.domain.errors import InvalidInput
from service.domain.flops import Convention, attended_tokens, flops_per_token
from service.domain.hardware import Accelerator, Precision, peak_flops
from service.domain.hardware_behaviour import (
    NO_CALIBRATION,
    Calibration,
    HardwareBehaviour,
    behaviour_for,
)
from service.domain.memory import (
    MemoryEstimate,
    Optimizer,
    ParallelLayout,
    activation_element_bytes,
    check_layout_for_model,
    estimate_memory,
    optimizer_state_bytes,
    stage_layer_counts,
    stage_parameters,
)
from service.domain.models import ModelSpec, layer_parameters

#: Fraction of the overlap window (backward of the last micro-batch for gradients, forward of the
#: first for parameters; all compute for ZeRO-3) that data-parallel communication can use. Fitted.
DP_OVERLAP_FRACTION = 0.915
#: Share of tensor-parallel communication hidden with ``overlap_tp_comm`` (Transformer Engine
#: userbuffers GEMM/communication overlap). Fitted.
TP_OVERLAP_FRACTION = 0.915
#: Share of pipeline p2p time hidden with ``overlap_pp_comm`` (sends on a separate stream). Fitted.
PP_OVERLAP_FRACTION = 0.915
#: Fixed cost of one kernel on the device timeline (launch, ramp-up and tail: the gaps between
#: dependent kernels seen in Nsight traces of training steps are a few µs; CUDA launch latency ~4 µs,
#: NVIDIA CUDA C++ Best Practices Guide). Charged per kernel per micro-batch, so a larger micro-batch
#: amortises it.
KERNEL_OVERHEAD_SECONDS = 4e-6
#: FlashAttention's tile along the key dimension: the causal kernel also computes the diagonal blocks.
FLASH_BLOCK_TOKENS = 128
#: Bytes per element of fp32 logits handled by the cross-entropy (read 16-bit logits, fp32 exp,
#: softmax and gradient): 12 bytes per vocabulary entry and token forward, as much backward.
CROSS_ENTROPY_BYTES_PER_LOGIT = 12.0
#: FlashAttention's backward runs 5 matmuls to the forward's 2 (recomputing the scores): 2.5× the
#: forward FLOPs (Dao 2023, FlashAttention-2 §3.1-3.2 and its benchmark's FLOP count).
FLASH_BACKWARD_FLOPS_RATIO = 2.5
#: Triton's fused-attention kernel (the Triton tutorial, used by llm-foundry for ALiBi in 2023) against
#: FlashAttention-2 on the same GPU: ~0.6 (Dao 2023, FlashAttention-2 Fig. 4, A100: Triton 100-130
#: TFLOP/s forward where FlashAttention-2 reaches 190-200).
TRITON_ATTENTION_RELATIVE = 0.6
#: Share of the SMs a running NCCL collective occupies: up to 16 channels (NCCL_MAX_NCHANNELS default
#: on NVLink/IB systems), one thread block each, of the 108 SMs of an A100 / 132 of an H100 (NCCL
#: environment-variable docs; CUDA occupancy).
NCCL_SM_SHARE = 0.12
#: FlashAttention-2 on Hopper reaches ~35% of the dense peak (Shah et al. 2024, FlashAttention-3 §1),
#: against the ~55% of the Hopper family's best fused kernel (cuDNN / FlashAttention-3).
FLASH2_ON_HOPPER_RELATIVE = 0.35 / 0.55
#: Eager PyTorch element-wise kernels move this many times the bytes of fused ones: an fp32 RMSNorm as
#: torchtitan writes it (cast, pow, mean, rsqrt, mul, cast, mul weight: ~32 bytes per element against
#: 4 fused), SwiGLU's silu and product (10 against 6), complex RoPE (~5x); about 3x over a layer's
#: memory-bound traffic.
EAGER_ELEMENTWISE_TRAFFIC = 3.0


def attention_kernel_share(family: str, kernel: str) -> float:
    """Speed of a fused-attention kernel relative to the family's best (``attention_*_efficiency``)."""
    later = family in ("hopper", "blackwell", "generic")
    flash2 = FLASH2_ON_HOPPER_RELATIVE if later else 1.0
    if kernel == "flash2":
        return flash2
    if kernel == "triton":
        return flash2 * TRITON_ATTENTION_RELATIVE
    return 1.0


#: NVLink's per-step latency (hardware_behaviour.NVLINK); a larger latency marks a cross-node link.
NVLINK_LATENCY_SECONDS = 1e-6
#: Bytes moved per element to quantise a GEMM operand to FP8 (read 2-byte BF16, write 1-byte FP8) and
#: its amax reduction folded in (Transformer Engine casts each GEMM input, forward and backward).
FP8_CAST_BYTES_PER_ELEMENT = 3.0


@dataclass(frozen=True, slots=True)
class Cluster:
    """The devices a job runs on. ``inter_node_bandwidth_bytes_per_second`` is per device, one way
    (25e9 for 200 Gb/s HDR, 50e9 for 400 Gb/s NDR per GPU); the intra-node link defaults to the
    accelerator's."""

    accelerator: Accelerator
    device_count: int
    devices_per_node: int = 8
    inter_node_bandwidth_bytes_per_second: float = 50e9
    intra_node_bandwidth_bytes_per_second: float | None = None

    def __post_init__(self) -> None:
        for name in ("device_count", "devices_per_node"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InvalidInput(f"{name} must be a positive integer, got {value!r}.", field=name)
        for name in ("inter_node_bandwidth_bytes_per_second", "intra_node_bandwidth_bytes_per_second"):
            value = getattr(self, name)
            if value is None:
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value <= 0
            ):
                raise InvalidInput(f"{name} must be a positive number of bytes/s, got {value!r}.", field=name)

    @property
    def intra_bandwidth(self) -> float:
        if self.intra_node_bandwidth_bytes_per_second is not None:
            return float(self.intra_node_bandwidth_bytes_per_second)
        bw = self.accelerator.intra_node_bandwidth_bytes_per_second
        return float(bw) if bw is not None else float(self.inter_node_bandwidth_bytes_per_second)


@dataclass(frozen=True, slots=True)
class StepBreakdown:
    """Seconds per step by cause; the fields sum to the step time (module docstring)."""

    ideal_matmul_seconds: float
    matmul_inefficiency_seconds: float
    memory_bound_seconds: float
    exposed_tensor_parallel_comm_seconds: float
    exposed_context_parallel_comm_seconds: float
    exposed_expert_parallel_comm_seconds: float
    exposed_data_parallel_comm_seconds: float
    exposed_pipeline_p2p_seconds: float
    pipeline_bubble_seconds: float
    recompute_seconds: float
    optimizer_step_seconds: float
    kernel_overhead_seconds: float

    @property
    def total_seconds(self) -> float:
        return sum(getattr(self, f.name) for f in fields(self))

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, slots=True)
class StepPrediction:
    """A predicted training step. ``mfu``/``hfu`` under ``convention``; ``memory`` from
    :func:`service.domain.memory.estimate_memory`; communication totals before overlap."""

    step_time_seconds: float
    tokens_per_second: float
    tokens_per_second_per_device: float
    mfu: float
    hfu: float
    achieved_tflops_per_device: float
    model_flops_per_step: float
    hardware_flops_per_step: float
    convention: str
    micro_batches_per_step: int
    bubble_fraction: float
    tensor_parallel_comm_seconds: float
    data_parallel_comm_seconds: float
    pipeline_p2p_seconds: float
    breakdown: StepBreakdown
    memory: MemoryEstimate
    layout: ParallelLayout
    precision: str
    calibration: Calibration
    regimes: tuple[str, ...] = ()
    uncertainty_mfu_points: float | None = None


# --------------------------------------------------------------------------------------------------
# Per-layer costs (cached per model, sequence, tp/cp/ep, micro-batch and hardware)


@dataclass(frozen=True, slots=True)
class _LayerCosts:
    """Seconds per micro-batch on one device. ``*_f`` forward, ``*_b`` backward."""

    gemm_f: float
    attn_f: float
    attn_b: float
    mem_f: float
    softmax_mem_f: float
    tp_collective: float  # one TP collective (all-reduce or RS+AG pair)
    ep_all_to_all: float  # one MoE all-to-all, averaged over layers
    cp_exchange_f: float  # ring-attention K/V exchange, forward
    logits_f: float  # logits GEMM forward (last stage)
    logits_mem_f: float  # cross-entropy + final norm forward
    embed_mem_f: float  # embedding lookup + dropout forward (first stage)
    p2p_send: float  # one pipeline send of b·s·h/t elements
    kernels_f: float  # kernels per layer forward (GEMMs, attention, memory-bound, collectives)
    attention_kernels_f: float  # of which the attention core
    tokens: float


def _ring_allreduce(n: int, size_bytes: float, bandwidth: float, latency: float) -> float:
    return ring_allreduce_seconds(n, size_bytes, bandwidth, latency, latency > NVLINK_LATENCY_SECONDS)


def _ring_gather(n: int, size_bytes: float, bandwidth: float, latency: float) -> float:
    """All-gather or reduce-scatter of a ``size_bytes`` (full) buffer over n ranks."""
    return ring_gather_seconds(n, size_bytes, bandwidth, latency, latency > NVLINK_LATENCY_SECONDS)


def _link(
    cluster: Cluster, behaviour: HardwareBehaviour, span: int, ranks_per_node: int
) -> tuple[float, float]:
    """(bandwidth bytes/s, latency s) of a collective over ranks spanning ``span`` consecutive devices
    with ``ranks_per_node`` of the group on each node."""
    intra = cluster.intra_bandwidth * behaviour.intra_node.efficiency
    if span <= cluster.devices_per_node:
        return intra, behaviour.intra_node.latency_seconds
    inter = (
        max(ranks_per_node, 1)
        * cluster.inter_node_bandwidth_bytes_per_second
        * behaviour.inter_node.efficiency
    )
    return min(inter, intra), behaviour.inter_node.latency_seconds


@functools.lru_cache(maxsize=65536)
def _layer_costs(
    spec: ModelSpec,
    seq_len: int,
    tp: int,
    cp: int,
    ep: int,
    micro_batch: int,
    sequence_parallel: bool,
    flash: bool,
    dropout: bool,
    cluster: Cluster,
    precision: Precision,
    matmul_scale: float,
    expert_load_imbalance: float = 1.0,
    attention_kernel: str = "best",
    fused_elementwise: bool = True,
) -> _LayerCosts:
    acc = cluster.accelerator
    behaviour = behaviour_for(acc)
    peak = peak_flops(acc, precision)
    # FP8 training runs the linear layers' GEMMs in FP8; attention stays in BF16 (Transformer Engine's
    # fused attention and FlashAttention-2 default; DeepSeek-V3 §3.3 keeps attention in BF16 too).
    fp8 = precision == "fp8"
    attention_peak = peak_flops(acc, "bf16") if fp8 else peak
    hbm = acc.hbm_bandwidth_bytes_per_second or 1e12
    e = float(activation_element_bytes(precision))
    mask = 1.0 if dropout else 0.0
    s = seq_len
    T = micro_batch * s / cp
    h = float(spec.d_model)
    heads = float(spec.n_heads)
    kv = float(spec.n_heads if spec.uses_mla else spec.n_kv_heads)
    dqk, dv = float(spec.qk_head_dim), float(spec.value_head_dim)
    t = float(tp)
    lp = layer_parameters(spec)
    gated = spec.ffn_kind == "gated"
    c = 3.0 if gated else 2.0

    def gemm(m: float, n: float, k: float) -> float:
        if m <= 0 or n <= 0 or k <= 0:
            return 0.0
        return 2.0 * m * n * k / (peak * behaviour.matmul_efficiency(m, n, k, matmul_scale))

    # Attention projections: input (QKV or MLA down/up) and output, split by t.
    out_params = heads * dv * h
    in_width = max(lp.attention_weights - out_params, 0.0) / h
    attn_proj = gemm(T, in_width / t, h) + gemm(T, h, heads * dv / t)

    def mlp_time(width: float, tokens: float, count: float) -> float:
        if width <= 0 or tokens <= 0:
            return 0.0
        return count * (gemm(tokens, (c - 1) * width / t, h) + gemm(tokens, h, width / t))

    dense_mlp = mlp_time(float(spec.d_ff), T, 1.0)
    n_moe = spec.n_moe_layers
    moe_mlp = 0.0
    if n_moe:
        local_experts = spec.n_experts / ep
        # The busiest device's experts set the pace: expert_load_imbalance × the mean tokens.
        tokens_per_expert = T * spec.experts_per_token * ep / spec.n_experts * expert_load_imbalance
        moe_mlp = mlp_time(float(spec.expert_d_ff), tokens_per_expert, local_experts)
        moe_mlp += mlp_time(float(spec.shared_expert_d_ff * spec.n_shared_experts), T, 1.0)
        moe_mlp += gemm(T, float(spec.n_experts), h)
    frac_moe = n_moe / spec.n_layers
    gemm_f = attn_proj + (1 - frac_moe) * dense_mlp + frac_moe * moe_mlp

    # Attention core: executed keys per query.
    windowed = spec.n_sliding_window_layers
    full_layers = spec.n_layers - windowed
    if flash:
        blk = float(FLASH_BLOCK_TOKENS)
        executed = full_layers * min(s, attended_tokens(s, causal=True) + blk)
        if windowed:
            w = attended_tokens(s, causal=True, window_tokens=spec.sliding_window)
            executed += windowed * min(s, w + blk)
    else:
        executed = float(spec.n_layers * s)
    executed /= spec.n_layers
    score_flops = 2.0 * T * executed * heads * (dqk + dv) / t
    if flash:
        kernel_share = attention_kernel_share(behaviour.family, attention_kernel)
        eff_f = behaviour.attention_forward_efficiency * matmul_scale * kernel_share
        eff_b = behaviour.attention_backward_efficiency * matmul_scale * kernel_share
        attn_f = score_flops / (attention_peak * min(eff_f, 1.0))
        attn_b = FLASH_BACKWARD_FLOPS_RATIO * score_flops / (attention_peak * min(eff_b, 1.0))
    else:
        eff = behaviour.matmul_efficiency_for(score_flops / 2, min(dqk, s), matmul_scale)
        attn_f = score_flops / (attention_peak * eff)
        attn_b = 2.0 * attn_f

    # Memory-bound kernels: bytes per token forward.
    rep = t if sequence_parallel else 1.0
    bytes_tok = spec.norms_per_layer * 2 * e * h / rep
    bytes_tok += 2 * (3 * e + mask) * h / rep  # two residual + bias + dropout kernels
    if spec.position_embedding == "rope":
        bytes_tok += 2 * e * (heads + kv) * dqk / t
    act = (3.0 if gated else 2.0) * e / t
    dense_act = act * spec.d_ff
    moe_act = 0.0
    if n_moe:
        moe_act = (
            act
            * (spec.experts_per_token * spec.expert_d_ff + spec.n_shared_experts * spec.shared_expert_d_ff)
            + 4 * spec.experts_per_token * e * h
        )
    bytes_tok += (1 - frac_moe) * dense_act + frac_moe * moe_act
    if fp8:
        # Inputs of the QKV, output, up and down projections cast to FP8 (per device shard).
        cast_elems = 2 * h / rep + heads * dv / t + spec.d_ff / t * (1 - frac_moe)
        cast_elems += frac_moe * spec.experts_per_token * expert_load_imbalance * (h + spec.expert_d_ff / t)
        bytes_tok += FP8_CAST_BYTES_PER_ELEMENT * cast_elems
    softmax_tok = 0.0 if flash else ((4 * e + mask) if dropout else 2 * e) * heads * s / t
    kernel_bytes = T * e * h / rep
    mem_eff = behaviour.memory_efficiency(kernel_bytes)
    if not fused_elementwise:
        bytes_tok *= EAGER_ELEMENTWISE_TRAFFIC
    mem_f = T * bytes_tok / (hbm * mem_eff)
    softmax_mem_f = T * softmax_tok / (hbm * behaviour.memory_efficiency(T * e * heads * s / t))

    # Communication.
    dpn = cluster.devices_per_node
    tp_bw, tp_lat = _link(cluster, behaviour, tp, min(tp, dpn))
    tp_collective = _ring_allreduce(tp, T * h * e, tp_bw, tp_lat) if tp > 1 else 0.0
    ep_all_to_all = 0.0
    if n_moe and ep > 1:
        # Dispatch and combine carry each token to its k experts; the busiest rank receives
        # expert_load_imbalance × the mean. Expert ranks are consecutive after tp·cp.
        local = max(min(dpn // (tp * cp), ep), 1)
        volume = T * spec.experts_per_token * h * e * expert_load_imbalance
        ep_all_to_all = frac_moe * all_to_all_seconds(
            ep, volume, local,
            cluster.intra_bandwidth * behaviour.intra_node.efficiency,
            cluster.inter_node_bandwidth_bytes_per_second * behaviour.inter_node.efficiency,
            behaviour.intra_node.latency_seconds, behaviour.inter_node.latency_seconds,
        )  # fmt: skip
    cp_exchange_f = 0.0
    if cp > 1:
        bw, lat = _link(cluster, behaviour, tp * cp, max(dpn // tp, 1))
        cp_exchange_f = (cp - 1) * (T * kv * (dqk + dv) * e / t / bw + lat)

    logits_f = gemm(T, spec.vocab_size / t, h)
    logits_mem_f = (
        T
        * (CROSS_ENTROPY_BYTES_PER_LOGIT * spec.vocab_size / t + 2 * e * h / rep)
        / (hbm * behaviour.memory_efficiency(T * e * spec.vocab_size / t))
    )
    embed_mem_f = T * (2 * e * h + mask * h) / rep / (hbm * mem_eff)
    p2p_bytes = T * h * e / t
    attention_kernels = 1.0 if flash else 4.0  # fused kernel, or 2 batched GEMMs + softmax + dropout
    kernels = 4.0 + attention_kernels + spec.norms_per_layer * (1.0 if fused_elementwise else 6.0) + 2.0 + 1.0
    kernels += 1.0 if spec.position_embedding == "rope" else 0.0
    kernels += 2.0 if tp > 1 else 0.0
    kernels += frac_moe * (6.0 + (2.0 if ep > 1 else 0.0))  # router, permute/unpermute, grouped GEMMs
    return _LayerCosts(
        gemm_f=gemm_f,
        attn_f=attn_f,
        attn_b=attn_b,
        mem_f=mem_f,
        softmax_mem_f=softmax_mem_f,
        tp_collective=tp_collective,
        ep_all_to_all=ep_all_to_all,
        cp_exchange_f=cp_exchange_f,
        logits_f=logits_f,
        logits_mem_f=logits_mem_f,
        embed_mem_f=embed_mem_f,
        p2p_send=p2p_bytes,
        kernels_f=kernels,
        attention_kernels_f=attention_kernels,
        tokens=T,
    )


# --------------------------------------------------------------------------------------------------
# The prediction


def _check_inputs(
    spec: ModelSpec,
    seq_len_tokens: int,
    cluster: Cluster,
    layout: ParallelLayout,
    global_batch_sequences: int,
) -> int:
    check_layout_for_model(spec, seq_len_tokens, layout)
    if layout.device_count != cluster.device_count:
        raise InvalidInput(
            f"tp·pp·dp·cp = {layout.device_count} must equal the cluster's device_count ({cluster.device_count}).",
            field="dp",
        )
    if spec.n_heads % layout.tp:
        raise InvalidInput(f"tp ({layout.tp}) must divide n_heads ({spec.n_heads}).", field="tp")
    if (
        isinstance(global_batch_sequences, bool)
        or not isinstance(global_batch_sequences, int)
        or global_batch_sequences <= 0
    ):
        raise InvalidInput(
            f"global_batch_sequences must be a positive integer, got {global_batch_sequences!r}.",
            field="global_batch_sequences",
        )
    per_replica = layout.dp * layout.micro_batch_sequences
    if global_batch_sequences % per_replica:
        raise InvalidInput(
            f"global_batch_sequences ({global_batch_sequences}) must be a multiple of dp·micro_batch "
            f"({per_replica}).",
            field="global_batch_sequences",
        )
    m = global_batch_sequences // per_replica
    if layout.virtual_stages > 1 and m % layout.pp:
        raise InvalidInput(
            f"the interleaved schedule needs the micro-batches per step ({m}) to be a multiple of pp "
            f"({layout.pp}) (Megatron-LM).",
            field="virtual_stages",
        )
    return m


def predict_step(
    spec: ModelSpec,
    seq_len_tokens: int,
    cluster: Cluster,
    layout: ParallelLayout,
    global_batch_sequences: int,
    precision: Precision = "bf16",
    calibration: Calibration | None = None,
    *,
    optimizer: Optimizer = "adam",
    convention: Convention = "megatron",
    dropout: bool = True,
) -> StepPrediction:
    """Predicted step time, throughput, MFU/HFU, memory and the additive breakdown (module docstring)."""
    m = _check_inputs(spec, seq_len_tokens, cluster, layout, global_batch_sequences)
    memory = estimate_memory(
        spec,
        seq_len_tokens,
        layout,
        precision=precision,
        optimizer=optimizer,
        accelerator=cluster.accelerator,
        global_batch_sequences=global_batch_sequences,
        dropout=dropout,
    )
    return _predict(spec, seq_len_tokens, cluster, layout, global_batch_sequences, m, precision,
                    calibration or NO_CALIBRATION, optimizer, convention, dropout, memory)  # fmt: skip


def _predict(
    spec: ModelSpec,
    s: int,
    cluster: Cluster,
    layout: ParallelLayout,
    global_batch: int,
    m: int,
    precision: Precision,
    calibration: Calibration,
    optimizer: Optimizer,
    convention: Convention,
    dropout: bool,
    memory: MemoryEstimate,
) -> StepPrediction:
    acc = cluster.accelerator
    behaviour = behaviour_for(acc)
    peak = peak_flops(acc, precision)
    hbm = acc.hbm_bandwidth_bytes_per_second or 1e12
    tp, pp, dp, cp, v = layout.tp, layout.pp, layout.dp, layout.cp, layout.virtual_stages
    devices = cluster.device_count
    lc = _layer_costs(spec, s, tp, cp, layout.ep, layout.micro_batch_sequences, layout.sequence_parallel,
                      layout.flash_attention, dropout, cluster, precision,
                      calibration.matmul_efficiency_scale, layout.expert_load_imbalance,
                      layout.attention_kernel, layout.fused_elementwise)  # fmt: skip
    overlap = calibration.overlap_fraction
    f_tp = TP_OVERLAP_FRACTION if overlap is None else overlap
    f_dp = DP_OVERLAP_FRACTION if overlap is None else overlap
    f_pp = PP_OVERLAP_FRACTION if overlap is None else overlap

    # One layer, one micro-batch, forward + backward (no recomputation).
    gemm_layer = 3.0 * lc.gemm_f + lc.attn_f + lc.attn_b
    mem_layer = 3.0 * (lc.mem_f + lc.softmax_mem_f)
    tp_total_layer = 4.0 * lc.tp_collective
    tp_exposed_layer = tp_total_layer * (1.0 - f_tp if layout.overlap_tp_comm else 1.0)
    ep_total_layer = 4.0 * lc.ep_all_to_all
    if layout.overlap_ep_comm:
        # DualPipe-style overlap: a micro-batch's dispatch/combine run behind another's compute.
        ep_layer = max(ep_total_layer - f_dp * (gemm_layer + mem_layer), 0.0)
    else:
        ep_layer = ep_total_layer
    cp_layer = max(0.0, lc.cp_exchange_f - lc.attn_f) + max(0.0, 2 * lc.cp_exchange_f - lc.attn_b)
    kernels = 3.0 * lc.kernels_f
    if layout.recompute == "full":
        # One layer in k is checkpointed (k = 1: every layer) and re-runs its forward in backward.
        share = 1.0 / layout.recompute_every_k_layers
        tp_re = 2.0 * lc.tp_collective * (1.0 - f_tp if layout.overlap_tp_comm else 1.0)
        ep_re = 2.0 * lc.ep_all_to_all * (ep_layer / ep_total_layer if ep_total_layer else 1.0)
        re_layer = share * (lc.gemm_f + lc.attn_f + lc.mem_f + lc.softmax_mem_f + tp_re + ep_re)
        tp_total_layer += share * 2.0 * lc.tp_collective
        kernels += share * lc.kernels_f
    elif layout.recompute == "selective" and layout.selective_policy == "per_op":
        # torchtitan per-op SAC: every other matmul and the memory-bound ops re-run; attention is saved.
        re_layer = 0.5 * lc.gemm_f + lc.mem_f + lc.softmax_mem_f
        kernels += lc.kernels_f - lc.attention_kernels_f
    elif layout.recompute == "selective":
        re_layer = lc.attn_f + lc.softmax_mem_f
        kernels += lc.attention_kernels_f
    else:
        re_layer = 0.0
    kernel_layer = kernels * KERNEL_OVERHEAD_SECONDS
    layer_time = gemm_layer + mem_layer + tp_exposed_layer + ep_layer + cp_layer + re_layer + kernel_layer

    L = spec.n_layers
    first_layers, middle_layers, last_layers = stage_layer_counts(
        L, pp, layout.first_stage_layers, layout.last_stage_layers
    )
    logits_gemm = 3.0 * lc.logits_f
    logits_mem = 3.0 * lc.logits_mem_f
    logits_kernels = 9.0 * KERNEL_OVERHEAD_SECONDS  # final norm, logits GEMM, cross-entropy; ×3
    embed_mem = 3.0 * lc.embed_mem_f
    if pp == 1:
        stage_time = L * layer_time + logits_gemm + logits_mem + logits_kernels + embed_mem
        stage_layers = L
    else:
        first_time = first_layers * layer_time + embed_mem
        last_time = last_layers * layer_time + logits_gemm + logits_mem + logits_kernels
        middle_time = middle_layers * layer_time if pp > 2 else 0.0
        stage_time = max(first_time, last_time, middle_time)
        # The stage that sets the pace is the one whose layers the data-parallel traffic rides on.
        stage_layers = (
            last_layers
            if stage_time == last_time
            else first_layers
            if stage_time == first_time
            else middle_layers
        )
    # Averages over stages (per device, per micro-batch): what each device does on average.
    avg_gemm = (L * gemm_layer + logits_gemm) / pp
    avg_mem = (L * mem_layer + logits_mem + embed_mem) / pp
    avg_tp = L * tp_exposed_layer / pp
    avg_ep = L * ep_layer / pp
    avg_cp = L * cp_layer / pp
    avg_re = L * re_layer / pp
    avg_kernel = (L * kernel_layer + logits_kernels) / pp
    avg_time = avg_gemm + avg_mem + avg_tp + avg_ep + avg_cp + avg_re + avg_kernel
    bubble = (pp - 1) / v * stage_time + m * max(stage_time - avg_time, 0.0)

    # Pipeline p2p.
    dpn = cluster.devices_per_node
    pp_total = 0.0
    pp_exposed = 0.0
    if pp > 1:
        span = tp * cp * dp * pp
        bw, lat = _link(cluster, behaviour, span, 1)
        sends = 2.0 * m * v
        pp_total = sends * (lc.p2p_send / bw + lat)
        pp_exposed = sends * (lc.p2p_send / bw * (1.0 - f_pp if layout.overlap_pp_comm else 1.0) + lat)

    # Data-parallel communication.
    sp_params = stage_parameters(spec, tp, pp, layout.ep, layout.first_stage_layers, layout.last_stage_layers)
    dense_params = max(
        sp_params.first_dense, sp_params.last_dense, sp_params.layers_middle_stage * sp_params.layer_dense
    )
    expert_params = max(sp_params.first_expert, sp_params.last_expert)
    state = optimizer_state_bytes(optimizer, precision, fp32_grad_accumulation=layout.fp32_grad_accumulation)
    grad_bytes = state.gradient_bytes
    weight_bytes = state.weight_bytes
    n_dp = dp * cp
    zero = layout.zero_stage
    # Hybrid sharding: ZeRO collectives within groups of shard_group_size, an all-reduce of the shard
    # across the groups once per step.
    n_shard = layout.shard_degree if zero >= 1 else n_dp
    n_replicas = n_dp // n_shard
    group_stride = tp * cp
    # A ring over r ranks per node pools their r NICs (NCCL's rail-aligned channels: only one hop in r
    # crosses the network). Without pooling each rank's share crosses its own NIC: DeepSpeed ZeRO-3's
    # per-layer gathers in 2021 ran at one HDR NIC per A100 (Narayanan et al. 2021 Table 2: 175B at
    # 768 and 1,536 GPUs, the step time flat at the bytes moved over 25 GB/s).
    pooled = max(min(dpn // group_stride, n_shard), 1) if group_stride < dpn else 1
    ranks_per_node = pooled if layout.pooled_nic_collectives else 1
    bw, lat = _link(cluster, behaviour, group_stride * n_shard if n_shard > 1 else 1, ranks_per_node)
    n_eshard = max(n_shard // layout.ep, 1)
    bw_e, lat_e = _link(
        cluster, behaviour, group_stride * layout.ep * n_eshard, max(ranks_per_node // layout.ep, 1)
    )
    fwd_layer = (
        lc.gemm_f
        + lc.attn_f
        + lc.mem_f
        + lc.softmax_mem_f
        + tp_exposed_layer / 2
        + lc.kernels_f * KERNEL_OVERHEAD_SECONDS
    )
    bwd_layer = max(layer_time - fwd_layer, 0.0)
    fwd_stage = stage_layers * fwd_layer
    bwd_stage = max(stage_time - fwd_stage, 0.0)
    replica_grads = 0.0
    if n_replicas > 1:
        rbw, rlat = _link(cluster, behaviour, group_stride * n_dp, 1)
        replica_grads = _ring_allreduce(n_replicas, dense_params * grad_bytes / n_shard, rbw, rlat)
    if zero == 0:
        grads = _ring_allreduce(n_dp, dense_params * grad_bytes, bw, lat) + _ring_allreduce(
            n_dp // layout.ep if n_dp >= layout.ep else 1, expert_params * grad_bytes, bw_e, lat_e
        )
        params = 0.0
    elif zero in (1, 2):
        grads = (
            _ring_gather(n_shard, dense_params * grad_bytes, bw, lat)
            + _ring_gather(n_eshard, expert_params * grad_bytes, bw_e, lat_e)
            + replica_grads
        )
        params = _ring_gather(n_shard, dense_params * weight_bytes, bw, lat) + _ring_gather(
            n_eshard, expert_params * weight_bytes, bw_e, lat_e
        )
    else:
        # ZeRO-3 / FSDP, per layer and micro-batch: gather the weights for forward, again for backward
        # unless kept (reshard_after_forward), again for a checkpointed layer's recomputation where the
        # framework releases them in between (DeepSpeed); reduce-scatter the gradients after backward.
        layers_here = max(stage_layers, 1)
        dense_layer = dense_params / layers_here
        expert_layer = expert_params / layers_here
        gather_l = _ring_gather(n_shard, dense_layer * weight_bytes, bw, lat) + _ring_gather(
            n_eshard, expert_layer * weight_bytes, bw_e, lat_e
        )
        rs_l = _ring_gather(n_shard, dense_layer * grad_bytes, bw, lat) + _ring_gather(
            n_eshard, expert_layer * grad_bytes, bw_e, lat_e
        )
        back_gathers = 1.0 if layout.reshard_after_forward else 0.0
        if layout.regather_for_recompute and layout.recompute == "full":
            back_gathers += 1.0 / layout.recompute_every_k_layers
        per_layer_total = gather_l * (1.0 + back_gathers) + rs_l
        grads = m * layers_here * rs_l + replica_grads
        params = m * layers_here * gather_l * (1.0 + back_gathers)
        if layout.overlap_dp_comm:
            # Prefetch one layer ahead: a layer's collectives hide behind its neighbour's compute
            # (FSDP forward/backward prefetch); the first gather and the last reduce-scatter of each
            # micro-batch cannot hide.
            hidden_f = min(gather_l, f_dp * fwd_layer)
            hidden_b = min(gather_l * back_gathers + rs_l, f_dp * bwd_layer)
            zero3_exposed = m * (layers_here * (per_layer_total - hidden_f - hidden_b) + gather_l + rs_l)
            zero3_exposed = min(zero3_exposed, m * layers_here * per_layer_total)
        else:
            zero3_exposed = m * layers_here * per_layer_total
        _ = per_layer_total
    dp_total = grads + params
    if not layout.overlap_dp_comm or dp_total == 0.0:
        dp_exposed = dp_total
    elif zero == 3:
        dp_exposed = zero3_exposed + max(replica_grads - f_dp * bwd_layer, 0.0)
    else:
        # Gradients reduce behind the last micro-batch's backward and the pipeline drain; parameters
        # gather behind the first micro-batch's forward and the pipeline fill (half the bubble each).
        half_bubble = 0.5 * (pp - 1) / v * stage_time
        dp_exposed = max(grads - f_dp * (bwd_stage + half_bubble), 0.0) + max(
            params - f_dp * (fwd_stage + half_bubble), 0.0
        )

    # Hidden data-parallel traffic still takes the SMs its NCCL kernels run on: the compute it overlaps
    # runs that much slower.
    hidden_dp = max(dp_total - dp_exposed, 0.0)
    dp_exposed += hidden_dp * NCCL_SM_SHARE / (1.0 - NCCL_SM_SHARE)

    # Optimizer step: memory-bound over the local parameters.
    shard = n_shard if zero >= 1 else 1
    shard_e = n_eshard if zero >= 1 else 1
    local_params = dense_params / shard + expert_params / shard_e
    opt_bytes_per_param = 2.0 * state.optimizer_bytes + 2.0 * grad_bytes + weight_bytes
    opt_bytes = local_params * opt_bytes_per_param
    optimizer_time = opt_bytes / (hbm * behaviour.memory_efficiency(opt_bytes / 8))

    tokens_per_step = float(global_batch * s)
    useful = flops_per_token(spec, s, convention="megatron_causal").training_flops_per_token
    ideal = useful * tokens_per_step / devices / peak
    compute_time = m * avg_gemm
    breakdown = StepBreakdown(
        ideal_matmul_seconds=ideal,
        matmul_inefficiency_seconds=compute_time - ideal,
        memory_bound_seconds=m * avg_mem,
        exposed_tensor_parallel_comm_seconds=m * avg_tp,
        exposed_context_parallel_comm_seconds=m * avg_cp,
        exposed_expert_parallel_comm_seconds=m * avg_ep,
        exposed_data_parallel_comm_seconds=dp_exposed,
        exposed_pipeline_p2p_seconds=pp_exposed,
        pipeline_bubble_seconds=bubble,
        recompute_seconds=m * avg_re,
        optimizer_step_seconds=optimizer_time,
        kernel_overhead_seconds=m * avg_kernel,
    )
    step = (m + (pp - 1) / v) * stage_time + dp_exposed + pp_exposed + optimizer_time
    counted = flops_per_token(spec, s, convention=convention, recompute=layout.recompute)
    model_flops = counted.training_flops_per_token * tokens_per_step
    hardware_flops = counted.hardware_flops_per_token * tokens_per_step
    capacity = devices * peak * step
    return StepPrediction(
        step_time_seconds=step,
        tokens_per_second=tokens_per_step / step,
        tokens_per_second_per_device=tokens_per_step / step / devices,
        mfu=model_flops / capacity,
        hfu=hardware_flops / capacity,
        achieved_tflops_per_device=model_flops / step / devices / 1e12,
        model_flops_per_step=model_flops,
        hardware_flops_per_step=hardware_flops,
        convention=convention,
        micro_batches_per_step=m,
        bubble_fraction=(pp - 1) / (v * m),
        tensor_parallel_comm_seconds=m * L * tp_total_layer / pp,
        data_parallel_comm_seconds=dp_total,
        pipeline_p2p_seconds=pp_total,
        breakdown=breakdown,
        memory=memory,
        layout=layout,
        precision=precision,
        calibration=calibration,
        regimes=(regimes := prediction_regimes(spec, s, cluster, layout, precision, m)),
        uncertainty_mfu_points=max(REGIME_MAE_MFU_POINTS[r] for r in regimes),
    )


# --------------------------------------------------------------------------------------------------
# Uncertainty by regime

#: Mean absolute MFU error (points) per regime on the 83 published runs of
#: ``benchmarks/validate_predictions.py`` (its per-regime table; rerun it after a model change). A
#: prediction's band is the largest of its regimes'. Worst rows today: a100/fsdp-zero3/zero3 at fixed
#: global batch 12.7, hopper 6.9, megatron-tp-pp 7.0, uneven-pp 5.3, long-context 3.7, fp8 3.5.
REGIME_MAE_MFU_POINTS: dict[str, float] = {
    "all": 2.42,
    "a100": 2.35,
    "hopper": 2.48,
    "blackwell": 2.67,
    "fp8": 1.49,
    "fsdp-zero3": 2.67,
    "zero3-fixed-global-batch": 3.48,
    "long-context": 1.67,
    "megatron-tp-pp": 2.17,
    "moe-ep": 2.80,
    "uneven-pp": 3.44,
}


def prediction_regimes(
    spec: ModelSpec, seq_len_tokens: int, cluster: Cluster, layout: ParallelLayout, precision: str, m: int
) -> tuple[str, ...]:
    """The validation regimes a prediction falls in (keys of :data:`REGIME_MAE_MFU_POINTS`)."""
    family = behaviour_for(cluster.accelerator).family
    regimes = ["all"]
    if family in ("ampere", "hopper", "blackwell"):
        regimes.append({"ampere": "a100"}.get(family, family))
    if precision == "fp8":
        regimes.append("fp8")
    if layout.zero_stage == 3:
        regimes.append("fsdp-zero3")
        if m == 1 and layout.micro_batch_sequences <= 4:
            regimes.append("zero3-fixed-global-batch")
    if layout.tp > 1 or layout.pp > 1:
        regimes.append("megatron-tp-pp")
    if layout.pp > 1 and (spec.n_layers % layout.pp or layout.first_stage_layers or layout.last_stage_layers):
        regimes.append("uneven-pp")
    if seq_len_tokens >= 32768:
        regimes.append("long-context")
    if spec.n_experts and layout.ep > 1:
        regimes.append("moe-ep")
    return tuple(regimes)


# --------------------------------------------------------------------------------------------------
# Calibration from measured runs


@dataclass(frozen=True, slots=True)
class PredictionInputs:
    """Everything :func:`predict_step` needs, bundled (one measured run's configuration)."""

    spec: ModelSpec
    seq_len_tokens: int
    cluster: Cluster
    layout: ParallelLayout
    global_batch_sequences: int
    precision: Precision = "bf16"
    optimizer: Optimizer = "adam"
    convention: Convention = "megatron"
    dropout: bool = True

    def predict(self, calibration: Calibration | None = None) -> StepPrediction:
        return predict_step(
            self.spec,
            self.seq_len_tokens,
            self.cluster,
            self.layout,
            self.global_batch_sequences,
            self.precision,
            calibration,
            optimizer=self.optimizer,
            convention=self.convention,
            dropout=self.dropout,
        )


def _golden_min(f: Callable[[float], float], lo: float, hi: float, iterations: int = 40) -> float:
    """Golden-section search for the minimum of a unimodal ``f`` on [lo, hi]."""
    ratio = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c = b - ratio * (b - a)
    d = a + ratio * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iterations):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = f(d)
    return (a + b) / 2


def _with_overlap(sse: Callable[[float, float | None], float], overlap: float | None, scale: float) -> float:
    return sse(scale, overlap)


def fit_calibration(
    observations: Sequence[tuple[PredictionInputs, float]], *, fit_overlap: bool = False
) -> Calibration:
    """Least-squares fit of the matmul-efficiency scale (and, with ``fit_overlap``, the overlap
    fraction on a 0.05 grid) to measured MFUs (fractions, under each input's convention).

    Pure: predictions only. One accelerator per call is the intended use (the result names it when
    all observations share one). Raises InvalidInput without observations or with an MFU outside (0, 1].
    """
    if not observations:
        raise InvalidInput(
            "fit_calibration needs at least one (inputs, measured MFU) pair.", field="observations"
        )
    for i, (_, mfu) in enumerate(observations):
        if isinstance(mfu, bool) or not isinstance(mfu, int | float) or not 0 < mfu <= 1:
            raise InvalidInput(
                f"measured MFU must be within (0, 1], got {mfu!r}.", field=f"observations[{i}]"
            )

    def sse(scale: float, overlap: float | None) -> float:
        cal = Calibration(matmul_efficiency_scale=scale, overlap_fraction=overlap)
        return sum((inp.predict(cal).mfu - mfu) ** 2 for inp, mfu in observations)

    overlaps: list[float | None] = [None]
    if fit_overlap:
        overlaps = [round(0.05 * i, 2) for i in range(21)]
    best: tuple[float, float, float | None] | None = None
    for overlap in overlaps:
        scale = _golden_min(functools.partial(_with_overlap, sse, overlap), 0.2, 2.5)
        err = sse(scale, overlap)
        if best is None or err < best[0]:
            best = (err, scale, overlap)
    assert best is not None
    err, scale, overlap = best
    ids = {inp.cluster.accelerator.id for inp, _ in observations}
    return Calibration(
        matmul_efficiency_scale=scale,
        overlap_fraction=overlap,
        accelerator_id=ids.pop() if len(ids) == 1 else None,
        n_observations=len(observations),
        rms_error=math.sqrt(err / len(observations)),
        source=f"least-squares fit on {len(observations)} measured runs",
    )
