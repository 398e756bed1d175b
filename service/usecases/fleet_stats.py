"""Fleet statistics (use case): MFU percentiles by accelerator and model-size class, per-job goodput
and effective MFU, and where one run ranks, across every tenant (aggregates only) and within the
caller's. No HTTP and no SQL: the store keeps the histograms, the domain interpolates
(:mod:`service.domain.fleet`), the API presents."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from service.domain import fleet
from service.store import events as events_store
from service.store import histograms as histograms_store
from service.store import records as records_store
from service.store.uow import UnitOfWork
from service.usecases.runs import require_run

Percentiles = dict[float, float | None]  # by quantile (fleet.FLEET_PERCENTILES)


@dataclass(frozen=True, slots=True)
class MfuGroup:
    accelerator: str
    size_class: str
    run_count: int
    percentiles: Percentiles  # of per-run median MFUs


@dataclass(frozen=True, slots=True)
class GoodputGroup:
    accelerator: str
    size_class: str
    job_count: int
    goodput: Percentiles
    effective_mfu_job_count: int
    effective_mfu: Percentiles


@dataclass(frozen=True, slots=True)
class RunRank:
    run: records_store.RunRecord
    median_mfu: float | None  # None: nothing to rank yet
    fleet_percentile_rank: float | None  # None: the run's fleet group is not shown
    fleet_run_count: int | None
    tenant_percentile_rank: float | None
    tenant_run_count: int | None
    note: str


@dataclass(frozen=True, slots=True)
class FleetStats:
    fleet: list[MfuGroup]  # groups of at least fleet.MIN_FLEET_GROUP_RUNS runs
    tenant: list[MfuGroup]  # every group of the tenant
    goodput_fleet: list[GoodputGroup]  # groups of at least fleet.MIN_FLEET_GROUP_RUNS jobs
    goodput_tenant: list[GoodputGroup]
    run: RunRank | None  # where the run asked about ranks


def goodput_samples(
    rows: Iterable[events_store.GoodputRow], *, fleet_only: bool
) -> list[fleet.GoodputSample]:
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


def _mfu_groups(
    histograms: dict[histograms_store.GroupKey, dict[int, int]], *, minimum: int
) -> list[MfuGroup]:
    return [
        MfuGroup(
            accelerator, size_class, sum(histogram.values()), fleet.percentiles_from_histogram(histogram)
        )
        for (accelerator, size_class), histogram in sorted(histograms.items())
        if sum(histogram.values()) >= minimum
    ]


def _goodput_groups(
    rows: Iterable[events_store.GoodputRow], *, fleet_only: bool, minimum: int
) -> list[GoodputGroup]:
    histograms = fleet.goodput_histograms(goodput_samples(rows, fleet_only=fleet_only))
    return [
        GoodputGroup(
            accelerator=accelerator,
            size_class=size_class,
            job_count=group.job_count,
            goodput=fleet.percentiles_from_histogram(group.goodput),
            effective_mfu_job_count=sum(group.effective_mfu.values()),
            effective_mfu=fleet.percentiles_from_histogram(group.effective_mfu),
        )
        for (accelerator, size_class), group in sorted(histograms.items())
        if group.job_count >= minimum
    ]


def fleet_stats(
    uow: UnitOfWork, *, tenant: str, accelerator: str | None, size_class: str | None, run_id: str | None
) -> FleetStats:
    """The statistics, narrowed to one accelerator and/or size class; ``run_id`` (the tenant's, else
    RunNotFound) adds where that run ranks."""
    connection = uow.connection
    rank = None if run_id is None else _rank(uow, require_run(connection, tenant=tenant, run_id=run_id))
    narrowed = {"accelerator": accelerator, "size_class": size_class}
    return FleetStats(
        fleet=_mfu_groups(
            histograms_store.fleet_histograms(connection, **narrowed), minimum=fleet.MIN_FLEET_GROUP_RUNS
        ),
        tenant=_mfu_groups(
            histograms_store.tenant_histograms(connection, tenant=tenant, **narrowed), minimum=1
        ),
        goodput_fleet=_goodput_groups(
            events_store.goodput_rows(connection, **narrowed),
            fleet_only=True,
            minimum=fleet.MIN_FLEET_GROUP_RUNS,
        ),
        goodput_tenant=_goodput_groups(
            events_store.goodput_rows(connection, tenant=tenant, **narrowed), fleet_only=False, minimum=1
        ),
        run=rank,
    )


def _rank(uow: UnitOfWork, run: records_store.RunRecord) -> RunRank:
    if run.fleet_bin is None or run.median_mfu is None:
        return RunRank(run, None, None, None, None, None, "the run has no measurements yet")
    key = (run.accelerator, run.size_class)
    group = {"accelerator": run.accelerator, "size_class": run.size_class}
    tenant_histogram = histograms_store.tenant_histograms(uow.connection, tenant=run.tenant, **group).get(
        key, {}
    )
    fleet_histogram = (
        histograms_store.fleet_histograms(uow.connection, **group).get(key, {}) if run.in_fleet else {}
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
        run=run,
        median_mfu=run.median_mfu,
        fleet_percentile_rank=fleet.percentile_rank(fleet_histogram, run.fleet_bin) if shown else None,
        fleet_run_count=fleet_count if shown else None,
        tenant_percentile_rank=fleet.percentile_rank(tenant_histogram, run.fleet_bin),
        tenant_run_count=sum(tenant_histogram.values()),
        note=note,
    )
