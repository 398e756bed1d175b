"""Schemas of ``POST /v1/memory``."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    ConfigDict,
    Field,
    model_validator,
)

from service.api.schemas.cluster import AcceleratorIn, AcceleratorUsedRead
from service.api.schemas.common import (
    SEQ_LEN_FIELD,
    ApiModel,
    ModelRef,
    PositiveInt,
    PrecisionName,
)
from service.api.schemas.fields import (
    DROPOUT_FIELD,
    OPTIMIZER_FIELD,
    PRECISION_FIELD,
    GlobalBatchSequences,
    OptimizerName,
    field_error,
)
from service.api.schemas.layout import LayoutIn, LayoutRead
from service.api.schemas.rules import given, implies, inside, states


class OptimizerRead(ApiModel):
    """Bytes per parameter before any sharding (the optimizer's own footprint)."""

    requested: OptimizerName
    name: str = Field(description="the variant used (adam → adam_mixed for 16-bit runs, adam_fp32 for fp32)")
    weight_bytes_per_parameter: float
    gradient_bytes_per_parameter: float
    optimizer_state_bytes_per_parameter: float
    total_bytes_per_parameter: float
    source: str


@states(inside("hardware", implies(given("custom"), inside("custom", given("memory_bytes")))))
class MemoryRequest(ApiModel):
    """Memory per device for a model, a layout and a micro-batch; with ``hardware``, whether it fits."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": {"preset": "llama3-70b"},
                    "seq_len_tokens": 8192,
                    "layout": {"tp": 8, "pp": 4, "dp": 32, "micro_batch_sequences": 1,
                               "distributed_optimizer": True, "recompute": "selective"},
                    "precision": "bf16",
                    "hardware": {"accelerator": "h100-sxm"},
                },
                {
                    "model": {"preset": "llama3-8b"},
                    "seq_len_tokens": 4096,
                    "layout": {"dp": 64, "micro_batch_sequences": 2, "zero_stage": "full_shard"},
                    "optimizer": "adam",
                    "hardware": {"accelerator": "NVIDIA A100-SXM4-80GB"},
                },
                {
                    "model": {"preset": "llama3-8b"},
                    "seq_len_tokens": 8192,
                    "layout": {"tp": 2, "dp": 4, "zero_stage": 1},
                    "hardware": {"custom": {"name": "my-part", "peak_tflops": {"bf16": 400},
                                            "memory_bytes": 48 * 2**30}},
                },
            ]
        }
    )  # fmt: skip

    model: ModelRef
    seq_len_tokens: PositiveInt = SEQ_LEN_FIELD
    layout: LayoutIn = Field(default_factory=LayoutIn)
    precision: PrecisionName = PRECISION_FIELD
    optimizer: OptimizerName = OPTIMIZER_FIELD
    hardware: AcceleratorIn | None = Field(
        default=None,
        description="the device to fit (catalog id, device name, or custom with memory_bytes); without it no "
        "fits verdict",
    )
    global_batch_sequences: GlobalBatchSequences | None = Field(
        default=None,
        description="with pipeline parallelism: micro-batches per step m = B/(dp·b), so the first stage holds "
        "min(pp, m) in flight (pp without it)",
    )
    dropout: bool = DROPOUT_FIELD

    @model_validator(mode="after")
    def _custom_needs_memory(self) -> MemoryRequest:
        if (
            self.hardware is not None
            and self.hardware.custom is not None
            and self.hardware.custom.memory_bytes is None
        ):
            raise field_error(
                "hardware.custom.memory_bytes",
                "a custom part needs memory_bytes to say whether the layout fits",
            )
        return self


class MemorySummaryRead(ApiModel):
    """Bytes per device on the worst pipeline stage (``stage``)."""

    weights_bytes: float
    gradients_bytes: float
    optimizer_state_bytes: float
    model_states_bytes: float = Field(description="weights + gradients + optimizer state")
    activations_bytes: float
    buffers_bytes: float = Field(description="ZeRO-3 gathered weights and unsharded gradients")
    framework_overhead_bytes: float = Field(description="CUDA context, workspaces, NCCL buffers (stated)")
    fragmentation_bytes: float = Field(description="caching-allocator fragmentation (stated share)")
    total_bytes: float
    total_gib: float
    capacity_bytes: float | None = Field(description="the device's memory; null without hardware")
    fits: bool | None = Field(description="total ≤ capacity; null without hardware")
    headroom_bytes: float | None = Field(description="capacity − total (negative: short by that much)")
    max_micro_batch_sequences: int | None = Field(
        description="largest micro-batch that fits with everything else unchanged (0: not even one sequence)"
    )
    stage: Literal["only", "first", "middle", "last"] = Field(
        description="the stage reported: only (pp = 1), first (embedding and 1F1B in-flight activations), "
        "middle (the fullest middle stage: an uneven split puts more layers there) or last (output layer and "
        "logits), whichever needs more"
    )


class MemoryRead(MemorySummaryRead):
    model: str
    seq_len_tokens: int
    precision: PrecisionName
    layout: LayoutRead
    accelerator: AcceleratorUsedRead | None
    optimizer: OptimizerRead
    parameters_on_device: float
    model_state_bytes_per_parameter: float = Field(
        description="weights + gradients + optimizer bytes per parameter on the device, after ZeRO sharding"
    )
    activations_per_micro_batch_bytes: float
    in_flight_micro_batches: float
    first_stage_total_bytes: float
    last_stage_total_bytes: float
    assumptions: list[str]
    warnings: list[str]
    reading: str
