"""Bounds and field definitions shared by the performance requests (memory, predictions, plans)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    Field,
)

#: Largest cluster a request may describe (devices).
MAX_DEVICES = 1_048_576
#: Largest global batch in sequences (bounds the planner's micro-batch enumeration).
MAX_GLOBAL_BATCH_SEQUENCES = 16_777_216

OptimizerName = Literal["adam", "adam_mixed", "adam_fp32", "sgd_momentum", "adafactor", "adam_8bit"]
ZeroStageAlias = Literal["no_shard", "shard_grad_op", "full_shard"]
#: PyTorch FSDP ShardingStrategy names → ZeRO stage.
ZERO_ALIASES: dict[str, int] = {"no_shard": 0, "shard_grad_op": 2, "full_shard": 3}

#: The domain's layout options (service.domain.memory: SELECTIVE_POLICIES, GATHER_UNITS, ATTENTION_KERNELS).
SelectivePolicyName = Literal["attention_core", "per_op"]
GatherUnitName = Literal["layer", "module"]
AttentionKernelName = Literal["best", "flash2", "triton"]
#: Busiest expert's tokens over the mean, the range service.domain.memory.validate_layout accepts.
ExpertLoadImbalance = Annotated[float, Field(ge=1.0, le=16.0)]

ParallelSize = Annotated[int, Field(ge=1, le=65_536)]
DataParallelSize = Annotated[int, Field(ge=1, le=MAX_DEVICES)]
MicroBatch = Annotated[int, Field(ge=1, le=1_048_576)]
GlobalBatchSequences = Annotated[int, Field(ge=1, le=MAX_GLOBAL_BATCH_SEQUENCES)]
ZeroStage = Annotated[int, Field(ge=0, le=3)]
Fraction = Annotated[float, Field(ge=0, le=1)]
#: 1 MB/s .. 10 TB/s: wide enough for any real link, narrow enough that times stay finite.
Bandwidth = Annotated[float, Field(ge=1e6, le=1e13)]

CONVENTION_FIELD: Any = Field(
    default="palm",
    description="FLOPs convention of mfu/hfu and achieved TFLOP/s (default palm, the service's default: 6N + "
    "12·L·H·Q·s, non-causal; 6n, megatron, megatron_causal as in POST /v1/flops). The time prediction itself "
    "does not depend on it",
)
OPTIMIZER_FIELD: Any = Field(
    default="adam",
    description="adam: mixed-precision Adam for 16-bit/FP8 runs (2 weights + 2 gradients + 12 fp32 master, m, "
    "v = 16 bytes per parameter), fp32 Adam for fp32/tf32 runs (4 + 4 + 8); adam_mixed, adam_fp32; "
    "sgd_momentum (2 + 2 + 8); adafactor (2 + 2 + 4, factored second moment); adam_8bit (2 + 2 + 6). "
    "The answer echoes the bytes per parameter used and their source",
)
DROPOUT_FIELD: Any = Field(
    default=True,
    description="dropout masks are stored (Korthikanti et al. count them: 1 byte per element); false for "
    "models trained without dropout (Llama)",
)
PRECISION_FIELD: Any = Field(
    default="bf16",
    description="training precision: the dense peak MFU is against, and the activation width (fp32/tf32: 4 "
    "bytes, fp64: 8, otherwise 2; FP8 runs keep BF16 activations)",
)
