"""Schemas of ``POST /v1/advice/lr`` and ``POST /v1/advice/batch``.

Batch sizes are in tokens unless a field says sequences; loss in nats per token.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, ClassVar, Literal

from pydantic import BeforeValidator, ConfigDict, Field, WithJsonSchema, model_validator

from service.api.schemas.common import ApiModel, ModelRef, RenamedFieldsModel, old_name_of
from service.api.schemas.fields import field_error
from service.api.schemas.rules import (
    RULE_IN_DESCRIPTION,
    absent,
    either,
    equals,
    given,
    implies,
    not_both,
    only_with,
    states,
)
from service.api.schemas.schedules import LrScheduleRequest

__all__ = [
    "BatchAdviceRead",
    "BatchAdviceRequest",
    "BatchRampIn",
    "BatchRampRead",
    "BatchRecommendationRead",
    "CriticalBatchRead",
    "GradientAccumulationRead",
    "GradientNoiseIn",
    "LrAdviceRead",
    "LrAdviceRequest",
    "LrRuleRead",
    "NoiseScaleRead",
    "RampPhaseRead",
    "TradeoffRead",
    "WarmupAdviceRead",
]

#: Ranges where the rules say something (below a thousand parameters or a megaFLOP there is no model).
Params = Annotated[float, Field(ge=1e3, le=1e15)]
Flops = Annotated[float, Field(ge=1e6, le=1e35)]
Tokens = Annotated[float, Field(ge=1, le=1e18)]
BatchTokens = Annotated[float, Field(ge=1, le=1e12)]
SeqLen = Annotated[int, Field(gt=0, le=10_000_000)]
#: Nats per token; the floor keeps L^(1/α_B) and L^6.24 well inside floating point.
Loss = Annotated[float, Field(ge=0.001, le=100)]


def _as_series(value: object) -> object:
    """One reading is a series of one."""
    return [value] if isinstance(value, int | float) and not isinstance(value, bool) else value


#: One squared gradient norm, or a series of them over steps (averaged before the ratio is taken).
GradNormSq = Annotated[
    list[Annotated[float, Field(ge=0)]],
    Field(min_length=1, max_length=100_000),
    BeforeValidator(_as_series),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": 0},
                {
                    "type": "array",
                    "items": {"type": "number", "minimum": 0},
                    "minItems": 1,
                    "maxItems": 100_000,
                },
            ]
        }
    ),
]
LossFitName = Literal["chinchilla_rounded", "chinchilla_unrounded", "epoch"]


# ---------------------------------------------------------------------------------------------
# LR advice


@states(not_both("parameter_count", "model"), either("parameter_count", "model", "total_training_flops"))
class LrAdviceRequest(RenamedFieldsModel):
    """Give the size as ``parameter_count`` or ``model``, and/or the budget as ``total_training_flops``
    (or ``token_budget_tokens`` with a size: C = M·D with DeepSeek's M when the model's dimensions and
    ``seq_len_tokens`` are known, else 6·N·D)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"model": {"preset": "llama3-8b"}, "token_budget_tokens": 1e12, "seq_len_tokens": 8192},
                {"parameter_count": 1.3e9, "token_budget_tokens": 26e9, "global_batch_tokens": 1_048_576},
                {"total_training_flops": 1e21, "min_lr_ratio": 0.0},
            ]
        }
    )

    parameter_count: Params | None = Field(
        default=None,
        description="the model size (give this or model); Kaplan's rule reads it as non-embedding",
    )
    model: ModelRef | None = Field(
        default=None,
        description="the model (preset, dimensions or HF config); its active parameters per token are the size",
    )
    total_training_flops: Flops | None = Field(default=None, description="training compute budget in FLOPs")
    token_budget_tokens: Tokens | None = Field(default=None, description="the run's token budget")
    seq_len_tokens: SeqLen | None = Field(
        default=None, description="sequence length (DeepSeek's M needs it with the model's dimensions)"
    )
    global_batch_tokens: BatchTokens | None = Field(
        default=None,
        description="global batch in tokens (default, with token_budget_tokens: the suggested batch)",
    )
    total_steps: Annotated[int, Field(gt=0, le=10**10)] | None = Field(
        default=None,
        description="optimizer steps of the run (default token_budget_tokens / global_batch_tokens)",
    )
    min_lr_ratio: Annotated[float, Field(ge=0, le=1)] = Field(
        default=0.1, description="the floor as a fraction of the peak (default 10%: GPT-3, Chinchilla)"
    )
    tokens: Tokens | None = old_name_of("token_budget_tokens")
    batch_tokens: BatchTokens | None = old_name_of("global_batch_tokens")
    renamed_fields: ClassVar[Mapping[str, str]] = {
        "tokens": "token_budget_tokens",
        "batch_tokens": "global_batch_tokens",
    }

    @model_validator(mode="after")
    def _a_size_or_a_budget(self) -> LrAdviceRequest:
        if self.parameter_count is not None and self.model is not None:
            raise field_error("parameter_count", "give parameter_count or model, not both")
        if self.parameter_count is None and self.model is None and self.total_training_flops is None:
            raise field_error(
                "parameter_count",
                "give the model size (parameter_count or model) or the budget (total_training_flops)",
                code="missing",
            )
        return self


