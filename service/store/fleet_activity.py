"""Fleet-wide activity counts for the operations metrics: runs running now and measurements stored,
across tenants (aggregates only, read from the runs' summary columns, never the measurement history)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, case, func, select

from service.store.tables import runs


@dataclass(frozen=True, slots=True)
class FleetActivity:
    running_runs: int
    measurements_stored: int


_ACTIVITY = select(
    func.coalesce(func.sum(case((runs.c.status == "running", 1), else_=0)), 0),
    func.coalesce(func.sum(runs.c.measurement_count), 0),
)


def fleet_activity(connection: Connection) -> FleetActivity:
    """Runs with status ``running`` and the sum of every run's ``measurement_count``, in one query."""
    running, stored = connection.execute(_ACTIVITY).one()
    return FleetActivity(running_runs=int(running), measurements_stored=int(stored))
