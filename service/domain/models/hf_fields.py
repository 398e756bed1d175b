"""Reading a Hugging Face ``config.json`` field by field: typed getters whose errors name the key at
fault, the rotary decoder in transformers' Llama naming, sliding-window layer mixes and MoE routing
fields. The family readers that use them are :mod:`service.domain.models.hf_config` (dense) and
:mod:`service.domain.models.hf_moe` (mixture of experts)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from service.domain.errors import InvalidInput
from service.domain.models.spec import ModelSpec, build_model_spec

EXPLICIT_FIELDS = "n_layers, d_model, n_heads, n_kv_heads, head_dim, d_ff, vocab_size, ffn_kind"

Config = Mapping[str, Any]


def config_value(config: Config, *keys: str, default: Any = ..., kind: type = int) -> Any:
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
            f"({EXPLICIT_FIELDS}).",
            field=keys[0],
        )
    return default


def flag(config: Config, key: str, default: bool) -> bool:
    return bool(config_value(config, key, default=default, kind=bool))


def layer_window(config: Config, *, fallback_layers: int | None = None) -> dict[str, Any]:
    """``sliding_window`` and how many layers use it: from ``layer_types`` when the config lists them
    (transformers ≥ 4.54 writes one entry per layer), else ``fallback_layers`` (the family's rule)."""
    window = config_value(config, "sliding_window", default=None)
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


def pattern_layers(config: Config, pattern_key: str, default_pattern: int) -> int:
    """Layers that slide under a ``sliding_window_pattern`` p: every layer except each p-th."""
    n_layers = config_value(config, "num_hidden_layers")
    pattern = config_value(config, pattern_key, default=default_pattern)
    if pattern <= 0:
        return 0
    return sum(1 for i in range(n_layers) if (i + 1) % pattern != 0)


def decoder(
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
    n_heads = config_value(config, "num_attention_heads")
    if head_dim is None:
        head_dim = config_value(config, "head_dim", default=head_dim_default)
    return build_model_spec(
        name=name,
        n_layers=config_value(config, "num_hidden_layers"),
        d_model=config_value(config, "hidden_size"),
        n_heads=n_heads,
        n_kv_heads=config_value(config, "num_key_value_heads", default=n_heads),
        head_dim=head_dim,
        d_ff=d_ff if d_ff is not None else config_value(config, "intermediate_size"),
        vocab_size=config_value(config, "vocab_size"),
        tied_embeddings=flag(config, "tie_word_embeddings", tied_default),
        qkv_bias=qkv_bias,
        attn_out_bias=out_bias,
        mlp_bias=mlp_bias,
        **options,
    )


def dense_layers(config: Config) -> tuple[int, ...]:
    value = config.get("mlp_only_layers") or []
    if not isinstance(value, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in value):
        raise InvalidInput("mlp_only_layers must be a list of layer indices.", field="mlp_only_layers")
    return tuple(sorted(set(value)))


def moe_fields(c: Config, *, experts: str, expert_d_ff: str) -> dict[str, Any]:
    # transformers 5 writes num_local_experts where older config.json files say num_experts.
    other = "num_local_experts" if experts == "num_experts" else "num_experts"
    return {
        "n_experts": config_value(c, experts, other),
        "experts_per_token": config_value(c, "num_experts_per_tok"),
        "expert_d_ff": config_value(c, expert_d_ff),
    }


def qwen_window(c: Config) -> dict[str, Any]:
    # Qwen2/3: layers with index >= max_window_layers slide, only when use_sliding_window is set.
    if not flag(c, "use_sliding_window", False):
        return {}
    n_layers = config_value(c, "num_hidden_layers")
    first = config_value(c, "max_window_layers", default=28)
    return layer_window(c, fallback_layers=max(0, n_layers - first))
