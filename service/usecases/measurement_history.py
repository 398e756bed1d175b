"""A run's measurement history, by step, one page at a time (the caller's keyset: the last step seen)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from service.store import measurements as measurements_store
from service.store.uow import Transaction
from service.usecases.runs import require_run


@dataclass(frozen=True, slots=True)
class MeasurementHistoryPage:
    rows: list[Any]  # the store's measurement rows, by step
    more: bool  # rows past this page


def measurement_history(
    transaction: Transaction,
    *,
    tenant: str,
    run_id: str,
    limit: int,
    after_step: int | None,
    min_step: int | None,
    max_step: int | None,
) -> MeasurementHistoryPage:
    """Up to ``limit`` measurements of the tenant's run after ``after_step``, within the step range
    (:class:`~service.usecases.errors.RunNotFound` for another tenant's run or an unknown id)."""
    run = require_run(transaction, tenant=tenant, run_id=run_id, with_tags=False)
    rows = measurements_store.list_measurements(
        transaction,
        run_pk=run.pk,
        limit=limit + 1,
        after_step=after_step,
        min_step=min_step,
        max_step=max_step,
    )
    return MeasurementHistoryPage(rows[:limit], len(rows) > limit)
