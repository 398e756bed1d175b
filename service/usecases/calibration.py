"""Calibrating predictions on the run store: the fit policy (which runs, how many, how long a fit is
reused, where it runs) behind the ``"fleet"`` and ``"tenant"`` calibrations of a prediction.

A fit uses :func:`service.domain.performance.fit_calibration` over the most recent stored runs on an
accelerator that have a median MFU and a layout the model can predict
(:func:`service.store.calibration_observations.calibration_observations`): every tenant's for ``"fleet"`` (only the fitted
constants and counts leave, never a run), the caller's own for ``"tenant"``.

A fit needs :data:`MIN_CALIBRATION_RUNS` runs; with fewer the defaults are used and the answer says so
(``source`` ``default (fallback from fleet)``; never a silent fallback). Fits are cached per database,
scope, tenant and accelerator for :data:`CACHE_TTL_SECONDS`: a cache of a pure function of the
database content, not correctness state, so in-process is fine; one fit per key runs at a time. An
older fit is still answered while a background thread refits it, and a run's efficiency never waits
for a fit: on a cold cache it answers with the defaults marked ``fit pending`` and starts the fit.

The fit moves the matmul-efficiency scale only (overlap fractions keep the model's defaults): one
least-squares search over the runs, about a second for 500 runs of distinct shapes, so it runs in a
helper process (:mod:`service.usecases.helper_processes`) rather than holding the server's GIL.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any, Literal, cast
from weakref import WeakKeyDictionary

from service.domain.errors import DomainError
from service.domain.flops import Convention
from service.domain.hardware import Accelerator, Precision
from service.domain.hardware_behaviour import Calibration
from service.domain.parallel_layout import layout_from_knobs, stored_layout_knobs
from service.domain.performance import Cluster, PredictionInputs, fit_calibration
from service.domain.run import stored_accelerator, stored_model
from service.store import calibration_observations as calibration_observations_store
from service.store import records as records_store
from service.store.uow import Database, Transaction, UnitOfWork
from service.usecases.helper_processes import helper_pool

#: Whose runs a stored calibration is fitted on.
CalibrationScope = Literal["fleet", "tenant"]

logger = logging.getLogger(__name__)

#: Fewest runs a fit is made on (below it: the defaults, said so). A fleet fit is visible without a key
#: and crosses tenants, so it needs as many runs as a fleet group of /v1/stats/mfu (5): no fitted
#: constant is ever derived from fewer of other tenants' runs than the statistics would show.
MIN_CALIBRATION_RUNS: dict[str, int] = {"tenant": 3, "fleet": 5}
#: How long a fit is reused (per database, scope, tenant and accelerator).
CACHE_TTL_SECONDS = 60.0
#: Most fits kept per database (least recently used go first).
CACHE_MAX_ENTRIES = 1024

#: What a step prediction of a stored run assumes for what runs do not record (the defaults of
#: POST /v1/predictions/step).
STORED_RUN_ASSUMPTIONS = (
    "8 devices per node and 50 GB/s inter-node bandwidth per device, one way (one 400 Gb/s NDR NIC per "
    "GPU): runs do not record their network",
    "FlashAttention on; data-parallel and pipeline communication overlapped with compute, tensor-parallel "
    "not; mixed-precision Adam; dropout on (the defaults of POST /v1/predictions/step)",
    "runs recorded before 2026-12 kept eleven layout knobs (tp, pp, dp, cp, ep, micro-batch, interleaving, "
    "sequence parallelism, ZeRO stage, FSDP, recompute): the others take the defaults of "
    "POST /v1/predictions/step, and fsdp without a zero_stage is ZeRO-3 (full shard)",
)


# --------------------------------------------------------------------------------------------------
# Stored runs → prediction inputs


@dataclass(frozen=True, slots=True)
class StoredRunInputs:
    """A stored run's description as step-prediction inputs, or why it is not one: ``missing`` names
    the run fields it did not record, ``problem`` why its recorded values cannot be predicted."""

    inputs: PredictionInputs | None
    missing: tuple[str, ...] = ()
    problem: str | None = None


def stored_run_inputs(
    spec: Mapping[str, Any], *, precision: str, seq_len_tokens: int, device_count: int, convention: str
) -> StoredRunInputs:
    """The prediction inputs of a run as ``POST /v1/runs`` stored it (``spec``: model, hardware,
    parallelism and global batch as given, dp resolved), under the run's own FLOPs convention so that
    predicted and measured MFU count the same FLOPs. What runs do not record takes the defaults in
    :data:`STORED_RUN_ASSUMPTIONS`."""
    layout = stored_layout_knobs(spec.get("parallelism") or {})
    batch = spec.get("global_batch_sequences")
    missing = []
    if layout.get("micro_batch_sequences") is None:
        missing.append("parallelism.micro_batch_sequences")
    if batch is None:
        missing.append(
            "global_batch_sequences (or a global_batch_tokens that is a multiple of seq_len_tokens)"
        )
    if missing or batch is None:
        return StoredRunInputs(None, missing=tuple(missing))
    try:
        model = stored_model(spec)
        accelerator = stored_accelerator(spec)
        domain_layout = layout_from_knobs(layout)
        inputs = PredictionInputs(
            model,
            seq_len_tokens,
            Cluster(accelerator, device_count),
            domain_layout,
            batch,
            cast(Precision, precision),
            convention=cast(Convention, convention),
        )
    except DomainError as exc:
        return StoredRunInputs(None, problem=f"{exc.field}: {exc.message}" if exc.field else exc.message)
    except (KeyError, TypeError, ValueError) as exc:
        return StoredRunInputs(
            None, problem=f"the stored description cannot be read ({exc.__class__.__name__})"
        )
    return StoredRunInputs(inputs)


# --------------------------------------------------------------------------------------------------
# Fitting on stored runs


@dataclass(frozen=True, slots=True)
class StoredCalibration(Calibration):
    """A calibration asked over the run store: fitted (``fitted``) or, with too few usable runs, the
    defaults (``matmul_efficiency_scale`` 1, ``overlap_fraction`` None) with the reason in ``note``.
    ``usable_runs``: runs that could be predicted; ``skipped_runs``: runs read but left out;
    ``default_rms_error``: the defaults' RMS MFU error on the usable runs."""

    scope: CalibrationScope = "fleet"
    fitted: bool = False
    usable_runs: int = 0
    skipped_runs: int = 0
    default_rms_error: float | None = None
    fitted_at: datetime | None = None
    pending: bool = False
    note: str = ""

    @property
    def label(self) -> str:
        return f"{self.scope} fit" if self.fitted else f"default (fallback from {self.scope})"


