"""Memory per device for a training layout: model states, activations, buffers and headroom.

Everything is bytes per device (``_bytes``). The worst pipeline stage is reported: the first stage holds
the input embedding and, under 1F1B, ``p`` micro-batches of activations in flight; the last stage holds
the output layer and the logits. With ``p = 1`` the single stage holds both.

Model states (weights, gradients, optimizer state), bytes per parameter before sharding
(``reference/performance_model.md``; :data:`OPTIMIZERS` gives each optimizer's source):

* mixed-precision Adam: 2 (16-bit weights) + 2 (16-bit gradients) + 12 (fp32 master, m, v) = 16
  (Rajbhandari et al. 2020, ZeRO §3.1, K = 12);
* ``fp32_grad_accumulation`` (Megatron's ``main_grad``) keeps the gradients in fp32: 2 + 4 + 12 = 18, and
  ZeRO-1 (Megatron's distributed optimizer) gives 6 + 12/d (Megatron-LM distributed-optimizer docs);
* ZeRO-1 shards the optimizer state over the data-parallel group, ZeRO-2 also the gradients, ZeRO-3 /
  FSDP full-shard also the weights (ZeRO paper: 7.5B parameters, 120 GB unsharded, ZeRO-3 over 64 GPUs
  1.9 GB). The sharding group is ``dp·cp`` (Megatron shards over data × context parallel); expert
  parameters are sharded over ``dp·cp/ep``. Weights are split by ``tp·pp`` (experts by ``tp·pp·ep``)
  first; norms are replicated across tensor-parallel ranks.

Activations per transformer layer and micro-batch (Korthikanti et al. 2022, arXiv 2205.05198, §4 and
Table 2; 16-bit tensors 2 bytes, dropout masks 1 byte): ``s·b·h·(34 + 5·a·s/h)`` without parallelism.
The 34 is generalised term by term so that GQA, SwiGLU, MoE and separate head widths are counted:

* replicated over tensor-parallel ranks unless sequence parallel: the norms' inputs (2 bytes·h each,
  ``norms_per_layer`` of them: 4), the QKV input (2) and the MLP input (2), the two dropout masks (1 + 1)
  = 10 for GPT;
* split by ``t``: Q (2·H·d_qk), K (2·g·d_qk), V (2·g·d_v), the output projection input (2·H·d_v) and the
  MLP: plain GeLU stores the activation input and the second GEMM's input (2·f + 2·f); gated (SwiGLU)
  stores gate and up (4·f) and the down-projection input (2·f); an MoE layer stores ``k`` routed experts'
  worth (each token visits k experts of width f_e) plus the shared experts = 24 for GPT (6 + 2 + 16);
* the attention matrix: softmax output (2), dropout mask (1), dropout output (2) per head and key:
  ``5·a·s`` per token (``2·a·s`` without dropout), split by ``t``; FlashAttention never stores it (it keeps
  the fp32 log-sum-exp, 4 bytes per head and token), nor does selective recomputation.

Full recomputation keeps only each layer's input (2·s·b·h, divided by ``t`` with sequence parallel) plus
one layer's full activations while it is recomputed. Context parallelism divides the tokens per device
by ``cp`` (each rank's queries still see all ``s`` keys). FP32 runs store 4-byte tensors; FP8 runs are
counted as BF16 (Transformer Engine keeps BF16 activations between FP8 GEMMs).

Pipeline: with 1F1B the first stage holds ``min(p, m)`` micro-batches in flight (Korthikanti §4.2.3:
``L`` layers' worth in total); interleaving with ``v`` chunks multiplies it by ``1 + (p − 1)/(p·v)``.
The first stage also keeps the embedding dropout mask (1 byte·h per token, for each micro-batch in
flight); the last stage keeps the final norm input and
fp32 logits for the cross-entropy (``4·s·b·V/t``; Korthikanti §4.4).

Buffers and headroom (stated constants below): ZeRO-3 gathers two layers of weights (current +
prefetched) and one layer of unsharded gradients; the CUDA context, cuBLAS workspaces and NCCL buffers
take :data:`FRAMEWORK_OVERHEAD_BYTES`; the caching allocator's fragmentation takes
:data:`FRAGMENTATION_FRACTION` of everything allocated.

Korthikanti Fig. 1 is reproduced within 10% (tests/domain/test_memory.py): it uses 18 bytes/parameter
(no distributed optimizer), micro-batch 4 for 22B and 1 for the others, interleaving ``v = 3`` for
175B and 530B.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from service.domain.hardware import Accelerator, Precision
from service.domain.memory_states import (
    FP32_BYTES,
    OPTIMIZER_NAMES,
    OPTIMIZERS,
    Optimizer,
    OptimizerStateBytes,
    activation_element_bytes,
    model_state_bytes_per_parameter,
    optimizer_state_bytes,
)
from service.domain.models import ModelSpec, layer_parameters
from service.domain.parallel_layout import (
    ATTENTION_KERNELS,
    GATHER_UNITS,
    SELECTIVE_POLICIES,
    ZERO_STAGES,
    AttentionKernel,
    GatherUnit,
    ParallelLayout,
    SelectivePolicy,
    _positive_int,
    check_layout_for_model,
    stage_layer_counts,
    validate_layout,
)

__all__ = [
    "ATTENTION_KERNELS",
    "FP32_BYTES",
    "GATHER_UNITS",
    "OPTIMIZERS",
    "OPTIMIZER_NAMES",
    "SELECTIVE_POLICIES",
    "ZERO_STAGES",
    "ActivationCoefficients",
    "AttentionKernel",
    "GatherUnit",
    "MemoryEstimate",
    "Optimizer",
    "OptimizerStateBytes",
    "ParallelLayout",
    "SelectivePolicy",
    "StageParameters",
    "activation_coefficients",
    "activation_element_bytes",
    "check_layout_for_model",
    "estimate_memory",
    "interleave_factor",
    "largest_module_parameters",
    "layer_activation_bytes_per_token",
    "max_micro_batch",
    "model_state_bytes_per_parameter",
    "optimizer_state_bytes",
    "stage_layer_counts",
    "stage_parameters",
    "validate_layout",
]

GIB = 2**30

#: CUDA context (≈0.3-0.9 GiB with lazy module loading), cuBLAS/cuDNN workspaces and NCCL communicator
#: buffers (NCCL_BUFFSIZE 4 MiB per channel and peer). PyTorch "CUDA semantics / memory management"
#: notes and NCCL environment documentation; a round, stated budget, not a measurement.
FRAMEWORK_OVERHEAD_BYTES = int(1.5 * GIB)

#: Reserved-but-unallocated memory of PyTorch's caching allocator, as a fraction of what is allocated
#: (commonly 3-10% in training runs; ``torch.cuda.memory_reserved`` vs ``memory_allocated``). Stated
#: headroom.
FRAGMENTATION_FRACTION = 0.05

#: Bytes of one dropout mask element (Korthikanti et al. 2022 §4.1 counts masks as 1 byte).
DROPOUT_MASK_BYTES = 1

#: Bytes of one FP8 element (E4M3 / E5M2).
FP8_BYTES = 1

#: ZeRO-3 / FSDP keeps the current layer's gathered weights and prefetches the next one (FSDP
#: ``forward_prefetch``/``backward_prefetch``; DeepSpeed ``stage3_prefetch_bucket_size``).
ZERO3_GATHERED_LAYERS = 2


# --------------------------------------------------------------------------------------------------
# Parameters per stage


@dataclass(frozen=True, slots=True)
class StageParameters:
    """Parameters one device holds on the first and the last pipeline stage (``dense`` = everything
    but routed experts; ``expert`` = routed-expert weights, sharded over ep)."""

    first_dense: float
    first_expert: float
    last_dense: float
    last_expert: float
    layers_first_stage: int
    layer_dense: float
    layer_expert: float
    layers_middle_stage: int = 0
    layers_last_stage: int = 0


@functools.lru_cache(maxsize=8192)
def stage_parameters(
    spec: ModelSpec,
    tp: int,
    pp: int,
    ep: int,
    first_stage_layers: int | None = None,
    last_stage_layers: int | None = None,
) -> StageParameters:
    """Per-device parameters on the first, fullest middle and last stage, the layers split by
    :func:`stage_layer_counts`. MoE layers are spread evenly (their share of L on every stage); the
    input embedding sits on the first stage, the output layer and final norm on the last."""
    lp = layer_parameters(spec)
    norm_size = 2 * spec.d_model if spec.norm_has_bias else spec.d_model
    norms = spec.norms_per_layer * norm_size + lp.attention_norms
    attn = (lp.attention_weights + lp.attention_biases) / tp
    n_moe = spec.n_moe_layers
    n_layers = spec.n_layers
    dense_layer = attn + (lp.dense_mlp_weights + lp.dense_mlp_biases) / tp + norms
    moe_layer = attn + lp.moe_shared_weights / tp + lp.moe_router + norms
    layer_dense = ((n_layers - n_moe) * dense_layer + n_moe * moe_layer) / n_layers
    layer_expert = n_moe * spec.n_experts * lp.moe_expert_weights / (tp * ep) / n_layers
    first_layers, middle_layers, last_layers = stage_layer_counts(
        n_layers, pp, first_stage_layers, last_stage_layers
    )
    d = spec.d_model
    final_norm = norm_size if spec.final_norm else 0
    emb_norm = norm_size if spec.embedding_norm else 0
    position = (spec.max_position_embeddings or 0) * d if spec.position_embedding == "learned" else 0
    input_emb = (spec.vocab_size * d + position) / tp + emb_norm
    # Megatron keeps a copy of a tied word embedding on the last stage for the output layer.
    output_emb = spec.vocab_size * d / tp if (not spec.tied_embeddings or pp > 1) else 0.0
    if pp == 1:
        only = n_layers * layer_dense + input_emb + output_emb + final_norm
        return StageParameters(only, n_layers * layer_expert, only, n_layers * layer_expert,
                               n_layers, layer_dense, layer_expert, n_layers, n_layers)  # fmt: skip
    return StageParameters(
        first_layers * layer_dense + input_emb,
        first_layers * layer_expert,
        last_layers * layer_dense + output_emb + final_norm,
        last_layers * layer_expert,
        first_layers,
        layer_dense,
        layer_expert,
        middle_layers if pp > 2 else 0,
        last_layers,
    )


# --------------------------------------------------------------------------------------------------
# Activations


@dataclass(frozen=True, slots=True)
class ActivationCoefficients:
    """Bytes of activations per token for one transformer layer on one device (divided by t as the
    layout says), by recompute mode, plus the first/last stage extras. Multiply by the tokens of a
    micro-batch on the device (b·s/cp)."""

    per_token_none: float
    per_token_selective: float
    per_token_full: float
    embedding_per_token: float
    logits_per_token: float
    per_token_per_op: float = 0.0


@functools.lru_cache(maxsize=16384)
def activation_coefficients(
    spec: ModelSpec,
    seq_len_tokens: int,
    tp: int,
    sequence_parallel: bool,
    flash_attention: bool,
    element_bytes: int = 2,
    dropout: bool = True,
    gemm_input_bytes: int | None = None,
) -> ActivationCoefficients:
    """Per-layer activation bytes per token (module docstring gives each term)."""
    e = float(element_bytes)
    h = float(spec.d_model)
    heads = float(spec.n_heads)
    kv = float(spec.n_heads if spec.uses_mla else spec.n_kv_heads)
    dqk, dv = float(spec.qk_head_dim), float(spec.value_head_dim)
    t = float(tp)
    mask = float(DROPOUT_MASK_BYTES) if dropout else 0.0

    # FP8 runs save the linear layers' inputs as the FP8 copies their GEMMs read (Transformer Engine
    # keeps the casted input for the weight-gradient GEMM): the QKV and MLP inputs, the output
    # projection's and the down projection's inputs at 1 byte.
    g_in = float(gemm_input_bytes) if gemm_input_bytes is not None else e
    replicated = spec.norms_per_layer * e * h + g_in * h + g_in * h + 2 * mask * h
    attention = e * (heads * dqk + kv * dqk + kv * dv) + g_in * heads * dv
    gated = spec.ffn_kind == "gated"

    def mlp_bytes(width: float) -> float:
        return e * (2 * width if gated else width) + g_in * width

    n_moe = spec.n_moe_layers
    dense_mlp = mlp_bytes(float(spec.d_ff))
    moe_mlp = spec.experts_per_token * mlp_bytes(float(spec.expert_d_ff)) + spec.n_shared_experts * mlp_bytes(
        float(spec.shared_expert_d_ff)
    )
    mlp = ((spec.n_layers - n_moe) * dense_mlp + n_moe * moe_mlp) / spec.n_layers
    split = attention + mlp
    if flash_attention:
        scores = FP32_BYTES * heads  # log-sum-exp per head and query
    else:
        scores = (2 * e + mask) * heads * seq_len_tokens if dropout else e * heads * seq_len_tokens
    rep_div = t if sequence_parallel else 1.0
    selective = replicated / rep_div + split / t + (FP32_BYTES * heads / t if flash_attention else 0.0)
    none = replicated / rep_div + split / t + scores / t
    full = e * h / rep_div
    embedding = mask * h / rep_div  # the embedding output is the first layer's input (counted there)
    logits = FP32_BYTES * spec.vocab_size / t + e * h / rep_div
    # torchtitan per-op SAC (torchtitan/models/llama3/infra/parallelize.py, _save_list): the layer input,
    # every other matmul output, and the attention kernel's output and log-sum-exp are kept; norms,
    # activation functions and the other matmuls are recomputed.
    c = 2.0 if gated else 1.0
    matmul_outputs = e * (heads * dqk + kv * dqk + kv * dv + h) + e * h + c * mlp / (3 if gated else 2)
    per_op = e * h / rep_div + 0.5 * matmul_outputs / t + (e * heads * dv + FP32_BYTES * heads) / t
    return ActivationCoefficients(none, selective, full, embedding, logits, min(per_op, selective))


def interleave_factor(pp: int, virtual_stages: int) -> float:
    """Korthikanti et al. 2022 §4.2.3: interleaving multiplies the first stage's activations by
    1 + (p − 1)/(p·v) (1 without interleaving)."""
    if virtual_stages <= 1:
        return 1.0
    return 1.0 + (pp - 1) / (pp * virtual_stages)


# --------------------------------------------------------------------------------------------------
# The estimate


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """Bytes per device on the worst stage (``stage``: "only", "first" or "last").

    ``total_bytes`` = weights + gradients + optimizer state + activations + buffers + framework
    overhead + fragmentation. ``fits`` and ``capacity_bytes`` are None without an accelerator.
    ``max_micro_batch_sequences`` is the largest micro-batch that fits with everything else unchanged
    (0: not even one sequence fits; None without an accelerator). ``model_state_bytes_per_parameter``
    is weights + gradients + optimizer per parameter after sharding.
    """

    weights_bytes: float
    gradients_bytes: float
    optimizer_state_bytes: float
    activations_bytes: float
    buffers_bytes: float
    framework_overhead_bytes: float
    fragmentation_bytes: float
    total_bytes: float
    capacity_bytes: float | None
    fits: bool | None
    headroom_bytes: float | None
    max_micro_batch_sequences: int | None
    stage: str
    parameters_on_device: float
    model_state_bytes_per_parameter: float
    activations_per_micro_batch_bytes: float
    in_flight_micro_batches: float
    first_stage_total_bytes: float
    last_stage_total_bytes: float
    optimizer: str
    assumptions: tuple[str, ...]

    @property
    def model_states_bytes(self) -> float:
        return self.weights_bytes + self.gradients_bytes + self.optimizer_state_bytes

    @property
    def total_gib(self) -> float:
        return self.total_bytes / GIB


_ASSUMPTIONS = (
    "activations: Korthikanti et al. 2022 Table 2 terms, generalised for GQA/SwiGLU/MoE",
    f"framework overhead {FRAMEWORK_OVERHEAD_BYTES / GIB:g} GiB (CUDA context, workspaces, NCCL buffers)",
    f"fragmentation {FRAGMENTATION_FRACTION:.0%} of allocated memory",
    "worst pipeline stage reported; 1F1B keeps min(p, m) micro-batches in flight on the first stage",
)


@dataclass(frozen=True, slots=True)
class _StageMemory:
    weights: float
    gradients: float
    optimizer: float
    fixed_activations: float  # independent of the micro-batch (none today; kept for clarity)
    activations_per_sequence: float  # activation bytes per sequence of micro-batch
    buffers: float
    parameters: float


def largest_module_parameters(spec: ModelSpec) -> float:
    """Parameters of the model's largest single weight matrix (one projection of a layer)."""
    h = spec.d_model
    kv_width = spec.n_kv_heads * spec.qk_head_dim
    qkv = h * (spec.n_heads * spec.qk_head_dim + 2 * kv_width)
    out = spec.n_heads * spec.value_head_dim * h
    ffn = h * max(spec.d_ff, spec.expert_d_ff)
    return float(max(qkv, out, ffn))


