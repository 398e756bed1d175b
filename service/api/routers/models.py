"""Model presets: well-known architectures and their parameter counts."""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Annotated

from fastapi import APIRouter, Path, Query

from service.api.json_body import StrictJsonRoute
from service.api.problems import NOT_FOUND, ProblemError
from service.api.schemas.catalog import (
    ModelParameterCountsRead,
    ModelPresetList,
    ModelPresetRead,
    ModelPresetSummary,
)
from service.api.schemas.fields import NO_NUL_PATTERN
from service.domain import models
from service.domain.errors import NotFound

router = APIRouter(tags=["models"], route_class=StrictJsonRoute)

# ModelSpec fields that are derived or internal and not part of the `dimensions` request schema.
_DIMENSION_FIELDS = (
    "name", "n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff", "ffn_kind", "vocab_size",
    "tied_embeddings", "position_embedding", "max_position_embeddings", "norm_kind", "norm_has_bias", "qkv_bias",
    "attn_out_bias", "mlp_bias",
    "n_experts", "experts_per_token", "expert_d_ff", "n_shared_experts", "shared_expert_d_ff",
    "first_k_dense_layers", "moe_layer_frequency", "sliding_window",
)  # fmt: skip


def _summary(preset: models.Preset) -> ModelPresetSummary:
    counts = models.count_parameters(preset.spec)
    return ModelPresetSummary(
        id=preset.id,
        display_name=preset.display_name,
        family=preset.family,
        total_parameters=counts.total,
        active_parameters_per_token=counts.active_per_token,
        published_parameters=preset.published_parameters,
        source=preset.source,
    )


@lru_cache(maxsize=256)
def _read(preset_id: str) -> ModelPresetRead:
    preset = models.get_preset(preset_id)
    counts = models.count_parameters(preset.spec)
    spec_fields = dataclasses.asdict(preset.spec)
    dimensions = {name: spec_fields[name] for name in _DIMENSION_FIELDS if spec_fields.get(name) is not None}
    # Fields only a preset or a config.json can set (MLA ranks, norm layout, ...), shown for reference.
    other = {name: value for name, value in spec_fields.items() if name not in _DIMENSION_FIELDS and value}
    return ModelPresetRead(
        **_summary(preset).model_dump(),
        dimensions=dimensions,
        other_architecture_details=other,
        parameter_counts=ModelParameterCountsRead(
            total=counts.total,
            embedding=counts.embedding,
            non_embedding=counts.non_embedding,
            active_per_token=counts.active_per_token,
            attention=counts.attention,
            mlp=counts.mlp,
            norms=counts.norms,
        ),
    )


@router.get("/models", summary="List the model presets")
async def list_model_presets(
    family: Annotated[
        str | None, Query(max_length=50, pattern=NO_NUL_PATTERN, description="only this family, e.g. llama")
    ] = None,
) -> ModelPresetList:
    items = [
        _summary(preset)
        for preset in models.PRESETS.values()
        if family is None or preset.family.lower() == family.lower()
    ]
    return ModelPresetList(items=items, count=len(items))


@router.get("/models/{preset_id}", summary="One model preset with its dimensions and parameter counts")
async def get_model_preset(preset_id: Annotated[str, Path(max_length=100)]) -> ModelPresetRead:
    try:
        return _read(preset_id.lower())
    except NotFound as exc:
        raise ProblemError(NOT_FOUND, exc.message, close_matches=list(exc.close_matches)) from None
