"""The model description (:class:`ModelSpec`), its validation and its parameter counts.

Validation errors carry ``field`` = the :class:`ModelSpec` attribute at fault; the API layer prefixes
it with the request path.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Literal

from service.domain.errors import InvalidInput

FfnKind = Literal["plain", "gated"]
PositionEmbedding = Literal["learned", "rope", "alibi", "none"]
NormKind = Literal["layernorm", "rmsnorm"]
QkNorm = Literal["none", "head", "per_head"]

FFN_KINDS: tuple[str, ...] = ("plain", "gated")
POSITION_EMBEDDINGS: tuple[str, ...] = ("learned", "rope", "alibi", "none")
NORM_KINDS: tuple[str, ...] = ("layernorm", "rmsnorm")
QK_NORMS: tuple[str, ...] = ("none", "head", "per_head")


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

    ``qk_norm``: a norm on queries and keys before the scores (Dehghani et al. 2023): ``head`` = one
    scale of ``head_dim`` shared by all heads (Qwen3, Gemma 3, Phi), ``per_head`` = one scale per head,
    i.e. ``(n_heads + n_kv_heads)·head_dim`` (OLMo 2 / OLMoE norm the whole projection, Cohere and
    StableLM each head); ``qk_norm_has_bias`` adds the LayerNorm bias. ``attention_sinks``: one learned
    logit per head (gpt-oss). ``router_bias`` / ``expert_bias``: biases on the router and on each
    expert's matrices (gpt-oss); ``shared_expert_gate``: Qwen2-MoE's ``d_model × 1`` sigmoid gate on the
    shared expert. ``dense_layers``: indices of layers kept dense besides the first ones (Qwen's
    ``mlp_only_layers``). ``lm_head_bias``: a bias on the output projection (Phi-2, PhiMoE).
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
    qk_norm: QkNorm = "none"
    qk_norm_has_bias: bool = False
    attention_sinks: bool = False
    router_bias: bool = False
    expert_bias: bool = False
    shared_expert_gate: bool = False
    dense_layers: tuple[int, ...] = ()
    lm_head_bias: bool = False

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
    dense = set(spec.dense_layers)
    return sum(
        1 for i in range(spec.first_k_dense_layers, spec.n_layers) if (i + 1) % freq == 0 and i not in dense
    )


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
    if spec.qk_norm not in QK_NORMS:
        raise InvalidInput(
            f"qk_norm must be one of {', '.join(QK_NORMS)}, got {spec.qk_norm!r}.", field="qk_norm"
        )
    if not isinstance(spec.dense_layers, tuple) or any(
        isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < spec.n_layers for i in spec.dense_layers
    ):
        raise InvalidInput(
            f"dense_layers must list layer indices in 0..{spec.n_layers - 1}.", field="dense_layers"
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
    moe_expert_biases: int = 0  # one routed expert's biases (gpt-oss)


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
    if spec.attention_sinks:
        attn_bias += h
    if spec.qk_norm != "none":
        qk_width = 2 * spec.head_dim if spec.qk_norm == "head" else (h + spec.n_kv_heads) * spec.head_dim
        attn_norms += 2 * qk_width if spec.qk_norm_has_bias else qk_width

    matrices = 3 if spec.ffn_kind == "gated" else 2
    dense = matrices * d * spec.d_ff
    dense_bias = ((matrices - 1) * spec.d_ff + d) if spec.mlp_bias else 0
    router = d * spec.n_experts + (spec.n_experts if spec.router_bias else 0)
    if spec.shared_expert_gate:
        router += d
    return LayerParameters(
        attention_weights=attn,
        attention_biases=attn_bias,
        attention_norms=attn_norms,
        dense_mlp_weights=dense,
        dense_mlp_biases=dense_bias,
        moe_router=router,
        moe_expert_weights=matrices * d * spec.expert_d_ff,
        moe_shared_weights=spec.n_shared_experts * matrices * d * spec.shared_expert_d_ff,
        moe_expert_biases=((matrices - 1) * spec.expert_d_ff + d) if spec.expert_bias else 0,
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
    expert = lp.moe_expert_weights + lp.moe_expert_biases
    moe_all = n_moe * (lp.moe_router + spec.n_experts * expert + lp.moe_shared_weights)
    moe_active = n_moe * (lp.moe_router + spec.experts_per_token * expert + lp.moe_shared_weights)
    norm_size = 2 * d if spec.norm_has_bias else d
    norms = (
        spec.n_layers * (spec.norms_per_layer * norm_size + lp.attention_norms)
        + (norm_size if spec.final_norm else 0)
        + (norm_size if spec.embedding_norm else 0)
    )
    input_embedding = spec.vocab_size * d
    output_embedding = (0 if spec.tied_embeddings else spec.vocab_size * d) + (
        spec.vocab_size if spec.lm_head_bias else 0
    )
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
