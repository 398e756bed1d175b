"""Schemas of ``POST /v1/plans/parallelism``."""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    ConfigDict,
    Field,
    model_validator,
)

from service.api.schemas.calibration import CALIBRATION_FIELD, CalibrationRead, CalibrationRequest
from service.api.schemas.cluster import ClusterIn, ClusterRead
from service.api.schemas.common import (
    ApiModel,
    ConventionName,
    ModelRef,
    PrecisionName,
    RecomputeName,
)
from service.api.schemas.fields import (
    CONVENTION_FIELD,
    DROPOUT_FIELD,
    OPTIMIZER_FIELD,
    PRECISION_FIELD,
    AttentionKernelName,
    DataParallelSize,
    ExpertLoadImbalance,
    GatherUnitName,
    MicroBatch,
    OptimizerName,
    ParallelSize,
    SelectivePolicyName,
    ZeroStage,
    field_error,
)
from service.api.schemas.layout import LayoutRead
from service.api.schemas.predictions import (
    REGIMES_FIELD,
    UNCERTAINTY_FIELD,
    BatchFields,
    BreakdownComponentName,
)
from service.api.schemas.rules import RULE_IN_DESCRIPTION, given, implies, inside, states


@states(
    implies(
        {"allOf": [{"anyOf": [given("first_stage_layers"), given("last_stage_layers")]}, given("pp_values")]},
        inside("pp_values", {"contains": {"minimum": 2}}),
    )
)
class PlanConstraintsIn(ApiModel):
    """What the search may vary (omitted: the model and the cluster decide)."""

    max_tp: ParallelSize | None = Field(default=None, description="largest tensor-parallel size")
    tp_within_node: bool = Field(default=True, description="keep tp ≤ devices_per_node (NVLink only)")
    tp_values: list[ParallelSize] | None = Field(default=None, max_length=64, description="pin tp to these")
    pp_values: list[ParallelSize] | None = Field(default=None, max_length=64, description="pin pp to these")
    dp_values: list[DataParallelSize] | None = Field(
        default=None, max_length=64, description="pin dp to these"
    )
    cp_values: list[ParallelSize] = Field(default=[1], min_length=1, max_length=16)
    ep_values: list[ParallelSize] = Field(default=[1], min_length=1, max_length=16)
    recompute_modes: list[RecomputeName] = Field(
        default=["none", "selective", "full"], min_length=1, max_length=3
    )
    zero_stages: list[ZeroStage] = Field(default=[0, 1, 2, 3], min_length=1, max_length=4)
    max_virtual_stages: Annotated[int, Field(ge=1, le=64)] = Field(
        default=8, description="interleaving: most chunks per device (1 = no interleaving)"
    )
    min_micro_batch_sequences: MicroBatch = 1
    max_micro_batch_sequences: MicroBatch | None = Field(
        default=None, description="at least min_micro_batch_sequences"
    )
    sequence_parallel: bool | None = Field(default=None, description="default: on whenever tp > 1")
    flash_attention: bool = True
    fp32_grad_accumulation: bool = False
    overlap_tp_comm: bool = False
    overlap_dp_comm: bool = True
    overlap_pp_comm: bool = True
    max_results: Annotated[int, Field(ge=1, le=200)] = Field(default=20, description="candidates returned")
    recompute_every_k_values: list[ParallelSize] = Field(
        default=[1],
        min_length=1,
        max_length=16,
        description="with recompute full: the checkpoint intervals to try (k = one layer in k checkpointed, "
        "torchtitan selective_ac_option; layout.recompute_every_k_layers); [1] = every layer",
    )
    selective_policies: list[SelectivePolicyName] = Field(
        default=["attention_core"],
        min_length=1,
        max_length=2,
        description="with recompute selective: attention_core (Korthikanti et al. 2022) and/or per_op "
        "(torchtitan per-op selective checkpointing); layout.selective_policy",
    )
    virtual_stage_values: list[ParallelSize] | None = Field(
        default=None,
        max_length=64,
        description="pin the interleaving (Megatron's v) to these; default: every v up to max_virtual_stages "
        "that divides the layers of a stage",
    )
    first_stage_layers: ParallelSize | None = Field(
        default=None,
        description="pin the layers of the first pipeline stage for every pp > 1 (Megatron-LM "
        "--decoder-first-pipeline-num-layers); default: an even split, the remainder on the middle stages",
    )
    last_stage_layers: ParallelSize | None = Field(
        default=None,
        description="pin the layers of the last pipeline stage for every pp > 1 (Megatron-LM "
        "--decoder-last-pipeline-num-layers)",
    )
    shard_group_sizes: list[DataParallelSize | None] = Field(
        default=[None],
        min_length=1,
        max_length=16,
        description="hybrid sharding (HSDP) group sizes to try with ZeRO ≥ 1; null = shard over all of dp·cp. "
        "A size is tried only where it divides dp·cp and is smaller than it (e.g. [null, 8]: full sharding "
        "and sharding within 8-GPU nodes)",
    )
    reshard_after_forward: bool = Field(
        default=True, description="ZeRO-3: gather weights again in backward (FSDP reshard_after_forward)"
    )
    regather_for_recompute: bool = Field(
        default=False, description="ZeRO-3: gather again for recomputation (DeepSpeed ZeRO-3)"
    )
    zero3_gather_unit: GatherUnitName = Field(
        default="layer", description="ZeRO-3 gathers per layer (FSDP) or per module (DeepSpeed)"
    )
    pooled_nic_collectives: bool = Field(
        default=True, description="data-parallel rings pool a node's NICs (NCCL rail-aligned rings)"
    )
    overlap_ep_comm: bool = Field(
        default=False, description="MoE all-to-all behind the other micro-batch's compute (DualPipe-style)"
    )
    expert_load_imbalance: ExpertLoadImbalance = Field(
        default=1.0, description="MoE: the busiest expert's tokens over the mean"
    )
    attention_kernel: AttentionKernelName = Field(
        default="best", description="fused attention kernel: best, flash2 or triton (as in layout)"
    )
    fused_elementwise: bool = Field(
        default=True, description="fused norm/activation/RoPE kernels; false: eager PyTorch"
    )
    gradient_accumulation_fusion: bool = Field(
        default=True,
        description="fp32 gradient accumulation fused into the weight-gradient GEMM (as in layout)",
    )
    async_tp_backward: bool = Field(
        default=False,
        description="column-parallel backward collectives behind the gradient GEMMs (as in layout)",
    )

    @model_validator(mode="after")
    def _micro_batch_range(self) -> PlanConstraintsIn:
        if (
            self.max_micro_batch_sequences is not None
            and self.max_micro_batch_sequences < self.min_micro_batch_sequences
        ):
            raise field_error(
                "max_micro_batch_sequences",
                "max_micro_batch_sequences must be ≥ min_micro_batch_sequences",
                code=RULE_IN_DESCRIPTION,
            )
        return self

    @model_validator(mode="after")
    def _stage_layers_need_pipeline(self) -> PlanConstraintsIn:
        pinned = self.first_stage_layers is not None or self.last_stage_layers is not None
        if pinned and self.pp_values is not None and all(p == 1 for p in self.pp_values):
            raise field_error(
                "first_stage_layers",
                "first_stage_layers/last_stage_layers need pipeline parallelism: allow pp > 1 in pp_values or "
                "leave them unset",
            )
        return self