class LrRuleRead(ApiModel):
    rule: str = Field(description="gpt3 | kaplan | deepseek | practice")
    source: str
    peak_lr: float | None = Field(description="null where the rule gives no value (needs a budget, LR ≤ 0)")
    peak_lr_low: float | None = Field(
        description="low end of the spread of the published choices the rule was fitted on (practice: ±2σ); "
        "null for a rule that gives one value"
    )
    peak_lr_high: float | None = Field(description="high end of that spread; null as peak_lr_low")
    applicable: bool = Field(description="inside the range the rule was fitted on")
    extrapolated: bool
    note: str


class WarmupAdviceRead(ApiModel):
    warmup_steps: int | None = Field(description="null when the run's step count is unknown")
    warmup_fraction: float = Field(description="of the run's steps (0.001–0.01)")
    reason: str


class LrAdviceRead(ApiModel):
    recommended_peak_lr: float
    recommendation_rule: str = Field(description="how the recommendation combines the rules")
    peak_lr_low: float = Field(description="lowest applicable rule (a rule's spread counts with its ends)")
    peak_lr_high: float = Field(description="highest applicable rule (likewise)")
    rules: list[LrRuleRead]
    parameter_count: float = Field(description="the size the rules used")
    parameter_count_basis: str
    total_training_flops: float | None = Field(description="the budget DeepSeek's rule used")
    warmup: WarmupAdviceRead
    min_lr_ratio: float
    min_lr: float = Field(description="the floor: recommended_peak_lr × min_lr_ratio")
    floor_reason: str
    suggested_batch_tokens: float | None
    suggested_batch_source: str | None
    batch_tokens: float | None = Field(
        description="the batch the step count and the warmup were derived from"
    )
    batch_tokens_basis: str | None
    total_steps: int | None
    schedule_request: LrScheduleRequest | None = Field(
        description="a ready body for POST /v1/schedules/lr (cosine to the floor); null without a step count"
    )
    schedule_note: str


# ---------------------------------------------------------------------------------------------
# Batch advice


class GradientNoiseIn(ApiModel):
    """Squared gradient norms measured at two batch sizes (McCandlish et al. 2018 App. A), named as a
    run's measurements name them. Each reading may be one value or a series over steps (averaged
    before the ratio is taken)."""

    batch_small_tokens: Annotated[int, Field(gt=0, le=10**12)] = Field(description="the smaller batch")
    batch_big_tokens: Annotated[int, Field(gt=0, le=10**12)] = Field(description="the larger batch")
    grad_norm_sq_small: GradNormSq = Field(description="|G|² at batch_small_tokens, or a series of them")
    grad_norm_sq_big: GradNormSq = Field(description="|G|² at batch_big_tokens, or a series of them")
    averaging: Literal["mean", "ema"] = Field(default="mean", description="how a series is averaged")
    ema_decay: Annotated[float, Field(gt=0, lt=1)] = Field(
        default=0.95, description="ema: weight of the past"
    )

    @model_validator(mode="after")
    def _big_above_small(self) -> GradientNoiseIn:
        if self.batch_big_tokens <= self.batch_small_tokens:
            raise field_error(
                "batch_big_tokens",
                "batch_big_tokens must be larger than batch_small_tokens",
                code=RULE_IN_DESCRIPTION,
            )
        return self


