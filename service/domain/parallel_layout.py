"""The parallel layout (tp, pp, dp, cp, ep, interleaving, ZeRO, checkpointing and kernel options), its
validation, the model-dependent divisibility rules and the layers per pipeline stage (split from
:mod:`service.domain.memory`, which re-exports these names)."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal, get_args

from service.domain.errors import InvalidInput
from service.domain.flops import RECOMPUTE_MODES, Recompute
from service.domain.models import ModelSpec

ZERO_STAGES: tuple[int, ...] = (0, 1, 2, 3)
SelectivePolicy = Literal["attention_core", "per_op"]
AttentionKernel = Literal["best", "flash2", "triton"]
ATTENTION_KERNELS: tuple[str, ...] = get_args(AttentionKernel)
GatherUnit = Literal["layer", "module"]
GATHER_UNITS: tuple[str, ...] = get_args(GatherUnit)
SELECTIVE_POLICIES: tuple[str, ...] = get_args(SelectivePolicy)


@dataclass(frozen=True, slots=True)
class ParallelLayout:
    """How a job is split over devices, and the memory/time options that go with it.

    ``tp`` tensor, ``pp`` pipeline (``virtual_stages`` = interleaved chunks per device, Megatron's v),
    ``dp`` data, ``cp`` context, ``ep`` expert parallel (carved out of ``dp·cp``); devices =
    tp·pp·dp·cp. ``micro_batch_sequences`` sequences per micro-batch.

    Uneven pipelines: ``first_stage_layers``/``last_stage_layers`` pin the transformer layers on the first
    and last stage (Megatron-LM ``--decoder-first/last-pipeline-num-layers``); the rest spread over the
    middle stages (:func:`stage_layer_counts`). Checkpointing: ``recompute="full"`` with
    ``recompute_every_k_layers`` k checkpoints one layer in k (torchtitan ``selective_ac_option=k``);
    ``recompute="selective"`` with ``selective_policy`` "attention_core" (Korthikanti et al. 2022) or
    "per_op" (torchtitan per-op SAC: saves every other matmul output and the attention output, recomputes
    the rest). ZeRO-3: ``reshard_after_forward`` (FSDP; False = keep the gathered layer for backward, ZeRO++
    style), ``regather_for_recompute`` (DeepSpeed ZeRO-3 gathers a checkpointed layer's weights again for
    its recomputation), ``shard_group_size`` hybrid sharding (HSDP: shard within groups of that many ranks,
    replicate across them). MoE: ``overlap_ep_comm`` hides the all-to-all behind the other micro-batch's
    compute (DeepSeek-V3 DualPipe), ``expert_load_imbalance`` (≥ 1) scales the busiest expert's tokens.
    ``attention_kernel`` "best" (the family's fastest fused attention: FlashAttention-2 on Ampere,
    cuDNN / FlashAttention-3 on Hopper and later), "flash2" (FlashAttention-2, PyTorch SDPA's flash
    backend) or "triton" (Triton's fused attention). ``fused_elementwise`` False: norms, activation
    functions and RoPE run as eager PyTorch kernels (no torch.compile, no fused kernels).
    ``zero3_gather_unit``: ZeRO-3 gathers a whole transformer layer at a time ("layer": FSDP wrapping
    each block) or one weight matrix ("module": DeepSpeed's per-submodule fetch). ``pooled_nic_collectives``: a data-parallel ring pools the NICs of its ranks on a node
    (NCCL rail-aligned rings); False: each rank's share crosses its own NIC (DeepSpeed ZeRO-3, 2021). ``zero_stage`` 0-3 (3 = FSDP
    FULL_SHARD, 2 = SHARD_GRAD_OP; 1 with ``fp32_grad_accumulation`` = Megatron's distributed
    optimizer). The ``overlap_*`` flags say whether that communication runs behind compute
    (Megatron ``--tp-comm-overlap``, ``--overlap-grad-reduce``/``--overlap-param-gather``, FSDP
    prefetch; p2p sends on their own stream). ``gradient_accumulation_fusion`` (with
    ``fp32_grad_accumulation``): the weight-gradient GEMM accumulates into the fp32 gradient (Megatron-LM
    ``--gradient-accumulation-fusion``); False: a separate add per micro-batch. ``async_tp_backward``:
    the column-parallel layers' backward collectives run behind their gradient GEMMs (Megatron-LM since
    2022); it has no effect with ``overlap_tp_comm``, which hides all tensor-parallel traffic.
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    virtual_stages: int = 1
    micro_batch_sequences: int = 1
    sequence_parallel: bool = False
    zero_stage: int = 0
    recompute: Recompute = "none"
    flash_attention: bool = True
    fp32_grad_accumulation: bool = False
    overlap_tp_comm: bool = False
    overlap_dp_comm: bool = True
    overlap_pp_comm: bool = True
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    recompute_every_k_layers: int = 1
    selective_policy: SelectivePolicy = "attention_core"
    reshard_after_forward: bool = True
    regather_for_recompute: bool = False
    shard_group_size: int | None = None
    overlap_ep_comm: bool = False
    expert_load_imbalance: float = 1.0
    attention_kernel: AttentionKernel = "best"
    pooled_nic_collectives: bool = True
    fused_elementwise: bool = True
    zero3_gather_unit: GatherUnit = "layer"
    gradient_accumulation_fusion: bool = True
    async_tp_backward: bool = False

    def __post_init__(self) -> None:
        validate_layout(self)

    @property
    def shard_degree(self) -> int:
        """Ranks one ZeRO shard group spans: ``dp·cp``, or ``shard_group_size`` under hybrid sharding."""
        full = self.dp * self.cp
        return full if self.shard_group_size is None else min(self.shard_group_size, full)

    @property
    def device_count(self) -> int:
        return self.tp * self.pp * self.dp * self.cp


def _positive_int(value: object, field: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidInput(f"{field} must be a positive integer, got {value!r}.", field=field)


def validate_layout(layout: ParallelLayout) -> None:
    for name in ("tp", "pp", "dp", "cp", "ep", "virtual_stages", "micro_batch_sequences"):
        _positive_int(getattr(layout, name), name)
    if layout.zero_stage not in ZERO_STAGES or isinstance(layout.zero_stage, bool):
        raise InvalidInput(
            f"zero_stage must be 0, 1, 2 or 3 (3 = FSDP full shard), got {layout.zero_stage!r}.",
            field="zero_stage",
        )
    if layout.recompute not in RECOMPUTE_MODES:
        raise InvalidInput(
            f"recompute must be one of {', '.join(RECOMPUTE_MODES)}, got {layout.recompute!r}.",
            field="recompute",
        )
    if layout.virtual_stages > 1 and layout.pp == 1:
        raise InvalidInput(
            "virtual_stages > 1 (interleaving) needs pipeline parallelism: set pp > 1 or virtual_stages 1.",
            field="virtual_stages",
        )
    for name in ("first_stage_layers", "last_stage_layers", "shard_group_size"):
        value = getattr(layout, name)
        if value is not None:
            _positive_int(value, name)
    _positive_int(layout.recompute_every_k_layers, "recompute_every_k_layers")
    if layout.pp == 1 and (layout.first_stage_layers is not None or layout.last_stage_layers is not None):
        raise InvalidInput(
            "first_stage_layers/last_stage_layers need pp > 1; leave them unset for pp = 1.",
            field="first_stage_layers",
        )
    if layout.selective_policy not in SELECTIVE_POLICIES:
        raise InvalidInput(
            f"selective_policy must be one of {', '.join(SELECTIVE_POLICIES)}, got {layout.selective_policy!r}.",
            field="selective_policy",
        )
    if layout.attention_kernel not in ATTENTION_KERNELS:
        raise InvalidInput(
            f"attention_kernel must be one of {', '.join(ATTENTION_KERNELS)}, got {layout.attention_kernel!r}.",
            field="attention_kernel",
        )
    if layout.zero3_gather_unit not in GATHER_UNITS:
        raise InvalidInput(
            f"zero3_gather_unit must be one of {', '.join(GATHER_UNITS)}, got {layout.zero3_gather_unit!r}.",
            field="zero3_gather_unit",
        )
    imb = layout.expert_load_imbalance
    if (
        isinstance(imb, bool)
        or not isinstance(imb, int | float)
        or not math.isfinite(imb)
        or not 1.0 <= imb <= 16.0
    ):
        raise InvalidInput(
            f"expert_load_imbalance must be within [1, 16] (busiest expert's tokens over the mean), got {imb!r}.",
            field="expert_load_imbalance",
        )
    if layout.shard_group_size is not None and (layout.dp * layout.cp) % layout.shard_group_size:
        raise InvalidInput(
            f"shard_group_size ({layout.shard_group_size}) must divide dp·cp ({layout.dp * layout.cp}).",
            field="shard_group_size",
        )
    if (layout.dp * layout.cp) % layout.ep:
        raise InvalidInput(
            f"ep ({layout.ep}) must divide dp·cp ({layout.dp * layout.cp}): expert parallelism is carved "
            "out of the data-parallel ranks.",
            field="ep",
        )
    if layout.sequence_parallel and layout.tp == 1:
        raise InvalidInput(
            "sequence_parallel needs tp > 1; set it false for tp = 1.", field="sequence_parallel"
        )


def interleaving_fits(stage_layers: tuple[int, int, int], pp: int, virtual_stages: int) -> bool:
    """Whether stages of (first, middle, last) transformer layers can each run ``virtual_stages`` model
    chunks. The first and last stage may give one chunk to the embedding or to the logits and loss alone
    (Megatron-LM ``--account-for-embedding-in-pipeline-split`` / ``--account-for-loss-in-pipeline-split``:
    Llama 3.1 405B's 126 layers run on 16 stages with v = 8, 7 layers and the embedding on the first), so
    they need v - 1 layers and the middle stages v."""
    first, middle, last = stage_layers
    if virtual_stages == 1:
        return True
    return pp > 1 and min(first, last) >= virtual_stages - 1 and (pp == 2 or middle >= virtual_stages)


def check_layout_for_model(spec: ModelSpec, seq_len_tokens: int, layout: ParallelLayout) -> None:
    """The divisibility rules the layout must meet for this model (Megatron-LM's argument checks)."""
    _positive_int(seq_len_tokens, "seq_len_tokens")
    if layout.pp > spec.n_layers:
        raise InvalidInput(f"pp ({layout.pp}) exceeds the model's {spec.n_layers} layers.", field="pp")
    first, middle, last = stage_layer_counts(
        spec.n_layers, layout.pp, layout.first_stage_layers, layout.last_stage_layers
    )
    v = layout.virtual_stages
    if not interleaving_fits((first, middle, last), layout.pp, v):
        raise InvalidInput(
            f"every stage needs at least virtual_stages ({v}) layers for the interleaved schedule (the "
            f"first and last {v - 1}, one chunk holding the embedding or the loss); the stages have "
            f"{first} (first), {middle} (middle) and {last} (last).",
            field="virtual_stages",
        )
    if seq_len_tokens % layout.cp:
        raise InvalidInput(
            f"seq_len_tokens ({seq_len_tokens}) must be divisible by cp ({layout.cp}).", field="cp"
        )
    if spec.n_experts and spec.n_experts % layout.ep:
        raise InvalidInput(f"ep ({layout.ep}) must divide n_experts ({spec.n_experts}).", field="ep")
    if not spec.n_experts and layout.ep > 1:
        raise InvalidInput("ep > 1 needs an MoE model (n_experts > 0).", field="ep")


# --------------------------------------------------------------------------------------------------
# Parameters per stage


@functools.lru_cache(maxsize=8192)
def stage_layer_counts(
    n_layers: int, pp: int, first_stage_layers: int | None = None, last_stage_layers: int | None = None
) -> tuple[int, int, int]:
    """Transformer layers on the (first, fullest middle, last) pipeline stage.

    Pinned counts are used as given (Megatron-LM ``--decoder-first/last-pipeline-num-layers``); the
    rest of the layers spread over the middle stages, the extra ones on the earliest. Unpinned: an even
    split when ``pp`` divides ``n_layers``, otherwise the remainder goes to the middle stages first, so
    the stages that also carry the embedding and the logits get the fewer layers (Llama 3 405B: 126
    layers on 16 stages, 7 on the first and last; torchtitan and DeepSpeed's parameter-balanced
    partitions do the same). With pp = 1 all three are ``n_layers``. Raises InvalidInput when the
    pinned counts leave a stage without a layer.
    """
    if pp == 1:
        return n_layers, n_layers, n_layers
    base, rem = divmod(n_layers, pp)
    middles = pp - 2
    first = first_stage_layers
    last = last_stage_layers
    if first is None and last is None:
        extra_middle = min(rem, middles)
        rem -= extra_middle
        first = base + (1 if rem > 0 else 0)
        last = base + (1 if rem > 1 else 0)
    elif first is None:
        first = (n_layers - (last or 0)) // (pp - 1)
    elif last is None:
        last = (n_layers - first) // (pp - 1)
    assert first is not None and last is not None
    rest = n_layers - first - last
    if first < 1 or last < 1 or rest < middles or (middles == 0 and rest != 0):
        raise InvalidInput(
            f"first_stage_layers ({first}) and last_stage_layers ({last}) must leave at least one of the "
            f"{n_layers} layers for each of the {middles} middle stages (and none over with pp = 2).",
            field="first_stage_layers",
        )
    middle = -(-rest // middles) if middles else max(first, last)
    return first, middle, last


# --------------------------------------------------------------------------------------------------
# The layout as the API names it: one mapping for a request's ``layout`` and a run's ``parallelism``

#: PyTorch FSDP's ShardingStrategy names and the ZeRO stage each one is (torch.distributed.fsdp:
#: NO_SHARD replicates like DDP, SHARD_GRAD_OP shards gradients and optimizer state, FULL_SHARD also the
#: weights; Rajbhandari et al. 2020 number the same three steps ZeRO-1/2/3, NO_SHARD being stage 0).
FSDP_ZERO_STAGES: dict[str, int] = {"no_shard": 0, "shard_grad_op": 2, "full_shard": 3}


def layout_from_knobs(knobs: Mapping[str, Any]) -> ParallelLayout:
    """The domain layout of the API's layout knobs (a request's ``layout``, a run's ``parallelism``):
    an FSDP sharding name is its ZeRO stage; ``distributed_optimizer`` (Megatron-LM's
    ``--use-distributed-optimizer``) is ZeRO-1 with fp32 gradient accumulation; unset
    ``sequence_parallel`` is on whenever tp > 1 (Megatron-LM's recommended setting, Korthikanti et al.
    2022) and unset ``fp32_grad_accumulation`` follows the distributed optimizer. Other knobs left out
    take :class:`ParallelLayout`'s defaults."""
    given = {name: value for name, value in knobs.items() if value is not None}
    distributed_optimizer = bool(given.pop("distributed_optimizer", False))
    zero_stage = given.pop("zero_stage", 0)
    if isinstance(zero_stage, str):
        zero_stage = FSDP_ZERO_STAGES.get(zero_stage, zero_stage)
    if distributed_optimizer:
        zero_stage = 1
    given.setdefault("fp32_grad_accumulation", distributed_optimizer)
    given.setdefault("sequence_parallel", given.get("tp", 1) > 1)
    return ParallelLayout(**given, zero_stage=zero_stage)


def layout_knobs(layout: ParallelLayout) -> dict[str, Any]:
    """The API's knobs of a domain layout, every one resolved (the inverse of :func:`layout_from_knobs`):
    ``distributed_optimizer`` is true exactly for ZeRO-1 with fp32 gradients, which is what it is."""
    knobs = {f.name: getattr(layout, f.name) for f in fields(ParallelLayout)}
    knobs["distributed_optimizer"] = layout.zero_stage == 1 and layout.fp32_grad_accumulation
    return knobs


def with_current_names(knobs: Mapping[str, Any]) -> dict[str, Any]:
    """A run layout in today's knob names. Until 2026-12 a run's ``parallelism`` had names of its own:
    ``virtual_pipeline_stages`` (null for 1) for ``virtual_stages``, and ``fsdp: true``, which made a
    ZeRO stage of 0 stage 3 (FSDP's default FULL_SHARD) and left any other stage as given. Old clients
    still send them and rows stored before then hold them."""
    current = {
        name: value for name, value in knobs.items() if name not in ("virtual_pipeline_stages", "fsdp")
    }
    if knobs.get("virtual_pipeline_stages") is not None:
        current["virtual_stages"] = knobs["virtual_pipeline_stages"]
    if knobs.get("fsdp") and current.get("zero_stage") in (None, 0):
        current["zero_stage"] = 3
    return current


def stored_layout_knobs(stored: Mapping[str, Any]) -> dict[str, Any]:
    """Every knob of a run's stored ``parallelism``, in today's names. Rows written before the runs took
    the performance endpoints' layout hold eleven knobs (tp, pp, dp, cp, ep, micro-batch, interleaving,
    sequence parallelism, ZeRO stage, FSDP, recompute); the others read as their defaults, which is
    what those runs were predicted with. A micro-batch not recorded is unknown (None)."""
    return _STORED_DEFAULTS | with_current_names(stored)


#: What a stored run's layout reads as where it says nothing: the domain's defaults, the micro-batch unknown.
_STORED_DEFAULTS = layout_knobs(ParallelLayout()) | {"micro_batch_sequences": None}
