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
        **options: Any,
    ) -> Reporter:
        """A :class:`Reporter` for ``run_id``, or for the run ``run`` describes (a ``RunCreate`` body).

        With ``run`` the reporter's thread creates the run (so a service that is down does not hold
        the job); when the scheduler's job (cluster, scheduler_job_id, attempt) already has a running
        one, that run is resumed, and when that one ended, the next attempt is created.
        """
        return Reporter(self, run_id, run=run, **options)

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
