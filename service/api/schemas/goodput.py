"""Schemas of run events and the goodput answer (issue 21)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, Strict

from service.api.schemas.common import ApiModel
from service.api.schemas.fields import Text, UtcDatetime
from service.domain.goodput import EventKind, Phase

EVENT_EXAMPLE: dict[str, Any] = {
    "event_id": "job-42-a0-save-1000-begin",
    "kind": "checkpoint_save_begin",
    "time": "2026-12-02T10:20:00Z",
    "step": 1000,
}
EVENTS_EXAMPLE: list[dict[str, Any]] = [
    {"event_id": "job-42-a0-start", "kind": "job_started", "time": "2026-12-02T10:00:00Z"},
    {"event_id": "job-42-a0-first", "kind": "first_step", "time": "2026-12-02T10:04:10Z", "step": 0},
    EVENT_EXAMPLE,
    {
        "event_id": "job-42-a0-save-1000-end",
        "kind": "checkpoint_save_end",
        "time": "2026-12-02T10:21:30Z",
        "step": 1000,
    },
    {
        "event_id": "job-42-a0-stall-1",
        "kind": "data_stall",
        "time": "2026-12-02T10:30:00Z",
        "duration_seconds": 45.0,
    },
    {
        "event_id": "job-42-a0-fail",
        "kind": "failure",
        "time": "2026-12-02T11:02:00Z",
        "reason": "NCCL timeout",
    },
]


class EventIn(ApiModel):
    """One event of a run. Point events (``data_stall``, ``hang_detected``) carry the stall's length,
    ending at ``time``; every other kind marks an instant (a begin, an end, a failure)."""

    event_id: Annotated[Text, Field(min_length=1, max_length=100)] = Field(
        description="unique within the run; a repeated id is ignored, so a retried POST is safe"
    )
    kind: Annotated[EventKind, Strict(False)]  # JSON text → the enum (request models are strict)
    time: UtcDatetime = Field(description="when it happened (with a time zone)")
    step: Annotated[int, Field(ge=0, le=10**15)] | None = None
    attempt: Annotated[int, Field(ge=0, le=1_000_000)] | None = Field(
        default=None, description="the job's attempt; default: the run's own attempt (0 without one)"
    )
    duration_seconds: Annotated[float, Field(ge=0, le=10**8)] | None = Field(
        default=None, description="for data_stall and hang_detected: how long the stall lasted"
    )
    reason: Annotated[Text, Field(max_length=500)] | None = Field(default=None, description="for failure")


class EventsAdded(ApiModel):
    run_id: str
    received: int
    stored: int
    ignored_event_ids: list[str] = Field(
        description="ids the run already had (or repeated in this request): not changed"
    )


class PhaseSpan(ApiModel):
    attempt: int | None = Field(description="null for idle time between attempts")
    start_seconds: float = Field(description="from the job's start, attempts laid end to end")
    end_seconds: float
    phase: Phase


class BadputItem(ApiModel):
    kind: Phase
    seconds: float
    fraction: float = Field(description="of the job's allocated time")
    device_hours: float


class AttemptRead(ApiModel):
    attempt: int
    run_id: str | None
    seconds: float
    failed: bool
    failure_reason: str | None


class CheckpointAdviceRead(ApiModel):
    interval_seconds: float | None = Field(description="Daly (2006) optimum training time between saves")
    young_interval_seconds: float | None = Field(description="Young (1974) first-order optimum")
    current_interval_seconds: float | None = Field(description="the job's mean time between save ends")
    mtbf_seconds: float | None = Field(description="attempt time per observed failure")
    save_seconds: float | None = Field(description="mean checkpoint save length")
    note: str


class GoodputGain(ApiModel):
    target_goodput: float
    devices_worth: float = Field(
        description="extra devices the job would need at its current goodput to train as fast"
    )


class GoodputRead(ApiModel):
    run_id: str
    job_run_ids: list[str] = Field(description="the job's attempts: runs that share its scheduler job id")
    event_count: int
    total_seconds: float = Field(description="allocated wall-clock over every attempt, idle included")
    productive_seconds: float
    goodput: float | None = Field(description="productive ÷ total; null without events")
    mfu: float | None = Field(description="the job's median MFU while training (time-weighted by attempt)")
    effective_mfu: float | None = Field(description="MFU × goodput: the share of the paid peak that trained")
    device_count: int
    total_device_hours: float
    badput: list[BadputItem]
    attempts: list[AttemptRead]
    timeline: list[PhaseSpan]
    checkpoint: CheckpointAdviceRead
    gains: list[GoodputGain] = Field(description="what raising goodput to these values is worth in devices")
    warnings: list[str] = Field(description="what the timeline had to assume (missing ends, clock skew)")


class RunGoodputSummary(ApiModel):
    """The goodput part of a run's efficiency answer: the same figures as ``GET /v1/runs/{id}/goodput``
    over the run's job, without its timeline and advice."""

    job_run_ids: list[str] = Field(description="the job's attempts: runs that share its scheduler job id")
    event_count: int
    total_seconds: float = Field(description="allocated wall-clock over every attempt, idle included")
    productive_seconds: float
    goodput: float | None = Field(description="productive ÷ total (null when the timeline has no length)")
    mfu: float | None = Field(description="the job's median MFU while training (time-weighted by attempt)")
    effective_mfu: float | None = Field(description="MFU × goodput: the share of the paid peak that trained")
    badput: list[BadputItem]
    link: str = Field(description="the full answer: timeline, attempts, checkpoint advice")
