"""Python client of the training-efficiency service.

from teff_client import Client
reporter = Client("http://teff:8000", api_key=KEY).reporter(run_id)
reporter.log(step=step, step_time_seconds=dt, loss=loss)   # returns at once, never raises
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__version__ = "0.1.0"

from teff_client import models
from teff_client._async_client import AsyncClient
from teff_client._sync_client import Client as _BaseClient
from teff_client.errors import (
    BadRequest,
    Conflict,
    FieldError,
    Forbidden,
    IdempotencyInFlight,
    ImplausibleResult,
    NotAcceptable,
    NotFound,
    PayloadTooLarge,
    ProblemError,
    RateLimited,
    ServerError,
    ServiceUnavailable,
    ServiceUnreachable,
    TeffError,
    Unauthorized,
    UnknownReference,
    ValidationFailed,
)
from teff_client.reporter import Reporter
from teff_client.retry import RetryPolicy


class Client(_BaseClient):
    """:class:`teff_client._sync_client.Client` plus the training-loop reporter."""

    def reporter(
        self,
        run_id: str | None = None,
        *,
        run: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        **options: Any,
    ) -> Reporter:
        """A :class:`Reporter` for ``run_id``, or for the run ``run`` describes (a ``RunCreate`` body).

        With ``run``: the run is created; when the scheduler's job (cluster, scheduler_job_id,
        attempt) already has one (409 with ``existing_run_id``), that run is resumed instead, so a
        restarted process keeps reporting to the run it started.
        """
        if (run_id is None) == (run is None):
            raise TypeError("reporter() takes a run_id or a run description (run=...), not both")
        if run is not None:
            created = self.create_or_resume_run(run, idempotency_key=idempotency_key)
            run_id = created["id"]
            options.setdefault("global_batch_tokens", created["global_batch_tokens"])
        assert run_id is not None
        return Reporter(self, run_id, **options)

    def create_or_resume_run(
        self, run: Mapping[str, Any], *, idempotency_key: str | None = None
    ) -> models.RunRead:
        """Create the run, or read the one its (cluster, scheduler_job_id, attempt) already names."""
        try:
            return self.create_run(run, idempotency_key=idempotency_key)
        except Conflict as conflict:
            if conflict.existing_run_id is None:
                raise
            return self.get_run(conflict.existing_run_id)


__all__ = [
    "AsyncClient",
    "BadRequest",
    "Client",
    "Conflict",
    "FieldError",
    "Forbidden",
    "IdempotencyInFlight",
    "ImplausibleResult",
    "NotAcceptable",
    "NotFound",
    "PayloadTooLarge",
    "ProblemError",
    "RateLimited",
    "Reporter",
    "RetryPolicy",
    "ServerError",
    "ServiceUnavailable",
    "ServiceUnreachable",
    "TeffError",
    "Unauthorized",
    "UnknownReference",
    "ValidationFailed",
]
