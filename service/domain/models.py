"""Model descriptions: dimensions, parameter counts, Hugging Face configs and well-known presets.

A :class:`ModelSpec` is the only thing the FLOPs and memory code needs to know about a model. It is
built from explicit dimensions (:func:`build_model_spec`), from a Hugging Face ``config.json`` object
(:func:`from_hf_config`) or taken from :data:`PRESETS`. Parameter counts are derived from the
dimensions (:func:`count_parameters`), never typed in; the presets carry the published count beside
them so the tests can check the derivation.

Validation errors carry ``field`` = the :class:`ModelSpec` attribute (or the ``config.json`` key) at
fault; the API layer prefixes it with the request path (``model.``, ``model.hf_config.``).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from service.domain.errors import InvalidInput, NotFound

FfnKind = Literal["plain", "gated"]
PositionEmbedding = Literal["learned", "rope", "alibi", "none"]
NormKind = Literal["layernorm", "rmsnorm"]

FFN_KINDS: tuple[str, ...] = ("plain", "gated")
POSITION_EMBEDDINGS: tuple[str, ...] = ("learned", "rope", "alibi", "none")
NORM_KINDS: tuple[str, ...] = ("layernorm", "rmsnorm")


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A decoder-only transformer, described by its dimensions.

    Attention: ``n_heads`` query heads of ``head_dim`` (so the attention width is
    ``n_heads * head_dim``, which need not equal ``d_model``: Gemma, GPT-3 13B), ``n_kv_heads`` key/value
    heads (== ``n_heads`` for multi-head, 1 for multi-query, in between for GQA). With ``kv_lora_rank``
    set the layer is DeepSeek multi-head latent attention (MLA; DeepSeek-V2 §2.1) and the ``qk_*`` /
    ``v_head_dim`` fields give the per-head widths.

    FFN: ``plain`` = two matrices (up, down; GeLU/ReLU), ``gated`` = three (gate, up, down;
    SwiGLU/GeGLU, Shazeer 2020). ``d_ff`` is the dense FFN width, used by every layer that is not MoE.

    MoE (``n_experts`` > 0): each MoE layer holds ``n_experts`` routed experts of width
    ``expert_d_ff`` (``experts_per_token`` of them active per token), ``n_shared_experts`` always-active
    experts of width ``shared_expert_d_ff`` and a router (``d_model × n_experts``, no bias). Layers
    ``0 .. first_k_dense_layers-1`` are dense; of the rest, layer ``i`` is MoE when
    ``(i + 1) % moe_layer_frequency == 0`` (every layer when the frequency is 1; Qwen2-MoE's
    ``decoder_sparse_step`` rule).

    ``norms_per_layer``: 2 for pre-norm blocks, 1 for parallel blocks with one shared norm (GPT-J,
    PaLM, Falcon-7B), 4 for Gemma 2's pre+post norms. ``embedding_norm``: a norm right after the
    token embedding (BLOOM). Sliding-window attention applies to ``n_sliding_window_layers`` layers
    (all layers when a window is set, half of them for Gemma 2).
    """

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    vocab_size: int
    ffn_kind: FfnKind = "gated"
    tied_embeddings: bool = False
    position_embedding: PositionEmbedding = "rope"
    max_position_embeddings: int | None = None
    norm_kind: NormKind = "rmsnorm"
    norm_has_bias: bool = False
    norms_per_layer: int = 2
    final_norm: bool = True
    embedding_norm: bool = False
    qkv_bias: bool = False
    attn_out_bias: bool = False
    mlp_bias: bool = False
    n_experts: int = 0
    experts_per_token: int = 0
    expert_d_ff: int = 0
    n_shared_experts: int = 0
    shared_expert_d_ff: int = 0
    first_k_dense_layers: int = 0
    moe_layer_frequency: int = 1
    sliding_window: int | None = None
    n_sliding_window_layers: int = 0
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def uses_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def qk_head_dim(self) -> int:
        """Per-head width of queries and keys (the QK^T contraction)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.uses_mla else self.head_dim

    @property
    def value_head_dim(self) -> int:
        """Per-head width of values (the AV product and the output projection's input)."""
        return self.v_head_dim if self.uses_mla else self.head_dim

    @property
    def attention_width(self) -> int:
        """H·Q of the PaLM formula: query heads times head width."""
        return self.n_heads * self.qk_head_dim

    @property
    def n_moe_layers(self) -> int:
        return _n_moe_layers(self)

    @property
    def n_dense_layers(self) -> int:
        return self.n_layers - self.n_moe_layers


@functools.lru_cache(maxsize=4096)
def _n_moe_layers(spec: ModelSpec) -> int:
    if not spec.n_experts:
        return 0
    freq = spec.moe_layer_frequency
    return sum(1 for i in range(spec.first_k_dense_layers, spec.n_layers) if (i + 1) % freq == 0)


def _require_positive(spec: ModelSpec, name: str) -> None:
    value = getattr(spec, name)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidInput(f"{name} must be a positive integer, got {value!r}.", field=name)


def _require_non_negative(spec: ModelSpec, name: str) -> None:
    value = getattr(spec, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"{name} must be an integer ≥ 0, got {value!r}.", field=name)


def _validate(spec: ModelSpec) -> None:
    if not isinstance(spec.name, str) or not spec.name.strip():
        raise InvalidInput("name must be a non-empty string.", field="name")
    for name in ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "vocab_size"):
        _require_positive(spec, name)
    for name in (
        "d_ff",
        "n_experts",
        "experts_per_token",
        "expert_d_ff",
        "n_shared_experts",
        "shared_expert_d_ff",
        "first_k_dense_layers",
        "n_sliding_window_layers",
        "qk_nope_head_dim",
        "qk_rope_head_dim",
        "v_head_dim",
    ):
        _require_non_negative(spec, name)
    if spec.n_kv_heads > spec.n_heads or spec.n_heads % spec.n_kv_heads:
        raise InvalidInput(
            f"n_heads ({spec.n_heads}) must be a multiple of n_kv_heads ({spec.n_kv_heads}); "
            "give n_kv_heads = n_heads for multi-head attention, 1 for multi-query, or a divisor for GQA.",
            field="n_kv_heads",
        )
    if spec.ffn_kind not in FFN_KINDS:
        raise InvalidInput(
            f"ffn_kind must be one of {', '.join(FFN_KINDS)} (gated = SwiGLU/GeGLU), got {spec.ffn_kind!r}.",
            field="ffn_kind",
        )
    if spec.position_embedding not in POSITION_EMBEDDINGS:
        raise InvalidInput(
            f"position_embedding must be one of {', '.join(POSITION_EMBEDDINGS)}, "
            f"got {spec.position_embedding!r}.",
            field="position_embedding",
        )
    if spec.position_embedding == "learned":
        if spec.max_position_embeddings is None:
            raise InvalidInput(
                "learned position embeddings need max_position_embeddings (the table's rows).",
                field="max_position_embeddings",
            )
        _require_positive(spec, "max_position_embeddings")
    if spec.norm_kind not in NORM_KINDS:
        raise InvalidInput(
            f"norm_kind must be one of {', '.join(NORM_KINDS)}, got {spec.norm_kind!r}.", field="norm_kind"
        )
    if spec.norm_kind == "rmsnorm" and spec.norm_has_bias:
        raise InvalidInput(
            "RMSNorm has no bias; set norm_has_bias false or norm_kind layernorm.", field="norm_has_bias"
        )
    if isinstance(spec.norms_per_layer, bool) or spec.norms_per_layer not in range(5):
        raise InvalidInput(
            f"norms_per_layer must be 0 to 4, got {spec.norms_per_layer!r}.", field="norms_per_layer"
        )
    if spec.n_experts:
        if not 1 <= spec.experts_per_token <= spec.n_experts:
            raise InvalidInput(
                f"experts_per_token must be between 1 and n_experts ({spec.n_experts}), "
                f"got {spec.experts_per_token}.",
                field="experts_per_token",
            )
        _require_positive(spec, "expert_d_ff")
        _require_positive(spec, "moe_layer_frequency")
        if spec.first_k_dense_layers > spec.n_layers:
            raise InvalidInput(
                f"first_k_dense_layers ({spec.first_k_dense_layers}) exceeds n_layers ({spec.n_layers}).",
                field="first_k_dense_layers",
            )
        if spec.n_shared_experts and not spec.shared_expert_d_ff:
            raise InvalidInput(
                "shared experts need shared_expert_d_ff (their FFN width).", field="shared_expert_d_ff"
            )
    elif spec.experts_per_token or spec.n_shared_experts or spec.expert_d_ff:
        raise InvalidInput(
            "experts_per_token, expert_d_ff and n_shared_experts need n_experts > 0; "
            "set n_experts for an MoE model or leave them 0 for a dense one.",
            field="n_experts",
        )
    if spec.n_layers - _n_moe_layers(spec) > 0 and spec.d_ff <= 0:
        raise InvalidInput("d_ff must be positive: the model has dense FFN layers.", field="d_ff")
    if spec.sliding_window is not None:
        _require_positive(spec, "sliding_window")
    if spec.n_sliding_window_layers > spec.n_layers:
        raise InvalidInput(
            f"n_sliding_window_layers ({spec.n_sliding_window_layers}) exceeds n_layers ({spec.n_layers}).",
            field="n_sliding_window_layers",
        )
    if spec.n_sliding_window_layers and spec.sliding_window is None:
        raise InvalidInput(
            "n_sliding_window_layers needs sliding_window (the window in tokens).", field="sliding_window"
        )
    if spec.kv_lora_rank is not None:
        for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            _require_positive(spec, name)
    if spec.q_lora_rank is not None:
        if spec.kv_lora_rank is None:
            raise InvalidInput("q_lora_rank is an MLA field: give kv_lora_rank too.", field="kv_lora_rank")
        _require_positive(spec, "q_lora_rank")


