"""Measurement ingest, the HTTP side: parse a body, compute each measurement's MFU, and hand the rows
to the app's group-commit writer (the transaction: :mod:`service.usecases.measurements`).

The path of one request (``MeasurementIngest.add``):

1. The body is validated straight from its JSON bytes (one object or a list of up to
   ``max_measurements_per_request``; all or nothing: the first invalid item is a 422 naming it).
2. The run's compute facts (FLOPs per token, part and peak, device count, sequence length) come from a
   process-local cache or one read. They never change after creation, so a cached copy is exact.
3. Every item's tokens/s, MFU, HFU, TFLOP/s per device are computed with the domain (an MFU above 1
   is a 422 that stores nothing). Bodies over ``INLINE_BODY_BYTES`` are parsed and computed in the
   threadpool, so that a 10,000-item request never stalls the event loop.
4. The writer commits the jobs queued meanwhile in one transaction and answers each after the
   commit; a key revoked since it was cached is a 401, a run deleted meanwhile a 404.
"""

from __future__ import annotations

import dataclasses
import gc
import threading
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache, partial
from typing import Annotated, Any, TypeVar

from pydantic import Field, TypeAdapter, ValidationError
from sqlalchemy import Engine
from starlette.concurrency import run_in_threadpool

from service.api import json_body
from service.api.handlers import validation_problem
from service.api.presenters.runs import run_summary
from service.api.problems import invalid_api_key
from service.api.resolve import with_field_prefix
from service.api.schemas.measurements import MeasurementItem, MeasurementsAdded
from service.api.services.runs import now_utc
from service.domain import hardware, mfu
from service.domain.errors import DomainError
from service.domain.run import stored_accelerator
from service.observability import MEASUREMENTS_INGESTED, observe_ingest_batch
from service.store import measurements as measurements_store
from service.store import records as records_store
from service.store import runs as store
from service.store.group_commit import GroupCommitWriter
from service.store.keys import Principal
from service.store.uow import UnitOfWork
from service.usecases.errors import KeyRevoked, RunNotFound
from service.usecases.measurements import Added, MeasurementJob, record_batch

#: Bodies above this (about 100 items, a millisecond of work) are parsed and computed in the threadpool.
INLINE_BODY_BYTES = 32 * 1024
#: Rows per group-commit transaction at most (a batch always takes at least one whole request): batching
#: shares a transaction's fixed cost among small requests; a large one gains nothing from company, and
#: its parsing overlaps the previous one's writing only if they are not in one batch.
MAX_BATCH_ROWS = 2_000
#: SQLite: requests of up to this many rows are committed on the event loop (group_commit's inline
#: batches), a few milliseconds of loop at most.
INLINE_COMMIT_ROWS = 64
#: Runs whose compute facts are cached per process.
RUN_CACHE_ENTRIES = 4096

T = TypeVar("T")


# --------------------------------------------------------------------------------------------------
# Parse and compute


@lru_cache(maxsize=8)
def _adapters(max_items: int) -> tuple[TypeAdapter[Any], TypeAdapter[Any]]:
    many: TypeAdapter[Any] = TypeAdapter(
        Annotated[list[MeasurementItem], Field(min_length=1, max_length=max_items)]
    )
    one: TypeAdapter[Any] = TypeAdapter(MeasurementItem)
    return many, one


def parse_measurements(body: bytes, *, max_items: int) -> list[dict[str, Any]]:
    """One measurement object or a list of them, decoded by the service's one JSON decoder (duplicate
    keys refused: service.api.json_body) and validated as plain dicts (all or nothing)."""
    many, one = _adapters(max_items)
    decoded = json_body.loads(body)
    try:
        parsed = (
            many.validate_python(decoded) if isinstance(decoded, list) else [one.validate_python(decoded)]
        )
    except ValidationError as exc:
        raise validation_problem(exc, root="body") from None
    return parsed


#: The rate forms, in the order a throughput is read (validated: exactly one form is given).
_RATE_FORMS: dict[
    str, type[mfu.GlobalTokensPerSecond | mfu.TokensPerSecondPerDevice | mfu.SamplesPerSecond]
] = {
    "tokens_per_second": mfu.GlobalTokensPerSecond,
    "tokens_per_second_per_device": mfu.TokensPerSecondPerDevice,
    "sequences_per_second": mfu.SamplesPerSecond,
}


def _sent_form(throughput: dict[str, Any]) -> tuple[str, float]:
    """The form sent and its value."""
    for form in _RATE_FORMS:
        value = throughput.get(form)
        if value is not None:
            return form, value
    return "step_time_seconds", throughput["step_time_seconds"]


