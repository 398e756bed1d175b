"""A tenant's run: reading it (the step every run use case starts with), listing a tenant's runs,
changing what a caller may change after recording it (status, finish time, budget, price, tags),
deleting it. The rules are the
domain's (:mod:`service.domain.run`); no HTTP, no SQL."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from service.domain import run as run_domain
from service.domain.errors import InvalidInput
from service.store import records as records_store
from service.store import run_filters as run_filters_store
from service.store import runs as runs_store
from service.store.uow import Transaction, UnitOfWork
from service.usecases.errors import RunNotFound


def require_run(
    transaction: Transaction, *, tenant: str, run_id: str, for_update: bool = False, with_tags: bool = True
) -> records_store.RunRecord:
    """The tenant's run, or :class:`RunNotFound` (another tenant's run is not found, as an unknown id)."""
    run = runs_store.get_run(
        transaction, tenant=tenant, run_id=run_id, for_update=for_update, with_tags=with_tags
    )
    if run is None:
        raise RunNotFound(run_id)
    return run


@dataclass(frozen=True, slots=True)
class RunListPage:
    runs: list[records_store.RunRecord]  # in the listing's order
    more: bool  # runs past this page


def list_runs(
    transaction: Transaction,
    *,
    tenant: str,
    filters: run_filters_store.RunFilters,
    sort: run_filters_store.SortField,
    descending: bool,
    limit: int,
    after: tuple[Any, int] | None,
) -> RunListPage:
    """Up to ``limit`` of the tenant's runs matching ``filters``, after the (sort value, pk) position
    ``after``; a range whose bounds are crossed is refused."""
    if (
        filters.min_parameters is not None
        and filters.max_parameters is not None
        and filters.min_parameters > filters.max_parameters
    ):
        raise InvalidInput("min_parameters is above max_parameters.", field="query.min_parameters")
    if filters.min_mfu is not None and filters.max_mfu is not None and filters.min_mfu > filters.max_mfu:
        raise InvalidInput("min_mfu is above max_mfu.", field="query.min_mfu")
    rows = run_filters_store.list_runs(
        transaction,
        tenant=tenant,
        filters=filters,
        sort=sort,
        descending=descending,
        limit=limit + 1,
        after=after,
    )
    return RunListPage(rows[:limit], len(rows) > limit)


#: What a caller may change on a recorded run besides its status and finish time, as the store names it.
EDITABLE_FIELDS = ("token_budget_tokens", "price_per_device_hour")


def update_run(
    uow: UnitOfWork, *, tenant: str, run_id: str, changes: Mapping[str, Any], now: datetime
) -> records_store.RunRecord:
    """Apply the fields a caller gave (``changes``: only those, so None means "clear"), in one
    transaction, and return the run as stored. Status: :func:`service.domain.run.status_after`;
    ``finished_at`` goes with a final status (default ``now``) and not before the start; tags:
    :func:`service.domain.run.tags_after`."""
    transaction = uow.connection
    run = require_run(transaction, tenant=tenant, run_id=run_id, for_update=True)
    values: dict[str, Any] = {}
    status = run.status
    if "status" in changes:
        if changes["status"] is None:
            raise InvalidInput(
                "status cannot be cleared; give running, finished or failed.", field="body.status"
            )
        status = run_domain.status_after(run.status, changes["status"])
        if status != run.status:
            values["status"] = status
            if status in run_domain.FINAL_STATUSES:
                values["finished_at"] = now
    if "finished_at" in changes:
        finished_at = changes["finished_at"]
        if status not in run_domain.FINAL_STATUSES:
            raise InvalidInput(
                "finished_at goes with status finished or failed; set the status in the same request.",
                field="body.finished_at",
            )
        if finished_at is None:
            raise InvalidInput("a finished or failed run keeps a finished_at.", field="body.finished_at")
        if finished_at < run.started_at:
            raise InvalidInput(
                f"finished_at is before the run started ({run.started_at.isoformat()}).", field="finished_at"
            )
        values["finished_at"] = finished_at
    values.update({name: changes[name] for name in EDITABLE_FIELDS if name in changes})
    tags = run_domain.tags_after(
        run.tags,
        replace_with=changes.get("tags"),
        add=changes.get("add_tags"),
        remove=changes.get("remove_tags"),
    )
    if values or tags is not None:
        values["updated_at"] = now
        runs_store.update_run(transaction, run_pk=run.pk, values=values)
        if tags is not None:
            runs_store.replace_tags(transaction, tenant=tenant, run_pk=run.pk, tags=tags)
    updated = require_run(transaction, tenant=tenant, run_id=run_id)
    uow.commit()
    return updated


def delete_run(uow: UnitOfWork, *, tenant: str, run_id: str) -> None:
    """Delete the run with its measurements, in one transaction (its median leaves the fleet's)."""
    run = require_run(uow.connection, tenant=tenant, run_id=run_id, for_update=True)
    runs_store.delete_run(uow.connection, run=run)
    uow.commit()
