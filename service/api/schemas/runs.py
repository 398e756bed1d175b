"""Stored runs and their measurements: what a scheduler sends and what it reads back."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from service.api.schemas.calibration import CalibrationRead
from service.api.schemas.common import (
    ApiModel,
    ConventionName,
    HardwareRead,
    HardwareRef,
    ModelRef,
    PrecisionName,
)
from service.api.schemas.fields import Text, UtcDatetime
from service.api.schemas.goodput import RunGoodputSummary
from service.api.schemas.layout import LayoutRead, RunLayoutIn, RunLayoutRead
from service.api.schemas.predictions import BreakdownComponentName
from service.api.schemas.rules import (
    exactly_one,
    not_both,
    only_with,
    states,
)
from service.domain import run as run_domain

RunStatus = Literal["running", "finished", "failed"]
SizeClassName = Literal["below_1b", "1b_to_10b", "10b_to_100b", "above_100b"]
RunSort = Literal["started_at", "median_mfu"]
SortOrder = Literal["asc", "desc"]

# Unicode's White_Space characters, spelled out rather than ``\s`` because the dialects disagree (Python's
# ``\s`` adds \x1c-\x1f, ECMA-262's, the JSON Schema dialect, adds U+FEFF). Every rule of a tag applies to
# the string as sent, so the schema a client validates against and the server agree on every input; only
# then are the surrounding blanks stripped ("pretrain " is stored as "pretrain").
_WHITESPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
_WHITESPACE_CLASS = r"\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
Tag = Annotated[
    str,
    StringConstraints(
        min_length=1,
        max_length=100,
        pattern=rf"^[{_WHITESPACE_CLASS}]*[^{_WHITESPACE_CLASS},\x00][^,\x00]*$",
    ),
    AfterValidator(lambda tag: tag.strip(_WHITESPACE)),
]
MAX_TAGS = run_domain.MAX_TAGS

_CREATE_EXAMPLE: dict[str, Any] = {
    "model": {"preset": "llama3-8b"},
    "hardware": {"accelerator": "h100-sxm", "device_count": 64},
    "precision": "bf16",
    "seq_len_tokens": 8192,
    "global_batch_tokens": 4194304,
    "parallelism": {"tp": 2, "pp": 1, "cp": 1, "micro_batch_sequences": 2, "zero_stage": 1},
    "framework": "megatron-lm 0.9",
    "cluster": "eu-west-a",
    "scheduler_job_id": "slurm-123456",
    "attempt": 0,
    "tags": ["pretrain", "llama3"],
    "token_budget_tokens": 1000000000000,
    "price_per_device_hour": 2.5,
}


@states(
    exactly_one("global_batch_tokens", "global_batch_sequences"),
    only_with("attempt", "scheduler_job_id"),
    only_with("scheduler_job_id", "cluster"),
)
class RunCreate(ApiModel):
    """A training run as the scheduler knows it when the job starts."""

    model_config = ConfigDict(json_schema_extra={"examples": [_CREATE_EXAMPLE]})

    model: ModelRef
    hardware: HardwareRef
    precision: PrecisionName = "bf16"
    seq_len_tokens: Annotated[int, Field(gt=0, le=100_000_000)]
    global_batch_tokens: Annotated[int, Field(gt=0, le=10**12)] | None = Field(
        default=None, description="tokens per optimizer step (or give global_batch_sequences)"
    )
    global_batch_sequences: Annotated[int, Field(gt=0, le=10**9)] | None = Field(
        default=None, description="sequences per optimizer step (tokens = sequences × seq_len_tokens)"
    )
    parallelism: RunLayoutIn = Field(
        default_factory=RunLayoutIn,
        description="how the job is split: the knobs of the performance endpoints' layout (dp may be left "
        "to the device count)",
    )
    framework: Text | None = Field(default=None, max_length=100, examples=["megatron-lm 0.9"])
    cluster: Text | None = Field(default=None, min_length=1, max_length=200)
    scheduler_job_id: Text | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="the scheduler's job id; with cluster and attempt it names one run per tenant",
    )
    attempt: Annotated[int, Field(ge=0, le=1_000_000)] | None = Field(
        default=None, description="restart attempt of the job (default 0 when a job id is given)"
    )
    tags: list[Tag] = Field(default_factory=list, max_length=MAX_TAGS)
    token_budget_tokens: Annotated[int, Field(gt=0, le=10**16)] | None = Field(
        default=None, description="tokens the run is meant to train on"
    )
    price_per_device_hour: Annotated[float, Field(gt=0, le=1_000_000)] | None = Field(
        default=None, description="price of one device for one hour, in the caller's currency"
    )
    convention: ConventionName = Field(default="palm", description="FLOPs convention for MFU")
    started_at: UtcDatetime | None = Field(default=None, description="default: now (UTC)")

    @model_validator(mode="after")
    def _consistent(self) -> RunCreate:
        if (self.global_batch_tokens is None) == (self.global_batch_sequences is None):
            raise ValueError("give exactly one of global_batch_tokens or global_batch_sequences")
        if self.scheduler_job_id is not None and self.cluster is None:
            raise ValueError("scheduler_job_id needs cluster: job ids are unique within a cluster only")
        if self.attempt is not None and self.scheduler_job_id is None:
            raise ValueError("attempt goes with scheduler_job_id")
        return self


class RunParameterCountsRead(ApiModel):
    total: int = Field(description="every parameter (all experts of a MoE)")
    active_per_token: int
    non_embedding: int


class RunSummary(ApiModel):
    """Kept up to date on every ingest (no history is read to answer it)."""

    measurement_count: int
    first_measured_at: datetime | None
    latest_step: int | None = Field(description="the highest step measured")
    latest_measured_at: datetime | None = Field(description="time of the highest step")
    latest_mfu: float | None
    median_mfu: float | None = Field(
        description="median MFU over all measurements, read from the run's histogram (within 0.001)"
    )
    latest_tokens_per_second: float | None
    tokens_so_far: int = Field(description="latest_step × global_batch_tokens (a step is a completed update)")
    seconds_to_budget: float | None = Field(
        description="time left to token_budget_tokens at the latest measured tokens/s"
    )


class RunLinks(ApiModel):
    self: str
    measurements: str
    efficiency: str


class RunRead(ApiModel):
    id: str
    status: RunStatus
    started_at: datetime
    finished_at: datetime | None
    created_at: datetime
    updated_at: datetime
    model: ModelRef = Field(description="as sent")
    model_name: str = Field(description="preset id, the dimensions' name, or the config's name")
    parameters: RunParameterCountsRead
    size_class: SizeClassName = Field(description="by total parameters: <1B, 1-10B, 10-100B, ≥100B")
    hardware: HardwareRead = Field(description="as sent, in today's names")
    accelerator_id: str = Field(description="catalog id, or `custom`")
    accelerator_name: str
    device_count: int
    precision: PrecisionName
    seq_len_tokens: int
    global_batch_tokens: int
    global_batch_sequences: int | None
    parallelism: RunLayoutRead
    framework: str | None
    cluster: str | None
    scheduler_job_id: str | None
    attempt: int | None
    tags: list[str]
    token_budget_tokens: int | None
    price_per_device_hour: float | None
    convention: ConventionName
    model_flops_per_token: float = Field(description="training FLOPs per token, no recomputation (MFU)")
    hardware_flops_per_token: float = Field(description="with the declared recomputation (HFU)")
    peak_tflops_per_device: float = Field(description="dense peak at the run's precision")
    summary: RunSummary
    links: RunLinks


class RunPage(ApiModel):
    items: list[RunRead]
    next_cursor: str | None = Field(description="pass as `cursor` for the next page; null on the last")
    limit: int
    sort: RunSort
    order: SortOrder


@states(not_both("tags", "add_tags", "remove_tags"))
class RunUpdate(ApiModel):
    """Change status, tags, finish time, budget or price. ``running`` → ``finished`` | ``failed``;
    those two are final (another status is 409; the same one again is a no-op). ``tags`` replaces the
    tag set; ``add_tags`` / ``remove_tags`` edit it (not together with ``tags``)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"add_tags": ["reviewed"], "price_per_device_hour": 2.5},
                {"status": "finished", "add_tags": ["baseline"]},
            ]
        }
    )

    status: RunStatus | None = None
    finished_at: UtcDatetime | None = Field(
        default=None, description="default: now, when the status becomes finished or failed"
    )
    tags: list[Tag] | None = Field(default=None, max_length=MAX_TAGS)
    add_tags: list[Tag] | None = Field(default=None, max_length=MAX_TAGS)
    remove_tags: list[Tag] | None = Field(default=None, max_length=MAX_TAGS)
    token_budget_tokens: Annotated[int, Field(gt=0, le=10**16)] | None = Field(
        default=None, description="null clears it"
    )
    price_per_device_hour: Annotated[float, Field(gt=0, le=1_000_000)] | None = Field(
        default=None, description="null clears it"
    )

    @model_validator(mode="after")
    def _one_way_to_tag(self) -> RunUpdate:
        if self.tags is not None and (self.add_tags is not None or self.remove_tags is not None):
            raise ValueError("give tags (replace) or add_tags/remove_tags (edit), not both")
        return self


