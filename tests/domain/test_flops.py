"""FLOPs conventions against their sources' published formulas and figures."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.domain.errors import InvalidInput
from service.domain.flops import (
    attended_tokens,
    flops_per_token,
    korthikanti_step_flops,
    narayanan_step_flops,
    palm_flops_per_token,
    parameter_count_for,
)
from service.domain.models import build_model_spec, count_parameters, get_preset

LLAMA3_8B = get_preset("llama3.1-8b").spec
PALM = get_preset("palm-540b").spec


def plain_gpt(n_layers: int = 105, d_model: int = 20480, vocab_size: int = 50272):
    return build_model_spec(
        name="plain gpt", n_layers=n_layers, d_model=d_model, n_heads=128, vocab_size=vocab_size,
        ffn_kind="plain",
    )  # fmt: skip


def test_palm_convention_is_six_n_plus_twelve_l_h_q_s() -> None:
    breakdown = flops_per_token(PALM, 2048, parameter_count=540.35e9)
    expected = 6 * 540.35e9 + 12 * 118 * 48 * 256 * 2048
    assert breakdown.training_flops_per_token == pytest.approx(expected, rel=1e-12)
    assert breakdown.training_flops_per_token == pytest.approx(
        palm_flops_per_token(
            parameter_count=540.35e9, n_layers=118, attention_width=48 * 256, seq_len_tokens=2048
        ),
        rel=1e-12,
    )


def test_palm_default_n_is_all_active_parameters() -> None:
    breakdown = flops_per_token(LLAMA3_8B, 4096)
    assert breakdown.parameter_count == count_parameters(LLAMA3_8B).total
    assert breakdown.embedding_policy == "all"


def test_torchtitan_n_drops_only_the_input_embedding_of_an_untied_model() -> None:
    counts = count_parameters(LLAMA3_8B)
    assert parameter_count_for(LLAMA3_8B, "exclude_input") == counts.total - 128256 * 4096


def test_nanogpt_n_keeps_the_tied_token_embedding_and_drops_positions() -> None:
    gpt2 = build_model_spec(
        name="gpt2", n_layers=12, d_model=768, n_heads=12, vocab_size=50257, ffn_kind="plain",
        tied_embeddings=True, position_embedding="learned", max_position_embeddings=1024,
        norm_kind="layernorm", norm_has_bias=True, qkv_bias=True, attn_out_bias=True, mlp_bias=True,
    )  # fmt: skip
    # nanoGPT prints "number of parameters: 123.65M" for GPT-2 small (124.44M minus wpe 1024·768).
    assert parameter_count_for(gpt2, "exclude_input") == 124_439_808 - 1024 * 768


def test_six_n_is_kaplan_non_embedding_by_default() -> None:
    breakdown = flops_per_token(LLAMA3_8B, 8192, convention="6n")
    counts = count_parameters(LLAMA3_8B)
    assert breakdown.training_flops_per_token == pytest.approx(6 * counts.non_embedding)
    assert breakdown.forward.attention_scores_flops == 0


def test_megatron_equals_the_korthikanti_form_for_a_plain_gpt() -> None:
    spec = plain_gpt()
    per_token = flops_per_token(spec, 2048, convention="megatron").training_flops_per_token
    step = korthikanti_step_flops(batch_sequences=1920, seq_len_tokens=2048, n_layers=105, d_model=20480,
                                  vocab_size=50272)  # fmt: skip
    assert per_token * 1920 * 2048 == pytest.approx(step, rel=1e-12)


def test_megatron_counts_gqa_swiglu_and_logits_explicitly() -> None:
    b = flops_per_token(LLAMA3_8B, 8192, convention="megatron")
    L, h, H, g, Q, f, V, s = 32, 4096, 32, 8, 128, 14336, 128256, 8192
    expected = 6 * (L * (h * H * Q + 2 * h * g * Q + H * Q * h) + L * h * f * 3 + h * V) + 12 * L * H * Q * s
    assert b.training_flops_per_token == pytest.approx(expected, rel=1e-12)
    assert b.training.logits_flops == pytest.approx(6 * h * V)


def test_megatron_moe_counts_only_the_routed_experts_a_token_uses() -> None:
    mixtral = get_preset("mixtral-8x7b").spec
    b = flops_per_token(mixtral, 4096, convention="megatron")
    assert b.training.mlp_flops == pytest.approx(6 * 32 * 4096 * 14336 * 3 * 2)


def test_causal_variant_halves_the_score_term() -> None:
    full = flops_per_token(LLAMA3_8B, 8192, convention="megatron")
    causal = flops_per_token(LLAMA3_8B, 8192, convention="megatron_causal")
    assert causal.training.attention_scores_flops == pytest.approx(6 * 32 * 32 * 128 * 8192)
    assert causal.training.attention_scores_flops * 2 == pytest.approx(full.training.attention_scores_flops)
    assert causal.training.mlp_flops == full.training.mlp_flops


def test_sliding_window_caps_the_attended_length_in_the_causal_variant() -> None:
    mistral = get_preset("mistral-7b").spec  # window 4096
    short = flops_per_token(mistral, 4096, convention="megatron_causal")
    long = flops_per_token(mistral, 32768, convention="megatron_causal")
    per_key = 2 * 32 * 2 * 128 * 32  # forward FLOPs per attended key per token, all layers
    assert short.forward.attention_scores_flops == pytest.approx(per_key * 2048)
    assert long.forward.attention_scores_flops == pytest.approx(per_key * (4096 - 4096**2 / (2 * 32768)))
    assert long.forward.attention_scores_flops < per_key * 4096


def test_attended_tokens_is_continuous_at_the_window() -> None:
    assert attended_tokens(4096, causal=True, window_tokens=4096) == 2048
    assert attended_tokens(4096, causal=True, window_tokens=4095) == pytest.approx(2048, rel=1e-3)
    assert attended_tokens(4096, causal=False, window_tokens=16) == 4096


def test_full_recompute_adds_one_forward_of_the_layers_but_not_the_logits() -> None:
    b = flops_per_token(LLAMA3_8B, 8192, convention="megatron", recompute="full")
    f = b.forward
    assert b.recompute_flops_per_token == pytest.approx(f.total_flops - f.logits_flops)
    assert b.hardware_flops_per_token == pytest.approx(
        b.training_flops_per_token + b.recompute_flops_per_token
    )


def test_full_recompute_on_a_plain_gpt_reproduces_narayanan_eq_3() -> None:
    spec = plain_gpt(n_layers=24, d_model=2304, vocab_size=51200)
    b = flops_per_token(spec, 2048, convention="megatron", recompute="full")
    eq3 = narayanan_step_flops(
        batch_sequences=512, seq_len_tokens=2048, n_layers=24, d_model=2304, vocab_size=51200
    )
    assert b.hardware_flops_per_token * 512 * 2048 == pytest.approx(eq3, rel=1e-12)


def test_selective_recompute_adds_only_the_attention_scores() -> None:
    b = flops_per_token(LLAMA3_8B, 8192, recompute="selective")
    assert b.recompute_flops_per_token == pytest.approx(b.forward.attention_scores_flops)


def test_no_recompute_means_hfu_flops_equal_mfu_flops() -> None:
    b = flops_per_token(LLAMA3_8B, 8192)
    assert b.hardware_flops_per_token == b.training_flops_per_token


def test_narayanan_without_checkpointing_is_three_quarters_of_eq_3() -> None:
    kwargs = dict(batch_sequences=8, seq_len_tokens=2048, n_layers=24, d_model=2048, vocab_size=50257)
    assert narayanan_step_flops(**kwargs, full_recompute=False) == pytest.approx(  # type: ignore[arg-type]
        0.75 * narayanan_step_flops(**kwargs)  # type: ignore[arg-type]
    )


def test_breakdown_components_sum_to_the_total() -> None:
    for convention in ("palm", "6n", "megatron", "megatron_causal"):
        b = flops_per_token(get_preset("deepseek-v3").spec, 4096, convention=convention)  # type: ignore[arg-type]
        t = b.training
        parts = (t.attention_projections_flops + t.attention_scores_flops + t.mlp_flops + t.logits_flops
                 + t.other_flops)  # fmt: skip
        assert parts == pytest.approx(b.training_flops_per_token)
        assert b.training_flops_per_sequence == pytest.approx(b.training_flops_per_token * 4096)


def test_palm_on_an_moe_model_uses_active_parameters() -> None:
    mixtral = get_preset("mixtral-8x7b").spec
    b = flops_per_token(mixtral, 4096, convention="6n", embedding_policy="all")
    assert b.training_flops_per_token == pytest.approx(6 * count_parameters(mixtral).active_per_token)


def test_parameter_count_override_is_only_for_n_based_conventions() -> None:
    with pytest.raises(InvalidInput) as err:
        flops_per_token(LLAMA3_8B, 2048, convention="megatron", parameter_count=8e9)
    assert err.value.field == "parameter_count"


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"convention": "chinchilla"}, "convention"),
    ({"recompute": "partial"}, "recompute"),
    ({"embedding_policy": "some"}, "embedding_policy"),
])  # fmt: skip
def test_unknown_choices_are_rejected_with_the_field(kwargs: dict[str, str], field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        flops_per_token(LLAMA3_8B, 2048, **kwargs)  # type: ignore[arg-type]
    assert err.value.field == field


def test_sequence_length_must_be_positive() -> None:
    with pytest.raises(InvalidInput) as err:
        flops_per_token(LLAMA3_8B, 0)
    assert err.value.field == "seq_len_tokens"


@given(
    st.integers(min_value=1, max_value=1 << 20),
    st.integers(min_value=1, max_value=1 << 20),
    st.sampled_from(["palm", "6n", "megatron", "megatron_causal"]),
)
def test_flops_are_monotone_in_sequence_length(a: int, b: int, convention: str) -> None:
    lo, hi = sorted((a, b))
    spec = get_preset("gemma2-9b").spec  # sliding-window layers included
    f_lo = flops_per_token(spec, lo, convention=convention).training_flops_per_token  # type: ignore[arg-type]
    f_hi = flops_per_token(spec, hi, convention=convention).training_flops_per_token  # type: ignore[arg-type]
    assert f_lo <= f_hi


def test_a_parameter_count_that_overflows_a_float_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidInput) as raised:
        flops_per_token(get_preset("llama3-8b").spec, 2048, parameter_count=1e308)
    assert raised.value.field == "parameter_count"


def test_each_6n_policy_reproduces_its_source_on_llama3_8b() -> None:
    # Untied Llama 3 8B (8,030,261,248 parameters, vocab 128256 x 4096): HF Trainer drops only the input
    # embedding (45.0 GFLOP/token), Kaplan drops the output head as well (41.9).
    spec = get_preset("llama3-8b").spec
    vocab_matrix = 128256 * 4096
    hf = flops_per_token(spec, 8192, convention="hf_trainer")
    kaplan = flops_per_token(spec, 8192, convention="kaplan")
    assert hf.parameter_count == 8_030_261_248 - vocab_matrix
    assert kaplan.parameter_count == 8_030_261_248 - 2 * vocab_matrix
    assert hf.training_flops_per_token / 1e9 == pytest.approx(45.0, abs=0.05)
    assert kaplan.training_flops_per_token / 1e9 == pytest.approx(41.9, abs=0.05)


def test_hf_trainer_counts_every_expert_and_kaplan_the_active_ones() -> None:
    spec = get_preset("mixtral-8x7b").spec
    counts = count_parameters(spec)
    hf = flops_per_token(spec, 4096, convention="hf_trainer")
    kaplan = flops_per_token(spec, 4096, convention="kaplan")
    assert hf.parameter_count == counts.total - counts.input_embedding
    assert kaplan.parameter_count == counts.active_per_token - counts.embedding


def test_the_fixed_n_conventions_refuse_an_embedding_policy() -> None:
    with pytest.raises(InvalidInput) as raised:
        flops_per_token(get_preset("llama3-8b").spec, 2048, convention="kaplan", embedding_policy="all")
    assert raised.value.field == "embedding_policy"
