"""Goodput on synthetic timelines whose answer is worked out by hand in each test."""

from __future__ import annotations

import itertools
import random
from datetime import UTC, datetime, timedelta

import pytest

from service.domain.errors import InvalidInput
from service.domain.goodput import (
    EventKind,
    Phase,
    RunEvent,
    checkpoint_advice,
    daly_interval_seconds,
    device_hours,
    effective_mfu,
    goodput_gain_in_devices,
    job_goodput,
    young_interval_seconds,
)

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
_ids = itertools.count()


def ev(kind: EventKind, seconds: float, attempt: int = 0, **extra: object) -> RunEvent:
    return RunEvent(
        event_id=f"e{next(_ids)}", kind=kind, at=T0 + timedelta(seconds=seconds), attempt=attempt, **extra
    )  # type: ignore[arg-type]


def clean_job() -> list[RunEvent]:
    """100 s start-up, training to 1000 s with a 50 s save at 500-550 and a 30 s eval at 700-730."""
    return [
        ev(EventKind.JOB_STARTED, 0),
        ev(EventKind.FIRST_STEP, 100),
        ev(EventKind.CHECKPOINT_SAVE_BEGIN, 500),
        ev(EventKind.CHECKPOINT_SAVE_END, 550),
        ev(EventKind.EVALUATION_BEGIN, 700),
        ev(EventKind.EVALUATION_END, 730),
        ev(EventKind.JOB_ENDED, 1000),
    ]


def test_a_clean_job_is_its_training_time_over_its_wall_clock() -> None:
    result = job_goodput(clean_job())
    # productive = 1000 - 100 init - 50 save - 30 eval = 820
    assert result.total_seconds == pytest.approx(1000)
    assert result.productive_seconds == pytest.approx(820)
    assert result.goodput == pytest.approx(0.82)
    assert result.badput_seconds[Phase.INITIALISATION] == pytest.approx(100)
    assert result.badput_seconds[Phase.CHECKPOINT_SAVE] == pytest.approx(50)
    assert result.badput_seconds[Phase.EVALUATION] == pytest.approx(30)
    assert result.failures == 0 and result.warnings == ()
    assert sum(segment.seconds for segment in result.segments) == pytest.approx(1000)


def test_events_out_of_order_and_repeated_ids_give_the_same_answer() -> None:
    events = clean_job()
    shuffled = events + events[2:4]  # a retried POST sends two events again
    random.Random(7).shuffle(shuffled)
    assert job_goodput(shuffled).productive_seconds == pytest.approx(820)


def test_overlapping_intervals_count_each_instant_once() -> None:
    # Eval 600-700 and a save 650-750 overlap by 50 s: badput 150 s, not 200; save wins the overlap.
    events = [
        ev(EventKind.JOB_STARTED, 0),
        ev(EventKind.FIRST_STEP, 0),
        ev(EventKind.EVALUATION_BEGIN, 600),
        ev(EventKind.CHECKPOINT_SAVE_BEGIN, 650),
        ev(EventKind.EVALUATION_END, 700),
        ev(EventKind.CHECKPOINT_SAVE_END, 750),
        ev(EventKind.DATA_STALL, 720, duration_seconds=40),  # 680-720, inside both
        ev(EventKind.JOB_ENDED, 1000),
    ]
    result = job_goodput(events)
    assert result.productive_seconds == pytest.approx(1000 - 150)
    assert result.badput_seconds[Phase.DATA_STALL] == pytest.approx(40)
    # save covers 650-750 minus the stall 680-720 = 60; eval 600-650 = 50
    assert result.badput_seconds[Phase.CHECKPOINT_SAVE] == pytest.approx(60)
    assert result.badput_seconds[Phase.EVALUATION] == pytest.approx(50)


def test_a_begin_without_an_end_closes_at_the_next_event() -> None:
    events = [
        ev(EventKind.JOB_STARTED, 0),
        ev(EventKind.FIRST_STEP, 10),
        ev(EventKind.EVALUATION_BEGIN, 300),  # its end was lost
        ev(EventKind.CHECKPOINT_SAVE_BEGIN, 400),
        ev(EventKind.CHECKPOINT_SAVE_END, 420),
        ev(EventKind.JOB_ENDED, 1000),
    ]
    result = job_goodput(events)
    assert result.badput_seconds[Phase.EVALUATION] == pytest.approx(100)
    assert result.productive_seconds == pytest.approx(1000 - 10 - 100 - 20)
    assert any("no end" in warning for warning in result.warnings)


