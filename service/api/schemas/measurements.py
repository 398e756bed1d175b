"""Measurements of a stored run: what a training job reports each step and what it reads back."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, NotRequired

from pydantic import AfterValidator, ConfigDict, Field, Strict, with_config
from pydantic_core import PydanticCustomError
from typing_extensions import TypedDict

from service.api.schemas.common import ApiModel, ThroughputIn
from service.api.schemas.fields import (
    ISO_8601_DATE_TIME_PATTERN,
    StrictFloat,
    StrictInt,
    UtcDatetime,
)
from service.api.schemas.rules import RULE_IN_DESCRIPTION, exactly_one, exactly_one_with, together
from service.api.schemas.runs import RunSummary

_Positive = Annotated[StrictFloat | None, Field(gt=0)]
_PositiveCount = Annotated[StrictInt | None, Field(gt=0, le=10**12)]
THROUGHPUT_FORMS = (
    "tokens_per_second",
    "tokens_per_second_per_device",
    "step_time_seconds",
    "sequences_per_second",
)


_RATE_FORMS = frozenset(THROUGHPUT_FORMS) - {"step_time_seconds"}
#: ThroughputIn's cross-field rules, stated in the schema (service.api.schemas.rules).
THROUGHPUT_RULES = (
    exactly_one(*THROUGHPUT_FORMS),
    exactly_one_with("step_time_seconds", "global_batch_tokens", "global_batch_sequences"),
)


@with_config(
    ConfigDict(
        extra="forbid",
        allow_inf_nan=False,
        title="ThroughputItem",
        json_schema_extra={"allOf": list(THROUGHPUT_RULES)},
    )
)
class ThroughputItem(TypedDict, total=False):
    """One measured throughput, in exactly one of four forms: ``tokens_per_second`` (global),
    ``tokens_per_second_per_device``, ``step_time_seconds`` with ``global_batch_tokens`` or
    ``global_batch_sequences``, or ``sequences_per_second`` (global samples/s)."""

    # ThroughputIn as a plain dict (same fields, constraints and rules; a test holds the two to the
    # same answers): ingest validates up to 10,000 per request.
    tokens_per_second: _Positive
    tokens_per_second_per_device: _Positive
    step_time_seconds: _Positive
    global_batch_tokens: _PositiveCount
    global_batch_sequences: _PositiveCount
    sequences_per_second: _Positive


def _one_throughput_form(value: ThroughputItem) -> ThroughputItem:
    """ThroughputIn's rule: exactly one form; a batch size with a step time, and only then."""
    if len(value) == 1:  # the common case, decided without building anything
        ((name, given),) = value.items()
        if given is not None and name in _RATE_FORMS:
            return value
    forms = [name for name in THROUGHPUT_FORMS if value.get(name) is not None]
    if len(forms) != 1:
        raise ValueError(
            "give exactly one throughput form: tokens_per_second, tokens_per_second_per_device, "
            "step_time_seconds (+ global_batch_tokens or global_batch_sequences), or sequences_per_second"
            + (f" (got {', '.join(forms)})" if forms else "")
        )
    batch_given = (value.get("global_batch_tokens") is not None) + (
        value.get("global_batch_sequences") is not None
    )
    if forms[0] == "step_time_seconds" and batch_given != 1:
        raise ValueError(
            "with step_time_seconds give exactly one of global_batch_tokens or global_batch_sequences"
        )
    if forms[0] != "step_time_seconds" and batch_given:
        raise ValueError("global_batch_tokens / global_batch_sequences go with step_time_seconds only")
    return value


_NOISE_FIELDS = ("grad_norm_sq_small", "grad_norm_sq_big", "batch_small_tokens", "batch_big_tokens")


# Each field's type and bounds, shared by the contract's MeasurementIn and the direct path's
# MeasurementFields below.
_Step = Annotated[StrictInt, Field(ge=0, le=10**12, description="completed optimizer steps")]
_Loss = Annotated[StrictFloat | None, Field(ge=0, description="nats per token")]
_MemoryBytes = Annotated[
    StrictInt | None, Field(ge=0, le=10**15, description="device memory in use (peak allocated), bytes")
]
_GradNormSqSmall = Annotated[
    StrictFloat | None, Field(ge=0, description="|G|² at batch_small_tokens (McCandlish et al. 2018 App. A)")
]
_GradNormSqBig = Annotated[StrictFloat | None, Field(ge=0, description="|G|² at batch_big_tokens")]
_BatchSmallTokens = Annotated[StrictInt | None, Field(gt=0, le=10**12)]
_BatchBigTokens = Annotated[
    StrictInt | None, Field(gt=0, le=10**12, description="larger than batch_small_tokens")
]


