"""Memory per device: optimizer bytes, ZeRO sharding, Korthikanti et al. 2022 activations (Table 2,
Fig. 1), pipeline in-flight accounting, fits / largest micro-batch, and monotonicity properties."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.domain.errors import InvalidInput
from service.domain.flops import Recompute
from service.domain.hardware import get_accelerator
from service.domain.memory import (
    FRAGMENTATION_FRACTION,
    FRAMEWORK_OVERHEAD_BYTES,
    GIB,
    ParallelLayout,
    activation_coefficients,
    estimate_memory,
    interleave_factor,
    model_state_bytes_per_parameter,
    optimizer_state_bytes,
)
from service.domain.models import ModelSpec, build_model_spec, get_preset

H100 = get_accelerator("h100-sxm")


def korthikanti_gpt(name: str, h: int, a: int, n_layers: int) -> ModelSpec:
    """Korthikanti et al. 2022 Table 3 GPT models: V = 51200, learned positions, s = 2048."""
    return build_model_spec(
        name=name, n_layers=n_layers, d_model=h, n_heads=a, vocab_size=51200, ffn_kind="plain",
        position_embedding="learned", max_position_embeddings=2048, norm_kind="layernorm",
        norm_has_bias=True, qkv_bias=True, attn_out_bias=True, mlp_bias=True, tied_embeddings=True,
    )  # fmt: skip


# --------------------------------------------------------------------------------------------------
# Bytes per parameter


def test_mixed_precision_adam_is_16_bytes_per_parameter() -> None:
    state = optimizer_state_bytes("adam", "bf16")
    assert (state.weight_bytes, state.gradient_bytes, state.optimizer_bytes) == (2, 2, 12)
    assert state.total_bytes == 16


def test_fp32_adam_is_4_4_8() -> None:
    for state in (optimizer_state_bytes("adam_fp32", "bf16"), optimizer_state_bytes("adam", "fp32")):
        assert (state.weight_bytes, state.gradient_bytes, state.optimizer_bytes) == (4, 4, 8)


@pytest.mark.parametrize(
    ("optimizer", "total"), [("sgd_momentum", 12), ("adafactor", 8), ("adam_8bit", 10), ("adam_mixed", 16)]
)
def test_other_optimizers(optimizer: str, total: float) -> None:
    assert optimizer_state_bytes(optimizer, "bf16").total_bytes == total  # type: ignore[arg-type]


def test_megatron_fp32_gradients_18_bytes_and_distributed_optimizer_6_plus_12_over_d() -> None:
    state = optimizer_state_bytes("adam", "bf16", fp32_grad_accumulation=True)
    assert state.total_bytes == 18
    for d in (1, 8, 64):
        w, g, o = model_state_bytes_per_parameter(state, zero_stage=1, shard_degree=d)
        assert w + g + o == pytest.approx(6 + 12 / d)


def test_zero_paper_example_7_5b() -> None:
    """ZeRO paper: 7.5B parameters need 120 GB unsharded and 1.9 GB with ZeRO-3 over 64 GPUs."""
    state = optimizer_state_bytes("adam", "fp16")
    unsharded = sum(model_state_bytes_per_parameter(state, zero_stage=0, shard_degree=64)) * 7.5e9
    zero3 = sum(model_state_bytes_per_parameter(state, zero_stage=3, shard_degree=64)) * 7.5e9
    assert unsharded == pytest.approx(120e9)
    assert zero3 == pytest.approx(1.875e9)
    zero1 = model_state_bytes_per_parameter(state, zero_stage=1, shard_degree=4)
    zero2 = model_state_bytes_per_parameter(state, zero_stage=2, shard_degree=4)
    assert zero1 == (2, 2, 3) and zero2 == (2, 0.5, 3)


def test_unknown_optimizer_is_an_error() -> None:
    with pytest.raises(InvalidInput) as info:
        optimizer_state_bytes("lion", "bf16")  # type: ignore[arg-type]
    assert info.value.field == "optimizer"


# --------------------------------------------------------------------------------------------------
# Activations: Korthikanti Table 2 per layer (bytes per token = coefficient; × s·b for the layer)


def test_table2_no_parallelism_34_plus_5as_over_h() -> None:
    spec = korthikanti_gpt("t", 1024, 16, 4)
    h, a, s = 1024, 16, 2048
    c = activation_coefficients(spec, s, 1, False, False)
    assert c.per_token_none == pytest.approx(h * (34 + 5 * a * s / h))
    assert c.per_token_selective == pytest.approx(h * 34)
    assert c.per_token_full == pytest.approx(2 * h)


def test_table2_tensor_and_sequence_parallel() -> None:
    spec = korthikanti_gpt("t", 1024, 16, 4)
    h, a, s, t = 1024, 16, 2048, 8
    tp = activation_coefficients(spec, s, t, False, False)
    assert tp.per_token_none == pytest.approx(h * (10 + 24 / t + 5 * a * s / (h * t)))
    assert tp.per_token_selective == pytest.approx(h * (10 + 24 / t))
    sp = activation_coefficients(spec, s, t, True, False)
    assert sp.per_token_none == pytest.approx(h * (34 / t + 5 * a * s / (h * t)))
    assert sp.per_token_selective == pytest.approx(h * 34 / t)
    assert sp.per_token_full == pytest.approx(2 * h / t)


def test_flash_attention_never_stores_the_score_matrix() -> None:
    spec = korthikanti_gpt("t", 1024, 16, 4)
    flash = activation_coefficients(spec, 2048, 1, False, True)
    # only the fp32 log-sum-exp per head and token remains
    assert flash.per_token_none == pytest.approx(34 * 1024 + 4 * 16)


def test_gqa_and_swiglu_generalisation() -> None:
    """Llama-style: K and V shrink with the KV heads; SwiGLU stores 3 f-wide tensors."""
    mha = build_model_spec(name="m", n_layers=2, d_model=1024, n_heads=16, vocab_size=1000, d_ff=2816)
    gqa = build_model_spec(
        name="g", n_layers=2, d_model=1024, n_heads=16, n_kv_heads=4, vocab_size=1000, d_ff=2816
    )
    cm = activation_coefficients(mha, 1024, 1, False, True, 2, False)
    cg = activation_coefficients(gqa, 1024, 1, False, True, 2, False)
    # K and V: 2·(16 − 4)·64 elements of 2 bytes fewer per token
    assert cm.per_token_selective - cg.per_token_selective == pytest.approx(2 * 2 * 12 * 64)
    # no dropout: norms 2·2h + QKV input 2h + MLP input 2h + Q,K,V,O 8h + SwiGLU 3·2·f + fp32 LSE 4·a
    assert cm.per_token_selective == pytest.approx(8 * 1024 + 8 * 1024 + 6 * 2816 + 4 * 16)


def test_interleave_factor() -> None:
    assert interleave_factor(8, 1) == 1
    assert interleave_factor(8, 3) == pytest.approx(1 + 7 / 24)
    assert interleave_factor(1, 4) == 1


# Korthikanti Fig. 1 (GiB per GPU): params+optimizer; activations none → sequence parallel + selective.
FIG1 = [
    # name, h, a, L, t, p, b, v, params+optimizer, activations none, activations seq+selective
    ("22B", 6144, 64, 48, 8, 1, 4, 1, 45.56, 59.25, 9.56),
    ("175B", 12288, 96, 96, 8, 8, 1, 3, 45.56, 66.84, 12.35),
    ("530B", 20480, 128, 105, 8, 35, 1, 3, 31.64, 114.02, 23.08),
    ("1T", 25600, 160, 128, 8, 64, 1, 1, 32.96, 131.25, 26.56),
]


@pytest.mark.parametrize(("name", "h", "a", "L", "t", "p", "b", "v", "states", "none", "selective"), FIG1)
def test_korthikanti_figure_1_within_10_percent(
    name: str,
    h: int,
    a: int,
    L: int,
    t: int,
    p: int,
    b: int,
    v: int,
    states: float,
    none: float,
    selective: float,
) -> None:
    spec = korthikanti_gpt(name, h, a, L)
    common: dict[str, Any] = dict(tp=t, pp=p, dp=1, virtual_stages=v, micro_batch_sequences=b,
                                  flash_attention=False, fp32_grad_accumulation=True)  # fmt: skip
    base = estimate_memory(spec, 2048, ParallelLayout(**common), precision="fp16")
    sel = estimate_memory(
        spec, 2048, ParallelLayout(**common, sequence_parallel=True, recompute="selective"), precision="fp16"
    )
    assert base.model_states_bytes / GIB == pytest.approx(states, rel=0.10)
    assert base.activations_bytes / GIB == pytest.approx(none, rel=0.10)
    assert sel.activations_bytes / GIB == pytest.approx(selective, rel=0.10)
    assert base.stage in ("only", "first")


# --------------------------------------------------------------------------------------------------
# Totals, fits, largest micro-batch


def test_total_is_the_sum_with_stated_headroom() -> None:
    spec = get_preset("llama3-8b").spec
    est = estimate_memory(
        spec, 4096, ParallelLayout(dp=8, micro_batch_sequences=2, zero_stage=1), accelerator=H100
    )
    allocated = (
        est.weights_bytes
        + est.gradients_bytes
        + est.optimizer_state_bytes
        + est.activations_bytes
        + est.buffers_bytes
    )
    assert est.fragmentation_bytes == pytest.approx(FRAGMENTATION_FRACTION * allocated)
    assert est.total_bytes == pytest.approx(
        allocated * (1 + FRAGMENTATION_FRACTION) + FRAMEWORK_OVERHEAD_BYTES
    )
    assert est.capacity_bytes == H100.memory_bytes
    assert est.fits is (est.total_bytes <= H100.memory_bytes)  # type: ignore[operator]


def test_max_micro_batch_is_the_boundary() -> None:
    spec = get_preset("llama3-8b").spec
    layout = ParallelLayout(dp=8, micro_batch_sequences=1, zero_stage=1)
    est = estimate_memory(spec, 4096, layout, accelerator=H100)
    b = est.max_micro_batch_sequences
    assert b is not None and b >= 1
    at = estimate_memory(
        spec, 4096, ParallelLayout(dp=8, micro_batch_sequences=b, zero_stage=1), accelerator=H100
    )
    above = estimate_memory(
        spec, 4096, ParallelLayout(dp=8, micro_batch_sequences=b + 1, zero_stage=1), accelerator=H100
    )
    assert at.fits is True and above.fits is False


def test_70b_unsharded_does_not_fit_an_h100() -> None:
    est = estimate_memory(get_preset("llama3-70b").spec, 4096, ParallelLayout(), accelerator=H100)
    assert est.fits is False and est.max_micro_batch_sequences == 0
    assert est.weights_bytes == pytest.approx(2 * est.parameters_on_device)


def test_no_accelerator_no_verdict() -> None:
    est = estimate_memory(get_preset("llama3-8b").spec, 2048, ParallelLayout())
    assert est.fits is None and est.capacity_bytes is None and est.max_micro_batch_sequences is None


def test_pipeline_first_stage_holds_p_micro_batches_unless_fewer_exist() -> None:
    spec = korthikanti_gpt("g", 4096, 32, 32)
    layout = ParallelLayout(tp=1, pp=4, dp=1, micro_batch_sequences=1)
    full = estimate_memory(spec, 2048, layout)
    few = estimate_memory(spec, 2048, layout, global_batch_sequences=2)
    assert full.in_flight_micro_batches == 4 and few.in_flight_micro_batches == 2
    assert few.activations_bytes < full.activations_bytes


def test_zero3_adds_gather_buffers() -> None:
    spec = get_preset("llama3-8b").spec
    z1 = estimate_memory(spec, 2048, ParallelLayout(dp=8, zero_stage=1))
    z3 = estimate_memory(spec, 2048, ParallelLayout(dp=8, zero_stage=3))
    assert z1.buffers_bytes == 0 and z3.buffers_bytes > 0
    assert z3.weights_bytes == pytest.approx(z1.weights_bytes / 8)


def test_moe_experts_shard_over_ep() -> None:
    spec = get_preset("mixtral-8x7b").spec
    ep1 = estimate_memory(spec, 4096, ParallelLayout(dp=8, ep=1))
    ep8 = estimate_memory(spec, 4096, ParallelLayout(dp=8, ep=8))
    assert ep8.parameters_on_device < ep1.parameters_on_device / 3


# --------------------------------------------------------------------------------------------------
# Layout validation


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        (dict(tp=0), "tp"),
        (dict(zero_stage=4), "zero_stage"),
        (dict(recompute="some"), "recompute"),
        (dict(virtual_stages=2), "virtual_stages"),
        (dict(dp=3, ep=2), "ep"),
        (dict(sequence_parallel=True), "sequence_parallel"),
    ],
)
def test_invalid_layouts(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as info:
        ParallelLayout(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field


def test_layout_must_match_the_model() -> None:
    spec = korthikanti_gpt("g", 1024, 16, 6)
    # 6 layers on 4 stages are 1, 2, 2, 1: two chunks per stage fit when the first and last stage give
    # one chunk to the embedding and to the loss (Megatron-LM's account-for-embedding/loss split, 8
    # chunks of one), three do not.
    estimate_memory(spec, 2048, ParallelLayout(pp=4, virtual_stages=2))
    with pytest.raises(InvalidInput) as info:
        estimate_memory(spec, 2048, ParallelLayout(pp=4, virtual_stages=3))
    assert info.value.field == "virtual_stages"
    with pytest.raises(InvalidInput):
        estimate_memory(spec, 2048, ParallelLayout(pp=8))
    with pytest.raises(InvalidInput) as info:
        estimate_memory(spec, 2047, ParallelLayout(cp=2))
    assert info.value.field == "cp"


# --------------------------------------------------------------------------------------------------
# Properties

SPEC = get_preset("llama3-8b").spec
recompute_modes: st.SearchStrategy[Recompute] = st.sampled_from(["none", "selective", "full"])


@settings(max_examples=60, deadline=None)
@given(b=st.integers(1, 16), s_pow=st.integers(9, 14), recompute=recompute_modes, flash=st.booleans())
def test_memory_grows_with_micro_batch_and_sequence(
    b: int, s_pow: int, recompute: Recompute, flash: bool
) -> None:
    s = 2**s_pow

    def total(bb: int, ss: int) -> float:
        layout = ParallelLayout(
            tp=2, dp=4, micro_batch_sequences=bb, recompute=recompute, flash_attention=flash
        )
        return estimate_memory(SPEC, ss, layout).total_bytes

    assert total(b + 1, s) > total(b, s)
    assert total(b, 2 * s) > total(b, s)


@settings(max_examples=60, deadline=None)
@given(
    tp=st.sampled_from([1, 2, 4]),
    pp=st.sampled_from([1, 2, 4]),
    zero=st.integers(0, 2),
    recompute=recompute_modes,
    sp=st.booleans(),
)
def test_memory_falls_with_sharding(tp: int, pp: int, zero: int, recompute: Recompute, sp: bool) -> None:
    def total(t: int, p: int, z: int) -> float:
        layout = ParallelLayout(
            tp=t, pp=p, dp=8, zero_stage=z, recompute=recompute, sequence_parallel=sp and t > 1
        )
        return estimate_memory(SPEC, 4096, layout).total_bytes

    base = total(tp, pp, zero)
    assert total(2 * tp, pp, zero) < base
    assert total(tp, 2 * pp, zero) < base
    assert total(tp, pp, zero + 1) < base
