"""A run's efficiency: MFU over its measurements (median, p10/p90, trend, series), tokens done,
and its prediction beside the measured MFU.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection

from service.api.presenters.goodput import goodput_summary
from service.api.presenters.runs import budget_outlook
from service.api.schemas.runs import MfuDistribution, MfuTrend, RunEfficiency, SeriesPointRead
from service.api.services.prediction import PredictedVsMeasured
from service.api.services.prediction import predicted_vs_measured as run_prediction
from service.api.services.runs import require_run
from service.domain import economics, fleet
from service.store import histograms as histograms_store
from service.store import measurements as measurements_store
from service.store import records as records_store
from service.store import series as series_store
from service.store.keys import Principal
from service.store.uow import UnitOfWork
from service.usecases import goodput as goodput_usecase

#: Points of an efficiency series at most. Runs with at most fleet.EXACT_SERIES_MAX measurements are
#: read whole; larger ones from their stored step buckets (fleet.SeriesBin, at most
#: fleet.SERIES_BUCKETS_MAX), or, for a run whose buckets are not complete yet (it outgrew the exact
#: series before they were kept), grouped into SERIES_POINTS step ranges by the database.
SERIES_POINTS = 240
TOKENS_METHOD = (
    "latest_step × global_batch_tokens: a step is a completed optimizer step, so step N has consumed "
    "N global batches (restarts and gaps in reporting do not change it; a batch ramp over-counts)"
)
TREND_METHOD = (
    "least-squares slope of MFU against hours since the first measurement; quartile change = mean MFU "
    "of the last quarter of measurements (by time) minus that of the first quarter"
)


def _hours(later: datetime, earlier: datetime) -> float:
    return (later - earlier).total_seconds() / 3600.0


def _series(connection: Connection, run: records_store.RunRecord) -> list[fleet.SeriesPoint]:
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


def predicted_vs_measured(connection: Connection, run: records_store.RunRecord) -> PredictedVsMeasured:
    """The run's predicted step time and MFU beside the measured ones, with where it loses
    (:mod:`service.api.services.prediction`); a note instead when the run records too little."""
    return run_prediction(connection, run)


@dataclass(frozen=True, slots=True)
class EfficiencyView:
    answer: RunEfficiency
    points: list[fleet.SeriesPoint]
    model_name: str
    cluster: str


def run_efficiency(uow: UnitOfWork, *, principal: Principal, run_id: str) -> EfficiencyView:
    connection = uow.connection
    run = require_run(connection, tenant=principal.tenant, run_id=run_id)
    histogram = histograms_store.run_histogram(connection, run_pk=run.pk)
    latest_hfu = None
    if run.latest_step is not None:
        latest = measurements_store.list_measurements(
            connection, run_pk=run.pk, limit=1, min_step=run.latest_step
        )
        latest_hfu = latest[0].hfu if latest else None
    points = _series(connection, run)
    trend = fleet.mfu_trend(points)
    series = fleet.downsample(points, SERIES_POINTS)
    tokens = economics.tokens_so_far(latest_step=run.latest_step, global_batch_tokens=run.global_batch_tokens)
    outlook = budget_outlook(run, tokens)
    origin = run.first_measured_at
    answer = RunEfficiency(
        run_id=run.id,
        status=run.status,
        convention=run.convention,
        precision=run.precision,
        peak_tflops_per_device=run.peak_tflops_per_device,
        measurement_count=run.measurement_count,
        mfu=MfuDistribution(
            median=run.median_mfu,
            p10=fleet.percentile_from_histogram(histogram, 0.10),
            p90=fleet.percentile_from_histogram(histogram, 0.90),
            latest=run.latest_mfu,
            latest_hfu=latest_hfu,
            bin_width=fleet.MFU_BIN_WIDTH,
        ),
        trend=None
        if trend is None
        else MfuTrend(
            slope_mfu_per_hour=trend.slope_mfu_per_hour,
            first_quartile_mean_mfu=trend.first_quartile_mean_mfu,
            last_quartile_mean_mfu=trend.last_quartile_mean_mfu,
            quartile_change=trend.quartile_change,
            quartile_change_relative=trend.quartile_change_relative,
            hours_covered=trend.hours_covered,
            measurements=trend.measurements,
            method=TREND_METHOD
            + (
                ""
                if run.measurement_count <= fleet.EXACT_SERIES_MAX
                else " (over step ranges of equal width: each range's mean MFU at its time midpoint, "
                "weighted by its measurements)"
            ),
        ),
        series=[
            SeriesPointRead(
                time=origin + timedelta(hours=point.hours),
                hours_since_first=point.hours,
                step=point.step,
                mfu=point.mfu,
                mfu_min=point.mfu if point.mfu_min is None else point.mfu_min,
                mfu_max=point.mfu if point.mfu_max is None else point.mfu_max,
                tokens_per_second=point.tokens_per_second,
                measurements=point.count,
            )
            for point in series
            if origin is not None
        ],
        tokens_so_far=tokens,
        tokens_method=TOKENS_METHOD,
        current_tokens_per_second=run.latest_tokens_per_second,
        token_budget_tokens=run.token_budget_tokens,
        budget_fraction_done=economics.budget_fraction_done(
            tokens_done=tokens, token_budget=run.token_budget_tokens
        ),
        seconds_to_budget=outlook.seconds_to_budget,
        estimated_budget_reached_at=outlook.reached_at,
        budget_reached_after_year_9999=outlook.reached_after_year_9999,
        prediction=(predicted := predicted_vs_measured(connection, run)).prediction,
        prediction_note=predicted.note,
        goodput=goodput_summary(goodput_usecase.job_goodput(uow, tenant=principal.tenant, run_id=run.id)),
    )
    return EfficiencyView(
        answer=answer,
        points=series,
        model_name=run.model_name,
        cluster=f"{run.device_count} × {run.accelerator_name}",
    )