class BatchRampIn(RenamedFieldsModel):
    """A doubling batch ramp over the run: the batch doubles once the critical batch at the predicted
    loss reaches the doubled batch (so it stays at or below B_crit), up to ``max_batch_tokens``."""

    token_budget_tokens: Tokens = Field(description="the run's token budget")
    start_batch_tokens: BatchTokens | None = Field(
        default=None,
        description="the first batch (default: 1/32 of max_batch_tokens, five doublings; GPT-3 ramped "
        "from 32k tokens), rounded to micro_batch_sequences × seq_len_tokens × data_parallel_size",
    )
    max_batch_tokens: BatchTokens | None = Field(
        default=None, description="the last batch (default: global_batch_tokens, the batch you train with)"
    )
    tokens: Tokens | None = old_name_of("token_budget_tokens")
    renamed_fields: ClassVar[Mapping[str, str]] = {"tokens": "token_budget_tokens"}


@states(
    implies({"allOf": [given("model"), absent("loss")]}, given("tokens_seen")),
    only_with("tokens_seen", "model"),
    implies(
        {"anyOf": [{"not": equals("critical_batch_model", "noise_scale")}, given("ramp")]},
        either("loss", "model"),
    ),
    implies(
        equals("critical_batch_model", "inverse_loss"),
        {"allOf": [given("calibration_loss"), given("calibration_batch_tokens")]},
    ),
    implies(equals("critical_batch_model", "noise_scale"), given("gradient_noise")),
    only_with("micro_batch_sequences", "seq_len_tokens"),
    only_with("ramp", "model"),
)
class BatchAdviceRequest(RenamedFieldsModel):
    """The current loss (or ``model`` + ``tokens_seen`` to predict it), the current batch, and what to
    estimate the critical batch from (``critical_batch_model``)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"loss": 3.0, "global_batch_tokens": 524_288},
                {
                    "model": {"preset": "llama3-8b"},
                    "tokens_seen": 200e9,
                    "global_batch_tokens": 4_194_304,
                    "objective": "fewest_steps",
                    "max_compute_overhead": 0.5,
                    "seq_len_tokens": 8192,
                    "micro_batch_sequences": 2,
                    "data_parallel_size": 64,
                    "ramp": {"token_budget_tokens": 1e12},
                },
                {
                    "loss": 2.6,
                    "global_batch_tokens": 1_048_576,
                    "critical_batch_model": "noise_scale",
                    "gradient_noise": {
                        "batch_small_tokens": 131_072,
                        "batch_big_tokens": 2_097_152,
                        "grad_norm_sq_small": [4.2, 4.1, 4.075],
                        "grad_norm_sq_big": [1.2, 1.19, 1.1959],
                    },
                },
                {
                    "loss": 2.4,
                    "global_batch_tokens": 2_097_152,
                    "critical_batch_model": "inverse_loss",
                    "calibration_loss": 3.0,
                    "calibration_batch_tokens": 1_000_000,
                    "objective": "least_compute",
                },
            ]
        }
    )

    loss: Loss | None = Field(default=None, description="the current training loss, nats per token")
    model: ModelRef | None = Field(
        default=None,
        description="the model: predicts the loss after tokens_seen (when loss is not given) and along a ramp",
    )
    tokens_seen: Tokens | None = Field(default=None, description="tokens trained so far (with model)")
    loss_fit: LossFitName = Field(
        default="chinchilla_rounded",
        description="the Chinchilla-form fit L(N, D) = E + A/N^α + B/D^β that predicts the loss",
    )
    global_batch_tokens: BatchTokens = Field(description="the current global batch in tokens")
    critical_batch_model: Literal["kaplan", "inverse_loss", "noise_scale", "minicpm"] = Field(
        default="kaplan",
        description="kaplan: B*/L^(1/α_B) (Kaplan et al. 2020); inverse_loss: B ∝ 1/L through the "
        "calibration point; noise_scale: B_simple from gradient_noise (McCandlish et al. 2018); minicpm: "
        "1.2110e9/L^6.2393 (Hu et al. 2024)",
    )
    calibration_loss: Loss | None = Field(
        default=None, description="inverse_loss: the loss at which the critical batch was measured"
    )
    calibration_batch_tokens: BatchTokens | None = Field(
        default=None, description="inverse_loss: the critical batch measured at calibration_loss"
    )
    gradient_noise: GradientNoiseIn | None = Field(
        default=None, description="noise_scale: gradient-norm readings at two batch sizes"
    )
    objective: Literal["fewest_steps", "balanced", "least_compute"] = Field(
        default="balanced",
        description="balanced: B = B_crit (2× min steps, 2× min data); fewest_steps: the largest batch "
        "within max_compute_overhead; least_compute: the smallest batch within max_steps_overhead",
    )
    # Floors of 1e-6 (a 0.0001% overhead): below them the batch a cap implies leaves float range
    # (5e-324 made B_crit / cap infinite: a 500 the contract fuzz found).
    max_compute_overhead: Annotated[float, Field(ge=1e-6, le=100)] = Field(
        default=1.0,
        description="fewest_steps: extra data/compute allowed over the minimum, E/E_min − 1 (0.2 = 20%)",
    )
    max_steps_overhead: Annotated[float, Field(ge=1e-6, le=1000)] = Field(
        default=4.0, description="least_compute: extra steps allowed over the minimum, S/S_min − 1"
    )
    seq_len_tokens: SeqLen | None = Field(default=None, description="tokens per sequence")
    micro_batch_sequences: Annotated[int, Field(gt=0, le=1_000_000)] | None = Field(
        default=None, description="sequences per device per forward/backward (for gradient accumulation)"
    )
    data_parallel_size: Annotated[int, Field(gt=0, le=10_000_000)] = Field(
        default=1, description="data-parallel replicas"
    )
    ramp: BatchRampIn | None = Field(default=None, description="plan a batch ramp over the run (needs model)")
    batch_tokens: BatchTokens | None = old_name_of("global_batch_tokens")
    renamed_fields: ClassVar[Mapping[str, str]] = {"batch_tokens": "global_batch_tokens"}

    @model_validator(mode="after")
    def _inputs_the_choices_need(self) -> BatchAdviceRequest:
        if self.loss is None and self.model is not None and self.tokens_seen is None:
            raise field_error(
                "tokens_seen", "give tokens_seen (tokens trained so far) to predict the loss, or give loss"
            )
        if self.tokens_seen is not None and self.model is None:
            raise field_error("model", "tokens_seen predicts the loss from a model: give model too")
        needs_loss = self.critical_batch_model != "noise_scale" or self.ramp is not None
        if needs_loss and self.loss is None and self.model is None:
            raise field_error(
                "loss",
                "give the current loss (nats per token), or model and tokens_seen to predict it",
                code="missing",
            )
        if self.critical_batch_model == "inverse_loss":
            for name in ("calibration_loss", "calibration_batch_tokens"):
                if getattr(self, name) is None:
                    raise field_error(
                        name,
                        "the inverse_loss model needs a calibration point: calibration_loss and "
                        "calibration_batch_tokens (a critical batch measured at some loss)",
                        code="missing",
                    )
        if self.critical_batch_model == "noise_scale" and self.gradient_noise is None:
            raise field_error(
                "gradient_noise",
                "the noise_scale model needs gradient_noise: squared gradient norms at two batch sizes",
                code="missing",
            )
        if self.micro_batch_sequences is not None and self.seq_len_tokens is None:
            raise field_error(
                "seq_len_tokens", "gradient accumulation needs seq_len_tokens with micro_batch_sequences"
            )
        if self.ramp is not None and self.model is None:
            raise field_error(
                "model",
                "a batch ramp predicts the loss along the run: give model (with loss_fit)",
                code="missing",
            )
        return self


class CriticalBatchRead(ApiModel):
    batch_tokens: float
    model: str
    source: str


class NoiseScaleRead(ApiModel):
    gradient_norm_sq: float = Field(description="|G|² estimate")
    trace_sigma: float = Field(description="tr(Σ) estimate (per-example gradient covariance)")
    b_simple_tokens: float = Field(description="the simple noise scale tr(Σ)/|G|², tokens")
    averaging: str


class TradeoffRead(ApiModel):
    """Kaplan Eq. 5.4–5.5 at one batch: S = S_min·(1 + B_crit/B), E = E_min·(1 + B/B_crit)."""

    batch_tokens: float
    critical_batch_tokens: float
    batch_over_critical: float
    regime: Literal["below", "near", "above"] = Field(
        description="below: B < B_crit/2 (doubling nearly halves the steps); near: B_crit/2 ≤ B ≤ 2·B_crit; "
        "above: B > 2·B_crit (extra samples mostly wasted)"
    )
    steps_over_min: float = Field(description="S/S_min")
    data_over_min: float = Field(description="E/E_min (= C/C_min)")
    doubling_steps_cut_fraction: float = Field(
        description="steps saved by doubling the batch, 1 − S(2B)/S(B)"
    )
    doubling_extra_data_fraction: float = Field(
        description="data added by doubling the batch, E(2B)/E(B) − 1"
    )
    summary: str


class GradientAccumulationRead(ApiModel):
    target_batch_tokens: float
    micro_batch_sequences: int
    seq_len_tokens: int
    data_parallel_size: int
    accumulation_steps: int
    global_batch_sequences: int
    global_batch_tokens: int
    overshoot_fraction: float = Field(description="global_batch_tokens / target − 1")


class BatchRecommendationRead(ApiModel):
    objective: str
    batch_tokens: float
    rule: str
    granularity_tokens: float | None = Field(
        description="the batch is a multiple of this, what the layout runs in one step: "
        "micro_batch_sequences × seq_len_tokens × data_parallel_size (micro_batch_sequences 1 when not given)"
    )
    meets_caps: bool = Field(
        description="whether the runnable batch meets max_compute_overhead (fewest_steps) and "
        "max_steps_overhead (least_compute); false when even one micro-step breaks the cap (rule says so)"
    )
    tradeoff: TradeoffRead


class RampPhaseRead(ApiModel):
    start_tokens: float
    end_tokens: float
    batch_tokens: float
    steps: int
    loss_at_start: float
    critical_batch_tokens_at_start: float


class BatchRampRead(ApiModel):
    phases: list[RampPhaseRead]
    tokens: float = Field(description="the run's token budget")
    total_steps: int
    constant_batch_tokens: float = Field(
        description="the constant batch the ramp is compared with: the target (its last, max_batch_tokens "
        "rounded down to granularity_tokens)"
    )
    constant_batch_steps: int
    steps_saved: int = Field(
        description="constant_batch_steps − total_steps; negative when the ramp takes more steps than the "
        "target batch over the same tokens (it does when it starts smaller)"
    )
    steps_saved_fraction: float = Field(description="steps_saved / constant_batch_steps")
    comparison: str = Field(description="what the saving is measured against, in words")
    loss_evaluated_from_tokens: float = Field(
        description="the smallest token count the loss fit was made on; earlier phases take the loss there"
    )
    data_efficiency: float = Field(
        description="E_min/E of the ramp: the fraction of its tokens that count, a token at batch B doing "
        "1/(1 + B/B_crit) of the work of one at a vanishing batch (Kaplan et al. 2020 Eq. 5.5); 0.5 = "
        "the batch at B_crit throughout"
    )
    constant_batch_data_efficiency: float = Field(
        description="the same for the constant batch over the same tokens: the data a ramp saves is "
        "the gap between the two"
    )
    granularity_tokens: float
    critical_batch_rule: str
    loss_predictor: str


class BatchAdviceRead(ApiModel):
    loss: float | None = Field(description="the loss used (nats per token); null when none was needed")
    loss_source: str | None
    critical_batch: CriticalBatchRead
    noise_scale: NoiseScaleRead | None
    tradeoff: TradeoffRead = Field(description="where the current batch sits")
    recommendation: BatchRecommendationRead
    gradient_accumulation: GradientAccumulationRead | None
    ramp: BatchRampRead | None
    convention: str
