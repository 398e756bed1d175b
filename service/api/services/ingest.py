"""Measurement ingest: parse, compute each measurement's MFU, and store it with the run's summary.

The path of one request (``MeasurementIngest.add``):

1. The body is validated straight from its JSON bytes (one object or a list of up to
   ``max_measurements_per_request``; all or nothing: the first invalid item is a 422 naming it).
2. The run's compute facts (FLOPs per token, part and peak, device count, sequence length) come from a
   process-local cache or one read. They never change after creation, so a cached copy is exact.
3. Every item's tokens/s, MFU, HFU, TFLOP/s per device are computed (the domain's ``compute_mfu``;
   an MFU above 1 is a 422 that stores nothing).
4. The rows go to the app's group-commit writer (``service.store.group_commit``), which commits the
   jobs queued meanwhile in one transaction (:func:`commit_batch`) and answers each after the commit.
   Inside that transaction the key is checked again (a key revoked since it was cached writes nothing:
   401) and the run is locked and read again (deleted meanwhile: 404).

Small bodies are handled on the event loop; larger ones (``INLINE_BODY_BYTES``) are parsed and computed
in the threadpool so that a 10,000-item request never stalls the loop, and the largest
(``HELPER_BODY_BYTES``) in the app's helper process when it has one, so that they use a second core
(see ``MeasurementIngest``; the rows come back as driver parameters and are committed here).

Repeated steps: a (run, step) is stored once and the first write wins, across requests and within one;
a repeat is listed in ``ignored_steps``. Requests committed in one batch behave as if run one after the
other in arrival order; each answer's summary is the run's as committed.
"""

from __future__ import annotations

import dataclasses
import logging
import operator
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache, partial
from typing import Annotated, Any, TypeVar

from pydantic import Field, TypeAdapter, ValidationError
from sqlalchemy import Engine
from starlette.concurrency import run_in_threadpool

from service.api.problems import VALIDATION_ERROR, ProblemError, invalid_api_key
from service.api.resolve import resolve_accelerator, with_field_prefix
from service.api.schemas.common import HardwareRef
from service.api.schemas.runs import MeasurementItem, MeasurementsAdded
from service.api.services.runs import not_found, now_utc, run_summary
from service.domain import hardware, mfu
from service.domain.errors import DomainError
from service.observability import observe_ingest_batch
from service.store import runs as store
from service.store.group_commit import GroupCommitWriter
from service.store.keys import Principal
from service.store.uow import UnitOfWork
from service.usecases.measurements import Added, KeyRevoked, MeasurementJob, RunNotFound, record_batch

logger = logging.getLogger(__name__)

MAX_REPORTED_ERRORS = 20
Result = TypeVar("Result")
#: Bodies above this are parsed and computed in the threadpool rather than on the event loop
#: (~1 ms of work at 100 items).
INLINE_BODY_BYTES = 32 * 1024
#: Bodies above this (~2,000 items) are parsed and computed in the app's helper process, when it has
#: one (see MeasurementIngest).
HELPER_BODY_BYTES = 256 * 1024
#: Rows per group-commit transaction at most (a batch always takes at least one whole request).
#: Batching pays off for small requests (a transaction's fixed cost shared); a large request gains
#: nothing from company, and merging four 10,000-row requests made their parsing and their writing
#: alternate instead of overlapping (bulk ingest 79k against 100k+ measurements/s when one a batch).
MAX_BATCH_ROWS = 2_000
#: Requests of up to this many rows are committed on the event loop, in batches of one loop turn's
#: requests, on SQLite (group_commit's inline batches: ~40 µs a row there, so at most a few ms of loop).
INLINE_COMMIT_ROWS = 64
#: Runs whose compute facts are cached per process.
RUN_CACHE_ENTRIES = 4096


# --------------------------------------------------------------------------------------------------
# Parse and compute


@lru_cache(maxsize=8)
def _adapters(max_items: int) -> tuple[TypeAdapter[Any], TypeAdapter[Any]]:
    many: TypeAdapter[Any] = TypeAdapter(
        Annotated[list[MeasurementItem], Field(min_length=1, max_length=max_items)]
    )
    one: TypeAdapter[Any] = TypeAdapter(MeasurementItem)
    return many, one


def _error_field(loc: Sequence[Any], is_list: bool) -> str:
    parts = list(loc)
    path = "body"
    if is_list and parts and isinstance(parts[0], int):
        path = f"body[{parts[0]}]"
        parts = parts[1:]
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def parse_measurements(body: bytes, *, max_items: int) -> list[dict[str, Any]]:
    """One measurement object or a list of them, validated straight from the raw JSON (pydantic's
    Rust parser; FastAPI's default path would build the Python objects twice)."""
    many, one = _adapters(max_items)
    is_list = body.lstrip()[:1] != b"{"
    try:
        parsed = many.validate_json(body) if is_list else [one.validate_json(body)]
    except ValidationError as exc:
        errors = []
        for error in exc.errors(include_url=False)[:MAX_REPORTED_ERRORS]:
            message = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
            errors.append(
                {"field": _error_field(error["loc"], is_list), "message": message, "code": error["type"]}
            )
        detail = f"{errors[0]['field']}: {errors[0]['message']}"
        if exc.error_count() > 1:
            detail += f" (and {exc.error_count() - 1} more; nothing was stored)"
        raise ProblemError(VALIDATION_ERROR, detail, errors=errors) from None
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


