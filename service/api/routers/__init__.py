"""Per-resource routers, mounted under /v1 by the app factory (one module per resource)."""

from __future__ import annotations

from fastapi import APIRouter

from service.api.routers import (
    advice,
    estimates,
    flops,
    goodput,
    hardware,
    memory,
    mfu,
    models,
    plans,
    predictions,
    runs,
    scaling,
    schedules,
    stats,
)

ROUTERS: list[APIRouter] = [
    models.router,
    hardware.router,
    flops.router,
    mfu.router,
    estimates.router,
    memory.router,
    predictions.router,
    plans.router,
    schedules.router,
    advice.router,
    scaling.router,
    runs.router,
    stats.router,
    goodput.router,
]

#: The order the app tries them in. FastAPI matches a request against each included router in turn,
#: and every miss costs: the runs router, with the measurement ingest schedulers call at every logging
#: step, goes first. The contract (openapi.yaml) lists them in ROUTERS order.
MATCH_ORDER: list[APIRouter] = [runs.router, *(router for router in ROUTERS if router is not runs.router)]

TAGS: list[dict[str, str]] = [
    {"name": "models", "description": "Model presets: well-known architectures and their parameter counts."},
    {
        "name": "hardware",
        "description": "The accelerator catalog: dense peaks per precision, memory, bandwidth, power.",
    },
    {"name": "flops", "description": "FLOPs per token under a named convention, broken down by component."},
    {
        "name": "mfu",
        "description": "Model FLOPs Utilization from a measured throughput; batch form for schedulers.",
    },
    {"name": "estimates", "description": "Wall-clock, device-hours, cost and energy for a token budget."},
    {"name": "memory", "description": "Memory per device for a model, layout and micro-batch."},
    {
        "name": "predictions",
        "description": "Predicted step time, throughput and MFU with the gap to peak broken down.",
    },
    {"name": "plans", "description": "Parallel layouts that fit, ranked by predicted throughput."},
    {"name": "schedules", "description": "Learning-rate schedules as numbers, CSV or charts."},
    {"name": "advice", "description": "Learning-rate and batch-size advice."},
    {"name": "compute-optimal", "description": "Compute-optimal model size and tokens for a budget."},
    {"name": "runs", "description": "Stored runs and their measurements (API key)."},
    {"name": "stats", "description": "Fleet MFU statistics (API key)."},
    {"name": "operations", "description": "Health, readiness, metrics and problem types."},
]
