"""Listing runs: filters, sorts and keyset pagination."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import ColumnElement, Connection, Select, exists, literal, tuple_

from service.store.records import RunRecord, _record, _select_runs
from service.store.runs import tags_of
from service.store.tables import run_tags, runs


@dataclass(frozen=True, slots=True)
class RunFilters:
    accelerator: str | None = None
    model: str | None = None
    min_parameters: int | None = None
    max_parameters: int | None = None
    tags: tuple[str, ...] = ()
    cluster: str | None = None
    status: str | None = None
    started_after: datetime | None = None
    started_before: datetime | None = None
    min_mfu: float | None = None
    max_mfu: float | None = None


SortField = Literal["started_at", "median_mfu"]


def list_runs(
    connection: Connection,
    *,
    tenant: str,
    filters: RunFilters,
    sort: SortField,
    descending: bool,
    limit: int,
    after: tuple[Any, int] | None = None,
) -> list[RunRecord]:
    """One page of the tenant's runs ordered by (``sort``, pk), starting after the keyset ``after``
    ((sort value, pk) of the last row of the previous page). Runs inserted while a client pages never
    shift the rows it has yet to see: the position is a value, not an offset.
    """
    column = runs.c.started_at if sort == "started_at" else runs.c.median_mfu
    query: Select[Any] = _select_runs().where(
        runs.c.tenant == tenant, *_conditions(tenant, filters, ordered_by_mfu=sort == "median_mfu")
    )
    if after is not None:
        key = tuple_(column, runs.c.pk)
        position = tuple_(_bind_like(column, after[0]), _bind_like(runs.c.pk, after[1]))
        query = query.where(key < position if descending else key > position)
    if descending:
        query = query.order_by(column.desc(), runs.c.pk.desc())
    else:
        query = query.order_by(column.asc(), runs.c.pk.asc())
    rows = connection.execute(query.limit(limit)).all()
    tags = tags_of(connection, [row.pk for row in rows])
    return [_record(row, tags.get(row.pk, ())) for row in rows]


def _bind_like(column: Any, value: Any) -> ColumnElement[Any]:
    return literal(value, type_=column.type)


def _conditions(
    tenant: str, filters: RunFilters, *, ordered_by_mfu: bool = True
) -> list[ColumnElement[bool]]:
    c = runs.c
    # An MFU range is rarely selective, yet without statistics SQLite's planner would walk the
    # (tenant, median_mfu) index for it and sort every match by time, a cost that grows with the runs.
    # When the page is ordered by time, `median_mfu + 0` keeps the range a plain filter, so the
    # time-ordered indexes serve the page.
    mfu = c.median_mfu if ordered_by_mfu else c.median_mfu + 0
    conditions: list[ColumnElement[bool]] = []
    if filters.accelerator is not None:
        conditions.append(c.accelerator == filters.accelerator)
    if filters.model is not None:
        conditions.append(c.model_name == filters.model)
    if filters.min_parameters is not None:
        conditions.append(c.parameters_total >= filters.min_parameters)
    if filters.max_parameters is not None:
        conditions.append(c.parameters_total <= filters.max_parameters)
    if filters.cluster is not None:
        conditions.append(c.cluster == filters.cluster)
    if filters.status is not None:
        # Most runs end finished, so `finished` is the least selective filter there is; beside an
        # accelerator or model (each with its own time-ordered index) SQLite's planner, which has no
        # statistics, would still walk the (tenant, status) index and test every finished run of the
        # tenant (~1,100 rows for a 51-run page at 20k runs, against ~160 through the model index).
        # `status || ''` keeps it a plain filter then. Running and failed runs are few: their index stays.
        status: ColumnElement[Any] = c.status
        if filters.status == "finished" and (filters.model is not None or filters.accelerator is not None):
            status = c.status + ""
        conditions.append(status == filters.status)
    if filters.started_after is not None:
        conditions.append(c.started_at >= filters.started_after)
    if filters.started_before is not None:
        conditions.append(c.started_at < filters.started_before)
    if filters.min_mfu is not None or filters.max_mfu is not None:
        conditions.append(mfu >= (filters.min_mfu if filters.min_mfu is not None else 0.0))
    if filters.max_mfu is not None:
        conditions.append(mfu <= filters.max_mfu)
    for tag in filters.tags:
        conditions.append(
            exists().where(run_tags.c.tenant == tenant, run_tags.c.tag == tag, run_tags.c.run_pk == c.pk)
        )
    return conditions
