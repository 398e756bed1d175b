"""Runs: create, read, update and delete a tenant's runs, their tags, and their summary columns.

Every query on runs names the tenant; a run of another tenant is simply not found. On PostgreSQL the
run row is locked (``SELECT ... FOR UPDATE``) before its measurements or summary change, and
uniqueness lives in constraints (a lost race is an IntegrityError the caller maps).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import Connection, bindparam, delete, insert, select, update

from service.store.histograms import move_run_in_histograms
from service.store.measurements import _sqlite_time
from service.store.records import RunRecord, _record, _select_runs, new_run_id
from service.store.tables import NO_MFU, run_tags, runs


def create_run(
    connection: Connection, *, tenant: str, values: Mapping[str, Any], tags: Sequence[str]
) -> RunRecord:
    """Insert a run (``values``: the runs columns except pk, id, tenant, the summary) and its tags.

    Raises IntegrityError when (tenant, cluster, scheduler_job_id, attempt) is taken.
    """
    run_id = new_run_id()
    pk = connection.execute(
        insert(runs)
        .values(id=run_id, tenant=tenant, measurement_count=0, median_mfu=NO_MFU, **values)
        .returning(runs.c.pk)
    ).scalar_one()
    _insert_tags(connection, tenant=tenant, run_pk=pk, tags=tags)
    record = get_run(connection, tenant=tenant, run_id=run_id)
    assert record is not None
    return record


def find_run_by_job(
    connection: Connection, *, tenant: str, cluster: str, scheduler_job_id: str, attempt: int
) -> str | None:
    """The id of the tenant's run for this scheduler job attempt, if any."""
    return connection.execute(
        select(runs.c.id).where(
            runs.c.tenant == tenant,
            runs.c.cluster == cluster,
            runs.c.scheduler_job_id == scheduler_job_id,
            runs.c.attempt == attempt,
        )
    ).scalar_one_or_none()


_RUN_BY_ID = _select_runs().where(runs.c.id == bindparam("run_id"), runs.c.tenant == bindparam("tenant"))
_RUN_BY_ID_FOR_UPDATE = _RUN_BY_ID.with_for_update()


def get_run(
    connection: Connection, *, tenant: str, run_id: str, for_update: bool = False, with_tags: bool = True
) -> RunRecord | None:
    """The tenant's run with this id; None for an unknown id or another tenant's run.

    ``for_update`` locks the row until the transaction ends (PostgreSQL; SQLite writers already hold
    the database lock). ``with_tags=False`` skips the tags query (ingest never needs them).
    """
    query = _RUN_BY_ID_FOR_UPDATE if for_update else _RUN_BY_ID
    row = connection.execute(query, {"run_id": run_id, "tenant": tenant}).first()
    if row is None:
        return None
    return _record(row, tags_of(connection, [row.pk]).get(row.pk, ()) if with_tags else ())


def get_runs(connection: Connection, *, tenant: str, run_ids: Sequence[str]) -> dict[str, RunRecord]:
    """The tenant's runs among ``run_ids``, by id (missing ids are absent)."""
    rows = connection.execute(
        _select_runs().where(runs.c.tenant == tenant, runs.c.id.in_(list(run_ids)))
    ).all()
    tags = tags_of(connection, [row.pk for row in rows])
    return {row.id: _record(row, tags.get(row.pk, ())) for row in rows}


_TAGS_OF = (
    select(run_tags.c.run_pk, run_tags.c.tag)
    .where(run_tags.c.run_pk.in_(bindparam("pks", expanding=True)))
    .order_by(run_tags.c.run_pk, run_tags.c.tag)
)


def tags_of(connection: Connection, run_pks: Sequence[int]) -> dict[int, tuple[str, ...]]:
    if not run_pks:
        return {}
    found: dict[int, list[str]] = {}
    for run_pk, tag in connection.execute(_TAGS_OF, {"pks": list(run_pks)}):
        found.setdefault(run_pk, []).append(tag)
    return {pk: tuple(values) for pk, values in found.items()}


def _insert_tags(connection: Connection, *, tenant: str, run_pk: int, tags: Iterable[str]) -> None:
    rows = [{"run_pk": run_pk, "tag": tag, "tenant": tenant} for tag in sorted(set(tags))]
    if rows:
        connection.execute(insert(run_tags), rows)


def replace_tags(connection: Connection, *, tenant: str, run_pk: int, tags: Iterable[str]) -> None:
    connection.execute(delete(run_tags).where(run_tags.c.run_pk == run_pk))
    _insert_tags(connection, tenant=tenant, run_pk=run_pk, tags=tags)


def update_run(connection: Connection, *, run_pk: int, values: Mapping[str, Any]) -> None:
    """Set columns of a run (the caller checked the tenant and locked the row)."""
    if values:
        connection.execute(update(runs).where(runs.c.pk == run_pk).values(**values))


def delete_run(connection: Connection, *, run: RunRecord) -> None:
    """Delete a run; its measurements, tags and histogram go with it (ON DELETE CASCADE), and its
    median leaves the tenant and fleet histograms in the same transaction."""
    if run.fleet_bin is not None:
        move_run_in_histograms(connection, run=run, old_bin=run.fleet_bin, new_bin=None)
    connection.execute(delete(runs).where(runs.c.pk == run.pk, runs.c.tenant == run.tenant))


SUMMARY_COLUMNS = (
    "measurement_count",
    "median_mfu",
    "fleet_bin",
    "updated_at",
    "first_measured_at",
    "latest_step",
    "latest_measured_at",
    "latest_mfu",
    "latest_tokens_per_second",
)
_UPDATE_SUMMARY = (
    update(runs)
    .where(runs.c.pk == bindparam("b_pk"))
    .values({name: bindparam(f"b_{name}") for name in SUMMARY_COLUMNS})
)


def update_summaries(connection: Connection, *, summaries: Sequence[RunRecord]) -> None:
    """Write the ingest summary columns of several runs (records as they should now read) in one go.
    The caller holds the runs' locks."""
    if not summaries:
        return
    ordered = sorted(summaries, key=lambda run: run.pk)
    if connection.dialect.name == "sqlite" and len(ordered) > 1:
        # One UPDATE ... FROM (VALUES ...) rather than an executemany of one step per run (see
        # insert_measurements on the GIL); times as UtcDateTime binds them.
        values: list[Any] = []
        for run in ordered:
            values.append(run.pk)
            for name in SUMMARY_COLUMNS:
                value = getattr(run, name)
                values.append(_sqlite_time(value) if isinstance(value, datetime) else value)
        connection.exec_driver_sql(_sqlite_update_summaries(len(ordered)), tuple(values))
        return
    rows = [
        {"b_pk": run.pk, **{f"b_{name}": getattr(run, name) for name in SUMMARY_COLUMNS}} for run in ordered
    ]
    connection.execute(_UPDATE_SUMMARY, rows)


@lru_cache(maxsize=64)
def _sqlite_update_summaries(row_count: int) -> str:
    group = "(" + ", ".join(["?"] * (1 + len(SUMMARY_COLUMNS))) + ")"
    assignments = ", ".join(f"{name} = v.{name}" for name in SUMMARY_COLUMNS)
    # Only constants go into the text (column names of this module, "?" placeholders); values are bound.
    return (
        f"WITH v(pk, {', '.join(SUMMARY_COLUMNS)}) AS (VALUES {', '.join([group] * row_count)}) "  # nosec B608
        f"UPDATE runs SET {assignments} FROM v WHERE runs.pk = v.pk"
    )
