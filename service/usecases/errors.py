"""What a use case refuses, in the application's words; ``service.api.handlers`` answers each with
its problem document (404 ``not-found``, 401 ``invalid-api-key``), so a use case never names HTTP."""

from __future__ import annotations

from collections.abc import Sequence


class RunNotFound(Exception):
    """No run of the caller's tenant has this id (never recorded, deleted, or another tenant's: the
    two are not told apart)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"no run {run_id}")
        self.run_id = run_id


class RunsNotFound(Exception):
    """Several runs asked for together, some of them not the caller's tenant's (listed, in order)."""

    def __init__(self, run_ids: Sequence[str]) -> None:
        super().__init__(f"no runs {', '.join(run_ids)}")
        self.run_ids = list(run_ids)


class KeyRevoked(Exception):
    """The request's API key was revoked after this process cached it: nothing was written."""

    def __init__(self, key_id: int) -> None:
        super().__init__(f"key {key_id} is revoked")
        self.key_id = key_id


class JobAttemptExists(Exception):
    """The tenant already has a run for this (cluster, scheduler job, attempt)."""

    def __init__(
        self, existing_run_id: str, *, cluster: str | None, scheduler_job_id: str, attempt: int
    ) -> None:
        super().__init__(f"run {existing_run_id} records this job attempt")
        self.existing_run_id = existing_run_id
        self.cluster = cluster
        self.scheduler_job_id = scheduler_job_id
        self.attempt = attempt


class IdempotencyKeyReused(Exception):
    """The Idempotency-Key was used with another request."""


class IdempotencyInFlight(Exception):
    """The request that claimed this Idempotency-Key has not finished (within the wait allowed)."""
