"""Fleet MFU statistics by accelerator and model-size class, and where a run ranks."""

from __future__ import annotations

from typing import cast

from sqlalchemy import Connection

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
from service.store import events as events_store
from service.store import histograms as histograms_store
from service.store import records as records_store
from service.store.keys import Principal
from service.usecases.runs import require_run


def _percentiles(histogram: dict[int, int]) -> MfuPercentiles:
    values = fleet.percentiles_from_histogram(histogram)
    return MfuPercentiles(
        p10=values[0.10], p25=values[0.25], p50=values[0.50], p75=values[0.75], p90=values[0.90]
    )


def _groups(histograms: dict[histograms_store.GroupKey, dict[int, int]], *, minimum: int) -> list[FleetGroup]:
    groups = []
    for (accelerator, size_class), histogram in sorted(histograms.items()):
        runs_counted = sum(histogram.values())
        if runs_counted < minimum:
            continue
        groups.append(
            FleetGroup(
                accelerator=accelerator,
                size_class=cast("SizeClassName", size_class),
                run_count=runs_counted,
                percentiles=_percentiles(histogram),
            )
        )
    return groups


GOODPUT_STATISTIC = (
    "per-job goodput (productive ÷ allocated wall-clock over every attempt, from the job's events, as of "
    "its latest ended attempt: job_ended or failure; each job once, in its latest run's group) and "
    "effective MFU = the job's MFU (mean of its attempts' median MFUs) × goodput"
)


def goodput_samples(rows: list[events_store.GoodputRow], *, fleet_only: bool) -> list[fleet.GoodputSample]:
    """Stored rows as the domain counts them; across tenants, caller-described parts stay out."""
    return [
        fleet.GoodputSample(
            job=(row.tenant, row.cluster, row.scheduler_job_id)
            if row.scheduler_job_id is not None
            else (row.tenant, row.pk),
            pk=row.pk,
            group=(row.accelerator, row.size_class),
            goodput=row.goodput,
            median_mfu=row.median_mfu,
        )
        for row in rows
        if not (fleet_only and row.accelerator == records_store.CUSTOM_ACCELERATOR)
    ]


def _goodput_groups(
    histograms: dict[tuple[str, str], fleet.GoodputHistograms], *, minimum: int
) -> list[GoodputGroup]:
    return [
        GoodputGroup(
            accelerator=accelerator,
            size_class=cast("SizeClassName", size_class),
            job_count=group.job_count,
            goodput=_percentiles(group.goodput),
            effective_mfu_job_count=sum(group.effective_mfu.values()),
            effective_mfu=_percentiles(group.effective_mfu),
        )
        for (accelerator, size_class), group in sorted(histograms.items())
        if group.job_count >= minimum
    ]


def fleet_mfu_stats(
    connection: Connection,
    *,
    principal: Principal,
    accelerator: str | None,
    size_class: str | None,
    run_id: str | None,
) -> FleetMfuStats:
    tenant = principal.tenant
    rank = None
    if run_id is not None:
        run = require_run(connection, tenant=tenant, run_id=run_id)
        rank = _rank(connection, run)
    fleet_groups = histograms_store.fleet_histograms(
        connection, accelerator=accelerator, size_class=size_class
    )
    tenant_groups = histograms_store.tenant_histograms(
        connection, tenant=tenant, accelerator=accelerator, size_class=size_class
    )
    bounds = (*fleet.SIZE_CLASS_LOWER_BOUNDS[1:], None)
    return FleetMfuStats(
        statistic="per-run median MFU (each run counts once, with the median of its measurements)",
        bin_width=fleet.MFU_BIN_WIDTH,
        minimum_runs_per_group=fleet.MIN_FLEET_GROUP_RUNS,
        size_classes=[
            SizeClassRead(
                name=cast("SizeClassName", name), min_parameters=int(lower), max_parameters_exclusive=upper
            )
            for name, lower, upper in zip(
                fleet.SIZE_CLASSES, fleet.SIZE_CLASS_LOWER_BOUNDS, bounds, strict=True
            )
        ],
        fleet=_groups(fleet_groups, minimum=fleet.MIN_FLEET_GROUP_RUNS),
        tenant=_groups(tenant_groups, minimum=1),
        run=rank,
        goodput_statistic=GOODPUT_STATISTIC,
        goodput_fleet=_goodput_groups(
            fleet.goodput_histograms(
                goodput_samples(
                    events_store.goodput_rows(connection, accelerator=accelerator, size_class=size_class),
                    fleet_only=True,
                )
            ),
            minimum=fleet.MIN_FLEET_GROUP_RUNS,
        ),
        goodput_tenant=_goodput_groups(
            fleet.goodput_histograms(
                goodput_samples(
                    events_store.goodput_rows(
                        connection, tenant=tenant, accelerator=accelerator, size_class=size_class
                    ),
                    fleet_only=False,
                )
            ),
            minimum=1,
        ),
    )


def _rank(connection: Connection, run: records_store.RunRecord) -> RunRank:
    if run.fleet_bin is None or run.median_mfu is None:
        return RunRank(
            run_id=run.id,
            accelerator=run.accelerator,
            size_class=cast("SizeClassName", run.size_class),
            median_mfu=None,
            fleet_percentile_rank=None,
            fleet_run_count=None,
            tenant_percentile_rank=None,
            tenant_run_count=None,
            note="the run has no measurements yet",
        )
    key = (run.accelerator, run.size_class)
    tenant_histogram = histograms_store.tenant_histograms(
        connection, tenant=run.tenant, accelerator=run.accelerator, size_class=run.size_class
    ).get(key, {})
    fleet_histogram = (
        histograms_store.fleet_histograms(
            connection, accelerator=run.accelerator, size_class=run.size_class
        ).get(key, {})
        if run.in_fleet
        else {}
    )
    fleet_count = sum(fleet_histogram.values())
    shown = fleet_count >= fleet.MIN_FLEET_GROUP_RUNS
    if not run.in_fleet:
        note = "custom accelerators are ranked within the tenant only (their peaks are the caller's)"
    elif not shown:
        note = f"its fleet group has fewer than {fleet.MIN_FLEET_GROUP_RUNS} runs: no fleet rank is shown"
    else:
        note = "percentile ranks are mid-ranks among per-run medians (0 lowest, 1 highest)"
    return RunRank(
        run_id=run.id,
        accelerator=run.accelerator,
        size_class=cast("SizeClassName", run.size_class),
        median_mfu=run.median_mfu,
        fleet_percentile_rank=fleet.percentile_rank(fleet_histogram, run.fleet_bin) if shown else None,
        fleet_run_count=fleet_count if shown else None,
        tenant_percentile_rank=fleet.percentile_rank(tenant_histogram, run.fleet_bin),
        tenant_run_count=sum(tenant_histogram.values()),
        note=note,
    )