def run_accelerator(run: store.RunRecord) -> hardware.Accelerator:
    """The run's part as resolved at creation, with the peak stored then: a later catalog change
    never changes the MFU of the run's later measurements."""
    stored_peak: dict[str, Any] = {f"{run.precision}_tflops": run.peak_tflops_per_device}
    try:
        part = resolve_accelerator(HardwareRef.model_validate(run.spec["hardware"]))
    except DomainError:  # no longer in the catalog
        return hardware.custom_accelerator(
            name=run.accelerator_name, peak_tflops={run.precision: run.peak_tflops_per_device}
        )
    return dataclasses.replace(part, **stored_peak)


# Where a measurement value tuple (store.MEASUREMENT_COLUMNS order) holds what the summary reads.
_STEP = store.MEASUREMENT_COLUMNS.index("step")
_MEASURED_AT = store.MEASURED_AT
_TOKENS_PER_SECOND = store.MEASUREMENT_COLUMNS.index("tokens_per_second")
_MFU = store.MEASUREMENT_COLUMNS.index("mfu")
#: A value tuple's (step, time, MFU, tokens/s): what fleet.series_bins sums.
_SERIES_FIELDS = operator.itemgetter(_STEP, _MEASURED_AT, _MFU, _TOKENS_PER_SECOND)
if store.MEASUREMENT_COLUMNS != (
    "run_pk",
    "step",
    "measured_at",
    "throughput_form",
    "throughput_value",
    "global_batch_tokens",
    "global_batch_sequences",
    "tokens_per_second",
    "tokens_per_second_per_device",
    "mfu",
    "hfu",
    "achieved_tflops_per_device",
    "loss",
    "memory_bytes",
    "grad_norm_sq_small",
    "grad_norm_sq_big",
    "batch_small_tokens",
    "batch_big_tokens",
):  # measurement_values builds its tuples in this order
    raise RuntimeError("the measurements table's columns changed: update measurement_values")


def measurement_values(
    run: store.RunRecord,
    items: list[dict[str, Any]],
    *,
    now: datetime,
    accelerator: hardware.Accelerator | None = None,
) -> list[tuple[Any, ...]]:
    """Value tuples for the measurements table (``store.MEASUREMENT_COLUMNS`` order): each item's
    global tokens/s (the domain's normalisation), then MFU, HFU, achieved TFLOP/s and tokens/s per
    device as that rate times per-(token/s) factors taken from the domain's compute_mfu of the first
    item: one multiply per value, one formula."""
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
    first = with_field_prefix("body[0]", lambda: full(_domain_throughput(items[0]["throughput"])))
    mfu_per = first.mfu / first.tokens_per_second
    hfu_per = first.hfu / first.tokens_per_second
    tflops_per = first.achieved_tflops_per_device / first.tokens_per_second
    per_device = first.tokens_per_second_per_device / first.tokens_per_second
    lowest = mfu.MIN_PLAUSIBLE_MFU
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
            try:
                scaled = mfu.global_rate_scale(
                    _domain_throughput(throughput), device_count=device_count, seq_len_tokens=seq_len
                )
            except DomainError as exc:
                exc.field = f"body[{index}].{exc.field or 'throughput'}"
                raise
            scales[scale_key] = scaled
        scale, inverse = scaled
        rate = scale / value if inverse else value * scale
        value_mfu = rate * mfu_per
        value_hfu = rate * hfu_per
        if not (lowest <= value_mfu <= 1.0 and value_hfu <= 1.0):
            # Outside what the domain accepts: it explains why (likely causes, corrected values).
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
                rate * per_device,
                value_mfu,
                value_hfu,
                rate * tflops_per,
                get("loss"),
                get("memory_bytes"),
                get("grad_norm_sq_small"),
                get("grad_norm_sq_big"),
                get("batch_small_tokens"),
                get("batch_big_tokens"),
            )
        )
    return values


def measurement_rows(
    run: store.RunRecord,
    items: list[dict[str, Any]],
    *,
    now: datetime,
    accelerator: hardware.Accelerator | None = None,
) -> list[dict[str, Any]]:
    """:func:`measurement_values` as dicts by column name (for callers that patch or read columns)."""
    columns = store.MEASUREMENT_COLUMNS
    return [
        dict(zip(columns, row, strict=True))
        for row in measurement_values(run, items, now=now, accelerator=accelerator)
    ]


# --------------------------------------------------------------------------------------------------
# The pipeline of one app


@dataclass(frozen=True, slots=True)
class _RunFacts:
    run: store.RunRecord  # only its fields fixed at creation are used
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
            items = await run_in_threadpool(parse_measurements, body, max_items=max_items)
        facts = self._runs.get((tenant, run_id))
        if facts is None:
            facts = await self._read_run(tenant, run_id)
        if inline:
            job = self._job(principal, run_id, facts, items)
        else:
            job = await run_in_threadpool(self._job, principal, run_id, facts, items)
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
            raise not_found(run_id) from None
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
        parameters = store.measurement_parameters(self._engine.dialect, values)
        return MeasurementJob(principal.key_id, principal.tenant, run_id, facts.run, values, parameters)

    async def _read_run(self, tenant: str, run_id: str) -> _RunFacts:
        async with self._admission or nullcontext():
            run = await run_in_threadpool(self._fetch_run, tenant, run_id)
        if run is None:
            raise not_found(run_id)
        facts = _RunFacts(run, run_accelerator(run))
        if len(self._runs) >= RUN_CACHE_ENTRIES:
            self._runs.clear()
        self._runs[(tenant, run_id)] = facts
        return facts

    def _fetch_run(self, tenant: str, run_id: str) -> store.RunRecord | None:
        with UnitOfWork(self._engine, write=False) as uow:
            return store.get_run(uow.connection, tenant=tenant, run_id=run_id, with_tags=False)
