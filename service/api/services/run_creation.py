"""Recording a run (``POST /v1/runs``): what it stores, computed with the domain (parameter counts,
size class, FLOPs per token, peak), and its Idempotency-Key.

Idempotency-Key (create_run): the key is first claimed in a committed "in flight" row; the run and
the stored answer are then written in one transaction. A second request with the key finds the row:
a different body is 422 ``idempotency-key-reused``; a finished one gets the stored answer (same
status and body); one still in flight waits up to :data:`IDEMPOTENCY_WAIT_SECONDS` for it and is then
409 ``idempotency-in-flight``. A failed request releases its claim; a claim whose process died is
taken over after :data:`IDEMPOTENCY_LEASE_SECONDS`. Keys are kept :data:`IDEMPOTENCY_RETENTION`.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import IntegrityError

from service.api.presenters.memory import in_request
from service.api.presenters.runs import run_read
from service.api.problems import CONFLICT, IDEMPOTENCY_IN_FLIGHT, IDEMPOTENCY_MISMATCH, ProblemError
from service.api.resolve import resolve_accelerator, resolve_model, with_field_prefix
from service.api.schemas.common import ModelRef
from service.api.schemas.layout import RunLayoutIn, RunLayoutRead
from service.api.schemas.runs import RunCreate
from service.api.services.runs import now_utc
from service.domain import fleet, hardware, models
from service.domain.errors import InvalidInput
from service.domain.flops import flops_per_token
from service.domain.parallel_layout import (
    check_layout_for_model,
    layout_from_knobs,
    layout_knobs,
)
from service.domain.run import global_batch
from service.store import idempotency as idempotency_store
from service.store import records as records_store
from service.store import runs as store
from service.store.keys import Principal
from service.store.uow import UnitOfWork

IDEMPOTENCY_WAIT_SECONDS = 3.0
IDEMPOTENCY_POLL_SECONDS = 0.05
IDEMPOTENCY_LEASE_SECONDS = 60.0
IDEMPOTENCY_RETENTION = timedelta(hours=24)
CREATE_RUN_OPERATION = "create_run"


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


def _resolve_layout(
    layout: RunLayoutIn, device_count: int, model: models.ModelSpec, seq_len_tokens: int
) -> RunLayoutRead:
    """Devices = tp·pp·cp·dp (dp inferred when omitted); then the layout must be one the domain can
    run (:func:`layout_from_knobs`, :func:`check_layout_for_model`: what predictions of the run need)."""
    knobs = layout.knobs()
    model_parallel = layout.tp * layout.pp * layout.cp
    if layout.dp is None:
        if device_count % model_parallel:
            raise InvalidInput(
                f"tp·pp·cp = {model_parallel} does not divide hardware.device_count = {device_count}: "
                "give a layout whose product divides the devices, or the device count the job uses.",
                field="body.parallelism",
            )
        knobs["dp"] = device_count // model_parallel
    elif model_parallel * layout.dp != device_count:
        raise InvalidInput(
            f"tp·pp·cp·dp = {model_parallel * layout.dp} but hardware.device_count = {device_count}: the layout "
            "must use every device (omit dp to have it inferred).",
            field="body.parallelism.dp",
        )
    # An unknown micro-batch is stored as such; any value stands in for it in the checks.
    micro_batch = knobs.pop("micro_batch_sequences", None)
    resolved = in_request(
        lambda: layout_from_knobs({**knobs, "micro_batch_sequences": micro_batch or 1}),
        layout="body.parallelism",
    )
    in_request(lambda: check_layout_for_model(model, seq_len_tokens, resolved), layout="body.parallelism")
    return RunLayoutRead(**{**layout_knobs(resolved), "micro_batch_sequences": micro_batch})


def prepare_run(request: RunCreate, *, now: datetime) -> PreparedRun:
    """Everything a run stores, computed with the domain: parameter counts, size class, FLOPs per
    token under the convention (model FLOPs for MFU, with recomputation for HFU), the dense peak.
    Domain errors name their field under ``body``."""
    return with_field_prefix("body", lambda: _prepare_run(request, now=now))


def _prepare_run(request: RunCreate, *, now: datetime) -> PreparedRun:
    spec = resolve_model(request.model)
    accelerator = resolve_accelerator(request.hardware)
    count = request.hardware.device_count
    layout = _resolve_layout(request.parallelism, count, spec, request.seq_len_tokens)
    seq_len = request.seq_len_tokens
    flops = flops_per_token(spec, seq_len, convention=request.convention, recompute=layout.recompute)
    peak_tflops = hardware.peak_flops(accelerator, request.precision) / hardware.TERA
    counts = models.count_parameters(spec)
    batch_tokens, batch_sequences = global_batch(
        tokens=request.global_batch_tokens, sequences=request.global_batch_sequences, seq_len_tokens=seq_len
    )
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
        "accelerator": records_store.CUSTOM_ACCELERATOR if accelerator.is_custom else accelerator.id,
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


def _insert_run(connection: Connection, *, tenant: str, prepared: PreparedRun) -> records_store.RunRecord:
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
                idempotency_store.complete_idempotency_key(
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
            idempotency_store.release_idempotency_key(uow.connection, tenant=tenant, key=idempotency_key)
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
            idempotency_store.purge_idempotency_keys(connection, created_before=now - IDEMPOTENCY_RETENTION)
            claimed = idempotency_store.claim_idempotency_key(
                connection,
                tenant=tenant,
                key=key,
                operation=CREATE_RUN_OPERATION,
                request_hash=fingerprint,
                now=now,
            )
            record = (
                None
                if claimed
                else idempotency_store.get_idempotency_record(connection, tenant=tenant, key=key)
            )
            if record is not None and record.request_hash == fingerprint and record.state == "in_flight":
                # A claim whose holder died (nothing of it was committed) is taken over.
                claimed = idempotency_store.reclaim_idempotency_key(
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
