from __future__ import annotations

import random
import statistics
from datetime import UTC, datetime, timedelta

import pytest

from service.domain import fleet
from service.domain.errors import InvalidInput
from service.domain.models import PRESETS, count_parameters


def _exact_quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@pytest.mark.parametrize(
    ("parameters", "expected"),
    [
        (125e6, "below_1b"),
        (999_999_999, "below_1b"),
        (1_000_000_000, "1b_to_10b"),
        (9.99e9, "1b_to_10b"),
        (1e10, "10b_to_100b"),
        (99.9e9, "10b_to_100b"),
        (1e11, "above_100b"),
        (540e9, "above_100b"),
    ],
)
def test_size_classes_split_at_1b_10b_and_100b_total_parameters(parameters: float, expected: str) -> None:
    assert fleet.size_class(parameters) == expected


def test_published_models_land_in_their_size_class() -> None:
    assert fleet.size_class(count_parameters(PRESETS["llama3-8b"].spec).total) == "1b_to_10b"
    assert fleet.size_class(count_parameters(PRESETS["llama3-70b"].spec).total) == "10b_to_100b"
    assert fleet.size_class(count_parameters(PRESETS["gpt3-175b"].spec).total) == "above_100b"
    assert fleet.size_class(count_parameters(PRESETS["gpt3-350m"].spec).total) == "below_1b"


def test_a_non_positive_parameter_count_has_no_size_class() -> None:
    with pytest.raises(InvalidInput):
        fleet.size_class(0)


def test_mfu_bins_are_a_thousandth_wide_and_one_falls_in_the_last() -> None:
    assert fleet.mfu_bin(0.0) == 0
    assert fleet.mfu_bin(0.4567) == 456
    assert fleet.mfu_bin(0.999999) == 999
    assert fleet.mfu_bin(1.0) == 999


@pytest.mark.parametrize("value", [-0.01, 1.0001])
def test_an_mfu_outside_zero_to_one_has_no_bin(value: float) -> None:
    with pytest.raises(InvalidInput):
        fleet.mfu_bin(value)


def test_bin_counts_bins_each_value_as_mfu_bin_does() -> None:
    rng = random.Random(11)
    values = [rng.random() for _ in range(5_000)] + [0.0, 1.0, 0.999, 0.001, 0.9999999999999999, 0.5]
    expected: dict[int, int] = {}
    for value in values:
        expected[fleet.mfu_bin(value)] = expected.get(fleet.mfu_bin(value), 0) + 1
    assert fleet.bin_counts(values) == expected
    assert fleet.bin_counts(iter(values)) == expected
    assert fleet.bin_counts([1.0]) == {fleet.MFU_BINS - 1: 1}
    assert fleet.bin_counts([]) == {}


@pytest.mark.parametrize("value", [-0.01, -1e-9, 1.0001, float("nan"), float("inf")])
def test_bin_counts_refuses_an_mfu_outside_zero_to_one_wherever_it_sits(value: float) -> None:
    for values in ([value, 0.4], [0.4, value, 0.5], [0.4, value]):
        with pytest.raises(InvalidInput):
            fleet.bin_counts(values)


def test_percentiles_read_from_the_histogram_are_within_one_bin_of_the_exact_ones() -> None:
    rng = random.Random(7)
    values = [min(max(rng.gauss(0.42, 0.06), 0.0), 1.0) for _ in range(20_000)]
    counts = fleet.bin_counts(values)
    for q in (0.10, 0.25, 0.50, 0.75, 0.90):
        estimate = fleet.percentile_from_histogram(counts, q)
        assert estimate is not None
        assert abs(estimate - _exact_quantile(values, q)) <= fleet.MFU_BIN_WIDTH


def test_the_median_of_a_few_values_is_within_one_bin_of_statistics_median() -> None:
    values = [0.3812, 0.4120, 0.4033, 0.3990, 0.5501]
    estimate = fleet.percentile_from_histogram(fleet.bin_counts(values), 0.5)
    assert estimate is not None
    assert abs(estimate - statistics.median(values)) <= fleet.MFU_BIN_WIDTH


def test_a_single_value_reads_as_its_bin_midpoint() -> None:
    assert fleet.percentile_from_histogram({412: 1}, 0.5) == pytest.approx(0.4125)


def test_an_empty_histogram_has_no_percentiles() -> None:
    assert fleet.percentile_from_histogram({}, 0.5) is None
    assert fleet.percentile_rank({}, 10) is None


def test_percentile_rank_is_the_mid_rank_within_the_group() -> None:
    counts = {100: 2, 200: 1, 300: 1}  # four runs
    assert fleet.percentile_rank(counts, 100) == pytest.approx((0 + 0.5 * 2) / 4)
    assert fleet.percentile_rank(counts, 200) == pytest.approx((2 + 0.5) / 4)
    assert fleet.percentile_rank(counts, 300) == pytest.approx((3 + 0.5) / 4)


def test_a_linear_rise_in_mfu_has_that_slope_per_hour() -> None:
    points = [fleet.SeriesPoint(hours=h / 2, mfu=0.40 + 0.01 * (h / 2)) for h in range(8)]
    trend = fleet.mfu_trend(points)
    assert trend is not None
    assert trend.slope_mfu_per_hour == pytest.approx(0.01)
    # First quarter: hours 0 and 0.5; last quarter: hours 3 and 3.5.
    assert trend.first_quartile_mean_mfu == pytest.approx(0.40 + 0.01 * 0.25)
    assert trend.last_quartile_mean_mfu == pytest.approx(0.40 + 0.01 * 3.25)
    assert trend.quartile_change == pytest.approx(0.03)
    assert trend.quartile_change_relative == pytest.approx(0.03 / 0.4025)
    assert trend.hours_covered == pytest.approx(3.5)