@with_config(
    ConfigDict(
        extra="forbid",
        allow_inf_nan=False,
        title="MeasurementIn",
        json_schema_extra={"allOf": [together(*_NOISE_FIELDS)]},
    )
)
class MeasurementIn(TypedDict):
    """One measurement. A (run, step) is stored once: a repeated step is ignored (first write wins)."""

    # A TypedDict rather than a model: ingest validates up to 10,000 per request straight from the
    # JSON, and plain dicts are several times cheaper to build than model instances.

    step: _Step
    time: NotRequired[Annotated[UtcDatetime | None, Field(description="when it was measured; default: now")]]
    throughput: Annotated[ThroughputItem, AfterValidator(_one_throughput_form)]
    loss: NotRequired[_Loss]
    memory_bytes: NotRequired[_MemoryBytes]
    grad_norm_sq_small: NotRequired[_GradNormSqSmall]
    grad_norm_sq_big: NotRequired[_GradNormSqBig]
    batch_small_tokens: NotRequired[_BatchSmallTokens]
    batch_big_tokens: NotRequired[_BatchBigTokens]


@with_config(ConfigDict(extra="forbid", allow_inf_nan=False))
class MeasurementFields(TypedDict):
    """MeasurementIn's fields checked by pydantic alone, without the rules it runs in Python per item
    (the throughput's form, the noise readings together, the time's text and its year in UTC): the
    direct path of a list body (service.api.measurement_request) checks those once over the list,
    where calling them per item was about a third of its validation. The time stays text here."""

    step: _Step
    time: NotRequired[Annotated[str, Strict(), Field(pattern=ISO_8601_DATE_TIME_PATTERN)] | None]
    throughput: ThroughputItem
    loss: NotRequired[_Loss]
    memory_bytes: NotRequired[_MemoryBytes]
    grad_norm_sq_small: NotRequired[_GradNormSqSmall]
    grad_norm_sq_big: NotRequired[_GradNormSqBig]
    batch_small_tokens: NotRequired[_BatchSmallTokens]
    batch_big_tokens: NotRequired[_BatchBigTokens]


def _noise_readings_together(item: MeasurementIn) -> MeasurementIn:
    if item.keys().isdisjoint(_NOISE_FIELDS):  # the common case
        return item
    given = [name for name in _NOISE_FIELDS if item.get(name) is not None]
    if given and len(given) != len(_NOISE_FIELDS):
        raise ValueError(
            "gradient-noise readings go together: grad_norm_sq_small, grad_norm_sq_big, "
            "batch_small_tokens and batch_big_tokens"
        )
    if given and item["batch_big_tokens"] <= item["batch_small_tokens"]:  # type: ignore[operator]
        raise PydanticCustomError(
            RULE_IN_DESCRIPTION, "batch_big_tokens must be larger than batch_small_tokens"
        )
    return item


def rules_hold(items: list[MeasurementFields]) -> bool:
    """Whether every item passes MeasurementIn's per-item rules on the throughput and the noise
    readings (each item validated as MeasurementFields)."""
    try:
        for item in items:
            _one_throughput_form(item["throughput"])
            _noise_readings_together(item)  # type: ignore[arg-type]  # the same keys and types
    except ValueError:  # PydanticCustomError is one
        return False
    return True


#: What the ingest endpoint validates each item against.
MeasurementItem = Annotated[MeasurementIn, AfterValidator(_noise_readings_together)]


# Plausible on any of the docs' runs whatever their device count (8 for the first demo run, 64 for the
# run example): about 6,000 tokens/s per H100 is torchtitan's Llama 3.1 8B figure
# (validation/published_runs.json).
MEASUREMENT_EXAMPLE: dict[str, Any] = {
    "step": 1200,
    "time": "2026-12-02T12:00:00Z",
    "throughput": {"tokens_per_second_per_device": 6100.0},
    "loss": 2.31,
    "memory_bytes": 61_000_000_000,
}
MEASUREMENTS_EXAMPLE: list[dict[str, Any]] = [
    MEASUREMENT_EXAMPLE,
    {
        "step": 1300,
        "time": "2026-12-02T12:06:00Z",
        "throughput": {"tokens_per_second_per_device": 6050.0},
        "loss": 2.29,
    },
]


class MeasurementRead(ApiModel):
    step: int
    time: datetime
    throughput: ThroughputIn = Field(description="as sent")
    tokens_per_second: float = Field(description="global tokens/s the throughput amounts to")
    tokens_per_second_per_device: float
    mfu: float
    hfu: float
    achieved_tflops_per_device: float
    loss: float | None
    memory_bytes: int | None
    grad_norm_sq_small: float | None
    grad_norm_sq_big: float | None
    batch_small_tokens: int | None
    batch_big_tokens: int | None


class MeasurementPage(ApiModel):
    items: list[MeasurementRead]
    next_cursor: str | None = Field(description="pass as `cursor` for the next page; null on the last")
    limit: int


class MeasurementsAdded(ApiModel):
    run_id: str
    received: int
    stored: int
    ignored_steps: list[int] = Field(
        description="steps already stored for this run (or repeated in this request): not changed"
    )
    summary: RunSummary
