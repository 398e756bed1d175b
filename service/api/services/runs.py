"""The run store's use cases: create (with Idempotency-Key), ingest, read, update, delete, compare,
efficiency and fleet statistics.

Each function computes with the domain, calls the store and commits in one place. Errors are raised
as problems (404 for another tenant's run, exactly as for an unknown one) or as domain errors with
the request field they concern.

Idempotency-Key (create_run): the key is first claimed in a committed "in flight" row; the run and
the stored answer are then written in one transaction. A second request with the key finds the row:
a different body is 422 ``idempotency-key-reused``; a finished one gets the stored answer (same
status and body); one still in flight waits up to :data:`IDEMPOTENCY_WAIT_SECONDS` for it and is then
409 ``idempotency-in-flight``. A failed request releases its claim; a claim whose process died is
taken over after :data:`IDEMPOTENCY_LEASE_SECONDS`. Keys are kept :data:`IDEMPOTENCY_RETENTION`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import IntegrityError

from service.api.problems import (
    CONFLICT,
    IDEMPOTENCY_IN_FLIGHT,
    IDEMPOTENCY_MISMATCH,
    NOT_FOUND,
    ProblemError,
)
from service.api.resolve import resolve_accelerator, resolve_model, with_field_prefix
from service.api.schemas.common import ModelRef, ThroughputIn
from service.api.schemas.runs import (
    MAX_TAGS,
    MeasurementPage,
    MeasurementRead,
    MfuDistribution,
    MfuTrend,
    ParallelLayout,
    ParallelLayoutRead,
    ParameterCountsRead,
    RunCompareRequest,
    RunComparison,
    RunComparisonItem,
    RunCreate,
    RunEfficiency,
    RunLinks,
    RunPage,
    RunRead,
    RunSummary,
    RunUpdate,
    SeriesPointRead,
)
from service.api.schemas.stats import FleetGroup, FleetMfuStats, MfuPercentiles, RunRank, SizeClassRead
from service.api.services.prediction import PredictedVsMeasured
from service.api.services.prediction import predicted_vs_measured as run_prediction
from service.domain import fleet, hardware, models
from service.domain.errors import InvalidInput
from service.domain.flops import flops_per_token
from service.store import runs as store
from service.store.keys import Principal
from service.store.uow import UnitOfWork

IDEMPOTENCY_WAIT_SECONDS = 3.0
IDEMPOTENCY_POLL_SECONDS = 0.05
IDEMPOTENCY_LEASE_SECONDS = 60.0
IDEMPOTENCY_RETENTION = timedelta(hours=24)
CREATE_RUN_OPERATION = "create_run"

#: Points of an efficiency series at most. Runs with at most fleet.EXACT_SERIES_MAX measurements are
#: read whole; larger ones from their stored step buckets (fleet.SeriesBin, at most
#: fleet.SERIES_BUCKETS_MAX), or, for a run whose buckets are not complete yet (it outgrew the exact
#: series before they were kept), grouped into SERIES_POINTS step ranges by the database.
SERIES_POINTS = 240
MAX_REPORTED_ERRORS = 20
TOKENS_METHOD = (
    "latest_step × global_batch_tokens: a step is a completed optimizer step, so step N has consumed "
    "N global batches (restarts and gaps in reporting do not change it; a batch ramp over-counts)"
)
TREND_METHOD = (
    "least-squares slope of MFU against hours since the first measurement; quartile change = mean MFU "
    "of the last quarter of measurements (by time) minus that of the first quarter"
)


def now_utc() -> datetime:
    return datetime.now(UTC)


def not_found(run_id: str) -> ProblemError:
    return ProblemError(NOT_FOUND, f"No run {run_id!r} for this API key's tenant.", run_id=run_id)


def _require_run(
    connection: Connection, *, tenant: str, run_id: str, for_update: bool = False, with_tags: bool = True
) -> store.RunRecord:
    run = store.get_run(connection, tenant=tenant, run_id=run_id, for_update=for_update, with_tags=with_tags)
    if run is None:
        raise not_found(run_id)
    return run


# --------------------------------------------------------------------------------------------------
# Shaping records into answers


def run_summary(run: store.RunRecord) -> RunSummary:
    tokens = fleet.tokens_so_far(latest_step=run.latest_step, global_batch_tokens=run.global_batch_tokens)
    return RunSummary(
        measurement_count=run.measurement_count,
        first_measured_at=run.first_measured_at,
        latest_step=run.latest_step,
        latest_measured_at=run.latest_measured_at,
        latest_mfu=run.latest_mfu,
        median_mfu=run.median_mfu,
        latest_tokens_per_second=run.latest_tokens_per_second,
        tokens_so_far=tokens,
        seconds_to_budget=_seconds_to_budget(run, tokens),
    )


def _seconds_to_budget(run: store.RunRecord, tokens_done: int) -> float | None:
    if run.token_budget_tokens is None or not run.latest_tokens_per_second:
        return None
    return fleet.seconds_to_budget(
        token_budget=run.token_budget_tokens,
        tokens_done=tokens_done,
        tokens_per_second=run.latest_tokens_per_second,
    )


def run_read(run: store.RunRecord) -> RunRead:
    spec = run.spec
    base = f"/v1/runs/{run.id}"
    return RunRead(
        id=run.id,
        status=run.status,
        started_at=run.started_at,
        finished_at=run.finished_at,
        created_at=run.created_at,
        updated_at=run.updated_at,
        model=spec["model"],
        model_name=run.model_name,
        parameters=ParameterCountsRead(
            total=run.parameters_total,
            active_per_token=run.parameters_active,
            non_embedding=run.parameters_non_embedding,
        ),
        size_class=run.size_class,
        hardware=spec["hardware"],
        accelerator_id=run.accelerator,
        accelerator_name=run.accelerator_name,
        device_count=run.device_count,
        precision=run.precision,
        seq_len_tokens=run.seq_len_tokens,
        global_batch_tokens=run.global_batch_tokens,
        global_batch_sequences=spec.get("global_batch_sequences"),
        parallelism=spec["parallelism"],
        framework=run.framework,
        cluster=run.cluster,
        scheduler_job_id=run.scheduler_job_id,
        attempt=run.attempt,
        tags=list(run.tags),
        token_budget_tokens=run.token_budget_tokens,
        price_per_device_hour=run.price_per_device_hour,
        convention=run.convention,
        model_flops_per_token=run.model_flops_per_token,
        hardware_flops_per_token=run.hardware_flops_per_token,
        peak_tflops_per_device=run.peak_tflops_per_device,
        summary=run_summary(run),
        links=RunLinks(self=base, measurements=f"{base}/measurements", efficiency=f"{base}/efficiency"),
    )


# --------------------------------------------------------------------------------------------------
# Create


@dataclass(frozen=True, slots=True)
class PreparedRun:
    values: dict[str, Any]
    tags: tuple[str, ...]


def _model_name(ref: ModelRef, spec: models.ModelSpec) -> str:
    if ref.preset is not None:
        return models.get_preset(ref.preset).id
    if ref.dimensions is not None:
        return ref.dimensions.name
    return spec.name


def _resolve_layout(layout: ParallelLayout, device_count: int) -> ParallelLayoutRead:
    """Devices = tp·pp·cp·dp (dp inferred when omitted); ep must divide the devices."""
    model_parallel = layout.tp * layout.pp * layout.cp
    if layout.dp is None:
        if device_count % model_parallel:
            raise InvalidInput(
                f"tp·pp·cp = {model_parallel} does not divide hardware.count = {device_count}: "
                "give a layout whose product divides the devices, or the device count the job uses.",
                field="body.parallelism",
            )
        dp = device_count // model_parallel
    else:
        dp = layout.dp
        if model_parallel * dp != device_count:
            raise InvalidInput(
                f"tp·pp·cp·dp = {model_parallel * dp} but hardware.count = {device_count}: the layout "
                "must use every device (omit dp to have it inferred).",
                field="body.parallelism.dp",
            )
    if device_count % layout.ep:
        raise InvalidInput(
            f"ep = {layout.ep} does not divide hardware.count = {device_count}.", field="body.parallelism.ep"
        )
    values = layout.model_dump()
    values["dp"] = dp
    return ParallelLayoutRead(**values)


def prepare_run(request: RunCreate, *, now: datetime) -> PreparedRun:
    """Everything a run stores, computed with the domain: parameter counts, size class, FLOPs per
    token under the convention (model FLOPs for MFU, with recomputation for HFU), the dense peak.
    Domain errors name their field under ``body``."""
    return with_field_prefix("body", lambda: _prepare_run(request, now=now))


def _prepare_run(request: RunCreate, *, now: datetime) -> PreparedRun:
    spec = resolve_model(request.model)
    accelerator = resolve_accelerator(request.hardware)
    count = request.hardware.count
    layout = _resolve_layout(request.parallelism, count)
    seq_len = request.seq_len_tokens
    flops = flops_per_token(spec, seq_len, convention=request.convention, recompute=layout.recompute)
    peak_tflops = hardware.peak_flops(accelerator, request.precision) / hardware.TERA
    counts = models.count_parameters(spec)
    if request.global_batch_tokens is not None:
        batch_tokens = request.global_batch_tokens
        batch_sequences = batch_tokens // seq_len if batch_tokens % seq_len == 0 else None
    else:
        assert request.global_batch_sequences is not None
        batch_sequences = request.global_batch_sequences
        batch_tokens = batch_sequences * seq_len
    attempt = request.attempt if request.attempt is not None or request.scheduler_job_id is None else 0
    values: dict[str, Any] = {
        "status": "running",
        "started_at": request.started_at or now,
        "finished_at": None,
        "created_at": now,
        "updated_at": now,
        "spec": {
            "model": request.model.model_dump(mode="json", exclude_none=True),
            "hardware": request.hardware.model_dump(mode="json", exclude_none=True),
            "parallelism": layout.model_dump(mode="json"),
            "global_batch_sequences": batch_sequences,
        },
        "model_name": _model_name(request.model, spec),
        "parameters_total": counts.total,
        "parameters_active": counts.active_per_token,
        "parameters_non_embedding": counts.non_embedding,
        "size_class": fleet.size_class(counts.total),
        "accelerator": store.CUSTOM_ACCELERATOR if accelerator.is_custom else accelerator.id,
        "accelerator_name": accelerator.display_name,
        "device_count": count,
        "precision": request.precision,
        "seq_len_tokens": seq_len,
        "global_batch_tokens": batch_tokens,
        "convention": request.convention,
        "recompute": layout.recompute,
        "model_flops_per_token": flops.training_flops_per_token,
        "hardware_flops_per_token": flops.hardware_flops_per_token,
        "peak_tflops_per_device": peak_tflops,
        "framework": request.framework,
        "cluster": request.cluster,
        "scheduler_job_id": request.scheduler_job_id,
        "attempt": attempt,
        "token_budget_tokens": request.token_budget_tokens,
        "price_per_device_hour": request.price_per_device_hour,
    }
    return PreparedRun(values=values, tags=tuple(dict.fromkeys(request.tags)))


def _job_conflict(run_id: str, values: dict[str, Any]) -> ProblemError:
    return ProblemError(
        CONFLICT,
        f"Run {run_id} already records cluster {values['cluster']!r}, job {values['scheduler_job_id']!r}, "
        f"attempt {values['attempt']}; read it, or give the next attempt number for a restart.",
        existing_run_id=run_id,
    )


def _insert_run(connection: Connection, *, tenant: str, prepared: PreparedRun) -> store.RunRecord:
    values = prepared.values
    if values["scheduler_job_id"] is not None:
        existing = store.find_run_by_job(
            connection,
            tenant=tenant,
            cluster=values["cluster"],
            scheduler_job_id=values["scheduler_job_id"],
            attempt=values["attempt"],
        )
        if existing is not None:
            raise _job_conflict(existing, values)
    return store.create_run(connection, tenant=tenant, values=values, tags=prepared.tags)


def _create(
    engine: Engine, *, tenant: str, prepared: PreparedRun, idempotency_key: str | None
) -> dict[str, Any]:
    """Insert the run (and complete the idempotency record) in one transaction."""
    try:
        with UnitOfWork(engine, write=True) as uow:
            run = _insert_run(uow.connection, tenant=tenant, prepared=prepared)
            body = run_read(run).model_dump(mode="json")
            if idempotency_key is not None:
                store.complete_idempotency_key(
                    uow.connection,
                    tenant=tenant,
                    key=idempotency_key,
                    response_status=201,
                    response_body=orjson.dumps(body).decode(),
                )
            uow.commit()
            return body
    except IntegrityError:
        # Lost a race on (cluster, job, attempt) with another replica: name the winner.
        values = prepared.values
        if values["scheduler_job_id"] is None:
            raise
        with UnitOfWork(engine, write=False) as uow:
            existing = store.find_run_by_job(
                uow.connection,
                tenant=tenant,
                cluster=values["cluster"],
                scheduler_job_id=values["scheduler_job_id"],
                attempt=values["attempt"],
            )
        if existing is None:
            raise
        raise _job_conflict(existing, values) from None


@dataclass(frozen=True, slots=True)
class CreateOutcome:
    status: int
    body: bytes
    run_id: str
    replayed: bool


def request_fingerprint(request: RunCreate) -> str:
    """Hash of the request as validated (defaults filled, key order and spacing irrelevant)."""
    canonical = orjson.dumps(request.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()


def create_run(
    engine: Engine, *, principal: Principal, request: RunCreate, idempotency_key: str | None
) -> CreateOutcome:
    now = now_utc()
    prepared = prepare_run(request, now=now)
    tenant = principal.tenant
    if idempotency_key is None:
        body = _create(engine, tenant=tenant, prepared=prepared, idempotency_key=None)
        return CreateOutcome(201, orjson.dumps(body), body["id"], replayed=False)

    fingerprint = request_fingerprint(request)
    replay = _claim_or_replay(engine, tenant=tenant, key=idempotency_key, fingerprint=fingerprint)
    if replay is not None:
        return replay
    try:
        body = _create(engine, tenant=tenant, prepared=prepared, idempotency_key=idempotency_key)
    except BaseException:
        with UnitOfWork(engine, write=True) as uow:
            store.release_idempotency_key(uow.connection, tenant=tenant, key=idempotency_key)
            uow.commit()
        raise
    return CreateOutcome(201, orjson.dumps(body), body["id"], replayed=False)


def _claim_or_replay(engine: Engine, *, tenant: str, key: str, fingerprint: str) -> CreateOutcome | None:
    """Claim the key (None: go ahead) or answer from the record another request left."""
    deadline = time.monotonic() + IDEMPOTENCY_WAIT_SECONDS
    while True:
        now = now_utc()
        with UnitOfWork(engine, write=True) as uow:
            connection = uow.connection
            store.purge_idempotency_keys(connection, created_before=now - IDEMPOTENCY_RETENTION)
            claimed = store.claim_idempotency_key(
                connection,
                tenant=tenant,
                key=key,
                operation=CREATE_RUN_OPERATION,
                request_hash=fingerprint,
                now=now,
            )
            record = None if claimed else store.get_idempotency_record(connection, tenant=tenant, key=key)
            if record is not None and record.request_hash == fingerprint and record.state == "in_flight":
                # A claim whose holder died (nothing of it was committed) is taken over.
                claimed = store.reclaim_idempotency_key(
                    connection,
                    tenant=tenant,
                    key=key,
                    request_hash=fingerprint,
                    stale_before=now - timedelta(seconds=IDEMPOTENCY_LEASE_SECONDS),
                    now=now,
                )
            uow.commit()
        if claimed:
            return None
        if record is None and time.monotonic() < deadline:
            continue  # released between our insert and our read: try again
        if record is None:
            raise _in_flight()
        if record.request_hash != fingerprint or record.operation != CREATE_RUN_OPERATION:
            raise ProblemError(
                IDEMPOTENCY_MISMATCH,
                "This Idempotency-Key was used with a different request body; use a new key for a "
                "different request (a key names one request for 24 hours).",
            )
        if record.state == "done" and record.response_body is not None:
            body = record.response_body.encode()
            run_id = str(orjson.loads(body).get("id", ""))
            return CreateOutcome(record.response_status or 201, body, run_id, replayed=True)
        if time.monotonic() >= deadline:
            raise _in_flight()
        time.sleep(IDEMPOTENCY_POLL_SECONDS)


def _in_flight() -> ProblemError:
    return ProblemError(
        IDEMPOTENCY_IN_FLIGHT,
        "A request with this Idempotency-Key is still being processed; retry in a moment to get its answer.",
        headers={"Retry-After": "1"},
    )


# --------------------------------------------------------------------------------------------------
# Read, list, update, delete


def get_run(connection: Connection, *, principal: Principal, run_id: str) -> RunRead:
    return run_read(_require_run(connection, tenant=principal.tenant, run_id=run_id))


def _b64(payload: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(payload)).decode().rstrip("=")


def _unb64(cursor: str, field: str = "query.cursor") -> dict[str, Any]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        payload = orjson.loads(base64.urlsafe_b64decode(padded.encode()))
        if not isinstance(payload, dict):
            raise ValueError
        return payload
    except (ValueError, binascii.Error, orjson.JSONDecodeError):
        raise InvalidInput(
            "cursor is not one this service issued; pass next_cursor from the previous page unchanged.",
            field=field,
        ) from None


def _filters_hash(filters: store.RunFilters, sort: str, order: str) -> str:
    text = repr((filters, sort, order)).encode()
    return hashlib.sha256(text).hexdigest()[:16]


def normalise_accelerator(value: str | None) -> str | None:
    if value is None:
        return None
    if value.strip().lower() == store.CUSTOM_ACCELERATOR:
        return store.CUSTOM_ACCELERATOR
    return with_field_prefix("query.accelerator", lambda: hardware.lookup_accelerator(value).id)


def normalise_model(value: str | None) -> str | None:
    if value is None:
        return None
    preset = models.PRESETS.get(value.strip().lower())
    return preset.id if preset is not None else value


def list_runs(
    connection: Connection,
    *,
    principal: Principal,
    filters: store.RunFilters,
    sort: store.SortField,
    order: str,
    limit: int,
    cursor: str | None,
) -> RunPage:
    if (
        filters.min_parameters is not None
        and filters.max_parameters is not None
        and filters.min_parameters > filters.max_parameters
    ):
        raise InvalidInput("min_parameters is above max_parameters.", field="query.min_parameters")
    if filters.min_mfu is not None and filters.max_mfu is not None and filters.min_mfu > filters.max_mfu:
        raise InvalidInput("min_mfu is above max_mfu.", field="query.min_mfu")
    fingerprint = _filters_hash(filters, sort, order)
    after: tuple[Any, int] | None = None
    if cursor is not None:
        payload = _unb64(cursor)
        if payload.get("f") != fingerprint:
            raise InvalidInput(
                "this cursor belongs to a listing with other filters or another sort; start again "
                "without a cursor, or keep the filters and sort of the first page.",
                field="query.cursor",
            )
        try:
            value = payload["v"]
            if sort == "started_at":
                value = datetime.fromisoformat(value)
            after = (value, int(payload["k"]))
        except (KeyError, TypeError, ValueError):
            raise InvalidInput(
                "cursor is damaged; pass next_cursor unchanged.", field="query.cursor"
            ) from None
    rows = store.list_runs(
        connection,
        tenant=principal.tenant,
        filters=filters,
        sort=sort,
        descending=order == "desc",
        limit=limit + 1,
        after=after,
    )
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        last = rows[-1]
        value = (
            last.started_at.isoformat()
            if sort == "started_at"
            else (last.median_mfu if last.median_mfu is not None else store.NO_MFU)
        )
        next_cursor = _b64({"v": value, "k": last.pk, "f": fingerprint})
    return RunPage(
        items=[run_read(run) for run in rows],
        next_cursor=next_cursor,
        limit=limit,
        sort=sort,
        order=order,
    )


FINAL_STATUSES = ("finished", "failed")


def update_run(uow: UnitOfWork, *, principal: Principal, run_id: str, request: RunUpdate) -> RunRead:
    """Status: running → finished | failed, once (the same final status again is a no-op; leaving a
    final status is 409). ``finished_at`` goes with a final status (default: now)."""
    connection = uow.connection
    run = _require_run(connection, tenant=principal.tenant, run_id=run_id, for_update=True)
    given = request.model_fields_set
    now = now_utc()
    values: dict[str, Any] = {}
    status = run.status
    if "status" in given:
        if request.status is None:
            raise InvalidInput(
                "status cannot be cleared; give running, finished or failed.", field="body.status"
            )
        if request.status != run.status:
            if run.status in FINAL_STATUSES:
                raise ProblemError(
                    CONFLICT,
                    f"Run {run.id} is {run.status}, a final status: it cannot become {request.status}. "
                    "Record a restart as a new run (next attempt).",
                    current_status=run.status,
                )
            status = request.status
            values["status"] = status
            if status in FINAL_STATUSES:
                values["finished_at"] = now
    if "finished_at" in given:
        if status not in FINAL_STATUSES:
            raise InvalidInput(
                "finished_at goes with status finished or failed; set the status in the same request.",
                field="body.finished_at",
            )
        if request.finished_at is None:
            raise InvalidInput("a finished or failed run keeps a finished_at.", field="body.finished_at")
        if request.finished_at < run.started_at:
            raise InvalidInput(
                f"finished_at is before the run started ({run.started_at.isoformat()}).", field="finished_at"
            )
        values["finished_at"] = request.finished_at
    for name in ("token_budget_tokens", "price_per_device_hour"):
        if name in given:
            values[name] = getattr(request, name)
    tags: list[str] | None = None
    if request.tags is not None:
        tags = list(dict.fromkeys(request.tags))
    elif request.add_tags is not None or request.remove_tags is not None:
        removed = set(request.remove_tags or ())
        tags = [tag for tag in dict.fromkeys([*run.tags, *(request.add_tags or ())]) if tag not in removed]
    if tags is not None and len(tags) > MAX_TAGS:
        raise InvalidInput(f"a run has at most {MAX_TAGS} tags.", field="body.add_tags")
    if values or tags is not None:
        values["updated_at"] = now
        store.update_run(connection, run_pk=run.pk, values=values)
        if tags is not None:
            store.replace_tags(connection, tenant=principal.tenant, run_pk=run.pk, tags=tags)
    updated = _require_run(connection, tenant=principal.tenant, run_id=run_id)
    uow.commit()
    return run_read(updated)


def delete_run(uow: UnitOfWork, *, principal: Principal, run_id: str) -> None:
    run = _require_run(uow.connection, tenant=principal.tenant, run_id=run_id, for_update=True)
    store.delete_run(uow.connection, run=run)
    uow.commit()


# --------------------------------------------------------------------------------------------------
# Measurements: read back (ingest lives in service.api.services.ingest)


def _measurement_read(row: Any) -> MeasurementRead:
    form = row.throughput_form
    throughput: dict[str, Any] = {form: row.throughput_value}
    if form == "step_time_seconds":
        if row.global_batch_tokens is not None:
            throughput["global_batch_tokens"] = row.global_batch_tokens
        else:
            throughput["global_batch_sequences"] = row.global_batch_sequences
    return MeasurementRead(
        step=row.step,
        time=row.measured_at,
        throughput=ThroughputIn.model_validate(throughput),
        tokens_per_second=row.tokens_per_second,
        tokens_per_second_per_device=row.tokens_per_second_per_device,
        mfu=row.mfu,
        hfu=row.hfu,
        achieved_tflops_per_device=row.achieved_tflops_per_device,
        loss=row.loss,
        memory_bytes=row.memory_bytes,
        grad_norm_sq_small=row.grad_norm_sq_small,
        grad_norm_sq_big=row.grad_norm_sq_big,
        batch_small_tokens=row.batch_small_tokens,
        batch_big_tokens=row.batch_big_tokens,
    )


def list_measurements(
    connection: Connection,
    *,
    principal: Principal,
    run_id: str,
    limit: int,
    cursor: str | None,
    min_step: int | None,
    max_step: int | None,
) -> MeasurementPage:
    run = _require_run(connection, tenant=principal.tenant, run_id=run_id)
    scope = f"{run.id}:{min_step}:{max_step}"
    after = None
    if cursor is not None:
        payload = _unb64(cursor)
        if payload.get("f") != scope or not isinstance(payload.get("k"), int):
            raise InvalidInput(
                "this cursor belongs to another run or step range; pass next_cursor unchanged.",
                field="query.cursor",
            )
        after = payload["k"]
    rows = store.list_measurements(
        connection, run_pk=run.pk, limit=limit + 1, after_step=after, min_step=min_step, max_step=max_step
    )
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        next_cursor = _b64({"k": rows[-1].step, "f": scope})
    return MeasurementPage(
        items=[_measurement_read(row) for row in rows], next_cursor=next_cursor, limit=limit
    )


# --------------------------------------------------------------------------------------------------
# Efficiency


def _hours(later: datetime, earlier: datetime) -> float:
    return (later - earlier).total_seconds() / 3600.0


def _series(connection: Connection, run: store.RunRecord) -> list[fleet.SeriesPoint]:
    if run.measurement_count == 0 or run.first_measured_at is None:
        return []
    origin = run.first_measured_at
    if run.measurement_count <= fleet.EXACT_SERIES_MAX:
        return [
            fleet.SeriesPoint(
                hours=_hours(row.measured_at, origin),
                mfu=row.mfu,
                step=row.step,
                tokens_per_second=row.tokens_per_second,
            )
            for row in store.measurement_points(connection, run_pk=run.pk)
        ]
    _, bins = store.run_series(connection, run_pk=run.pk)
    if sum(item.count for item in bins) == run.measurement_count:
        return fleet.series_points(bins, origin=origin)
    first_step, last_step = store.step_range(connection, run_pk=run.pk)
    return [
        fleet.SeriesPoint(
            hours=(_hours(row.first_time, origin) + _hours(row.last_time, origin)) / 2,
            mfu=float(row.mfu),
            count=int(row.n),
            mfu_min=float(row.mfu_min),
            mfu_max=float(row.mfu_max),
            step=int(row.step),
            tokens_per_second=float(row.tokens_per_second),
        )
        for row in store.measurement_buckets(
            connection, run_pk=run.pk, first_step=first_step, last_step=last_step, buckets=SERIES_POINTS
        )
    ]


def predicted_vs_measured(connection: Connection, run: store.RunRecord) -> PredictedVsMeasured:
    """The run's predicted step time and MFU beside the measured ones, with where it loses
    (:mod:`service.api.services.prediction`); a note instead when the run records too little."""
    return run_prediction(connection, run)


@dataclass(frozen=True, slots=True)
class EfficiencyView:
    answer: RunEfficiency
    points: list[fleet.SeriesPoint]


def run_efficiency(connection: Connection, *, principal: Principal, run_id: str) -> EfficiencyView:
    run = _require_run(connection, tenant=principal.tenant, run_id=run_id)
    histogram = store.run_histogram(connection, run_pk=run.pk)
    latest_hfu = None
    if run.latest_step is not None:
        latest = store.list_measurements(connection, run_pk=run.pk, limit=1, min_step=run.latest_step)
        latest_hfu = latest[0].hfu if latest else None
    points = _series(connection, run)
    trend = fleet.mfu_trend(points)
    series = fleet.downsample(points, SERIES_POINTS)
    tokens = fleet.tokens_so_far(latest_step=run.latest_step, global_batch_tokens=run.global_batch_tokens)
    seconds = _seconds_to_budget(run, tokens)
    reached_at = (
        run.latest_measured_at + timedelta(seconds=seconds)
        if seconds is not None and run.latest_measured_at is not None
        else None
    )
    origin = run.first_measured_at
    answer = RunEfficiency(
        run_id=run.id,
        status=run.status,
        convention=run.convention,
        precision=run.precision,
        peak_tflops_per_device=run.peak_tflops_per_device,
        measurement_count=run.measurement_count,
        mfu=MfuDistribution(
            median=run.median_mfu,
            p10=fleet.percentile_from_histogram(histogram, 0.10),
            p90=fleet.percentile_from_histogram(histogram, 0.90),
            latest=run.latest_mfu,
            latest_hfu=latest_hfu,
            bin_width=fleet.MFU_BIN_WIDTH,
        ),
        trend=None
        if trend is None
        else MfuTrend(
            slope_mfu_per_hour=trend.slope_mfu_per_hour,
            first_quartile_mean_mfu=trend.first_quartile_mean_mfu,
            last_quartile_mean_mfu=trend.last_quartile_mean_mfu,
            quartile_change=trend.quartile_change,
            quartile_change_relative=trend.quartile_change_relative,
            hours_covered=trend.hours_covered,
            measurements=trend.measurements,
            method=TREND_METHOD
            + (
                ""
                if run.measurement_count <= fleet.EXACT_SERIES_MAX
                else " (over step ranges of equal width: each range's mean MFU at its time midpoint, "
                "weighted by its measurements)"
            ),
        ),
        series=[
            SeriesPointRead(
                time=origin + timedelta(hours=point.hours),
                hours_since_first=point.hours,
                step=point.step,
                mfu=point.mfu,
                mfu_min=point.mfu if point.mfu_min is None else point.mfu_min,
                mfu_max=point.mfu if point.mfu_max is None else point.mfu_max,
                tokens_per_second=point.tokens_per_second,
                measurements=point.count,
            )
            for point in series
            if origin is not None
        ],
        tokens_so_far=tokens,
        tokens_method=TOKENS_METHOD,
        current_tokens_per_second=run.latest_tokens_per_second,
        token_budget_tokens=run.token_budget_tokens,
        budget_fraction_done=(
            min(tokens / run.token_budget_tokens, 1.0) if run.token_budget_tokens is not None else None
        ),
        seconds_to_budget=seconds,
        estimated_budget_reached_at=reached_at,
        prediction=(predicted := predicted_vs_measured(connection, run)).prediction,
        prediction_note=predicted.note,
    )
    return EfficiencyView(answer=answer, points=series)


# --------------------------------------------------------------------------------------------------
# Compare


def _configuration(run: store.RunRecord) -> dict[str, Any]:
    layout = run.spec["parallelism"]
    return {
        "model_name": run.model_name,
        "parameters_total": run.parameters_total,
        "size_class": run.size_class,
        "accelerator_id": run.accelerator,
        "accelerator_name": run.accelerator_name,
        "device_count": run.device_count,
        "precision": run.precision,
        "peak_tflops_per_device": run.peak_tflops_per_device,
        "seq_len_tokens": run.seq_len_tokens,
        "global_batch_tokens": run.global_batch_tokens,
        **{f"parallelism.{name}": layout.get(name) for name in ParallelLayoutRead.model_fields},
        "framework": run.framework,
        "cluster": run.cluster,
        "convention": run.convention,
        "price_per_device_hour": run.price_per_device_hour,
    }


def _comparison_item(run: store.RunRecord) -> RunComparisonItem:
    tokens = fleet.tokens_so_far(latest_step=run.latest_step, global_batch_tokens=run.global_batch_tokens)
    median_tflops = median_rate = cost = budget_at_median = None
    if run.median_mfu is not None and run.median_mfu > 0:
        seconds_per_billion = fleet.seconds_per_billion_tokens(
            model_flops_per_token=run.model_flops_per_token,
            device_count=run.device_count,
            peak_flops_per_device=run.peak_tflops_per_device * hardware.TERA,
            mfu=run.median_mfu,
        )
        median_tflops = run.median_mfu * run.peak_tflops_per_device
        median_rate = fleet.BILLION / seconds_per_billion / run.device_count
        if run.price_per_device_hour is not None:
            cost = fleet.cost_per_billion_tokens(
                seconds_per_billion=seconds_per_billion,
                device_count=run.device_count,
                price_per_device_hour=run.price_per_device_hour,
            )
        if run.token_budget_tokens is not None:
            budget_at_median = seconds_per_billion * run.token_budget_tokens / fleet.BILLION
    return RunComparisonItem(
        run_id=run.id,
        status=run.status,
        model_name=run.model_name,
        accelerator_id=run.accelerator,
        device_count=run.device_count,
        median_mfu=run.median_mfu,
        latest_mfu=run.latest_mfu,
        median_tflops_per_device=median_tflops,
        median_tokens_per_second_per_device=median_rate,
        latest_tokens_per_second_per_device=(
            run.latest_tokens_per_second / run.device_count
            if run.latest_tokens_per_second is not None
            else None
        ),
        cost_per_billion_tokens=cost,
        tokens_so_far=tokens,
        token_budget_tokens=run.token_budget_tokens,
        seconds_to_budget=_seconds_to_budget(run, tokens),
        seconds_for_budget_at_median=budget_at_median,
        configuration=_configuration(run),
    )


def compare_runs(
    connection: Connection, *, principal: Principal, request: RunCompareRequest
) -> RunComparison:
    found = store.get_runs(connection, tenant=principal.tenant, run_ids=request.run_ids)
    missing = [run_id for run_id in request.run_ids if run_id not in found]
    if missing:
        raise ProblemError(
            NOT_FOUND,
            f"No run {', '.join(repr(m) for m in missing)} for this API key's tenant.",
            missing_run_ids=missing,
        )
    items = [_comparison_item(found[run_id]) for run_id in request.run_ids]
    names = list(items[0].configuration)
    differing = [name for name in names if len({repr(item.configuration[name]) for item in items}) > 1]
    same = {name: items[0].configuration[name] for name in names if name not in differing}
    measured = [item for item in items if item.median_mfu is not None]
    best = max(measured, key=lambda item: item.median_mfu or 0.0).run_id if measured else None
    return RunComparison(
        runs=items, differing_fields=differing, same_fields=same, best_median_mfu_run_id=best
    )


# --------------------------------------------------------------------------------------------------
# Fleet statistics


def _percentiles(histogram: dict[int, int]) -> MfuPercentiles:
    values = fleet.percentiles_from_histogram(histogram)
    return MfuPercentiles(
        p10=values[0.10], p25=values[0.25], p50=values[0.50], p75=values[0.75], p90=values[0.90]
    )


def _groups(histograms: dict[store.GroupKey, dict[int, int]], *, minimum: int) -> list[FleetGroup]:
    groups = []
    for (accelerator, size_class), histogram in sorted(histograms.items()):
        runs_counted = sum(histogram.values())
        if runs_counted < minimum:
            continue
        groups.append(
            FleetGroup(
                accelerator=accelerator,
                size_class=size_class,
                run_count=runs_counted,
                percentiles=_percentiles(histogram),
            )
        )
    return groups


def fleet_mfu_stats(
    connection: Connection,
    *,
    principal: Principal,
    accelerator: str | None,
    size_class: str | None,
    run_id: str | None,
) -> FleetMfuStats:
    tenant = principal.tenant
    rank = None
    if run_id is not None:
        run = _require_run(connection, tenant=tenant, run_id=run_id)
        rank = _rank(connection, run)
    fleet_groups = store.fleet_histograms(connection, accelerator=accelerator, size_class=size_class)
    tenant_groups = store.tenant_histograms(
        connection, tenant=tenant, accelerator=accelerator, size_class=size_class
    )
    bounds = (*fleet.SIZE_CLASS_LOWER_BOUNDS[1:], None)
    return FleetMfuStats(
        statistic="per-run median MFU (each run counts once, with the median of its measurements)",
        bin_width=fleet.MFU_BIN_WIDTH,
        minimum_runs_per_group=fleet.MIN_FLEET_GROUP_RUNS,
        size_classes=[
            SizeClassRead(name=name, min_parameters=int(lower), max_parameters_exclusive=upper)
            for name, lower, upper in zip(
                fleet.SIZE_CLASSES, fleet.SIZE_CLASS_LOWER_BOUNDS, bounds, strict=True
            )
        ],
        fleet=_groups(fleet_groups, minimum=fleet.MIN_FLEET_GROUP_RUNS),
        tenant=_groups(tenant_groups, minimum=1),
        run=rank,
    )


def _rank(connection: Connection, run: store.RunRecord) -> RunRank:
    if run.fleet_bin is None or run.median_mfu is None:
        return RunRank(
            run_id=run.id,
            accelerator=run.accelerator,
            size_class=run.size_class,
            median_mfu=None,
            fleet_percentile_rank=None,
            fleet_run_count=None,
            tenant_percentile_rank=None,
            tenant_run_count=None,
            note="the run has no measurements yet",
        )
    key = (run.accelerator, run.size_class)
    tenant_histogram = store.tenant_histograms(
        connection, tenant=run.tenant, accelerator=run.accelerator, size_class=run.size_class
    ).get(key, {})
    fleet_histogram = (
        store.fleet_histograms(connection, accelerator=run.accelerator, size_class=run.size_class).get(
            key, {}
        )
        if run.in_fleet
        else {}
    )
    fleet_count = sum(fleet_histogram.values())
    shown = fleet_count >= fleet.MIN_FLEET_GROUP_RUNS
    if not run.in_fleet:
        note = "custom accelerators are ranked within the tenant only (their peaks are the caller's)"
    elif not shown:
        note = f"its fleet group has fewer than {fleet.MIN_FLEET_GROUP_RUNS} runs: no fleet rank is shown"
    else:
        note = "percentile ranks are mid-ranks among per-run medians (0 lowest, 1 highest)"
    return RunRank(
        run_id=run.id,
        accelerator=run.accelerator,
        size_class=run.size_class,
        median_mfu=run.median_mfu,
        fleet_percentile_rank=fleet.percentile_rank(fleet_histogram, run.fleet_bin) if shown else None,
        fleet_run_count=fleet_count if shown else None,
        tenant_percentile_rank=fleet.percentile_rank(tenant_histogram, run.fleet_bin),
        tenant_run_count=sum(tenant_histogram.values()),
        note=note,
    )
