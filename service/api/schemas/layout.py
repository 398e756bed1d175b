"""The parallel layout of the performance endpoints.

One layout shape (:class:`LayoutIn`) serves ``/v1/memory``, ``/v1/predictions/step``, ``/v1/plans/parallelism``
(filled in, as each candidate's ``layout``) and the ``predict`` form of ``/v1/estimates/training``;
:class:`LayoutRead` has the same fields with the defaults resolved, so an answer's layout can be posted
back as is. The field names are those of :class:`service.domain.memory.ParallelLayout`, so a domain
error's ``field`` is re-rooted to ``body.layout.<name>``.

A run's ``parallelism`` (``POST /v1/runs``) is the same layout (:class:`RunLayoutIn`): ``dp`` may be
left to the device count and the micro-batch left unknown, and the names runs had before
(``virtual_pipeline_stages``, ``fsdp``) are still read. Both go to the domain through one mapping,
:func:`service.domain.parallel_layout.layout_from_knobs`.
"""

from __future__ import annotations

from typing import Any

from pydantic import (
    ConfigDict,
    Field,
    model_validator,
)

from service.api.schemas.common import (
    ApiModel,
    RecomputeName,
)
from service.api.schemas.fields import (
    AttentionKernelName,
    DataParallelSize,
    ExpertLoadImbalance,
    GatherUnitName,
    MicroBatch,
    ParallelSize,
    SelectivePolicyName,
    ZeroStage,
    ZeroStageAlias,
    field_error,
)
from service.api.schemas.rules import (
    RULE_IN_DESCRIPTION,
    equals,
    implies,
    inside,
    needs_at_least,
    not_both,
    states,
)
from service.domain.parallel_layout import with_current_names


