"""A run's efficiency as answered: the use case's MFU distribution, trend, series, tokens, budget date
and goodput (:mod:`service.usecases.efficiency`), with the run's prediction beside the measured MFU
(:mod:`service.api.presenters.run_prediction`)."""

from __future__ import annotations

from datetime import timedelta
from typing import cast

from service.api.presenters.goodput import goodput_summary
from service.api.presenters.run_prediction import PredictedVsMeasured
from service.api.schemas.common import ConventionName, PrecisionName
from service.api.schemas.runs import MfuDistribution, MfuTrend, RunEfficiency, RunStatus, SeriesPointRead
from service.domain import fleet
from service.usecases.efficiency import RunEfficiencyFacts

TOKENS_METHOD = (
    "latest_step × global_batch_tokens: a step is a completed optimizer step, so step N has consumed "
    "N global batches (restarts and gaps in reporting do not change it; a batch ramp over-counts)"
)
TREND_METHOD = (
    "least-squares slope of MFU against hours since the first measurement; quartile change = mean MFU "
    "of the last quarter of measurements (by time) minus that of the first quarter"
)


def run_efficiency_read(facts: RunEfficiencyFacts, predicted: PredictedVsMeasured) -> RunEfficiency:
    run, trend, series = facts.run, facts.trend, facts.series
    origin = run.first_measured_at
    return RunEfficiency(
        run_id=run.id,
        status=cast("RunStatus", run.status),
        convention=cast("ConventionName", run.convention),
        precision=cast("PrecisionName", run.precision),
        peak_tflops_per_device=run.peak_tflops_per_device,
        measurement_count=run.measurement_count,
        mfu=MfuDistribution(
            median=run.median_mfu,
            p10=facts.mfu_p10,
            p90=facts.mfu_p90,
            latest=run.latest_mfu,
            latest_hfu=facts.latest_hfu,
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
                if facts.exact_series
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
        tokens_so_far=facts.tokens_so_far,
        tokens_method=TOKENS_METHOD,
        current_tokens_per_second=run.latest_tokens_per_second,
        token_budget_tokens=run.token_budget_tokens,
        budget_fraction_done=facts.budget_fraction_done,
        seconds_to_budget=facts.budget.seconds_to_budget,
        estimated_budget_reached_at=facts.budget.reached_at,
        budget_reached_after_year_9999=facts.budget.reached_after_year_9999,
        prediction=predicted.prediction,
        prediction_note=predicted.note,
        goodput=goodput_summary(facts.goodput),
    )