def _domain_throughput(throughput: dict[str, Any]) -> mfu.Throughput:
    """The domain's throughput for the one sent."""
    form, value = _sent_form(throughput)
    if form == "step_time_seconds":
        return mfu.StepTime(
            value,
            global_batch_tokens=throughput.get("global_batch_tokens"),
            global_batch_sequences=throughput.get("global_batch_sequences"),
        )
    return _RATE_FORMS[form](value)


def run_accelerator(run: records_store.RunRecord) -> hardware.Accelerator:
    """The run's part as resolved at creation, with the peak stored then: a later catalog change
    never changes the MFU of the run's later measurements."""
    stored_peak: dict[str, Any] = {f"{run.precision}_tflops": run.peak_tflops_per_device}
    try:
        part = stored_accelerator(run.spec)
    except DomainError:  # no longer in the catalog
        return hardware.custom_accelerator(
            name=run.accelerator_name, peak_tflops={run.precision: run.peak_tflops_per_device}
        )
    return dataclasses.replace(part, **stored_peak)


def measurement_values(
    run: records_store.RunRecord,
    items: list[dict[str, Any]],
    *,
    now: datetime,
    accelerator: hardware.Accelerator | None = None,
) -> list[tuple[Any, ...]]:
    """Value tuples for the measurements table, in ``MEASUREMENT_COLUMNS`` order (a test checks it):
    each item's global tokens/s (the domain's ``global_rate_scale``), then MFU, HFU, achieved TFLOP/s
    and tokens/s per device from the domain's ``RateFactors`` of the first item."""
    if accelerator is None:
        accelerator = run_accelerator(run)
    device_count = run.device_count
    seq_len = run.seq_len_tokens

    def full(throughput: mfu.Throughput) -> mfu.MfuResult:
        return mfu.compute_mfu(
            model_flops_per_token=run.model_flops_per_token,
            hardware_flops_per_token=run.hardware_flops_per_token,
            accelerator=accelerator,
            device_count=device_count,
            precision=run.precision,  # type: ignore[arg-type]
            throughput=throughput,
            seq_len_tokens=seq_len,
            convention=run.convention,
        )

    # The first item through the domain in full; its answer gives the per-(token/s) factors, since MFU,
    # HFU, achieved TFLOP/s and tokens/s per device are all proportional to the global rate.
    factors = mfu.RateFactors.of(
        with_field_prefix("body[0]", lambda: full(_domain_throughput(items[0]["throughput"])))
    )
    # Each item's global tokens/s from the domain's scale of its form (and batch): one per distinct
    # (form, batch) in the request, then a multiply or a divide per item (mfu.global_rate_scale).
    scales: dict[tuple[str, int | None, int | None], tuple[float, bool]] = {}
    values: list[tuple[Any, ...]] = []
    run_pk = run.pk
    for index, item in enumerate(items):
        throughput = item["throughput"]
        if len(throughput) == 1:  # a rate form, alone (as validated)
            ((form, value),) = throughput.items()
            batch_tokens = batch_sequences = None
        else:
            form, value = _sent_form(throughput)
            batch_tokens = throughput.get("global_batch_tokens")
            batch_sequences = throughput.get("global_batch_sequences")
        scale_key = (form, batch_tokens, batch_sequences)
        scaled = scales.get(scale_key)
        if scaled is None:
            scaled = with_field_prefix(
                f"body[{index}]",
                partial(
                    mfu.global_rate_scale,
                    _domain_throughput(throughput),
                    device_count=device_count,
                    seq_len_tokens=seq_len,
                ),
            )
            scales[scale_key] = scaled
        scale, inverse = scaled
        rate = scale / value if inverse else value * scale
        if not factors.plausible(rate):  # the domain explains why (likely causes, corrected values)
            with_field_prefix(f"body[{index}]", partial(full, _domain_throughput(throughput)))
        get = item.get
        values.append(
            (
                run_pk,
                item["step"],
                get("time") or now,
                form,
                value,
                batch_tokens,
                batch_sequences,
                rate,
                rate * factors.tokens_per_second_per_device,
                rate * factors.mfu,
                rate * factors.hfu,
                rate * factors.achieved_tflops_per_device,
                get("loss"),
                get("memory_bytes"),
                get("grad_norm_sq_small"),
                get("grad_norm_sq_big"),
                get("batch_small_tokens"),
                get("batch_big_tokens"),
            )
        )
    return values


_gc_lock = threading.Lock()
_gc_pausers = 0
_gc_enabled_before = True