@states(
    needs_at_least(("first_stage_layers", "last_stage_layers"), "pp", 2),
    implies(equals("distributed_optimizer", True), inside("zero_stage", {"enum": [0, 1]})),
)
class LayoutIn(ApiModel):
    """How the job is split over devices (devices = tp·pp·dp·cp; ``ep`` is carved out of dp·cp), the
    micro-batch and the memory/time options that go with it.

    ``zero_stage``: 0 (DDP, FSDP ``no_shard``), 1 (optimizer state sharded: DeepSpeed ZeRO-1, Megatron's
    distributed optimizer), 2 (also gradients: FSDP ``shard_grad_op``), 3 (also weights: FSDP
    ``full_shard``); the FSDP names are accepted as aliases and answered as the stage number.
    ``distributed_optimizer`` is Megatron-LM's ``--use-distributed-optimizer``: ZeRO-1 with fp32 gradient
    accumulation (6 + 12/d bytes per parameter).

    Uneven pipelines: ``first_stage_layers`` / ``last_stage_layers`` pin the transformer layers on the first
    and last stage (Megatron-LM ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``);
    the rest spread over the middle stages, and the slowest or fullest stage decides. Left unset, pp need not
    divide the layers: the remainder goes to the middle stages (Llama 3 405B: 126 layers on 16 stages).
    Checkpointing: ``recompute_every_k_layers`` with full recompute, ``selective_policy`` with selective.
    ZeRO-3 / FSDP: ``reshard_after_forward``, ``regather_for_recompute``, ``zero3_gather_unit``, and hybrid
    sharding (HSDP) with ``shard_group_size``.
    """

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"tp": 8, "pp": 4, "dp": 32, "micro_batch_sequences": 1, "virtual_stages": 5,
                 "distributed_optimizer": True, "recompute": "selective"},
            ]
        }
    )  # fmt: skip

    tp: ParallelSize = Field(default=1, description="tensor-parallel size (must divide the attention heads)")
    pp: ParallelSize = Field(default=1, description="pipeline-parallel stages")
    virtual_stages: ParallelSize = Field(
        default=1,
        description="interleaved chunks per device (Megatron's v; 1 = no interleaving; needs pp > 1)",
    )
    dp: DataParallelSize = Field(default=1, description="data-parallel size")
    cp: ParallelSize = Field(default=1, description="context-parallel size (ring attention; divides seq_len)")
    ep: ParallelSize = Field(default=1, description="expert-parallel size (MoE; divides dp·cp and n_experts)")
    micro_batch_sequences: MicroBatch = Field(default=1, description="sequences per micro-batch")
    sequence_parallel: bool | None = Field(
        default=None, description="Megatron sequence parallelism; default: on whenever tp > 1 (needs tp > 1)"
    )
    zero_stage: ZeroStage | ZeroStageAlias = Field(
        default=0,
        description="0-3, or the FSDP names no_shard (0), shard_grad_op (2), full_shard (3)",
    )
    distributed_optimizer: bool = Field(
        default=False,
        description="Megatron-LM's distributed optimizer: ZeRO stage 1 with fp32 gradients (zero_stage 0 or 1)",
    )
    fp32_grad_accumulation: bool | None = Field(
        default=None,
        description="16-bit training keeps fp32 gradients (Megatron main_grad: 18 bytes per parameter with "
        "Adam); default: true with distributed_optimizer, else false",
    )
    recompute: RecomputeName = Field(
        default="none",
        description="activation recomputation: none, selective (attention core; Korthikanti et al. 2022) or "
        "full (every layer's forward)",
    )
    flash_attention: bool = Field(
        default=True, description="fused attention: the s×s score matrix is never stored or written"
    )
    overlap_tp_comm: bool = Field(
        default=False, description="tensor-parallel communication overlapped with GEMMs (TE userbuffers)"
    )
    overlap_dp_comm: bool = Field(
        default=True, description="gradient reduce / parameter gather overlapped with compute"
    )
    overlap_pp_comm: bool = Field(default=True, description="pipeline sends on their own stream")
    first_stage_layers: ParallelSize | None = Field(
        default=None,
        description="transformer layers on the first pipeline stage (Megatron-LM "
        "--decoder-first-pipeline-num-layers; needs pp > 1); default: an even split, the remainder of "
        "n_layers / pp on the middle stages. The first stage also holds the embedding",
    )
    last_stage_layers: ParallelSize | None = Field(
        default=None,
        description="transformer layers on the last pipeline stage (Megatron-LM "
        "--decoder-last-pipeline-num-layers; needs pp > 1); the last stage also holds the logits. "
        "first + last must leave at least one layer per middle stage",
    )
    recompute_every_k_layers: ParallelSize = Field(
        default=1,
        description="with recompute full: checkpoint one transformer layer in k, the others keep their "
        "activations (torchtitan activation_checkpoint selective_ac_option = k); 1 = every layer",
    )
    selective_policy: SelectivePolicyName = Field(
        default="attention_core",
        description="with recompute selective: attention_core (Korthikanti et al. 2022: recompute the "
        "softmax/dropout core, which saves nothing once FlashAttention is on) or per_op (torchtitan per-op "
        "selective checkpointing: keep every other matmul output and the attention output, recompute the rest)",
    )
    reshard_after_forward: bool = Field(
        default=True,
        description="ZeRO-3: free the gathered weights of a layer after its forward and gather them again "
        "in backward (PyTorch FSDP reshard_after_forward); false keeps them for backward (FSDP2 "
        "reshard_after_forward=False, ZeRO++ style): less communication, more memory",
    )
    regather_for_recompute: bool = Field(
        default=False,
        description="ZeRO-3: a checkpointed layer's weights are gathered again for its recomputation "
        "(DeepSpeed ZeRO-3 does; FSDP reuses the backward gather)",
    )
    zero3_gather_unit: GatherUnitName = Field(
        default="layer",
        description="ZeRO-3 gathers a whole transformer layer at a time (layer: FSDP wrapping each block) or "
        "one weight matrix (module: DeepSpeed's per-submodule fetch, its estimator's largest-layer buffer)",
    )
    shard_group_size: DataParallelSize | None = Field(
        default=None,
        description="hybrid sharding (PyTorch HSDP / FSDP HYBRID_SHARD, DeepSpeed ZeRO++ hpZ): ZeRO shards "
        "over groups of this many data-parallel ranks (usually the devices of a node) and replicates across "
        "them; must divide dp·cp; default: shard over all of dp·cp",
    )
    pooled_nic_collectives: bool = Field(
        default=True,
        description="a data-parallel ring pools the NICs of its ranks on a node (NCCL rail-aligned rings); "
        "false: each rank's share crosses its own NIC (DeepSpeed ZeRO-3 as measured in 2021)",
    )
    overlap_ep_comm: bool = Field(
        default=False,
        description="MoE: the expert all-to-all runs behind the other micro-batch's compute (DeepSeek-V3 "
        "DualPipe-style overlap)",
    )
    expert_load_imbalance: ExpertLoadImbalance = Field(
        default=1.0,
        description="MoE: the busiest expert's tokens over the mean (1 = perfectly balanced routing; the "
        "capacity factor bounds it)",
    )
    attention_kernel: AttentionKernelName = Field(
        default="best",
        description="fused attention kernel: best (the family's fastest: FlashAttention-2 on Ampere, cuDNN / "
        "FlashAttention-3 on Hopper and later), flash2 (FlashAttention-2, PyTorch SDPA's flash backend) or "
        "triton (Triton's fused attention)",
    )
    fused_elementwise: bool = Field(
        default=True,
        description="norms, activations and RoPE run as fused kernels (torch.compile, Transformer Engine); "
        "false: eager PyTorch kernels (about three times the element-wise memory traffic)",
    )
    gradient_accumulation_fusion: bool = Field(
        default=True,
        description="with fp32_grad_accumulation: the weight-gradient GEMM accumulates into the fp32 "
        "gradient (Megatron-LM --gradient-accumulation-fusion, on by default since 2022); false: a separate "
        "add of every local gradient after each micro-batch (10 bytes per parameter; Megatron 2021, "
        "Megatron-DeepSpeed)",
    )
    async_tp_backward: bool = Field(
        default=False,
        description="without overlap_tp_comm: the column-parallel layers' backward all-reduce (with "
        "sequence parallelism: reduce-scatter, and the input's second all-gather) runs behind their "
        "weight- and input-gradient GEMMs (Megatron-LM since 2022, CUDA_DEVICE_MAX_CONNECTIONS=1); false: "
        "every tensor-parallel collective blocks",
    )

    @model_validator(mode="after")
    def _stage_layers_need_pipeline(self) -> LayoutIn:
        for name in ("first_stage_layers", "last_stage_layers"):
            if getattr(self, name) is not None and self.pp == 1:
                raise field_error(
                    name, f"{name} needs pipeline parallelism: set pp > 1 or leave {name} unset"
                )
        return self

    @model_validator(mode="after")
    def _shard_group_divides_dp(self) -> LayoutIn:
        if self.shard_group_size is None or self.dp is None:  # a run's dp: checked once resolved
            return self
        ranks = self.dp * self.cp
        if ranks % self.shard_group_size:
            raise field_error(
                "shard_group_size",
                f"shard_group_size ({self.shard_group_size}) must divide dp·cp ({ranks}): hybrid sharding "
                "shards within groups of that many data-parallel ranks and replicates across them",
                code=RULE_IN_DESCRIPTION,
            )
        return self

    @model_validator(mode="after")
    def _distributed_optimizer_is_zero_1(self) -> LayoutIn:
        if self.distributed_optimizer and self.zero_stage not in (0, 1):
            raise field_error(
                "distributed_optimizer",
                "the distributed optimizer is ZeRO stage 1: set zero_stage to 1 (or 0) or distributed_optimizer "
                "false",
            )
        return self


