"""Schemas of the performance model: memory per device, step-time predictions, layout plans.

One layout shape (:class:`LayoutIn`) serves ``/v1/memory``, ``/v1/predictions/step``, the ``predict`` form
of ``/v1/estimates/training`` and, filled in, every answer (:class:`LayoutRead` has the same fields with
the defaults resolved): a planner candidate's ``layout`` can be posted back to the other endpoints as is.

The field names are those of :class:`service.domain.memory.ParallelLayout` (``micro_batch_sequences``
lives in the layout), so a domain error's ``field`` is re-rooted to ``body.layout.<name>``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    ConfigDict,
    Field,
    PlainValidator,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from service.api.schemas.common import (
    SEQ_LEN_FIELD,
    ApiModel,
    ConventionName,
    CustomAccelerator,
    ModelRef,
    PositiveInt,
    PrecisionName,
    RecomputeName,
)
from service.api.schemas.schedules import field_error

__all__ = [
    "MAX_DEVICES",
    "MAX_GLOBAL_BATCH_SEQUENCES",
    "AcceleratorIn",
    "AcceleratorUsedRead",
    "BreakdownComponentName",
    "BreakdownItemRead",
    "CalibrationIn",
    "CalibrationRead",
    "CalibrationRequest",
    "CalibrationScopeName",
    "ClusterIn",
    "ClusterRead",
    "InfeasibleGroupRead",
    "LayoutIn",
    "LayoutRead",
    "MemoryRead",
    "MemoryRequest",
    "MemorySummaryRead",
    "MfuCostRead",
    "MfuGapRead",
    "OptimizerName",
    "OptimizerRead",
    "PlanCandidateRead",
    "PlanConstraintsIn",
    "PlanRead",
    "PlanRequest",
    "PredictMfuIn",
    "PredictionSummaryRead",
    "StepPredictionRead",
    "StepPredictionRequest",
    "ZeroStageAlias",
]

#: Largest cluster a request may describe (devices).
MAX_DEVICES = 1_048_576
#: Largest global batch in sequences (bounds the planner's micro-batch enumeration).
MAX_GLOBAL_BATCH_SEQUENCES = 16_777_216

OptimizerName = Literal["adam", "adam_mixed", "adam_fp32", "sgd_momentum", "adafactor", "adam_8bit"]
ZeroStageAlias = Literal["no_shard", "shard_grad_op", "full_shard"]
#: PyTorch FSDP ShardingStrategy names → ZeRO stage.
ZERO_ALIASES: dict[str, int] = {"no_shard": 0, "shard_grad_op": 2, "full_shard": 3}

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


# --------------------------------------------------------------------------------------------------
# Layout


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


# --------------------------------------------------------------------------------------------------
# Hardware and cluster


class AcceleratorIn(ApiModel):
    """Exactly one of ``accelerator`` (a catalog id or a framework device name) or ``custom``."""

    accelerator: str | None = Field(default=None, min_length=1, max_length=100)
    custom: CustomAccelerator | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> AcceleratorIn:
        if (self.accelerator is None) == (self.custom is None):
            raise ValueError("give exactly one of accelerator (id or device name) or custom")
        return self


class ClusterIn(ApiModel):
    """The devices the job runs on: an accelerator (catalog id, device name, or ``custom``), how many,
    how many per node, and the scale-out bandwidth."""

    accelerator: str | None = Field(
        default=None, min_length=1, max_length=100, description="catalog id or framework device name"
    )
    custom: CustomAccelerator | None = None
    device_count: Annotated[int, Field(ge=1, le=MAX_DEVICES)] = Field(description="devices in the job")
    devices_per_node: Annotated[int, Field(ge=1, le=1024)] = Field(
        default=8, description="devices sharing the intra-node link (NVLink domain)"
    )
    inter_node_bandwidth_bytes_per_second: Bandwidth = Field(
        default=50e9,
        description="scale-out bandwidth per device, one way, bytes/s. Default 50e9: one 400 Gb/s NDR "
        "InfiniBand NIC per GPU (25e9 for 200 Gb/s HDR)",
    )
    intra_node_bandwidth_bytes_per_second: Bandwidth | None = Field(
        default=None, description="per device, one way; default: the accelerator's (NVLink) figure"
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> ClusterIn:
        if (self.accelerator is None) == (self.custom is None):
            raise ValueError("give exactly one of accelerator (id or device name) or custom")
        return self


class AcceleratorUsedRead(ApiModel):
    id: str = Field(description="catalog id (custom for a custom part)")
    display_name: str
    memory_bytes: int | None


class ClusterRead(ApiModel):
    accelerator: AcceleratorUsedRead
    device_count: int
    devices_per_node: int
    nodes: int = Field(description="ceil(device_count / devices_per_node)")
    inter_node_bandwidth_bytes_per_second: float = Field(description="per device, one way")
    intra_node_bandwidth_bytes_per_second: float = Field(description="per device, one way, as used")
    peak_tflops_per_device: float = Field(description="dense peak at the request's precision")


class CalibrationIn(ApiModel):
    """Overrides of the performance model's fitted defaults (e.g. from your own measured runs)."""

    matmul_efficiency_scale: Annotated[float, Field(ge=0.1, le=3.0)] = Field(
        default=1.0,
        description="multiplies the accelerator family's matmul and attention efficiency (1 = the defaults)",
    )
    overlap_fraction: Fraction | None = Field(
        default=None,
        description="share of overlapped communication that hides behind compute (default: the model's "
        "fitted 0.915)",
    )


