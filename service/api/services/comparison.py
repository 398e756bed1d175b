"""Several runs side by side."""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import Connection

from service.api.presenters.runs import budget_outlook
from service.api.problems import NOT_FOUND, ProblemError
from service.api.schemas.layout import RunLayoutRead
from service.api.schemas.runs import (
    RunCompareRequest,
    RunComparison,
    RunComparisonItem,
    RunStatus,
)
from service.domain import economics, hardware
from service.domain.parallel_layout import stored_layout_knobs
from service.store import records as records_store
from service.store import runs as store
from service.store.keys import Principal


def _configuration(run: records_store.RunRecord) -> dict[str, Any]:
    layout = stored_layout_knobs(run.spec["parallelism"])
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
        **{f"parallelism.{name}": layout.get(name) for name in RunLayoutRead.model_fields},
        "framework": run.framework,
        "cluster": run.cluster,
        "convention": run.convention,
        "price_per_device_hour": run.price_per_device_hour,
    }


def _comparison_item(run: records_store.RunRecord) -> RunComparisonItem:
    tokens = economics.tokens_so_far(latest_step=run.latest_step, global_batch_tokens=run.global_batch_tokens)
    median_tflops = median_rate = cost = budget_at_median = None
    if run.median_mfu is not None and run.median_mfu > 0:
        seconds_per_billion = economics.seconds_per_billion_tokens(
            model_flops_per_token=run.model_flops_per_token,
            device_count=run.device_count,
            peak_flops_per_device=run.peak_tflops_per_device * hardware.TERA,
            mfu=run.median_mfu,
        )
        median_tflops = run.median_mfu * run.peak_tflops_per_device
        median_rate = (
            economics.tokens_per_second_at(seconds_per_billion=seconds_per_billion) / run.device_count
        )
        if run.price_per_device_hour is not None:
            cost = economics.cost_per_billion_tokens(
                seconds_per_billion=seconds_per_billion,
                device_count=run.device_count,
                price_per_device_hour=run.price_per_device_hour,
            )
        if run.token_budget_tokens is not None:
            budget_at_median = economics.seconds_for_tokens(
                run.token_budget_tokens,
                model_flops_per_token=run.model_flops_per_token,
                device_count=run.device_count,
                peak_flops_per_device=run.peak_tflops_per_device * hardware.TERA,
                mfu=run.median_mfu,
            )
    return RunComparisonItem(
        run_id=run.id,
        status=cast("RunStatus", run.status),
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
        seconds_to_budget=budget_outlook(run, tokens).seconds_to_budget,
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
