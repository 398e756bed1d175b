"""Record a run (use case): insert what the run stores, once per (cluster, job, attempt), once per
Idempotency-Key. No HTTP and no SQL: the caller prepares the values (the domain's parameter counts,
FLOPs per token and peak) and says how an answer is stored for a replay; the store writes.

Idempotency-Key: the key is first claimed in a committed "in flight" row; the run and the stored
answer are then written in one transaction. A second request with the key finds the row: a different
request is :class:`IdempotencyKeyReused`; a finished one gets the stored answer (same status and
body); one still in flight waits up to :data:`IDEMPOTENCY_WAIT_SECONDS` for it and is then
:class:`IdempotencyInFlight`. A failed request releases its claim; a claim whose process died is
taken over after :data:`IDEMPOTENCY_LEASE_SECONDS`. Keys are kept :data:`IDEMPOTENCY_RETENTION`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from service.store import idempotency as idempotency_store
from service.store import records as records_store
from service.store import runs as runs_store
from service.store.uow import ConstraintViolation, Database, Transaction, UnitOfWork
from service.usecases.errors import IdempotencyInFlight, IdempotencyKeyReused, JobAttemptExists

IDEMPOTENCY_WAIT_SECONDS = 3.0
IDEMPOTENCY_POLL_SECONDS = 0.05
IDEMPOTENCY_LEASE_SECONDS = 60.0
IDEMPOTENCY_RETENTION = timedelta(hours=24)
CREATE_RUN_OPERATION = "create_run"

#: The answer stored for a replay of the request that recorded ``run`` (JSON-ready).
Presenter = Callable[[records_store.RunRecord], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class PreparedRun:
    """The columns of the run to store (``records_store`` names) and its tags."""

    values: dict[str, Any]
    tags: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Recorded:
    status: int
    body: bytes  # the answer, as stored for a replay
    run_id: str
    replayed: bool


def record_run(
    database: Database,
    *,
    tenant: str,
    prepared: PreparedRun,
    present: Presenter,
    idempotency_key: str | None = None,
    fingerprint: str = "",
) -> Recorded:
    """Insert the run; with ``idempotency_key`` (and the request's ``fingerprint``), at most once per key."""
    if idempotency_key is None:
        body = _create(database, tenant=tenant, prepared=prepared, present=present, idempotency_key=None)
        return Recorded(201, orjson.dumps(body), body["id"], replayed=False)
    replay = _claim_or_replay(database, tenant=tenant, key=idempotency_key, fingerprint=fingerprint)
    if replay is not None:
        return replay
    try:
        body = _create(
            database, tenant=tenant, prepared=prepared, present=present, idempotency_key=idempotency_key
        )
    except BaseException:
        with UnitOfWork(database, write=True) as uow:
            idempotency_store.release_idempotency_key(uow.connection, tenant=tenant, key=idempotency_key)
            uow.commit()
        raise
    return Recorded(201, orjson.dumps(body), body["id"], replayed=False)


def _job_attempt_taken(
    transaction: Transaction, *, tenant: str, values: dict[str, Any]
) -> JobAttemptExists | None:
    existing = runs_store.find_run_by_job(
        transaction,
        tenant=tenant,
        cluster=values["cluster"],
        scheduler_job_id=values["scheduler_job_id"],
        attempt=values["attempt"],
    )
    if existing is None:
        return None
    return JobAttemptExists(
        existing,
        cluster=values["cluster"],
        scheduler_job_id=values["scheduler_job_id"],
        attempt=values["attempt"],
    )


def _create(
    database: Database, *, tenant: str, prepared: PreparedRun, present: Presenter, idempotency_key: str | None
) -> dict[str, Any]:
    """Insert the run (and complete the idempotency record) in one transaction."""
    values = prepared.values
    try:
        with UnitOfWork(database, write=True) as uow:
            if values["scheduler_job_id"] is not None:
                taken = _job_attempt_taken(uow.connection, tenant=tenant, values=values)
                if taken is not None:
                    raise taken
            run = runs_store.create_run(uow.connection, tenant=tenant, values=values, tags=prepared.tags)
            body = present(run)
            if idempotency_key is not None:
                idempotency_store.complete_idempotency_key(
                    uow.connection,
                    tenant=tenant,
                    key=idempotency_key,
                    response_status=201,
                    response_body=orjson.dumps(body).decode(),
                )
            uow.commit()
            return body
    except ConstraintViolation:
        # Lost a race on (cluster, job, attempt) with another replica: name the winner.
        if values["scheduler_job_id"] is None:
            raise
        with UnitOfWork(database, write=False) as uow:
            taken = _job_attempt_taken(uow.connection, tenant=tenant, values=values)
        if taken is None:
            raise
        raise taken from None


def _claim_or_replay(database: Database, *, tenant: str, key: str, fingerprint: str) -> Recorded | None:
    """Claim the key (None: go ahead) or answer from the record another request left."""
    deadline = time.monotonic() + IDEMPOTENCY_WAIT_SECONDS
    while True:
        now = datetime.now(UTC)
        with UnitOfWork(database, write=True) as uow:
            connection = uow.connection
            idempotency_store.purge_idempotency_keys(connection, created_before=now - IDEMPOTENCY_RETENTION)
            claimed = idempotency_store.claim_idempotency_key(
                connection,
                tenant=tenant,
                key=key,
                operation=CREATE_RUN_OPERATION,
                request_hash=fingerprint,
                now=now,
            )
            record = (
                None
                if claimed
                else idempotency_store.get_idempotency_record(connection, tenant=tenant, key=key)
            )
            if record is not None and record.request_hash == fingerprint and record.state == "in_flight":
                # A claim whose holder died (nothing of it was committed) is taken over.
                claimed = idempotency_store.reclaim_idempotency_key(
                    connection,
                    tenant=tenant,
                    key=key,
                    request_hash=fingerprint,
                    stale_before=now - timedelta(seconds=IDEMPOTENCY_LEASE_SECONDS),
                    now=now,
                )
            uow.commit()
        if claimed:
            return None
        if record is None and time.monotonic() < deadline:
            continue  # released between our insert and our read: try again
        if record is None:
            raise IdempotencyInFlight
        if record.request_hash != fingerprint or record.operation != CREATE_RUN_OPERATION:
            raise IdempotencyKeyReused
        if record.state == "done" and record.response_body is not None:
            body = record.response_body.encode()
            run_id = str(orjson.loads(body).get("id", ""))
            return Recorded(record.response_status or 201, body, run_id, replayed=True)
        if time.monotonic() >= deadline:
            raise IdempotencyInFlight
        time.sleep(IDEMPOTENCY_POLL_SECONDS)