# --------------------------------------------------------------------------------------------------
# Efficiency


class MfuDistribution(ApiModel):
    median: float | None
    p10: float | None
    p90: float | None
    latest: float | None
    latest_hfu: float | None
    bin_width: float = Field(description="resolution of the histogram the percentiles are read from")


class MfuTrend(ApiModel):
    slope_mfu_per_hour: float | None = Field(description="least-squares slope against hours measured")
    first_quartile_mean_mfu: float = Field(
        description="mean MFU of the first quarter of measurements (by time)"
    )
    last_quartile_mean_mfu: float
    quartile_change: float = Field(description="last minus first quarter, MFU fraction")
    quartile_change_relative: float | None = Field(description="quartile_change ÷ first quarter")
    hours_covered: float
    measurements: int
    method: str


class SeriesPointRead(ApiModel):
    time: datetime
    hours_since_first: float
    step: int | None = Field(description="highest step in the point")
    mfu: float = Field(description="mean MFU of the measurements the point stands for")
    mfu_min: float
    mfu_max: float
    tokens_per_second: float | None
    measurements: int


class PredictedLossRead(ApiModel):
    """One component of the predicted step that is not useful model FLOPs."""

    component: BreakdownComponentName
    name: str = Field(description="in plain language, with the layout's numbers")
    seconds: float = Field(description="predicted seconds per step")
    mfu_points: float = Field(description="MFU it costs, in percentage points of the dense peak")
    what_to_try: str


