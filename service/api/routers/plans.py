"""Parallel layouts that fit, ranked by predicted throughput."""

from __future__ import annotations

from fastapi import APIRouter, Request

from service.api.calibration import CALIBRATION_PROBLEMS, calibration_read, resolve_calibration
from service.api.json_body import StrictJsonRoute
from service.api.presenters.memory import layout_read
from service.api.presenters.plans import candidate_read, plan_reading, search_layouts
from service.api.presenters.predictions import (
    CLUSTER_FIELDS,
    cluster_from,
    cluster_read,
    peak_flops,
)
from service.api.resolve import resolve_model
from service.api.schemas.plans import InfeasibleGroupRead, PlanRead, PlanRequest

router = APIRouter(tags=["plans"], route_class=StrictJsonRoute)


@router.post(
    "/plans/parallelism",
    summary="The parallel layouts that fit, ranked by predicted throughput",
    openapi_extra=CALIBRATION_PROBLEMS,
)
async def plan_parallelism(body: PlanRequest, request: Request) -> PlanRead:
    """Every layout of the cluster is enumerated: tp (dividing the heads; within a node unless
    `constraints.tp_within_node` is false), pp (up to the layers; when pp does not divide them, or
    `constraints.first_stage_layers`/`last_stage_layers` pin the end stages, the stages are uneven and the
    slowest or fullest decides), cp and ep as allowed, dp = devices/(tp·pp·cp), micro-batches dividing the
    per-replica batch, interleaving (v dividing the layers per stage; micro-batches a multiple of pp), ZeRO
    stages with their hybrid-sharding groups (`shard_group_sizes`), and recompute modes with their policies
    (`selective_policies`, `recompute_every_k_values`). Each is checked
    for memory and, when it fits, its step is predicted (as `POST /v1/predictions/step` would, under
    `convention`, default `palm`). Feasible layouts come back fastest first (`max_results`, default 20);
    the rest are counted by the reason they were dropped, with a few examples. A candidate's `layout` can
    be posted as is to `/v1/predictions/step` for its full breakdown.
    """
    spec = resolve_model(body.model)
    cluster = cluster_from(body.cluster)
    peak_flops(cluster.accelerator, body.precision)
    calibration = await resolve_calibration(
        body.calibration, accelerator=cluster.accelerator, request=request
    )
    batch = body.batch_sequences
    result, elapsed = await search_layouts(
        spec, body.seq_len_tokens, cluster, batch, body.constraints,
        precision=body.precision, calibration=calibration, optimizer=body.optimizer,
        convention=body.convention, dropout=body.dropout,
        fields={"global_batch_sequences": body.batch_field, **CLUSTER_FIELDS},
    )  # fmt: skip
    candidates = [
        candidate_read(rank, candidate) for rank, candidate in enumerate(result.candidates, start=1)
    ]
    return PlanRead(
        model=spec.name,
        seq_len_tokens=body.seq_len_tokens,
        global_batch_sequences=batch,
        global_batch_tokens=batch * body.seq_len_tokens,
        precision=body.precision,
        convention=body.convention,
        cluster=cluster_read(cluster, body.precision),
        calibration=calibration_read(calibration),
        candidates=candidates,
        evaluated_count=result.evaluated_count,
        feasible_count=result.feasible_count,
        returned_count=len(candidates),
        infeasible=[
            InfeasibleGroupRead(
                reason=group.reason, count=group.count, examples=[layout_read(lay) for lay in group.examples]
            )
            for group in result.infeasible
        ],
        elapsed_seconds=elapsed,
        candidates_per_second=result.evaluated_count / elapsed if elapsed > 0 else 0.0,
        reading=plan_reading(candidates, result, body.convention),
    )
