"""A long run's series in step buckets (:class:`service.domain.fleet.SeriesBin`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from sqlalchemy import BigInteger, Connection, case, delete, func, insert, literal, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect

from service.domain.fleet import SeriesBin
from service.store.tables import measurements, run_series_bins

_SERIES_VALUES = (
    "n_measurements",
    "mfu_sum",
    "mfu_min",
    "mfu_max",
    "tokens_per_second_sum",
    "first_measured_at",
    "last_measured_at",
    "last_step",
)


def run_series(connection: Connection, *, run_pk: int) -> tuple[int, list[SeriesBin]]:
    """A run's stored buckets, by bucket, and their width (0 with none)."""
    t = run_series_bins
    rows = connection.execute(
        select(t.c.width_steps, t.c.bucket, *(t.c[name] for name in _SERIES_VALUES))
        .where(t.c.run_pk == run_pk)
        .order_by(t.c.bucket)
    ).all()
    if not rows:
        return 0, []
    return int(rows[0][0]), [SeriesBin(*row[1:]) for row in rows]


def series_row(run_pk: int, width: int, item: SeriesBin) -> dict[str, Any]:
    return {
        "run_pk": run_pk,
        "bucket": item.bucket,
        "width_steps": width,
        "n_measurements": item.count,
        "mfu_sum": item.mfu_sum,
        "mfu_min": item.mfu_min,
        "mfu_max": item.mfu_max,
        "tokens_per_second_sum": item.tokens_per_second_sum,
        "first_measured_at": item.first_time,
        "last_measured_at": item.last_time,
        "last_step": item.last_step,
    }


@lru_cache(maxsize=4)
def series_upsert(dialect: Dialect) -> Any:
    """INSERT ... ON CONFLICT (run_pk, bucket) DO UPDATE: counts and sums added, minima and maxima
    kept (CASE rather than LEAST/GREATEST or min/max: the same on both databases)."""
    t = run_series_bins
    statement: Any = postgresql.insert(t) if dialect.name == "postgresql" else sqlite.insert(t)
    new = statement.excluded

    def lower(name: str) -> Any:
        return case((new[name] < t.c[name], new[name]), else_=t.c[name])

    def higher(name: str) -> Any:
        return case((new[name] > t.c[name], new[name]), else_=t.c[name])

    return statement.on_conflict_do_update(
        index_elements=["run_pk", "bucket"],
        set_={
            "n_measurements": t.c.n_measurements + new.n_measurements,
            "mfu_sum": t.c.mfu_sum + new.mfu_sum,
            "mfu_min": lower("mfu_min"),
            "mfu_max": higher("mfu_max"),
            "tokens_per_second_sum": t.c.tokens_per_second_sum + new.tokens_per_second_sum,
            "first_measured_at": lower("first_measured_at"),
            "last_measured_at": higher("last_measured_at"),
            "last_step": higher("last_step"),
        },
    )


def add_to_series(
    connection: Connection, *, additions: Mapping[int, tuple[int, Sequence[SeriesBin]]]
) -> None:
    """Add buckets (run → (width, buckets), at the width the run's stored buckets have) to the
    stored ones. The caller holds the runs' locks."""
    rows = [series_row(pk, width, item) for pk, (width, bins) in sorted(additions.items()) for item in bins]
    if rows:
        connection.execute(series_upsert(connection.dialect), rows)


def replace_series(connection: Connection, *, run_pk: int, width: int, bins: Sequence[SeriesBin]) -> None:
    """A run's stored buckets replaced by ``bins`` of ``width`` steps (when the width grows)."""
    connection.execute(delete(run_series_bins).where(run_series_bins.c.run_pk == run_pk))
    if bins:
        connection.execute(insert(run_series_bins), [series_row(run_pk, width, item) for item in bins])


def rebuild_series(connection: Connection, *, run_pk: int, width: int) -> None:
    """A run's buckets of ``width`` steps built from all its stored measurements, in the database (when
    it first outgrows the exact series)."""
    m = measurements
    bucket = m.c.step // width  # integer division of non-negative integers on both databases
    grouped = (
        select(
            m.c.run_pk,
            bucket,
            literal(width, BigInteger),
            func.count(),
            func.sum(m.c.mfu),
            func.min(m.c.mfu),
            func.max(m.c.mfu),
            func.sum(m.c.tokens_per_second),
            func.min(m.c.measured_at),
            func.max(m.c.measured_at),
            func.max(m.c.step),
        )
        .where(m.c.run_pk == run_pk)
        .group_by(m.c.run_pk, bucket)
    )
    connection.execute(delete(run_series_bins).where(run_series_bins.c.run_pk == run_pk))
    connection.execute(
        insert(run_series_bins).from_select(["run_pk", "bucket", "width_steps", *_SERIES_VALUES], grouped)
    )
