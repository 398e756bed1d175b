"""Run economics: tokens so far, time to budget and its date (issue 17: never past year 9999), cost."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from service.domain import economics
from service.domain.errors import InvalidInput

AT = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


def test_tokens_so_far_is_steps_times_the_global_batch() -> None:
    assert economics.tokens_so_far(latest_step=1000, global_batch_tokens=4_194_304) == 4_194_304_000
    assert economics.tokens_so_far(latest_step=None, global_batch_tokens=4_194_304) == 0


def test_time_to_budget_is_what_is_left_over_the_rate() -> None:
    assert economics.seconds_to_budget(
        token_budget=1e12, tokens_done=4e11, tokens_per_second=1e6
    ) == pytest.approx(6e5)
    assert economics.seconds_to_budget(token_budget=1e12, tokens_done=2e12, tokens_per_second=1e6) == 0
    with pytest.raises(InvalidInput):
        economics.seconds_to_budget(token_budget=1e12, tokens_done=0, tokens_per_second=0)


def test_the_fraction_done_is_capped_at_the_whole_budget() -> None:
    assert economics.budget_fraction_done(tokens_done=2.5e11, token_budget=1e12) == 0.25
    assert economics.budget_fraction_done(tokens_done=3e12, token_budget=1e12) == 1.0
    assert economics.budget_fraction_done(tokens_done=3e12, token_budget=None) is None


def test_a_budget_within_range_is_reached_at_the_latest_time_plus_the_time_left() -> None:
    # 6e11 tokens left at 1e6 tokens/s: 6e5 s = 6 days 22:40:00
    outlook = economics.budget_outlook(
        token_budget=1e12, tokens_done=4e11, tokens_per_second=1e6, measured_at=AT
    )
    assert outlook.seconds_to_budget == pytest.approx(6e5)
    assert outlook.reached_at == datetime(2026, 12, 9, 8, 40, tzinfo=UTC)
    assert outlook.reached_after_year_9999 is False


def test_a_1e16_token_budget_at_30000_tokens_per_second_has_no_date() -> None:
    # 1e16 / 3e4 = 3.33e11 s = 10,562.7 Julian years after 2026: past 9999-12-31
    outlook = economics.budget_outlook(
        token_budget=1e16, tokens_done=0, tokens_per_second=3e4, measured_at=AT
    )
    assert outlook.seconds_to_budget == pytest.approx(1e16 / 3e4)
    assert outlook.seconds_to_budget / (365.25 * 86_400) == pytest.approx(10_562.7, abs=0.1)
    assert outlook.reached_at is None
    assert outlook.reached_after_year_9999 is True


def test_the_last_instant_is_still_a_date_and_one_microsecond_more_is_not() -> None:
    near_the_end = datetime(9999, 12, 31, 23, 0, tzinfo=UTC)  # 3,599.999999 s before the last instant
    assert economics.later_by(near_the_end, 3599.999999) == economics.LAST_INSTANT
    assert economics.later_by(near_the_end, 3600.0) is None  # one microsecond more
    assert economics.later_by(AT, 1e14) is None  # past timedelta's own range (8.6e13 s)
    assert economics.later_by(AT, float("inf")) is None
    assert economics.later_by(AT, 3600.0) == datetime(2026, 12, 2, 11, 0, tzinfo=UTC)


def test_a_rate_too_small_for_a_float_quotient_gives_no_seconds_and_no_date() -> None:
    outlook = economics.budget_outlook(
        token_budget=1e16, tokens_done=0, tokens_per_second=1e-300, measured_at=AT
    )
    assert outlook.seconds_to_budget is None
    assert outlook.reached_at is None and outlook.reached_after_year_9999 is True


def test_no_budget_or_no_throughput_gives_no_outlook() -> None:
    assert (
        economics.budget_outlook(token_budget=None, tokens_done=0, tokens_per_second=1e6, measured_at=AT)
        == economics.NO_OUTLOOK
    )
    assert (
        economics.budget_outlook(token_budget=1e12, tokens_done=0, tokens_per_second=None, measured_at=AT)
        == economics.NO_OUTLOOK
    )


def test_cost_per_billion_tokens_is_device_hours_times_price() -> None:
    # 64 devices at 0.4 MFU of 989.4 TFLOP/s with 6.1e10 FLOPs per token:
    # 64 × 989.4e12 × 0.4 / 61,066,469,376 = 414,771.6 tokens/s, so 1e9 tokens take 2,411.0 s.
    seconds = economics.seconds_per_billion_tokens(
        model_flops_per_token=61_066_469_376, device_count=64, peak_flops_per_device=989.4e12, mfu=0.4
    )
    assert seconds == pytest.approx(1e9 * 61_066_469_376 / (64 * 989.4e12 * 0.4))
    assert economics.tokens_per_second_at(seconds_per_billion=seconds) == pytest.approx(414_771.6, abs=0.1)
    cost = economics.cost_per_billion_tokens(
        seconds_per_billion=seconds, device_count=64, price_per_device_hour=2.5
    )
    assert cost == pytest.approx(seconds / 3600 * 64 * 2.5)
    assert cost == pytest.approx(107.16, abs=0.05)


def test_the_time_for_a_budget_is_its_billions_times_the_time_per_billion() -> None:
    per_billion = economics.seconds_per_billion_tokens(
        model_flops_per_token=6e10, device_count=8, peak_flops_per_device=1e15, mfu=0.5
    )
    whole = economics.seconds_for_tokens(
        2e12, model_flops_per_token=6e10, device_count=8, peak_flops_per_device=1e15, mfu=0.5
    )
    assert per_billion == pytest.approx(1e9 * 6e10 / (8 * 1e15 * 0.5))  # 15,000 s
    assert whole == pytest.approx(2000 * 15_000.0)
    assert timedelta(seconds=whole) == timedelta(days=347, hours=5, minutes=20)
