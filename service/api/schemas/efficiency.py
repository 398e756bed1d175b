"""Schemas of the efficiency core: FLOPs per token, MFU (single and batch), training estimates."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field, model_validator

from service.api.schemas.common import (
    SEQ_LEN_FIELD,
    ApiModel,
    ConventionName,
    EmbeddingPolicyName,
    HardwareRef,
    ModelRef,
    PositiveFloat,
    PositiveInt,
    PrecisionName,
    RecomputeName,
    RenamedFieldsModel,
    ThroughputIn,
    old_name_of,
)
from service.api.schemas.fields import MAX_GLOBAL_BATCH_SEQUENCES, field_error
from service.api.schemas.performance import PredictionSummaryRead, PredictMfuIn
from service.api.schemas.rules import (
    RULE_IN_DESCRIPTION,
    either,
    exactly_one,
    given,
    implies,
    inside,
    not_both,
    only_with,
    states,
)

CONVENTION_FIELD: Any = Field(
    default="palm",
    description="FLOPs convention: palm (6N + 12·L·H·Q·s, non-causal; default), 6n (6·N, N by embedding_policy), kaplan (6·N non-embedding, Kaplan §2.1), hf_trainer (HF Trainer's floating_point_ops: 6·N without the input embedding, untied lm_head and every expert counted), megatron "
    "(explicit GEMM count incl. logits, GQA, SwiGLU, MoE; non-causal scores), megatron_causal (same, causal "
    "scores: half, sliding windows honoured)",
)
EMBEDDING_POLICY_FIELD = Field(
    default=None,
    description="which parameters N counts under palm/6n: all (PaLM, MosaicML), exclude_input (torchtitan, "
    "nanoGPT), exclude_all (Kaplan). Default: all for palm, exclude_all for 6n",
)
PARAMETER_COUNT_FIELD = Field(
    default=None, description="use a published N instead of the one derived from the dimensions (palm/6n)"
)


class FlopsRequest(ApiModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"model": {"preset": "llama3-8b"}, "seq_len_tokens": 8192, "convention": "palm"}]
        }
    )

    model: ModelRef
    seq_len_tokens: PositiveInt = SEQ_LEN_FIELD
    convention: ConventionName = CONVENTION_FIELD
    recompute: RecomputeName = Field(
        default="none", description="recomputation the hardware does (adds to HFU)"
    )
    embedding_policy: EmbeddingPolicyName | None = EMBEDDING_POLICY_FIELD
    parameter_count: PositiveFloat | None = PARAMETER_COUNT_FIELD


class FlopsComponentsRead(ApiModel):
    attention_projections_flops: float = Field(description="Q, K, V and output projections")
    attention_scores_flops: float = Field(description="QKᵀ and AV")
    mlp_flops: float = Field(description="dense FFN, or the experts a token uses")
    logits_flops: float = Field(description="output projection to the vocabulary")
    other_flops: float = Field(description="anything else N counts (norms, router)")
    total_flops: float


class FlopsRead(ApiModel):
    convention: ConventionName
    embedding_policy: EmbeddingPolicyName | None
    recompute: RecomputeName
    seq_len_tokens: int
    parameter_count_used: float | None = Field(
        description="the N of the 6N term (null for megatron conventions)"
    )
    total_parameters: int
    active_parameters_per_token: int
    forward_per_token: FlopsComponentsRead
    training_per_token: FlopsComponentsRead = Field(description="3× forward: what MFU counts")
    recompute_flops_per_token: float
    forward_flops_per_token: float
    training_flops_per_token: float = Field(description="model FLOPs per token (MFU)")
    hardware_flops_per_token: float = Field(description="training + recomputation (HFU)")
    forward_flops_per_sequence: float
    training_flops_per_sequence: float
    hardware_flops_per_sequence: float
    notes: list[str]


class MfuRequest(ApiModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": {"preset": "llama3.1-8b"},
                    "seq_len_tokens": 8192,
                    "hardware": {"accelerator": "h100-sxm", "device_count": 8},
                    "precision": "bf16",
                    "throughput": {"tokens_per_second_per_device": 5762},
                    "recompute": "none",
                    "convention": "palm",
                    "embedding_policy": "exclude_input",
                }
            ]
        }
    )

    model: ModelRef
    seq_len_tokens: PositiveInt = SEQ_LEN_FIELD
    hardware: HardwareRef
    precision: PrecisionName = Field(
        default="bf16", description="the precision whose dense peak MFU is against"
    )
    throughput: ThroughputIn
    recompute: RecomputeName = Field(
        default="none", description="declared recomputation: MFU excludes it, HFU counts it"
    )
    convention: ConventionName = CONVENTION_FIELD
    embedding_policy: EmbeddingPolicyName | None = EMBEDDING_POLICY_FIELD
    parameter_count: PositiveFloat | None = PARAMETER_COUNT_FIELD


class AcceleratorBrief(ApiModel):
    id: str
    display_name: str


class MfuRead(ApiModel):
    mfu: float = Field(
        description="model FLOPs utilization, a fraction of the dense peak (excludes recomputation)"
    )
    hfu: float = Field(description="hardware FLOPs utilization (includes the declared recomputation)")
    achieved_tflops_per_device: float = Field(description="model TFLOP/s per device (what Megatron logs)")
    hardware_tflops_per_device: float
    peak_tflops_per_device: float = Field(description="dense peak at the named precision")
    model_flops_per_token: float
    hardware_flops_per_token: float
    tokens_per_second: float = Field(description="global, normalised from the throughput form given")
    tokens_per_second_per_device: float
    device_count: int
    accelerator: AcceleratorBrief
    precision: PrecisionName
    convention: ConventionName
    recompute: RecomputeName
    band: Literal["below_typical", "typical", "above_typical"] = Field(
        description="below 30%, typical 30–60%, above 60% for LLM training"
    )
    reading: str
    mfu_vs_bf16_peak: float | None = Field(
        description="for non-BF16 runs (FP8) on parts with a different BF16 peak: MFU against the BF16 peak"
    )
    bf16_peak_tflops_per_device: float | None


class MfuBatchRequest(ApiModel):
    """Up to 1,000 MFU requests; each item answers or fails on its own, in order."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "items": [
                        {
                            "model": {"preset": "llama3-70b"},
                            "seq_len_tokens": 8192,
                            "hardware": {"accelerator": "NVIDIA H100 80GB HBM3", "device_count": 512},
                            "throughput": {"step_time_seconds": 8.0, "global_batch_sequences": 512},
                        },
                        {
                            "model": {"preset": "llama3-8b"},
                            "seq_len_tokens": 8192,
                            "hardware": {"accelerator": "h100-sxm", "device_count": 8},
                            "throughput": {"tokens_per_second": 48000},
                        },
                    ]
                }
            ]
        }
    )

    items: list[MfuRequest] = Field(min_length=1, max_length=1000)