def _gc_paused(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``function`` with the cyclic garbage collector held off (nested and concurrent calls counted).

    A large body keeps tens of thousands of container objects alive at once, and each time that many
    survive CPython runs a full collection over the whole heap. They hold no cycles and are freed by
    reference counting when the request ends, so the pause loses nothing. Only around the CPU-bound
    parsing and computing: a pause held across the wait for the writer would overlap from request to
    request under sustained load, and the collector would never run. A collector someone else disabled
    stays disabled."""
    global _gc_pausers, _gc_enabled_before
    with _gc_lock:
        if _gc_pausers == 0:
            _gc_enabled_before = gc.isenabled()
            gc.disable()
        _gc_pausers += 1
    try:
        return function(*args, **kwargs)
    finally:
        with _gc_lock:
            _gc_pausers -= 1
            if _gc_pausers == 0 and _gc_enabled_before:
                gc.enable()


# --------------------------------------------------------------------------------------------------
# The pipeline of one app


@dataclass(frozen=True, slots=True)
class _RunFacts:
    run: records_store.RunRecord  # only its fields fixed at creation are used
    accelerator: hardware.Accelerator


class MeasurementIngest:
    """Caches and the group-commit writer of one app (one per process; closed at shutdown).

    ``admission`` (the app's bound on requests holding connections, an ``asyncio.Semaphore``) is
    entered around each database read made on a cache miss; ``on_revoked_key`` is told the id of a
    key the write transaction found revoked, so the principal cache can drop it.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        admission: AbstractAsyncContextManager[Any] | None = None,
        on_revoked_key: Callable[[int], None] = lambda _key_id: None,
        max_batch_rows: int = MAX_BATCH_ROWS,
    ) -> None:
        self._engine = engine
        self._admission = admission
        self._on_revoked_key = on_revoked_key
        self._runs: dict[tuple[str, str], _RunFacts] = {}
        self.writer: GroupCommitWriter[MeasurementJob, Added] = GroupCommitWriter(
            engine,
            record_batch,
            weight=lambda job: len(job.values),
            max_batch_weight=max_batch_rows,
            name="measurement-ingest",
            on_batch=observe_ingest_batch,
            inline_max_weight=INLINE_COMMIT_ROWS,
        )

    async def aclose(self) -> None:
        """Close at shutdown: what is queued is committed first."""
        self.writer.close()

    async def add(
        self, *, principal: Principal, run_id: str, body: bytes, max_items: int
    ) -> MeasurementsAdded:
        tenant = principal.tenant
        inline = len(body) <= INLINE_BODY_BYTES
        if inline:
            items = parse_measurements(body, max_items=max_items)
        else:
            items = await run_in_threadpool(_gc_paused, parse_measurements, body, max_items=max_items)
        facts = self._runs.get((tenant, run_id))
        if facts is None:
            facts = await self._read_run(tenant, run_id)
        if inline:
            job = self._job(principal, run_id, facts, items)
        else:
            job = await run_in_threadpool(_gc_paused, self._job, principal, run_id, facts, items)
        del items
        return await self._submit(principal, run_id, job)

    async def _submit(self, principal: Principal, run_id: str, job: MeasurementJob) -> MeasurementsAdded:
        try:
            added = await self.writer.submit(job)
        except KeyRevoked:
            self._on_revoked_key(principal.key_id)
            raise invalid_api_key() from None
        except RunNotFound:
            self._runs.pop((principal.tenant, run_id), None)
            raise
        MEASUREMENTS_INGESTED.inc(added.stored)
        return MeasurementsAdded(
            run_id=added.run.id,
            received=added.received,
            stored=added.stored,
            ignored_steps=added.ignored_steps,
            summary=run_summary(added.run),
        )

    def _job(
        self, principal: Principal, run_id: str, facts: _RunFacts, items: list[dict[str, Any]]
    ) -> MeasurementJob:
        values = measurement_values(facts.run, items, now=now_utc(), accelerator=facts.accelerator)
        parameters = measurements_store.measurement_parameters(self._engine.dialect, values)
        return MeasurementJob(principal.key_id, principal.tenant, run_id, facts.run, values, parameters)

    async def _read_run(self, tenant: str, run_id: str) -> _RunFacts:
        async with self._admission or nullcontext():
            run = await run_in_threadpool(self._fetch_run, tenant, run_id)
        if run is None:
            raise RunNotFound(run_id)
        facts = _RunFacts(run, run_accelerator(run))
        if len(self._runs) >= RUN_CACHE_ENTRIES:
            self._runs.clear()
        self._runs[(tenant, run_id)] = facts
        return facts

    def _fetch_run(self, tenant: str, run_id: str) -> records_store.RunRecord | None:
        with UnitOfWork(self._engine, write=False) as uow:
            return store.get_run(uow.connection, tenant=tenant, run_id=run_id, with_tags=False)