class RunPredictionRead(ApiModel):
    """Predicted against measured for a stored run. MFU under the run's `convention` on both sides;
    the measured side is the median over its measurements."""

    calibration: CalibrationRead = Field(
        description="the fleet calibration of the run's accelerator when one can be fitted, else the "
        "defaults (`source` says which)"
    )
    layout: LayoutRead = Field(description="the run's layout as predicted, defaults resolved")
    global_batch_sequences: int
    micro_batches_per_step: int
    predicted_step_time_seconds: float
    predicted_tokens_per_second: float
    predicted_mfu: float
    measured_median_mfu: float | None = Field(description="null before the first measurement")
    measured_tokens_per_second_at_median: float | None = Field(
        description="the global tokens/s the median MFU amounts to"
    )
    measured_step_time_seconds_at_median: float | None
    mfu_gap_points: float | None = Field(
        description="predicted − measured MFU in percentage points: what the model does not explain "
        "(positive: the run is slower than predicted)"
    )
    measured_to_predicted: float | None = Field(description="measured ÷ predicted MFU")
    largest_losses: list[PredictedLossRead] = Field(
        description="the costliest components of the predicted step, largest first (at most 3)"
    )
    reading: str = Field(description="where the run loses most, in one line")
    assumptions: list[str]
    warnings: list[str]


