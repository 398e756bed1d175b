"""A :class:`ModelSpec` from a Hugging Face ``config.json``, read field by field per ``model_type``.

Each family's reader follows the module transformers builds for it (``models/<type>/modeling_*.py``,
checked against transformers 5.x): which projections carry biases, how many norms a layer holds,
whether queries and keys are normed (QK-norm) and over what width, which layers slide a window
(``layer_types``, or the family's older pattern keys), MoE routing with shared experts, dense-first
layers and ``mlp_only_layers``, attention sinks, tied embeddings. Defaults are the family's config
class defaults, because ``config.json`` files written by ``save_pretrained`` may omit them (Qwen3's
``head_dim`` defaults to 128, not ``hidden_size / num_attention_heads``).

``tests/domain/test_hf_families.py`` builds every family's module from a small config on CPU and checks
the parameter count against ``sum(p.numel())`` exactly and the ``megatron`` forward FLOPs against
``torch.utils.flop_counter.FlopCounterMode``.

Multimodal wrappers whose text decoder is one of these families (``mistral3``, ``gemma3``,
``llama4``) are read from their nested ``text_config``: the counts are the text decoder's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from service.domain.errors import InvalidInput
from service.domain.models.spec import ModelSpec, build_model_spec

_EXPLICIT_FIELDS = "n_layers, d_model, n_heads, n_kv_heads, head_dim, d_ff, vocab_size, ffn_kind"

Config = Mapping[str, Any]


def _get(config: Config, *keys: str, default: Any = ..., kind: type = int) -> Any:
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
            f"config.json lacks {' or '.join(keys)}; add it or give the model's dimensions explicitly "
            f"({_EXPLICIT_FIELDS}).",
            field=keys[0],
        )
    return default


def _flag(config: Config, key: str, default: bool) -> bool:
    return bool(_get(config, key, default=default, kind=bool))


def _layer_window(config: Config, *, fallback_layers: int | None = None) -> dict[str, Any]:
    """``sliding_window`` and how many layers use it: from ``layer_types`` when the config lists them
    (transformers ≥ 4.54 writes one entry per layer), else ``fallback_layers`` (the family's rule)."""
    window = _get(config, "sliding_window", default=None)
    if window is None:
        return {}
    layer_types = config.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        n_sliding = sum(1 for t in layer_types if t == "sliding_attention")
    elif fallback_layers is not None:
        n_sliding = fallback_layers
    else:
        return {}
    return {"sliding_window": window, "n_sliding_window_layers": n_sliding} if n_sliding else {}


def _pattern_layers(config: Config, pattern_key: str, default_pattern: int) -> int:
    """Layers that slide under a ``sliding_window_pattern`` p: every layer except each p-th."""
    n_layers = _get(config, "num_hidden_layers")
    pattern = _get(config, pattern_key, default=default_pattern)
    if pattern <= 0:
        return 0
    return sum(1 for i in range(n_layers) if (i + 1) % pattern != 0)


def _decoder(
    config: Config,
    name: str,
    *,
    head_dim_default: int | None = None,
    head_dim: int | None = None,
    tied_default: bool = False,
    qkv_bias: bool = False,
    out_bias: bool = False,
    mlp_bias: bool = False,
    d_ff: int | None = None,
    **options: Any,
) -> ModelSpec:
    """A rotary decoder in transformers' Llama naming (``hidden_size``, ``num_attention_heads``, …)."""
    n_heads = _get(config, "num_attention_heads")
    if head_dim is None:
        head_dim = _get(config, "head_dim", default=head_dim_default)
    return build_model_spec(
        name=name,
        n_layers=_get(config, "num_hidden_layers"),
        d_model=_get(config, "hidden_size"),
        n_heads=n_heads,
        n_kv_heads=_get(config, "num_key_value_heads", default=n_heads),
        head_dim=head_dim,
        d_ff=d_ff if d_ff is not None else _get(config, "intermediate_size"),
        vocab_size=_get(config, "vocab_size"),
        tied_embeddings=_flag(config, "tie_word_embeddings", tied_default),
        qkv_bias=qkv_bias,
        attn_out_bias=out_bias,
        mlp_bias=mlp_bias,
        **options,
    )


def _dense_layers(config: Config) -> tuple[int, ...]:
    value = config.get("mlp_only_layers") or []
    if not isinstance(value, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in value):
        raise InvalidInput("mlp_only_layers must be a list of layer indices.", field="mlp_only_layers")
    return tuple(sorted(set(value)))


# --------------------------------------------------------------------------------------------------
# Families


def _llama(c: Config, name: str) -> ModelSpec:
    bias = _flag(c, "attention_bias", False)
    return _decoder(c, name, qkv_bias=bias, out_bias=bias, mlp_bias=_flag(c, "mlp_bias", False))


def _granite(c: Config, name: str) -> ModelSpec:
    # Granite 3: Llama blocks plus scalar multipliers (embedding, residual, attention, logits).
    return _llama(c, name)


def _smollm3(c: Config, name: str) -> ModelSpec:
    # SmolLM3: Llama blocks, rotary skipped on every 4th layer (NoPE: no parameters either way).
    return _llama(c, name)


def _helium(c: Config, name: str) -> ModelSpec:
    bias = _flag(c, "attention_bias", False)
    return _decoder(c, name, head_dim_default=128, qkv_bias=bias, mlp_bias=_flag(c, "mlp_bias", False))


def _seed_oss(c: Config, name: str) -> ModelSpec:
    return _decoder(
        c,
        name,
        head_dim_default=128,
        qkv_bias=_flag(c, "attention_bias", True),
        out_bias=_flag(c, "attention_out_bias", False),
        mlp_bias=_flag(c, "mlp_bias", False),
    )


def _ernie4_5(c: Config, name: str) -> ModelSpec:
    bias = _flag(c, "use_bias", False)
    return _decoder(
        c, name, head_dim_default=128, tied_default=True, qkv_bias=bias, out_bias=bias, mlp_bias=bias
    )


def _hunyuan_dense(c: Config, name: str) -> ModelSpec:
    bias = _flag(c, "attention_bias", False)
    return _decoder(c, name, qkv_bias=bias, out_bias=bias, qk_norm="head")


def _arcee(c: Config, name: str) -> ModelSpec:
    # Arcee (AFM): ReLU² MLP, up and down projections only.
    bias = _flag(c, "attention_bias", False)
    return _decoder(
        c, name, qkv_bias=bias, out_bias=bias, mlp_bias=_flag(c, "mlp_bias", False), ffn_kind="plain"
    )


def _mistral(c: Config, name: str) -> ModelSpec:
    n_layers = _get(c, "num_hidden_layers")
    return _decoder(c, name, **_layer_window(c, fallback_layers=n_layers))


def _ministral(c: Config, name: str) -> ModelSpec:
    return _decoder(c, name, **_layer_window(c))


def _phi3(c: Config, name: str) -> ModelSpec:
    # Phi-3: fused qkv_proj and gate_up_proj (same counts as separate ones), no biases.
    n_layers = _get(c, "num_hidden_layers")
    return _decoder(c, name, **_layer_window(c, fallback_layers=n_layers))


def _moe(c: Config, *, experts: str, expert_d_ff: str) -> dict[str, Any]:
    # transformers 5 writes num_local_experts where older config.json files say num_experts.
    other = "num_local_experts" if experts == "num_experts" else "num_experts"
    return {
        "n_experts": _get(c, experts, other),
        "experts_per_token": _get(c, "num_experts_per_tok"),
        "expert_d_ff": _get(c, expert_d_ff),
    }


def _mixtral(c: Config, name: str) -> ModelSpec:
    n_layers = _get(c, "num_hidden_layers")
    return _decoder(
        c,
        name,
        **_moe(c, experts="num_local_experts", expert_d_ff="intermediate_size"),
        **_layer_window(c, fallback_layers=n_layers),
    )


def _phimoe(c: Config, name: str) -> ModelSpec:
    bias = _flag(c, "attention_bias", False)
    n_layers = _get(c, "num_hidden_layers")
    return _decoder(
        c,
        name,
        qkv_bias=bias,
        out_bias=bias,
        norm_kind="layernorm",
        norm_has_bias=True,
        lm_head_bias=_flag(c, "lm_head_bias", False),
        **_moe(c, experts="num_local_experts", expert_d_ff="intermediate_size"),
        **_layer_window(c, fallback_layers=n_layers),
    )


def _qwen_window(c: Config) -> dict[str, Any]:
    # Qwen2/3: layers with index >= max_window_layers slide, only when use_sliding_window is set.
    if not _flag(c, "use_sliding_window", False):
        return {}
    n_layers = _get(c, "num_hidden_layers")
    first = _get(c, "max_window_layers", default=28)
    return _layer_window(c, fallback_layers=max(0, n_layers - first))


def _qwen2(c: Config, name: str) -> ModelSpec:
    return _decoder(c, name, qkv_bias=True, **_qwen_window(c))


def _qwen2_moe(c: Config, name: str) -> ModelSpec:
    shared = _get(c, "shared_expert_intermediate_size", default=0)
    return _decoder(
        c,
        name,
        qkv_bias=_flag(c, "qkv_bias", True),
        **_moe(c, experts="num_experts", expert_d_ff="moe_intermediate_size"),
        n_shared_experts=1 if shared else 0,
        shared_expert_d_ff=shared,
        shared_expert_gate=bool(shared),
        moe_layer_frequency=_get(c, "decoder_sparse_step", default=1),
        dense_layers=_dense_layers(c),
        **_qwen_window(c),
    )


def _qwen3(c: Config, name: str) -> ModelSpec:
    bias = _flag(c, "attention_bias", False)
    return _decoder(
        c, name, head_dim_default=128, qkv_bias=bias, out_bias=bias, qk_norm="head", **_qwen_window(c)
    )


def _qwen3_moe(c: Config, name: str) -> ModelSpec:
    bias = _flag(c, "attention_bias", False)
    return _decoder(
        c,
        name,
        head_dim_default=128,
        qkv_bias=bias,
        out_bias=bias,
        qk_norm="head",
        **_moe(c, experts="num_experts", expert_d_ff="moe_intermediate_size"),
        moe_layer_frequency=_get(c, "decoder_sparse_step", default=1),
        dense_layers=_dense_layers(c),
        **_qwen_window(c),
    )


def _gemma(c: Config, name: str) -> ModelSpec:
    bias = _flag(c, "attention_bias", False)
    return _decoder(c, name, head_dim_default=256, tied_default=True, qkv_bias=bias, out_bias=bias)


def _gemma2(c: Config, name: str) -> ModelSpec:
    bias = _flag(c, "attention_bias", False)
    n_layers = _get(c, "num_hidden_layers")
    return _decoder(
        c,
        name,
        head_dim_default=256,
        tied_default=True,
        qkv_bias=bias,
        out_bias=bias,
        norms_per_layer=4,  # pre- and post-norm around attention and around the MLP
        **_layer_window(c, fallback_layers=n_layers // 2),  # local (even) and global layers alternate
    )


def _gemma3_text(c: Config, name: str) -> ModelSpec:
    bias = _flag(c, "attention_bias", False)
    return _decoder(
        c,
        name,
        head_dim_default=256,
        tied_default=True,
        qkv_bias=bias,
        out_bias=bias,
        norms_per_layer=4,
        qk_norm="head",
        # Five local layers to one global (Gemma 3 report §2.2): sliding_window_pattern 6.
        **_layer_window(c, fallback_layers=_pattern_layers(c, "sliding_window_pattern", 6)),
    )


def _phi(c: Config, name: str) -> ModelSpec:
    # Phi-1/1.5/2: parallel attention and MLP off one LayerNorm, biases everywhere incl. the LM head,
    # rotary on partial_rotary_factor of each head (no parameters).
    return _decoder(
        c,
        name,
        qkv_bias=True,
        out_bias=True,
        mlp_bias=True,
        ffn_kind="plain",
        norm_kind="layernorm",
        norm_has_bias=True,
        norms_per_layer=1,
        lm_head_bias=True,
        qk_norm="head" if _flag(c, "qk_layernorm", False) else "none",
        qk_norm_has_bias=True,
    )


def _stablelm(c: Config, name: str) -> ModelSpec:
    parallel = _flag(c, "use_parallel_residual", False)
    return _decoder(
        c,
        name,
        qkv_bias=_flag(c, "use_qkv_bias", False),
        norm_kind="layernorm",
        norm_has_bias=True,
        norms_per_layer=1 if parallel else 2,
        # StableLmLayerNormPerHead: one bias-free LayerNorm per head for queries and for keys.
        qk_norm="per_head" if _flag(c, "qk_layernorm", False) else "none",
    )


def _starcoder2(c: Config, name: str) -> ModelSpec:
    bias = _flag(c, "use_bias", True)
    n_layers = _get(c, "num_hidden_layers")
    return _decoder(
        c,
        name,
        tied_default=True,
        qkv_bias=bias,
        out_bias=bias,
        mlp_bias=bias,
        ffn_kind="plain",
        norm_kind="layernorm",
        norm_has_bias=True,
        **_layer_window(c, fallback_layers=n_layers),
    )


def _nemotron(c: Config, name: str) -> ModelSpec:
    # Nemotron(-4): squared-ReLU MLP (up, down), LayerNorm1P with bias.
    bias = _flag(c, "attention_bias", False)
    return _decoder(
        c,
        name,
        qkv_bias=bias,
        out_bias=bias,
        mlp_bias=_flag(c, "mlp_bias", False),
        ffn_kind="plain",
        norm_kind="layernorm",
        norm_has_bias=True,
    )


def _cohere(c: Config, name: str) -> ModelSpec:
    # Command R: parallel block off one bias-free LayerNorm; optional per-head QK LayerNorm.
    bias = _flag(c, "attention_bias", False)
    return _decoder(
        c,
        name,
        tied_default=True,
        qkv_bias=bias,
        out_bias=bias,
        norm_kind="layernorm",
        norms_per_layer=1,
        qk_norm="per_head" if _flag(c, "use_qk_norm", False) else "none",
    )


def _cohere2(c: Config, name: str) -> ModelSpec:
    bias = _flag(c, "attention_bias", False)
    return _decoder(
        c,
        name,
        tied_default=True,
        qkv_bias=bias,
        out_bias=bias,
        norm_kind="layernorm",
        norms_per_layer=1,
        # Command R7B: three sliding layers to one global (sliding_window_pattern 4).
        **_layer_window(c, fallback_layers=_pattern_layers(c, "sliding_window_pattern", 4)),
    )


def _glm(c: Config, name: str) -> ModelSpec:
    return _decoder(c, name, head_dim_default=128, qkv_bias=_flag(c, "attention_bias", True))


def _glm4(c: Config, name: str) -> ModelSpec:
    # GLM-4-0414: post-attention and post-MLP norms besides the pre-norms (four per layer).
    return _decoder(
        c, name, head_dim_default=128, qkv_bias=_flag(c, "attention_bias", True), norms_per_layer=4
    )


def _olmo2(c: Config, name: str) -> ModelSpec:
    # OLMo 2: norms after attention and after the MLP (two per layer, none before); QK-norm over the
    # whole query and key projections.
    bias = _flag(c, "attention_bias", False)
    return _decoder(c, name, qkv_bias=bias, out_bias=bias, qk_norm="per_head")


def _olmo3(c: Config, name: str) -> ModelSpec:
    bias = _flag(c, "attention_bias", False)
    return _decoder(c, name, qkv_bias=bias, out_bias=bias, qk_norm="per_head", **_layer_window(c))


def _olmoe(c: Config, name: str) -> ModelSpec:
    bias = _flag(c, "attention_bias", False)
    d_model = _get(c, "hidden_size")
    n_heads = _get(c, "num_attention_heads")
    if _get(c, "head_dim", default=d_model // n_heads) * n_heads != d_model:
        raise InvalidInput(
            "OLMoE norms queries over hidden_size: head_dim × num_attention_heads must equal hidden_size.",
            field="head_dim",
        )
    return _decoder(
        c,
        name,
        qkv_bias=bias,
        out_bias=bias,
        qk_norm="per_head",
        d_ff=_get(c, "intermediate_size"),
        **_moe(c, experts="num_experts", expert_d_ff="intermediate_size"),
    )


def _exaone4(c: Config, name: str) -> ModelSpec:
    # EXAONE 4.0: OLMo-2-style post-norms, QK-norm per head, three local layers to one global.
    return _decoder(
        c,
        name,
        qk_norm="head",
        **_layer_window(c, fallback_layers=_pattern_layers(c, "sliding_window_pattern", 4)),
    )


def _gpt_oss(c: Config, name: str) -> ModelSpec:
    # gpt-oss: biases on q/k/v/o, a learned sink logit per head, every layer MoE with biased experts
    # and router, sliding and full attention alternating.
    bias = _flag(c, "attention_bias", True)
    n_layers = _get(c, "num_hidden_layers")
    expert_ff = _get(c, "intermediate_size")
    return _decoder(
        c,
        name,
        head_dim_default=64,
        qkv_bias=bias,
        out_bias=bias,
        d_ff=expert_ff,
        attention_sinks=True,
        n_experts=_get(c, "num_local_experts"),
        experts_per_token=_get(c, "num_experts_per_tok", "experts_per_token"),
        expert_d_ff=expert_ff,
        router_bias=True,
        expert_bias=True,
        **_layer_window(c, fallback_layers=n_layers // 2 + n_layers % 2),
    )


def _deepseek(c: Config, name: str, *, dense_first_default: int, shared_default: int) -> ModelSpec:
    if _flag(c, "attention_bias", False):
        raise InvalidInput(
            "MLA with attention_bias is not modelled; give the dimensions explicitly.", field="attention_bias"
        )
    moe_ff = _get(c, "moe_intermediate_size")
    n_shared = _get(c, "n_shared_experts", default=shared_default)
    nope = _get(c, "qk_nope_head_dim")
    rope = _get(c, "qk_rope_head_dim")
    return _decoder(
        c,
        name,
        mlp_bias=_flag(c, "mlp_bias", False),
        head_dim=nope + rope,
        n_experts=_get(c, "n_routed_experts"),
        experts_per_token=_get(c, "num_experts_per_tok"),
        expert_d_ff=moe_ff,
        n_shared_experts=n_shared,
        shared_expert_d_ff=moe_ff if n_shared else 0,
        first_k_dense_layers=_get(c, "first_k_dense_replace", default=dense_first_default),
        moe_layer_frequency=_get(c, "moe_layer_freq", default=1),
        # q_lora_rank defaults to 1536 in both config classes; an explicit null is a plain q_proj
        # (DeepSeek-V2-Lite).
        q_lora_rank=None
        if "q_lora_rank" in c and c["q_lora_rank"] is None
        else _get(c, "q_lora_rank", default=1536),
        kv_lora_rank=_get(c, "kv_lora_rank"),
        qk_nope_head_dim=nope,
        qk_rope_head_dim=rope,
        v_head_dim=_get(c, "v_head_dim"),
    )


def _deepseek_v2(c: Config, name: str) -> ModelSpec:
    return _deepseek(c, name, dense_first_default=0, shared_default=2)


def _deepseek_v3(c: Config, name: str) -> ModelSpec:
    return _deepseek(c, name, dense_first_default=3, shared_default=1)


def _llama4_text(c: Config, name: str) -> ModelSpec:
    # Llama 4: MoE every interleave_moe_layer_step-th layer (one shared expert of intermediate_size),
    # dense layers of intermediate_size_mlp; weightless L2 QK-norm; NoPE and chunked attention layers
    # (no parameters).
    bias = _flag(c, "attention_bias", False)
    return _decoder(
        c,
        name,
        qkv_bias=bias,
        out_bias=bias,
        d_ff=_get(c, "intermediate_size_mlp"),
        **_moe(c, experts="num_local_experts", expert_d_ff="intermediate_size"),
        n_shared_experts=1,
        shared_expert_d_ff=_get(c, "intermediate_size"),
        moe_layer_frequency=_get(c, "interleave_moe_layer_step", default=1),
    )


def _gpt2(c: Config, name: str) -> ModelSpec:
    d_model = _get(c, "n_embd", "hidden_size")
    return build_model_spec(
        name=name,
        n_layers=_get(c, "n_layer", "num_hidden_layers"),
        d_model=d_model,
        n_heads=_get(c, "n_head", "num_attention_heads"),
        d_ff=_get(c, "n_inner", default=4 * d_model),
        vocab_size=_get(c, "vocab_size"),
        ffn_kind="plain",
        tied_embeddings=_flag(c, "tie_word_embeddings", True),
        position_embedding="learned",
        max_position_embeddings=_get(c, "n_positions", "max_position_embeddings"),
        norm_kind="layernorm",
        norm_has_bias=True,
        qkv_bias=True,
        attn_out_bias=True,
        mlp_bias=True,
    )


def _gpt_neox(c: Config, name: str) -> ModelSpec:
    bias = _flag(c, "attention_bias", True)
    return build_model_spec(
        name=name,
        n_layers=_get(c, "num_hidden_layers"),
        d_model=_get(c, "hidden_size"),
        n_heads=_get(c, "num_attention_heads"),
        d_ff=_get(c, "intermediate_size"),
        vocab_size=_get(c, "vocab_size"),
        ffn_kind="plain",
        tied_embeddings=_flag(c, "tie_word_embeddings", False),
        position_embedding="rope",  # rotary on rotary_pct of each head: no parameters either way
        norm_kind="layernorm",
        norm_has_bias=True,
        qkv_bias=bias,
        attn_out_bias=bias,
        mlp_bias=True,
    )


def _opt(c: Config, name: str) -> ModelSpec:
    d_model = _get(c, "hidden_size")
    if _get(c, "word_embed_proj_dim", default=d_model) != d_model:
        raise InvalidInput(
            "OPT with word_embed_proj_dim != hidden_size (opt-350m) has extra projections this "
            "service does not model; give the dimensions explicitly.",
            field="word_embed_proj_dim",
        )
    bias = _flag(c, "enable_bias", True)
    return build_model_spec(
        name=name,
        n_layers=_get(c, "num_hidden_layers"),
        d_model=d_model,
        n_heads=_get(c, "num_attention_heads"),
        d_ff=_get(c, "ffn_dim"),
        vocab_size=_get(c, "vocab_size"),
        ffn_kind="plain",
        tied_embeddings=_flag(c, "tie_word_embeddings", True),
        position_embedding="learned",
        # OPTLearnedPositionalEmbedding keeps 2 extra rows (offset 2; transformers modeling_opt.py).
        max_position_embeddings=_get(c, "max_position_embeddings") + 2,
        norm_kind="layernorm",
        norm_has_bias=_flag(c, "layer_norm_elementwise_affine", True),
        final_norm=_flag(c, "do_layer_norm_before", True),
        qkv_bias=bias,
        attn_out_bias=bias,
        mlp_bias=bias,
    )


def _falcon(c: Config, name: str) -> ModelSpec:
    n_heads = _get(c, "num_attention_heads", "n_head")
    d_model = _get(c, "hidden_size")
    if _flag(c, "new_decoder_architecture", False):
        n_kv = _get(c, "num_kv_heads", "n_head_kv", default=n_heads)
        norms = _get(c, "num_ln_in_parallel_attn", default=2)
    else:
        n_kv = 1 if _flag(c, "multi_query", True) else n_heads
        norms = 1 if _flag(c, "parallel_attn", True) else 2
    bias = _flag(c, "bias", False)
    return build_model_spec(
        name=name,
        n_layers=_get(c, "num_hidden_layers", "n_layer"),
        d_model=d_model,
        n_heads=n_heads,
        n_kv_heads=n_kv,
        head_dim=_get(c, "head_dim", default=None),
        d_ff=_get(c, "ffn_hidden_size", default=4 * d_model),
        vocab_size=_get(c, "vocab_size"),
        ffn_kind="plain",
        tied_embeddings=_flag(c, "tie_word_embeddings", True),
        position_embedding="alibi" if _flag(c, "alibi", False) else "rope",
        norm_kind="layernorm",
        norm_has_bias=True,
        norms_per_layer=norms,
        qkv_bias=bias,
        attn_out_bias=bias,
        mlp_bias=bias,
    )


_BUILDERS: dict[str, Callable[[Config, str], ModelSpec]] = {
    "llama": _llama,
    "granite": _granite,
    "smollm3": _smollm3,
    "helium": _helium,
    "seed_oss": _seed_oss,
    "ernie4_5": _ernie4_5,
    "hunyuan_v1_dense": _hunyuan_dense,
    "arcee": _arcee,
    "mistral": _mistral,
    "ministral": _ministral,
    "mixtral": _mixtral,
    "phi": _phi,
    "phi3": _phi3,
    "phimoe": _phimoe,
    "qwen2": _qwen2,
    "qwen2_moe": _qwen2_moe,
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
    "gemma": _gemma,
    "gemma2": _gemma2,
    "gemma3_text": _gemma3_text,
    "stablelm": _stablelm,
    "starcoder2": _starcoder2,
    "nemotron": _nemotron,
    "cohere": _cohere,
    "cohere2": _cohere2,
    "glm": _glm,
    "glm4": _glm4,
    "olmo2": _olmo2,
    "olmo3": _olmo3,
    "olmoe": _olmoe,
    "exaone4": _exaone4,
    "gpt_oss": _gpt_oss,
    "deepseek_v2": _deepseek_v2,
    "deepseek_v3": _deepseek_v3,
    "llama4_text": _llama4_text,
    "gpt2": _gpt2,
    "gpt_neox": _gpt_neox,
    "opt": _opt,
    "falcon": _falcon,
}

#: Wrappers read through their text decoder's config (``text_config``).
_NESTED_TEXT: dict[str, str] = {"mistral3": "mistral", "gemma3": "gemma3_text", "llama4": "llama4_text"}

SUPPORTED_HF_MODEL_TYPES: tuple[str, ...] = (*_BUILDERS, *_NESTED_TEXT)


def from_hf_config(config: Mapping[str, Any], *, name: str | None = None) -> ModelSpec:
    """A :class:`ModelSpec` from a Hugging Face ``config.json`` object (transformers' key names).

    Supported ``model_type`` values are :data:`SUPPORTED_HF_MODEL_TYPES`. Keys that only change
    numerics (rope scaling, dropout, init, multipliers) are ignored. Errors name the config key at
    fault; an unsupported family's error lists the dimensions to give instead.
    """
    if not isinstance(config, Mapping):
        raise InvalidInput("the Hugging Face config must be a JSON object (config.json).", field=None)
    model_type = config.get("model_type")
    label = name or str(config.get("_name_or_path") or model_type)
    if isinstance(model_type, str) and model_type in _NESTED_TEXT:
        text = config.get("text_config")
        if not isinstance(text, Mapping):
            raise InvalidInput(
                f"a {model_type} config holds its decoder in text_config; add text_config (the text "
                f"model's config) or give the dimensions explicitly ({_EXPLICIT_FIELDS}).",
                field="text_config",
            )
        inner = str(text.get("model_type") or _NESTED_TEXT[model_type])
        builder = _BUILDERS.get(inner)
        if builder is None:
            raise InvalidInput(
                f"text_config.model_type {inner!r} is not supported; give the dimensions explicitly "
                f"({_EXPLICIT_FIELDS}).",
                field="text_config.model_type",
            )
        return _read(builder, text, label, prefix="text_config.")
    if not isinstance(model_type, str) or model_type not in _BUILDERS:
        raise InvalidInput(
            f"model_type {model_type!r} is not supported; supported: {', '.join(SUPPORTED_HF_MODEL_TYPES)}. "
            f"Give the dimensions explicitly instead ({_EXPLICIT_FIELDS}) or name a preset.",
            field="model_type",
        )
    return _read(_BUILDERS[model_type], config, label, prefix="")


def _read(
    builder: Callable[[Config, str], ModelSpec], config: Config, name: str, *, prefix: str
) -> ModelSpec:
    if not prefix:
        return builder(config, name)
    try:
        return builder(config, name)
    except InvalidInput as exc:
        raise InvalidInput(exc.message, field=f"{prefix}{exc.field}" if exc.field else None) from exc