class LayoutRead(ApiModel):
    """The layout used, every default resolved (post it back as ``layout`` to the other endpoints).
    ``zero_stage`` is the stage number (FSDP names resolved); ``distributed_optimizer`` is true exactly for
    ZeRO-1 with fp32 gradients, which is what Megatron's distributed optimizer is."""

    tp: int
    pp: int
    virtual_stages: int
    dp: int
    cp: int
    ep: int
    micro_batch_sequences: int
    sequence_parallel: bool
    zero_stage: int
    distributed_optimizer: bool
    fp32_grad_accumulation: bool
    recompute: RecomputeName
    flash_attention: bool
    overlap_tp_comm: bool
    overlap_dp_comm: bool
    overlap_pp_comm: bool
    first_stage_layers: int | None = Field(
        description="layers pinned on the first stage; null: the default split (even, the remainder on the middle stages)"
    )
    last_stage_layers: int | None = Field(
        description="layers pinned on the last stage; null: the default split"
    )
    recompute_every_k_layers: int
    selective_policy: SelectivePolicyName
    reshard_after_forward: bool
    regather_for_recompute: bool
    zero3_gather_unit: GatherUnitName
    shard_group_size: int | None = Field(description="hybrid-sharding group; null: shard over all of dp·cp")
    pooled_nic_collectives: bool
    overlap_ep_comm: bool
    expert_load_imbalance: float
    attention_kernel: AttentionKernelName
    fused_elementwise: bool
    gradient_accumulation_fusion: bool
    async_tp_backward: bool


