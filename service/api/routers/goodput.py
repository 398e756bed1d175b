"""Run events and a job's goodput (API key; issue 21)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, Request
from pydantic import Discriminator, Tag
from starlette.responses import Response

from service import goodput_plot
from service.api.deps import Reader, WritePrincipal, WriteUow
from service.api.handlers import SHAPE_TAG_PREFIX
from service.api.json_body import StrictJsonRoute
from service.api.negotiation import JSON, NEGOTIATED, PNG, SVG, media_response, negotiate, representations
from service.api.presenters.goodput import badput_items
from service.api.schemas.fields import RUN_ID_PATTERN
from service.api.schemas.goodput import (
    EVENT_EXAMPLE,
    EVENTS_EXAMPLE,
    AttemptRead,
    CheckpointAdviceRead,
    EventIn,
    EventsAdded,
    GoodputGain,
    GoodputRead,
    PhaseSpan,
)
from service.domain.goodput import Phase
from service.usecases import goodput as usecase

router = APIRouter(tags=["runs"], route_class=StrictJsonRoute)

RunId = Annotated[
    str, Path(min_length=1, max_length=32, pattern=RUN_ID_PATTERN, description="the run's id (`run_…`)")
]

#: Events per request: a job sends a handful per checkpoint, so this bounds a request, not a job.
MAX_EVENTS_PER_REQUEST = 10_000


def _event_body_shape(body: object) -> str:
    return SHAPE_TAG_PREFIX + ("batch" if isinstance(body, list) else "one")


@router.post(
    "/runs/{run_id}/events",
    response_model=EventsAdded,
    summary="Add one run event or a batch (goodput)",
    description="Job start and end, start-up done, first step, checkpoint save and restore begin/end, "
    "evaluation begin/end, data stalls and hangs (with `duration_seconds`), failures (with `reason`) "
    f"and restarts, up to {MAX_EVENTS_PER_REQUEST:,} in one request. **Idempotent by `event_id`**: an "
    "id the run already has, or one repeated within the request, is ignored and listed in "
    "`ignored_event_ids` (the first write wins). Runs that share the scheduler job id are the attempts "
    "of one job: post each attempt's events to its own run.",
    openapi_extra={"x-problems": ["404"]},
)
def add_events(
    run_id: RunId,
    principal: WritePrincipal,
    uow: WriteUow,
    request_body: Annotated[
        # Chosen by the body's shape, so a list is validated only as a list: a bad item's error names
        # its index, not also "EventIn: should be an object" from the branch the caller did not mean.
        Annotated[
            Annotated[EventIn, Tag(SHAPE_TAG_PREFIX + "one")]
            | Annotated[
                list[EventIn],
                Body(min_length=1, max_length=MAX_EVENTS_PER_REQUEST),
                Tag(SHAPE_TAG_PREFIX + "batch"),
            ],
            Discriminator(_event_body_shape),
        ],
        Body(
            openapi_examples={
                "one": {"summary": "one event", "value": EVENT_EXAMPLE},
                "batch": {"summary": "a batch", "value": EVENTS_EXAMPLE},
            }
        ),
    ],
) -> EventsAdded:
    items = request_body if isinstance(request_body, list) else [request_body]
    events = [
        usecase.EventInput(
            event_id=item.event_id,
            kind=item.kind,
            at=item.time,
            attempt=item.attempt,
            step=item.step,
            duration_seconds=item.duration_seconds,
            reason=item.reason,
        )
        for item in items
    ]
    recorded = usecase.record_events(uow, tenant=principal.tenant, run_id=run_id, events=events)
    return EventsAdded(
        run_id=recorded.run_id,
        received=recorded.received,
        stored=recorded.stored,
        ignored_event_ids=recorded.ignored_event_ids,
    )


def _present(view: usecase.JobGoodput) -> GoodputRead:
    result = view.result
    total = result.total_seconds if result else 0.0
    badput = badput_items(view)
    advice = view.advice
    return GoodputRead(
        run_id=view.run_id,
        job_run_ids=[item.id for item in view.job_runs],
        event_count=view.event_count,
        total_seconds=total,
        productive_seconds=result.productive_seconds if result else 0.0,
        goodput=result.goodput if result else None,
        mfu=view.mfu,
        effective_mfu=view.effective_mfu,
        device_count=view.device_count,
        total_device_hours=view.total_device_hours,
        badput=badput,
        attempts=[
            AttemptRead(
                attempt=attempt.attempt,
                run_id=view.run_of_attempt.get(attempt.attempt),
                seconds=attempt.seconds,
                failed=attempt.failed,
                failure_reason=attempt.failure_reason,
            )
            for attempt in (result.attempts if result else ())
        ],
        timeline=[
            PhaseSpan(
                attempt=segment.attempt,
                start_seconds=segment.start_seconds,
                end_seconds=segment.end_seconds,
                phase=segment.phase,
            )
            for segment in (result.segments if result else ())
        ],
        checkpoint=CheckpointAdviceRead(
            interval_seconds=advice.interval_seconds,
            young_interval_seconds=advice.young_interval_seconds,
            current_interval_seconds=advice.current_interval_seconds,
            mtbf_seconds=advice.mtbf_seconds,
            save_seconds=advice.save_seconds,
            note=advice.note,
        )
        if advice
        else CheckpointAdviceRead(
            interval_seconds=None,
            young_interval_seconds=None,
            current_interval_seconds=None,
            mtbf_seconds=None,
            save_seconds=None,
            note="No events for this job: post them to /v1/runs/{run_id}/events.",
        ),
        gains=[GoodputGain(target_goodput=target, devices_worth=devices) for target, devices in view.gains],
        warnings=list(result.warnings) if result else [],
    )


@router.get(
    "/runs/{run_id}/goodput",
    response_model=GoodputRead,
    summary="A job's goodput: where the wall-clock went, effective MFU, checkpoint advice",
    description="Over every attempt of the run's job (runs that share its scheduler job id): productive "
    "training time over allocated time, badput by kind (initialisation, checkpoint save and restore, "
    "evaluation, data stalls, hangs, progress lost since the last save at a failure, idle between "
    "attempts) with the device-hours each cost, effective MFU = MFU × goodput, the Young/Daly checkpoint "
    "interval for the observed failure rate and save cost, and what a higher goodput is worth in "
    "devices. `warnings` says what a messy timeline made it assume. `Accept: image/svg+xml` or "
    "`image/png` answers a timeline of the job by phase with the breakdown.",
    responses=representations(SVG, PNG),
    openapi_extra={**NEGOTIATED, "x-problems": ["404", "406"]},
)
def get_goodput(run_id: RunId, request: Request, reader: Reader) -> GoodputRead | Response:
    media_type = negotiate(request, (JSON, SVG, PNG))
    with reader.unit_of_work() as uow:
        view = usecase.job_goodput(uow, tenant=reader.principal.tenant, run_id=run_id)
    answer = _present(view)
    if media_type == JSON:
        return answer
    seconds = {
        Phase.PRODUCTIVE: answer.productive_seconds,
        **{item.kind: item.seconds for item in answer.badput},
    }
    goodput = f"{answer.goodput:.1%}" if answer.goodput is not None else "no events"
    title = f"Goodput of {run_id}: {goodput}"
    segments = view.result.segments if view.result else ()
    image_format = "svg" if media_type == SVG else "png"
    chart = goodput_plot.goodput_chart(title, segments, seconds, image_format)
    return media_response(chart, media_type, filename=f"{run_id}-goodput.{image_format}")