def test_a_job_without_an_end_event_ends_at_its_last_event_or_measurement() -> None:
    events = [ev(EventKind.JOB_STARTED, 0), ev(EventKind.FIRST_STEP, 60)]
    result = job_goodput(events, measured_at={0: [T0 + timedelta(seconds=s) for s in (120, 600)]})
    assert result.total_seconds == pytest.approx(600)
    assert result.goodput == pytest.approx(540 / 600)


def test_initialisation_falls_back_to_the_first_measurement() -> None:
    events = [ev(EventKind.JOB_STARTED, 0), ev(EventKind.JOB_ENDED, 400)]
    result = job_goodput(events, measured_at={0: [T0 + timedelta(seconds=80)], 1: [T0]})
    assert result.badput_seconds[Phase.INITIALISATION] == pytest.approx(80)


def test_a_failure_loses_the_training_since_the_last_save_and_the_gap_is_idle() -> None:
    events = [
        # attempt 0: init 0-50, save 300-320, failure at 500 -> lost 320-500 = 180
        ev(EventKind.JOB_STARTED, 0),
        ev(EventKind.FIRST_STEP, 50),
        ev(EventKind.CHECKPOINT_SAVE_BEGIN, 300),
        ev(EventKind.CHECKPOINT_SAVE_END, 320),
        ev(EventKind.FAILURE, 500, reason="NCCL timeout"),
        # attempt 1 starts 100 s later: init 600-640 with a restore 610-630 inside it; ends at 1000
        ev(EventKind.JOB_STARTED, 600, attempt=1),
        ev(EventKind.RESTART, 600, attempt=1),
        ev(EventKind.CHECKPOINT_RESTORE_BEGIN, 610, attempt=1),
        ev(EventKind.CHECKPOINT_RESTORE_END, 630, attempt=1),
        ev(EventKind.FIRST_STEP, 640, attempt=1),
        ev(EventKind.JOB_ENDED, 1000, attempt=1),
    ]
    result = job_goodput(events)
    assert result.total_seconds == pytest.approx(1000)
    badput = result.badput_seconds
    assert badput[Phase.LOST_PROGRESS] == pytest.approx(180)
    assert badput[Phase.IDLE_BETWEEN_ATTEMPTS] == pytest.approx(100)
    assert badput[Phase.CHECKPOINT_RESTORE] == pytest.approx(20)
    assert badput[Phase.INITIALISATION] == pytest.approx(50 + 20)
    assert badput[Phase.CHECKPOINT_SAVE] == pytest.approx(20)
    # productive: attempt 0 50-300 (250); attempt 1 640-1000 (360)
    assert result.productive_seconds == pytest.approx(610)
    assert result.failures == 1 and result.attempts[0].failure_reason == "NCCL timeout"
    assert result.mtbf_seconds == pytest.approx(500 + 400)


def test_clock_skew_between_attempts_never_counts_negative_idle() -> None:
    # attempt 1's host clock runs 30 s behind: it "starts" before attempt 0 failed.
    events = [
        ev(EventKind.JOB_STARTED, 0),
        ev(EventKind.FIRST_STEP, 0),
        ev(EventKind.FAILURE, 200),
        ev(EventKind.JOB_STARTED, 170, attempt=1),
        ev(EventKind.FIRST_STEP, 180, attempt=1),
        ev(EventKind.JOB_ENDED, 370, attempt=1),
    ]
    result = job_goodput(events)
    assert result.badput_seconds[Phase.IDLE_BETWEEN_ATTEMPTS] == 0
    assert result.total_seconds == pytest.approx(200 + 200)
    assert result.badput_seconds[Phase.LOST_PROGRESS] == pytest.approx(200)  # no save before the failure
    assert result.productive_seconds == pytest.approx(190)
    assert any("clock skew" in warning for warning in result.warnings)


