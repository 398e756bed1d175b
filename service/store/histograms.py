"""MFU histograms: per run (counts of its measurements per MFU bin), per tenant and fleet-wide (runs
per bin of their median), and the statistics read from them.

Histogram rows are always changed in one order (tenant table, then fleet table, bins ascending) so
two ingests never deadlock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Select, bindparam, select

from service.store.records import RunRecord
from service.store.tables import fleet_mfu_bins, run_mfu_bins, tenant_mfu_bins
from service.store.upserts import _upsert_add


def add_to_run_histogram(connection: Connection, *, run_pk: int, counts: Mapping[int, int]) -> None:
    add_to_run_histograms(connection, counts={run_pk: counts})


def add_to_run_histograms(connection: Connection, *, counts: Mapping[int, Mapping[int, int]]) -> None:
    """Add measurement counts per MFU bin to runs' histograms ({run_pk: {bin: n}}) in one go."""
    rows = [
        {"run_pk": run_pk, "mfu_bin": b, "n_measurements": n}
        for run_pk in sorted(counts)
        for b, n in sorted(counts[run_pk].items())
    ]
    # The run rows are locked by the caller: no other transaction touches these rows.
    _upsert_add(connection, run_mfu_bins, rows, keys=("run_pk", "mfu_bin"), counter="n_measurements")


def run_histogram(connection: Connection, *, run_pk: int) -> dict[int, int]:
    return run_histograms(connection, run_pks=[run_pk]).get(run_pk, {})


_RUN_HISTOGRAMS = select(run_mfu_bins.c.run_pk, run_mfu_bins.c.mfu_bin, run_mfu_bins.c.n_measurements).where(
    run_mfu_bins.c.run_pk.in_(bindparam("run_pks", expanding=True))
)


def run_histograms(connection: Connection, *, run_pks: Sequence[int]) -> dict[int, dict[int, int]]:
    """Runs' MFU histograms ({run_pk: {bin: n}}, empty bins left out) in one query."""
    if not run_pks:
        return {}
    found: dict[int, dict[int, int]] = {}
    for run_pk, b, n in connection.execute(_RUN_HISTOGRAMS, {"run_pks": sorted(set(run_pks))}):
        if n > 0:
            found.setdefault(run_pk, {})[b] = n
    return found


def move_run_in_histograms(
    connection: Connection, *, run: RunRecord, old_bin: int | None, new_bin: int | None
) -> None:
    """Move the run's median from ``old_bin`` to ``new_bin`` (None: not counted) in the tenant
    histogram and, for catalog accelerators, the fleet histogram."""
    move_runs_in_histograms(connection, moves=[(run, old_bin, new_bin)])


def move_runs_in_histograms(
    connection: Connection, *, moves: Iterable[tuple[RunRecord, int | None, int | None]]
) -> None:
    """Move several runs' medians between bins ((run, old_bin, new_bin); None: not counted). The
    changes are summed per histogram row first (two runs crossing in opposite directions cancel out),
    then applied tenant rows first, then fleet rows, each in key order: one lock order for every
    transaction, so two ingests never deadlock."""
    tenant_rows, fleet_rows = histogram_moves(moves)
    _upsert_add(
        connection,
        tenant_mfu_bins,
        tenant_rows,
        keys=("tenant", "accelerator", "size_class", "mfu_bin"),
        counter="n_runs",
    )
    _upsert_add(
        connection,
        fleet_mfu_bins,
        fleet_rows,
        keys=("accelerator", "size_class", "mfu_bin"),
        counter="n_runs",
    )


def histogram_moves(
    moves: Iterable[tuple[RunRecord, int | None, int | None]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The tenant and fleet histogram rows (in key order, the lock order) whose ``n_runs`` change, with
    the change, for runs' medians moving between bins (see move_runs_in_histograms)."""
    tenant_deltas: dict[tuple[str, str, str, int], int] = {}
    fleet_deltas: dict[tuple[str, str, int], int] = {}
    for run, old_bin, new_bin in moves:
        if old_bin == new_bin:
            continue
        for b, delta in ((old_bin, -1), (new_bin, +1)):
            if b is None:
                continue
            key = (run.tenant, run.accelerator, run.size_class, b)
            tenant_deltas[key] = tenant_deltas.get(key, 0) + delta
            if run.in_fleet:
                fleet_key = (run.accelerator, run.size_class, b)
                fleet_deltas[fleet_key] = fleet_deltas.get(fleet_key, 0) + delta
    tenant_rows = [
        {"tenant": t, "accelerator": a, "size_class": c, "mfu_bin": b, "n_runs": d}
        for (t, a, c, b), d in sorted(tenant_deltas.items())
        if d
    ]
    fleet_rows = [
        {"accelerator": a, "size_class": c, "mfu_bin": b, "n_runs": d}
        for (a, c, b), d in sorted(fleet_deltas.items())
        if d
    ]
    return tenant_rows, fleet_rows


GroupKey = tuple[str, str]


def fleet_histograms(
    connection: Connection, *, accelerator: str | None = None, size_class: str | None = None
) -> dict[GroupKey, dict[int, int]]:
    """Histograms of run median MFU across tenants, by (accelerator, size class)."""
    t = fleet_mfu_bins
    query = select(t.c.accelerator, t.c.size_class, t.c.mfu_bin, t.c.n_runs).where(t.c.n_runs > 0)
    if accelerator is not None:
        query = query.where(t.c.accelerator == accelerator)
    if size_class is not None:
        query = query.where(t.c.size_class == size_class)
    return _group(connection, query)


def tenant_histograms(
    connection: Connection, *, tenant: str, accelerator: str | None = None, size_class: str | None = None
) -> dict[GroupKey, dict[int, int]]:
    t = tenant_mfu_bins
    query = select(t.c.accelerator, t.c.size_class, t.c.mfu_bin, t.c.n_runs).where(
        t.c.tenant == tenant, t.c.n_runs > 0
    )
    if accelerator is not None:
        query = query.where(t.c.accelerator == accelerator)
    if size_class is not None:
        query = query.where(t.c.size_class == size_class)
    return _group(connection, query)


def _group(connection: Connection, query: Select[Any]) -> dict[GroupKey, dict[int, int]]:
    """Rows (accelerator, size class, bin, runs) grouped by (accelerator, size class). Read straight
    from the driver's cursor (plain strings and integers, nothing to convert): the fleet histogram
    can be ~100,000 rows, and building Row objects for them would take longer than the query."""
    cursor = connection.execute(query).cursor
    assert cursor is not None
    groups: dict[GroupKey, dict[int, int]] = {}
    for accelerator, size_class, mfu_bin, n in cursor.fetchall():
        key = (accelerator, size_class)
        group = groups.get(key)
        if group is None:
            group = groups[key] = {}
        group[mfu_bin] = n
    return groups
