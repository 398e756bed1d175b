"""A ``POST /v1/runs`` request as what the run stores, computed with the domain (parameter counts,
size class, FLOPs per token, peak), and the request's fingerprint for its Idempotency-Key (the use
case that records it: :mod:`service.usecases.record_run`)."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

import orjson

from service.api.presenters.memory import in_request
from service.api.resolve import resolve_accelerator, resolve_model, with_field_prefix
from service.api.schemas.common import ModelRef
from service.api.schemas.layout import RunLayoutIn, RunLayoutRead
from service.api.schemas.runs import RunCreate
from service.domain import fleet, hardware, models
from service.domain.errors import InvalidInput
from service.domain.flops import flops_per_token
from service.domain.parallel_layout import check_layout_for_model, layout_from_knobs, layout_knobs
from service.domain.run import global_batch
from service.store import records as records_store
from service.usecases.record_run import PreparedRun


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


def request_fingerprint(request: RunCreate) -> str:
    """Hash of the request as validated (defaults filled, key order and spacing irrelevant)."""
    canonical = orjson.dumps(request.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()
