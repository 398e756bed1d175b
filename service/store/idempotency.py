"""Idempotency-Key records of run creation."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from service.store.tables import idempotency_keys


@dataclass(frozen=True, slots=True)
class IdempotencyRecord:
    operation: str
    request_hash: str
    state: str
    response_status: int | None
    response_body: str | None
    claimed_at: datetime


def claim_idempotency_key(
    connection: Connection, *, tenant: str, key: str, operation: str, request_hash: str, now: datetime
) -> bool:
    """Record ``key`` as in flight; False when the tenant already has a record for it.

    The insert either wins or meets the primary key (IntegrityError, turned into False): the database
    decides between replicas. Run it in its own short transaction, committed before the work.
    """
    try:
        with connection.begin_nested():
            connection.execute(
                insert(idempotency_keys).values(
                    tenant=tenant,
                    key=key,
                    operation=operation,
                    request_hash=request_hash,
                    state="in_flight",
                    created_at=now,
                    claimed_at=now,
                )
            )
    except IntegrityError:
        return False
    return True


def get_idempotency_record(connection: Connection, *, tenant: str, key: str) -> IdempotencyRecord | None:
    t = idempotency_keys
    row = connection.execute(
        select(
            t.c.operation, t.c.request_hash, t.c.state, t.c.response_status, t.c.response_body, t.c.claimed_at
        ).where(t.c.tenant == tenant, t.c.key == key)
    ).first()
    if row is None:
        return None
    return IdempotencyRecord(*row)


def reclaim_idempotency_key(
    connection: Connection,
    *,
    tenant: str,
    key: str,
    request_hash: str,
    stale_before: datetime,
    now: datetime,
) -> bool:
    """Take over an in-flight record for the same request whose holder went away (claimed before
    ``stale_before``: its process died and nothing of it was committed). Compare-and-set: of two
    takers only one wins."""
    t = idempotency_keys
    result = connection.execute(
        update(t)
        .where(
            t.c.tenant == tenant,
            t.c.key == key,
            t.c.request_hash == request_hash,
            t.c.state == "in_flight",
            t.c.claimed_at < stale_before,
        )
        .values(claimed_at=now)
    )
    return bool(result.rowcount)


def complete_idempotency_key(
    connection: Connection, *, tenant: str, key: str, response_status: int, response_body: str
) -> None:
    t = idempotency_keys
    connection.execute(
        update(t)
        .where(t.c.tenant == tenant, t.c.key == key)
        .values(state="done", response_status=response_status, response_body=response_body)
    )


def release_idempotency_key(connection: Connection, *, tenant: str, key: str) -> None:
    """Forget an in-flight claim whose request failed (a retry then runs it again)."""
    t = idempotency_keys
    connection.execute(delete(t).where(t.c.tenant == tenant, t.c.key == key, t.c.state == "in_flight"))


def purge_idempotency_keys(connection: Connection, *, created_before: datetime) -> None:
    """Forget every tenant's keys older than the retention (housekeeping on each claim)."""
    t = idempotency_keys
    connection.execute(delete(t).where(t.c.created_at < created_before))
