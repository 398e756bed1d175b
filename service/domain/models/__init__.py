"""Model descriptions: dimensions, parameter counts, Hugging Face configs and well-known presets.

A :class:`ModelSpec` is the only thing the FLOPs and memory code needs to know about a model. It is
built from explicit dimensions (:func:`build_model_spec`), from a Hugging Face ``config.json`` object
(:func:`from_hf_config`, in :mod:`service.domain.models.hf_config`) or taken from :data:`PRESETS`
(:mod:`service.domain.models.presets`). Parameter counts are derived from the dimensions
(:func:`count_parameters`), never typed in; the presets carry the published count beside them so the
tests can check the derivation.

Validation errors carry ``field`` = the :class:`ModelSpec` attribute (or the ``config.json`` key) at
fault; the API layer prefixes it with the request path (``model.``, ``model.hf_config.``).
"""

from service.domain.models.hf_config import SUPPORTED_HF_MODEL_TYPES, from_hf_config
from service.domain.models.presets import PRESETS, Preset, get_preset
from service.domain.models.spec import (
    FFN_KINDS,
    NORM_KINDS,
    POSITION_EMBEDDINGS,
    QK_NORMS,
    FfnKind,
    LayerParameters,
    ModelSpec,
    NormKind,
    ParameterCounts,
    PositionEmbedding,
    QkNorm,
    build_model_spec,
    count_parameters,
    layer_parameters,
)

__all__ = [
    "FFN_KINDS",
    "NORM_KINDS",
    "POSITION_EMBEDDINGS",
    "PRESETS",
    "QK_NORMS",
    "SUPPORTED_HF_MODEL_TYPES",
    "FfnKind",
    "LayerParameters",
    "ModelSpec",
    "NormKind",
    "ParameterCounts",
    "PositionEmbedding",
    "Preset",
    "QkNorm",
    "build_model_spec",
    "count_parameters",
    "from_hf_config",
    "get_preset",
    "layer_parameters",
]