def test_one_measurement_has_no_slope() -> None:
    trend = fleet.mfu_trend([fleet.SeriesPoint(hours=0.0, mfu=0.4)])
    assert trend is not None and trend.slope_mfu_per_hour is None and trend.quartile_change == 0


def test_bucketed_points_give_nearly_the_trend_of_the_raw_points() -> None:
    rng = random.Random(3)
    raw = [
        fleet.SeriesPoint(hours=i / 100, mfu=0.45 - 0.002 * (i / 100) + rng.gauss(0, 0.01))
        for i in range(5000)
    ]
    merged = fleet.downsample(raw, 240)
    exact, approximate = fleet.mfu_trend(raw), fleet.mfu_trend(merged)
    assert exact is not None and approximate is not None
    assert approximate.slope_mfu_per_hour == pytest.approx(exact.slope_mfu_per_hour, rel=0.02)
    assert approximate.quartile_change == pytest.approx(exact.quartile_change, abs=0.001)


def test_downsampling_keeps_every_measurement_counted_and_the_mean() -> None:
    raw = [
        fleet.SeriesPoint(hours=float(i), mfu=0.3 + (i % 7) / 100, tokens_per_second=1e6) for i in range(1000)
    ]
    merged = fleet.downsample(raw, 240)
    assert len(merged) <= 240
    assert sum(point.count for point in merged) == 1000
    mean_raw = statistics.fmean(point.mfu for point in raw)
    mean_merged = sum(point.count * point.mfu for point in merged) / 1000
    assert mean_merged == pytest.approx(mean_raw)
    assert all(
        p.mfu_min is not None and p.mfu_max is not None and p.mfu_min <= p.mfu <= p.mfu_max for p in merged
    )


# --------------------------------------------------------------------------------------------------
# A long run's series in step buckets


def test_the_series_width_is_the_smallest_power_of_two_that_holds_the_steps_in_240_buckets() -> None:
    assert fleet.series_width(0, 239) == 1
    assert fleet.series_width(0, 240) == 2
    assert fleet.series_width(1_000_000, 1_000_239) == 1  # a run resumed at a high step
    assert fleet.series_width(0, 19_999) == 128  # 20,000 / 128 = 157 buckets; 64 would take 313
    assert fleet.series_width(0, 10, at_least=8) == 8
    for first, last in ((0, 9_999), (17, 123_456), (5_000_000, 5_100_000)):
        width = fleet.series_width(first, last)
        assert last // width - first // width + 1 <= fleet.SERIES_BUCKETS_MAX
        assert width == 1 or last // (width // 2) - first // (width // 2) + 1 > fleet.SERIES_BUCKETS_MAX


def _measurements(steps: range) -> list[tuple[int, datetime, float, float]]:
    origin = datetime(2026, 12, 2, tzinfo=UTC)
    return [(s, origin + timedelta(seconds=10 * s), 0.3 + (s % 11) / 100, 1000.0 + s) for s in steps]


def test_series_bins_sum_each_bucket_of_steps() -> None:
    rows = _measurements(range(3, 40))
    bins = fleet.series_bins(rows, width=16)
    assert [b.bucket for b in bins] == [0, 1, 2]
    middle = bins[1]
    inside = [row for row in rows if 16 <= row[0] < 32]
    assert middle.count == 16 and middle.last_step == 31
    assert middle.mfu_sum == pytest.approx(sum(row[2] for row in inside))
    assert middle.mfu_min == min(row[2] for row in inside) and middle.mfu_max == max(row[2] for row in inside)
    assert middle.first_time == inside[0][1] and middle.last_time == inside[-1][1]
    assert middle.tokens_per_second_sum == pytest.approx(sum(row[3] for row in inside))


def test_rebucketing_narrow_buckets_gives_the_buckets_made_wide_directly() -> None:
    rows = _measurements(range(0, 1000, 3))
    wide = fleet.rebucket(fleet.series_bins(rows, width=4), width=4, to_width=64)
    direct = fleet.series_bins(rows, width=64)
    assert [(b.bucket, b.count, b.last_step, b.first_time, b.last_time) for b in wide] == [
        (b.bucket, b.count, b.last_step, b.first_time, b.last_time) for b in direct
    ]
    assert [b.mfu_sum for b in wide] == pytest.approx([b.mfu_sum for b in direct])
    with pytest.raises(InvalidInput):
        fleet.rebucket(wide, width=64, to_width=96)


def test_series_points_are_bucket_means_at_their_time_midpoints() -> None:
    rows = _measurements(range(0, 8))
    (point,) = fleet.series_points(fleet.series_bins(rows, width=8), origin=rows[0][1])
    assert point.count == 8 and point.step == 7
    assert point.mfu == pytest.approx(statistics.mean(row[2] for row in rows))
    assert point.hours == pytest.approx(35 / 3600)  # midway between 0 s and 70 s
    assert point.tokens_per_second == pytest.approx(1003.5)
