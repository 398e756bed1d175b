"""Schemas of ``POST /v1/predictions/step``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    model_validator,
)

from service.api.schemas.calibration import CALIBRATION_FIELD, CalibrationRead, CalibrationRequest
from service.api.schemas.cluster import ClusterIn, ClusterRead
from service.api.schemas.common import (
    SEQ_LEN_FIELD,
    ApiModel,
    ConventionName,
    ModelRef,
    PositiveInt,
    PrecisionName,
)
from service.api.schemas.fields import (
    CONVENTION_FIELD,
    DROPOUT_FIELD,
    MAX_GLOBAL_BATCH_SEQUENCES,
    OPTIMIZER_FIELD,
    PRECISION_FIELD,
    GlobalBatchSequences,
    OptimizerName,
    field_error,
)
from service.api.schemas.layout import LayoutIn, LayoutRead
from service.api.schemas.memory import MemorySummaryRead
from service.api.schemas.rules import RULE_IN_DESCRIPTION, exactly_one, states

BreakdownComponentName = Literal[
    "ideal_matmul",
    "matmul_inefficiency",
    "memory_bound",
    "exposed_tensor_parallel_comm",
    "exposed_context_parallel_comm",
    "exposed_expert_parallel_comm",
    "exposed_data_parallel_comm",
    "exposed_pipeline_p2p",
    "pipeline_bubble",
    "recompute",
    "optimizer_step",
    "kernel_overhead",
]

#: The regimes are the keys of service.domain.performance.REGIME_MAE_MFU_POINTS (a plain string, so a
#: regime the validation table gains later is answered, not refused).
REGIMES_FIELD: Any = Field(
    description="the regimes of the validation table (benchmarks/validate_predictions.py, published runs) "
    "this prediction falls in: all (every prediction), a100 / hopper / blackwell, fp8, fsdp-zero3, "
    "zero3-fixed-global-batch, long-context, megatron-tp-pp, moe-ep, uneven-pp"
)
UNCERTAINTY_FIELD: Any = Field(
    description="stated uncertainty band in MFU percentage points (2.4 = ±2.4 points, i.e. ±0.024 of mfu): "
    "the largest mean absolute MFU error among this prediction's regimes on the published runs; null when "
    "not known"
)


@states(exactly_one("global_batch_sequences", "global_batch_tokens"))
class BatchFields(ApiModel):
    """Exactly one of ``global_batch_sequences`` or ``global_batch_tokens`` (a multiple of seq_len)."""

    seq_len_tokens: PositiveInt = SEQ_LEN_FIELD
    global_batch_sequences: GlobalBatchSequences | None = Field(
        default=None, description="sequences per step"
    )
    global_batch_tokens: PositiveInt | None = Field(
        default=None, description="tokens per step (a multiple of seq_len_tokens)"
    )

    @model_validator(mode="after")
    def _one_batch(self) -> BatchFields:
        if (self.global_batch_sequences is None) == (self.global_batch_tokens is None):
            raise ValueError("give exactly one of global_batch_sequences or global_batch_tokens")
        if self.global_batch_tokens is not None:
            if self.global_batch_tokens % self.seq_len_tokens:
                raise field_error(
                    "global_batch_tokens",
                    f"global_batch_tokens ({self.global_batch_tokens}) must be a multiple of seq_len_tokens "
                    f"({self.seq_len_tokens})",
                    code=RULE_IN_DESCRIPTION,
                )
            if self.global_batch_tokens // self.seq_len_tokens > MAX_GLOBAL_BATCH_SEQUENCES:
                raise field_error(
                    "global_batch_tokens",
                    f"global_batch_tokens / seq_len_tokens must be at most {MAX_GLOBAL_BATCH_SEQUENCES} sequences",
                    code=RULE_IN_DESCRIPTION,
                )
        return self

    @property
    def batch_sequences(self) -> int:
        if self.global_batch_sequences is not None:
            return self.global_batch_sequences
        assert self.global_batch_tokens is not None
        return self.global_batch_tokens // self.seq_len_tokens

    @property
    def batch_field(self) -> str:
        """The request field the global batch came from."""
        return (
            "body.global_batch_sequences"
            if self.global_batch_sequences is not None
            else "body.global_batch_tokens"
        )


class StepPredictionRequest(BatchFields):
    """A model, a cluster, a layout and a global batch → the predicted step."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": {"preset": "llama3-70b"},
                    "seq_len_tokens": 8192,
                    "cluster": {"accelerator": "h100-sxm", "device_count": 1024},
                    "layout": {"tp": 8, "pp": 4, "dp": 32, "virtual_stages": 5, "micro_batch_sequences": 1,
                               "distributed_optimizer": True},
                    "global_batch_sequences": 512,
                    "precision": "bf16",
                    "convention": "palm",
                },
                {
                    "model": {"preset": "llama3-8b"},
                    "seq_len_tokens": 8192,
                    "cluster": {"accelerator": "h100-sxm", "device_count": 64, "devices_per_node": 8,
                                "inter_node_bandwidth_bytes_per_second": 50e9},
                    "layout": {"tp": 1, "dp": 64, "micro_batch_sequences": 1, "zero_stage": 1},
                    "global_batch_tokens": 4_194_304,
                    "calibration": {"matmul_efficiency_scale": 1.05},
                },
                {
                    "model": {"preset": "llama3-8b"},
                    "seq_len_tokens": 8192,
                    "cluster": {"accelerator": "h100-sxm", "device_count": 64},
                    "layout": {"tp": 2, "dp": 32, "micro_batch_sequences": 2, "zero_stage": 1},
                    "global_batch_sequences": 512,
                    "calibration": "fleet",
                },
            ]
        }
    )  # fmt: skip

    model: ModelRef
    cluster: ClusterIn
    layout: LayoutIn = Field(description="must multiply to the cluster: tp·pp·dp·cp = device_count")
    precision: PrecisionName = PRECISION_FIELD
    optimizer: OptimizerName = OPTIMIZER_FIELD
    convention: ConventionName = CONVENTION_FIELD
    dropout: bool = DROPOUT_FIELD
    calibration: CalibrationRequest | None = CALIBRATION_FIELD


