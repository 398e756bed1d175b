"""Shaping a :class:`service.domain.performance.StepPrediction` (cluster, breakdown, MFU gap, reading)
for ``/v1/predictions/step``, ``/v1/plans/parallelism`` and ``/v1/estimates/training``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from service import plots
from service.api.calibration import calibration_read
from service.api.negotiation import JSON, PNG, SVG, media_response
from service.api.presenters.memory import (
    accelerator_read,
    fit_warnings,
    in_request,
    layout_assumptions,
    layout_read,
    memory_summary,
    resolve_device,
)
from service.api.schemas.cluster import ClusterIn, ClusterRead
from service.api.schemas.layout import LayoutIn
from service.api.schemas.predictions import (
    BreakdownComponentName,
    BreakdownItemRead,
    MfuCostRead,
    MfuGapRead,
    StepPredictionRead,
)
from service.domain import hardware, performance
from service.domain.errors import ImplausibleResult
from service.domain.flops import Convention
from service.domain.hardware_behaviour import Calibration, behaviour_for
from service.domain.memory import Optimizer, ParallelLayout
from service.domain.models import ModelSpec

OFFERED = (JSON, SVG, PNG)
#: The default scale-out bandwidth (ClusterIn): one 400 Gb/s NDR InfiniBand NIC per GPU, one way.
DEFAULT_INTER_NODE_BANDWIDTH = 50e9

#: What each breakdown component is (the order is the domain's StepBreakdown order).
COMPONENTS: dict[BreakdownComponentName, str] = {
    "ideal_matmul": "the useful model FLOPs (causal attention, no recomputation) at the dense peak: the "
    "only time MFU counts",
    "matmul_inefficiency": "GEMMs and attention below peak (size- and shape-dependent efficiency, FlashAttention's "
    "diagonal blocks or the masked half of unfused attention, the logits)",
    "memory_bound": "HBM-bound kernels: norms, activation functions, residual + bias + dropout, RoPE, softmax, "
    "cross-entropy",
    "exposed_tensor_parallel_comm": "tensor-parallel all-reduces (reduce-scatter + all-gather with sequence "
    "parallel) not hidden behind compute",
    "exposed_context_parallel_comm": "ring-attention K/V exchanges not hidden behind the attention",
    "exposed_expert_parallel_comm": "MoE token all-to-alls",
    "exposed_data_parallel_comm": "gradient reduction and parameter gathers (ZeRO/FSDP) not hidden behind "
    "the backward and forward",
    "exposed_pipeline_p2p": "activation sends between pipeline stages not hidden",
    "pipeline_bubble": "1F1B fill and drain ((pp − 1)/v micro-batch times) plus stage imbalance",
    "recompute": "recomputed forward work (selective: the attention core; full: each layer's forward)",
    "optimizer_step": "the optimizer update over the local (ZeRO-sharded) parameters, HBM-bound",
    "kernel_overhead": "fixed per-kernel launch and tail cost (a larger micro-batch amortises it)",
}
LABELS: dict[BreakdownComponentName, str] = {name: name.replace("_", " ") for name in COMPONENTS}


# --------------------------------------------------------------------------------------------------
# Request → domain


def make_cluster(
    accelerator: hardware.Accelerator,
    *,
    device_count: int,
    devices_per_node: int,
    inter_node_bandwidth_bytes_per_second: float,
    intra_node_bandwidth_bytes_per_second: float | None,
    fields: Mapping[str, str],
) -> performance.Cluster:
    return in_request(
        lambda: performance.Cluster(
            accelerator,
            device_count,
            devices_per_node,
            inter_node_bandwidth_bytes_per_second,
            intra_node_bandwidth_bytes_per_second,
        ),
        layout=None,
        fields=fields,
    )


CLUSTER_FIELDS = {
    name: f"body.cluster.{name}"
    for name in (
        "device_count",
        "devices_per_node",
        "inter_node_bandwidth_bytes_per_second",
        "intra_node_bandwidth_bytes_per_second",
    )
}


def cluster_from(given: ClusterIn) -> performance.Cluster:
    accelerator = resolve_device(given.accelerator, given.custom, field="body.cluster")
    return make_cluster(
        accelerator,
        device_count=given.device_count,
        devices_per_node=given.devices_per_node,
        inter_node_bandwidth_bytes_per_second=given.inter_node_bandwidth_bytes_per_second,
        intra_node_bandwidth_bytes_per_second=given.intra_node_bandwidth_bytes_per_second,
        fields=CLUSTER_FIELDS,
    )


def peak_flops(accelerator: hardware.Accelerator, precision: hardware.Precision) -> float:
    """The dense peak, checked before predicting (an unsupported precision names ``body.precision``)."""
    return in_request(lambda: hardware.peak_flops(accelerator, precision))


def cluster_read(cluster: performance.Cluster, precision: hardware.Precision) -> ClusterRead:
    return ClusterRead(
        accelerator=accelerator_read(cluster.accelerator),
        device_count=cluster.device_count,
        devices_per_node=cluster.devices_per_node,
        nodes=math.ceil(cluster.device_count / cluster.devices_per_node),
        inter_node_bandwidth_bytes_per_second=cluster.inter_node_bandwidth_bytes_per_second,
        intra_node_bandwidth_bytes_per_second=cluster.intra_bandwidth,
        peak_tflops_per_device=peak_flops(cluster.accelerator, precision) / 1e12,
    )


def check_finite(prediction: performance.StepPrediction, field: str) -> None:
    """Absurd inputs (a custom part of 1e-9 TFLOP/s, a 1 MB/s network) can overflow: say so, never 500."""
    values = [prediction.step_time_seconds, prediction.mfu, prediction.hfu, prediction.tokens_per_second,
              *prediction.breakdown.as_dict().values()]  # fmt: skip
    if not all(math.isfinite(v) for v in values) or prediction.step_time_seconds <= 0:
        raise ImplausibleResult(
            "the prediction is not a finite step time: check the accelerator's peak, bandwidths and the batch.",
            field=field,
        )


def run_prediction(
    spec: ModelSpec,
    seq_len_tokens: int,
    cluster: performance.Cluster,
    layout: ParallelLayout,
    global_batch_sequences: int,
    *,
    precision: hardware.Precision,
    calibration: Calibration,
    optimizer: Optimizer,
    convention: Convention,
    dropout: bool,
    layout_field: str = "body.layout",
    fields: Mapping[str, str] | None = None,
) -> performance.StepPrediction:
    """``predict_step`` with the convention passed explicitly; domain errors named at the request."""
    prediction = in_request(
        lambda: performance.predict_step(
            spec,
            seq_len_tokens,
            cluster,
            layout,
            global_batch_sequences,
            precision,
            calibration,
            optimizer=optimizer,
            convention=convention,
            dropout=dropout,
        ),
        layout=layout_field,
        fields=fields,
    )
    check_finite(prediction, "body")
    return prediction


# --------------------------------------------------------------------------------------------------
# Prediction → answer


def breakdown_items(prediction: performance.StepPrediction) -> list[BreakdownItemRead]:
    step = prediction.step_time_seconds
    seconds = prediction.breakdown.as_dict()
    items = []
    for name, description in COMPONENTS.items():
        value = seconds[f"{name}_seconds"]
        items.append(
            BreakdownItemRead(
                component=name, seconds=value, fraction_of_step=value / step, description=description
            )
        )
    return items


def losses(prediction: performance.StepPrediction) -> list[tuple[BreakdownComponentName, float]]:
    """(component, seconds) of everything but the ideal matmul time, largest first."""
    seconds = prediction.breakdown.as_dict()
    pairs = [(name, seconds[f"{name}_seconds"]) for name in COMPONENTS if name != "ideal_matmul"]
    return sorted(pairs, key=lambda pair: -pair[1])


def largest_loss(prediction: performance.StepPrediction) -> tuple[BreakdownComponentName, float]:
    """The costliest component and its fraction of the step."""
    name, seconds = losses(prediction)[0]
    return name, seconds / prediction.step_time_seconds


def mfu_gap(prediction: performance.StepPrediction, convention: Convention) -> MfuGapRead:
    step = prediction.step_time_seconds
    useful = prediction.breakdown.ideal_matmul_seconds / step
    costs = [MfuCostRead(component=name, mfu_cost=s / step) for name, s in losses(prediction) if s > 0]
    return MfuGapRead(
        useful_mfu=useful,
        mfu=prediction.mfu,
        convention=convention,
        convention_difference=prediction.mfu - useful,
        total_cost=1.0 - useful,
        costs=costs,
    )


def prediction_reading(prediction: performance.StepPrediction) -> str:
    name, share = largest_loss(prediction)
    return (
        f"Largest loss: {LABELS[name]}, {share:.0%} of the {prediction.step_time_seconds:.3g} s step "
        f"({100 * share:.1f} MFU points); predicted MFU {prediction.mfu:.1%} ({prediction.convention})."
    )


def prediction_assumptions(
    prediction: performance.StepPrediction,
    cluster: performance.Cluster,
    *,
    inter_node_given: bool,
    intra_node_given: bool,
    layout_given: LayoutIn | None,
) -> list[str]:
    behaviour = behaviour_for(cluster.accelerator)
    inter = cluster.inter_node_bandwidth_bytes_per_second
    notes = [
        f"inter-node bandwidth {inter / 1e9:g} GB/s per device, one way"
        + ("" if inter_node_given else " (default: one 400 Gb/s NDR InfiniBand NIC per GPU)"),
        f"intra-node bandwidth {cluster.intra_bandwidth / 1e9:g} GB/s per device, one way"
        + ("" if intra_node_given else " (the accelerator's intra-node link)"),
        f"{cluster.devices_per_node} devices per node; tensor parallelism inside a node uses that link",
        f"efficiency curves of the {behaviour.family} family"
        + (f" (derived from {behaviour.derived_from})" if behaviour.derived_from else ""),
        f"calibration: {prediction.calibration.source}"
        + (
            ""
            if prediction.calibration.overlap_fraction is not None
            else f"; overlapped communication hides up to {performance.DP_OVERLAP_FRACTION:g} of its window"
        ),
        f"mfu, hfu and achieved TFLOP/s count FLOPs under the {prediction.convention} convention; the breakdown's "
        "ideal matmul time counts useful FLOPs (megatron_causal), see mfu_gap",
    ]
    if layout_given is not None:
        notes.extend(layout_assumptions(layout_given))
    notes.extend(prediction.memory.assumptions)
    return notes


def prediction_warnings(
    prediction: performance.StepPrediction, accelerator: hardware.Accelerator
) -> list[str]:
    warnings = fit_warnings(prediction.memory, accelerator)
    layout = prediction.layout
    if prediction.memory.fits is False:
        warnings.insert(0, "the layout does not fit in device memory: the step is predicted as if it did.")
    if layout.pp > 1 and prediction.micro_batches_per_step < layout.pp:
        warnings.append(
            f"{prediction.micro_batches_per_step} micro-batches per step for {layout.pp} pipeline stages: the "
            "pipeline never fills (give a larger global batch or a smaller micro-batch)."
        )
    return warnings


def step_prediction_read(
    prediction: performance.StepPrediction,
    *,
    spec: ModelSpec,
    seq_len_tokens: int,
    global_batch_sequences: int,
    cluster: performance.Cluster,
    precision: hardware.Precision,
    convention: Convention,
    assumptions: list[str],
) -> StepPredictionRead:
    return StepPredictionRead(
        model=spec.name,
        seq_len_tokens=seq_len_tokens,
        global_batch_sequences=global_batch_sequences,
        global_batch_tokens=global_batch_sequences * seq_len_tokens,
        micro_batches_per_step=prediction.micro_batches_per_step,
        precision=precision,
        convention=convention,
        cluster=cluster_read(cluster, precision),
        layout=layout_read(prediction.layout),
        calibration=calibration_read(prediction.calibration),
        step_time_seconds=prediction.step_time_seconds,
        tokens_per_second=prediction.tokens_per_second,
        tokens_per_second_per_device=prediction.tokens_per_second_per_device,
        mfu=prediction.mfu,
        hfu=prediction.hfu,
        achieved_tflops_per_device=prediction.achieved_tflops_per_device,
        model_flops_per_step=prediction.model_flops_per_step,
        hardware_flops_per_step=prediction.hardware_flops_per_step,
        bubble_fraction=prediction.bubble_fraction,
        tensor_parallel_comm_seconds=prediction.tensor_parallel_comm_seconds,
        data_parallel_comm_seconds=prediction.data_parallel_comm_seconds,
        pipeline_p2p_seconds=prediction.pipeline_p2p_seconds,
        fits=prediction.memory.fits,
        memory=memory_summary(prediction.memory),
        breakdown=breakdown_items(prediction),
        mfu_gap=mfu_gap(prediction, convention),
        reading=prediction_reading(prediction),
        regimes=list(prediction.regimes),
        uncertainty_mfu_points=prediction.uncertainty_mfu_points,
        assumptions=assumptions,
        warnings=prediction_warnings(prediction, cluster.accelerator),
    )


async def breakdown_chart(
    media: str, prediction: performance.StepPrediction, spec: ModelSpec, cluster: performance.Cluster
) -> Response:
    """A stacked horizontal bar of the step time by component (components that take no time left out)."""
    segments = [(LABELS[item.component], max(item.seconds, 0.0)) for item in breakdown_items(prediction)]
    segments = [(label, seconds) for label, seconds in segments if seconds > 0]
    lay = prediction.layout
    title = (
        f"{spec.name} on {cluster.device_count} × {cluster.accelerator.display_name}: step "
        f"{prediction.step_time_seconds:.3g} s, MFU {prediction.mfu:.1%} ({prediction.convention})"
    )
    bar_label = f"tp{lay.tp} pp{lay.pp} dp{lay.dp} b{lay.micro_batch_sequences}"
    bars: list[plots.Bar] = [(bar_label, segments)]
    if media == SVG:
        svg = plots.bar_chart_svg(title, "seconds per step", bars)
        return media_response(svg, SVG, filename="step_breakdown.svg")
    png = await run_in_threadpool(plots.bar_chart_png, title, "seconds per step", bars)
    return media_response(png, PNG, filename="step_breakdown.png")
