"""The synchronous client: one typed method per operation of the contract (``openapi.yaml``).

The asynchronous twin, ``_async_client.py``, is generated from this file by
``scripts/generate_async.py``: edit here, then run that script.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
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


class Client:
    """A client of the training-efficiency service.

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
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.retry = retry or RetryPolicy()
        self._http = httpx.Client(
            base_url=self.base_url,
            timeout=timeout,
            headers=base_headers(api_key, headers),
            transport=transport,
        )

    # -- plumbing ---------------------------------------------------------------------------------

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def request(
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
                response = self._http.request(
                    method, path, params=clean_params(params), json=json, headers=request_headers
                )
            except httpx.TransportError as error:
                wait = decide_retry(policy, attempt, None, error)
                if wait is None:
                    raise ServiceUnreachable(f"{method} {self.base_url}{path}: {error!r}") from error
                time.sleep(wait)
                continue
            if response.status_code < 400:
                return response
            problem = problem_from_response(response)
            wait = decide_retry(policy, attempt, problem, None)
            if wait is None:
                raise problem
            time.sleep(wait)

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.request(method, path, **kwargs).json()

    # -- operations and catalog -------------------------------------------------------------------

    def get_health(self) -> dict[str, Any]:
        """``GET /healthz``: 200 while the process is up."""
        return cast(dict[str, Any], self._json("GET", "/healthz", retry=NO_RETRY))

    def get_readiness(self) -> dict[str, Any]:
        """``GET /readyz``: raises ServiceUnavailable while the database is unreachable."""
        return cast(dict[str, Any], self._json("GET", "/readyz", retry=NO_RETRY))

    def get_metrics(self) -> str:
        """``GET /metrics``: the Prometheus exposition text."""
        return self.request("GET", "/metrics", accept="text/plain").text

    def get_problem_type(self, slug: str) -> dict[str, Any]:
        """``GET /problems/{slug}``: what an error ``type`` means."""
        return cast(dict[str, Any], self._json("GET", f"/problems/{slug}"))

    def list_model_presets(self, family: str | None = None) -> models.ModelPresetList:
        """``GET /v1/models``."""
        return cast(models.ModelPresetList, self._json("GET", "/v1/models", params={"family": family}))

    def get_model_preset(self, preset_id: str) -> models.ModelPresetRead:
        """``GET /v1/models/{preset_id}``."""
        return cast(models.ModelPresetRead, self._json("GET", f"/v1/models/{preset_id}"))

    def list_accelerators(
        self, device_name: str | None = None, vendor: str | None = None
    ) -> models.AcceleratorList:
        """``GET /v1/hardware``; ``device_name`` looks a framework's name up (404 with close matches)."""
        params = {"device_name": device_name, "vendor": vendor}
        return cast(models.AcceleratorList, self._json("GET", "/v1/hardware", params=params))

    def get_accelerator(self, accelerator_id: str) -> models.AcceleratorRead:
        """``GET /v1/hardware/{accelerator_id}``."""
        return cast(models.AcceleratorRead, self._json("GET", f"/v1/hardware/{accelerator_id}"))

    # -- stateless estimates ----------------------------------------------------------------------

    def compute_flops(self, body: models.FlopsRequest | Mapping[str, Any]) -> models.FlopsRead:
        """``POST /v1/flops``."""
        return cast(models.FlopsRead, self._json("POST", "/v1/flops", json=body))

    def compute_mfu(self, body: models.MfuRequest | Mapping[str, Any]) -> models.MfuRead:
        """``POST /v1/mfu``."""
        return cast(models.MfuRead, self._json("POST", "/v1/mfu", json=body))

    def compute_mfu_batch(self, body: models.MfuBatchRequest | Mapping[str, Any]) -> models.MfuBatchRead:
        """``POST /v1/mfu/batch``: each item answers or fails on its own."""
        return cast(models.MfuBatchRead, self._json("POST", "/v1/mfu/batch", json=body))

    def estimate_training(
        self, body: models.TrainingEstimateRequest | Mapping[str, Any]
    ) -> models.TrainingEstimateRead:
        """``POST /v1/estimates/training``."""
        return cast(models.TrainingEstimateRead, self._json("POST", "/v1/estimates/training", json=body))

    def estimate_memory(self, body: models.MemoryRequest | Mapping[str, Any]) -> models.MemoryRead:
        """``POST /v1/memory``."""
        return cast(models.MemoryRead, self._json("POST", "/v1/memory", json=body))

    def predict_step_time(
        self, body: models.StepPredictionRequest | Mapping[str, Any]
    ) -> models.StepPredictionRead:
        """``POST /v1/predictions/step``."""
        return cast(models.StepPredictionRead, self._json("POST", "/v1/predictions/step", json=body))

    def predict_step_time_chart(
        self, body: models.StepPredictionRequest | Mapping[str, Any], media_type: str = "image/svg+xml"
    ) -> bytes:
        """``POST /v1/predictions/step`` as a chart (``image/svg+xml`` or ``image/png``)."""
        return self.request("POST", "/v1/predictions/step", json=body, accept=media_type).content

    def plan_parallelism(self, body: models.PlanRequest | Mapping[str, Any]) -> models.PlanRead:
        """``POST /v1/plans/parallelism``."""
        return cast(models.PlanRead, self._json("POST", "/v1/plans/parallelism", json=body))

    def compute_lr_schedule(
        self, body: models.LrScheduleRequest | Mapping[str, Any]
    ) -> models.LrScheduleRead:
        """``POST /v1/schedules/lr``."""
        return cast(models.LrScheduleRead, self._json("POST", "/v1/schedules/lr", json=body))

    def compute_lr_schedule_as(
        self, body: models.LrScheduleRequest | Mapping[str, Any], media_type: str = "text/csv"
    ) -> bytes:
        """``POST /v1/schedules/lr`` as ``text/csv``, ``image/svg+xml`` or ``image/png``."""
        return self.request("POST", "/v1/schedules/lr", json=body, accept=media_type).content

    def advise_learning_rate(self, body: models.LrAdviceRequest | Mapping[str, Any]) -> models.LrAdviceRead:
        """``POST /v1/advice/lr``."""
        return cast(models.LrAdviceRead, self._json("POST", "/v1/advice/lr", json=body))

    def advise_batch_size(
        self, body: models.BatchAdviceRequest | Mapping[str, Any]
    ) -> models.BatchAdviceRead:
        """``POST /v1/advice/batch``."""
        return cast(models.BatchAdviceRead, self._json("POST", "/v1/advice/batch", json=body))

    def advise_batch_size_chart(
        self, body: models.BatchAdviceRequest | Mapping[str, Any], media_type: str = "image/svg+xml"
    ) -> bytes:
        """``POST /v1/advice/batch`` as a chart."""
        return self.request("POST", "/v1/advice/batch", json=body, accept=media_type).content

    def compute_optimal_size(
        self, body: models.ComputeOptimalRequest | Mapping[str, Any]
    ) -> models.ComputeOptimalRead:
        """``POST /v1/compute-optimal``."""
        return cast(models.ComputeOptimalRead, self._json("POST", "/v1/compute-optimal", json=body))

    # -- runs -------------------------------------------------------------------------------------

    def create_run(
        self, body: models.RunCreate | Mapping[str, Any], *, idempotency_key: str | None = None
    ) -> models.RunRead:
        """``POST /v1/runs``. An ``Idempotency-Key`` (a new UUID unless given) goes with the request and
        every retry of it, so a retry after a lost answer returns the run the first try made."""
        key = idempotency_key or str(uuid.uuid4())
        return cast(
            models.RunRead, self._json("POST", "/v1/runs", json=body, headers={"Idempotency-Key": key})
        )

    def list_runs(
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
        return cast(models.RunPage, self._json("GET", "/v1/runs", params=params))

    def iter_runs(self, **filters: Any) -> Iterator[models.RunRead]:
        """Every run the filters of :meth:`list_runs` select, page after page."""
        cursor = filters.pop("cursor", None)
        while True:
            page = self.list_runs(**filters, cursor=cursor)
            yield from page["items"]
            cursor = page["next_cursor"]
            if cursor is None:
                return

    def get_run(self, run_id: str) -> models.RunRead:
        """``GET /v1/runs/{run_id}``."""
        return cast(models.RunRead, self._json("GET", f"/v1/runs/{run_id}"))

    def update_run(self, run_id: str, body: models.RunUpdate | Mapping[str, Any]) -> models.RunRead:
        """``PATCH /v1/runs/{run_id}``: status (once final, final), tags, budget, price."""
        return cast(models.RunRead, self._json("PATCH", f"/v1/runs/{run_id}", json=body))

    def finish_run(
        self, run_id: str, status: str = "finished", finished_at: str | None = None
    ) -> models.RunRead:
        """Mark a run ``finished`` or ``failed`` (a repeated call is a no-op on the service)."""
        body: dict[str, Any] = {"status": status}
        if finished_at is not None:
            body["finished_at"] = finished_at
        return self.update_run(run_id, body)

    def delete_run(self, run_id: str) -> None:
        """``DELETE /v1/runs/{run_id}``: the run and its measurements."""
        self.request("DELETE", f"/v1/runs/{run_id}")

    def add_measurements(
        self, run_id: str, measurements: Sequence[models.MeasurementIn | Mapping[str, Any]]
    ) -> models.MeasurementsAdded:
        """``POST /v1/runs/{run_id}/measurements``: all or nothing; a step the run has is ignored."""
        return cast(
            models.MeasurementsAdded,
            self._json("POST", f"/v1/runs/{run_id}/measurements", json=list(measurements)),
        )

    def list_measurements(
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
            models.MeasurementPage, self._json("GET", f"/v1/runs/{run_id}/measurements", params=params)
        )

    def iter_measurements(
        self, run_id: str, *, min_step: int | None = None, max_step: int | None = None, page_size: int = 1000
    ) -> Iterator[models.MeasurementRead]:
        """A run's whole measurement history (or a step range), page after page."""
        cursor: str | None = None
        while True:
            page = self.list_measurements(
                run_id, min_step=min_step, max_step=max_step, limit=page_size, cursor=cursor
            )
            yield from page["items"]
            cursor = page["next_cursor"]
            if cursor is None:
                return

    def get_run_efficiency(self, run_id: str) -> models.RunEfficiency:
        """``GET /v1/runs/{run_id}/efficiency``: MFU distribution, trend, series, rank, prediction."""
        return cast(models.RunEfficiency, self._json("GET", f"/v1/runs/{run_id}/efficiency"))

    def get_run_efficiency_chart(self, run_id: str, media_type: str = "image/svg+xml") -> bytes:
        """``GET /v1/runs/{run_id}/efficiency`` as a chart."""
        return self.request("GET", f"/v1/runs/{run_id}/efficiency", accept=media_type).content

    def add_events(
        self,
        run_id: str,
        events: models.EventIn | Mapping[str, Any] | Sequence[models.EventIn | Mapping[str, Any]],
    ) -> models.EventsAdded:
        """``POST /v1/runs/{run_id}/events``: lifecycle events, one or many (idempotent by ``event_id``)."""
        return cast(models.EventsAdded, self._json("POST", f"/v1/runs/{run_id}/events", json=events))

    def get_goodput(self, run_id: str) -> models.GoodputRead:
        """``GET /v1/runs/{run_id}/goodput``: productive time over allocated time, badput by kind."""
        return cast(models.GoodputRead, self._json("GET", f"/v1/runs/{run_id}/goodput"))

    def compare_runs(self, body: models.RunCompareRequest | Mapping[str, Any]) -> models.RunComparison:
        """``POST /v1/runs/compare``."""
        return cast(models.RunComparison, self._json("POST", "/v1/runs/compare", json=body))

    def get_fleet_mfu_stats(
        self, *, accelerator: str | None = None, size_class: str | None = None, run_id: str | None = None
    ) -> models.FleetMfuStats:
        """``GET /v1/stats/mfu``: fleet MFU percentiles (and where ``run_id`` stands)."""
        params = {"accelerator": accelerator, "size_class": size_class, "run_id": run_id}
        return cast(models.FleetMfuStats, self._json("GET", "/v1/stats/mfu", params=params))