def build_model_spec(
    *,
    name: str,
    n_layers: int,
    d_model: int,
    n_heads: int,
    vocab_size: int,
    d_ff: int | None = None,
    n_kv_heads: int | None = None,
    head_dim: int | None = None,
    ffn_kind: FfnKind = "gated",
    sliding_window: int | None = None,
    n_sliding_window_layers: int | None = None,
    **options: Any,
) -> ModelSpec:
    """A :class:`ModelSpec` with the usual defaults filled in.

    ``n_kv_heads`` defaults to ``n_heads`` (multi-head), ``head_dim`` to ``d_model // n_heads``,
    ``d_ff`` to 4·``d_model`` for a plain FFN and to Llama's rounding of 8/3·``d_model`` up to a
    multiple of 256 for a gated one (Touvron et al. 2023, §2.2), ``n_sliding_window_layers`` to all
    layers when a window is given. Every other :class:`ModelSpec` field passes through ``options``.
    """
    if isinstance(n_heads, int) and not isinstance(n_heads, bool) and n_heads > 0:
        if head_dim is None and isinstance(d_model, int) and d_model % n_heads == 0:
            head_dim = d_model // n_heads
        elif head_dim is None:
            raise InvalidInput(
                f"d_model ({d_model}) is not a multiple of n_heads ({n_heads}); give head_dim.",
                field="head_dim",
            )
    if d_ff is None and isinstance(d_model, int):
        d_ff = 4 * d_model if ffn_kind == "plain" else -(-(8 * d_model // 3) // 256) * 256
    if n_sliding_window_layers is None:
        n_sliding_window_layers = n_layers if sliding_window is not None else 0
    try:
        return ModelSpec(
            name=name,
            n_layers=n_layers,
            d_model=d_model,
            n_heads=n_heads,
            n_kv_heads=n_heads if n_kv_heads is None else n_kv_heads,
            head_dim=head_dim if head_dim is not None else 0,
            d_ff=d_ff if d_ff is not None else 0,
            vocab_size=vocab_size,
            ffn_kind=ffn_kind,
            sliding_window=sliding_window,
            n_sliding_window_layers=n_sliding_window_layers,
            **options,
        )
    except TypeError as exc:  # an unknown option name
        raise InvalidInput(f"unknown model field: {exc}.", field=None) from exc


# --------------------------------------------------------------------------------------------------
# Parameter counts


@dataclass(frozen=True, slots=True)
class ParameterCounts:
    """Parameter counts derived from a :class:`ModelSpec`.

    ``embedding`` is every vocabulary or position matrix: the input token embedding, the output
    projection when it is not tied to it, and learned position embeddings (Kaplan et al. 2020, §2.1
    "excluding vocabulary and positional embeddings"). ``non_embedding = total - embedding``.
    ``active_per_token`` counts what one token uses: everything except the routed experts it is not
    sent to (equal to ``total`` for dense models).
    """

    total: int
    embedding: int
    non_embedding: int
    active_per_token: int
    input_embedding: int
    output_embedding: int
    position_embedding: int
    attention: int
    mlp: int
    mlp_active: int
    norms: int


@dataclass(frozen=True, slots=True)
class LayerParameters:
    """Parameters of one transformer layer by part (the FLOPs code counts matmuls from these)."""

    attention_weights: int  # matmul weights of Q, K, V, O (MLA: down/up projections)
    attention_biases: int
    attention_norms: int  # MLA's latent norms
    dense_mlp_weights: int
    dense_mlp_biases: int
    moe_router: int
    moe_expert_weights: int  # one routed expert
    moe_shared_weights: int  # all shared experts together


@functools.lru_cache(maxsize=4096)
def layer_parameters(spec: ModelSpec) -> LayerParameters:
    d = spec.d_model
    h = spec.n_heads
    if spec.kv_lora_rank is not None:
        qk = spec.qk_head_dim
        if spec.q_lora_rank is not None:
            q_weights = d * spec.q_lora_rank + spec.q_lora_rank * h * qk
            q_norm = spec.q_lora_rank
        else:
            q_weights = d * h * qk
            q_norm = 0
        kv_weights = d * (spec.kv_lora_rank + spec.qk_rope_head_dim) + spec.kv_lora_rank * h * (
            spec.qk_nope_head_dim + spec.v_head_dim
        )
        attn = q_weights + kv_weights + h * spec.v_head_dim * d
        attn_norms = q_norm + spec.kv_lora_rank
        q_out = h * qk
        kv_out = spec.kv_lora_rank + spec.qk_rope_head_dim
    else:
        q_out = h * spec.head_dim
        kv_out = 2 * spec.n_kv_heads * spec.head_dim
        attn = d * q_out + d * kv_out + q_out * d
        attn_norms = 0
    attn_bias = (q_out + kv_out if spec.qkv_bias else 0) + (d if spec.attn_out_bias else 0)

    matrices = 3 if spec.ffn_kind == "gated" else 2
    dense = matrices * d * spec.d_ff
    dense_bias = ((matrices - 1) * spec.d_ff + d) if spec.mlp_bias else 0
    return LayerParameters(
        attention_weights=attn,
        attention_biases=attn_bias,
        attention_norms=attn_norms,
        dense_mlp_weights=dense,
        dense_mlp_biases=dense_bias,
        moe_router=d * spec.n_experts,
        moe_expert_weights=matrices * d * spec.expert_d_ff,
        moe_shared_weights=spec.n_shared_experts * matrices * d * spec.shared_expert_d_ff,
    )


@functools.lru_cache(maxsize=4096)
def count_parameters(spec: ModelSpec) -> ParameterCounts:
    """Parameters of ``spec`` from its dimensions (weights, biases and norm scales; no buffers)."""
    lp = layer_parameters(spec)
    n_moe = spec.n_moe_layers
    n_dense = spec.n_layers - n_moe
    d = spec.d_model

    attention = spec.n_layers * (lp.attention_weights + lp.attention_biases)
    dense_mlp = n_dense * (lp.dense_mlp_weights + lp.dense_mlp_biases)
    moe_all = n_moe * (lp.moe_router + spec.n_experts * lp.moe_expert_weights + lp.moe_shared_weights)
    moe_active = n_moe * (
        lp.moe_router + spec.experts_per_token * lp.moe_expert_weights + lp.moe_shared_weights
    )
    norm_size = 2 * d if spec.norm_has_bias else d
    norms = (
        spec.n_layers * (spec.norms_per_layer * norm_size + lp.attention_norms)
        + (norm_size if spec.final_norm else 0)
        + (norm_size if spec.embedding_norm else 0)
    )
    input_embedding = spec.vocab_size * d
    output_embedding = 0 if spec.tied_embeddings else spec.vocab_size * d
    position = (spec.max_position_embeddings or 0) * d if spec.position_embedding == "learned" else 0
    embedding = input_embedding + output_embedding + position

    total = attention + dense_mlp + moe_all + norms + embedding
    active = total - moe_all + moe_active
    return ParameterCounts(
        total=total,
        embedding=embedding,
        non_embedding=total - embedding,
        active_per_token=active,
        input_embedding=input_embedding,
        output_embedding=output_embedding,
        position_embedding=position,
        attention=attention,
        mlp=dense_mlp + moe_all,
        mlp_active=dense_mlp + moe_active,
        norms=norms,
    )


# --------------------------------------------------------------------------------------------------
# Hugging Face config.json

SUPPORTED_HF_MODEL_TYPES: tuple[str, ...] = (
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "gemma",
    "gemma2",
    "gpt2",
    "gpt_neox",
    "opt",
    "falcon",
    "deepseek_v3",
)

_EXPLICIT_FIELDS = "n_layers, d_model, n_heads, n_kv_heads, d_ff, vocab_size, ffn_kind"


def _get(config: Mapping[str, Any], *keys: str, default: Any = ..., kind: type = int) -> Any:
    for key in keys:
        value = config.get(key)
        if value is not None:
            if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
                if isinstance(value, float) and value.is_integer():
                    return int(value)
                raise InvalidInput(f"config key {key} must be an integer, got {value!r}.", field=key)
            if kind is bool and not isinstance(value, bool):
                raise InvalidInput(f"config key {key} must be true or false, got {value!r}.", field=key)
            return value
    if default is ...:
        raise InvalidInput(
            f"config.json lacks {' or '.join(keys)}; add it or give the model's dimensions explicitly.",
            field=keys[0],
        )
    return default


def from_hf_config(config: Mapping[str, Any], *, name: str | None = None) -> ModelSpec:
    """A :class:`ModelSpec` from a Hugging Face ``config.json`` object (transformers' key names).

    Supported ``model_type`` values are :data:`SUPPORTED_HF_MODEL_TYPES`. Keys that only change
    numerics (rope scaling, dropout, init) are ignored.
    """
    if not isinstance(config, Mapping):
        raise InvalidInput("the Hugging Face config must be a JSON object (config.json).", field=None)
    model_type = config.get("model_type")
    if model_type not in SUPPORTED_HF_MODEL_TYPES:
        raise InvalidInput(
            f"model_type {model_type!r} is not supported; supported: {', '.join(SUPPORTED_HF_MODEL_TYPES)}. "
            f"Give the dimensions explicitly instead ({_EXPLICIT_FIELDS}) or name a preset.",
            field="model_type",
        )
    label = name or str(config.get("_name_or_path") or model_type)
    builder = _HF_BUILDERS[model_type]
    return builder(config, label)


def _hf_llama_like(config: Mapping[str, Any], name: str, **extra: Any) -> ModelSpec:
    n_heads = _get(config, "num_attention_heads")
    d_model = _get(config, "hidden_size")
    options: dict[str, Any] = {
        "ffn_kind": "gated",
        "tied_embeddings": _get(config, "tie_word_embeddings", default=False, kind=bool),
        "position_embedding": "rope",
        "norm_kind": "rmsnorm",
        "qkv_bias": _get(config, "attention_bias", default=False, kind=bool),
        "attn_out_bias": _get(config, "attention_bias", default=False, kind=bool),
        "mlp_bias": _get(config, "mlp_bias", default=False, kind=bool),
    }
    options.update(extra)
    return build_model_spec(
        name=name,
        n_layers=_get(config, "num_hidden_layers"),
        d_model=d_model,
        n_heads=n_heads,
        n_kv_heads=_get(config, "num_key_value_heads", default=n_heads),
        head_dim=options.pop("head_dim", None) or _get(config, "head_dim", default=None),
        d_ff=options.pop("d_ff", None) or _get(config, "intermediate_size"),
        vocab_size=_get(config, "vocab_size"),
        **options,
    )


def _hf_llama(config: Mapping[str, Any], name: str) -> ModelSpec:
    return _hf_llama_like(config, name)


def _hf_mistral(config: Mapping[str, Any], name: str) -> ModelSpec:
    return _hf_llama_like(config, name, sliding_window=_get(config, "sliding_window", default=None))


def _hf_mixtral(config: Mapping[str, Any], name: str) -> ModelSpec:
    d_ff = _get(config, "intermediate_size")
    return _hf_llama_like(
        config,
        name,
        sliding_window=_get(config, "sliding_window", default=None),
        n_experts=_get(config, "num_local_experts"),
        experts_per_token=_get(config, "num_experts_per_tok"),
        expert_d_ff=d_ff,
        d_ff=d_ff,
    )


def _qwen_window(config: Mapping[str, Any]) -> dict[str, Any]:
    # Qwen2: layers with index >= max_window_layers use the window, only when use_sliding_window.
    if not _get(config, "use_sliding_window", default=False, kind=bool):
        return {}
    window = _get(config, "sliding_window", default=None)
    if window is None:
        return {}
    n_layers = _get(config, "num_hidden_layers")
    first = _get(config, "max_window_layers", default=n_layers)
    return {"sliding_window": window, "n_sliding_window_layers": max(0, n_layers - first)}


def _hf_qwen2(config: Mapping[str, Any], name: str) -> ModelSpec:
    return _hf_llama_like(config, name, qkv_bias=True, attn_out_bias=False, **_qwen_window(config))


def _hf_qwen2_moe(config: Mapping[str, Any], name: str) -> ModelSpec:
    if config.get("mlp_only_layers"):
        raise InvalidInput(
            "mlp_only_layers is not supported; give the dimensions explicitly "
            "(first_k_dense_layers, moe_layer_frequency).",
            field="mlp_only_layers",
        )
    shared = _get(config, "shared_expert_intermediate_size", default=0)
    return _hf_llama_like(
        config,
        name,
        qkv_bias=True,
        attn_out_bias=False,
        n_experts=_get(config, "num_experts"),
        experts_per_token=_get(config, "num_experts_per_tok"),
        expert_d_ff=_get(config, "moe_intermediate_size"),
        n_shared_experts=1 if shared else 0,
        shared_expert_d_ff=shared,
        moe_layer_frequency=_get(config, "decoder_sparse_step", default=1),
        **_qwen_window(config),
    )


def _hf_gemma(config: Mapping[str, Any], name: str) -> ModelSpec:
    return _hf_llama_like(
        config, name, tied_embeddings=_get(config, "tie_word_embeddings", default=True, kind=bool)
    )


def _hf_gemma2(config: Mapping[str, Any], name: str) -> ModelSpec:
    window = _get(config, "sliding_window", default=None)
    n_layers = _get(config, "num_hidden_layers")
    return _hf_llama_like(
        config,
        name,
        tied_embeddings=_get(config, "tie_word_embeddings", default=True, kind=bool),
        norms_per_layer=4,  # Gemma 2: pre- and post-norm around attention and around the MLP
        sliding_window=window,
        n_sliding_window_layers=n_layers // 2 if window else 0,  # local and global layers alternate
    )


def _hf_deepseek_v3(config: Mapping[str, Any], name: str) -> ModelSpec:
    moe_ff = _get(config, "moe_intermediate_size")
    n_shared = _get(config, "n_shared_experts", default=0)
    return _hf_llama_like(
        config,
        name,
        n_experts=_get(config, "n_routed_experts"),
        experts_per_token=_get(config, "num_experts_per_tok"),
        expert_d_ff=moe_ff,
        n_shared_experts=n_shared,
        shared_expert_d_ff=moe_ff if n_shared else 0,
        first_k_dense_layers=_get(config, "first_k_dense_replace", default=0),
        moe_layer_frequency=_get(config, "moe_layer_freq", default=1),
        q_lora_rank=_get(config, "q_lora_rank", default=None),
        kv_lora_rank=_get(config, "kv_lora_rank"),
        qk_nope_head_dim=_get(config, "qk_nope_head_dim"),
        qk_rope_head_dim=_get(config, "qk_rope_head_dim"),
        v_head_dim=_get(config, "v_head_dim"),
        head_dim=_get(config, "qk_nope_head_dim") + _get(config, "qk_rope_head_dim"),
    )


def _hf_gpt2(config: Mapping[str, Any], name: str) -> ModelSpec:
    d_model = _get(config, "n_embd", "hidden_size")
    return build_model_spec(
        name=name,
        n_layers=_get(config, "n_layer", "num_hidden_layers"),
        d_model=d_model,
        n_heads=_get(config, "n_head", "num_attention_heads"),
        d_ff=_get(config, "n_inner", default=4 * d_model),
        vocab_size=_get(config, "vocab_size"),
        ffn_kind="plain",
        tied_embeddings=_get(config, "tie_word_embeddings", default=True, kind=bool),
        position_embedding="learned",
        max_position_embeddings=_get(config, "n_positions", "max_position_embeddings"),
        norm_kind="layernorm",
        norm_has_bias=True,
        qkv_bias=True,
        attn_out_bias=True,
        mlp_bias=True,
    )


def _hf_gpt_neox(config: Mapping[str, Any], name: str) -> ModelSpec:
    bias = _get(config, "attention_bias", default=True, kind=bool)
    return build_model_spec(
        name=name,
        n_layers=_get(config, "num_hidden_layers"),
        d_model=_get(config, "hidden_size"),
        n_heads=_get(config, "num_attention_heads"),
        d_ff=_get(config, "intermediate_size"),
        vocab_size=_get(config, "vocab_size"),
        ffn_kind="plain",
        tied_embeddings=_get(config, "tie_word_embeddings", default=False, kind=bool),
        position_embedding="rope",  # rotary on rotary_pct of each head: no parameters either way
        norm_kind="layernorm",
        norm_has_bias=True,
        qkv_bias=bias,
        attn_out_bias=bias,
        mlp_bias=True,
    )


def _hf_opt(config: Mapping[str, Any], name: str) -> ModelSpec:
    d_model = _get(config, "hidden_size")
    if _get(config, "word_embed_proj_dim", default=d_model) != d_model:
        raise InvalidInput(
            "OPT with word_embed_proj_dim != hidden_size (opt-350m) has extra projections this "
            "service does not model; give the dimensions explicitly.",
            field="word_embed_proj_dim",
        )
    bias = _get(config, "enable_bias", default=True, kind=bool)
    return build_model_spec(
        name=name,
        n_layers=_get(config, "num_hidden_layers"),
        d_model=d_model,
        n_heads=_get(config, "num_attention_heads"),
        d_ff=_get(config, "ffn_dim"),
        vocab_size=_get(config, "vocab_size"),
        ffn_kind="plain",
        tied_embeddings=_get(config, "tie_word_embeddings", default=True, kind=bool),
        position_embedding="learned",
        # OPTLearnedPositionalEmbedding keeps 2 extra rows (offset 2; transformers modeling_opt.py).
        max_position_embeddings=_get(config, "max_position_embeddings") + 2,
        norm_kind="layernorm",
        norm_has_bias=_get(config, "layer_norm_elementwise_affine", default=True, kind=bool),
        final_norm=_get(config, "do_layer_norm_before", default=True, kind=bool),
        qkv_bias=bias,
        attn_out_bias=bias,
        mlp_bias=bias,
    )


def _hf_falcon(config: Mapping[str, Any], name: str) -> ModelSpec:
    n_heads = _get(config, "num_attention_heads", "n_head")
    d_model = _get(config, "hidden_size")
    new_arch = _get(config, "new_decoder_architecture", default=False, kind=bool)
    if new_arch:
        n_kv = _get(config, "num_kv_heads", "n_head_kv", default=n_heads)
        norms = _get(config, "num_ln_in_parallel_attn", default=2)
    else:
        n_kv = 1 if _get(config, "multi_query", default=True, kind=bool) else n_heads
        parallel = _get(config, "parallel_attn", default=True, kind=bool)
        norms = 1 if parallel else 2
    bias = _get(config, "bias", default=False, kind=bool)
    return build_model_spec(
        name=name,
        n_layers=_get(config, "num_hidden_layers", "n_layer"),
        d_model=d_model,
        n_heads=n_heads,
        n_kv_heads=n_kv,
        head_dim=_get(config, "head_dim", default=None),
        d_ff=_get(config, "ffn_hidden_size", default=4 * d_model),
        vocab_size=_get(config, "vocab_size"),
        ffn_kind="plain",
        tied_embeddings=_get(config, "tie_word_embeddings", default=True, kind=bool),
        position_embedding="alibi" if _get(config, "alibi", default=False, kind=bool) else "rope",
        norm_kind="layernorm",
        norm_has_bias=True,
        norms_per_layer=norms,
        qkv_bias=bias,
        attn_out_bias=bias,
        mlp_bias=bias,
    )


_HF_BUILDERS = {
    "llama": _hf_llama,
    "mistral": _hf_mistral,
    "mixtral": _hf_mixtral,
    "qwen2": _hf_qwen2,
    "qwen2_moe": _hf_qwen2_moe,
    "gemma": _hf_gemma,
    "gemma2": _hf_gemma2,
    "gpt2": _hf_gpt2,
    "gpt_neox": _hf_gpt_neox,
    "opt": _hf_opt,
    "falcon": _hf_falcon,
    "deepseek_v3": _hf_deepseek_v3,
}


# --------------------------------------------------------------------------------------------------
# Presets


@dataclass(frozen=True, slots=True)
class Preset:
    """A well-known architecture with its published dimensions and, where published, its size."""

    id: str
    display_name: str
    family: str
    spec: ModelSpec
    source: str
    published_parameters: float | None = None
    published_active_parameters: float | None = None


_GPT3_SOURCE = "Brown et al. 2020 (arXiv 2005.14165) Table 2.1; vocab 50257, context 2048"


def _gpt3(size: str, n_layers: int, d_model: int, n_heads: int, head_dim: int, params: float) -> Preset:
    spec = build_model_spec(
        name=f"GPT-3 {size}",
        n_layers=n_layers,
        d_model=d_model,
        n_heads=n_heads,
        head_dim=head_dim,
        d_ff=4 * d_model,
        vocab_size=50257,
        ffn_kind="plain",
        tied_embeddings=True,
        position_embedding="learned",
        max_position_embeddings=2048,
        norm_kind="layernorm",
        norm_has_bias=True,
        qkv_bias=True,
        attn_out_bias=True,
        mlp_bias=True,
    )
    return Preset(f"gpt3-{size.lower()}", f"GPT-3 {size}", "gpt3", spec, _GPT3_SOURCE, params)


def _llama(
    preset_id: str,
    display: str,
    family: str,
    source: str,
    params: float | None,
    **dims: Any,
) -> Preset:
    return Preset(preset_id, display, family, build_model_spec(name=display, **dims), source, params)


def _build_presets() -> dict[str, Preset]:
    presets = [
        _gpt3("125M", 12, 768, 12, 64, 125e6),
        _gpt3("350M", 24, 1024, 16, 64, 350e6),
        _gpt3("760M", 24, 1536, 16, 96, 760e6),
        # Table 2.1 prints 24 heads of 128 for 1.3B, which does not fit d_model 2048 (24·128 = 3072);
        # 16 heads of 128 (Megatron-LM's GPT-3 1.3B) keeps H·Q = d_model and the published 1.3B.
        _gpt3("1.3B", 24, 2048, 16, 128, 1.3e9),
        _gpt3("2.7B", 32, 2560, 32, 80, 2.7e9),
        _gpt3("6.7B", 32, 4096, 32, 128, 6.7e9),
        _gpt3("13B", 40, 5140, 40, 128, 13.0e9),  # d_model 5140 as printed in Table 2.1
        _gpt3("175B", 96, 12288, 96, 128, 175.0e9),
    ]
    llama2 = "Touvron et al. 2023 (Llama 2, arXiv 2307.09288) Table 1; meta-llama/Llama-2-*-hf config.json"
    presets += [
        _llama("llama2-7b", "Llama 2 7B", "llama2", llama2, 6.74e9,
               n_layers=32, d_model=4096, n_heads=32, d_ff=11008, vocab_size=32000),
        _llama("llama2-13b", "Llama 2 13B", "llama2", llama2, 13.0e9,
               n_layers=40, d_model=5120, n_heads=40, d_ff=13824, vocab_size=32000),
        _llama("llama2-70b", "Llama 2 70B", "llama2", llama2, 69.0e9,
               n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8, d_ff=28672, vocab_size=32000),
    ]  # fmt: skip
    llama3 = "Llama 3 herd (Dubey et al. 2024, arXiv 2407.21783) Table 3; meta-llama config.json"
    dims_8b = dict(n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, d_ff=14336, vocab_size=128256)
    dims_70b = dict(n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8, d_ff=28672, vocab_size=128256)
    dims_405b = dict(n_layers=126, d_model=16384, n_heads=128, n_kv_heads=8, d_ff=53248, vocab_size=128256)
    presets += [
        _llama("llama3-8b", "Llama 3 8B", "llama3", llama3, 8.03e9, **dims_8b),
        _llama("llama3-70b", "Llama 3 70B", "llama3", llama3, 70.6e9, **dims_70b),
        _llama("llama3.1-8b", "Llama 3.1 8B", "llama3", llama3, 8.03e9, **dims_8b),
        _llama("llama3.1-70b", "Llama 3.1 70B", "llama3", llama3, 70.6e9, **dims_70b),
        _llama("llama3.1-405b", "Llama 3.1 405B", "llama3", llama3, 405.9e9, **dims_405b),
    ]
    mistral = "Jiang et al. 2023 (Mistral 7B, arXiv 2310.06825) Table 1; mistralai config.json"
    mixtral = "Jiang et al. 2024 (Mixtral of Experts, arXiv 2401.04088) Table 1; mistralai config.json"
    presets += [
        _llama("mistral-7b", "Mistral 7B (v0.1)", "mistral", mistral, 7.24e9,
               n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, d_ff=14336, vocab_size=32000,
               sliding_window=4096),
        _llama("mixtral-8x7b", "Mixtral 8x7B", "mixtral", mixtral, 46.7e9,
               n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, d_ff=14336, vocab_size=32000,
               n_experts=8, experts_per_token=2, expert_d_ff=14336),
        _llama("mixtral-8x22b", "Mixtral 8x22B", "mixtral",
               "mistralai/Mixtral-8x22B-v0.1 config.json and announcement (141B total, 39B active)", 141e9,
               n_layers=56, d_model=6144, n_heads=48, n_kv_heads=8, d_ff=16384, vocab_size=32768,
               n_experts=8, experts_per_token=2, expert_d_ff=16384),
    ]  # fmt: skip
    qwen = "Qwen2.5 technical report (arXiv 2412.15115) Table 1; Qwen/Qwen2.5-* config.json"
    qwen_opts = dict(qkv_bias=True)
    presets += [
        _llama("qwen2.5-0.5b", "Qwen2.5 0.5B", "qwen2.5", qwen, 0.49e9,
               n_layers=24, d_model=896, n_heads=14, n_kv_heads=2, d_ff=4864, vocab_size=151936,
               tied_embeddings=True, **qwen_opts),
        _llama("qwen2.5-7b", "Qwen2.5 7B", "qwen2.5", qwen, 7.61e9,
               n_layers=28, d_model=3584, n_heads=28, n_kv_heads=4, d_ff=18944, vocab_size=152064,
               **qwen_opts),
        _llama("qwen2.5-14b", "Qwen2.5 14B", "qwen2.5", qwen, 14.7e9,
               n_layers=48, d_model=5120, n_heads=40, n_kv_heads=8, d_ff=13824, vocab_size=152064,
               **qwen_opts),
        _llama("qwen2.5-72b", "Qwen2.5 72B", "qwen2.5", qwen, 72.7e9,
               n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8, d_ff=29568, vocab_size=152064,
               **qwen_opts),
    ]  # fmt: skip
    gemma2 = "Gemma 2 report (arXiv 2408.00118) Table 1; google/gemma-2-* config.json"
    gemma_opts = dict(tied_embeddings=True, norms_per_layer=4, sliding_window=4096)
    presets += [
        _llama("gemma2-9b", "Gemma 2 9B", "gemma2", gemma2, 9.24e9,
               n_layers=42, d_model=3584, n_heads=16, n_kv_heads=8, head_dim=256, d_ff=14336,
               vocab_size=256000, n_sliding_window_layers=21, **gemma_opts),
        _llama("gemma2-27b", "Gemma 2 27B", "gemma2", gemma2, 27.2e9,
               n_layers=46, d_model=4608, n_heads=32, n_kv_heads=16, head_dim=128, d_ff=36864,
               vocab_size=256000, n_sliding_window_layers=23, **gemma_opts),
    ]  # fmt: skip
    presets.append(
        _llama(
            "deepseek-v3",
            "DeepSeek-V3",
            "deepseek",
            "DeepSeek-AI 2024 (DeepSeek-V3, arXiv 2412.19437) §2, §4.2; deepseek-ai/DeepSeek-V3 config.json "
            "(671B total, 37B activated; the 14B multi-token-prediction module is not counted)",
            671e9,
            n_layers=61,
            d_model=7168,
            n_heads=128,
            head_dim=192,
            d_ff=18432,
            vocab_size=129280,
            n_experts=256,
            experts_per_token=8,
            expert_d_ff=2048,
            n_shared_experts=1,
            shared_expert_d_ff=2048,
            first_k_dense_layers=3,
            q_lora_rank=1536,
            kv_lora_rank=512,
            qk_nope_head_dim=128,
            qk_rope_head_dim=64,
            v_head_dim=128,
        )
    )
    gpt_like = dict(
        ffn_kind="plain",
        norm_kind="layernorm",
        norm_has_bias=True,
        qkv_bias=True,
        attn_out_bias=True,
        mlp_bias=True,
    )
    presets += [
        _llama("gpt-neox-20b", "GPT-NeoX-20B", "gpt-neox",
               "Black et al. 2022 (arXiv 2204.06745) Table 1; EleutherAI/gpt-neox-20b config.json "
               "(vocab padded to 50432)", 20.55e9,
               n_layers=44, d_model=6144, n_heads=64, d_ff=24576, vocab_size=50432, **gpt_like),
        _llama("opt-175b", "OPT-175B", "opt",
               "Zhang et al. 2022 (arXiv 2205.01068) Table 1; learned positions 2048 + 2 offset rows",
               175e9,
               n_layers=96, d_model=12288, n_heads=96, d_ff=49152, vocab_size=50272, tied_embeddings=True,
               position_embedding="learned", max_position_embeddings=2050, **gpt_like),
        _llama("bloom-176b", "BLOOM 176B", "bloom",
               "BigScience 2022 (arXiv 2211.05100) Table 3; bigscience/bloom config.json", 176.2e9,
               n_layers=70, d_model=14336, n_heads=112, d_ff=57344, vocab_size=250880, tied_embeddings=True,
               position_embedding="alibi", embedding_norm=True, **gpt_like),
    ]  # fmt: skip
    mpt_opts = dict(ffn_kind="plain", tied_embeddings=True, position_embedding="alibi", norm_kind="layernorm")
    presets += [
        _llama("mpt-7b", "MPT-7B", "mpt",
               "MosaicML 2023, MPT-7B model card (6.7B; no biases, ALiBi, tied); mosaicml/mpt-7b config.json "
               "(vocab padded to 50432; llm-foundry's benchmark YAMLs use 50368)",
               6.7e9, n_layers=32, d_model=4096, n_heads=32, vocab_size=50432, **mpt_opts),
        _llama("mpt-30b", "MPT-30B", "mpt",
               "MosaicML 2023, MPT-30B model card; mosaicml/mpt-30b config.json", 29.95e9,
               n_layers=48, d_model=7168, n_heads=64, vocab_size=50432, **mpt_opts),
    ]  # fmt: skip
    presets.append(
        _llama(
            "palm-540b",
            "PaLM 540B",
            "palm",
            "Chowdhery et al. 2022 (arXiv 2204.02311) Table 1 and §2: SwiGLU, parallel layers, "
            "multi-query, no biases, shared input/output embedding; N = 540.35e9 (Appendix B)",
            540.35e9,
            n_layers=118,
            d_model=18432,
            n_heads=48,
            n_kv_heads=1,
            head_dim=256,
            d_ff=73728,
            vocab_size=256000,
            tied_embeddings=True,
            norm_kind="layernorm",
            norms_per_layer=1,
        )
    )
    # Active-parameter figures published beside the totals.
    active = {"mixtral-8x7b": 12.9e9, "mixtral-8x22b": 39e9, "deepseek-v3": 37e9}
    return {
        p.id: dataclasses.replace(p, published_active_parameters=active[p.id]) if p.id in active else p
        for p in presets
    }


PRESETS: dict[str, Preset] = _build_presets()


def get_preset(preset_id: str) -> Preset:
    """The preset with this id (case-insensitive); NotFound with close matches otherwise."""
    key = preset_id.strip().lower() if isinstance(preset_id, str) else ""
    preset = PRESETS.get(key)
    if preset is not None:
        return preset
    close = tuple(difflib.get_close_matches(key, PRESETS, n=5, cutoff=0.5))
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise NotFound(
        f"no model preset {preset_id!r}.{hint} Known presets: {', '.join(PRESETS)}; "
        "or give the model's dimensions or its Hugging Face config.json instead.",
        field="preset",
        close_matches=close,
    )
