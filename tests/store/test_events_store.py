"""The run-event store on SQLite and PostgreSQL: each (run, event id) once, a job's events across
attempts, another tenant's runs never part of a job."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import Engine, func, select

from service.store import events as store
from service.store.tables import run_events
from service.store.uow import UnitOfWork
from tests.store.test_runs_store import NOW, _create


def _event(
    event_id: str, seconds: float, kind: str = "checkpoint_save_begin", **extra: Any
) -> dict[str, Any]:
    return {"event_id": event_id, "kind": kind, "at": NOW + timedelta(seconds=seconds), **extra}


def _insert(engine: Engine, run_pk: int, events: list[dict[str, Any]], tenant: str = "team-a") -> set[str]:
    with UnitOfWork(engine, write=True) as uow:
        inserted = store.insert_events(
            uow.connection, tenant=tenant, run_pk=run_pk, events=events, received_at=NOW
        )
        uow.commit()
    return inserted


def test_a_repeated_event_id_is_stored_once_and_the_first_write_wins(engine: Engine) -> None:
    run = _create(engine)
    assert _insert(engine, run.pk, [_event("a", 0), _event("b", 5, reason="first")]) == {"a", "b"}
    # a retry with one new id, one old id (changed) and an id repeated inside the request
    again = [_event("b", 9, reason="second"), _event("c", 7), _event("c", 8)]
    assert _insert(engine, run.pk, again) == {"c"}
    with UnitOfWork(engine, write=False) as uow:
        stored = store.list_events(uow.connection, run_pks=[run.pk])
        count = uow.connection.execute(select(func.count()).select_from(run_events)).scalar_one()
    assert count == 3
    assert [event.event_id for event in stored] == ["a", "b", "c"]  # by time
    b = next(event for event in stored if event.event_id == "b")
    assert b.reason == "first" and b.at == NOW + timedelta(seconds=5)
    assert next(event for event in stored if event.event_id == "c").at == NOW + timedelta(seconds=7)


def test_the_same_event_id_on_two_runs_is_two_events(engine: Engine) -> None:
    first, second = _create(engine), _create(engine)
    assert _insert(engine, first.pk, [_event("a", 0)]) == {"a"}
    assert _insert(engine, second.pk, [_event("a", 0)]) == {"a"}


def test_thousands_of_events_in_one_call_are_all_stored(engine: Engine) -> None:
    run = _create(engine)
    events = [_event(f"e{i}", i, step=i, duration_seconds=0.5) for i in range(2500)]
    assert len(_insert(engine, run.pk, events)) == len(events)
    assert _insert(engine, run.pk, events) == set()


def test_runs_sharing_a_job_id_are_one_job_within_the_tenant(engine: Engine) -> None:
    job = {"cluster": "c1", "scheduler_job_id": "slurm-42"}
    attempt1 = _create(engine, attempt=1, **job)
    attempt0 = _create(engine, attempt=0, **job)
    _create(engine, attempt=0, cluster="c2", scheduler_job_id="slurm-42")  # another cluster's job
    _create(engine, tenant="team-b", attempt=2, **job)  # another tenant's
    alone = _create(engine, scheduler_job_id=None)
    _insert(engine, attempt0.pk, [_event("x", 0, kind="job_started"), _event("y", 100, kind="failure")])
    _insert(engine, attempt1.pk, [_event("x", 200, kind="job_started")])
    with UnitOfWork(engine, write=False) as uow:
        run = store.run_of_tenant(uow.connection, tenant="team-a", run_id=attempt1.id)
        assert run is not None
        attempts = store.job_runs(uow.connection, tenant="team-a", run=run)
        assert [item.id for item in attempts] == [attempt0.id, attempt1.id]
        stored = store.list_events(uow.connection, run_pks=[item.pk for item in attempts])
        assert [(event.run_attempt, event.event_id) for event in stored] == [(0, "x"), (0, "y"), (1, "x")]
        lone = store.run_of_tenant(uow.connection, tenant="team-a", run_id=alone.id)
        assert lone is not None and store.job_runs(uow.connection, tenant="team-a", run=lone) == [lone]
        assert store.run_of_tenant(uow.connection, tenant="team-b", run_id=attempt1.id) is None