def _runs_text(count: int, scope: CalibrationScope, accelerator_id: str) -> str:
    whose = "every tenant's" if scope == "fleet" else "this tenant's"
    return f"{count} run{'' if count == 1 else 's'} on {accelerator_id} ({whose})"


def _rms(errors: Sequence[float]) -> float | None:
    return math.sqrt(sum(e * e for e in errors) / len(errors)) if errors else None


def fit_stored_runs(
    observations: Sequence[calibration_observations_store.CalibrationObservation],
    *,
    scope: CalibrationScope,
    accelerator_id: str,
    now: datetime | None = None,
) -> StoredCalibration:
    """Fit the matmul-efficiency scale on the observations that the model can predict (the rest are
    counted as skipped); fewer than :data:`MIN_CALIBRATION_RUNS`: the defaults, with the reason."""
    fitted_at = now or datetime.now(UTC)
    pairs: list[tuple[PredictionInputs, float]] = []
    default_errors: list[float] = []
    skipped = 0
    for observation in observations:
        stored = stored_run_inputs(
            observation.spec,
            precision=observation.precision,
            seq_len_tokens=observation.seq_len_tokens,
            device_count=observation.device_count,
            convention=observation.convention,
        )
        if stored.inputs is None:
            skipped += 1
            continue
        try:
            predicted = stored.inputs.predict().mfu
        except DomainError:
            skipped += 1
            continue
        if not math.isfinite(predicted) or predicted <= 0:
            skipped += 1
            continue
        pairs.append((stored.inputs, observation.median_mfu))
        default_errors.append(predicted - observation.median_mfu)
    default_rms = _rms(default_errors)
    usable = len(pairs)
    minimum = MIN_CALIBRATION_RUNS[scope]
    if usable < minimum:
        return StoredCalibration(
            accelerator_id=accelerator_id,
            source=f"default (fallback from {scope}: {usable} of {minimum} runs needed)",
            scope=scope,
            fitted=False,
            usable_runs=usable,
            skipped_runs=skipped,
            default_rms_error=default_rms,
            fitted_at=fitted_at,
            note=f"Only {_runs_text(usable, scope, accelerator_id)} with a measured MFU and a layout the model "
            "can predict (parallelism.micro_batch_sequences and a global batch of whole sequences); a fit "
            f"needs {minimum}: the default constants are used.",
        )
    fitted = fit_calibration(pairs)
    rms = fitted.rms_error
    assert rms is not None and default_rms is not None
    return StoredCalibration(
        matmul_efficiency_scale=fitted.matmul_efficiency_scale,
        overlap_fraction=fitted.overlap_fraction,
        accelerator_id=accelerator_id,
        n_observations=usable,
        rms_error=rms,
        source=f"{scope} fit on {usable} runs of {accelerator_id} (least squares)",
        scope=scope,
        fitted=True,
        usable_runs=usable,
        skipped_runs=skipped,
        default_rms_error=default_rms,
        fitted_at=fitted_at,
        note=f"Fitted on {_runs_text(usable, scope, accelerator_id)}, the most recent with a measured MFU "
        f"and a predictable layout: matmul efficiency × {fitted.matmul_efficiency_scale:.3f}; RMS error "
        f"{100 * rms:.1f} MFU points (the defaults: {100 * default_rms:.1f}).",
    )


