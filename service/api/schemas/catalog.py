"""Schemas of the read-only catalogs: model presets and accelerators."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from service.api.schemas.common import ApiModel, PrecisionName


class ModelParameterCountsRead(ApiModel):
    total: int = Field(description="every parameter")
    embedding: int = Field(description="token (input and untied output) and learned position embeddings")
    non_embedding: int = Field(description="total − embedding (Kaplan's N)")
    active_per_token: int = Field(description="what one token uses (MoE: only its routed experts)")
    attention: int
    mlp: int
    norms: int


class ModelPresetSummary(ApiModel):
    id: str
    display_name: str
    family: str
    total_parameters: int
    active_parameters_per_token: int
    published_parameters: float | None = Field(description="the size its authors state, where they do")
    source: str


class ModelPresetRead(ModelPresetSummary):
    dimensions: dict[str, Any] = Field(
        description="the architecture, usable as the `dimensions` of a model description"
    )
    other_architecture_details: dict[str, Any] = Field(
        description="what only the preset itself carries (MLA ranks, norm layout, ...): a request naming the "
        "preset uses them, `dimensions` alone does not"
    )
    parameter_counts: ModelParameterCountsRead


class ModelPresetList(ApiModel):
    items: list[ModelPresetSummary]
    count: int


class AcceleratorRead(ApiModel):
    id: str
    display_name: str
    vendor: str
    peak_tflops: dict[PrecisionName, float | None] = Field(
        description="dense (no 2:4 sparsity) peak TFLOP/s per precision, per device; null = unsupported"
    )
    supported_precisions: list[str]
    memory_bytes: int | None
    hbm_bandwidth_bytes_per_second: float | None
    intra_node_bandwidth_bytes_per_second: float | None = Field(description="one direction, per device")
    intra_node_link: str | None
    tdp_watts: float | None
    device_granularity: str = Field(description="what one framework device is (e.g. one MI250X GCD)")
    uncertain_fields: list[str] = Field(description="values from a single or disputed source")
    notes: str
    sources: list[str]


class AcceleratorList(ApiModel):
    items: list[AcceleratorRead]
    count: int
