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
from service.domain.models.hf_fields import (
    EXPLICIT_FIELDS,
    Config,
    config_value,
    decoder,
    flag,
    layer_window,
    pattern_layers,
    qwen_window,
)
from service.domain.models.hf_moe import (
    deepseek_v2,
    deepseek_v3,
    gpt_oss,
    llama4_text,
    mixtral,
    olmoe,
    phimoe,
    qwen2_moe,
    qwen3_moe,
)
from service.domain.models.spec import ModelSpec, build_model_spec

# --------------------------------------------------------------------------------------------------
# Families


def _llama(c: Config, name: str) -> ModelSpec:
    bias = flag(c, "attention_bias", False)
    return decoder(c, name, qkv_bias=bias, out_bias=bias, mlp_bias=flag(c, "mlp_bias", False))


def _granite(c: Config, name: str) -> ModelSpec:
    # Granite 3: Llama blocks plus scalar multipliers (embedding, residual, attention, logits).
    return _llama(c, name)


def _smollm3(c: Config, name: str) -> ModelSpec:
    # SmolLM3: Llama blocks, rotary skipped on every 4th layer (NoPE: no parameters either way).
    return _llama(c, name)


def _helium(c: Config, name: str) -> ModelSpec:
    bias = flag(c, "attention_bias", False)
    return decoder(c, name, head_dim_default=128, qkv_bias=bias, mlp_bias=flag(c, "mlp_bias", False))


def _seed_oss(c: Config, name: str) -> ModelSpec:
    return decoder(
        c,
        name,
        head_dim_default=128,
        qkv_bias=flag(c, "attention_bias", True),
        out_bias=flag(c, "attention_out_bias", False),
        mlp_bias=flag(c, "mlp_bias", False),
    )


def _ernie4_5(c: Config, name: str) -> ModelSpec:
    bias = flag(c, "use_bias", False)
    return decoder(
        c, name, head_dim_default=128, tied_default=True, qkv_bias=bias, out_bias=bias, mlp_bias=bias
    )


def _hunyuan_dense(c: Config, name: str) -> ModelSpec:
    bias = flag(c, "attention_bias", False)
    return decoder(c, name, qkv_bias=bias, out_bias=bias, qk_norm="head")


def _arcee(c: Config, name: str) -> ModelSpec:
    # Arcee (AFM): ReLU² MLP, up and down projections only.
    bias = flag(c, "attention_bias", False)
    return decoder(
        c, name, qkv_bias=bias, out_bias=bias, mlp_bias=flag(c, "mlp_bias", False), ffn_kind="plain"
    )


def _mistral(c: Config, name: str) -> ModelSpec:
    n_layers = config_value(c, "num_hidden_layers")
    return decoder(c, name, **layer_window(c, fallback_layers=n_layers))


def _ministral(c: Config, name: str) -> ModelSpec:
    return decoder(c, name, **layer_window(c))


def _phi3(c: Config, name: str) -> ModelSpec:
    # Phi-3: fused qkv_proj and gate_up_proj (same counts as separate ones), no biases.
    n_layers = config_value(c, "num_hidden_layers")
    return decoder(c, name, **layer_window(c, fallback_layers=n_layers))


def _qwen2(c: Config, name: str) -> ModelSpec:
    return decoder(c, name, qkv_bias=True, **qwen_window(c))


def _qwen3(c: Config, name: str) -> ModelSpec:
    bias = flag(c, "attention_bias", False)
    return decoder(
        c, name, head_dim_default=128, qkv_bias=bias, out_bias=bias, qk_norm="head", **qwen_window(c)
    )


def _gemma(c: Config, name: str) -> ModelSpec:
    bias = flag(c, "attention_bias", False)
    return decoder(c, name, head_dim_default=256, tied_default=True, qkv_bias=bias, out_bias=bias)


