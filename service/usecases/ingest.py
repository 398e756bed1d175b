"""Add measurements, the pipeline of one app: each request's items become measurement rows (tokens/s,
MFU, HFU, TFLOP/s per device, computed with the domain) and go to the app's group-commit writer, whose
transaction is :func:`service.usecases.measurements.record_batch`; a request is answered once that
transaction has committed.

The run's compute facts (FLOPs per token, part and peak, device count, sequence length) come from a
process-local cache or one read: they never change after creation, so a cached copy is exact. An MFU
above 1 is refused with the domain's explanation and stores nothing; a key revoked since it was cached
is :class:`KeyRevoked`, a run deleted meanwhile :class:`RunNotFound`.
"""

from __future__ import annotations

import dataclasses
import gc
import threading
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar

from anyio import to_thread

from service.domain import hardware, mfu
from service.domain.errors import DomainError, with_field_prefix
from service.domain.run import stored_accelerator
from service.observability import MEASUREMENTS_INGESTED, observe_ingest_batch
from service.store import measurements as measurements_store
from service.store import records as records_store
from service.store import runs as store
from service.store.group_commit import GroupCommitWriter
from service.store.keys import Principal
from service.store.uow import Database, UnitOfWork
from service.usecases.errors import KeyRevoked, RunNotFound
from service.usecases.measurements import Added, MeasurementJob, record_batch

T = TypeVar("T")

#: Rows per group-commit transaction at most (a batch always takes at least one whole request): batching
#: shares a transaction's fixed cost among small requests; a large one gains nothing from company, and
#: its computing overlaps the previous one's writing only if they are not in one batch.
MAX_BATCH_ROWS = 2_000
#: SQLite: requests of up to this many rows are committed on the event loop (group_commit's inline
#: batches), a few milliseconds of loop at most.
INLINE_COMMIT_ROWS = 64
#: Runs whose compute facts are cached per process.
RUN_CACHE_ENTRIES = 4096


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


def _full_mfu(
    run: records_store.RunRecord, accelerator: hardware.Accelerator, throughput: mfu.Throughput
) -> mfu.MfuResult:
    return mfu.compute_mfu(
        model_flops_per_token=run.model_flops_per_token,
        hardware_flops_per_token=run.hardware_flops_per_token,
        accelerator=accelerator,
        device_count=run.device_count,
        precision=run.precision,  # type: ignore[arg-type]
        throughput=throughput,
        seq_len_tokens=run.seq_len_tokens,
        convention=run.convention,
    )


def rate_factors(
    run: records_store.RunRecord, items: list[dict[str, Any]], *, accelerator: hardware.Accelerator
) -> mfu.RateFactors:
    """The run's per-(token/s) factors, from the first item through the domain in full: MFU, HFU,
    achieved TFLOP/s and tokens/s per device are all proportional to the global rate. They depend on
    the run alone (its FLOPs per token, devices and peak, fixed at creation), so ingest keeps them with
    the run's cached facts."""
    throughput = mfu.throughput_from_fields(items[0]["throughput"])[2]
    return mfu.RateFactors.of(with_field_prefix("body[0]", lambda: _full_mfu(run, accelerator, throughput)))


def measurement_values(
    run: records_store.RunRecord,
    items: list[dict[str, Any]],
    *,
    now: datetime,
    accelerator: hardware.Accelerator | None = None,
    factors: mfu.RateFactors | None = None,
) -> list[tuple[Any, ...]]:
    """Value tuples for the measurements table, in ``MEASUREMENT_COLUMNS`` order (a test checks it),
    from validated items (plain dicts): each item's global tokens/s (the domain's
    ``global_rate_scale``), then MFU, HFU, achieved TFLOP/s and tokens/s per device from the run's
    :func:`rate_factors` (``factors`` if known). Every item's rate is checked with them; one the domain
    would refuse goes through it in full, for its explanation. A domain error names its item:
    ``body[3].throughput``."""
    if accelerator is None:
        accelerator = run_accelerator(run)
    device_count = run.device_count
    seq_len = run.seq_len_tokens

    if factors is None:
        factors = rate_factors(run, items, accelerator=accelerator)
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
            form, value, _ = mfu.throughput_from_fields(throughput)
            batch_tokens = throughput.get("global_batch_tokens")
            batch_sequences = throughput.get("global_batch_sequences")
        scale_key = (form, batch_tokens, batch_sequences)
        scaled = scales.get(scale_key)
        if scaled is None:
            scaled = with_field_prefix(
                f"body[{index}]",
                partial(
                    mfu.global_rate_scale,
                    mfu.throughput_from_fields(throughput)[2],
                    device_count=device_count,
                    seq_len_tokens=seq_len,
                ),
            )
            scales[scale_key] = scaled
        scale, inverse = scaled
        rate = scale / value if inverse else value * scale
        if not factors.plausible(rate):  # the domain explains why (likely causes, corrected values)
            with_field_prefix(
                f"body[{index}]",
                partial(_full_mfu, run, accelerator, mfu.throughput_from_fields(throughput)[2]),
            )
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


