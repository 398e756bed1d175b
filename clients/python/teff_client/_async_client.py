"""The asyncio client (generated: do not edit): one typed method per operation of the contract (``openapi.yaml``).

The asynchronous twin, ``_async_client.py``, is generated from this file by
``scripts/generate_async.py``: edit here, then run that script.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Self, cast

import httpx

from teff_client import models
from teff_client._common import (
    DEFAULT_TIMEOUT_SECONDS,
    JSON,
    PROBLEM_OR_JSON,
    base_headers,
    clean_params,
    decide_retry,
)
from teff_client.errors import ServiceUnreachable, problem_from_response
from teff_client.retry import NO_RETRY, RetryPolicy


class AsyncClient:
    """An asyncio client of the training-efficiency service.

    ``api_key`` goes out as ``Authorization: Bearer``; the runs and statistics endpoints need one.
    429, 502, 503, 504 and connection failures are retried (see :class:`RetryPolicy`); every error
    answer raises a :class:`~teff_client.errors.ProblemError` subclass.
    """

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        api_key: str | None = None,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT_SECONDS,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.retry = retry or RetryPolicy()
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=timeout,
            headers=base_headers(api_key, headers),
            transport=transport,
        )

    # -- plumbing ---------------------------------------------------------------------------------

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        accept: str = JSON,
        retry: RetryPolicy | None = None,
    ) -> httpx.Response:
        """Send one operation (retrying as the policy says); raise its problem on an error answer."""
        policy = retry or self.retry
        request_headers = {"Accept": accept if accept == JSON else f"{accept}, {PROBLEM_OR_JSON}"}
        request_headers.update(headers or {})
        attempt = 0
        while True:
            attempt += 1
            try:
                response = await self._http.request(
                    method, path, params=clean_params(params), json=json, headers=request_headers
                )
            except httpx.TransportError as error:
                wait = decide_retry(policy, attempt, None, error)
                if wait is None:
                    raise ServiceUnreachable(f"{method} {self.base_url}{path}: {error!r}") from error
                await asyncio.sleep(wait)
                continue
            if response.status_code < 400:
                return response
            problem = problem_from_response(response)
            wait = decide_retry(policy, attempt, problem, None)
            if wait is None:
                raise problem
            await asyncio.sleep(wait)

    async def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return (await self.request(method, path, **kwargs)).json()

    # -- operations and catalog -------------------------------------------------------------------

    async def get_health(self) -> dict[str, Any]:
        """``GET /healthz``: 200 while the process is up."""
        return cast(dict[str, Any], await self._json("GET", "/healthz", retry=NO_RETRY))

    async def get_readiness(self) -> dict[str, Any]:
        """``GET /readyz``: raises ServiceUnavailable while the database is unreachable."""
        return cast(dict[str, Any], await self._json("GET", "/readyz", retry=NO_RETRY))

    async def get_metrics(self) -> str:
        """``GET /metrics``: the Prometheus exposition text."""
        return (await self.request("GET", "/metrics", accept="text/plain")).text

    async def get_problem_type(self, slug: str) -> dict[str, Any]:
        """``GET /problems/{slug}``: what an error ``type`` means."""
        return cast(dict[str, Any], await self._json("GET", f"/problems/{slug}"))

    async def list_model_presets(self, family: str | None = None) -> models.ModelPresetList:
        """``GET /v1/models``."""
        return cast(models.ModelPresetList, await self._json("GET", "/v1/models", params={"family": family}))

    async def get_model_preset(self, preset_id: str) -> models.ModelPresetRead:
        """``GET /v1/models/{preset_id}``."""
        return cast(models.ModelPresetRead, await self._json("GET", f"/v1/models/{preset_id}"))

    async def list_accelerators(
        self, device_name: str | None = None, vendor: str | None = None
    ) -> models.AcceleratorList:
        """``GET /v1/hardware``; ``device_name`` looks a framework's name up (404 with close matches)."""
        params = {"device_name": device_name, "vendor": vendor}
        return cast(models.AcceleratorList, await self._json("GET", "/v1/hardware", params=params))

    async def get_accelerator(self, accelerator_id: str) -> models.AcceleratorRead:
        """``GET /v1/hardware/{accelerator_id}``."""
        return cast(models.AcceleratorRead, await self._json("GET", f"/v1/hardware/{accelerator_id}"))

    # -- stateless estimates ----------------------------------------------------------------------

    async def compute_flops(self, body: models.FlopsRequest | Mapping[str, Any]) -> models.FlopsRead:
        """``POST /v1/flops``."""
        return cast(models.FlopsRead, await self._json("POST", "/v1/flops", json=body))

    async def compute_mfu(self, body: models.MfuRequest | Mapping[str, Any]) -> models.MfuRead:
        """``POST /v1/mfu``."""
        return cast(models.MfuRead, await self._json("POST", "/v1/mfu", json=body))

    async def compute_mfu_batch(
        self, body: models.MfuBatchRequest | Mapping[str, Any]
    ) -> models.MfuBatchRead:
        """``POST /v1/mfu/batch``: each item answers or fails on its own."""
        return cast(models.MfuBatchRead, await self._json("POST", "/v1/mfu/batch", json=body))

    async def estimate_training(
        self, body: models.TrainingEstimateRequest | Mapping[str, Any]
    ) -> models.TrainingEstimateRead:
        """``POST /v1/estimates/training``."""
        return cast(
            models.TrainingEstimateRead, await self._json("POST", "/v1/estimates/training", json=body)
        )

    async def estimate_memory(self, body: models.MemoryRequest | Mapping[str, Any]) -> models.MemoryRead:
        """``POST /v1/memory``."""
        return cast(models.MemoryRead, await self._json("POST", "/v1/memory", json=body))

    async def predict_step_time(
        self, body: models.StepPredictionRequest | Mapping[str, Any]
    ) -> models.StepPredictionRead:
        """``POST /v1/predictions/step``."""
        return cast(models.StepPredictionRead, await self._json("POST", "/v1/predictions/step", json=body))

    async def predict_step_time_chart(
        self, body: models.StepPredictionRequest | Mapping[str, Any], media_type: str = "image/svg+xml"
    ) -> bytes:
        """``POST /v1/predictions/step`` as a chart (``image/svg+xml`` or ``image/png``)."""
        return (await self.request("POST", "/v1/predictions/step", json=body, accept=media_type)).content

    async def plan_parallelism(self, body: models.PlanRequest | Mapping[str, Any]) -> models.PlanRead:
        """``POST /v1/plans/parallelism``."""
        return cast(models.PlanRead, await self._json("POST", "/v1/plans/parallelism", json=body))

    async def compute_lr_schedule(
        self, body: models.LrScheduleRequest | Mapping[str, Any]
    ) -> models.LrScheduleRead:
        """``POST /v1/schedules/lr``."""
        return cast(models.LrScheduleRead, await self._json("POST", "/v1/schedules/lr", json=body))

    async def compute_lr_schedule_as(
        self, body: models.LrScheduleRequest | Mapping[str, Any], media_type: str = "text/csv"
    ) -> bytes:
        """``POST /v1/schedules/lr`` as ``text/csv``, ``image/svg+xml`` or ``image/png``."""
        return (await self.request("POST", "/v1/schedules/lr", json=body, accept=media_type)).content

    async def advise_learning_rate(
        self, body: models.LrAdviceRequest | Mapping[str, Any]
    ) -> models.LrAdviceRead:
        """``POST /v1/advice/lr``."""
        return cast(models.LrAdviceRead, await self._json("POST", "/v1/advice/lr", json=body))

    async def advise_batch_size(
        self, body: models.BatchAdviceRequest | Mapping[str, Any]
    ) -> models.BatchAdviceRead:
        """``POST /v1/advice/batch``."""
        return cast(models.BatchAdviceRead, await self._json("POST", "/v1/advice/batch", json=body))

    async def advise_batch_size_chart(
        self, body: models.BatchAdviceRequest | Mapping[str, Any], media_type: str = "image/svg+xml"
    ) -> bytes:
        """``POST /v1/advice/batch`` as a chart."""
        return (await self.request("POST", "/v1/advice/batch", json=body, accept=media_type)).content

    async def compute_optimal_size(
        self, body: models.ComputeOptimalRequest | Mapping[str, Any]
    ) -> models.ComputeOptimalRead:
        """``POST /v1/compute-optimal``."""
        return cast(models.ComputeOptimalRead, await self._json("POST", "/v1/compute-optimal", json=body))

    # -- runs -------------------------------------------------------------------------------------

    async def create_run(
        self, body: models.RunCreate | Mapping[str, Any], *, idempotency_key: str | None = None
    ) -> models.RunRead:
        """``POST /v1/runs``. An ``Idempotency-Key`` (a new UUID unless given) goes with the request and
        every retry of it, so a retry after a lost answer returns the run the first try made."""
        key = idempotency_key or str(uuid.uuid4())
        return cast(
            models.RunRead, await self._json("POST", "/v1/runs", json=body, headers={"Idempotency-Key": key})
        )

    async def list_runs(
        self,
        *,
        accelerator: str | None = None,
        model: str | None = None,
        min_parameters: float | None = None,
        max_parameters: float | None = None,
        tag: str | Sequence[str] | None = None,
        cluster: str | None = None,
        status: str | None = None,
        started_after: str | None = None,
        started_before: str | None = None,
        min_mfu: float | None = None,
        max_mfu: float | None = None,
        sort: str | None = None,
        order: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> models.RunPage:
        """``GET /v1/runs``: one page; pass its ``next_cursor`` back for the next."""
        params = {key: value for key, value in locals().items() if key != "self"}
        return cast(models.RunPage, await self._json("GET", "/v1/runs", params=params))

    async def iter_runs(self, **filters: Any) -> AsyncIterator[models.RunRead]:
        """Every run the filters of :meth:`list_runs` select, page after page."""
        cursor = filters.pop("cursor", None)
        while True:
            page = await self.list_runs(**filters, cursor=cursor)
            for item in page["items"]:
                yield item
            cursor = page["next_cursor"]
            if cursor is None:
                return

    async def get_run(self, run_id: str) -> models.RunRead:
        """``GET /v1/runs/{run_id}``."""
        return cast(models.RunRead, await self._json("GET", f"/v1/runs/{run_id}"))

    async def update_run(self, run_id: str, body: models.RunUpdate | Mapping[str, Any]) -> models.RunRead:
        """``PATCH /v1/runs/{run_id}``: status (once final, final), tags, budget, price."""
        return cast(models.RunRead, await self._json("PATCH", f"/v1/runs/{run_id}", json=body))

    async def finish_run(
        self, run_id: str, status: str = "finished", finished_at: str | None = None
    ) -> models.RunRead:
        """Mark a run ``finished`` or ``failed`` (a repeated call is a no-op on the service)."""
        body: dict[str, Any] = {"status": status}
        if finished_at is not None:
            body["finished_at"] = finished_at
        return await self.update_run(run_id, body)

    async def delete_run(self, run_id: str) -> None:
        """``DELETE /v1/runs/{run_id}``: the run and its measurements."""
        await self.request("DELETE", f"/v1/runs/{run_id}")

    async def add_measurements(
        self, run_id: str, measurements: Sequence[models.MeasurementIn | Mapping[str, Any]]
    ) -> models.MeasurementsAdded:
        """``POST /v1/runs/{run_id}/measurements``: all or nothing; a step the run has is ignored."""
        return cast(
            models.MeasurementsAdded,
            await self._json("POST", f"/v1/runs/{run_id}/measurements", json=list(measurements)),
        )

    async def list_measurements(
        self,
        run_id: str,
        *,
        min_step: int | None = None,
        max_step: int | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> models.MeasurementPage:
        """``GET /v1/runs/{run_id}/measurements``: one page, by step."""
        params = {"min_step": min_step, "max_step": max_step, "limit": limit, "cursor": cursor}
        return cast(
            models.MeasurementPage, await self._json("GET", f"/v1/runs/{run_id}/measurements", params=params)
        )

    async def iter_measurements(
        self, run_id: str, *, min_step: int | None = None, max_step: int | None = None, page_size: int = 1000
    ) -> AsyncIterator[models.MeasurementRead]:
        """A run's whole measurement history (or a step range), page after page."""
        cursor: str | None = None
        while True:
            page = await self.list_measurements(
                run_id, min_step=min_step, max_step=max_step, limit=page_size, cursor=cursor
            )
            for item in page["items"]:
                yield item
            cursor = page["next_cursor"]
            if cursor is None:
                return

    async def get_run_efficiency(self, run_id: str) -> models.RunEfficiency:
        """``GET /v1/runs/{run_id}/efficiency``: MFU distribution, trend, series, rank, prediction."""
        return cast(models.RunEfficiency, await self._json("GET", f"/v1/runs/{run_id}/efficiency"))

    async def get_run_efficiency_chart(self, run_id: str, media_type: str = "image/svg+xml") -> bytes:
        """``GET /v1/runs/{run_id}/efficiency`` as a chart."""
        return (await self.request("GET", f"/v1/runs/{run_id}/efficiency", accept=media_type)).content

    async def add_events(
        self,
        run_id: str,
        events: models.EventIn | Mapping[str, Any] | Sequence[models.EventIn | Mapping[str, Any]],
    ) -> models.EventsAdded:
        """``POST /v1/runs/{run_id}/events``: lifecycle events, one or many (idempotent by ``event_id``)."""
        return cast(models.EventsAdded, await self._json("POST", f"/v1/runs/{run_id}/events", json=events))

    async def get_goodput(self, run_id: str) -> models.GoodputRead:
        """``GET /v1/runs/{run_id}/goodput``: productive time over allocated time, badput by kind."""
        return cast(models.GoodputRead, await self._json("GET", f"/v1/runs/{run_id}/goodput"))

    async def compare_runs(self, body: models.RunCompareRequest | Mapping[str, Any]) -> models.RunComparison:
        """``POST /v1/runs/compare``."""
        return cast(models.RunComparison, await self._json("POST", "/v1/runs/compare", json=body))

    async def get_fleet_mfu_stats(
        self, *, accelerator: str | None = None, size_class: str | None = None, run_id: str | None = None
    ) -> models.FleetMfuStats:
        """``GET /v1/stats/mfu``: fleet MFU percentiles (and where ``run_id`` stands)."""
        params = {"accelerator": accelerator, "size_class": size_class, "run_id": run_id}
        return cast(models.FleetMfuStats, await self._json("GET", "/v1/stats/mfu", params=params))