#: Calibrations fitted on the run store: ``fleet`` (every tenant's runs, open) or ``tenant`` (the API
#: key's own runs; needs a key with the read scope).
CalibrationScopeName = Literal["fleet", "tenant"]
CALIBRATION_SCOPES: tuple[str, ...] = ("fleet", "tenant")


def _calibration_request(value: Any) -> CalibrationIn | str:
    """Constants or a scope. Validated by hand rather than as a pydantic union so that an error names
    ``body.calibration.<field>`` (a union would put its member's name in the path)."""
    if isinstance(value, str):
        if value in CALIBRATION_SCOPES:
            return value
        raise PydanticCustomError(
            "literal_error", "Input should be 'fleet' or 'tenant', or an object of calibration constants"
        )
    if isinstance(value, CalibrationIn):
        return value
    if not isinstance(value, dict):
        raise PydanticCustomError(
            "model_type", "Input should be an object of calibration constants, or 'fleet' or 'tenant'"
        )
    return CalibrationIn.model_validate(value)


CalibrationRequest = Annotated[
    CalibrationIn | CalibrationScopeName,
    PlainValidator(_calibration_request, json_schema_input_type=CalibrationIn | CalibrationScopeName),
]

CALIBRATION_FIELD: Any = Field(
    default=None,
    description="omitted: the model's fitted defaults. Constants ({matmul_efficiency_scale, "
    'overlap_fraction}): used as given. "fleet": fitted on the most recent stored runs on this '
    "accelerator that have measured throughput and a layout (every tenant's; only the fitted constants "
    'are answered). "tenant": the same over the API key\'s own runs (send X-API-Key or Authorization: '
    "Bearer with the read scope). A fit needs 3 such runs; with fewer the defaults are used and "
    "calibration.source says so. Fits are cached for a minute",
)


#: Fields of CalibrationRead answered only for a calibration asked as "fleet" or "tenant".
STORE_CALIBRATION_FIELDS = (
    "scope",
    "accelerator",
    "fitted",
    "fitted_on_runs",
    "skipped_runs",
    "minimum_runs",
    "rms_error_mfu",
    "default_rms_error_mfu",
    "fitted_at",
    "pending",
    "note",
)


