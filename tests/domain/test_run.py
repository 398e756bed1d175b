"""The run entity's summary rule and the reading of a run's stored description."""

from __future__ import annotations

import statistics
from datetime import UTC, datetime, timedelta, timezone

import pytest

from service.domain import fleet, hardware, models
from service.domain.errors import InvalidInput
from service.domain.run import (
    MAX_TAGS,
    FinalStatusLocked,
    FreshMeasurements,
    NewMeasurement,
    RunSummary,
    global_batch,
    status_after,
    stored_accelerator,
    stored_model,
    tags_after,
)

T0 = datetime(2026, 12, 2, 10, tzinfo=UTC)


def _measurement(step: int, mfu: float, *, minutes: int = 0) -> NewMeasurement:
    return NewMeasurement(step, T0 + timedelta(minutes=minutes), mfu, 1000.0 * step)


def test_the_first_measurements_set_every_summary_field() -> None:
    fresh = [
        _measurement(3, 0.40, minutes=3),
        _measurement(1, 0.30, minutes=1),
        _measurement(2, 0.50, minutes=2),
    ]
    histogram = fleet.bin_counts(m.mfu for m in fresh)
    summary = RunSummary().after(FreshMeasurements.of(fresh), histogram)
    assert summary.measurement_count == 3
    # The median within one bin of the exact one (the histogram's resolution).
    assert summary.median_mfu == pytest.approx(
        statistics.median(m.mfu for m in fresh), abs=fleet.MFU_BIN_WIDTH
    )
    assert summary.fleet_bin == fleet.mfu_bin(summary.median_mfu)
    assert summary.first_measured_at == T0 + timedelta(minutes=1)
    assert (summary.latest_step, summary.latest_mfu, summary.latest_tokens_per_second) == (3, 0.40, 3000.0)


def test_a_late_lower_step_counts_but_does_not_move_the_latest_reading() -> None:
    before = RunSummary().after(
        FreshMeasurements.of([_measurement(10, 0.4, minutes=10)]), {fleet.mfu_bin(0.4): 1}
    )
    late = [_measurement(5, 0.2, minutes=20)]
    after = before.after(FreshMeasurements.of(late), {fleet.mfu_bin(0.4): 1, fleet.mfu_bin(0.2): 1})
    assert after.measurement_count == 2
    assert (after.latest_step, after.latest_measured_at, after.latest_mfu) == (
        before.latest_step,
        before.latest_measured_at,
        before.latest_mfu,
    )
    assert after.first_measured_at == before.first_measured_at  # the late one was measured later


def test_an_earlier_time_moves_the_first_time_and_times_are_read_in_utc() -> None:
    before = RunSummary().after(
        FreshMeasurements.of([_measurement(10, 0.4, minutes=10)]), {fleet.mfu_bin(0.4): 1}
    )
    earlier = NewMeasurement(11, (T0 - timedelta(hours=1)).astimezone(timezone(timedelta(hours=2))), 0.4, 1.0)
    after = before.after(FreshMeasurements.of([earlier]), {fleet.mfu_bin(0.4): 2})
    assert after.first_measured_at == T0 - timedelta(hours=1)
    assert after.first_measured_at.utcoffset() == timedelta(0)


def test_nothing_new_leaves_the_summary_as_it_was() -> None:
    summary = RunSummary().after(FreshMeasurements.of([_measurement(1, 0.3)]), {fleet.mfu_bin(0.3): 1})
    assert summary.after(FreshMeasurements.of([]), {fleet.mfu_bin(0.3): 1}) is summary


def test_new_measurements_need_them_counted_in_the_histogram() -> None:
    with pytest.raises(ValueError, match="histogram is empty"):
        RunSummary().after(FreshMeasurements.of([_measurement(1, 0.3)]), {})


def test_a_global_batch_in_tokens_has_a_sequence_count_only_when_whole() -> None:
    # Llama 3 8B's 4M-token batch at 8,192 tokens a sequence is 512 sequences (Meta, 2024).
    assert global_batch(tokens=4 * 1024 * 1024, sequences=None, seq_len_tokens=8192) == (4_194_304, 512)
    assert global_batch(tokens=1_000_000, sequences=None, seq_len_tokens=4096) == (1_000_000, None)
    assert global_batch(tokens=None, sequences=1536, seq_len_tokens=2048) == (3_145_728, 1536)


def test_a_stored_description_reads_back_as_the_domain_objects_it_named() -> None:
    spec = {
        "model": {"preset": "llama2-7b"},
        "hardware": {"accelerator": "NVIDIA H100 80GB HBM3", "device_count": 8},
    }
    assert stored_model(spec) == models.get_preset("llama2-7b").spec
    assert stored_accelerator(spec) == hardware.lookup_accelerator("h100-sxm")
    custom = {"hardware": {"custom": {"name": "lab part", "peak_tflops": {"bf16": 500.0}}, "count": 2}}
    part = stored_accelerator(custom)
    assert part.is_custom and hardware.peak_flops(part, "bf16") == 500.0 * hardware.TERA


@pytest.mark.parametrize("final", ["finished", "failed"])
def test_a_running_run_ends_once_and_a_final_status_is_kept(final: str) -> None:
    assert status_after("running", final) == final
    assert status_after(final, final) == final  # a retried PATCH changes nothing
    for other in {"running", "finished", "failed"} - {final}:
        with pytest.raises(FinalStatusLocked) as refused:
            status_after(final, other)
        assert (refused.value.current, refused.value.requested) == (final, other)


def test_tags_replace_or_edit_in_first_seen_order_without_duplicates() -> None:
    current = ["a", "b", "c"]
    assert tags_after(current) is None  # no tag field given: the tags are left alone
    assert tags_after(current, replace_with=["z", "a", "z"]) == ["z", "a"]
    assert tags_after(current, add=["d", "a"], remove=["b"]) == ["a", "c", "d"]
    assert tags_after(current, remove=["a", "b", "c"]) == []
    # add and remove the same tag: removal wins (the edit ends without it).
    assert tags_after(current, add=["x"], remove=["x"]) == ["a", "b", "c"]


def test_an_edit_that_leaves_more_than_max_tags_is_refused_at_add_tags() -> None:
    current = [f"t{index}" for index in range(MAX_TAGS)]
    assert tags_after(current, add=["t0"]) == current  # already there: still MAX_TAGS
    with pytest.raises(InvalidInput) as refused:
        tags_after(current, add=["one-more"])
    assert refused.value.field == "body.add_tags"