def _custom_fallback(scope: CalibrationScope) -> StoredCalibration:
    return StoredCalibration(
        accelerator_id=records_store.CUSTOM_ACCELERATOR,
        source=f"default (fallback from {scope}: custom accelerator)",
        scope=scope,
        fitted_at=datetime.now(UTC),
        note="Caller-described (custom) accelerators are not calibrated from stored runs (runs on "
        "different custom parts share no catalog id): the default constants are used.",
    )


# --------------------------------------------------------------------------------------------------
# The cache

CacheKey = tuple[str, str | None, str]


class FitCache:
    """Fits by (scope, tenant, accelerator), fresh for ``ttl`` seconds, at most ``max_entries`` of them.

    Thread-safe; one fit per key at a time (the others wait for it instead of repeating it). A fit
    older than ``ttl`` is still answered while a background thread refits it (stale while
    revalidate: a fit takes ~1 s, and no request should pay for it once one exists). A caller that
    must not wait at all (``wait=False``: the efficiency of a stored run) gets None on a cold key
    while the first fit runs in the background.
    """

    _STRIPES = 64

    def __init__(
        self,
        ttl: float = CACHE_TTL_SECONDS,
        max_entries: int = CACHE_MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self._clock = clock
        self._entries: OrderedDict[CacheKey, tuple[float, StoredCalibration]] = OrderedDict()
        self._lock = threading.Lock()
        self._fit_locks = [threading.Lock() for _ in range(self._STRIPES)]
        self._refitting: dict[CacheKey, threading.Thread] = {}

    def _lookup(self, key: CacheKey) -> tuple[StoredCalibration, bool] | None:
        """The cached fit and whether it is still fresh."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry[1], entry[0] > self._clock()

    def _store(self, key: CacheKey, value: StoredCalibration) -> None:
        with self._lock:
            self._entries[key] = (self._clock() + self.ttl, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def get(
        self,
        key: CacheKey,
        compute: Callable[[], StoredCalibration],
        *,
        wait: bool = True,
        compute_in_background: Callable[[], StoredCalibration] | None = None,
    ) -> StoredCalibration | None:
        """The fit for ``key``: fresh from the cache; stale, with a refit started in the background
        (``compute_in_background``, default ``compute``: it runs in another thread, so it must not
        use the caller's connection); or, on a cold key, fitted now (``wait``) or None with the fit
        started in the background."""
        found = self._lookup(key)
        if found is not None:
            value, fresh = found
            if not fresh:
                self._refit_in_background(key, compute_in_background or compute)
            return value
        if not wait:
            self._refit_in_background(key, compute_in_background or compute)
            return None
        with self._fit_locks[hash(key) % self._STRIPES]:
            found = self._lookup(key)
            if found is not None:
                return found[0]
            value = compute()
            self._store(key, value)
            return value

    def _refit_in_background(self, key: CacheKey, compute: Callable[[], StoredCalibration]) -> None:
        with self._lock:
            if key in self._refitting:
                return
            thread = threading.Thread(
                target=self._refit, args=(key, compute), name=f"calibration-fit-{key[2]}", daemon=True
            )
            self._refitting[key] = thread
        thread.start()

    def _refit(self, key: CacheKey, compute: Callable[[], StoredCalibration]) -> None:
        try:
            with self._fit_locks[hash(key) % self._STRIPES]:
                self._store(key, compute())
        except Exception:  # the next request tries again; the answer keeps the previous fit meanwhile
            logger.warning("background calibration fit for %s failed", key, exc_info=True)
        finally:
            with self._lock:
                self._refitting.pop(key, None)

    def join(self, timeout_seconds: float = 30.0) -> None:
        """Wait for the background fits under way (tests; shutdown)."""
        deadline = time.monotonic() + timeout_seconds
        while True:
            with self._lock:
                threads = list(self._refitting.values())
            if not threads:
                return
            for thread in threads:
                thread.join(max(0.0, deadline - time.monotonic()))
            if time.monotonic() >= deadline:
                return

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


_caches: WeakKeyDictionary[Database, FitCache] = WeakKeyDictionary()
_caches_lock = threading.Lock()


def fit_cache(engine: Database) -> FitCache:
    """The fit cache of one database (apps and tests in one process may use several)."""
    with _caches_lock:
        cache = _caches.get(engine)
        if cache is None:
            cache = _caches[engine] = FitCache()
        return cache


def _fit_from_store(
    engine: Database,
    connection: Transaction | None,
    *,
    scope: CalibrationScope,
    tenant: str | None,
    accelerator_id: str,
) -> StoredCalibration:
    if connection is not None:
        observations = calibration_observations_store.calibration_observations(
            connection, accelerator=accelerator_id, tenant=tenant
        )
    else:
        with UnitOfWork(engine, write=False) as uow:
            observations = calibration_observations_store.calibration_observations(
                uow.connection, accelerator=accelerator_id, tenant=tenant
            )
    return _fit_in_helper_process(observations, scope=scope, accelerator_id=accelerator_id)


_fit_pool: ProcessPoolExecutor | None = None
_fit_pool_lock = threading.Lock()


def _fit_in_helper_process(
    observations: list[calibration_observations_store.CalibrationObservation],
    *,
    scope: CalibrationScope,
    accelerator_id: str,
) -> StoredCalibration:
    """:func:`fit_stored_runs` in a helper process (one per server process, started on first use).

    A fit is about a second of pure Python: in the server's process it would hold the GIL against
    every request. In a process of its own it uses another core and the server's threads only wait
    on a pipe. Should the helper die, it is restarted for the
    next fit, and this one runs here.
    """
    global _fit_pool
    with _fit_pool_lock:
        if _fit_pool is None:
            _fit_pool = helper_pool()
        pool = _fit_pool
    try:
        return pool.submit(fit_stored_runs, observations, scope=scope, accelerator_id=accelerator_id).result()
    except BrokenProcessPool:
        logger.warning("the calibration helper process died; fitting in the server process this once")
        with _fit_pool_lock:
            if _fit_pool is pool:
                _fit_pool = None
        return fit_stored_runs(observations, scope=scope, accelerator_id=accelerator_id)


def _pending(scope: CalibrationScope, accelerator_id: str) -> StoredCalibration:
    return StoredCalibration(
        accelerator_id=accelerator_id,
        source=f"default (fallback from {scope}: fit pending)",
        scope=scope,
        fitted_at=None,
        pending=True,
        note=f"The {scope} calibration for {accelerator_id} is being fitted in the background (about a "
        "second); until it is ready the default constants are used. Ask again shortly.",
    )


def stored_calibration(
    engine: Database,
    *,
    scope: CalibrationScope,
    tenant: str | None,
    accelerator: Accelerator,
    connection: Transaction | None = None,
    wait: bool = True,
) -> StoredCalibration:
    """The calibration fitted on ``scope``'s stored runs on ``accelerator`` (cached; blocking: call it
    in the threadpool). ``tenant`` is the caller's tenant for scope ``tenant``, None for ``fleet``.
    ``connection``: read through this one (a request's unit of work) instead of a new one.
    ``wait=False``: never fit on the caller's time; with no fit cached yet, the defaults marked
    "fit pending" while the first fit runs in the background."""
    if (scope == "tenant") != (tenant is not None):
        raise ValueError("scope tenant needs the caller's tenant; scope fleet none")
    if accelerator.is_custom:
        return _custom_fallback(scope)
    accelerator_id = accelerator.id
    fit = partial(_fit_from_store, engine, scope=scope, tenant=tenant, accelerator_id=accelerator_id)
    found = fit_cache(engine).get(
        (scope, tenant, accelerator_id),
        partial(fit, connection),
        wait=wait,
        compute_in_background=partial(fit, None),
    )
    return found if found is not None else _pending(scope, accelerator_id)
