"""Fleet MFU in Prometheus: a collector of cross-tenant aggregates for ``/metrics``.

What it exports (each scrape reads a snapshot at most ``ttl_seconds`` old, so a scrape costs at most
two cheap queries, the fleet histogram and one aggregate over the runs' summary columns):

- ``teff_fleet_run_mfu{accelerator, size_class, quantile}``: the 0.1, 0.5 and 0.9 quantiles of run
  MFU (each run counted once, with the median of its measurements), read from the fleet histogram
  exactly as ``GET /v1/stats/mfu`` reads it (``fleet.percentiles_from_histogram``);
- ``teff_fleet_runs_counted{accelerator, size_class}``: the runs behind those quantiles;
- ``teff_fleet_job_goodput{accelerator, size_class, quantile}`` and
  ``teff_fleet_job_effective_mfu{accelerator, size_class, quantile}``: the same quantiles of job goodput
  and effective MFU (MFU × goodput), each job once as of its latest ended attempt, as
  ``GET /v1/stats/mfu`` reads them (one more
  query, over the runs' stored job goodput, never the events), with
  ``teff_fleet_jobs_goodput_counted{accelerator, size_class}``: the jobs behind them;
- ``teff_fleet_runs_running``: runs whose status is ``running``, all tenants together;
- ``teff_fleet_measurements_stored``: measurements stored, all tenants together.

Cardinality is bounded by the catalog: the fleet histogram holds catalog accelerators only (custom
parts stay within their tenant), and size classes are the four of ``fleet.SIZE_CLASSES``. No label
names a tenant or a run, and a group with fewer than ``fleet.MIN_FLEET_GROUP_RUNS`` runs is left
out, the rule ``GET /v1/stats/mfu`` applies to callers of other tenants (an unauthenticated scrape
must learn no less aggregated a figure than they do).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import Engine

from service.domain import fleet, hardware
from service.store import events as events_store
from service.store import fleet_activity as activity_store
from service.store import histograms as histograms_store
from service.store.uow import UnitOfWork
from service.usecases import fleet_stats

#: Quantiles exported, as Prometheus summaries label them.
EXPORTED_QUANTILES: tuple[float, ...] = (0.10, 0.50, 0.90)
#: How old a snapshot may be: Prometheus scrapes every 15 s by default, so one query a scrape at most.
DEFAULT_TTL_SECONDS = 15.0


@dataclass(frozen=True, slots=True)
class FleetGroupSnapshot:
    accelerator: str
    size_class: str
    run_count: int
    quantiles: dict[float, float]


@dataclass(frozen=True, slots=True)
class GoodputGroupSnapshot:
    accelerator: str
    size_class: str
    job_count: int
    goodput: dict[float, float]
    effective_mfu: dict[float, float]


@dataclass(frozen=True, slots=True)
class FleetSnapshot:
    groups: tuple[FleetGroupSnapshot, ...]
    running_runs: int
    measurements_stored: int
    goodput_groups: tuple[GoodputGroupSnapshot, ...] = ()


def _quantiles(histogram: dict[int, int]) -> dict[float, float]:
    values = fleet.percentiles_from_histogram(histogram, EXPORTED_QUANTILES)
    return {q: v for q, v in values.items() if v is not None}


def _shown(accelerator: str, count: int) -> bool:
    # The catalog check keeps the label set bounded even if a stored row names a retired part.
    return count >= fleet.MIN_FLEET_GROUP_RUNS and accelerator in hardware.ACCELERATORS


def read_fleet_snapshot(engine: Engine) -> FleetSnapshot:
    """The fleet aggregates now (one read transaction)."""
    with UnitOfWork(engine, write=False) as uow:
        histograms = histograms_store.fleet_histograms(uow.connection)
        activity = activity_store.fleet_activity(uow.connection)
        goodput_rows = events_store.goodput_rows(uow.connection)
    groups = [
        FleetGroupSnapshot(accelerator, size_class, sum(histogram.values()), _quantiles(histogram))
        for (accelerator, size_class), histogram in sorted(histograms.items())
        if _shown(accelerator, sum(histogram.values()))
    ]
    by_job = fleet.goodput_histograms(fleet_stats.goodput_samples(goodput_rows, fleet_only=True))
    goodput_groups = [
        GoodputGroupSnapshot(
            accelerator,
            size_class,
            group.job_count,
            _quantiles(group.goodput),
            _quantiles(group.effective_mfu),
        )
        for (accelerator, size_class), group in sorted(by_job.items())
        if _shown(accelerator, group.job_count)
    ]
    return FleetSnapshot(
        groups=tuple(groups),
        running_runs=activity.running_runs,
        measurements_stored=activity.measurements_stored,
        goodput_groups=tuple(goodput_groups),
    )


class FleetMetricsCollector(Collector):
    """A prometheus_client collector over :func:`read_fleet_snapshot`, cached ``ttl_seconds``."""

    def __init__(
        self,
        read: Callable[[], FleetSnapshot],
        *,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self._ttl_seconds = ttl_seconds
        self._clock = clock
        self._lock = threading.Lock()  # concurrent scrapes share one query
        self._snapshot: FleetSnapshot | None = None
        self._read_at = 0.0

    def snapshot(self) -> FleetSnapshot:
        with self._lock:
            now = self._clock()
            if self._snapshot is None or now - self._read_at >= self._ttl_seconds:
                self._snapshot = self._read()
                self._read_at = now
            return self._snapshot

    def describe(self) -> Iterator[Metric]:
        # Without describe(), registering would call collect() and query the database at start-up.
        return iter(_families(None))

    def collect(self) -> Iterator[Metric]:
        return iter(_families(self.snapshot()))


def _families(snapshot: FleetSnapshot | None) -> list[Metric]:
    labels = ["accelerator", "size_class"]
    mfu = GaugeMetricFamily(
        "teff_fleet_run_mfu",
        "Quantiles of run MFU (a fraction; each run counts once, with its median) across tenants, "
        "by catalog accelerator and model-size class; groups of fewer than "
        f"{fleet.MIN_FLEET_GROUP_RUNS} runs are left out",
        labels=[*labels, "quantile"],
    )
    counted = GaugeMetricFamily(
        "teff_fleet_runs_counted",
        "Runs with measurements behind teff_fleet_run_mfu, by accelerator and model-size class",
        labels=labels,
    )
    goodput = GaugeMetricFamily(
        "teff_fleet_job_goodput",
        "Quantiles of job goodput (productive over allocated wall-clock, every attempt; each job once) "
        "across tenants, by catalog accelerator and model-size class; groups of fewer than "
        f"{fleet.MIN_FLEET_GROUP_RUNS} jobs are left out",
        labels=[*labels, "quantile"],
    )
    effective = GaugeMetricFamily(
        "teff_fleet_job_effective_mfu",
        "Quantiles of job effective MFU (the job's MFU x its goodput) across tenants, by catalog "
        "accelerator and model-size class, over the jobs of teff_fleet_job_goodput with a measured MFU",
        labels=[*labels, "quantile"],
    )
    jobs = GaugeMetricFamily(
        "teff_fleet_jobs_goodput_counted",
        "Jobs with events behind teff_fleet_job_goodput, by accelerator and model-size class",
        labels=labels,
    )
    running = GaugeMetricFamily("teff_fleet_runs_running", "Runs whose status is running, all tenants")
    stored = GaugeMetricFamily("teff_fleet_measurements_stored", "Measurements stored, all tenants")
    if snapshot is not None:
        for group in snapshot.groups:
            for q, value in group.quantiles.items():
                mfu.add_metric([group.accelerator, group.size_class, f"{q:g}"], value)
            counted.add_metric([group.accelerator, group.size_class], group.run_count)
        for job_group in snapshot.goodput_groups:
            names = [job_group.accelerator, job_group.size_class]
            for q, value in job_group.goodput.items():
                goodput.add_metric([*names, f"{q:g}"], value)
            for q, value in job_group.effective_mfu.items():
                effective.add_metric([*names, f"{q:g}"], value)
            jobs.add_metric(names, job_group.job_count)
        running.add_metric([], snapshot.running_runs)
        stored.add_metric([], snapshot.measurements_stored)
    return [mfu, counted, goodput, effective, jobs, running, stored]


def fleet_metrics_registry(
    engine: Callable[[], Engine], *, ttl_seconds: float = DEFAULT_TTL_SECONDS
) -> CollectorRegistry:
    """A registry of the fleet collector alone (one per app: it reads that app's database, which
    the process-wide registry of the HTTP metrics knows nothing of). ``engine`` is asked at scrape
    time: the app's engine is made in its lifespan, after the app is built."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FleetMetricsCollector(lambda: read_fleet_snapshot(engine()), ttl_seconds=ttl_seconds))
    return registry
