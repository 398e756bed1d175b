"""Stored measurements as answered: each row with the throughput as it was sent, in keyset pages."""

from __future__ import annotations

from typing import Any

from service.api.cursors import CursorCodec
from service.api.schemas.common import ThroughputIn
from service.api.schemas.measurements import MeasurementPage, MeasurementRead
from service.usecases.measurement_history import MeasurementHistoryPage


def measurement_read(row: Any) -> MeasurementRead:
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


def measurement_page(
    page: MeasurementHistoryPage, *, limit: int, scope: str, cursors: CursorCodec
) -> MeasurementPage:
    """The page, its ``next_cursor`` (the last step, signed with the scope it belongs to) when more follow."""
    next_cursor = cursors.encode({"k": page.rows[-1].step, "f": scope}) if page.more else None
    return MeasurementPage(
        items=[measurement_read(row) for row in page.rows], next_cursor=next_cursor, limit=limit
    )
