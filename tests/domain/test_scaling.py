"""Compute-optimal scaling against Hoffmann et al. 2022, the Epoch refit and DeepSeek LLM."""

from __future__ import annotations

import math

import pytest

from service.domain.errors import InvalidInput
from service.domain.scaling import (
    CHINCHILLA_ROUNDED,
    CHINCHILLA_TABLE3,
    CHINCHILLA_UNROUNDED,
    EPOCH_REFIT,
    LossFit,
    chinchilla_loss,
    compute_optimal,
    compute_optimal_all,
    consensus_optimal,
    deepseek_optimal,
    iso_flop_curve,
    kaplan_loss,
    practical_compute_flops,
    table3_approach1,
    twenty_tokens_per_param,
)

GOPHER_FLOPS = 5.76e23


def test_rounded_chinchilla_constants_give_32b_at_the_gopher_budget() -> None:
    assert compute_optimal(CHINCHILLA_ROUNDED, GOPHER_FLOPS).params == pytest.approx(32.2e9, rel=2e-3)


def test_unrounded_chinchilla_constants_give_the_papers_40b() -> None:
    assert compute_optimal(CHINCHILLA_UNROUNDED, GOPHER_FLOPS).params == pytest.approx(40e9, rel=0.01)


def test_epoch_refit_at_1e21_flops_gives_2_778b_params_and_59_99b_tokens() -> None:
    got = compute_optimal(EPOCH_REFIT, 1e21)
    assert got.params == pytest.approx(2.778e9, rel=5e-4)
    assert got.tokens == pytest.approx(59.99e9, rel=5e-4)


def test_compute_optimal_spends_the_whole_budget() -> None:
    got = compute_optimal(EPOCH_REFIT, 1e23)
    assert 6 * got.params * got.tokens == pytest.approx(1e23)
    assert got.tokens_per_param == pytest.approx(got.tokens / got.params)


@pytest.mark.parametrize(
    ("fit", "params", "tokens", "loss"),
    [
        (CHINCHILLA_ROUNDED, 70e9, 1.4e12, 1.9366),
        (EPOCH_REFIT, 70e9, 1.4e12, 1.9739),
        (CHINCHILLA_ROUNDED, 1e9, 20e9, 2.5800),
        (EPOCH_REFIT, 1e9, 20e9, 2.5301),
    ],
)
def test_loss_predictions_match_the_published_vectors(
    fit: LossFit, params: float, tokens: float, loss: float
) -> None:
    assert round(chinchilla_loss(fit, params, tokens), 4) == loss


@pytest.mark.parametrize(("params", "flops", "tokens"), CHINCHILLA_TABLE3)
def test_table3_rows_satisfy_c_equals_6nd_to_the_papers_rounding(
    params: float, flops: float, tokens: float
) -> None:
    # Every row but 67B agrees within 1%; the 67B row prints 1.5T where 5.76e23/(6·67e9) = 1.43T.
    tolerance = 0.05 if params == 67e9 else 0.01
    assert 6 * params * tokens == pytest.approx(flops, rel=tolerance)


@pytest.mark.parametrize(("params", "flops", "tokens"), CHINCHILLA_TABLE3)
def test_table3_power_law_reproduces_each_row(params: float, flops: float, tokens: float) -> None:
    got = table3_approach1(flops)
    tolerance = 0.06 if params == 67e9 else 0.01  # the 67B row is itself off C = 6ND by 4.7%
    assert got.params == pytest.approx(params, rel=0.015)
    assert got.tokens == pytest.approx(tokens, rel=tolerance)


def test_twenty_tokens_per_parameter_gives_400m_for_the_smallest_table3_budget() -> None:
    got = twenty_tokens_per_param(1.92e19)
    assert got.params == pytest.approx(400e6, rel=1e-9)
    assert got.tokens == pytest.approx(8.0e9, rel=1e-9)


def test_deepseek_optimum_multiplies_back_to_the_budget_and_converts_m_to_params() -> None:
    got = deepseek_optimal(1e22)
    m = 0.1715 * 1e22**0.5243
    assert got.params == pytest.approx(m / 6)
    assert got.tokens == pytest.approx(5.8316 * 1e22**0.4757)
    assert m * got.tokens == pytest.approx(1e22, rel=1e-3)
    assert "M/6" in got.note


def test_all_rules_are_returned_together() -> None:
    assert [r.rule for r in compute_optimal_all(1e22)] == [
        "consensus",
        "chinchilla_rounded",
        "chinchilla_unrounded",
        "epoch",
        "chinchilla_approach1",
        "20_tokens_per_param",
        "deepseek",
    ]


def test_kaplan_loss_falls_with_size_and_data() -> None:
    assert kaplan_loss(1e9, 1e11) < kaplan_loss(1e8, 1e11)
    assert kaplan_loss(1e9, 1e12) < kaplan_loss(1e9, 1e11)
    # D → ∞ leaves (N_c/N)^α_N
    assert kaplan_loss(1e9, 1e30) == pytest.approx((6.4e13 / 1e9) ** 0.076, rel=1e-6)


def test_iso_flop_curve_has_its_minimum_at_the_optimum() -> None:
    curve = iso_flop_curve(CHINCHILLA_ROUNDED, 1e22, points=21, span=10)
    best = min(curve, key=lambda p: p.loss)
    assert best is curve[10]
    assert best.params == pytest.approx(compute_optimal(CHINCHILLA_ROUNDED, 1e22).params)
    assert all(6 * p.params * p.tokens == pytest.approx(1e22) for p in curve)


def test_doubling_mfu_from_30_to_60_percent_doubles_practical_compute() -> None:
    c30 = practical_compute_flops(1024, 989e12, 0.3, 86400 * 30)
    c60 = practical_compute_flops(1024, 989e12, 0.6, 86400 * 30)
    assert c60 == pytest.approx(2 * c30)
    assert c30 == pytest.approx(1024 * 989e12 * 0.3 * 86400 * 30)


@pytest.mark.parametrize("mfu", [0.0, 1.2, math.nan])
def test_an_mfu_outside_zero_to_one_is_refused(mfu: float) -> None:
    with pytest.raises(InvalidInput) as err:
        practical_compute_flops(8, 1e15, mfu, 10.0)
    assert err.value.field == "mfu"


def test_a_non_positive_budget_is_refused() -> None:
    with pytest.raises(InvalidInput) as err:
        compute_optimal(EPOCH_REFIT, 0)
    assert err.value.field == "compute_flops"


def test_the_consensus_lies_among_its_members_and_shows_their_spread() -> None:
    members = [
        compute_optimal(EPOCH_REFIT, 5.76e23).params,
        table3_approach1(5.76e23).params,
        twenty_tokens_per_param(5.76e23).params,
    ]
    got = consensus_optimal(5.76e23)
    assert min(members) <= got.params <= max(members)
    assert 6 * got.params * got.tokens == pytest.approx(5.76e23)
    assert "spread" in got.note
