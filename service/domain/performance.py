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
in :mod:`service.domain.step_model`; everything else is from the sources named beside it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from service.domain.errors import InvalidInput
from service.domain.flops import Convention
from service.domain.hardware import Precision
from service.domain.hardware_behaviour import NO_CALIBRATION, Calibration
from service.domain.memory import Optimizer, ParallelLayout, check_layout_for_model, estimate_memory
from service.domain.models import ModelSpec
from service.domain.regimes import REGIME_MAE_MFU_POINTS, prediction_regimes
from service.domain.step_costs import (
    CROSS_ENTROPY_BYTES_PER_LOGIT,
    EAGER_ELEMENTWISE_TRAFFIC,
    FLASH2_ON_HOPPER_RELATIVE,
    FLASH_BACKWARD_FLOPS_RATIO,
    FLASH_BLOCK_TOKENS,
    FP8_CAST_BYTES_PER_ELEMENT,
    KERNEL_OVERHEAD_SECONDS,
    NVLINK_LATENCY_SECONDS,
    TRITON_ATTENTION_RELATIVE,
    Cluster,
    _layer_costs,
    _LayerCosts,
    _ring_allreduce,
    _ring_gather,
    attention_kernel_share,
)
from service.domain.step_model import (
    DP_OVERLAP_FRACTION,
    NCCL_SM_SHARE,
    PP_OVERLAP_FRACTION,
    TP_OVERLAP_FRACTION,
    StepBreakdown,
    StepPrediction,
    _predict,
)

__all__ = [
    "CROSS_ENTROPY_BYTES_PER_LOGIT",
    "DP_OVERLAP_FRACTION",
    "EAGER_ELEMENTWISE_TRAFFIC",
    "FLASH2_ON_HOPPER_RELATIVE",
    "FLASH_BACKWARD_FLOPS_RATIO",
    "FLASH_BLOCK_TOKENS",
    "FP8_CAST_BYTES_PER_ELEMENT",
    "KERNEL_OVERHEAD_SECONDS",
    "NCCL_SM_SHARE",
    "NVLINK_LATENCY_SECONDS",
    "PP_OVERLAP_FRACTION",
    "REGIME_MAE_MFU_POINTS",
    "TP_OVERLAP_FRACTION",
    "TRITON_ATTENTION_RELATIVE",
    "Cluster",
    "PredictionInputs",
    "StepBreakdown",
    "StepPrediction",
    "_LayerCosts",
    "_layer_costs",
    "_predict",
    "_ring_allreduce",
    "_ring_gather",
    "attention_kernel_share",
    "fit_calibration",
    "predict_step",
    "prediction_regimes",
]


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
