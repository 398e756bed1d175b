"""A stored run as answered: its record, summary and time to its token budget."""

from __future__ import annotations

from typing import cast

from service.api.cursors import CursorCodec, run_cursor
from service.api.schemas.common import ConventionName, PrecisionName
from service.api.schemas.layout import RunLayoutRead
from service.api.schemas.runs import (
    RunLinks,
    RunPage,
    RunParameterCountsRead,
    RunRead,
    RunSort,
    RunStatus,
    RunSummary,
    SizeClassName,
    SortOrder,
)
from service.domain import economics
from service.domain.parallel_layout import stored_layout_knobs
from service.store import records as records_store
from service.store.run_filters import RunFilters
from service.usecases.efficiency import budget_of
from service.usecases.runs import RunListPage


def run_summary(run: records_store.RunRecord) -> RunSummary:
    tokens = economics.tokens_so_far(latest_step=run.latest_step, global_batch_tokens=run.global_batch_tokens)
    return RunSummary(
        measurement_count=run.measurement_count,
        first_measured_at=run.first_measured_at,
        latest_step=run.latest_step,
        latest_measured_at=run.latest_measured_at,
        latest_mfu=run.latest_mfu,
        median_mfu=run.median_mfu,
        latest_tokens_per_second=run.latest_tokens_per_second,
        tokens_so_far=tokens,
        seconds_to_budget=budget_outlook(run, tokens).seconds_to_budget,
    )


def budget_outlook(run: records_store.RunRecord, tokens_done: int) -> economics.BudgetOutlook:
    """When the run reaches its token budget (:func:`service.usecases.efficiency.budget_of`)."""
    return budget_of(run, tokens_done)


def run_read(run: records_store.RunRecord) -> RunRead:
    spec = run.spec
    base = f"/v1/runs/{run.id}"
    return RunRead(
        id=run.id,
        status=cast("RunStatus", run.status),
        started_at=run.started_at,
        finished_at=run.finished_at,
        created_at=run.created_at,
        updated_at=run.updated_at,
        model=spec["model"],
        model_name=run.model_name,
        parameters=RunParameterCountsRead(
            total=run.parameters_total,
            active_per_token=run.parameters_active,
            non_embedding=run.parameters_non_embedding,
        ),
        size_class=cast("SizeClassName", run.size_class),
        hardware=spec["hardware"],
        accelerator_id=run.accelerator,
        accelerator_name=run.accelerator_name,
        device_count=run.device_count,
        precision=cast("PrecisionName", run.precision),
        seq_len_tokens=run.seq_len_tokens,
        global_batch_tokens=run.global_batch_tokens,
        global_batch_sequences=spec.get("global_batch_sequences"),
        parallelism=RunLayoutRead(**stored_layout_knobs(spec["parallelism"])),
        framework=run.framework,
        cluster=run.cluster,
        scheduler_job_id=run.scheduler_job_id,
        attempt=run.attempt,
        tags=list(run.tags),
        token_budget_tokens=run.token_budget_tokens,
        price_per_device_hour=run.price_per_device_hour,
        convention=cast("ConventionName", run.convention),
        model_flops_per_token=run.model_flops_per_token,
        hardware_flops_per_token=run.hardware_flops_per_token,
        peak_tflops_per_device=run.peak_tflops_per_device,
        summary=run_summary(run),
        links=RunLinks(self=base, measurements=f"{base}/measurements", efficiency=f"{base}/efficiency"),
    )


def run_page(
    page: RunListPage, *, filters: RunFilters, sort: str, order: str, limit: int, cursors: CursorCodec
) -> RunPage:
    """The page, its ``next_cursor`` (the last run's position, signed with the listing's filters and
    sort) when more follow."""
    next_cursor = (
        run_cursor(cursors, page.runs[-1], filters=filters, sort=sort, order=order) if page.more else None
    )
    return RunPage(
        items=[run_read(run) for run in page.runs],
        next_cursor=next_cursor,
        limit=limit,
        sort=cast("RunSort", sort),
        order=cast("SortOrder", order),
    )