@states(
    not_both("virtual_pipeline_stages", "virtual_stages"),
    implies(
        {
            "required": ["virtual_pipeline_stages"],
            "properties": {"virtual_pipeline_stages": {"type": "integer", "minimum": 2}},
        },
        {"required": ["pp"], "properties": {"pp": {"minimum": 2}}},
    ),
)
class RunLayoutIn(LayoutIn):
    """A run's layout: the knobs of the performance endpoints' ``layout``, so a run's ``parallelism``
    can be posted to ``/v1/predictions/step`` or ``/v1/memory`` as it is, and back. ``dp`` may be omitted
    (devices ÷ tp·pp·cp) and ``micro_batch_sequences`` left unknown (predictions of the run then say
    it is missing). ``virtual_pipeline_stages`` and ``fsdp`` are the names runs had before; they are
    read as ``virtual_stages`` and as ``zero_stage`` 3 (when no other stage is given) and answered in
    today's names."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"tp": 2, "pp": 1, "micro_batch_sequences": 2, "zero_stage": 1}]}
    )

    dp: DataParallelSize | None = Field(  # type: ignore[assignment]
        default=None, description="data-parallel size (default: what the devices leave, devices ÷ tp·pp·cp)"
    )
    micro_batch_sequences: MicroBatch | None = Field(  # type: ignore[assignment]
        default=None, description="sequences per micro-batch (needed to predict the run's step)"
    )
    virtual_pipeline_stages: ParallelSize | None = Field(
        default=None,
        description="deprecated: the old name of virtual_stages (give one of the two)",
        json_schema_extra={"deprecated": True},
    )
    fsdp: bool | None = Field(
        default=None,
        description="deprecated: true is PyTorch FSDP's FULL_SHARD, zero_stage 3 when zero_stage is 0 or "
        "absent; say zero_stage full_shard, shard_grad_op or no_shard instead",
        json_schema_extra={"deprecated": True},
    )

    @model_validator(mode="after")
    def _old_names(self) -> RunLayoutIn:
        if self.virtual_pipeline_stages is not None and "virtual_stages" in self.model_fields_set:
            raise field_error(
                "virtual_pipeline_stages",
                "virtual_pipeline_stages is the old name of virtual_stages: give only virtual_stages",
            )
        if self.virtual_pipeline_stages is not None and self.virtual_pipeline_stages > 1 and self.pp == 1:
            raise field_error(
                "virtual_pipeline_stages", "virtual_pipeline_stages > 1 needs pipeline parallelism (pp > 1)"
            )
        return self

    def knobs(self) -> dict[str, Any]:
        """The knobs in today's names (the old ones folded in); null ones (dp, the micro-batch) absent."""
        return with_current_names(self.model_dump(exclude_none=True))


class RunLayoutRead(LayoutRead):
    """A run's layout as stored, every default resolved, in the knob names of ``layout`` elsewhere.
    Runs recorded before their layout took these names (2026-12) show the knobs they did not record at
    their defaults."""

    micro_batch_sequences: int | None = Field(  # type: ignore[assignment]
        description="sequences per micro-batch; null: the run did not say"
    )
