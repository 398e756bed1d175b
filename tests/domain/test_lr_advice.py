"""Peak-LR rules against GPT-3 Table 2.1, Kaplan Eq. D.1, DeepSeek LLM and published large runs."""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from service.domain.errors import InvalidInput
from service.domain.lr_advice import (
    GPT3_TABLE,
    LARGE_DENSE_RUNS,
    PublishedRun,
    advise_lr,
    deepseek_batch_tokens,
    deepseek_compute_flops,
    deepseek_lr,
    gpt3_batch_tokens,
    gpt3_lr,
    kaplan_lr,
    practice_lr,
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


# --- Monotonic in model size, and against published choices -------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    st.floats(min_value=7.0, max_value=12.0),
    st.floats(min_value=7.0, max_value=12.0),
    st.sampled_from([3e11, 2e12, 15e12]),
)
# Found by this test (CI, 2026-12-04): 165B just under GPT-3's 175B end fell below the log grid the cap
# was then evaluated on, so 1T was advised 1.50e-4 against 165B's 1.48e-4.
@example(12.0, 11.21875, 3e11)
@example(12.0, math.log10(175e9) - 1e-9, 3e11)
def test_the_recommended_lr_never_rises_with_model_size(log_a: float, log_b: float, tokens: float) -> None:
    small, large = sorted((10**log_a, 10**log_b))
    lr_small = advise_lr(params=small, tokens=tokens).recommended_lr
    lr_large = advise_lr(params=large, tokens=tokens).recommended_lr
    assert lr_large <= lr_small * (1 + 1e-12)


@settings(max_examples=100, deadline=None)
@given(st.floats(min_value=17.0, max_value=27.0), st.floats(min_value=17.0, max_value=27.0))
def test_with_only_a_budget_the_lr_never_rises_with_the_budget(log_a: float, log_b: float) -> None:
    small, large = sorted((10**log_a, 10**log_b))
    assert advise_lr(compute_flops=large).recommended_lr <= advise_lr(compute_flops=small).recommended_lr * (
        1 + 1e-12
    )


def test_kaplan_is_not_used_near_its_zero_crossing() -> None:
    # The trap: Eq. D.1 gave 2.7e-5 at 10B, then dropped out, so 15B got 1.94e-4 > 10B's 1.06e-4.
    at_10b = advise_lr(params=1e10, tokens=2e12, batch_tokens=4194304)
    at_15b = advise_lr(params=1.5e10, tokens=2e12, batch_tokens=4194304)
    kaplan = next(r for r in at_10b.rules if r.rule == "kaplan")
    assert not kaplan.applicable
    assert at_15b.recommended_lr <= at_10b.recommended_lr


def test_llama3_8b_gets_a_higher_lr_than_llama3_70b() -> None:
    # Meta used 3e-4 and 1.5e-4 (Llama 3 herd §3.4.1); the old answer had 1.28e-4 < 1.33e-4.
    lr_8b = advise_lr(params=8.03e9, tokens=15e12).recommended_lr
    lr_70b = advise_lr(params=70.6e9, tokens=15e12).recommended_lr
    assert lr_8b > lr_70b


# Published peak LRs (params, tokens, peak LR). Published choices at one size disagree by up to 3.5x
# (7B-class: GPT-3 6.7B 1.2e-4, Llama 2 7B 3e-4, DeepSeek 7B 4.2e-4), so the recommendation is checked
# to within a factor of 2.5 of each, and each published choice must lie inside the advised range (the
# applicable rules' spread; sources round to two figures, hence 1%).
PUBLISHED_PEAK_LRS = [
    ("GPT-3 125M, Brown et al. 2020 Table 2.1", 125e6, 300e9, 6.0e-4),
    ("GPT-3 1.3B, Table 2.1", 1.3e9, 300e9, 2.0e-4),
    ("GPT-3 6.7B, Table 2.1", 6.7e9, 300e9, 1.2e-4),
    ("GPT-3 175B, Table 2.1", 175e9, 300e9, 0.6e-4),
    ("Llama 2 7B, Touvron et al. 2023 Table 1", 6.74e9, 2e12, 3.0e-4),
    ("Llama 2 13B, Table 1", 13e9, 2e12, 3.0e-4),
    ("Llama 2 34B, Table 1", 34e9, 2e12, 1.5e-4),
    ("Llama 2 70B, Table 1", 69e9, 2e12, 1.5e-4),
    ("Llama 3 8B, Dubey et al. 2024 (model card)", 8.03e9, 15e12, 3.0e-4),
    ("Llama 3 70B (model card)", 70.6e9, 15e12, 1.5e-4),
    ("Llama 3 405B, §3.4.1", 405e9, 15.6e12, 8.0e-5),
    ("DeepSeek LLM 7B, DeepSeek-AI 2024 Table 2", 6.9e9, 2e12, 4.2e-4),
    ("DeepSeek LLM 67B, Table 2", 67e9, 2e12, 3.2e-4),
    ("OLMo 2 7B, OLMo et al. 2024", 7.3e9, 4e12, 3.0e-4),
    ("Chinchilla 70B, Hoffmann et al. 2022 Table 4", 70e9, 1.4e12, 1.0e-4),
    ("OPT-1.3B, Zhang et al. 2022 Table 1", 1.3e9, 180e9, 2.0e-4),
    ("OPT-13B, Table 1", 13e9, 180e9, 1.0e-4),
    ("OPT-175B, Table 1", 175e9, 180e9, 1.2e-4),
    ("Pythia 1.4B, Biderman et al. 2023 Table 1", 1.4e9, 300e9, 2.0e-4),
    ("Pythia 12B, Table 1", 12e9, 300e9, 1.2e-4),
]