class CalibrationRead(ApiModel):
    """The calibration a prediction ran under. The fields after ``source`` come only with a calibration
    asked as ``fleet`` or ``tenant`` (answers to other requests keep the three fields they always had)."""

    matmul_efficiency_scale: float
    overlap_fraction: float | None = Field(description="null: the model's defaults")
    source: str = Field(
        description="where the constants come from: `default (uncalibrated)`, `request override`, "
        "`fleet fit`, `tenant fit`, or `default (fallback from fleet)` / `default (fallback from tenant)` "
        "when too few stored runs could be fitted (`note` says why)"
    )
    scope: CalibrationScopeName | None = Field(default=None, description="the runs a fit was asked over")
    accelerator: str | None = Field(default=None, description="catalog id the runs were selected by")
    fitted: bool | None = Field(default=None, description="false: too few runs, the defaults are used")
    fitted_on_runs: int | None = Field(
        default=None, description="stored runs the fit used (with a fallback: the usable runs found)"
    )
    skipped_runs: int | None = Field(
        default=None,
        description="stored runs left out because their recorded layout cannot be predicted (e.g. the "
        "global batch is not a multiple of dp × micro-batch)",
    )
    minimum_runs: int | None = Field(default=None, description="runs a fit needs")
    rms_error_mfu: float | None = Field(
        default=None,
        description="root-mean-square error of the fitted model's MFU against the runs' median MFU "
        "(fraction; 0.01 = 1 MFU point); null without a fit",
    )
    default_rms_error_mfu: float | None = Field(
        default=None, description="the same error with the default constants, on the same runs"
    )
    fitted_at: AwareDatetime | None = Field(
        default=None, description="when the runs were read and fitted (answers reuse a fit for a minute)"
    )
    pending: bool | None = Field(
        default=None,
        description="true: no fit was ready, so the defaults were used while it is fitted in the "
        "background; later answers use it (a run's efficiency never waits for a fit)",
    )
    note: str | None = Field(default=None, description="the calibration in a sentence")

    @model_serializer(mode="wrap")
    def _store_fields_only_when_asked(self, handler: SerializerFunctionWrapHandler):
        # No return annotation: pydantic then documents the model's own fields (an annotation such as
        # dict[str, Any] would replace them in the published schema).
        data = handler(self)
        if self.scope is None and isinstance(data, dict):
            for name in STORE_CALIBRATION_FIELDS:
                data.pop(name, None)
        return data


class OptimizerRead(ApiModel):
    """Bytes per parameter before any sharding (the optimizer's own footprint)."""

    requested: OptimizerName
    name: str = Field(description="the variant used (adam → adam_mixed for 16-bit runs, adam_fp32 for fp32)")
    weight_bytes_per_parameter: float
    gradient_bytes_per_parameter: float
    optimizer_state_bytes_per_parameter: float
    total_bytes_per_parameter: float
    source: str


