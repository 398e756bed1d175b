"""Model specs: parameter counts against published sizes, HF configs, presets, validation."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.domain.errors import InvalidInput, NotFound
from service.domain.models import (
    PRESETS,
    build_model_spec,
    count_parameters,
    from_hf_config,
    get_preset,
)


def total(preset_id: str) -> int:
    return count_parameters(get_preset(preset_id).spec).total


# Published parameter counts (model cards / papers), checked to 0.5%.
@pytest.mark.parametrize(
    ("preset_id", "published"),
    [
        ("llama3-8b", 8.03e9),  # Llama 3 model card: 8.03B
        ("llama3-70b", 70.6e9),  # 70.6B
        ("llama3.1-405b", 405.9e9),  # Llama 3.1 405B model card
        ("llama2-7b", 6.74e9),
        ("mixtral-8x7b", 46.7e9),  # Mixtral paper: 46.7B total
        ("gpt3-175b", 174.6e9),  # GPT-3 175B: 174.6B by its Table 2.1 dimensions
        ("deepseek-v3", 671e9),  # DeepSeek-V3: 671B total
        ("palm-540b", 540.35e9),  # PaLM Appendix B
        ("mistral-7b", 7.24e9),
        ("qwen2.5-7b", 7.61e9),  # Qwen2.5 report Table 1
        ("qwen2.5-72b", 72.7e9),
        ("gemma2-9b", 9.24e9),
        ("gemma2-27b", 27.2e9),
        ("gpt-neox-20b", 20.55e9),  # GPT-NeoX paper: 20.55B
        ("bloom-176b", 176.2e9),
        ("mpt-30b", 29.95e9),
    ],
)
def test_parameter_count_matches_the_published_figure(preset_id: str, published: float) -> None:
    assert total(preset_id) == pytest.approx(published, rel=0.005)


def test_llama3_8b_has_exactly_the_hugging_face_parameter_count() -> None:
    # meta-llama/Meta-Llama-3-8B: 8,030,261,248 parameters (safetensors metadata).
    assert total("llama3-8b") == 8_030_261_248


def test_mixtral_8x7b_activates_12_9_billion_parameters_per_token() -> None:
    counts = count_parameters(get_preset("mixtral-8x7b").spec)
    assert counts.active_per_token == pytest.approx(12.9e9, rel=0.005)


def test_deepseek_v3_activates_about_37_billion_parameters_per_token() -> None:
    # "37B activated" is two significant figures; the count with embeddings and head is 37.5B.
    counts = count_parameters(get_preset("deepseek-v3").spec)
    assert 36.5e9 <= counts.active_per_token <= 37.6e9


def test_mpt_7b_rounds_to_the_published_6_7_billion() -> None:
    # Model card: 6.7B (6.65B unrounded: d 4096, L 32, vocab 50432, no biases, tied, ALiBi).
    assert total("mpt-7b") == pytest.approx(6.7e9, rel=0.01)


def test_mpt_7b_benchmark_model_matches_llm_foundry_num_params() -> None:
    # llm-foundry benchmarking README, H100 BF16 table, 7b at seq 2048: NumParams 6658859008
    # (learned positions 2048, biases on, LayerNorm with bias, vocab 50368).
    spec = build_model_spec(
        name="mpt-7b benchmark",
        n_layers=32,
        d_model=4096,
        n_heads=32,
        vocab_size=50368,
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
    assert count_parameters(spec).total == 6_658_859_008


@pytest.mark.parametrize("preset_id", ["gpt3-125m", "gpt3-760m", "gpt3-6.7b", "gpt3-13b", "gpt3-175b"])
def test_gpt3_sizes_match_table_2_1_labels(preset_id: str) -> None:
    preset = get_preset(preset_id)
    assert preset.published_parameters is not None
    assert total(preset_id) == pytest.approx(preset.published_parameters, rel=0.01)


def test_every_preset_with_a_published_size_is_within_two_percent_of_it() -> None:
    for preset in PRESETS.values():
        if preset.published_parameters is not None:
            got = count_parameters(preset.spec).total
            assert got == pytest.approx(preset.published_parameters, rel=0.02), preset.id


def test_counts_add_up() -> None:
    for preset in PRESETS.values():
        c = count_parameters(preset.spec)
        assert c.total == c.embedding + c.non_embedding
        assert c.total == c.attention + c.mlp + c.norms + c.embedding
        assert c.active_per_token <= c.total
        assert (c.active_per_token == c.total) == (not preset.spec.is_moe)


def test_the_required_presets_exist_and_cite_a_source() -> None:
    required = [
        "gpt3-125m",
        "gpt3-350m",
        "gpt3-760m",
        "gpt3-1.3b",
        "gpt3-2.7b",
        "gpt3-6.7b",
        "gpt3-13b",
        "gpt3-175b",
        "llama2-7b",
        "llama2-13b",
        "llama2-70b",
        "llama3-8b",
        "llama3-70b",
        "llama3.1-8b",
        "llama3.1-70b",
        "llama3.1-405b",
        "mistral-7b",
        "mixtral-8x7b",
        "mixtral-8x22b",
        "qwen2.5-7b",
        "qwen2.5-72b",
        "gemma2-9b",
        "gemma2-27b",
        "deepseek-v3",
        "gpt-neox-20b",
        "opt-175b",
        "bloom-176b",
        "mpt-7b",
        "mpt-30b",
        "palm-540b",
    ]
    for preset_id in required:
        preset = get_preset(preset_id)
        assert preset.id == preset_id
        assert preset.source


def test_unknown_preset_is_not_found_with_close_matches() -> None:
    with pytest.raises(NotFound) as err:
        get_preset("llama3-8")
    assert "llama3-8b" in err.value.close_matches
    assert "llama3-8b" in err.value.message


def test_preset_lookup_ignores_case() -> None:
    assert get_preset("Llama3-8B").id == "llama3-8b"


# --- validation ----------------------------------------------------------------------------------


def test_heads_must_be_a_multiple_of_kv_heads() -> None:
    with pytest.raises(InvalidInput) as err:
        build_model_spec(name="x", n_layers=2, d_model=64, n_heads=8, n_kv_heads=3, vocab_size=10)
    assert err.value.field == "n_kv_heads"


@pytest.mark.parametrize("field", ["n_layers", "d_model", "vocab_size"])
def test_dimensions_must_be_positive(field: str) -> None:
    kwargs = {"name": "x", "n_layers": 2, "d_model": 64, "n_heads": 4, "vocab_size": 10}
    kwargs[field] = 0
    with pytest.raises(InvalidInput) as err:
        build_model_spec(**kwargs)  # type: ignore[arg-type]
    assert err.value.field == field


def test_learned_positions_need_a_table_size() -> None:
    with pytest.raises(InvalidInput) as err:
        build_model_spec(
            name="x", n_layers=2, d_model=64, n_heads=4, vocab_size=10, position_embedding="learned"
        )
    assert err.value.field == "max_position_embeddings"


def test_moe_needs_experts_per_token_within_the_expert_count() -> None:
    with pytest.raises(InvalidInput) as err:
        build_model_spec(
            name="x", n_layers=2, d_model=64, n_heads=4, vocab_size=10, n_experts=4, experts_per_token=5,
            expert_d_ff=32,
        )  # fmt: skip
    assert err.value.field == "experts_per_token"


def test_a_spec_is_frozen_and_hashable() -> None:
    spec = get_preset("llama3-8b").spec
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.n_layers = 3  # type: ignore[misc]
    assert hash(spec) == hash(dataclasses.replace(spec))


# --- Hugging Face configs ------------------------------------------------------------------------

LLAMA3_8B_CONFIG = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "rope_theta": 500000.0,
}


def test_llama_config_gives_the_preset_dimensions() -> None:
    spec = from_hf_config(LLAMA3_8B_CONFIG)
    assert count_parameters(spec).total == 8_030_261_248


def test_mixtral_config_counts_46_7_billion() -> None:
    config = {
        "model_type": "mixtral",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "vocab_size": 32000,
        "sliding_window": None,
    }
    counts = count_parameters(from_hf_config(config))
    assert counts.total == pytest.approx(46.7e9, rel=0.005)
    assert counts.active_per_token == pytest.approx(12.9e9, rel=0.005)


def test_deepseek_v3_config_counts_671_billion() -> None:
    config = {
        "model_type": "deepseek_v3",
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "num_hidden_layers": 61,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "first_k_dense_replace": 3,
        "moe_layer_freq": 1,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "vocab_size": 129280,
        "tie_word_embeddings": False,
    }
    assert count_parameters(from_hf_config(config)).total == pytest.approx(671e9, rel=0.005)


def test_gpt2_config_counts_124_million() -> None:
    # openai-community/gpt2: 124,439,808 parameters.
    config = {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257,
              "n_positions": 1024}  # fmt: skip
    assert count_parameters(from_hf_config(config)).total == 124_439_808


def test_gpt_neox_config_counts_20_billion() -> None:
    config = {
        "model_type": "gpt_neox",
        "hidden_size": 6144,
        "intermediate_size": 24576,
        "num_attention_heads": 64,
        "num_hidden_layers": 44,
        "vocab_size": 50432,
        "rotary_pct": 0.25,
        "tie_word_embeddings": False,
    }
    assert count_parameters(from_hf_config(config)).total == pytest.approx(20.55e9, rel=0.005)


def test_opt_config_counts_the_two_offset_position_rows() -> None:
    # facebook/opt-125m: 125,239,296 parameters (positions 2048 + 2).
    config = {
        "model_type": "opt",
        "hidden_size": 768,
        "ffn_dim": 3072,
        "num_attention_heads": 12,
        "num_hidden_layers": 12,
        "vocab_size": 50272,
        "max_position_embeddings": 2048,
        "word_embed_proj_dim": 768,
    }
    assert count_parameters(from_hf_config(config)).total == 125_239_296


def test_falcon_7b_config_is_multi_query_with_one_norm_per_layer() -> None:
    # tiiuae/falcon-7b: 6.92B.
    config = {
        "model_type": "falcon",
        "hidden_size": 4544,
        "num_attention_heads": 71,
        "num_hidden_layers": 32,
        "vocab_size": 65024,
        "multi_query": True,
        "parallel_attn": True,
        "new_decoder_architecture": False,
        "bias": False,
        "alibi": False,
    }
    spec = from_hf_config(config)
    assert spec.n_kv_heads == 1
    assert spec.norms_per_layer == 1
    assert 6.9e9 <= count_parameters(spec).total <= 7.3e9


def test_falcon_40b_config_uses_its_kv_heads() -> None:
    config = {
        "model_type": "falcon",
        "hidden_size": 8192,
        "num_attention_heads": 128,
        "num_kv_heads": 8,
        "num_hidden_layers": 60,
        "vocab_size": 65024,
        "new_decoder_architecture": True,
        "bias": False,
    }
    spec = from_hf_config(config)
    assert spec.n_kv_heads == 8
    assert spec.norms_per_layer == 2
    assert 40e9 <= count_parameters(spec).total <= 42e9


def test_gemma2_config_marks_half_the_layers_as_sliding_window() -> None:
    config = {
        "model_type": "gemma2",
        "hidden_size": 3584,
        "intermediate_size": 14336,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 256,
        "num_hidden_layers": 42,
        "vocab_size": 256000,
        "sliding_window": 4096,
    }
    spec = from_hf_config(config)
    assert spec.n_sliding_window_layers == 21
    assert count_parameters(spec).total == pytest.approx(9.24e9, rel=0.005)


def test_qwen2_config_has_qkv_bias() -> None:
    config = {
        "model_type": "qwen2",
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "num_hidden_layers": 28,
        "vocab_size": 152064,
        "tie_word_embeddings": False,
    }
    spec = from_hf_config(config)
    assert spec.qkv_bias
    assert count_parameters(spec).total == pytest.approx(7.61e9, rel=0.005)


def test_qwen2_moe_config_counts_its_shared_expert() -> None:
    # Qwen/Qwen1.5-MoE-A2.7B: 14.3B total, 2.7B activated.
    config = {
        "model_type": "qwen2_moe",
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "num_hidden_layers": 24,
        "num_experts": 60,
        "num_experts_per_tok": 4,
        "decoder_sparse_step": 1,
        "vocab_size": 151936,
        "tie_word_embeddings": False,
    }
    counts = count_parameters(from_hf_config(config))
    assert counts.total == pytest.approx(14.3e9, rel=0.01)
    assert counts.active_per_token == pytest.approx(2.7e9, rel=0.04)


def test_unknown_model_type_names_the_explicit_fields_to_give() -> None:
    with pytest.raises(InvalidInput) as err:
        from_hf_config({"model_type": "mamba"})
    assert err.value.field == "model_type"
    assert "n_layers" in err.value.message and "d_model" in err.value.message


def test_missing_key_is_named() -> None:
    config = dict(LLAMA3_8B_CONFIG)
    del config["num_hidden_layers"]
    with pytest.raises(InvalidInput) as err:
        from_hf_config(config)
    assert err.value.field == "num_hidden_layers"
    assert "num_hidden_layers" in err.value.message


@given(st.integers(min_value=1, max_value=200), st.integers(min_value=1, max_value=200))
def test_parameter_count_is_monotone_in_layers(a: int, b: int) -> None:
    lo, hi = sorted((a, b))
    base = get_preset("llama3-8b").spec
    small = dataclasses.replace(base, n_layers=lo)
    large = dataclasses.replace(base, n_layers=hi)
    assert count_parameters(small).total <= count_parameters(large).total
