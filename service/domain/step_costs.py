"""Per-layer costs of one micro-batch on one device (GEMMs, attention, memory-bound kernels, TP/CP/EP
collectives, logits, embedding, pipeline sends), the cluster description and the link model. Split from
:mod:`service.domain.performance` (its module docstring describes each term), which re-exports these
names; cached per model, sequence, tp/cp/ep, micro-batch and hardware."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from service.domain.collectives import all_to_all_seconds, ring_allreduce_seconds, ring_gather_seconds
from service.domain.errors import InvalidInput
from service.domain.flops import attended_tokens
from service.domain.hardware import Accelerator, Precision, peak_flops
from service.domain.hardware_behaviour import HardwareBehaviour, behaviour_for
from service.domain.memory import activation_element_bytes
from service.domain.models import ModelSpec, layer_parameters

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