class BreakdownItemRead(ApiModel):
    component: BreakdownComponentName
    seconds: float
    fraction_of_step: float
    description: str


class MfuCostRead(ApiModel):
    component: BreakdownComponentName
    mfu_cost: float = Field(
        description="fraction of the dense peak this component costs (0.05 = 5 MFU points)"
    )


class MfuGapRead(ApiModel):
    """Where the MFU points go. ``useful_mfu`` = ideal matmul seconds / step time: the useful FLOPs (causal
    attention, no recomputation; the ``megatron_causal`` count) at the dense peak. Each other component
    costs its seconds / step time, so ``useful_mfu`` + Σ ``costs`` = 1 exactly. The MFU under the
    requested convention differs from ``useful_mfu`` only by how that convention counts FLOPs:
    ``mfu`` = ``useful_mfu`` + ``convention_difference`` (palm counts non-causal attention and no logits)."""

    useful_mfu: float
    mfu: float
    convention: ConventionName
    convention_difference: float
    total_cost: float = Field(description="1 − useful_mfu = Σ costs")
    costs: list[MfuCostRead] = Field(description="largest first; components that cost nothing left out")


class StepPredictionRead(ApiModel):
    model: str
    seq_len_tokens: int
    global_batch_sequences: int
    global_batch_tokens: int
    micro_batches_per_step: int
    precision: PrecisionName
    convention: ConventionName
    cluster: ClusterRead
    layout: LayoutRead
    calibration: CalibrationRead
    step_time_seconds: float
    tokens_per_second: float = Field(description="global")
    tokens_per_second_per_device: float
    mfu: float = Field(description="model FLOPs utilization under `convention` (excludes recomputation)")
    hfu: float = Field(description="hardware FLOPs utilization (includes recomputation)")
    achieved_tflops_per_device: float = Field(description="model TFLOP/s per device under `convention`")
    model_flops_per_step: float
    hardware_flops_per_step: float
    bubble_fraction: float = Field(description="(pp − 1)/(v·m) of the ideal time")
    tensor_parallel_comm_seconds: float = Field(description="per step, before overlap")
    data_parallel_comm_seconds: float = Field(description="per step, before overlap")
    pipeline_p2p_seconds: float = Field(description="per step, before overlap")
    fits: bool | None = Field(description="the layout fits the device memory (predicted anyway when not)")
    memory: MemorySummaryRead
    breakdown: list[BreakdownItemRead] = Field(
        description="seconds per step by cause; the seconds sum to step_time_seconds"
    )
    mfu_gap: MfuGapRead
    reading: str = Field(description="the largest loss, in one line")
    regimes: list[str] = REGIMES_FIELD
    uncertainty_mfu_points: float | None = UNCERTAINTY_FIELD
    assumptions: list[str]
    warnings: list[str]