def gc_paused(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``function`` with the cyclic garbage collector held off (nested and concurrent calls counted):
    a large body's tens of thousands of containers (no cycles: freed by reference counting) would
    otherwise set off collections over the whole heap. Only around CPU-bound parsing and computing:
    held across the wait for the writer, pauses would overlap under load and the collector never run.
    A collector someone else disabled stays disabled."""
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


@dataclass(frozen=True, slots=True)
class _RunFacts:
    run: records_store.RunRecord  # only its fields fixed at creation are used
    accelerator: hardware.Accelerator
    factors: mfu.RateFactors | None = None  # once a request has given the first item to compute them


class MeasurementIngest:
    """Caches and the group-commit writer of one app (one per process; closed at shutdown).

    ``admission`` (the app's bound on requests holding connections, an ``asyncio.Semaphore``) is
    entered around each database read made on a cache miss; ``on_revoked_key`` is told the id of a
    key the write transaction found revoked, so the principal cache can drop it.
    """

    def __init__(
        self,
        database: Database,
        *,
        admission: AbstractAsyncContextManager[Any] | None = None,
        on_revoked_key: Callable[[int], None] = lambda _key_id: None,
        max_batch_rows: int = MAX_BATCH_ROWS,
    ) -> None:
        self._database = database
        self._admission = admission
        self._on_revoked_key = on_revoked_key
        self._runs: dict[tuple[str, str], _RunFacts] = {}
        self.writer: GroupCommitWriter[MeasurementJob, Added] = GroupCommitWriter(
            database,
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

    async def prepare(
        self, *, principal: Principal, run_id: str, items: list[dict[str, Any]], offload: bool
    ) -> MeasurementJob:
        """The rows of validated ``items`` (plain dicts) for run ``run_id``, as a job for :meth:`store`;
        ``offload``: computed in a worker thread (a large request), so that the event loop is never
        held for long."""
        tenant = principal.tenant
        facts = self._runs.get((tenant, run_id))
        if facts is None:
            facts = await self._read_run(tenant, run_id)
        if offload:
            return await to_thread.run_sync(gc_paused, self._job, principal, run_id, facts, items)
        return self._job(principal, run_id, facts, items)

    async def store(self, job: MeasurementJob) -> Added:
        """Commit ``job`` (with others queued, in one transaction) and answer what it stored."""
        try:
            added = await self.writer.submit(job)
        except KeyRevoked:
            self._on_revoked_key(job.key_id)
            raise
        except RunNotFound:
            self._runs.pop((job.tenant, job.run_id), None)
            raise
        MEASUREMENTS_INGESTED.inc(added.stored)
        return added

    def _job(
        self, principal: Principal, run_id: str, facts: _RunFacts, items: list[dict[str, Any]]
    ) -> MeasurementJob:
        now = datetime.now(UTC)
        factors = facts.factors
        if factors is None:
            factors = rate_factors(facts.run, items, accelerator=facts.accelerator)
            self._runs[(principal.tenant, run_id)] = dataclasses.replace(facts, factors=factors)
        values = measurement_values(facts.run, items, now=now, accelerator=facts.accelerator, factors=factors)
        parameters = measurements_store.measurement_parameters(self._database.dialect, values)
        return MeasurementJob(principal.key_id, principal.tenant, run_id, facts.run, values, parameters)

    async def _read_run(self, tenant: str, run_id: str) -> _RunFacts:
        async with self._admission or nullcontext():
            run = await to_thread.run_sync(self._fetch_run, tenant, run_id)
        if run is None:
            raise RunNotFound(run_id)
        facts = _RunFacts(run, run_accelerator(run))
        if len(self._runs) >= RUN_CACHE_ENTRIES:
            self._runs.clear()
        self._runs[(tenant, run_id)] = facts
        return facts

    def _fetch_run(self, tenant: str, run_id: str) -> records_store.RunRecord | None:
        with UnitOfWork(self._database, write=False) as uow:
            return store.get_run(uow.connection, tenant=tenant, run_id=run_id, with_tags=False)
