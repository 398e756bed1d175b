"""The measurement-ingest transaction's reads under lock (the batch's logic and writes:
``service.usecases.measurements``): the runs locked, which keys are still active, the runs' MFU
histograms and step-bucket extents. The histogram is not read back after the batch's upsert: the run is
locked, so the histogram read with the lock plus the batch's counts is what the upsert leaves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    CompoundSelect,
    Connection,
    Integer,
    Select,
    any_,
    bindparam,
    cast,
    func,
    literal_column,
    select,
    union_all,
)

from service.store import records as records_store
from service.store import runs as run_store
from service.store.pipeline import read_together
from service.store.tables import api_keys, run_mfu_bins, run_series_bins, runs


@dataclass(frozen=True, slots=True)
class LockedForIngest:
    """What a batch reads before it writes; the runs stay locked until its transaction ends."""

    #: Of the keys asked about, those that exist and are not revoked.
    active_key_ids: frozenset[int]
    #: The runs asked about that exist (any tenant: the caller checks), by id: what can change
    #: since the caller's copy of the run was read (its summary).
    runs: dict[str, LockedRun]
    #: Their MFU histograms by run pk ({bin: n}, empty bins left out).
    histograms: dict[int, dict[int, int]]
    #: (width in steps, lowest bucket, highest bucket) of the stored step buckets of those with more
    #: than ``series_above`` measurements that have any.
    series_extents: dict[int, tuple[int, int, int]]


@dataclass(frozen=True, slots=True)
class LockedRun:
    """A locked run's identity and its summary as it stands (``runs.SUMMARY_COLUMNS``; times UTC,
    a median not yet known None). The rest of a run is fixed at creation (or, like its status and
    tags, not ingest's business), so a cached record plus these is the run as it stands:
    :meth:`applied_to`; the whole row (40 columns and the spec's JSON) is not read again per batch."""

    pk: int
    id: str
    tenant: str
    summary: dict[str, Any]

    def applied_to(self, run: records_store.RunRecord) -> records_store.RunRecord:
        if run.pk != self.pk:
            raise ValueError(f"run {self.id}: the record given is of another run")
        return records_store.replace_run(run, self.summary)


_LOCKED_COLUMNS = (runs.c.pk, runs.c.id, runs.c.tenant, *(runs.c[name] for name in run_store.SUMMARY_COLUMNS))


def _locked_run(row: Sequence[Any]) -> LockedRun:
    """From a row as the driver returns it (read_together): times in UTC, as UtcDateTime reads them."""
    values: list[Any] = [value.astimezone(UTC) if isinstance(value, datetime) else value for value in row]
    summary = dict(zip(run_store.SUMMARY_COLUMNS, values[3:], strict=True))
    summary["median_mfu"] = records_store.median_as_read(summary["median_mfu"])
    return LockedRun(pk=values[0], id=values[1], tenant=values[2], summary=summary)


def _id_in(column: Any, name: str, dialect_name: str) -> Any:
    """``column IN (ids)``: an array parameter on PostgreSQL (one statement text, compiled once,
    whatever the count), an expanding list on SQLite."""
    if dialect_name == "postgresql":
        return column == any_(bindparam(name, type_=ARRAY(column.type)))
    return column.in_(bindparam(name, expanding=True))


_KEY, _BIN, _EXTENT = 0, 1, 2


def _tagged(kind: int, *values: Any) -> Select[Any]:
    """(kind, four BIGINT values, missing ones NULL): the one shape of the lock's union of facts."""
    padded = [*values, *[literal_column("NULL")] * (4 - len(values))]
    columns = [cast(value, BigInteger).label(name) for value, name in zip(padded, "abcd", strict=True)]
    return select(literal_column(str(kind)).label("kind"), *columns)


@lru_cache(maxsize=2)
def _lock_queries(dialect_name: str) -> tuple[Select[Any], CompoundSelect]:
    """The lock's two statements, built once per dialect (building one costs more than running it):
    the runs locked in primary-key order (two writers locking overlapping sets never deadlock), then
    one union, tagged by kind, of the keys still active, the locked runs' MFU histograms and the
    step-bucket extents of the long ones: two statements sent together (read_together), since on a
    loaded machine each round trip to PostgreSQL costs the writer more than the rows it carries. Two,
    not one: a statement reads the other tables as of its start, before it waited for the locks."""
    locked_pks = select(runs.c.pk).where(_id_in(runs.c.id, "run_ids", dialect_name))
    h, s = run_mfu_bins, run_series_bins
    long_pks = locked_pks.where(runs.c.measurement_count > bindparam("series_above", type_=Integer))
    return (
        select(*_LOCKED_COLUMNS)
        .where(_id_in(runs.c.id, "run_ids", dialect_name))
        .order_by(runs.c.pk)
        .with_for_update(),
        union_all(
            _tagged(_KEY, api_keys.c.id).where(
                _id_in(api_keys.c.id, "key_ids", dialect_name), api_keys.c.revoked_at.is_(None)
            ),
            _tagged(_BIN, h.c.run_pk, h.c.mfu_bin, h.c.n_measurements).where(
                h.c.run_pk.in_(locked_pks.scalar_subquery()), h.c.n_measurements > literal_column("0")
            ),
            _tagged(
                _EXTENT, s.c.run_pk, func.max(s.c.width_steps), func.min(s.c.bucket), func.max(s.c.bucket)
            )
            .where(s.c.run_pk.in_(long_pks.scalar_subquery()))
            .group_by(s.c.run_pk),
        ),
    )


def lock_for_ingest(
    connection: Connection, *, key_ids: Sequence[int], run_ids: Sequence[str], series_above: int
) -> LockedForIngest:
    """Lock the runs (primary-key order), then check the keys and read the runs' histograms and, for
    those with more than ``series_above`` measurements, their step-bucket extents, in a write
    transaction the caller holds."""
    parameters = {
        "key_ids": sorted(set(key_ids)),
        "run_ids": sorted(set(run_ids)),
        "series_above": series_above,
    }
    locked_rows, fact_rows = read_together(connection, _lock_queries(connection.dialect.name), parameters)
    locked = {row[1]: _locked_run(row) for row in locked_rows}
    active: set[int] = set()
    histograms: dict[int, dict[int, int]] = {}
    extents: dict[int, tuple[int, int, int]] = {}
    for kind, first, second, third, fourth in fact_rows:
        if kind == _KEY:
            active.add(first)
        elif kind == _BIN:
            histograms.setdefault(first, {})[second] = third
        else:
            extents[first] = (second, third, fourth)
    return LockedForIngest(frozenset(active), locked, histograms, extents)
