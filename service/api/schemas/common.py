"""Schemas every endpoint shares: the model description, the hardware reference, the throughput
forms and the enumerations of precision, recomputation and FLOPs convention.

A model is named one of three ways (exactly one): a preset id, explicit dimensions, or a Hugging
Face ``config.json`` object. Hardware is a catalog id, a framework device-name string, or a custom
part. Throughput is one of four forms. :mod:`service.api.resolve` turns them into domain values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.json_schema import GetJsonSchemaHandler, JsonSchemaValue
from pydantic_core import core_schema

from service.api.schemas import rules
from service.api.schemas.fields import (
    Bandwidth,
    DeviceCount,
    JsonObject,
    StrictFloat,
    StrictInt,
    Text,
    field_error,
)
from service.api.schemas.rules import exactly_one, exactly_one_with, not_both, states

PrecisionName = Literal["bf16", "fp16", "fp8", "tf32", "fp32", "fp64"]
RecomputeName = Literal["none", "selective", "full"]
ConventionName = Literal["palm", "6n", "kaplan", "hf_trainer", "megatron", "megatron_causal"]
EmbeddingPolicyName = Literal["all", "exclude_input", "exclude_all"]

PositiveInt = Annotated[int, Field(gt=0, le=10**12)]
#: The sequence length every model-based request takes (tokens per training sequence).
SEQ_LEN_FIELD: Any = Field(le=10_000_000, description="tokens per sequence (context length used in training)")
PositiveFloat = Annotated[float, Field(gt=0)]
StrictPositiveInt = Annotated[StrictInt, Field(gt=0, le=10**12)]
StrictPositiveFloat = Annotated[StrictFloat, Field(gt=0)]


class ApiModel(BaseModel):
    """Base of every request and response schema.

    Unknown fields are rejected (a misspelt ``tokens_per_sec`` must not silently give another
    answer); NaN and Infinity are refused wherever a number is expected. Strict: a JSON value must
    have the type the contract says (``"5"`` and ``true`` are not numbers, ``0`` is not a boolean,
    ``5.0`` is not an integer); only date-times are parsed from their text (fields.UtcDatetime).
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True, strict=True)

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        # Defined here, where pydantic collects it for every subclass as it is built: the
        # cross-field rules a model states (service.api.schemas.rules.states) join its schema.
        json_schema = handler(schema)
        rules.add_to_json_schema(cls, handler.resolve_ref_schema(json_schema))
        return json_schema


class ModelDimensions(ApiModel):
    """A decoder-only transformer by its dimensions. Omitted fields take the usual defaults:
    ``n_kv_heads`` = ``n_heads``, ``head_dim`` = ``d_model / n_heads``, ``d_ff`` = 4·d_model (plain)
    or Llama's 8/3·d_model rounded up to 256 (gated)."""

    name: Text = Field(default="custom", max_length=200)
    n_layers: PositiveInt
    d_model: PositiveInt
    n_heads: PositiveInt
    n_kv_heads: PositiveInt | None = None
    head_dim: PositiveInt | None = None
    d_ff: PositiveInt | None = None
    ffn_kind: Literal["plain", "gated"] = Field(
        default="gated", description="plain: up+down (GeLU/ReLU); gated: gate+up+down (SwiGLU/GeGLU)"
    )
    vocab_size: PositiveInt
    tied_embeddings: bool = False
    position_embedding: Literal["learned", "rope", "alibi", "none"] = "rope"
    max_position_embeddings: PositiveInt | None = None
    norm_kind: Literal["layernorm", "rmsnorm"] = "rmsnorm"
    norm_has_bias: bool = Field(
        default=False, description="LayerNorm with a bias (GPT-2, OPT, MPT benchmarks)"
    )
    qkv_bias: bool = False
    attn_out_bias: bool = False
    mlp_bias: bool = False
    n_experts: Annotated[int, Field(ge=0, le=100_000)] = Field(default=0, description="0 = dense")
    experts_per_token: Annotated[int, Field(ge=0, le=100_000)] = 0
    expert_d_ff: Annotated[int, Field(ge=0)] = 0
    n_shared_experts: Annotated[int, Field(ge=0)] = 0
    shared_expert_d_ff: Annotated[int, Field(ge=0)] = 0
    first_k_dense_layers: Annotated[int, Field(ge=0)] = Field(default=0, description="leading dense layers")
    moe_layer_frequency: PositiveInt = Field(
        default=1, description="every k-th layer (after the dense ones) is MoE"
    )
    sliding_window: PositiveInt | None = Field(
        default=None, description="sliding-window attention span, tokens"
    )


