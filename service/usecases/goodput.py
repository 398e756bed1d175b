"""Goodput use cases (issue 21): record a run's events, and a job's goodput with its advice.

No HTTP and no SQL here: the store reads and writes, the domain computes, the caller presents.
A job is the tenant's runs that share the run's (cluster, scheduler_job_id); each run is one attempt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from service.domain import goodput as domain
from service.store import events as store
from service.store.uow import UnitOfWork
from service.usecases.errors import RunNotFound

#: Goodput levels whose worth in devices the answer shows: 0.90 is Llama 3's reported "higher than
#: 90% effective training time" (Dubey et al. 2024, §3.3.4); 0.95 a step beyond it.
GAIN_TARGETS = (0.90, 0.95)


#: Events that end an attempt: the job's stored goodput is recomputed when one arrives, or when an
#: attempt that has ended receives a late event.
ATTEMPT_ENDS = (domain.EventKind.JOB_ENDED, domain.EventKind.FAILURE)


@dataclass(frozen=True, slots=True)
class EventInput:
    event_id: str
    kind: domain.EventKind
    at: datetime
    attempt: int | None = None
    step: int | None = None
    duration_seconds: float | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class EventsRecorded:
    run_id: str
    received: int
    stored: int
    ignored_event_ids: list[str]


def record_events(
    uow: UnitOfWork, *, tenant: str, run_id: str, events: Sequence[EventInput]
) -> EventsRecorded:
    """Store the run's events once each (a repeated id changes nothing) and commit."""
    run = store.run_of_tenant(uow.connection, tenant=tenant, run_id=run_id)
    if run is None:
        raise RunNotFound(run_id)
    rows = [
        {
            "event_id": event.event_id,
            "kind": event.kind.value,
            "at": event.at,
            "attempt": event.attempt,
            "step": event.step,
            "duration_seconds": event.duration_seconds,
            "reason": event.reason,
        }
        for event in events
    ]
    inserted = store.insert_events(
        uow.connection, tenant=tenant, run_pk=run.pk, events=rows, received_at=datetime.now(UTC)
    )
    if inserted and (
        any(event.kind in ATTEMPT_ENDS for event in events)
        or store.run_has_event(uow.connection, run_pk=run.pk, kinds=[kind.value for kind in ATTEMPT_ENDS])
    ):
        # The job's goodput, kept on its runs for the fleet statistics, as of its latest ended attempt:
        # recomputing it reads every event of the job, so a job streaming events into a running
        # attempt does not pay it on each POST (benchmarks/bench_events.py).
        view = job_goodput(uow, tenant=tenant, run_id=run_id)
        store.set_job_goodput(
            uow.connection,
            run_pks=[item.pk for item in view.job_runs],
            goodput=view.result.goodput if view.result else None,
        )
    uow.commit()
    ignored = [event.event_id for event in events if event.event_id not in inserted]
    # an id repeated in the request is stored once: the later copies are ignored ones
    seen: set[str] = set()
    for event in events:
        if event.event_id in inserted:
            if event.event_id in seen:
                ignored.append(event.event_id)
            seen.add(event.event_id)
    return EventsRecorded(
        run_id=run_id, received=len(events), stored=len(inserted), ignored_event_ids=ignored
    )


@dataclass(frozen=True, slots=True)
class JobGoodput:
    run_id: str
    job_runs: list[store.JobRun]
    event_count: int
    result: domain.Goodput | None
    device_count: int
    mfu: float | None
    effective_mfu: float | None
    device_hours_by_phase: dict[domain.Phase, float]
    total_device_hours: float
    run_of_attempt: dict[int, str]
    advice: domain.CheckpointAdvice | None
    gains: list[tuple[float, float]]


def _attempt_of(run: store.JobRun) -> int:
    return run.attempt if run.attempt is not None else 0


def job_goodput(uow: UnitOfWork, *, tenant: str, run_id: str) -> JobGoodput:
    """The goodput of the run's job over all its attempts, with the checkpoint advice."""
    run = store.run_of_tenant(uow.connection, tenant=tenant, run_id=run_id)
    if run is None:
        raise RunNotFound(run_id)
    attempts = store.job_runs(uow.connection, tenant=tenant, run=run)
    stored = store.list_events(uow.connection, run_pks=[item.pk for item in attempts])
    run_of_attempt = {_attempt_of(item): item.id for item in attempts}
    devices_of_attempt = {_attempt_of(item): item.device_count for item in attempts}
    if not stored:
        return JobGoodput(
            run_id,
            attempts,
            0,
            None,
            run.device_count,
            run.median_mfu,
            None,
            {},
            0.0,
            run_of_attempt,
            None,
            [],
        )
    events = [
        domain.RunEvent(
            event_id=f"{event.run_id}/{event.event_id}",
            kind=domain.EventKind(event.kind),
            at=event.at,
            attempt=event.attempt if event.attempt is not None else (event.run_attempt or 0),
            step=event.step,
            duration_seconds=event.duration_seconds,
            reason=event.reason,
        )
        for event in stored
    ]
    measured: dict[int, list[datetime]] = {}
    for item in attempts:
        times = [at for at in (item.first_measured_at, item.latest_measured_at) if at is not None]
        measured.setdefault(_attempt_of(item), []).extend(times)
    result = domain.job_goodput(events, measured)
    widest = max(devices_of_attempt.values(), default=run.device_count)
    by_phase = dict.fromkeys(domain.Phase, 0.0)
    for segment in result.segments:
        devices = devices_of_attempt.get(segment.attempt, widest) if segment.attempt is not None else widest
        by_phase[segment.phase] += domain.device_hours(segment.seconds, devices)
    productive_by_attempt: dict[int, float] = {}
    for segment in result.segments:
        if segment.phase is domain.Phase.PRODUCTIVE and segment.attempt is not None:
            productive_by_attempt[segment.attempt] = (
                productive_by_attempt.get(segment.attempt, 0.0) + segment.seconds
            )
    mfu = _training_mfu(attempts, productive_by_attempt)
    fraction = result.goodput
    effective = domain.effective_mfu(mfu, fraction) if mfu is not None and fraction is not None else None
    gains = (
        [
            (target, domain.goodput_gain_in_devices(run.device_count, fraction, target))
            for target in GAIN_TARGETS
            if target > fraction
        ]
        if fraction
        else []
    )
    return JobGoodput(
        run_id=run_id,
        job_runs=attempts,
        event_count=len(stored),
        result=result,
        device_count=run.device_count,
        mfu=mfu,
        effective_mfu=effective,
        device_hours_by_phase=by_phase,
        total_device_hours=sum(by_phase.values()),
        run_of_attempt=run_of_attempt,
        advice=domain.checkpoint_advice(result),
        gains=gains,
    )


def _training_mfu(attempts: Sequence[store.JobRun], productive_seconds: dict[int, float]) -> float | None:
    """The attempts' median MFUs weighted by their productive time (equal weights without any)."""
    measured = [
        (item.median_mfu, productive_seconds.get(_attempt_of(item), 0.0))
        for item in attempts
        if item.median_mfu is not None
    ]
    if not measured:
        return None
    weight = sum(seconds for _, seconds in measured)
    if weight <= 0:
        return sum(mfu for mfu, _ in measured) / len(measured)
    return sum(mfu * seconds for mfu, seconds in measured) / weight
