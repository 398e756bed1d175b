"""Compare runs (use case): several of a tenant's runs side by side, their rates at the median MFU,
and which parts of their configuration differ. No HTTP and no SQL: the store reads, the domain
computes (:mod:`service.domain.economics`), the API presents."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from service.domain import economics, hardware
from service.domain.parallel_layout import stored_layout_knobs
from service.store import records as records_store
from service.store import runs as runs_store
from service.store.uow import UnitOfWork
from service.usecases.efficiency import budget_of
from service.usecases.errors import RunsNotFound


@dataclass(frozen=True, slots=True)
class ComparedRun:
    run: records_store.RunRecord
    tokens_so_far: int
    median_tflops_per_device: float | None
    median_tokens_per_second_per_device: float | None
    latest_tokens_per_second_per_device: float | None
    cost_per_billion_tokens: float | None  # at the median throughput, where a price is known
    seconds_to_budget: float | None  # at the latest measured tokens/s
    seconds_for_budget_at_median: float | None
    #: What describes the run, by field name (the layout's knobs as ``parallelism.<knob>``).
    configuration: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Comparison:
    runs: list[ComparedRun]  # in the order asked
    differing_fields: frozenset[str]
    best_median_mfu_run_id: str | None


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
        **{f"parallelism.{name}": value for name, value in layout.items()},
        "framework": run.framework,
        "cluster": run.cluster,
        "convention": run.convention,
        "price_per_device_hour": run.price_per_device_hour,
    }


def _compared(run: records_store.RunRecord) -> ComparedRun:
    tokens = economics.tokens_so_far(latest_step=run.latest_step, global_batch_tokens=run.global_batch_tokens)
    median_tflops = median_rate = cost = budget_at_median = None
    if run.median_mfu is not None and run.median_mfu > 0:
        peak_flops_per_device = run.peak_tflops_per_device * hardware.TERA
        seconds_per_billion = economics.seconds_per_billion_tokens(
            model_flops_per_token=run.model_flops_per_token,
            device_count=run.device_count,
            peak_flops_per_device=peak_flops_per_device,
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
                peak_flops_per_device=peak_flops_per_device,
                mfu=run.median_mfu,
            )
    latest = run.latest_tokens_per_second
    return ComparedRun(
        run=run,
        tokens_so_far=tokens,
        median_tflops_per_device=median_tflops,
        median_tokens_per_second_per_device=median_rate,
        latest_tokens_per_second_per_device=None if latest is None else latest / run.device_count,
        cost_per_billion_tokens=cost,
        seconds_to_budget=budget_of(run, tokens).seconds_to_budget,
        seconds_for_budget_at_median=budget_at_median,
        configuration=_configuration(run),
    )


def compare_runs(uow: UnitOfWork, *, tenant: str, run_ids: Sequence[str]) -> Comparison:
    """The tenant's runs, in the order asked (:class:`RunsNotFound` naming every id that is not one)."""
    found = runs_store.get_runs(uow.connection, tenant=tenant, run_ids=list(run_ids))
    missing = [run_id for run_id in run_ids if run_id not in found]
    if missing:
        raise RunsNotFound(missing)
    compared = [_compared(found[run_id]) for run_id in run_ids]
    names = compared[0].configuration
    differing = frozenset(
        name for name in names if len({repr(item.configuration[name]) for item in compared}) > 1
    )
    measured = [item for item in compared if item.run.median_mfu is not None]
    best = max(measured, key=lambda item: item.run.median_mfu or 0.0).run.id if measured else None
    return Comparison(runs=compared, differing_fields=differing, best_median_mfu_run_id=best)