@states(exactly_one("preset", "dimensions", "hf_config"))
class ModelRef(ApiModel):
    """Exactly one of ``preset``, ``dimensions`` or ``hf_config``."""

    preset: Text | None = Field(default=None, max_length=100, description="id from GET /v1/models")
    dimensions: ModelDimensions | None = None
    hf_config: JsonObject | None = Field(
        default=None,
        description="a Hugging Face config.json object (model_type llama, mistral, mixtral, qwen2, qwen2_moe, "
        "gemma, gemma2, gpt2, gpt_neox, opt, falcon, deepseek_v3)",
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> ModelRef:
        given = [name for name in ("preset", "dimensions", "hf_config") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of preset, dimensions or hf_config"
                + (f" (got {', '.join(given)})" if given else "")
            )
        return self


class CustomAccelerator(ApiModel):
    """A part the catalog lacks: dense (non-sparse) peaks in TFLOP/s per precision."""

    name: Text = Field(min_length=1, max_length=100)
    # Bounded below so that every time the models derive stays finite: a peak of 5e-324 TFLOP/s
    # (a subnormal the schema allowed) divided by zero downstream.
    peak_tflops: dict[PrecisionName, Annotated[float, Field(ge=1e-3, le=1e6)]] = Field(
        min_length=1, examples=[{"bf16": 989.4}], description="TFLOP/s per precision, 0.001 to 1,000,000"
    )
    memory_bytes: PositiveInt | None = None
    hbm_bandwidth_bytes_per_second: Bandwidth | None = None
    intra_node_bandwidth_bytes_per_second: Bandwidth | None = None
    tdp_watts: PositiveFloat | None = None


class RenamedFieldsModel(ApiModel):
    """Base of a request whose fields were renamed so that one concept has one name in every request
    (issue 20: ``hardware.count`` became ``device_count`` as in ``cluster``; an estimate's ``tokens``
    became ``token_budget_tokens`` as in a run). A subclass lists ``renamed_fields`` (old → new) and
    declares each old name as a deprecated field (:func:`old_name_of`), so the contract shows it.

    The old name is read as the new one; giving both is a 422 naming the old one. The schema says the
    same: the new name is not required where the old one may stand in for it, and each pair carries
    an exactly-one (required) or not-both (optional) rule. A model that only reads stored data in
    today's names (no old field declared) gets the folding and no rules."""

    renamed_fields: ClassVar[Mapping[str, str]] = {}

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        declared = [(old, new) for old, new in cls.renamed_fields.items() if old in cls.model_fields]
        pair_rules = [
            exactly_one(new, old) if cls.model_fields[new].is_required() else not_both(new, old)
            for old, new in declared
        ]
        if pair_rules:
            states(*pair_rules)(cls)

    @model_validator(mode="before")
    @classmethod
    def _read_old_names(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        folded: dict[str, Any] | None = None
        for old, new in cls.renamed_fields.items():
            if old not in data:
                continue
            folded = dict(data) if folded is None else folded
            value = folded.pop(old)
            if value is None:
                continue
            if data.get(new) is not None:
                raise field_error(old, f"{old} is the old name of {new}: give only {new}")
            folded[new] = value
        return data if folded is None else folded

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        # A new name is required unless its old name is given (the exactly_one rule says so).
        json_schema = super().__get_pydantic_json_schema__(schema, handler)
        target = handler.resolve_ref_schema(json_schema)
        stand_ins = {new for old, new in cls.renamed_fields.items() if old in cls.model_fields}
        required = [name for name in target.get("required", []) if name not in stand_ins]
        if required:
            target["required"] = required
        else:
            target.pop("required", None)
        return json_schema


def old_name_of(new: str) -> Any:
    """The field of a deprecated old name (declare it with the new field's type, made optional)."""
    return Field(
        default=None,
        description=f"deprecated: the old name of {new} (give one of the two)",
        json_schema_extra={"deprecated": True},
    )


@states(exactly_one("accelerator", "custom"))
class HardwareRef(RenamedFieldsModel):
    """Exactly one of ``accelerator`` (a catalog id such as ``h100-sxm`` or a device name a framework
    reports, such as ``NVIDIA H100 80GB HBM3``) or ``custom``, and the job's ``device_count`` (the name
    ``cluster`` and every answer use; ``count``, its name here before 2026-12, is still read)."""

    accelerator: Text | None = Field(default=None, min_length=1, max_length=100)
    custom: CustomAccelerator | None = None
    # Bounded like cluster.device_count: PostgreSQL stores it in a 32-bit integer (a fuzz found 5.1e9
    # answered 500 there, stored on SQLite).
    device_count: DeviceCount = Field(description="devices in the job, as the framework counts devices")
    count: DeviceCount | None = old_name_of("device_count")
    renamed_fields: ClassVar[Mapping[str, str]] = {"count": "device_count"}

    @model_validator(mode="after")
    def _exactly_one(self) -> HardwareRef:
        if (self.accelerator is None) == (self.custom is None):
            raise ValueError("give exactly one of accelerator (id or device name) or custom")
        return self


class HardwareRead(RenamedFieldsModel):
    """The hardware a run was described with, in today's names (runs stored before 2026-12 said
    ``count``; they read as ``device_count``)."""

    accelerator: str | None = None
    custom: CustomAccelerator | None = None
    device_count: int = Field(description="devices in the job, as the framework counts devices")
    renamed_fields: ClassVar[Mapping[str, str]] = {"count": "device_count"}


@states(
    exactly_one(
        "tokens_per_second", "tokens_per_second_per_device", "step_time_seconds", "sequences_per_second"
    ),
    exactly_one_with("step_time_seconds", "global_batch_tokens", "global_batch_sequences"),
)
class ThroughputIn(ApiModel):
    """One measured throughput, in exactly one of four forms: ``tokens_per_second`` (global),
    ``tokens_per_second_per_device``, ``step_time_seconds`` with ``global_batch_tokens`` or
    ``global_batch_sequences``, or ``sequences_per_second`` (global samples/s)."""

    # Strict like the measurement body's ThroughputItem (a test holds the two to the same answers):
    # "5" and true are not numbers, whichever endpoint receives them.
    tokens_per_second: StrictPositiveFloat | None = None
    tokens_per_second_per_device: StrictPositiveFloat | None = None
    step_time_seconds: StrictPositiveFloat | None = None
    global_batch_tokens: StrictPositiveInt | None = None
    global_batch_sequences: StrictPositiveInt | None = None
    sequences_per_second: StrictPositiveFloat | None = None

    @model_validator(mode="after")
    def _one_form(self) -> ThroughputIn:
        forms = [
            name
            for name in (
                "tokens_per_second",
                "tokens_per_second_per_device",
                "step_time_seconds",
                "sequences_per_second",
            )
            if getattr(self, name) is not None
        ]
        if len(forms) != 1:
            raise ValueError(
                "give exactly one throughput form: tokens_per_second, tokens_per_second_per_device, "
                "step_time_seconds (+ global_batch_tokens or global_batch_sequences), or sequences_per_second"
                + (f" (got {', '.join(forms)})" if forms else "")
            )
        batch_given = (self.global_batch_tokens is not None) + (self.global_batch_sequences is not None)
        if self.step_time_seconds is not None and batch_given != 1:
            raise ValueError(
                "with step_time_seconds give exactly one of global_batch_tokens or global_batch_sequences"
            )
        if self.step_time_seconds is None and batch_given:
            raise ValueError("global_batch_tokens / global_batch_sequences go with step_time_seconds only")
        return self
