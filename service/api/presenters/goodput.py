"""A job's goodput as answered: its badput by kind, and the summary a run's efficiency carries."""

from __future__ import annotations

from service.api.schemas.goodput import BadputItem, RunGoodputSummary
from service.domain.goodput import BADPUT_KINDS
from service.usecases.goodput import JobGoodput


def badput_items(view: JobGoodput) -> list[BadputItem]:
    """Every badput kind with its seconds, share of the allocated time and device-hours (none without
    events)."""
    result = view.result
    if result is None:
        return []
    total = result.total_seconds
    return [
        BadputItem(
            kind=kind,
            seconds=result.badput_seconds[kind],
            fraction=result.badput_seconds[kind] / total if total > 0 else 0.0,
            device_hours=view.device_hours_by_phase.get(kind, 0.0),
        )
        for kind in BADPUT_KINDS
    ]


def goodput_summary(view: JobGoodput) -> RunGoodputSummary | None:
    """The efficiency answer's goodput: None when the job has no events."""
    result = view.result
    if result is None:
        return None
    return RunGoodputSummary(
        job_run_ids=[item.id for item in view.job_runs],
        event_count=view.event_count,
        total_seconds=result.total_seconds,
        productive_seconds=result.productive_seconds,
        goodput=result.goodput,
        mfu=view.mfu,
        effective_mfu=view.effective_mfu,
        badput=badput_items(view),
        link=f"/v1/runs/{view.run_id}/goodput",
    )