class BatchItemError(ApiModel):
    type: str
    title: str
    status: int
    detail: str
    errors: list[dict[str, object]] | None = None
    close_matches: list[str] | None = None


class MfuBatchItem(ApiModel):
    index: int
    ok: bool
    result: MfuRead | None = None
    error: BatchItemError | None = None


class MfuBatchRead(ApiModel):
    items: list[MfuBatchItem]
    succeeded: int
    failed: int


@states(
    not_both("total_training_flops", "model"),
    {"anyOf": [given("total_training_flops"), {"allOf": [given("model"), given("seq_len_tokens")]}]},
    exactly_one("mfu", "predict"),
    implies(
        given("predict"),
        {
            "anyOf": [
                inside("predict", either("global_batch_sequences", "global_batch_tokens")),
                either("global_batch_tokens", "batch_tokens"),
            ]
        },
    ),
    only_with("predict", "model", "seq_len_tokens"),
)
class TrainingEstimateRequest(RenamedFieldsModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": {"preset": "llama3-70b"},
                    "seq_len_tokens": 8192,
                    "hardware": {"accelerator": "h100-sxm", "device_count": 1024},
                    "token_budget_tokens": 15.0e12,
                    "mfu": 0.4,
                    "price_per_device_hour": 2.5,
                },
                {
                    "model": {"preset": "llama3-70b"},
                    "seq_len_tokens": 8192,
                    "hardware": {"accelerator": "h100-sxm", "device_count": 1024},
                    "token_budget_tokens": 15.0e12,
                    "predict": {
                        "layout": {
                            "tp": 8,
                            "pp": 4,
                            "dp": 32,
                            "virtual_stages": 5,
                            "distributed_optimizer": True,
                        },
                        "global_batch_tokens": 16_777_216,
                    },
                    "price_per_device_hour": 2.5,
                },
                {
                    "model": {"preset": "llama3-8b"},
                    "seq_len_tokens": 8192,
                    "hardware": {"accelerator": "h100-sxm", "device_count": 64},
                    "total_steps": 100_000,
                    "global_batch_tokens": 4_194_304,
                    "predict": {"inter_node_bandwidth_bytes_per_second": 50e9},
                },
            ]
        }
    )

    model: ModelRef | None = Field(
        default=None, description="with seq_len_tokens: FLOPs per token from the model"
    )
    seq_len_tokens: PositiveInt | None = Field(default=None, le=10_000_000)
    total_training_flops: PositiveFloat | None = Field(default=None, description="instead of model + tokens")
    hardware: HardwareRef
    precision: PrecisionName = "bf16"
    token_budget_tokens: PositiveFloat | None = Field(default=None, description="the run's token budget")
    total_steps: PositiveInt | None = Field(
        default=None, description="optimizer steps: with global_batch_tokens, instead of token_budget_tokens"
    )
    global_batch_tokens: PositiveInt | None = Field(
        default=None, description="tokens per step; with predict, a multiple of seq_len_tokens"
    )
    mfu: float | None = Field(
        default=None, gt=0, le=1, description="the MFU the job runs at (fraction); or give predict instead"
    )
    predict: PredictMfuIn | None = Field(
        default=None,
        description="predict the MFU instead of giving it (needs model and seq_len_tokens): of predict.layout, "
        "or of the planner's fastest layout when no layout is given",
    )
    price_per_device_hour: PositiveFloat | None = Field(default=None, description="in the caller's currency")
    convention: ConventionName = CONVENTION_FIELD
    tokens: PositiveFloat | None = old_name_of("token_budget_tokens")
    steps: PositiveInt | None = old_name_of("total_steps")
    batch_tokens: PositiveInt | None = old_name_of("global_batch_tokens")
    renamed_fields: ClassVar[Mapping[str, str]] = {
        "tokens": "token_budget_tokens",
        "steps": "total_steps",
        "batch_tokens": "global_batch_tokens",
    }

    @model_validator(mode="after")
    def _flops_source(self) -> TrainingEstimateRequest:
        if self.total_training_flops is None and (self.model is None or self.seq_len_tokens is None):
            raise ValueError("give total_training_flops, or model and seq_len_tokens with a token budget")
        if self.total_training_flops is not None and self.model is not None:
            raise ValueError("give total_training_flops or model, not both")
        return self

    @model_validator(mode="after")
    def _mfu_source(self) -> TrainingEstimateRequest:
        if (self.mfu is None) == (self.predict is None):
            raise ValueError(
                "give exactly one of mfu (a fraction) or predict (the MFU predicted for a layout)"
            )
        if self.predict is None:
            return self
        if self.model is None or self.seq_len_tokens is None:
            raise field_error("predict", "predicting the MFU needs model and seq_len_tokens")
        seq_len, given = self.seq_len_tokens, self.predict
        tokens, field = given.global_batch_tokens, "predict.global_batch_tokens"
        if given.global_batch_sequences is None and tokens is None:
            tokens, field = self.global_batch_tokens, "global_batch_tokens"
            if tokens is None:
                raise field_error(
                    "predict.global_batch_sequences",
                    "give the global batch: predict.global_batch_sequences or predict.global_batch_tokens "
                    "(or total_steps with global_batch_tokens)",
                )
        if tokens is not None:
            if tokens % seq_len:
                raise field_error(
                    field,
                    f"{field} ({tokens}) must be a multiple of seq_len_tokens ({seq_len})",
                    code=RULE_IN_DESCRIPTION,
                )
            if tokens // seq_len > MAX_GLOBAL_BATCH_SEQUENCES:
                raise field_error(
                    field,
                    f"at most {MAX_GLOBAL_BATCH_SEQUENCES} sequences per step",
                    code=RULE_IN_DESCRIPTION,
                )
        return self


class JobCostRead(ApiModel):
    mfu: float
    wall_clock_seconds: float
    wall_clock_days: float
    device_hours: float
    cost: float | None
    energy_kwh_upper_bound: float | None = Field(description="devices × TDP × time; an upper bound")
    devices_to_match_wall_clock: int = Field(
        description="devices this MFU needs to finish in the wall-clock of the given MFU"
    )


class TrainingEstimateRead(ApiModel):
    mfu_source: Literal["given", "predicted"] = Field(
        description="given: the request's mfu; predicted: predict_step on predict.layout or the planner's best"
    )
    prediction: PredictionSummaryRead | None = Field(description="the prediction the MFU came from")
    total_training_flops: float
    tokens: float | None
    model_flops_per_token: float | None
    device_count: int
    accelerator: AcceleratorBrief
    precision: PrecisionName
    peak_tflops_per_device: float
    price_per_device_hour: float | None
    convention: ConventionName
    at_given_mfu: JobCostRead
    at_other_mfus: list[JobCostRead]
    summary: str
