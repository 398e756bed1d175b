"""Bounds and field definitions shared by the requests: the performance requests' layout fields
(memory, predictions, plans), and the types every request that reaches the store uses for text,
times and integers, so that no value the database cannot hold gets past validation (a NUL byte, a
time outside years 1-9999 once in UTC, an integer outside 64 bits were 500s on PostgreSQL)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BeforeValidator,
    Field,
    Strict,
    ValidationError,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from service.api.schemas.rules import RULE_IN_DESCRIPTION

#: PostgreSQL text cannot hold U+0000 ("invalid byte sequence for encoding UTF8: 0x00"; SQLite stores
#: it and every later comparison is surprising): refused in every text a request sends. The pattern is
#: the JSON schema's, so clients and fuzzers see the rule.
NO_NUL_PATTERN = r"^[^\x00]*$"
#: What a validation error says for that pattern (service.api.handlers rewrites pydantic's message).
NUL_MESSAGE = "must not contain the NUL character (\\u0000)"
#: Ids in paths and queries (run ids): not empty, no NUL.
RUN_ID_PATTERN = r"^[^\x00]+$"
#: Text without NUL bytes; give lengths with ``Field(min_length=..., max_length=...)``.
Text = Annotated[str, Field(pattern=NO_NUL_PATTERN)]


def _json_without_nul(value: Any) -> Any:
    """A free-form JSON object (a Hugging Face config) is stored as JSON: PostgreSQL's jsonb refuses
    ``\\u0000`` in any of its strings or keys, so it is refused here."""
    pending = [value]
    while pending:
        node = pending.pop()
        if isinstance(node, str):
            if "\x00" in node:
                raise PydanticCustomError(RULE_IN_DESCRIPTION, NUL_MESSAGE + " in any key or string")
        elif isinstance(node, dict):
            pending.extend(node.keys())
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    return value


#: A JSON object stored as sent, without NUL characters.
JsonObject = Annotated[
    dict[str, Any],
    AfterValidator(_json_without_nul),
    Field(description="a JSON object; no key or string in it may hold the NUL character (\\u0000)"),
]

#: BIGINT's range (PostgreSQL and SQLite integers are 64-bit signed): a larger filter value was a 500.
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


def is_stored_int(value: Any) -> bool:
    """An integer (not a boolean) that a BIGINT column can hold."""
    return isinstance(value, int) and not isinstance(value, bool) and INT64_MIN <= value <= INT64_MAX


#: A JSON integer, refused as a string (``"5"``), a boolean (``true``) or a float (``5.0``).
StrictInt = Annotated[int, Strict()]
#: A JSON number, refused as a string or a boolean.
StrictFloat = Annotated[float, Strict()]


def _representable_in_utc(value: datetime) -> datetime:
    """A time whose offset pushes it outside years 1-9999 in UTC (``0001-01-01T00:00:00+23:59``)
    cannot be stored or compared: refused, naming the field."""
    try:
        value.astimezone(UTC)
    except OverflowError:
        # A rule the schema states in words only (JSON Schema's date-time cannot bound the year in UTC).
        raise PydanticCustomError(
            RULE_IN_DESCRIPTION,
            "this time falls outside years 1-9999 once converted to UTC; give a time between "
            "0001-01-02 and 9999-12-30",
        ) from None
    return value


#: How a date-time's text must begin (checked before pydantic parses it, which takes more forms).
ISO_8601_DATE_TIME_PATTERN = r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}"
_ISO_8601_DATE_TIME = re.compile(ISO_8601_DATE_TIME_PATTERN)


def _iso_text(value: Any) -> Any:
    """The contract says ``format: date-time`` (RFC 3339 text): pydantic's lax parsing would also take
    a number or a numeric string as Unix seconds, which the schema does not allow."""
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str) or not _ISO_8601_DATE_TIME.match(value):
        raise ValueError("give an ISO 8601 date-time with an offset, such as 2026-01-31T12:00:00Z")
    return value


#: An ISO 8601 time with an offset (or Z) that stays within years 1-9999 in UTC. Lax (request models
#: are strict) so that JSON's text becomes a datetime, but text only.
UtcDatetime = Annotated[
    AwareDatetime,
    Strict(False),
    BeforeValidator(_iso_text),
    AfterValidator(_representable_in_utc),
    Field(description="ISO 8601 with an offset or Z, within years 1-9999 in UTC"),
]

#: Largest cluster a request may describe (devices).
MAX_DEVICES = 1_048_576
#: A job's device count, wherever a request gives one (PostgreSQL keeps it in a 32-bit integer).
DeviceCount = Annotated[int, Field(ge=1, le=MAX_DEVICES)]
#: Largest global batch in sequences (bounds the planner's micro-batch enumeration).
MAX_GLOBAL_BATCH_SEQUENCES = 16_777_216

OptimizerName = Literal["adam", "adam_mixed", "adam_fp32", "sgd_momentum", "adafactor", "adam_8bit"]
#: PyTorch FSDP ShardingStrategy names (their ZeRO stages: service.domain.parallel_layout.FSDP_ZERO_STAGES).
ZeroStageAlias = Literal["no_shard", "shard_grad_op", "full_shard"]

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


def field_error(field: str, message: str, *, code: str = "value_error") -> ValidationError:
    """A validation error located at ``field`` (raise it from a ``model_validator`` so the problem's
    ``errors[0].field`` names the field to change, not just ``body``). ``message`` must not hold braces."""
    return ValidationError.from_exception_data(
        "request",
        [InitErrorDetails(type=PydanticCustomError(code, message), loc=tuple(field.split(".")), input=None)],
    )
