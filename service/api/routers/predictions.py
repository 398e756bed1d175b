"""Predicted step time, throughput and MFU with the gap to peak broken down (shaped by
:mod:`service.api.presenters.predictions`)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from service.api.calibration import CALIBRATION_PROBLEMS, resolve_calibration
from service.api.json_body import StrictJsonRoute
from service.api.negotiation import JSON, NEGOTIATED, PNG, SVG, negotiate, representations
from service.api.presenters.memory import (
    domain_layout,
)
from service.api.presenters.predictions import (
    CLUSTER_FIELDS,
    OFFERED,
    breakdown_chart,
    cluster_from,
    peak_flops,
    prediction_assumptions,
    run_prediction,
    step_prediction_read,
)
from service.api.resolve import resolve_model
from service.api.schemas.predictions import StepPredictionRead, StepPredictionRequest

router = APIRouter(tags=["predictions"], route_class=StrictJsonRoute)


@router.post(
    "/predictions/step",
    response_model=StepPredictionRead,
    responses=representations(SVG, PNG),
    openapi_extra={"x-problems": [*NEGOTIATED["x-problems"], *CALIBRATION_PROBLEMS["x-problems"]]},
    summary="Predicted step time, throughput, MFU and memory for a layout, with the gap to peak broken down",
)
async def predict_step_time(body: StepPredictionRequest, request: Request) -> StepPredictionRead | Response:
    """An analytical per-layer model (Calculon-style; `reference/performance_model.md`): GEMMs at a
    size-dependent efficiency, memory-bound kernels at HBM bandwidth, tensor/context/expert/data-parallel
    and pipeline communication (exposed part only), the 1F1B bubble, recomputation, the optimizer step
    and per-kernel overhead. `breakdown` gives each in seconds and as a fraction of the step (they sum
    to `step_time_seconds`); `mfu_gap` says how many MFU points each costs; `reading` names the largest.

    `mfu`/`hfu` count FLOPs under `convention` (default `palm`, passed explicitly to the model).
    The cluster's scale-out bandwidth defaults to 50e9 bytes/s per device one way (a 400 Gb/s NDR NIC per
    GPU). A layout that does not fit in memory is still predicted, with `fits: false` and a warning;
    a layout that does not multiply to the device count (`tp·pp·dp·cp`) or whose tp does not divide the
    heads is a 422 naming `body.layout.<field>`.

    `Accept`: `application/json` (default), `image/svg+xml` or `image/png` (the breakdown as a stacked
    bar).
    """
    media = negotiate(request, OFFERED)
    spec = resolve_model(body.model)
    cluster = cluster_from(body.cluster)
    peak_flops(cluster.accelerator, body.precision)
    layout = domain_layout(body.layout)
    calibration = await resolve_calibration(
        body.calibration, accelerator=cluster.accelerator, request=request
    )
    batch = body.batch_sequences
    prediction = run_prediction(
        spec, body.seq_len_tokens, cluster, layout, batch, precision=body.precision, calibration=calibration,
        optimizer=body.optimizer, convention=body.convention, dropout=body.dropout,
        fields={"global_batch_sequences": body.batch_field, **CLUSTER_FIELDS},
    )  # fmt: skip
    if media != JSON:
        return await breakdown_chart(media, prediction, spec, cluster)
    given = body.cluster.model_fields_set
    assumptions = prediction_assumptions(
        prediction,
        cluster,
        inter_node_given="inter_node_bandwidth_bytes_per_second" in given,
        intra_node_given="intra_node_bandwidth_bytes_per_second" in given
        and body.cluster.intra_node_bandwidth_bytes_per_second is not None,
        layout_given=body.layout,
    )
    return step_prediction_read(
        prediction, spec=spec, seq_len_tokens=body.seq_len_tokens, global_batch_sequences=batch, cluster=cluster,
        precision=body.precision, convention=body.convention, assumptions=assumptions,
    )  # fmt: skip