class RunEfficiency(ApiModel):
    run_id: str
    status: RunStatus
    convention: ConventionName
    precision: PrecisionName
    peak_tflops_per_device: float
    measurement_count: int
    mfu: MfuDistribution
    trend: MfuTrend | None
    series: list[SeriesPointRead] = Field(description="MFU over time, at most 240 points (bucket means)")
    tokens_so_far: int
    tokens_method: str
    current_tokens_per_second: float | None = Field(description="the latest measurement's")
    token_budget_tokens: int | None
    budget_fraction_done: float | None
    seconds_to_budget: float | None = Field(
        description="at the latest tokens/s (null if too long for a number)"
    )
    estimated_budget_reached_at: datetime | None = Field(description="null past 9999-12-31T23:59:59.999999Z")
    budget_reached_after_year_9999: bool = Field(
        default=False, description="the budget date lies past the last date-time (reached_at is null)"
    )
    prediction: RunPredictionRead | None = Field(
        default=None,
        description="the run's step predicted from its recorded layout (POST /v1/predictions/step under "
        "the fleet calibration of its accelerator) against its measured median MFU, with where it loses; "
        "null when the run does not record enough to predict (`prediction_note` says what to give)",
    )
    prediction_note: str | None = Field(
        default=None, description="why `prediction` is null and which run fields would give one"
    )
    goodput: RunGoodputSummary | None = Field(
        default=None,
        description="where the job's allocated wall-clock went (goodput, badput by kind) and effective "
        "MFU = MFU × goodput, over the attempts of the run's job; null when the job has no events "
        "(POST /v1/runs/{run_id}/events)",
    )


# --------------------------------------------------------------------------------------------------
# Compare


class RunCompareRequest(ApiModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"run_ids": ["run_5f0c2a9b1d3e4f6a7b8c", "run_9e8d7c6b5a4f3e2d1c0b"]}]
        }
    )

    run_ids: list[Annotated[Text, Field(min_length=1, max_length=32)]] = Field(
        min_length=2, max_length=20, json_schema_extra={"uniqueItems": True}
    )

    @model_validator(mode="after")
    def _distinct(self) -> RunCompareRequest:
        if len(set(self.run_ids)) != len(self.run_ids):
            raise ValueError("run_ids must be distinct")
        return self


ConfigValue = str | int | float | bool | None


class RunComparisonItem(ApiModel):
    run_id: str
    status: RunStatus
    model_name: str
    accelerator_id: str
    device_count: int
    median_mfu: float | None
    latest_mfu: float | None
    median_tflops_per_device: float | None = Field(
        description="achieved TFLOP/s per device at the median MFU"
    )
    median_tokens_per_second_per_device: float | None
    latest_tokens_per_second_per_device: float | None
    cost_per_billion_tokens: float | None = Field(
        description="at the median throughput, when price_per_device_hour is known"
    )
    tokens_so_far: int
    token_budget_tokens: int | None
    seconds_to_budget: float | None = Field(description="at the latest measured tokens/s")
    seconds_for_budget_at_median: float | None = Field(
        description="the whole token budget at the median throughput"
    )
    configuration: dict[str, ConfigValue]


class RunComparison(ApiModel):
    runs: list[RunComparisonItem]
    differing_fields: list[str] = Field(
        description="configuration fields whose values differ across the runs"
    )
    same_fields: dict[str, ConfigValue] = Field(description="configuration every run shares")
    best_median_mfu_run_id: str | None