def test_a_hang_inside_a_save_is_a_hang() -> None:
    events = [
        ev(EventKind.JOB_STARTED, 0),
        ev(EventKind.FIRST_STEP, 0),
        ev(EventKind.CHECKPOINT_SAVE_BEGIN, 100),
        ev(EventKind.HANG_DETECTED, 400, duration_seconds=250),  # 150-400
        ev(EventKind.CHECKPOINT_SAVE_END, 400),
        ev(EventKind.JOB_ENDED, 500),
    ]
    result = job_goodput(events)
    assert result.badput_seconds[Phase.HANG] == pytest.approx(250)
    assert result.badput_seconds[Phase.CHECKPOINT_SAVE] == pytest.approx(50)
    assert result.productive_seconds == pytest.approx(200)


def test_no_events_is_invalid_input() -> None:
    with pytest.raises(InvalidInput):
        job_goodput([])


def test_effective_mfu_and_device_hours() -> None:
    assert effective_mfu(0.40, 0.82) == pytest.approx(0.328)
    assert device_hours(1800, 16) == pytest.approx(8.0)


def test_daly_interval_matches_the_papers_figures() -> None:
    # Daly 2006, figs. 3-5: δ = 5 min, M = 24 h, 6 h, 15 min predict 117, 57 and 9.1 minutes.
    minute = 60.0
    assert daly_interval_seconds(5 * minute, 24 * 60 * minute) / minute == pytest.approx(117, abs=0.5)
    assert daly_interval_seconds(5 * minute, 6 * 60 * minute) / minute == pytest.approx(57, abs=0.5)
    assert daly_interval_seconds(5 * minute, 15 * minute) / minute == pytest.approx(9.1, abs=0.05)


def test_young_interval_is_sqrt_two_delta_m() -> None:
    # δ = 5 min, M = 24 h: sqrt(2 · 5 · 1440) = sqrt(14400) = 120 min.
    assert young_interval_seconds(300, 86_400) == pytest.approx(120 * 60)


def test_daly_interval_is_the_mtbf_when_saves_cost_more_than_twice_it() -> None:
    assert daly_interval_seconds(1000, 400) == 400


def test_checkpoint_advice_uses_the_observed_failure_rate_and_save_cost() -> None:
    events = [
        ev(EventKind.JOB_STARTED, 0),
        ev(EventKind.FIRST_STEP, 0),
        ev(EventKind.CHECKPOINT_SAVE_BEGIN, 1000),
        ev(EventKind.CHECKPOINT_SAVE_END, 1010),
        ev(EventKind.FAILURE, 2000),
    ]
    advice = checkpoint_advice(job_goodput(events))
    # MTBF 2000 s, save 10 s: Young sqrt(2·10·2000) = 200 s; Daly 200·(1 + sqrt(1/400)/3 + 1/3600) - 10
    assert advice.young_interval_seconds == pytest.approx(200)
    assert advice.interval_seconds == pytest.approx(200 * (1 + 0.05 / 3 + 1 / 3600) - 10)
    assert checkpoint_advice(job_goodput(clean_job())).interval_seconds is None


def test_a_goodput_gain_is_worth_devices() -> None:
    # 1024 devices at 0.80 goodput; at 0.90 they train as fast as 1024 · 0.9/0.8 = 1152 devices.
    assert goodput_gain_in_devices(1024, 0.80, 0.90) == pytest.approx(128)
    with pytest.raises(InvalidInput):
        goodput_gain_in_devices(8, 0.0, 0.9)


def test_thousands_of_stalls_overlapping_a_save_are_classified_by_hand_count() -> None:
    # 0-10,000 s, first step at 0; a 0.5 s stall ending at every second 1…5,000 (2,500 s of stalls);
    # a save 4,000-6,000 s: 1,000 of the stalls (ending at 4,001…5,000) lie inside it and count as
    # stalls (higher priority), so the save keeps 2,000 − 500 = 1,500 s.
    events = [ev(EventKind.JOB_STARTED, 0), ev(EventKind.FIRST_STEP, 0)]
    events += [ev(EventKind.DATA_STALL, s, duration_seconds=0.5) for s in range(1, 5001)]
    events += [ev(EventKind.CHECKPOINT_SAVE_BEGIN, 4000), ev(EventKind.CHECKPOINT_SAVE_END, 6000)]
    events.append(ev(EventKind.JOB_ENDED, 10_000))
    result = job_goodput(events)
    assert result.badput_seconds[Phase.DATA_STALL] == pytest.approx(2500)
    assert result.badput_seconds[Phase.CHECKPOINT_SAVE] == pytest.approx(1500)
    assert result.productive_seconds == pytest.approx(10_000 - 2500 - 1500)