def layer_activation_bytes_per_token(coeff: ActivationCoefficients, layout: ParallelLayout) -> float:
    """Activation bytes per token one transformer layer keeps for backward under the layout's
    checkpointing policy (averaged over layers for every-k-th-layer checkpointing)."""
    if layout.recompute == "none":
        return coeff.per_token_none
    if layout.recompute == "selective":
        return coeff.per_token_per_op if layout.selective_policy == "per_op" else coeff.per_token_selective
    k = layout.recompute_every_k_layers
    return (coeff.per_token_full + (k - 1) * coeff.per_token_none) / k


def _stage_memory(
    spec: ModelSpec,
    seq_len_tokens: int,
    layout: ParallelLayout,
    state: OptimizerStateBytes,
    element_bytes: int,
    dropout: bool,
    in_flight: float,
    first: bool,
    middle: bool = False,
    fp8: bool = False,
) -> _StageMemory:
    sp = stage_parameters(
        spec, layout.tp, layout.pp, layout.ep, layout.first_stage_layers, layout.last_stage_layers
    )
    shard = layout.shard_degree
    w, g, o = model_state_bytes_per_parameter(state, zero_stage=layout.zero_stage, shard_degree=shard)
    we, ge, oe = model_state_bytes_per_parameter(
        state, zero_stage=layout.zero_stage, shard_degree=max(shard // layout.ep, 1)
    )
    if middle:
        dense = sp.layers_middle_stage * sp.layer_dense
        expert = sp.layers_middle_stage * sp.layer_expert
        layers = sp.layers_middle_stage
    else:
        dense = sp.first_dense if first else sp.last_dense
        expert = sp.first_expert if first else sp.last_expert
        layers = sp.layers_first_stage if first else sp.layers_last_stage
    coeff = activation_coefficients(
        spec,
        seq_len_tokens,
        layout.tp,
        layout.sequence_parallel,
        layout.flash_attention,
        element_bytes,
        dropout,
        FP8_BYTES if fp8 else None,
    )
    tokens_per_sequence = seq_len_tokens / layout.cp
    per_layer = layer_activation_bytes_per_token(coeff, layout)
    if first or middle:
        # 1F1B: the stage at position i holds p − i micro-batches in flight (the second stage one fewer
        # than the first).
        held = (in_flight - (1.0 if middle else 0.0)) * interleave_factor(layout.pp, layout.virtual_stages)
        held = max(held, 1.0)
    else:
        held = 1.0
    per_token = per_layer * layers * held
    if layout.recompute == "full":
        per_token += coeff.per_token_none  # one layer's working set while it is recomputed
    if first and not middle:
        per_token += coeff.embedding_per_token * held
    if (not first and not middle) or layout.pp == 1:
        per_token += coeff.logits_per_token
    buffers = 0.0
    if layout.zero_stage >= 3:
        unit = sp.layer_dense + sp.layer_expert
        if layout.zero3_gather_unit == "module":
            # DeepSpeed's estimator counts the largest module's parameters (estimate_zero3_model_states_
            # mem_needs, largest_layer_params): the biggest weight matrix, split by tp.
            unit = min(unit, largest_module_parameters(spec) / layout.tp)
        buffers = unit * (ZERO3_GATHERED_LAYERS * state.weight_bytes + state.gradient_bytes)
    return _StageMemory(
        weights=dense * w + expert * we,
        gradients=dense * g + expert * ge,
        optimizer=dense * o + expert * oe,
        fixed_activations=0.0,
        activations_per_sequence=per_token * tokens_per_sequence,
        buffers=buffers,
        parameters=dense + expert,
    )


def _total(stage: _StageMemory, micro_batch: int) -> tuple[float, float, float]:
    activations = stage.fixed_activations + stage.activations_per_sequence * micro_batch
    allocated = stage.weights + stage.gradients + stage.optimizer + activations + stage.buffers
    fragmentation = FRAGMENTATION_FRACTION * allocated
    return activations, fragmentation, allocated + fragmentation + FRAMEWORK_OVERHEAD_BYTES


def estimate_memory(
    spec: ModelSpec,
    seq_len_tokens: int,
    layout: ParallelLayout,
    *,
    precision: Precision = "bf16",
    optimizer: Optimizer = "adam",
    accelerator: Accelerator | None = None,
    global_batch_sequences: int | None = None,
    dropout: bool = True,
) -> MemoryEstimate:
    """Memory per device (module docstring). ``global_batch_sequences`` gives the number of
    micro-batches m = B/(dp·b) so that the first stage holds min(p, m) in flight (p without it)."""
    check_layout_for_model(spec, seq_len_tokens, layout)
    state = optimizer_state_bytes(optimizer, precision, fp32_grad_accumulation=layout.fp32_grad_accumulation)
    element_bytes = activation_element_bytes(precision)
    in_flight = float(layout.pp)
    if global_batch_sequences is not None:
        _positive_int(global_batch_sequences, "global_batch_sequences")
        m = global_batch_sequences / (layout.dp * layout.micro_batch_sequences)
        in_flight = float(min(layout.pp, max(math.ceil(m), 1)))
    b = layout.micro_batch_sequences
    fp8 = precision == "fp8"
    first = _stage_memory(
        spec, seq_len_tokens, layout, state, element_bytes, dropout, in_flight, True, fp8=fp8
    )
    last = _stage_memory(
        spec, seq_len_tokens, layout, state, element_bytes, dropout, in_flight, False, fp8=fp8
    )
    first_total = _total(first, b)[2]
    last_total = _total(last, b)[2]
    middle_total = 0.0
    if layout.pp > 2:
        middle = _stage_memory(
            spec, seq_len_tokens, layout, state, element_bytes, dropout, in_flight, False, True
        )
        middle_total = _total(middle, b)[2]
    if layout.pp == 1:
        worst, label = first, "only"
    elif middle_total > max(first_total, last_total):
        worst, label = middle, "middle"
    elif last_total > first_total:
        worst, label = last, "last"
    else:
        worst, label = first, "first"
    activations, fragmentation, total = _total(worst, b)

    capacity: float | None = None
    fits: bool | None = None
    headroom: float | None = None
    max_b: int | None = None
    if accelerator is not None and accelerator.memory_bytes is not None:
        capacity = float(accelerator.memory_bytes)
        fits = total <= capacity
        headroom = capacity - total
        max_b = max_micro_batch(first, last, capacity, layout.pp)
        if label == "middle":
            max_b = min(max_b, max_micro_batch(worst, worst, capacity, 1))
    model_state = worst.weights + worst.gradients + worst.optimizer
    return MemoryEstimate(
        weights_bytes=worst.weights,
        gradients_bytes=worst.gradients,
        optimizer_state_bytes=worst.optimizer,
        activations_bytes=activations,
        buffers_bytes=worst.buffers,
        framework_overhead_bytes=float(FRAMEWORK_OVERHEAD_BYTES),
        fragmentation_bytes=fragmentation,
        total_bytes=total,
        capacity_bytes=capacity,
        fits=fits,
        headroom_bytes=headroom,
        max_micro_batch_sequences=max_b,
        stage=label,
        parameters_on_device=worst.parameters,
        model_state_bytes_per_parameter=model_state / worst.parameters if worst.parameters else 0.0,
        activations_per_micro_batch_bytes=worst.activations_per_sequence
        * b
        / (in_flight * interleave_factor(layout.pp, layout.virtual_stages) if label != "last" else 1.0),
        in_flight_micro_batches=in_flight if label != "last" else 1.0,
        first_stage_total_bytes=first_total,
        last_stage_total_bytes=last_total,
        optimizer=state.name,
        assumptions=_ASSUMPTIONS,
    )


def max_micro_batch(first: _StageMemory, last: _StageMemory, capacity: float, pp: int) -> int:
    """The largest b with both stages' totals ≤ capacity (memory is affine in b)."""
    best = math.inf
    for stage in (first, last) if pp > 1 else (first,):
        fixed = _total(stage, 0)[2]
        per = stage.activations_per_sequence * (1 + FRAGMENTATION_FRACTION)
        room = capacity - fixed
        if room < per:
            return 0
        best = min(best, math.floor(room / per) if per > 0 else 1 << 20)
    return int(best)
