"""Critical batch size and the steps/data trade-off against Kaplan, McCandlish and MiniCPM."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.domain.batch import (
    chinchilla_loss_predictor,
    critical_batch,
    data_efficiency,
    gradient_accumulation,
    inverse_loss_critical_batch_tokens,
    kaplan_critical_batch_tokens,
    kaplan_minimum_steps,
    minicpm_optimal_batch_tokens,
    noise_scale,
    ramp,
    recommend_batch,
    recommend_batch_tokens,
    tradeoff,
)
from service.domain.errors import ImplausibleResult, InvalidInput
from service.domain.scaling import CHINCHILLA_ROUNDED


@pytest.mark.parametrize(("loss", "tokens"), [(2, 7_371_465), (3, 1_069_114), (4, 271_693), (10, 3_460)])
def test_kaplan_critical_batch_matches_the_vectors(loss: float, tokens: int) -> None:
    assert round(kaplan_critical_batch_tokens(loss)) == tokens


def test_kaplan_b_star_is_a_parameter() -> None:
    assert kaplan_critical_batch_tokens(3, b_star_tokens=2.1e8) == pytest.approx(1_069_114 * 1.05, rel=1e-6)


def test_kaplan_critical_batch_doubles_for_about_a_13_percent_drop_in_loss() -> None:
    ratio = kaplan_critical_batch_tokens(3 * (1 - 0.1356)) / kaplan_critical_batch_tokens(3)
    assert ratio == pytest.approx(2.0, rel=0.01)


def test_minicpm_batch_at_loss_2_5_is_3_98m_tokens() -> None:
    assert minicpm_optimal_batch_tokens(2.5) == pytest.approx(3.98e6, rel=2e-3)


def test_inverse_loss_model_is_calibrated_on_one_point() -> None:
    assert inverse_loss_critical_batch_tokens(2.0, calibration_loss=4.0, calibration_batch_tokens=1e6) == 2e6


def test_inverse_loss_model_without_a_calibration_point_is_refused() -> None:
    with pytest.raises(InvalidInput) as err:
        critical_batch("inverse_loss", loss=2.0)
    assert err.value.field == "calibration_loss"


def test_noise_scale_recovers_b_simple_of_100_from_two_batch_sizes() -> None:
    got = noise_scale(b_small=32, b_big=512, grad_norm_sq_small=4.125, grad_norm_sq_big=1.1953125)
    assert got.gradient_norm_sq == pytest.approx(1.0)
    assert got.trace_sigma == pytest.approx(100.0)
    assert got.b_simple == pytest.approx(100.0)


def test_noise_scale_averages_a_series_before_dividing() -> None:
    small = [4.125 + d for d in (0.5, -0.5, 0.25, -0.25)]
    big = [1.1953125 + d for d in (0.05, -0.05, 0.02, -0.02)]
    got = noise_scale(b_small=32, b_big=512, grad_norm_sq_small=small, grad_norm_sq_big=big)
    assert got.b_simple == pytest.approx(100.0)
    ema = noise_scale(
        b_small=32,
        b_big=512,
        grad_norm_sq_small=[4.125] * 5,
        grad_norm_sq_big=[1.1953125] * 5,
        averaging="ema",
    )
    assert ema.b_simple == pytest.approx(100.0)


def test_noise_dominated_readings_are_reported_as_implausible() -> None:
    with pytest.raises(ImplausibleResult):
        noise_scale(b_small=32, b_big=512, grad_norm_sq_small=1.0, grad_norm_sq_big=2.0)


def test_noise_scale_critical_batch_converts_samples_to_tokens() -> None:
    est = noise_scale(b_small=32, b_big=512, grad_norm_sq_small=4.125, grad_norm_sq_big=1.1953125)
    assert critical_batch("noise_scale", noise=est, tokens_per_sample=2048).batch_tokens == pytest.approx(
        204_800
    )


def test_kaplan_worked_example_at_loss_3() -> None:
    got = kaplan_minimum_steps(1e5, 2**19, kaplan_critical_batch_tokens(3))
    assert got.steps_min == pytest.approx(32_903.7, abs=0.1)
    assert got.compute_min_over_compute == pytest.approx(0.67096, abs=5e-6)


def test_at_the_critical_batch_steps_and_data_are_both_twice_the_minimum() -> None:
    t = tradeoff(1e6, 1e6)
    assert (t.steps_over_min, t.data_over_min, t.regime) == (2.0, 2.0, "near")


def test_a_quarter_of_the_critical_batch_takes_five_times_the_minimum_steps() -> None:
    t = tradeoff(0.25e6, 1e6)
    assert t.steps_over_min == 5.0 and t.data_over_min == 1.25 and t.regime == "below"


def test_doubling_a_small_batch_nearly_halves_the_steps() -> None:
    t = tradeoff(1e4, 1e6)
    assert t.doubling_steps_cut_fraction == pytest.approx(0.5, abs=0.01)
    assert t.doubling_extra_data_fraction < 0.01
    assert "cut steps by 49.5%" in t.summary  # S(2B)/S(B) = 51/101


def test_far_above_the_critical_batch_doubling_mostly_wastes_data() -> None:
    t = tradeoff(1e8, 1e6)
    assert t.regime == "above"
    assert t.doubling_steps_cut_fraction < 0.01
    assert t.doubling_extra_data_fraction == pytest.approx(1.0, abs=0.01)


@given(st.floats(1e2, 1e9), st.floats(1e2, 1e9))
def test_steps_and_data_overheads_multiply_to_one(batch: float, critical: float) -> None:
    t = tradeoff(batch, critical)
    # Exact in real arithmetic; in floats `x - 1` keeps ~1e-16 / (x - 1) of relative precision, and
    # batch / critical spans 1e-7..1e7 here, so the product is good to ~1e-9 at worst.
    assert (t.steps_over_min - 1) * (t.data_over_min - 1) == pytest.approx(1.0, rel=1e-8)


@given(st.floats(1.5, 10.0), st.floats(0.01, 0.5))
def test_critical_batch_grows_as_the_loss_falls(loss: float, drop: float) -> None:
    assert kaplan_critical_batch_tokens(loss * (1 - drop)) > kaplan_critical_batch_tokens(loss)
    assert minicpm_optimal_batch_tokens(loss * (1 - drop)) > minicpm_optimal_batch_tokens(loss)


def test_recommendations_follow_the_objective() -> None:
    bc = 1e6
    assert recommend_batch_tokens(bc) == bc
    assert recommend_batch_tokens(bc, objective="fewest_steps", max_compute_overhead=0.5) == 0.5e6
    assert recommend_batch_tokens(bc, objective="least_compute") == 0.25e6
    assert recommend_batch_tokens(bc, objective="least_compute", min_batch_tokens=4e5) == 4e5
    assert recommend_batch_tokens(1_000_000, granularity_tokens=4096 * 8) == 32768 * 31


def test_gradient_accumulation_rounds_up_and_reports_the_real_global_batch() -> None:
    got = gradient_accumulation(4e6, micro_batch_sequences=2, seq_len=4096, data_parallel_size=64)
    assert got.accumulation_steps == 8
    assert got.global_batch_sequences == 1024
    assert got.global_batch_tokens == 4_194_304
    assert got.overshoot_fraction == pytest.approx(4_194_304 / 4e6 - 1)


def test_gradient_accumulation_needs_a_whole_micro_batch() -> None:
    with pytest.raises(InvalidInput) as err:
        gradient_accumulation(1e6, micro_batch_sequences=0, seq_len=4096, data_parallel_size=8)
    assert err.value.field == "micro_batch_sequences"


def test_batch_ramp_doubles_as_the_critical_batch_grows() -> None:
    predictor = chinchilla_loss_predictor(CHINCHILLA_ROUNDED, 1e9)
    got = ramp(
        total_tokens=2e12,
        loss_at_tokens=predictor,
        critical_batch_at_loss=kaplan_critical_batch_tokens,
        start_batch_tokens=65_536,
        max_batch_tokens=4_194_304,
        granularity_tokens=2048 * 8,
    )
    batches = [p.batch_tokens for p in got.phases]
    assert batches == sorted(batches) and len(batches) >= 3
    assert all(b2 == 2 * b1 for b1, b2 in itertools.pairwise(batches))
    assert got.phases[0].start_tokens == 0 and got.phases[-1].end_tokens == 2e12
    for p in got.phases[1:]:
        # each doubling happens where the critical batch reaches the new batch
        assert kaplan_critical_batch_tokens(p.loss_at_start) == pytest.approx(p.batch_tokens, rel=1e-6)
    assert got.total_steps == sum(p.steps for p in got.phases)
    assert got.constant_batch_steps == math.ceil(2e12 / 4_194_304)
    assert got.steps_saved == got.constant_batch_steps - got.total_steps


def test_a_run_shorter_than_one_constant_batch_takes_one_step() -> None:
    planned = ramp(
        total_tokens=1.0,
        loss_at_tokens=lambda tokens: 3.0,
        critical_batch_at_loss=lambda loss: 1e6,
        start_batch_tokens=4e9,
        max_batch_tokens=8e9,
        granularity_tokens=1.0,
    )
    assert planned.constant_batch_steps == 1
    assert planned.total_steps == 1


# ---- issue 19: the ramp's traps ---------------------------------------------------------------


def _llama8b_like_ramp(**kw: float) -> object:
    args: dict[str, object] = {
        "total_tokens": 1e12,
        "loss_at_tokens": chinchilla_loss_predictor(CHINCHILLA_ROUNDED, 8e9),
        "critical_batch_at_loss": kaplan_critical_batch_tokens,
        "start_batch_tokens": 524_288,
        "max_batch_tokens": 4_194_304,
        "granularity_tokens": 8192 * 64,
    }
    args.update(kw)
    return ramp(**args)  # type: ignore[arg-type]


def test_the_ramp_is_compared_with_the_target_constant_batch_not_its_start() -> None:
    got = _llama8b_like_ramp()
    assert got.constant_batch_tokens == 4_194_304  # the batch the run ramps to
    assert got.constant_batch_steps == math.ceil(1e12 / 4_194_304)
    # Smaller early batches take more steps over the same tokens: the saving is negative, and said so.
    assert got.steps_saved == got.constant_batch_steps - got.total_steps < 0
    assert got.steps_saved_fraction == pytest.approx(got.steps_saved / got.constant_batch_steps)
    assert "4,194,304" in got.comparison and "constant" in got.comparison


def test_no_phase_evaluates_the_loss_fit_below_the_tokens_it_was_fitted_on() -> None:
    # Hoffmann et al. 2022 fitted 5e9–5e11 tokens; L(8e9, 1 token) would be 412 nats (B_crit ~ 1e-4).
    got = _llama8b_like_ramp()
    first = got.phases[0]
    floor = CHINCHILLA_ROUNDED.min_tokens_fitted
    assert floor == 5e9
    assert first.loss_at_start == pytest.approx(1.69 + 406.4 / 8e9**0.34 + 410.7 / floor**0.28)
    assert 2.0 < first.loss_at_start < 3.5
    assert first.critical_batch_tokens_at_start > 1e5
    assert got.loss_evaluated_from_tokens == 0  # the predictor holds the loss itself


def test_the_chinchilla_predictor_holds_the_loss_at_the_fit_s_smallest_token_count() -> None:
    predict = chinchilla_loss_predictor(CHINCHILLA_ROUNDED, 1e9)
    assert predict(0.0) == predict(1.0) == predict(5e9)
    assert predict(1e10) < predict(5e9)


def test_a_one_token_ramp_is_one_step_of_the_first_batch() -> None:
    got = _llama8b_like_ramp(total_tokens=1.0, granularity_tokens=1.0)
    assert got.total_steps == 1 and got.constant_batch_steps == 1 and got.steps_saved == 0


@given(st.floats(0.05, 4.0), st.integers(1, 8), st.integers(1, 512), st.sampled_from([1024, 4096, 8192]))
def test_fewest_steps_is_runnable_by_the_layout_and_meets_the_compute_cap(
    overhead: float, micro: int, dp: int, seq: int
) -> None:
    bc = 3.3e6
    step = micro * dp * seq
    got = recommend_batch(
        bc, objective="fewest_steps", max_compute_overhead=overhead, granularity_tokens=step
    )
    assert got.batch_tokens % step == 0 and got.batch_tokens >= step
    if step <= overhead * bc:
        assert got.meets_caps and got.batch_tokens / bc <= overhead * (1 + 1e-12)
        assert got.batch_tokens + step > overhead * bc  # the nearest feasible one: the largest
    else:
        assert not got.meets_caps and got.batch_tokens == step and "cap" in got.note


@given(st.floats(0.5, 50.0), st.integers(1, 64), st.sampled_from([1024, 4096]))
def test_least_compute_is_runnable_and_meets_the_steps_cap(overhead: float, dp: int, seq: int) -> None:
    bc = 3.3e6
    step = dp * seq
    got = recommend_batch(bc, objective="least_compute", max_steps_overhead=overhead, granularity_tokens=step)
    assert got.batch_tokens % step == 0 and got.meets_caps
    assert bc / got.batch_tokens <= overhead * (1 + 1e-12)
    assert got.batch_tokens - step < bc / overhead or got.batch_tokens == step


@given(
    st.floats(1e8, 1e12),
    st.floats(1e6, 1e13),
    st.integers(0, 6),
    st.sampled_from([1.0, 4096.0, 8192.0 * 64]),
)
def test_every_ramp_phase_stays_within_the_fit_and_at_or_below_the_critical_batch(
    params: float, total: float, doublings: int, gran: float
) -> None:
    predict = chinchilla_loss_predictor(CHINCHILLA_ROUNDED, params)
    cap = 2**24 * 1.0
    got = ramp(
        total_tokens=total,
        loss_at_tokens=predict,
        critical_batch_at_loss=kaplan_critical_batch_tokens,
        start_batch_tokens=max(gran, cap / 2**doublings),
        max_batch_tokens=cap,
        granularity_tokens=gran,
    )
    highest = predict(CHINCHILLA_ROUNDED.min_tokens_fitted)
    assert got.phases[0].start_tokens == 0 and got.phases[-1].end_tokens == total
    for before, after in itertools.pairwise(got.phases):
        assert after.batch_tokens > before.batch_tokens and after.loss_at_start <= before.loss_at_start
        # a doubling happens only once B_crit has reached the new batch
        assert after.batch_tokens <= after.critical_batch_tokens_at_start * (1 + 1e-6)
    for p in got.phases:
        assert p.loss_at_start <= highest and p.batch_tokens % gran == 0 and p.batch_tokens <= cap
    assert got.constant_batch_tokens == max(got.phases[0].batch_tokens, cap // gran * gran)
    assert got.steps_saved == got.constant_batch_steps - got.total_steps


# --- Data efficiency of a ramp (Kaplan et al. 2020 Eq. 5.5: E = E_min·(1 + B/B_crit)) -------------


def test_at_a_fixed_critical_batch_the_data_efficiency_is_one_over_one_plus_b_over_b_crit() -> None:
    assert data_efficiency([(0.0, 1e9, 2e6)], lambda tokens: 1e6) == pytest.approx(1 / 3)
    assert data_efficiency([(0.0, 1e9, 1e6)], lambda tokens: 1e6) == pytest.approx(0.5)


def test_with_a_critical_batch_growing_linearly_the_integral_matches_its_closed_form() -> None:
    # B_crit(E) = a + k·E at constant B: ∫ (a + kE)/(a + kE + B) dE = E − (B/k)·ln((a + kE + B)/(a + B)).
    a, k, batch, tokens = 2e5, 4e-6, 1e6, 1e12
    exact = (tokens - batch / k * math.log((a + k * tokens + batch) / (a + batch))) / tokens
    got = data_efficiency([(0.0, tokens, batch)], lambda e: a + k * e)
    assert got == pytest.approx(exact, rel=1e-4)


def test_the_ramp_spends_its_tokens_better_than_the_target_batch_and_says_by_how_much() -> None:
    got = _llama8b_like_ramp()
    assert 0 < got.constant_batch_data_efficiency < got.data_efficiency < 1
    # Every phase after the first starts where B_crit has reached its batch: at or below B_crit, so at
    # least half of each such token counts.
    assert all(p.batch_tokens <= p.critical_batch_tokens_at_start * (1 + 1e-9) for p in got.phases[1:])
    assert f"{got.data_efficiency:.1%}" in got.comparison
    assert f"{got.constant_batch_data_efficiency:.1%}" in got.comparison
