"""MFU/HFU: every reproduction target of reference/flops_and_mfu.md, and the implausible cases."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.domain.errors import ImplausibleResult, InvalidInput
from service.domain.flops import flops_per_token, korthikanti_step_flops
from service.domain.hardware import custom_accelerator, get_accelerator
from service.domain.mfu import (
    GlobalTokensPerSecond,
    SamplesPerSecond,
    StepTime,
    TokensPerSecondPerDevice,
    compute_mfu,
    compute_mfu_for_model,
    global_rate_scale,
    global_tokens_per_second,
    mfu_band,
    mfu_from_achieved_tflops,
)
from service.domain.models import build_model_spec, get_preset

A100 = get_accelerator("a100-sxm4-80gb")
H100 = get_accelerator("h100-sxm")


def test_seed_140_of_312_tflops_is_44_9_percent() -> None:
    assert round(mfu_from_achieved_tflops(140, 312) * 100, 1) == 44.9


def test_palm_540b_reproduces_46_2_percent() -> None:
    b = flops_per_token(get_preset("palm-540b").spec, 2048, parameter_count=540.35e9)
    result = compute_mfu(
        model_flops_per_token=b.training_flops_per_token,
        accelerator=get_accelerator("tpu-v4"),
        device_count=6144,
        precision="bf16",
        throughput=GlobalTokensPerSecond(238.3e3),
    )
    assert round(result.mfu * 100, 1) == 46.2


def test_palm_540b_without_the_attention_term_is_45_7_percent() -> None:
    b = flops_per_token(get_preset("palm-540b").spec, 2048, convention="6n", embedding_policy="all",
                        parameter_count=540.35e9)  # fmt: skip
    result = compute_mfu(
        model_flops_per_token=b.training_flops_per_token,
        accelerator=get_accelerator("tpu-v4"),
        device_count=6144,
        precision="bf16",
        throughput=GlobalTokensPerSecond(238.3e3),
    )
    assert round(result.mfu * 100, 1) == 45.7


def test_mpt_7b_on_8_h100_reproduces_46_44_percent() -> None:
    # llm-foundry benchmark model: d 4096, L 32, 32 heads, vocab 50368, GeLU ×4; the benchmark YAML
    # has learned positions and biases (NumParams 6,658,859,008). MosaicML form: N = all parameters.
    spec = build_model_spec(
        name="mpt-7b benchmark", n_layers=32, d_model=4096, n_heads=32, vocab_size=50368, ffn_kind="plain",
        tied_embeddings=True, position_embedding="learned", max_position_embeddings=2048,
        norm_kind="layernorm", norm_has_bias=True, qkv_bias=True, attn_out_bias=True, mlp_bias=True,
    )  # fmt: skip
    b = flops_per_token(spec, 2048, convention="palm", embedding_policy="all")
    result = compute_mfu(
        model_flops_per_token=b.training_flops_per_token,
        accelerator=H100,
        device_count=8,
        precision="bf16",
        throughput=TokensPerSecondPerDevice(10_643),
    )
    assert round(result.mfu * 100, 2) == 46.44
    # The README's "Model TFLOP" column: 4.595096E+14 achieved FLOP/s per GPU.
    assert result.achieved_tflops_per_device == pytest.approx(459.5, rel=1e-3)


def test_mt_nlg_530b_reproduces_30_2_percent_with_the_korthikanti_form() -> None:
    step_flops = korthikanti_step_flops(
        batch_sequences=1920, seq_len_tokens=2048, n_layers=105, d_model=20480, vocab_size=50272
    )
    result = compute_mfu(
        model_flops_per_token=step_flops / (1920 * 2048),
        accelerator=A100,
        device_count=2240,
        precision="bf16",
        throughput=StepTime(60.1, global_batch_sequences=1920),
        seq_len_tokens=2048,
        convention="korthikanti",
    )
    assert round(result.mfu * 100, 1) == 30.2


@pytest.mark.parametrize(("tokens_per_gpu", "published"), [(5_762, 33.7), (6_667, 39.0)])
def test_torchtitan_llama31_8b_reproduces_its_mfu(tokens_per_gpu: int, published: float) -> None:
    # torchtitan: PaLM form with N without the (untied) input embedding, peak 989 TFLOP/s.
    b = flops_per_token(get_preset("llama3.1-8b").spec, 8192, embedding_policy="exclude_input")
    for accelerator in (custom_accelerator(name="torchtitan H100", peak_tflops={"bf16": 989}), H100):
        result = compute_mfu(
            model_flops_per_token=b.training_flops_per_token,
            accelerator=accelerator,
            device_count=8,
            precision="bf16",
            throughput=TokensPerSecondPerDevice(tokens_per_gpu),
        )
        assert round(result.mfu * 100, 1) == published


def test_compute_mfu_for_model_reproduces_the_palm_target() -> None:
    result = compute_mfu_for_model(
        get_preset("palm-540b").spec,
        2048,
        accelerator=get_accelerator("tpu-v4"),
        device_count=6144,
        precision="bf16",
        throughput=GlobalTokensPerSecond(238.3e3),
        parameter_count=540.35e9,
        recompute="full",
    )
    assert round(result.mfu * 100, 1) == 46.2
    assert result.hfu > result.mfu
    assert result.convention == "palm"


def test_hfu_includes_recomputation_and_mfu_does_not() -> None:
    b = flops_per_token(get_preset("llama3-8b").spec, 4096, recompute="full")
    result = compute_mfu(
        model_flops_per_token=b.training_flops_per_token,
        hardware_flops_per_token=b.hardware_flops_per_token,
        accelerator=H100,
        device_count=8,
        precision="bf16",
        throughput=TokensPerSecondPerDevice(7_000),
    )
    assert result.hfu > result.mfu
    assert result.hfu / result.mfu == pytest.approx(b.hardware_flops_per_token / b.training_flops_per_token)


def test_throughput_forms_agree() -> None:
    seq, devices = 4096, 64
    forms = [
        GlobalTokensPerSecond(64 * 4096 * 10.0),
        TokensPerSecondPerDevice(4096 * 10.0),
        StepTime(2.0, global_batch_tokens=64 * 4096 * 20),
        StepTime(2.0, global_batch_sequences=64 * 20),
        SamplesPerSecond(64 * 10.0),
    ]
    values = {global_tokens_per_second(f, device_count=devices, seq_len_tokens=seq) for f in forms}
    assert values == {64 * 4096 * 10.0}


def test_a_rate_from_the_scale_of_its_form_is_the_normalised_rate_to_the_last_bit() -> None:
    # Ingest turns up to 10,000 throughputs a request into global tokens/s with one scale per form
    # and batch: each must equal global_tokens_per_second of the same throughput exactly.
    rng = random.Random(20261203)
    for _ in range(2000):
        devices, seq = rng.randint(1, 100_000), rng.randint(1, 1 << 20)
        value = rng.uniform(1e-6, 1e9) * rng.choice([1.0, 1e-3, 1e3])
        tokens, sequences = rng.randint(1, 10**12), rng.randint(1, 10**9)
        for throughput in (
            GlobalTokensPerSecond(value),
            TokensPerSecondPerDevice(value),
            SamplesPerSecond(value),
            StepTime(value, global_batch_tokens=tokens),
            StepTime(value, global_batch_sequences=sequences),
        ):
            scale, inverse = global_rate_scale(throughput, device_count=devices, seq_len_tokens=seq)
            assert inverse == isinstance(throughput, StepTime)
            rate = scale / value if inverse else value * scale
            assert rate == global_tokens_per_second(throughput, device_count=devices, seq_len_tokens=seq)


def test_a_scale_needs_what_the_form_needs() -> None:
    with pytest.raises(InvalidInput) as raised:
        global_rate_scale(SamplesPerSecond(3.0), device_count=8)
    assert raised.value.field == "seq_len_tokens"


def test_fp8_runs_also_report_mfu_against_the_bf16_peak() -> None:
    b = flops_per_token(get_preset("llama3-8b").spec, 8192)
    result = compute_mfu(
        model_flops_per_token=b.training_flops_per_token,
        accelerator=H100,
        device_count=8,
        precision="fp8",
        throughput=TokensPerSecondPerDevice(8_000),
    )
    assert result.mfu_vs_bf16_peak == pytest.approx(result.mfu * 1978.9 / 989.4)
    bf16 = compute_mfu(model_flops_per_token=b.training_flops_per_token, accelerator=H100, device_count=8,
                       precision="bf16", throughput=TokensPerSecondPerDevice(8_000))  # fmt: skip
    assert bf16.mfu_vs_bf16_peak is None


def test_bands_follow_the_typical_30_to_60_percent_range() -> None:
    assert mfu_band(0.29) == "below_typical"
    assert mfu_band(0.30) == "typical"
    assert mfu_band(0.60) == "typical"
    assert mfu_band(0.61) == "above_typical"


def test_global_tokens_given_as_per_device_is_implausible_and_says_so() -> None:
    b = flops_per_token(get_preset("llama3-8b").spec, 8192)
    with pytest.raises(ImplausibleResult) as err:
        compute_mfu(
            model_flops_per_token=b.training_flops_per_token,
            accelerator=H100,
            device_count=64,
            precision="bf16",
            throughput=TokensPerSecondPerDevice(64 * 6_000),  # the global rate, given per device
        )
    assert "global" in err.value.message
    assert "MFU 0.37" in err.value.message  # what it would be read as global tokens/s


def test_fp32_precision_on_a_bf16_run_is_implausible_and_names_the_precision() -> None:
    b = flops_per_token(get_preset("llama3-8b").spec, 8192)
    with pytest.raises(ImplausibleResult) as err:
        compute_mfu(model_flops_per_token=b.training_flops_per_token, accelerator=H100, device_count=8,
                    precision="fp32", throughput=TokensPerSecondPerDevice(6_000))  # fmt: skip
    assert "fp8" in err.value.message or "bf16" in err.value.message


def test_hfu_above_one_is_implausible() -> None:
    with pytest.raises(ImplausibleResult) as err:
        compute_mfu(model_flops_per_token=1e9, hardware_flops_per_token=3e9, accelerator=H100, device_count=1,
                    precision="bf16", throughput=GlobalTokensPerSecond(5e5))  # fmt: skip
    assert err.value.field == "recompute"


@pytest.mark.parametrize("value", [0, -1.0, float("nan"), float("inf")])
def test_non_positive_throughput_is_invalid(value: float) -> None:
    with pytest.raises(InvalidInput) as err:
        compute_mfu(model_flops_per_token=1e9, accelerator=H100, device_count=8, precision="bf16",
                    throughput=GlobalTokensPerSecond(value))  # fmt: skip
    assert err.value.field == "throughput.tokens_per_second"


def test_a_batch_in_sequences_needs_the_sequence_length() -> None:
    with pytest.raises(InvalidInput) as err:
        compute_mfu(model_flops_per_token=1e9, accelerator=H100, device_count=8, precision="bf16",
                    throughput=StepTime(1.0, global_batch_sequences=8))  # fmt: skip
    assert err.value.field == "seq_len_tokens"


@given(
    # Above MIN_PLAUSIBLE_MFU at 8,192 devices and below MFU 1 at one device.
    st.floats(min_value=2e3, max_value=1e5),
    st.floats(min_value=1.0, max_value=4.0),
    st.integers(min_value=1, max_value=4096),
)
def test_mfu_is_proportional_to_throughput_and_inverse_to_devices(tps: float, k: float, devices: int) -> None:
    def mfu(tokens: float, n: int) -> float:
        return compute_mfu(model_flops_per_token=1e9, accelerator=H100, device_count=n, precision="bf16",
                           throughput=GlobalTokensPerSecond(tokens)).mfu  # fmt: skip

    base = mfu(tps, devices)
    assert mfu(tps * k, devices) == pytest.approx(base * k)
    assert mfu(tps, devices * 2) == pytest.approx(base / 2)


def test_an_absurdly_small_or_large_throughput_is_implausible_not_a_tiny_or_infinite_mfu() -> None:
    for tokens in (1e-300, 1e308):
        with pytest.raises(ImplausibleResult) as err:
            compute_mfu(model_flops_per_token=1e9, accelerator=H100, device_count=8, precision="bf16",
                        throughput=GlobalTokensPerSecond(tokens))  # fmt: skip
        assert err.value.field == "throughput"


def test_a_throughput_given_as_fields_is_read_in_its_one_form() -> None:
    from service.domain import mfu

    assert mfu.throughput_from_fields({"tokens_per_second": 5e5}) == (
        "tokens_per_second",
        5e5,
        mfu.GlobalTokensPerSecond(5e5),
    )
    assert mfu.throughput_from_fields({"sequences_per_second": 12.0})[2] == mfu.SamplesPerSecond(12.0)
    form, value, throughput = mfu.throughput_from_fields(
        {"step_time_seconds": 2.5, "global_batch_sequences": 512}
    )
    assert (form, value) == ("step_time_seconds", 2.5)
    assert throughput == mfu.StepTime(2.5, global_batch_sequences=512)
    with pytest.raises(InvalidInput) as raised:
        mfu.throughput_from_fields({"global_batch_tokens": 4096})
    assert raised.value.field == "throughput"