@pytest.mark.parametrize(("run", "params", "tokens", "published_lr"), PUBLISHED_PEAK_LRS)
def test_the_advice_is_within_2_5x_of_published_peak_lrs(
    run: str, params: float, tokens: float, published_lr: float
) -> None:
    advised = advise_lr(params=params, tokens=tokens).recommended_lr
    assert published_lr / 2.5 <= advised <= published_lr * 2.5, run


def runs_without(params: float, published_lr: float) -> tuple[PublishedRun, ...]:
    """The practice rule's table without the run being checked (leave-one-out)."""
    kept = tuple(r for r in LARGE_DENSE_RUNS if (r.params, r.peak_lr) != (params, published_lr))
    return kept


# Teams above GPT-3's largest size (none of these in any rule but the practice table, checked
# without each one's own row).
PUBLISHED_PEAK_LRS_ABOVE_175B = [
    ("Gopher 280B, Rae et al. 2021 Table 1", 280e9, 300e9, 4.0e-5),
    ("MT-NLG 530B, Smith et al. 2022 §3.2", 530e9, 270e9, 5.0e-5),
    ("BLOOM 176B, BigScience 2022 Table 3", 176e9, 366e9, 6.0e-5),
]


@pytest.mark.parametrize(
    ("run", "params", "tokens", "published_lr"), PUBLISHED_PEAK_LRS + PUBLISHED_PEAK_LRS_ABOVE_175B
)
def test_each_published_peak_lr_lies_inside_the_range_advised_without_it(
    run: str, params: float, tokens: float, published_lr: float
) -> None:
    # Before the practice rule (issue 19) the range above 175B started at the cap (1.5e-4), above
    # Gopher's 4e-5, MT-NLG's 5e-5 and BLOOM's 6e-5.
    runs = runs_without(params, published_lr)
    advice = advise_lr(params=params, tokens=tokens, practice_runs=runs)
    low, high = advice.lr_range
    practice = next(r for r in advice.rules if r.rule == "practice")
    if not practice.applicable and params >= 69e9:
        # MT-NLG, the largest run: without it the table ends at 405B and the rule is not used at
        # 530B; its shown (extrapolated) band is what is checked there.
        assert practice.band is not None
        low, high = practice.band
    assert low * 0.99 <= published_lr <= high * 1.01, (run, low, high)


def test_the_leave_one_out_checks_really_leave_the_large_runs_out() -> None:
    checked = PUBLISHED_PEAK_LRS + PUBLISHED_PEAK_LRS_ABOVE_175B
    left_out = [r for r in LARGE_DENSE_RUNS if len(runs_without(r.params, r.peak_lr)) < len(LARGE_DENSE_RUNS)]
    assert len(left_out) == len(LARGE_DENSE_RUNS)
    assert {(r.params, r.peak_lr) for r in LARGE_DENSE_RUNS} <= {(p, lr) for _, p, _, lr in checked}


def test_the_practice_rule_is_a_least_squares_power_law_with_a_two_sigma_band() -> None:
    # An independent fit: statistics.linear_regression on the logs.
    xs = [math.log(r.params) for r in LARGE_DENSE_RUNS]
    ys = [math.log(r.peak_lr) for r in LARGE_DENSE_RUNS]
    slope, intercept = statistics.linear_regression(xs, ys)
    residual_sd = math.sqrt(
        sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys, strict=True)) / (len(xs) - 2)
    )
    rule = practice_lr(280e9)
    assert slope < 0  # the monotone cap needs every rule to fall with size
    assert rule.lr == pytest.approx(math.exp(intercept + slope * math.log(280e9)), rel=1e-9)
    assert rule.band is not None
    assert rule.band[1] / rule.lr == pytest.approx(math.exp(2 * residual_sd), rel=1e-9)
    assert rule.applicable and not rule.extrapolated


def test_the_practice_rule_is_used_only_between_its_smallest_and_largest_run() -> None:
    assert not practice_lr(30e9).applicable and practice_lr(30e9).extrapolated
    assert not practice_lr(1e12).applicable
    assert practice_lr(69e9).applicable and practice_lr(530e9).applicable
    small = advise_lr(params=30e9, tokens=2e12)
    assert next(r for r in small.rules if r.rule == "practice").lr is not None  # shown
    assert "not used" in next(r for r in small.rules if r.rule == "practice").note
