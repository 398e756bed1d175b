"""The run-event store (issue 21, goodput): insert a run's events once each, read a job's events.

Repository functions over a connection inside a unit of work (the caller commits). A (run, event id)
is stored once: a repeated id is skipped by the unique constraint (``ON CONFLICT DO NOTHING`` on
SQLite and PostgreSQL alike), so a retried POST is idempotent and the first write wins. Runs of one
tenant that share (cluster, scheduler_job_id) are the attempts of one job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Insert, select, text
from sqlalchemy.dialects import postgresql, sqlite

from service.store.tables import NO_MFU, run_events, runs

EVENT_COLUMNS = ("event_id", "kind", "at", "attempt", "step", "duration_seconds", "reason")


@dataclass(frozen=True, slots=True)
class JobRun:
    """One attempt of a job, as goodput needs it."""

    pk: int
    id: str
    attempt: int | None
    device_count: int
    median_mfu: float | None
    first_measured_at: datetime | None
    latest_measured_at: datetime | None
    cluster: str | None
    scheduler_job_id: str | None


@dataclass(frozen=True, slots=True)
class StoredEvent:
    run_id: str
    run_attempt: int | None
    event_id: str
    kind: str
    at: datetime
    attempt: int | None
    step: int | None
    duration_seconds: float | None
    reason: str | None


_JOB_RUN_COLUMNS = (
    runs.c.pk,
    runs.c.id,
    runs.c.attempt,
    runs.c.device_count,
    runs.c.median_mfu,
    runs.c.first_measured_at,
    runs.c.latest_measured_at,
    runs.c.cluster,
    runs.c.scheduler_job_id,
)


def _job_run(row: Any) -> JobRun:
    values = dict(row._mapping)
    if values["median_mfu"] == NO_MFU:
        values["median_mfu"] = None
    return JobRun(**values)


def run_of_tenant(connection: Connection, *, tenant: str, run_id: str) -> JobRun | None:
    """The tenant's run with this id; None for an unknown id or another tenant's run."""
    row = connection.execute(
        select(*_JOB_RUN_COLUMNS).where(runs.c.id == run_id, runs.c.tenant == tenant)
    ).first()
    return _job_run(row) if row is not None else None


def job_runs(connection: Connection, *, tenant: str, run: JobRun) -> list[JobRun]:
    """Every attempt of ``run``'s job: the tenant's runs with its (cluster, scheduler_job_id), by
    attempt; the run alone when it has no job id."""
    if run.scheduler_job_id is None:
        return [run]
    cluster = runs.c.cluster.is_(None) if run.cluster is None else runs.c.cluster == run.cluster
    rows = connection.execute(
        select(*_JOB_RUN_COLUMNS)
        .where(runs.c.tenant == tenant, runs.c.scheduler_job_id == run.scheduler_job_id, cluster)
        .order_by(runs.c.attempt, runs.c.pk)
    ).all()
    return [_job_run(row) for row in rows]


def _insert(connection: Connection) -> Insert:
    if connection.dialect.name == "postgresql":
        return postgresql.insert(run_events).on_conflict_do_nothing(index_elements=["run_pk", "event_id"])
    if connection.dialect.name == "sqlite":
        return sqlite.insert(run_events).on_conflict_do_nothing(index_elements=["run_pk", "event_id"])
    raise NotImplementedError(f"run events on {connection.dialect.name}")


_PG_UNNEST_INSERT = text(
    "INSERT INTO run_events (run_pk, tenant, received_at, event_id, kind, at, attempt, step, "
    "duration_seconds, reason) "
    "SELECT :run_pk, :tenant, :received_at, u.* FROM unnest("
    "CAST(:event_id AS varchar[]), CAST(:kind AS varchar[]), CAST(:at AS timestamptz[]), "
    "CAST(:attempt AS integer[]), CAST(:step AS bigint[]), CAST(:duration_seconds AS double precision[]), "
    "CAST(:reason AS varchar[])) AS u "
    "ON CONFLICT (run_pk, event_id) DO NOTHING RETURNING event_id"
)


def insert_events(
    connection: Connection,
    *,
    tenant: str,
    run_pk: int,
    events: Sequence[Mapping[str, Any]],
    received_at: datetime,
) -> set[str]:
    """Insert the run's events (mappings of :data:`EVENT_COLUMNS`); the ids actually inserted.

    An id the run already has, or one repeated in ``events``, is skipped (the first one wins).
    """
    if not events:
        return set()
    if connection.dialect.name == "postgresql":
        # One statement of seven array parameters: a multi-row VALUES of 1,000 events has 11,000
        # placeholders, and psycopg's conversion of a query that large (not cached) took ~0.9 s.
        parameters: dict[str, Any] = {name: [event.get(name) for event in events] for name in EVENT_COLUMNS}
        parameters.update(run_pk=run_pk, tenant=tenant, received_at=received_at)
        return set(connection.execute(_PG_UNNEST_INSERT, parameters).scalars())
    rows = [
        {
            "run_pk": run_pk,
            "tenant": tenant,
            "received_at": received_at,
            **{c: e.get(c) for c in EVENT_COLUMNS},
        }
        for e in events
    ]
    # executemany: SQLAlchemy's "insertmanyvalues" sends multi-row INSERTs of one cached statement
    # (batches sized under SQLite's parameter limit) and gathers their RETURNING rows.
    statement = _insert(connection).returning(run_events.c.event_id)
    inserted = set(connection.execute(statement, rows).scalars())
    return inserted


def list_events(connection: Connection, *, run_pks: Sequence[int]) -> list[StoredEvent]:
    """The events of these runs (a job's attempts), by time then insertion order."""
    if not run_pks:
        return []
    rows = connection.execute(
        select(
            runs.c.id,
            runs.c.attempt,
            run_events.c.event_id,
            run_events.c.kind,
            run_events.c.at,
            run_events.c.attempt,
            run_events.c.step,
            run_events.c.duration_seconds,
            run_events.c.reason,
        )
        .join(runs, runs.c.pk == run_events.c.run_pk)
        .where(run_events.c.run_pk.in_(list(run_pks)))
        .order_by(run_events.c.at, run_events.c.pk)
    ).all()
    return [StoredEvent(*row) for row in rows]


def set_job_goodput(connection: Connection, *, run_pks: Sequence[int], goodput: float | None) -> None:
    """Keep the job's goodput on each of its runs (the fleet statistics read it from there; the use
    case sets it when an attempt ends)."""
    if run_pks:
        connection.execute(runs.update().where(runs.c.pk.in_(list(run_pks))).values(goodput=goodput))


@dataclass(frozen=True, slots=True)
class GoodputRow:
    """A run whose job has a goodput, as the fleet statistics need it."""

    tenant: str
    accelerator: str
    size_class: str
    cluster: str | None
    scheduler_job_id: str | None
    pk: int
    goodput: float
    median_mfu: float | None


def goodput_rows(
    connection: Connection,
    *,
    tenant: str | None = None,
    accelerator: str | None = None,
    size_class: str | None = None,
) -> list[GoodputRow]:
    """Every run with a job goodput (of one tenant, or of all), with its group and median MFU: one
    query over the runs' summary columns, never the events."""
    query = select(
        runs.c.tenant,
        runs.c.accelerator,
        runs.c.size_class,
        runs.c.cluster,
        runs.c.scheduler_job_id,
        runs.c.pk,
        runs.c.goodput,
        runs.c.median_mfu,
    ).where(runs.c.goodput.is_not(None))
    if tenant is not None:
        query = query.where(runs.c.tenant == tenant)
    if accelerator is not None:
        query = query.where(runs.c.accelerator == accelerator)
    if size_class is not None:
        query = query.where(runs.c.size_class == size_class)
    return [
        GoodputRow(
            tenant=row.tenant,
            accelerator=row.accelerator,
            size_class=row.size_class,
            cluster=row.cluster,
            scheduler_job_id=row.scheduler_job_id,
            pk=row.pk,
            goodput=row.goodput,
            median_mfu=None if row.median_mfu == NO_MFU else row.median_mfu,
        )
        for row in connection.execute(query).all()
    ]


def run_has_event(connection: Connection, *, run_pk: int, kinds: Sequence[str]) -> bool:
    """Whether the run has an event of one of these kinds."""
    found = connection.execute(
        select(run_events.c.pk)
        .where(run_events.c.run_pk == run_pk, run_events.c.kind.in_(list(kinds)))
        .limit(1)
    ).first()
    return found is not None