# --------------------------------------------------------------------------------------------------
# Memory


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
    stage: Literal["only", "first", "last"] = Field(
        description="the stage reported: only (pp = 1), first (embedding and 1F1B in-flight activations) or "
        "last (output layer and logits), whichever needs more"
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


# --------------------------------------------------------------------------------------------------
# Step prediction

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


class _BatchMixin(ApiModel):
    """Exactly one of ``global_batch_sequences`` or ``global_batch_tokens`` (a multiple of seq_len)."""

    seq_len_tokens: PositiveInt = SEQ_LEN_FIELD
    global_batch_sequences: GlobalBatchSequences | None = Field(
        default=None, description="sequences per step"
    )
    global_batch_tokens: PositiveInt | None = Field(
        default=None, description="tokens per step (a multiple of seq_len_tokens)"
    )

    @model_validator(mode="after")
    def _one_batch(self) -> _BatchMixin:
        if (self.global_batch_sequences is None) == (self.global_batch_tokens is None):
            raise ValueError("give exactly one of global_batch_sequences or global_batch_tokens")
        if self.global_batch_tokens is not None:
            if self.global_batch_tokens % self.seq_len_tokens:
                raise field_error(
                    "global_batch_tokens",
                    f"global_batch_tokens ({self.global_batch_tokens}) must be a multiple of seq_len_tokens "
                    f"({self.seq_len_tokens})",
                )
            if self.global_batch_tokens // self.seq_len_tokens > MAX_GLOBAL_BATCH_SEQUENCES:
                raise field_error(
                    "global_batch_tokens",
                    f"global_batch_tokens / seq_len_tokens must be at most {MAX_GLOBAL_BATCH_SEQUENCES} sequences",
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


class StepPredictionRequest(_BatchMixin):
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
    assumptions: list[str]
    warnings: list[str]


# --------------------------------------------------------------------------------------------------
# Plans


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
    max_micro_batch_sequences: MicroBatch | None = None
    sequence_parallel: bool | None = Field(default=None, description="default: on whenever tp > 1")
    flash_attention: bool = True
    fp32_grad_accumulation: bool = False
    overlap_tp_comm: bool = False
    overlap_dp_comm: bool = True
    overlap_pp_comm: bool = True
    max_results: Annotated[int, Field(ge=1, le=200)] = Field(default=20, description="candidates returned")

    @model_validator(mode="after")
    def _micro_batch_range(self) -> PlanConstraintsIn:
        if (
            self.max_micro_batch_sequences is not None
            and self.max_micro_batch_sequences < self.min_micro_batch_sequences
        ):
            raise field_error(
                "max_micro_batch_sequences", "max_micro_batch_sequences must be ≥ min_micro_batch_sequences"
            )
        return self


class PlanRequest(_BatchMixin):
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


# --------------------------------------------------------------------------------------------------
# Training estimates: the predicted-MFU form (used by service.api.schemas.efficiency)


class PredictionSummaryRead(ApiModel):
    """The prediction a training estimate ran at (``mfu_source`` = predicted)."""

    layout_source: Literal["given", "planner_best"]
    layout: LayoutRead
    global_batch_sequences: int
    step_time_seconds: float
    tokens_per_second: float
    mfu: float
    hfu: float
    fits: bool | None
    memory_per_device_gib: float
    largest_loss: BreakdownComponentName
    calibration: CalibrationRead
    reading: str


class PredictMfuIn(ApiModel):
    """Predict the MFU a training estimate runs at, instead of giving it. The estimate's ``model``,
    ``seq_len_tokens``, ``hardware`` (accelerator and count), ``precision`` and ``convention`` describe the
    job; this adds the cluster's network, the global batch and the layout. With ``layout`` that layout is
    predicted; without it the planner's fastest layout is (``constraints`` narrow its search)."""

    layout: LayoutIn | None = Field(
        default=None, description="tp·pp·dp·cp = hardware.count; omitted: the planner's best layout"
    )
    constraints: PlanConstraintsIn | None = Field(default=None, description="planner constraints (no layout)")
    devices_per_node: Annotated[int, Field(ge=1, le=1024)] = 8
    inter_node_bandwidth_bytes_per_second: Bandwidth = Field(
        default=50e9, description="per device, one way; default one 400 Gb/s NDR NIC per GPU"
    )
    intra_node_bandwidth_bytes_per_second: Bandwidth | None = None
    global_batch_sequences: GlobalBatchSequences | None = Field(
        default=None,
        description="sequences per step; or global_batch_tokens; default: the estimate's batch_tokens",
    )
    global_batch_tokens: PositiveInt | None = Field(default=None, description="tokens per step")
    optimizer: OptimizerName = OPTIMIZER_FIELD
    dropout: bool = DROPOUT_FIELD
    calibration: CalibrationRequest | None = CALIBRATION_FIELD

    @model_validator(mode="after")
    def _layout_or_constraints(self) -> PredictMfuIn:
        if self.layout is not None and self.constraints is not None:
            raise field_error(
                "constraints", "constraints narrow the planner's search: give layout or constraints"
            )
        if self.global_batch_sequences is not None and self.global_batch_tokens is not None:
            raise field_error(
                "global_batch_tokens", "give global_batch_sequences or global_batch_tokens, not both"
            )
        return self
