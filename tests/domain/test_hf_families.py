"""Each Hugging Face family read from its config.json equals the module transformers builds from it.

For every family a small config (CPU-sized dimensions) goes through transformers' own config class;
its ``to_diff_dict()`` (what ``save_pretrained`` writes as config.json) goes to :func:`from_hf_config`.
The module built from the same config is the reference:

- parameters: :func:`count_parameters` ``.total`` == ``sum(p.numel())``, exactly;
- FLOPs: the ``megatron`` convention's forward FLOPs (every matmul of the forward pass, attention
  scores over the full sequence, logits on every position) × the sequence length, plus the router
  matmuls that convention leaves out, against ``torch.utils.flop_counter.FlopCounterMode`` over one
  forward of ``SEQ_LEN`` tokens with eager attention and eager experts, within 0.5%.

Skipped with the reason shown when torch or transformers is not installed (the ``dev`` extra installs
both, so CI runs them).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from service.domain.errors import InvalidInput
from service.domain.flops import flops_per_token
from service.domain.models import ModelSpec, count_parameters, from_hf_config

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[dev]')")
transformers = pytest.importorskip(
    "transformers", reason="transformers is not installed (pip install -e '.[dev]')"
)
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

SEQ_LEN = 24
BASE: dict[str, Any] = {
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 96,
    "num_hidden_layers": 4,
    "vocab_size": 320,
    "max_position_embeddings": 128,
}
MOE: dict[str, Any] = {"num_experts_per_tok": 2, "moe_intermediate_size": 32}
SLIDING = ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]


def _router(spec: ModelSpec) -> float:
    """Router matmuls per token: the megatron convention leaves them out, the counter sees them."""
    per_layer = 2 * spec.d_model * spec.n_experts + (2 * spec.d_model if spec.shared_expert_gate else 0)
    return spec.n_moe_layers * per_layer


def _llama4_dense_experts(spec: ModelSpec) -> float:
    # Llama4TextExperts runs every expert on every token (router scores zero the unrouted ones), so
    # the counter sees all n_experts; the model's FLOPs are the routed ones.
    return (
        spec.n_moe_layers
        * 2
        * (spec.n_experts - spec.experts_per_token)
        * 3
        * spec.d_model
        * spec.expert_d_ff
    )


@dataclass(frozen=True)
class Family:
    model_type: str
    config: dict[str, Any]
    counter_extra: Callable[[ModelSpec], float] | None = None
    text_model_type: str | None = None
    checks: dict[str, Any] = field(default_factory=dict)


FAMILIES = [
    Family("llama", {**BASE, "attention_bias": True, "mlp_bias": True}),
    Family("granite", {**BASE, "embedding_multiplier": 12.0, "residual_multiplier": 0.22}),
    Family("smollm3", {**BASE, "no_rope_layer_interval": 2}, checks={"tied_embeddings": True}),
    Family("helium", {**BASE, "head_dim": 16}),
    Family("seed_oss", {**BASE, "head_dim": 16}, checks={"qkv_bias": True, "attn_out_bias": False}),
    Family("ernie4_5", {**BASE, "head_dim": 16, "use_bias": True}),
    Family("hunyuan_v1_dense", {**BASE, "head_dim": 16}, checks={"qk_norm": "head"}),
    Family("arcee", BASE, checks={"ffn_kind": "plain"}),
    Family("mistral", {**BASE, "sliding_window": 8}, checks={"n_sliding_window_layers": 4}),
    Family("ministral", {**BASE, "sliding_window": 8, "layer_types": SLIDING, "head_dim": 16}, checks={"n_sliding_window_layers": 2}),
    Family("mixtral", {**BASE, "num_local_experts": 4, "num_experts_per_tok": 2}),
    Family("phi", {**BASE, "qk_layernorm": True}, checks={"lm_head_bias": True, "norms_per_layer": 1}),
    Family("phi3", BASE),
    Family(
        "phimoe",
        {**BASE, "num_local_experts": 4, "num_experts_per_tok": 2, "lm_head_bias": True, "attention_bias": True},
    ),
    Family("qwen2", BASE, checks={"qkv_bias": True}),
    Family(
        "qwen2_moe",
        {**BASE, **MOE, "num_experts": 4, "shared_expert_intermediate_size": 48, "mlp_only_layers": [1]},
        checks={"n_shared_experts": 1, "dense_layers": (1,)},
    ),
    Family("qwen3", {**BASE, "head_dim": 16}, checks={"qk_norm": "head"}),
    Family("qwen3", {**BASE}, checks={"head_dim": 128}),  # no head_dim key: Qwen3Config's default 128
    Family(
        "qwen3_moe",
        {**BASE, **MOE, "head_dim": 16, "num_experts": 4, "decoder_sparse_step": 2},
        checks={"moe_layer_frequency": 2},
    ),
    Family("gemma", {**BASE, "head_dim": 16}, checks={"tied_embeddings": True}),
    Family("gemma2", {**BASE, "head_dim": 16, "sliding_window": 8}, checks={"norms_per_layer": 4}),
    Family(
        "gemma3_text",
        {**BASE, "head_dim": 16, "sliding_window": 8, "sliding_window_pattern": 2},
        checks={"qk_norm": "head", "norms_per_layer": 4},
    ),
    Family("stablelm", {**BASE, "qk_layernorm": True, "use_qkv_bias": True, "use_parallel_residual": True}),
    Family("starcoder2", {**BASE, "sliding_window": 8}, checks={"ffn_kind": "plain", "mlp_bias": True}),
    Family("nemotron", {**BASE, "head_dim": 16}, checks={"ffn_kind": "plain", "norm_has_bias": True}),
    Family("cohere", {**BASE, "use_qk_norm": True}, checks={"qk_norm": "per_head", "norms_per_layer": 1}),
    Family("cohere2", {**BASE, "sliding_window": 8, "layer_types": SLIDING}),
    Family("glm", {**BASE, "head_dim": 16}, checks={"qkv_bias": True}),
    Family("glm4", {**BASE, "head_dim": 16}, checks={"norms_per_layer": 4}),
    Family("olmo2", BASE, checks={"qk_norm": "per_head"}),
    Family("olmo3", {**BASE, "sliding_window": 8, "layer_types": SLIDING}),
    Family("olmoe", {**BASE, "num_experts": 4, "num_experts_per_tok": 2, "intermediate_size": 32}),
    Family("exaone4", {**BASE, "sliding_window": 8, "layer_types": SLIDING}, checks={"qk_norm": "head"}),
    Family(
        "gpt_oss",
        {**BASE, "head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 8},
        checks={"attention_sinks": True, "expert_bias": True, "router_bias": True},
    ),
    Family(
        "deepseek_v2",
        {
            **BASE,
            **MOE,
            "n_routed_experts": 4,
            "n_shared_experts": 1,
            "first_k_dense_replace": 1,
            "q_lora_rank": None,
            "kv_lora_rank": 32,
            "qk_nope_head_dim": 16,
            "qk_rope_head_dim": 8,
            "head_dim": 8,  # the rotary width, as DeepseekV3Config sets it
            "num_key_value_heads": 4,  # MLA: one latent, expanded to every head
            "v_head_dim": 16,
        },
        checks={"q_lora_rank": None, "first_k_dense_layers": 1},
    ),
    Family(
        "deepseek_v3",
        {
            **BASE,
            **MOE,
            "n_routed_experts": 4,
            "n_shared_experts": 1,
            "first_k_dense_replace": 2,
            "q_lora_rank": 24,
            "kv_lora_rank": 32,
            "qk_nope_head_dim": 16,
            "qk_rope_head_dim": 8,
            "head_dim": 8,  # the rotary width, as DeepseekV3Config sets it
            "num_key_value_heads": 4,  # MLA: one latent, expanded to every head
            "v_head_dim": 16,
            "n_group": 2,
            "topk_group": 1,
        },
        checks={"q_lora_rank": 24, "n_moe_layers": 2},
    ),
    Family(
        "llama4_text",
        {
            **BASE,
            "head_dim": 16,
            "intermediate_size_mlp": 96,
            "intermediate_size": 32,
            "num_local_experts": 4,
            "num_experts_per_tok": 1,
            "interleave_moe_layer_step": 2,
        },
        counter_extra=_llama4_dense_experts,
        checks={"n_moe_layers": 2, "n_shared_experts": 1},
    ),
    Family(
        "gpt2",
        {"n_embd": 64, "n_head": 4, "n_layer": 4, "vocab_size": 320, "n_positions": 128},
        checks={"position_embedding": "learned"},
    ),
    Family("gpt_neox", {**BASE, "num_key_value_heads": 4}),
    Family("opt", {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 4, "ffn_dim": 96,
                   "vocab_size": 320, "max_position_embeddings": 128, "word_embed_proj_dim": 64}),
    Family("falcon", {**BASE, "num_attention_heads": 4, "new_decoder_architecture": True, "num_kv_heads": 2}),
]  # fmt: skip


def _build(family: Family) -> tuple[dict[str, Any], Any]:
    # Token ids inside the small vocabulary (some config classes default to a large tokenizer's ids).
    tokens = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
    config = transformers.AutoConfig.for_model(family.model_type, **{**tokens, **family.config})
    config._attn_implementation = "eager"
    if hasattr(config, "_experts_implementation"):
        config._experts_implementation = "eager"
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    return config.to_diff_dict(), module.eval()


def _counted_forward_flops(module: Any, vocab_size: int) -> int:
    ids = torch.randint(0, vocab_size, (1, SEQ_LEN), generator=torch.Generator().manual_seed(0))
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        module(input_ids=ids, use_cache=False)
    return int(counter.get_total_flops())


def _id(family: Family) -> str:
    return family.model_type + ("-default-head-dim" if "head_dim" in family.checks else "")


@pytest.mark.parametrize("family", FAMILIES, ids=_id)
def test_family_parameter_count_equals_numel_and_flops_equal_torch_counter(family: Family) -> None:
    config_json, module = _build(family)
    spec = from_hf_config(config_json)
    for name, expected in family.checks.items():
        assert getattr(spec, name) == expected, name

    assert count_parameters(spec).total == sum(p.numel() for p in module.parameters())

    counted = _counted_forward_flops(module, spec.vocab_size)
    per_token = flops_per_token(spec, SEQ_LEN, convention="megatron").forward_flops_per_token
    extra = _router(spec) + (family.counter_extra(spec) if family.counter_extra else 0.0)
    assert (per_token + extra) * SEQ_LEN == pytest.approx(counted, rel=0.005)


def test_at_least_25_families_are_checked_against_their_modules() -> None:
    assert len({f.model_type for f in FAMILIES}) >= 25


@pytest.mark.parametrize(
    ("wrapper", "text_type", "text_config"),
    [
        ("mistral3", "mistral", {**BASE, "sliding_window": None}),
        ("gemma3", "gemma3_text", {**BASE, "head_dim": 16}),
    ],
)
def test_a_multimodal_wrapper_is_read_through_its_text_config(
    wrapper: str, text_type: str, text_config: dict[str, Any]
) -> None:
    text = transformers.AutoConfig.for_model(text_type, **text_config)
    text_module = transformers.AutoModelForCausalLM.from_config(text)
    spec = from_hf_config({"model_type": wrapper, "text_config": text.to_diff_dict()})
    assert count_parameters(spec).total == sum(p.numel() for p in text_module.parameters())


def test_an_unsupported_family_names_the_dimensions_to_give_instead() -> None:
    with pytest.raises(InvalidInput) as raised:
        from_hf_config({"model_type": "jamba", "hidden_size": 64})
    assert raised.value.field == "model_type"
    assert "n_layers, d_model, n_heads" in raised.value.message


@pytest.mark.parametrize(
    "family",
    [f for f in FAMILIES if f.model_type in {"llama", "gemma", "mixtral", "qwen2_moe", "gpt2"}],
    ids=_id,
)
def test_the_hf_trainer_convention_equals_transformers_trainer_flops(family: Family) -> None:
    # transformers 5 Trainer.floating_point_ops (trainer.py): 6 x input_ids.numel() x
    # model.num_parameters(exclude_embeddings=True), on the module itself.
    config_json, module = _build(family)
    spec = from_hf_config(config_json)
    ids = torch.zeros((2, SEQ_LEN), dtype=torch.long)
    hf_flops = 6 * ids.numel() * module.num_parameters(exclude_embeddings=True)
    ours = flops_per_token(spec, SEQ_LEN, convention="hf_trainer").training_flops_per_token
    assert ours * ids.numel() == pytest.approx(hf_flops, rel=1e-12)
