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
from service.api.resolve import with_field_prefix
from service.api.schemas.fields import is_stored_int
from service.api.schemas.runs import RunPage, RunRead, SortOrder
from service.domain import hardware, models
from service.domain.errors import InvalidInput
from service.store import records as records_store
from service.store import run_filters as run_filters_store
from service.store import runs as store
from service.store.keys import Principal
from service.usecases.runs import require_run


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
