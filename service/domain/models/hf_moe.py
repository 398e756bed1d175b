"""Hugging Face readers of the mixture-of-experts families (Mixtral, PhiMoE, Qwen2/3-MoE, OLMoE,
gpt-oss, DeepSeek-V2/V3, Llama 4), each following its transformers ``modeling_*.py``: routed and shared
experts, dense-first layers, ``mlp_only_layers``, attention sinks. The dispatch by ``model_type`` is
:func:`service.domain.models.hf_config.from_hf_config`."""

from __future__ import annotations

from service.domain.errors import InvalidInput
from service.domain.models.hf_fields import (
    Config,
    config_value,
    decoder,
    dense_layers,
    flag,
    layer_window,
    moe_fields,
    qwen_window,
)
from service.domain.models.spec import ModelSpec


def mixtral(c: Config, name: str) -> ModelSpec:
    n_layers = config_value(c, "num_hidden_layers")
    return decoder(
        c,
        name,
        **moe_fields(c, experts="num_local_experts", expert_d_ff="intermediate_size"),
        **layer_window(c, fallback_layers=n_layers),
    )


def phimoe(c: Config, name: str) -> ModelSpec:
    bias = flag(c, "attention_bias", False)
    n_layers = config_value(c, "num_hidden_layers")
    return decoder(
        c,
        name,
        qkv_bias=bias,
        out_bias=bias,
        norm_kind="layernorm",
        norm_has_bias=True,
        lm_head_bias=flag(c, "lm_head_bias", False),
        **moe_fields(c, experts="num_local_experts", expert_d_ff="intermediate_size"),
        **layer_window(c, fallback_layers=n_layers),
    )


def qwen2_moe(c: Config, name: str) -> ModelSpec:
    shared = config_value(c, "shared_expert_intermediate_size", default=0)
    return decoder(
        c,
        name,
        qkv_bias=flag(c, "qkv_bias", True),
        **moe_fields(c, experts="num_experts", expert_d_ff="moe_intermediate_size"),
        n_shared_experts=1 if shared else 0,
        shared_expert_d_ff=shared,
        shared_expert_gate=bool(shared),
        moe_layer_frequency=config_value(c, "decoder_sparse_step", default=1),
        dense_layers=dense_layers(c),
        **qwen_window(c),
    )


def qwen3_moe(c: Config, name: str) -> ModelSpec:
    bias = flag(c, "attention_bias", False)
    return decoder(
        c,
        name,
        head_dim_default=128,
        qkv_bias=bias,
        out_bias=bias,
        qk_norm="head",
        **moe_fields(c, experts="num_experts", expert_d_ff="moe_intermediate_size"),
        moe_layer_frequency=config_value(c, "decoder_sparse_step", default=1),
        dense_layers=dense_layers(c),
        **qwen_window(c),
    )


def olmoe(c: Config, name: str) -> ModelSpec:
    bias = flag(c, "attention_bias", False)
    d_model = config_value(c, "hidden_size")
    n_heads = config_value(c, "num_attention_heads")
    if config_value(c, "head_dim", default=d_model // n_heads) * n_heads != d_model:
        raise InvalidInput(
            "OLMoE norms queries over hidden_size: head_dim × num_attention_heads must equal hidden_size.",
            field="head_dim",
        )
    return decoder(
        c,
        name,
        qkv_bias=bias,
        out_bias=bias,
        qk_norm="per_head",
        d_ff=config_value(c, "intermediate_size"),
        **moe_fields(c, experts="num_experts", expert_d_ff="intermediate_size"),
    )


def gpt_oss(c: Config, name: str) -> ModelSpec:
    # gpt-oss: biases on q/k/v/o, a learned sink logit per head, every layer MoE with biased experts
    # and router, sliding and full attention alternating.
    bias = flag(c, "attention_bias", True)
    n_layers = config_value(c, "num_hidden_layers")
    expert_ff = config_value(c, "intermediate_size")
    return decoder(
        c,
        name,
        head_dim_default=64,
        qkv_bias=bias,
        out_bias=bias,
        d_ff=expert_ff,
        attention_sinks=True,
        n_experts=config_value(c, "num_local_experts"),
        experts_per_token=config_value(c, "num_experts_per_tok", "experts_per_token"),
        expert_d_ff=expert_ff,
        router_bias=True,
        expert_bias=True,
        **layer_window(c, fallback_layers=n_layers // 2 + n_layers % 2),
    )


def deepseek(c: Config, name: str, *, dense_first_default: int, shared_default: int) -> ModelSpec:
    if flag(c, "attention_bias", False):
        raise InvalidInput(
            "MLA with attention_bias is not modelled; give the dimensions explicitly.", field="attention_bias"
        )
    moe_ff = config_value(c, "moe_intermediate_size")
    n_shared = config_value(c, "n_shared_experts", default=shared_default)
    nope = config_value(c, "qk_nope_head_dim")
    rope = config_value(c, "qk_rope_head_dim")
    return decoder(
        c,
        name,
        mlp_bias=flag(c, "mlp_bias", False),
        head_dim=nope + rope,
        n_experts=config_value(c, "n_routed_experts"),
        experts_per_token=config_value(c, "num_experts_per_tok"),
        expert_d_ff=moe_ff,
        n_shared_experts=n_shared,
        shared_expert_d_ff=moe_ff if n_shared else 0,
        first_k_dense_layers=config_value(c, "first_k_dense_replace", default=dense_first_default),
        moe_layer_frequency=config_value(c, "moe_layer_freq", default=1),
        # q_lora_rank defaults to 1536 in both config classes; an explicit null is a plain q_proj
        # (DeepSeek-V2-Lite).
        q_lora_rank=None
        if "q_lora_rank" in c and c["q_lora_rank"] is None
        else config_value(c, "q_lora_rank", default=1536),
        kv_lora_rank=config_value(c, "kv_lora_rank"),
        qk_nope_head_dim=nope,
        qk_rope_head_dim=rope,
        v_head_dim=config_value(c, "v_head_dim"),
    )


def deepseek_v2(c: Config, name: str) -> ModelSpec:
    return deepseek(c, name, dense_first_default=0, shared_default=2)


def deepseek_v3(c: Config, name: str) -> ModelSpec:
    return deepseek(c, name, dense_first_default=3, shared_default=1)


def llama4_text(c: Config, name: str) -> ModelSpec:
    # Llama 4: MoE every interleave_moe_layer_step-th layer (one shared expert of intermediate_size),
    # dense layers of intermediate_size_mlp; weightless L2 QK-norm; NoPE and chunked attention layers
    # (no parameters).
    bias = flag(c, "attention_bias", False)
    return decoder(
        c,
        name,
        qkv_bias=bias,
        out_bias=bias,
        d_ff=config_value(c, "intermediate_size_mlp"),
        **moe_fields(c, experts="num_local_experts", expert_d_ff="intermediate_size"),
        n_shared_experts=1,
        shared_expert_d_ff=config_value(c, "intermediate_size"),
        moe_layer_frequency=config_value(c, "interleave_moe_layer_step", default=1),
    )
