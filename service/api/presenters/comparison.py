"""Runs compared (:mod:`service.usecases.comparison`) as answered."""

from __future__ import annotations

from typing import Any, cast

from service.api.schemas.layout import RunLayoutRead
from service.api.schemas.runs import ConfigValue, RunComparison, RunComparisonItem, RunStatus
from service.usecases.comparison import ComparedRun, Comparison

_LAYOUT_KNOBS = [f"parallelism.{name}" for name in RunLayoutRead.model_fields]


def _ordered(configuration: dict[str, Any]) -> dict[str, ConfigValue]:
    """The layout's knobs where they stand, in the order a run's own ``parallelism`` answers them."""
    ordered: dict[str, ConfigValue] = {}
    for name, value in configuration.items():
        if not name.startswith("parallelism."):
            ordered[name] = value
        elif name == next(knob for knob in configuration if knob.startswith("parallelism.")):
            ordered |= {knob: configuration[knob] for knob in _LAYOUT_KNOBS}
    return ordered


def _item(compared: ComparedRun) -> RunComparisonItem:
    run = compared.run
    return RunComparisonItem(
        run_id=run.id,
        status=cast("RunStatus", run.status),
        model_name=run.model_name,
        accelerator_id=run.accelerator,
        device_count=run.device_count,
        median_mfu=run.median_mfu,
        latest_mfu=run.latest_mfu,
        median_tflops_per_device=compared.median_tflops_per_device,
        median_tokens_per_second_per_device=compared.median_tokens_per_second_per_device,
        latest_tokens_per_second_per_device=compared.latest_tokens_per_second_per_device,
        cost_per_billion_tokens=compared.cost_per_billion_tokens,
        tokens_so_far=compared.tokens_so_far,
        token_budget_tokens=run.token_budget_tokens,
        seconds_to_budget=compared.seconds_to_budget,
        seconds_for_budget_at_median=compared.seconds_for_budget_at_median,
        configuration=_ordered(compared.configuration),
    )


def comparison_read(comparison: Comparison) -> RunComparison:
    items = [_item(compared) for compared in comparison.runs]
    names = list(items[0].configuration)
    return RunComparison(
        runs=items,
        differing_fields=[name for name in names if name in comparison.differing_fields],
        same_fields={
            name: items[0].configuration[name] for name in names if name not in comparison.differing_fields
        },
        best_median_mfu_run_id=comparison.best_median_mfu_run_id,
    )