class PlanRequest(BatchFields):
    """A model, a cluster and a global batch → every layout that fits, fastest first."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": {"preset": "llama3-70b"},
                    "seq_len_tokens": 8192,
                    "cluster": {"accelerator": "h100-sxm", "device_count": 1024},
                    "global_batch_sequences": 2048,
                    "precision": "bf16",
                    "convention": "palm",
                },
                {
                    "model": {"preset": "llama3-8b"},
                    "seq_len_tokens": 4096,
                    "cluster": {"accelerator": "a100-sxm4-80gb", "device_count": 64,
                                "inter_node_bandwidth_bytes_per_second": 25e9},
                    "global_batch_tokens": 4_194_304,
                    "constraints": {"max_tp": 4, "recompute_modes": ["none", "selective"], "zero_stages": [1, 3],
                                    "max_results": 10},
                },
            ]
        }
    )  # fmt: skip

    model: ModelRef
    cluster: ClusterIn
    precision: PrecisionName = PRECISION_FIELD
    optimizer: OptimizerName = OPTIMIZER_FIELD
    convention: ConventionName = CONVENTION_FIELD
    dropout: bool = DROPOUT_FIELD
    calibration: CalibrationRequest | None = CALIBRATION_FIELD
    constraints: PlanConstraintsIn = Field(default_factory=PlanConstraintsIn)


class PlanCandidateRead(ApiModel):
    rank: int = Field(description="1 = fastest")
    layout: LayoutRead
    step_time_seconds: float
    tokens_per_second: float
    tokens_per_second_per_device: float
    mfu: float
    hfu: float
    bubble_fraction: float
    memory_per_device_bytes: float
    memory_per_device_gib: float
    headroom_bytes: float | None
    fits: bool | None
    largest_loss: BreakdownComponentName = Field(description="the breakdown component that costs most time")
    largest_loss_fraction: float
    regimes: list[str] = REGIMES_FIELD
    uncertainty_mfu_points: float | None = UNCERTAINTY_FIELD


class InfeasibleGroupRead(ApiModel):
    reason: str
    count: int
    examples: list[LayoutRead] = Field(description="a few of the layouts dropped (none for shape rules)")


class PlanRead(ApiModel):
    model: str
    seq_len_tokens: int
    global_batch_sequences: int
    global_batch_tokens: int
    precision: PrecisionName
    convention: ConventionName
    cluster: ClusterRead
    calibration: CalibrationRead
    candidates: list[PlanCandidateRead] = Field(description="feasible layouts, fastest first")
    evaluated_count: int
    feasible_count: int
    returned_count: int
    infeasible: list[InfeasibleGroupRead] = Field(description="largest group first")
    elapsed_seconds: float
    candidates_per_second: float
    reading: str
