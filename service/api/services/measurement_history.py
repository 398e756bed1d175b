"""A run's measurement history, by step, in keyset pages."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from service.api.cursors import CursorCodec
from service.api.schemas.common import ThroughputIn
from service.api.schemas.fields import is_stored_int
from service.api.schemas.measurements import MeasurementPage, MeasurementRead
from service.domain.errors import InvalidInput
from service.store import measurements as measurements_store
from service.store.keys import Principal
from service.usecases.runs import require_run


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
    cursors: CursorCodec,
) -> MeasurementPage:
    run = require_run(connection, tenant=principal.tenant, run_id=run_id)
    scope = f"{run.id}:{min_step}:{max_step}"
    after = None
    if cursor is not None:
        payload = cursors.decode(cursor)
        if payload.get("f") != scope or not is_stored_int(payload.get("k")):
            raise InvalidInput(
                "this cursor belongs to another run or step range; pass next_cursor unchanged.",
                field="query.cursor",
            )
        after = payload["k"]
    rows = measurements_store.list_measurements(
        connection, run_pk=run.pk, limit=limit + 1, after_step=after, min_step=min_step, max_step=max_step
    )
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        next_cursor = cursors.encode({"k": rows[-1].step, "f": scope})
    return MeasurementPage(
        items=[_measurement_read(row) for row in rows], next_cursor=next_cursor, limit=limit
    )
