"""A run's efficiency (use case): its MFU distribution, trend and series, tokens so far, when it
reaches its token budget, and its job's goodput. No HTTP and no SQL: the store reads, the domain
computes (:mod:`service.domain.fleet`, :mod:`service.domain.economics`, :mod:`service.domain.goodput`),
the API presents (and adds the performance model's prediction beside it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from service.domain import economics, fleet
from service.store import histograms as histograms_store
from service.store import measurements as measurements_store
from service.store import records as records_store
from service.store import runs as runs_store
from service.store import series as series_store
from service.store.uow import UnitOfWork
from service.usecases import goodput as goodput_usecase
from service.usecases.errors import RunNotFound

#: Points of an efficiency series at most. Runs with at most fleet.EXACT_SERIES_MAX measurements are
#: read whole; larger ones from their stored step buckets (fleet.SeriesBin, at most
#: fleet.SERIES_BUCKETS_MAX), or, for a run whose buckets are not complete yet (it outgrew the exact
#: series before they were kept), grouped into SERIES_POINTS step ranges by the database.
SERIES_POINTS = 240

__all__ = ["SERIES_POINTS", "RunEfficiencyFacts", "RunNotFound", "budget_of", "run_efficiency"]


def _hours(later: datetime, earlier: datetime) -> float:
    return (later - earlier).total_seconds() / 3600.0


def _series(uow: UnitOfWork, run: records_store.RunRecord) -> list[fleet.SeriesPoint]:
    connection = uow.connection
    if run.measurement_count == 0 or run.first_measured_at is None:
        return []
    origin = run.first_measured_at
    if run.measurement_count <= fleet.EXACT_SERIES_MAX:
        return [
            fleet.SeriesPoint(
                hours=_hours(row.measured_at, origin),
                mfu=row.mfu,
                step=row.step,
                tokens_per_second=row.tokens_per_second,
            )
            for row in measurements_store.measurement_points(connection, run_pk=run.pk)
        ]
    _, bins = series_store.run_series(connection, run_pk=run.pk)
    if sum(item.count for item in bins) == run.measurement_count:
        return fleet.series_points(bins, origin=origin)
    first_step, last_step = measurements_store.step_range(connection, run_pk=run.pk)
    return [
        fleet.SeriesPoint(
            hours=(_hours(row.first_time, origin) + _hours(row.last_time, origin)) / 2,
            mfu=float(row.mfu),
            count=int(row.n),
            mfu_min=float(row.mfu_min),
            mfu_max=float(row.mfu_max),
            step=int(row.step),
            tokens_per_second=float(row.tokens_per_second),
        )
        for row in measurements_store.measurement_buckets(
            connection, run_pk=run.pk, first_step=first_step, last_step=last_step, buckets=SERIES_POINTS
        )
    ]


def budget_of(run: records_store.RunRecord, tokens_done: int) -> economics.BudgetOutlook:
    """When the run reaches its token budget at its latest measured tokens/s."""
    return economics.budget_outlook(
        token_budget=run.token_budget_tokens,
        tokens_done=tokens_done,
        tokens_per_second=run.latest_tokens_per_second,
        measured_at=run.latest_measured_at,
    )


@dataclass(frozen=True, slots=True)
class RunEfficiencyFacts:
    run: records_store.RunRecord
    mfu_p10: float | None
    mfu_p90: float | None
    latest_hfu: float | None
    trend: fleet.Trend | None
    series: list[fleet.SeriesPoint]  # at most SERIES_POINTS
    exact_series: bool  # every measurement read (else step buckets)
    tokens_so_far: int
    budget_fraction_done: float | None
    budget: economics.BudgetOutlook
    goodput: goodput_usecase.JobGoodput


def run_efficiency(uow: UnitOfWork, *, tenant: str, run_id: str) -> RunEfficiencyFacts:
    """The tenant's run's efficiency (RunNotFound for an unknown id or another tenant's run)."""
    connection = uow.connection
    run = runs_store.get_run(connection, tenant=tenant, run_id=run_id)
    if run is None:
        raise RunNotFound(run_id)
    histogram = histograms_store.run_histogram(connection, run_pk=run.pk)
    latest_hfu = None
    if run.latest_step is not None:
        latest = measurements_store.list_measurements(
            connection, run_pk=run.pk, limit=1, min_step=run.latest_step
        )
        latest_hfu = latest[0].hfu if latest else None
    points = _series(uow, run)
    tokens = economics.tokens_so_far(latest_step=run.latest_step, global_batch_tokens=run.global_batch_tokens)
    return RunEfficiencyFacts(
        run=run,
        mfu_p10=fleet.percentile_from_histogram(histogram, 0.10),
        mfu_p90=fleet.percentile_from_histogram(histogram, 0.90),
        latest_hfu=latest_hfu,
        trend=fleet.mfu_trend(points),
        series=fleet.downsample(points, SERIES_POINTS),
        exact_series=run.measurement_count <= fleet.EXACT_SERIES_MAX,
        tokens_so_far=tokens,
        budget_fraction_done=economics.budget_fraction_done(
            tokens_done=tokens, token_budget=run.token_budget_tokens
        ),
        budget=budget_of(run, tokens),
        goodput=goodput_usecase.job_goodput(uow, tenant=tenant, run_id=run.id),
    )
