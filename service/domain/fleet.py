"""Run and fleet statistics: size classes, MFU histograms and their percentiles, trends.

Pure functions over plain numbers; the store keeps the histograms, this module reads them.

Histograms
    MFU (a fraction in [0, 1]) is counted in :data:`MFU_BINS` bins of width :data:`MFU_BIN_WIDTH`
    (0.001, i.e. 0.1 percentage point): bin k holds [k·w, (k+1)·w); an MFU of exactly 1 falls in the
    last bin. A percentile is the usual interpolation between order statistics, each read from its bin
    (its values spread evenly across the bin), so it is within one bin width of the exact percentile.
    The same reading gives a run's median MFU (from its per-run histogram) and the fleet's percentiles
    of run medians (from the fleet histogram).
Percentile rank
    Mid-rank: (runs in lower bins + half the runs in the same bin) / runs in the group, a fraction.
Size classes
    By total parameters (every expert of a MoE counts): below 1B, 1B-10B, 10B-100B, 100B and above;
    the lower bound belongs to the class (a 1.0e9-parameter model is ``1b_to_10b``).
Trend
    Least-squares slope of MFU against hours since the first measurement (weighted by how many
    measurements a point stands for), and the change from the mean MFU of the first quarter of the
    measurements (by time) to that of the last quarter.
Run economics (tokens so far, time to budget, cost) live in :mod:`service.domain.economics`.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
import operator
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, get_args

from service.domain.errors import InvalidInput
from service.domain.estimates import SECONDS_PER_HOUR

SizeClass = Literal["below_1b", "1b_to_10b", "10b_to_100b", "above_100b"]
SIZE_CLASSES: tuple[str, ...] = get_args(SizeClass)
#: Lower bound (total parameters) of each size class, in SIZE_CLASSES order.
SIZE_CLASS_LOWER_BOUNDS: tuple[float, ...] = (0.0, 1e9, 1e10, 1e11)

MFU_BIN_WIDTH = 0.001
MFU_BINS = 1000
#: Fleet groups with fewer runs than this are not shown across tenants (aggregates only).
MIN_FLEET_GROUP_RUNS = 5
FLEET_PERCENTILES: tuple[float, ...] = (0.10, 0.25, 0.50, 0.75, 0.90)


def size_class(total_parameters: float) -> SizeClass:
    """The size class of a model with ``total_parameters`` (module docstring)."""
    if isinstance(total_parameters, bool) or not isinstance(total_parameters, int | float):
        raise InvalidInput("total parameters must be a number.", field="parameters_total")
    if not math.isfinite(total_parameters) or total_parameters <= 0:
        raise InvalidInput(
            f"total parameters must be positive, got {total_parameters!r}.", field="parameters_total"
        )
    chosen: SizeClass = "below_1b"
    for name, lower in zip(SIZE_CLASSES, SIZE_CLASS_LOWER_BOUNDS, strict=True):
        if total_parameters >= lower:
            chosen = name  # type: ignore[assignment]
    return chosen


def mfu_bin(mfu: float) -> int:
    """The histogram bin of an MFU in [0, 1] (an MFU of exactly 1 is in the last bin)."""
    if not 0.0 <= mfu <= 1.0:
        raise InvalidInput(f"MFU must be a fraction in [0, 1], got {mfu!r}.", field="mfu")
    return min(int(mfu / MFU_BIN_WIDTH), MFU_BINS - 1)


def bin_counts(mfus: Iterable[float]) -> dict[int, int]:
    """How many of ``mfus`` fall in each bin (as :func:`mfu_bin` bins each; checked once for the
    whole list and binned in one comprehension: ingest bins up to 10,000 a request)."""
    values = list(mfus)
    if not values:
        return {}
    try:
        if not (min(values) >= 0.0 and max(values) <= 1.0):
            raise ValueError
        bins = [int(value / MFU_BIN_WIDTH) for value in values]  # NaN raises here
    except (ValueError, TypeError):
        bins = [mfu_bin(value) for value in values]  # raises, naming the value
    counts = Counter(bins)
    if MFU_BINS in counts:  # an MFU of exactly 1 is in the last bin
        counts[MFU_BINS - 1] += counts.pop(MFU_BINS)
    return dict(counts)


@dataclass(frozen=True, slots=True)
class _Cumulative:
    bins: list[int]
    counts: list[int]
    cumulative: list[int]  # values in this bin and below

    @property
    def total(self) -> int:
        return self.cumulative[-1] if self.cumulative else 0

    def order_statistic(self, k: int) -> float:
        """The k-th smallest value (0-based), the c values of a bin taken as spread evenly across it."""
        at = bisect.bisect_right(self.cumulative, k)
        below = self.cumulative[at] - self.counts[at]
        return (self.bins[at] + (k - below + 0.5) / self.counts[at]) * MFU_BIN_WIDTH

    def quantile(self, q: float) -> float | None:
        if not 0.0 <= q <= 1.0:
            raise InvalidInput(f"a quantile must be in [0, 1], got {q!r}.", field="q")
        if self.total == 0:
            return None
        position = q * (self.total - 1)
        low = math.floor(position)
        value = self.order_statistic(low)
        if position > low:
            value += (position - low) * (self.order_statistic(low + 1) - value)
        return value


def _cumulative(counts: Mapping[int, int]) -> _Cumulative:
    ordered = sorted((b, c) for b, c in counts.items() if c > 0)
    values = [c for _, c in ordered]
    return _Cumulative([b for b, _ in ordered], values, list(itertools.accumulate(values)))


def percentile_from_histogram(counts: Mapping[int, int], q: float) -> float | None:
    """The q-quantile (q in [0, 1]) of the values counted in ``counts`` (bin → count); None when empty.

    The usual linear interpolation between order statistics (NumPy's default, ``statistics.quantiles``
    "inclusive": position q·(N−1)), each order statistic read from its bin with a bin's values spread
    evenly across it. So the answer is within one bin width of the exact quantile, and the median of
    two runs is their mean.
    """
    return _cumulative(counts).quantile(q)


def percentiles_from_histogram(
    counts: Mapping[int, int], quantiles: Sequence[float] = FLEET_PERCENTILES
) -> dict[float, float | None]:
    """Several quantiles of one histogram (sorted once)."""
    cumulative = _cumulative(counts)
    return {q: cumulative.quantile(q) for q in quantiles}


def percentile_rank(counts: Mapping[int, int], bin_index: int) -> float | None:
    """Mid-rank of a value in bin ``bin_index`` among the values counted (a fraction); None when empty."""
    total = sum(c for c in counts.values() if c > 0)
    if total == 0:
        return None
    below = sum(c for b, c in counts.items() if b < bin_index and c > 0)
    same = max(counts.get(bin_index, 0), 0)
    return (below + 0.5 * same) / total


# --------------------------------------------------------------------------------------------------
# Trend over time


@dataclass(frozen=True, slots=True)
class SeriesPoint:
    """One point of an MFU series: a single measurement (``count`` 1) or a bucket of them.

    ``hours`` is the time since the run's first measurement (the bucket's midpoint in time), ``mfu``
    the mean MFU of the measurements it stands for, ``mfu_min``/``mfu_max`` their range.
    """

    hours: float
    mfu: float
    count: int = 1
    mfu_min: float | None = None
    mfu_max: float | None = None
    step: int | None = None
    tokens_per_second: float | None = None


@dataclass(frozen=True, slots=True)
class Trend:
    """Direction of MFU over a run (module docstring). Fractions; ``slope`` in MFU per hour."""

    slope_mfu_per_hour: float | None
    first_quartile_mean_mfu: float
    last_quartile_mean_mfu: float
    quartile_change: float
    quartile_change_relative: float | None
    hours_covered: float
    measurements: int


def _quarter_mean(points: Sequence[SeriesPoint], weight_wanted: float) -> float:
    taken = 0.0
    total = 0.0
    for point in points:
        if taken >= weight_wanted:
            break
        weight = min(float(point.count), weight_wanted - taken)
        total += weight * point.mfu
        taken += weight
    return total / taken


def mfu_trend(points: Sequence[SeriesPoint]) -> Trend | None:
    """The trend of an MFU series (points in time order); None with no points.

    The slope is None while every point has the same time (one measurement, or one timestamp).
    """
    ordered = sorted(points, key=lambda p: p.hours)
    n = sum(p.count for p in ordered)
    if n == 0:
        return None
    mean_x = sum(p.count * p.hours for p in ordered) / n
    mean_y = sum(p.count * p.mfu for p in ordered) / n
    sxx = sum(p.count * (p.hours - mean_x) ** 2 for p in ordered)
    sxy = sum(p.count * (p.hours - mean_x) * (p.mfu - mean_y) for p in ordered)
    slope = sxy / sxx if sxx > 1e-18 else None
    quarter = n / 4
    first = _quarter_mean(ordered, quarter)
    last = _quarter_mean(list(reversed(ordered)), quarter)
    change = last - first
    return Trend(
        slope_mfu_per_hour=slope,
        first_quartile_mean_mfu=first,
        last_quartile_mean_mfu=last,
        quartile_change=change,
        quartile_change_relative=change / first if first > 0 else None,
        hours_covered=ordered[-1].hours - ordered[0].hours,
        measurements=n,
    )


def downsample(points: Sequence[SeriesPoint], max_points: int) -> list[SeriesPoint]:
    """At most ``max_points`` points: consecutive runs of equal count merged into their mean
    (time midpoint, mean MFU, min/max kept), so a chart of a million measurements stays readable."""
    if max_points <= 0:
        raise InvalidInput("max_points must be positive.", field="max_points")
    if len(points) <= max_points:
        return list(points)
    size = math.ceil(len(points) / max_points)
    merged: list[SeriesPoint] = []
    for start in range(0, len(points), size):
        group = points[start : start + size]
        count = sum(p.count for p in group)
        merged.append(
            SeriesPoint(
                hours=(group[0].hours + group[-1].hours) / 2,
                mfu=sum(p.count * p.mfu for p in group) / count,
                count=count,
                mfu_min=min(p.mfu if p.mfu_min is None else p.mfu_min for p in group),
                mfu_max=max(p.mfu if p.mfu_max is None else p.mfu_max for p in group),
                step=group[-1].step,
                tokens_per_second=_weighted_rate(group, count),
            )
        )
    return merged


#: Runs with at most this many measurements have their series read whole (one point each); larger
#: ones are read from their stored step buckets (:class:`SeriesBin`).
EXACT_SERIES_MAX = 2000
#: Step buckets a run's stored series holds at most: the 240 points an efficiency series shows (the
#: width doubles when a run outgrows them, so a long run has 120-240), whatever the run's length.
SERIES_BUCKETS_MAX = 240


@dataclass(frozen=True, slots=True)
class SeriesBin:
    """The measurements of a run whose step falls in ``[bucket·width, (bucket+1)·width)``, summed
    (width: a power of two steps, the same for all of a run's buckets)."""

    bucket: int
    count: int
    mfu_sum: float
    mfu_min: float
    mfu_max: float
    tokens_per_second_sum: float
    first_time: datetime
    last_time: datetime
    last_step: int


def series_width(first_step: int, last_step: int, *, at_least: int = 1) -> int:
    """The smallest power-of-two bucket width (not below ``at_least``, itself a power of two) that
    holds steps ``first_step``..``last_step`` in at most SERIES_BUCKETS_MAX buckets."""
    width = at_least
    while last_step // width - first_step // width + 1 > SERIES_BUCKETS_MAX:
        width *= 2
    return width


def _merged(a: SeriesBin, b: SeriesBin) -> SeriesBin:
    return SeriesBin(
        bucket=a.bucket,
        count=a.count + b.count,
        mfu_sum=a.mfu_sum + b.mfu_sum,
        mfu_min=min(a.mfu_min, b.mfu_min),
        mfu_max=max(a.mfu_max, b.mfu_max),
        tokens_per_second_sum=a.tokens_per_second_sum + b.tokens_per_second_sum,
        first_time=min(a.first_time, b.first_time),
        last_time=max(a.last_time, b.last_time),
        last_step=max(a.last_step, b.last_step),
    )


def series_bins(measurements: Iterable[tuple[int, datetime, float, float]], *, width: int) -> list[SeriesBin]:
    """Measurements as (step, time, MFU, tokens/s) summed into buckets of ``width`` steps, by bucket."""
    # Sorted by step (already so, usually: linear), then each bucket is one slice summed by builtins:
    # ingest buckets up to 10,000 measurements a request (a merge per measurement took ~35 ms).
    rows = sorted(measurements, key=operator.itemgetter(0))
    steps = [row[0] for row in rows]
    bins: list[SeriesBin] = []
    start = 0
    while start < len(rows):
        bucket = steps[start] // width
        end = bisect.bisect_left(steps, (bucket + 1) * width, start)
        _, times, mfus, rates = zip(*rows[start:end], strict=True)
        bins.append(
            SeriesBin(
                bucket=bucket,
                count=end - start,
                mfu_sum=sum(mfus),
                mfu_min=min(mfus),
                mfu_max=max(mfus),
                tokens_per_second_sum=sum(rates),
                first_time=min(times),
                last_time=max(times),
                last_step=steps[end - 1],
            )
        )
        start = end
    return bins


def rebucket(bins: Iterable[SeriesBin], *, width: int, to_width: int) -> list[SeriesBin]:
    """Buckets of ``width`` steps merged into buckets of ``to_width`` (a multiple of it), by bucket."""
    if to_width % width:
        raise InvalidInput("a series is re-bucketed only into a multiple of its width.", field="width")
    merged: dict[int, SeriesBin] = {}
    for item in bins:
        moved = dataclasses.replace(item, bucket=item.bucket * width // to_width)
        have = merged.get(moved.bucket)
        merged[moved.bucket] = moved if have is None else _merged(have, moved)
    return [merged[bucket] for bucket in sorted(merged)]


def series_points(bins: Iterable[SeriesBin], *, origin: datetime) -> list[SeriesPoint]:
    """Stored buckets as series points: each at its time midpoint (hours since ``origin``), with its
    mean MFU and tokens/s, MFU range and count."""
    points = []
    for item in bins:
        midpoint = item.first_time + (item.last_time - item.first_time) / 2
        points.append(
            SeriesPoint(
                hours=(midpoint - origin).total_seconds() / SECONDS_PER_HOUR,
                mfu=item.mfu_sum / item.count,
                count=item.count,
                mfu_min=item.mfu_min,
                mfu_max=item.mfu_max,
                step=item.last_step,
                tokens_per_second=item.tokens_per_second_sum / item.count,
            )
        )
    return points


def _weighted_rate(group: Sequence[SeriesPoint], count: int) -> float | None:
    rates = [(p.count, p.tokens_per_second) for p in group]
    if any(rate is None for _, rate in rates):
        return None
    return sum(n * rate for n, rate in rates if rate is not None) / count


# --------------------------------------------------------------------------------------------------
# Fleet goodput


@dataclass(frozen=True, slots=True)
class GoodputSample:
    """One run whose job has a goodput: ``job`` names the job (runs of one job share it)."""

    job: tuple[object, ...]
    pk: int
    group: tuple[str, str]
    goodput: float
    median_mfu: float | None


@dataclass(frozen=True, slots=True)
class GoodputHistograms:
    """A group's jobs: their goodput, and the effective MFU of those with an MFU, in MFU bins."""

    goodput: dict[int, int]
    effective_mfu: dict[int, int]

    @property
    def job_count(self) -> int:
        return sum(self.goodput.values())


def goodput_histograms(samples: Iterable[GoodputSample]) -> dict[tuple[str, str], GoodputHistograms]:
    """Each job counted once, in the group of its latest run (highest pk): its goodput, and its
    effective MFU = the mean of its attempts' median MFUs × goodput (jobs without a measured attempt
    have none). Goodput and effective MFU are fractions in [0, 1], binned as MFU is
    (:data:`MFU_BIN_WIDTH`), so their percentiles read as :func:`percentiles_from_histogram` reads."""
    jobs: dict[tuple[object, ...], list[GoodputSample]] = {}
    for sample in samples:
        jobs.setdefault(sample.job, []).append(sample)
    goodput: dict[tuple[str, str], list[float]] = {}
    effective: dict[tuple[str, str], list[float]] = {}
    for attempts in jobs.values():
        latest = max(attempts, key=operator.attrgetter("pk"))
        goodput.setdefault(latest.group, []).append(latest.goodput)
        mfus = [item.median_mfu for item in attempts if item.median_mfu is not None]
        if mfus:
            effective.setdefault(latest.group, []).append(sum(mfus) / len(mfus) * latest.goodput)
    return {
        group: GoodputHistograms(bin_counts(values), bin_counts(effective.get(group, [])))
        for group, values in goodput.items()
    }
