"""Which calibration a prediction runs under: the model's fitted defaults, the request's constants, or
constants fitted on the run store.

Everything that predicts (``/v1/predictions/step``, ``/v1/plans/parallelism``, the ``predict`` form of
``/v1/estimates/training``, and the predicted-vs-measured part of ``/v1/runs/{id}/efficiency``) goes
through :func:`resolve_calibration` or :func:`stored_calibration`, and every answer echoes the
calibration used (:func:`calibration_read`).

A request's ``calibration`` may be:

* omitted: the defaults (``default (uncalibrated)``);
* constants (``{matmul_efficiency_scale, overlap_fraction}``): used as given (``request override``);
* ``"fleet"``: :func:`service.domain.performance.fit_calibration` over the most recent stored runs on
  the request's accelerator, every tenant's, that have a median MFU and a layout the model can
  predict (:func:`service.store.calibration_observations.calibration_observations`). Open like the endpoints themselves:
  only the fitted constants and counts leave, never a run;
* ``"tenant"``: the same over the API key's own runs (the key is checked with the ``read`` scope by
  the same dependency the run endpoints use, and only in this case).

A fit needs :data:`MIN_CALIBRATION_RUNS` runs; with fewer the defaults are used and the answer says so
(``source`` ``default (fallback from fleet)``; never a silent fallback). Fits are cached per database,
scope, tenant and accelerator for :data:`CACHE_TTL_SECONDS`: a cache of a pure function of the
database content (a minute-old fit is as good an answer), not correctness state, so in-process is fine;
one fit per key runs at a time. An older fit is still answered while a background thread refits it,
and a run's efficiency never fits on its own time: on a cold cache it answers with the defaults marked
``fit pending`` and starts the fit (it used to spend ~1 s fitting inside the request). Reading and
fitting happen in the threadpool; the constants path stays on the event loop and touches nothing.

The fit moves the matmul-efficiency scale only (overlap fractions keep the model's defaults): one
least-squares search over the runs, about a second for 500 runs of distinct shapes.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from fastapi import Request
from sqlalchemy import Engine
from starlette.concurrency import run_in_threadpool

from service.api.deps import API_KEY_HEADER, BEARER, get_engine, require_scope
from service.api.resolve import with_field_prefix
from service.api.schemas.calibration import (
    CalibrationIn,
    CalibrationRead,
    CalibrationRequest,
    CalibrationScopeName,
)
from service.domain.hardware import Accelerator
from service.domain.hardware_behaviour import NO_CALIBRATION, Calibration
from service.store.keys import Principal
from service.usecases.calibration import MIN_CALIBRATION_RUNS, StoredCalibration, stored_calibration

REQUEST_SOURCE = "request override"


# --------------------------------------------------------------------------------------------------
# Requests

_require_read = require_scope("read")

#: ``openapi_extra`` of the operations that take a ``calibration``: only ``"tenant"`` needs a key (401,
#: 403) and ``"fleet"``/``"tenant"`` read the database (503). The key stays undeclared as a security
#: requirement: the operations are open, and the published contract treats an operation with
#: ``security`` as one that needs a key.
CALIBRATION_PROBLEMS: dict[str, Any] = {"x-problems": ["401", "403", "503"]}


async def _reader(request: Request, engine: Engine) -> Principal:
    # The run endpoints' security schemes, called rather than declared as this operation's
    # dependencies: the constants path must not need a key or a database.
    x_api_key = await API_KEY_HEADER(request)
    bearer = await BEARER(request)
    principal: Principal = await run_in_threadpool(_require_read, engine, x_api_key, bearer)
    return principal


async def resolve_calibration(
    given: CalibrationRequest | None,
    *,
    accelerator: Accelerator,
    request: Request,
    field: str = "body.calibration",
) -> Calibration:
    """The calibration for a prediction on ``accelerator``: the defaults when ``given`` is None, the
    request's constants (a domain error names ``field``.<name>), or a fit on the run store for
    ``"fleet"`` / ``"tenant"`` (the latter authenticates the caller: 401/403 without a read key)."""
    if given is None:
        return NO_CALIBRATION
    if isinstance(given, CalibrationIn):
        scale, overlap = given.matmul_efficiency_scale, given.overlap_fraction
        return with_field_prefix(
            field,
            lambda: Calibration(
                matmul_efficiency_scale=scale,
                overlap_fraction=overlap,
                accelerator_id=accelerator.id,
                source=REQUEST_SOURCE,
            ),
        )
    scope: CalibrationScopeName = given
    async for engine in get_engine(request):  # admitted like every request that uses the database
        tenant = (await _reader(request, engine)).tenant if scope == "tenant" else None
        calibration: StoredCalibration = await run_in_threadpool(
            partial(stored_calibration, engine, scope=scope, tenant=tenant, accelerator=accelerator)
        )
    return calibration


def calibration_read(calibration: Calibration) -> CalibrationRead:
    if not isinstance(calibration, StoredCalibration):
        return CalibrationRead(
            matmul_efficiency_scale=calibration.matmul_efficiency_scale,
            overlap_fraction=calibration.overlap_fraction,
            source=calibration.source,
        )
    return CalibrationRead(
        matmul_efficiency_scale=calibration.matmul_efficiency_scale,
        overlap_fraction=calibration.overlap_fraction,
        source=calibration.label,
        scope=calibration.scope,
        accelerator=calibration.accelerator_id,
        fitted=calibration.fitted,
        fitted_on_runs=calibration.n_observations if calibration.fitted else calibration.usable_runs,
        skipped_runs=calibration.skipped_runs,
        minimum_runs=MIN_CALIBRATION_RUNS[calibration.scope],
        rms_error_mfu=calibration.rms_error,
        default_rms_error_mfu=calibration.default_rms_error,
        fitted_at=calibration.fitted_at,
        pending=calibration.pending,
        note=calibration.note,
    )
