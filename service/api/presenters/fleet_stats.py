"""Fleet statistics (:mod:`service.usecases.fleet_stats`) as answered."""

from __future__ import annotations

from typing import cast

from service.api.schemas.runs import SizeClassName
from service.api.schemas.stats import (
    FleetGroup,
    FleetMfuStats,
    GoodputGroup,
    MfuPercentiles,
    RunRank,
    SizeClassRead,
)
from service.domain import fleet
from service.usecases import fleet_stats as usecase

STATISTIC = "per-run median MFU (each run counts once, with the median of its measurements)"
GOODPUT_STATISTIC = (
    "per-job goodput (productive ÷ allocated wall-clock over every attempt, from the job's events, as of "
    "its latest ended attempt: job_ended or failure; each job once, in its latest run's group) and "
    "effective MFU = the job's MFU (mean of its attempts' median MFUs) × goodput"
)


def _percentiles(values: usecase.Percentiles) -> MfuPercentiles:
    return MfuPercentiles(
        p10=values[0.10], p25=values[0.25], p50=values[0.50], p75=values[0.75], p90=values[0.90]
    )


def _mfu_group(group: usecase.MfuGroup) -> FleetGroup:
    return FleetGroup(
        accelerator=group.accelerator,
        size_class=cast("SizeClassName", group.size_class),
        run_count=group.run_count,
        percentiles=_percentiles(group.percentiles),
    )


def _goodput_group(group: usecase.GoodputGroup) -> GoodputGroup:
    return GoodputGroup(
        accelerator=group.accelerator,
        size_class=cast("SizeClassName", group.size_class),
        job_count=group.job_count,
        goodput=_percentiles(group.goodput),
        effective_mfu_job_count=group.effective_mfu_job_count,
        effective_mfu=_percentiles(group.effective_mfu),
    )


def _rank(rank: usecase.RunRank) -> RunRank:
    run = rank.run
    return RunRank(
        run_id=run.id,
        accelerator=run.accelerator,
        size_class=cast("SizeClassName", run.size_class),
        median_mfu=rank.median_mfu,
        fleet_percentile_rank=rank.fleet_percentile_rank,
        fleet_run_count=rank.fleet_run_count,
        tenant_percentile_rank=rank.tenant_percentile_rank,
        tenant_run_count=rank.tenant_run_count,
        note=rank.note,
    )


def fleet_stats_read(stats: usecase.FleetStats) -> FleetMfuStats:
    upper_bounds = (*fleet.SIZE_CLASS_LOWER_BOUNDS[1:], None)
    return FleetMfuStats(
        statistic=STATISTIC,
        bin_width=fleet.MFU_BIN_WIDTH,
        minimum_runs_per_group=fleet.MIN_FLEET_GROUP_RUNS,
        size_classes=[
            SizeClassRead(
                name=cast("SizeClassName", name), min_parameters=int(lower), max_parameters_exclusive=upper
            )
            for name, lower, upper in zip(
                fleet.SIZE_CLASSES, fleet.SIZE_CLASS_LOWER_BOUNDS, upper_bounds, strict=True
            )
        ],
        fleet=[_mfu_group(group) for group in stats.fleet],
        tenant=[_mfu_group(group) for group in stats.tenant],
        run=None if stats.run is None else _rank(stats.run),
        goodput_statistic=GOODPUT_STATISTIC,
        goodput_fleet=[_goodput_group(group) for group in stats.goodput_fleet],
        goodput_tenant=[_goodput_group(group) for group in stats.goodput_tenant],
    )
