"""Reading one of a tenant's runs, the step every run use case starts with."""

from __future__ import annotations

from service.store import records as records_store
from service.store import runs as runs_store
from service.store.uow import Transaction
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
