"""Peak-LR rules against GPT-3 Table 2.1, Kaplan Eq. D.1 and DeepSeek LLM."""

from __future__ import annotations

import math

import pytest

from service.domain.errors import InvalidInput
from service.domain.lr_advice import (
    GPT3_TABLE,
    advise_lr,
    deepseek_batch_tokens,
    deepseek_compute_flops,
    deepseek_lr,
    gpt3_batch_tokens,
    gpt3_lr,
    kaplan_lr,
)
from service.domain.schedules import ScheduleSpec, lr_at


@pytest.mark.parametrize(
    ("params", "lr"),
    [(125e6, 6.0e-4), (350e6, 3.0e-4), (760e6, 2.5e-4), (1.3e9, 2.0e-4), (2.7e9, 1.6e-4), (6.7e9, 1.2e-4),
     (13e9, 1.0e-4), (175e9, 0.6e-4)],
)  # fmt: skip
def test_gpt3_learning_rates_are_reproduced_exactly_at_its_sizes(params: float, lr: float) -> None:
    rule = gpt3_lr(params)
    assert rule.lr == pytest.approx(lr, rel=1e-12)
    assert rule.applicable and not rule.extrapolated


def test_gpt3_rule_interpolates_on_log_log_axes_between_sizes() -> None:
    mid = math.sqrt(125e6 * 350e6)
    assert gpt3_lr(mid).lr == pytest.approx(math.sqrt(6e-4 * 3e-4), rel=1e-12)


def test_gpt3_rule_outside_its_sizes_is_clamped_and_flagged() -> None:
    small, huge = gpt3_lr(50e6), gpt3_lr(1e12)
    assert small.lr == 6e-4 and small.extrapolated and not small.applicable
    assert huge.lr == 0.6e-4 and huge.extrapolated


def test_gpt3_batch_is_the_nearest_rows_batch() -> None:
    assert gpt3_batch_tokens(175e9) == 3.2e6
    assert gpt3_batch_tokens(1.3e9) == 1e6
    assert len(GPT3_TABLE) == 8


def test_kaplan_rule_follows_eq_d1() -> None:
    rule = kaplan_lr(1e8)
    assert rule.lr == pytest.approx(0.003239 - 0.0001395 * math.log(1e8))
    assert rule.applicable


def test_kaplan_rule_is_flagged_above_1e10_and_absent_where_it_goes_negative() -> None:
    big = kaplan_lr(1.1e10)
    assert big.lr is not None and big.lr > 0 and not big.applicable
    gone = kaplan_lr(1e11)
    assert gone.lr is None and not gone.applicable


@pytest.mark.parametrize(("flops", "lr", "batch"), [(1e20, 9.86e-4, 1.017e6), (1e23, 4.158e-4, 9.743e6)])
def test_deepseek_laws_match_the_vectors(flops: float, lr: float, batch: float) -> None:
    assert deepseek_lr(flops) == pytest.approx(lr, rel=1e-3)
    assert deepseek_batch_tokens(flops) == pytest.approx(batch, rel=1e-3)


def test_deepseek_7b_predicts_4_25e_4() -> None:
    c, note = deepseek_compute_flops(tokens=2.0e12, n_layers=30, d_model=4096, seq_len=4096)
    assert c == pytest.approx((72 * 30 * 4096**2 + 12 * 30 * 4096 * 4096) * 2.0e12)
    assert "DeepSeek's M" in note
    assert deepseek_lr(c) == pytest.approx(4.25e-4, rel=2e-3)


def test_advice_from_params_alone_uses_gpt3_and_kaplan() -> None:
    got = advise_lr(params=1.3e9)
    usable = {r.rule: r.lr for r in got.rules if r.applicable and r.lr is not None}
    assert set(usable) == {"gpt3", "kaplan"}
    assert got.recommended_lr == pytest.approx(math.sqrt(usable["gpt3"] * usable["kaplan"]))
    assert got.lr_range == (min(usable.values()), max(usable.values()))
    assert got.floor_ratio == 0.1 and got.floor_lr == pytest.approx(0.1 * got.recommended_lr)


def test_advice_for_deepseek_7b_includes_the_compute_rule_and_a_valid_schedule() -> None:
    got = advise_lr(
        params=6.9e9, tokens=2.0e12, n_layers=30, d_model=4096, seq_len=4096, batch_tokens=2304 * 4096
    )
    deepseek = next(r for r in got.rules if r.rule == "deepseek")
    assert deepseek.applicable and deepseek.lr == pytest.approx(4.25e-4, rel=2e-3)
    assert got.lr_range[0] <= got.recommended_lr <= got.lr_range[1]
    assert got.total_steps == math.ceil(2.0e12 / (2304 * 4096))
    spec = ScheduleSpec(**got.schedule)
    assert lr_at(spec, spec.resolved_warmup_steps) == pytest.approx(got.recommended_lr)


def test_warmup_is_375m_tokens_clamped_to_between_0_1_and_1_percent_of_the_steps() -> None:
    # 375M / 0.5M tokens = 750 steps, inside [100, 1000] of 100k steps
    assert advise_lr(params=125e6, batch_tokens=0.5e6, total_steps=100_000).warmup.warmup_steps == 750
    # 375M / 4M = 94 steps → raised to 0.1% of 200k = 200
    assert advise_lr(params=1e9, batch_tokens=4e6, total_steps=200_000).warmup.warmup_steps == 200
    # 375M / 32k = 11445 steps → lowered to 1% of 100k = 1000
    assert advise_lr(params=1e9, batch_tokens=32_768, total_steps=100_000).warmup.warmup_steps == 1000


def test_without_a_batch_the_warmup_is_gpt3s_0_125_percent() -> None:
    got = advise_lr(params=1e9, total_steps=80_000)
    assert got.warmup.warmup_steps == 100
    assert advise_lr(params=1e9).schedule["warmup_fraction"] == pytest.approx(0.00125)


def test_a_budget_alone_assumes_a_compute_optimal_size() -> None:
    got = advise_lr(compute_flops=1e21)
    assert got.params == pytest.approx(math.sqrt(1e21 / 120))
    assert any(r.rule == "deepseek" and r.applicable for r in got.rules)


def test_advice_needs_a_size_or_a_budget() -> None:
    with pytest.raises(InvalidInput) as err:
        advise_lr()
    assert err.value.field == "params"