def _gemma2(c: Config, name: str) -> ModelSpec:
    bias = flag(c, "attention_bias", False)
    n_layers = config_value(c, "num_hidden_layers")
    return decoder(
        c,
        name,
        head_dim_default=256,
        tied_default=True,
        qkv_bias=bias,
        out_bias=bias,
        norms_per_layer=4,  # pre- and post-norm around attention and around the MLP
        **layer_window(c, fallback_layers=n_layers // 2),  # local (even) and global layers alternate
    )


def _gemma3_text(c: Config, name: str) -> ModelSpec:
    bias = flag(c, "attention_bias", False)
    return decoder(
        c,
        name,
        head_dim_default=256,
        tied_default=True,
        qkv_bias=bias,
        out_bias=bias,
        norms_per_layer=4,
        qk_norm="head",
        # Five local layers to one global (Gemma 3 report §2.2): sliding_window_pattern 6.
        **layer_window(c, fallback_layers=pattern_layers(c, "sliding_window_pattern", 6)),
    )


def _phi(c: Config, name: str) -> ModelSpec:
    # Phi-1/1.5/2: parallel attention and MLP off one LayerNorm, biases everywhere incl. the LM head,
    # rotary on partial_rotary_factor of each head (no parameters).
    return decoder(
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
        qk_norm="head" if flag(c, "qk_layernorm", False) else "none",
        qk_norm_has_bias=True,
    )


def _stablelm(c: Config, name: str) -> ModelSpec:
    parallel = flag(c, "use_parallel_residual", False)
    return decoder(
        c,
        name,
        qkv_bias=flag(c, "use_qkv_bias", False),
        norm_kind="layernorm",
        norm_has_bias=True,
        norms_per_layer=1 if parallel else 2,
        # StableLmLayerNormPerHead: one bias-free LayerNorm per head for queries and for keys.
        qk_norm="per_head" if flag(c, "qk_layernorm", False) else "none",
    )


def _starcoder2(c: Config, name: str) -> ModelSpec:
    bias = flag(c, "use_bias", True)
    n_layers = config_value(c, "num_hidden_layers")
    return decoder(
        c,
        name,
        tied_default=True,
        qkv_bias=bias,
        out_bias=bias,
        mlp_bias=bias,
        ffn_kind="plain",
        norm_kind="layernorm",
        norm_has_bias=True,
        **layer_window(c, fallback_layers=n_layers),
    )


def _nemotron(c: Config, name: str) -> ModelSpec:
    # Nemotron(-4): squared-ReLU MLP (up, down), LayerNorm1P with bias.
    bias = flag(c, "attention_bias", False)
    return decoder(
        c,
        name,
        qkv_bias=bias,
        out_bias=bias,
        mlp_bias=flag(c, "mlp_bias", False),
        ffn_kind="plain",
        norm_kind="layernorm",
        norm_has_bias=True,
    )


def _cohere(c: Config, name: str) -> ModelSpec:
    # Command R: parallel block off one bias-free LayerNorm; optional per-head QK LayerNorm.
    bias = flag(c, "attention_bias", False)
    return decoder(
        c,
        name,
        tied_default=True,
        qkv_bias=bias,
        out_bias=bias,
        norm_kind="layernorm",
        norms_per_layer=1,
        qk_norm="per_head" if flag(c, "use_qk_norm", False) else "none",
    )


def _cohere2(c: Config, name: str) -> ModelSpec:
    bias = flag(c, "attention_bias", False)
    return decoder(
        c,
        name,
        tied_default=True,
        qkv_bias=bias,
        out_bias=bias,
        norm_kind="layernorm",
        norms_per_layer=1,
        # Command R7B: three sliding layers to one global (sliding_window_pattern 4).
        **layer_window(c, fallback_layers=pattern_layers(c, "sliding_window_pattern", 4)),
    )


def _glm(c: Config, name: str) -> ModelSpec:
    return decoder(c, name, head_dim_default=128, qkv_bias=flag(c, "attention_bias", True))


def _glm4(c: Config, name: str) -> ModelSpec:
    # GLM-4-0414: post-attention and post-MLP norms besides the pre-norms (four per layer).
    return decoder(c, name, head_dim_default=128, qkv_bias=flag(c, "attention_bias", True), norms_per_layer=4)


def _olmo2(c: Config, name: str) -> ModelSpec:
    # OLMo 2: norms after attention and after the MLP (two per layer, none before); QK-norm over the
    # whole query and key projections.
    bias = flag(c, "attention_bias", False)
    return decoder(c, name, qkv_bias=bias, out_bias=bias, qk_norm="per_head")


def _olmo3(c: Config, name: str) -> ModelSpec:
    bias = flag(c, "attention_bias", False)
    return decoder(c, name, qkv_bias=bias, out_bias=bias, qk_norm="per_head", **layer_window(c))


def _exaone4(c: Config, name: str) -> ModelSpec:
    # EXAONE 4.0: OLMo-2-style post-norms, QK-norm per head, three local layers to one global.
    return decoder(
        c,
        name,
        qk_norm="head",
        **layer_window(c, fallback_layers=pattern_layers(c, "sliding_window_pattern", 4)),
    )


def _gpt2(c: Config, name: str) -> ModelSpec:
    d_model = config_value(c, "n_embd", "hidden_size")
    return build_model_spec(
        name=name,
        n_layers=config_value(c, "n_layer", "num_hidden_layers"),
        d_model=d_model,
        n_heads=config_value(c, "n_head", "num_attention_heads"),
        d_ff=config_value(c, "n_inner", default=4 * d_model),
        vocab_size=config_value(c, "vocab_size"),
        ffn_kind="plain",
        tied_embeddings=flag(c, "tie_word_embeddings", True),
        position_embedding="learned",
        max_position_embeddings=config_value(c, "n_positions", "max_position_embeddings"),
        norm_kind="layernorm",
        norm_has_bias=True,
        qkv_bias=True,
        attn_out_bias=True,
        mlp_bias=True,
    )


def _gpt_neox(c: Config, name: str) -> ModelSpec:
    bias = flag(c, "attention_bias", True)
    return build_model_spec(
        name=name,
        n_layers=config_value(c, "num_hidden_layers"),
        d_model=config_value(c, "hidden_size"),
        n_heads=config_value(c, "num_attention_heads"),
        d_ff=config_value(c, "intermediate_size"),
        vocab_size=config_value(c, "vocab_size"),
        ffn_kind="plain",
        tied_embeddings=flag(c, "tie_word_embeddings", False),
        position_embedding="rope",  # rotary on rotary_pct of each head: no parameters either way
        norm_kind="layernorm",
        norm_has_bias=True,
        qkv_bias=bias,
        attn_out_bias=bias,
        mlp_bias=True,
    )


def _opt(c: Config, name: str) -> ModelSpec:
    d_model = config_value(c, "hidden_size")
    if config_value(c, "word_embed_proj_dim", default=d_model) != d_model:
        raise InvalidInput(
            "OPT with word_embed_proj_dim != hidden_size (opt-350m) has extra projections this "
            "service does not model; give the dimensions explicitly.",
            field="word_embed_proj_dim",
        )
    bias = flag(c, "enable_bias", True)
    return build_model_spec(
        name=name,
        n_layers=config_value(c, "num_hidden_layers"),
        d_model=d_model,
        n_heads=config_value(c, "num_attention_heads"),
        d_ff=config_value(c, "ffn_dim"),
        vocab_size=config_value(c, "vocab_size"),
        ffn_kind="plain",
        tied_embeddings=flag(c, "tie_word_embeddings", True),
        position_embedding="learned",
        # OPTLearnedPositionalEmbedding keeps 2 extra rows (offset 2; transformers modeling_opt.py).
        max_position_embeddings=config_value(c, "max_position_embeddings") + 2,
        norm_kind="layernorm",
        norm_has_bias=flag(c, "layer_norm_elementwise_affine", True),
        final_norm=flag(c, "do_layer_norm_before", True),
        qkv_bias=bias,
        attn_out_bias=bias,
        mlp_bias=bias,
    )


def _falcon(c: Config, name: str) -> ModelSpec:
    n_heads = config_value(c, "num_attention_heads", "n_head")
    d_model = config_value(c, "hidden_size")
    if flag(c, "new_decoder_architecture", False):
        n_kv = config_value(c, "num_kv_heads", "n_head_kv", default=n_heads)
        norms = config_value(c, "num_ln_in_parallel_attn", default=2)
    else:
        n_kv = 1 if flag(c, "multi_query", True) else n_heads
        norms = 1 if flag(c, "parallel_attn", True) else 2
    bias = flag(c, "bias", False)
    return build_model_spec(
        name=name,
        n_layers=config_value(c, "num_hidden_layers", "n_layer"),
        d_model=d_model,
        n_heads=n_heads,
        n_kv_heads=n_kv,
        head_dim=config_value(c, "head_dim", default=None),
        d_ff=config_value(c, "ffn_hidden_size", default=4 * d_model),
        vocab_size=config_value(c, "vocab_size"),
        ffn_kind="plain",
        tied_embeddings=flag(c, "tie_word_embeddings", True),
        position_embedding="alibi" if flag(c, "alibi", False) else "rope",
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
    "mixtral": mixtral,
    "phi": _phi,
    "phi3": _phi3,
    "phimoe": phimoe,
    "qwen2": _qwen2,
    "qwen2_moe": qwen2_moe,
    "qwen3": _qwen3,
    "qwen3_moe": qwen3_moe,
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
    "olmoe": olmoe,
    "exaone4": _exaone4,
    "gpt_oss": gpt_oss,
    "deepseek_v2": deepseek_v2,
    "deepseek_v3": deepseek_v3,
    "llama4_text": llama4_text,
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
                f"model's config) or give the dimensions explicitly ({EXPLICIT_FIELDS}).",
                field="text_config",
            )
        inner = str(text.get("model_type") or _NESTED_TEXT[model_type])
        builder = _BUILDERS.get(inner)
        if builder is None:
            raise InvalidInput(
                f"text_config.model_type {inner!r} is not supported; give the dimensions explicitly "
                f"({EXPLICIT_FIELDS}).",
                field="text_config.model_type",
            )
        return _read(builder, text, label, prefix="text_config.")
    if not isinstance(model_type, str) or model_type not in _BUILDERS:
        raise InvalidInput(
            f"model_type {model_type!r} is not supported; supported: {', '.join(SUPPORTED_HF_MODEL_TYPES)}. "
            f"Give the dimensions explicitly instead ({EXPLICIT_FIELDS}) or name a preset.",
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
