"""Runs: read, list (filters, sorts, keyset cursors), update and delete a tenant's runs.

A run of another tenant is not found (404), exactly as an unknown one.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import Connection

from service.api.cursors import CursorCodec
from service.api.presenters.runs import run_read
from service.api.problems import CONFLICT, ProblemError
from service.api.resolve import with_field_prefix
from service.api.schemas.fields import is_stored_int
from service.api.schemas.runs import MAX_TAGS, RunPage, RunRead, RunUpdate, SortOrder
from service.domain import hardware, models
from service.domain.errors import InvalidInput
from service.store import records as records_store
from service.store import run_filters as run_filters_store
from service.store import runs as store
from service.store.keys import Principal
from service.store.uow import UnitOfWork
from service.usecases.runs import require_run


def now_utc() -> datetime:
    return datetime.now(UTC)


def get_run(connection: Connection, *, principal: Principal, run_id: str) -> RunRead:
    return run_read(require_run(connection, tenant=principal.tenant, run_id=run_id))


def _run_position(payload: dict[str, Any], sort: str) -> tuple[Any, int]:
    """The (sort value, pk) a signed cursor holds, each checked against what the column can hold."""
    damaged = InvalidInput("cursor is damaged; pass next_cursor unchanged.", field="query.cursor")
    value: Any = payload.get("v")
    pk: Any = payload.get("k")
    if not is_stored_int(pk) or pk < 1:
        raise damaged
    if sort == "started_at":
        if not isinstance(value, str):
            raise damaged
        try:
            moment = datetime.fromisoformat(value)
            if moment.tzinfo is None:
                raise ValueError
            moment.astimezone(UTC)
        except (ValueError, OverflowError):
            raise damaged from None
        return moment, pk
    if isinstance(value, bool) or not isinstance(value, int | float) or not store.NO_MFU <= value <= 1:
        raise damaged
    return float(value), pk


def _filters_hash(filters: run_filters_store.RunFilters, sort: str, order: str) -> str:
    text = repr((filters, sort, order)).encode()
    return hashlib.sha256(text).hexdigest()[:16]


def normalise_accelerator(value: str | None) -> str | None:
    if value is None:
        return None
    if value.strip().lower() == records_store.CUSTOM_ACCELERATOR:
        return records_store.CUSTOM_ACCELERATOR
    return with_field_prefix("query.accelerator", lambda: hardware.lookup_accelerator(value).id)


def normalise_model(value: str | None) -> str | None:
    if value is None:
        return None
    preset = models.PRESETS.get(value.strip().lower())
    return preset.id if preset is not None else value


def list_runs(
    connection: Connection,
    *,
    principal: Principal,
    filters: run_filters_store.RunFilters,
    sort: run_filters_store.SortField,
    order: str,
    limit: int,
    cursor: str | None,
    cursors: CursorCodec,
) -> RunPage:
    if (
        filters.min_parameters is not None
        and filters.max_parameters is not None
        and filters.min_parameters > filters.max_parameters
    ):
        raise InvalidInput("min_parameters is above max_parameters.", field="query.min_parameters")
    if filters.min_mfu is not None and filters.max_mfu is not None and filters.min_mfu > filters.max_mfu:
        raise InvalidInput("min_mfu is above max_mfu.", field="query.min_mfu")
    fingerprint = _filters_hash(filters, sort, order)
    after: tuple[Any, int] | None = None
    if cursor is not None:
        payload = cursors.decode(cursor)
        if payload.get("f") != fingerprint:
            raise InvalidInput(
                "this cursor belongs to a listing with other filters or another sort; start again "
                "without a cursor, or keep the filters and sort of the first page.",
                field="query.cursor",
            )
        after = _run_position(payload, sort)
    rows = run_filters_store.list_runs(
        connection,
        tenant=principal.tenant,
        filters=filters,
        sort=sort,
        descending=order == "desc",
        limit=limit + 1,
        after=after,
    )
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        last = rows[-1]
        value = (
            last.started_at.isoformat()
            if sort == "started_at"
            else (last.median_mfu if last.median_mfu is not None else store.NO_MFU)
        )
        next_cursor = cursors.encode({"v": value, "k": last.pk, "f": fingerprint})
    return RunPage(
        items=[run_read(run) for run in rows],
        next_cursor=next_cursor,
        limit=limit,
        sort=sort,
        order=cast("SortOrder", order),
    )


FINAL_STATUSES = ("finished", "failed")


def update_run(uow: UnitOfWork, *, principal: Principal, run_id: str, request: RunUpdate) -> RunRead:
    """Status: running → finished | failed, once (the same final status again is a no-op; leaving a
    final status is 409). ``finished_at`` goes with a final status (default: now)."""
    connection = uow.connection
    run = require_run(connection, tenant=principal.tenant, run_id=run_id, for_update=True)
    given = request.model_fields_set
    now = now_utc()
    values: dict[str, Any] = {}
    status = run.status
    if "status" in given:
        if request.status is None:
            raise InvalidInput(
                "status cannot be cleared; give running, finished or failed.", field="body.status"
            )
        if request.status != run.status:
            if run.status in FINAL_STATUSES:
                raise ProblemError(
                    CONFLICT,
                    f"Run {run.id} is {run.status}, a final status: it cannot become {request.status}. "
                    "Record a restart as a new run (next attempt).",
                    current_status=run.status,
                )
            status = request.status
            values["status"] = status
            if status in FINAL_STATUSES:
                values["finished_at"] = now
    if "finished_at" in given:
        if status not in FINAL_STATUSES:
            raise InvalidInput(
                "finished_at goes with status finished or failed; set the status in the same request.",
                field="body.finished_at",
            )
        if request.finished_at is None:
            raise InvalidInput("a finished or failed run keeps a finished_at.", field="body.finished_at")
        if request.finished_at < run.started_at:
            raise InvalidInput(
                f"finished_at is before the run started ({run.started_at.isoformat()}).", field="finished_at"
            )
        values["finished_at"] = request.finished_at
    for name in ("token_budget_tokens", "price_per_device_hour"):
        if name in given:
            values[name] = getattr(request, name)
    tags: list[str] | None = None
    if request.tags is not None:
        tags = list(dict.fromkeys(request.tags))
    elif request.add_tags is not None or request.remove_tags is not None:
        removed = set(request.remove_tags or ())
        tags = [tag for tag in dict.fromkeys([*run.tags, *(request.add_tags or ())]) if tag not in removed]
    if tags is not None and len(tags) > MAX_TAGS:
        raise InvalidInput(f"a run has at most {MAX_TAGS} tags.", field="body.add_tags")
    if values or tags is not None:
        values["updated_at"] = now
        store.update_run(connection, run_pk=run.pk, values=values)
        if tags is not None:
            store.replace_tags(connection, tenant=principal.tenant, run_pk=run.pk, tags=tags)
    updated = require_run(connection, tenant=principal.tenant, run_id=run_id)
    uow.commit()
    return run_read(updated)


def delete_run(uow: UnitOfWork, *, principal: Principal, run_id: str) -> None:
    run = require_run(uow.connection, tenant=principal.tenant, run_id=run_id, for_update=True)
    store.delete_run(uow.connection, run=run)
    uow.commit()
