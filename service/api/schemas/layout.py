"""The parallel layout of the performance endpoints.

One layout shape (:class:`LayoutIn`) serves ``/v1/memory``, ``/v1/predictions/step``, ``/v1/plans/parallelism``
(filled in, as each candidate's ``layout``) and the ``predict`` form of ``/v1/estimates/training``;
:class:`LayoutRead` has the same fields with the defaults resolved, so an answer's layout can be posted
back as is. The field names are those of :class:`service.domain.memory.ParallelLayout`, so a domain
error's ``field`` is re-rooted to ``body.layout.<name>``.
"""

from __future__ import annotations

from pydantic import (
    ConfigDict,
    Field,
    model_validator,
)

from service.api.schemas.common import (
    ApiModel,
    RecomputeName,
)
from service.api.schemas.fields import DataParallelSize, MicroBatch, ParallelSize, ZeroStage, ZeroStageAlias
from service.api.schemas.schedules import field_error


class LayoutIn(ApiModel):
    """How the job is split over devices (devices = tp·pp·dp·cp; ``ep`` is carved out of dp·cp), the
    micro-batch and the memory/time options that go with it.

    ``zero_stage``: 0 (DDP, FSDP ``no_shard``), 1 (optimizer state sharded: DeepSpeed ZeRO-1, Megatron's
    distributed optimizer), 2 (also gradients: FSDP ``shard_grad_op``), 3 (also weights: FSDP
    ``full_shard``); the FSDP names are accepted as aliases and answered as the stage number.
    ``distributed_optimizer`` is Megatron-LM's ``--use-distributed-optimizer``: ZeRO-1 with fp32 gradient
    accumulation (6 + 12/d bytes per parameter).
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
