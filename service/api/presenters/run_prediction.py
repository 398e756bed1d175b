"""Predicted against measured for a stored run (the ``prediction`` of ``GET /v1/runs/{id}/efficiency``),
from :func:`service.usecases.run_prediction.predict_stored_run`. The largest components of the predicted
step other than useful FLOPs are named in plain language with what they cost in MFU points; the gap
between predicted and measured MFU is what the model does not explain.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.api.calibration import calibration_read
from service.api.presenters.memory import layout_read
from service.api.presenters.predictions import losses, prediction_warnings
from service.api.schemas.predictions import BreakdownComponentName
from service.api.schemas.runs import PredictedLossRead, RunPredictionRead
from service.domain.performance import StepPrediction
from service.usecases.calibration import STORED_RUN_ASSUMPTIONS, StoredCalibration
from service.usecases.run_prediction import StoredRunPrediction

#: Components of the predicted step named in an answer (largest first).
TOP_LOSSES = 3
#: A gap between predicted and measured MFU below this many points is "as predicted".
MATCH_POINTS = 0.5

WHAT_TO_TRY: dict[BreakdownComponentName, str] = {
    "ideal_matmul": "nothing: this is the useful work",
    "matmul_inefficiency": "larger GEMMs: a larger micro-batch or a smaller tp",
    "memory_bound": "fused kernels (norms, activations, RoPE, cross-entropy)",
    "exposed_tensor_parallel_comm": "a smaller tp, tp within one node, or overlapping it with the GEMMs "
    "(Transformer Engine userbuffers)",
    "exposed_context_parallel_comm": "a smaller cp, or more tokens per device to hide the exchange",
    "exposed_expert_parallel_comm": "a smaller ep, or ep within one node",
    "exposed_data_parallel_comm": "overlapping the gradient reduction with the backward, more micro-batches "
    "per step, or a faster scale-out network",
    "exposed_pipeline_p2p": "pipeline sends on their own stream, or fewer stages",
    "pipeline_bubble": "more micro-batches per step (a larger global batch or a smaller micro-batch), "
    "interleaving (virtual_stages), or fewer stages",
    "recompute": "selective instead of full recomputation, or none, where memory allows",
    "optimizer_step": "more tokens per step to amortise it, or a sharded optimizer state (ZeRO-1)",
    "kernel_overhead": "a larger micro-batch, or CUDA graphs",
}


@dataclass(frozen=True, slots=True)
class PredictedVsMeasured:
    """The ``prediction`` of an efficiency answer, or None with the ``note`` saying why."""

    prediction: RunPredictionRead | None
    note: str | None = None


def loss_name(component: BreakdownComponentName, prediction: StepPrediction) -> str:
    """A breakdown component in plain language, with the layout's numbers."""
    lay = prediction.layout
    if component == "pipeline_bubble":
        text = f"pipeline bubble from {prediction.micro_batches_per_step} micro-batches on {lay.pp} stages"
        return text + (f" ({lay.virtual_stages} virtual stages each)" if lay.virtual_stages > 1 else "")
    if component == "exposed_data_parallel_comm":
        return f"exposed data-parallel communication (ZeRO-{lay.zero_stage} over {lay.dp * lay.cp} ranks)"
    if component == "exposed_tensor_parallel_comm":
        return f"exposed tensor-parallel communication (tp={lay.tp})"
    if component == "exposed_context_parallel_comm":
        return f"exposed context-parallel K/V exchange (cp={lay.cp})"
    if component == "exposed_expert_parallel_comm":
        return f"MoE token all-to-all (ep={lay.ep})"
    if component == "exposed_pipeline_p2p":
        return f"exposed activation sends between {lay.pp} pipeline stages"
    if component == "recompute":
        return f"{lay.recompute} activation recomputation"
    if component == "kernel_overhead":
        return f"kernel launch overhead ({lay.micro_batch_sequences}-sequence micro-batches)"
    if component == "matmul_inefficiency":
        return "GEMMs and attention below peak"
    if component == "memory_bound":
        return "memory-bound kernels (norms, activations, softmax, cross-entropy)"
    if component == "optimizer_step":
        return "optimizer step"
    return "useful model FLOPs at peak"


def largest_losses(prediction: StepPrediction, count: int = TOP_LOSSES) -> list[PredictedLossRead]:
    step = prediction.step_time_seconds
    return [
        PredictedLossRead(
            component=component,
            name=loss_name(component, prediction),
            seconds=seconds,
            mfu_points=100.0 * seconds / step,
            what_to_try=WHAT_TO_TRY[component],
        )
        for component, seconds in losses(prediction)[:count]
        if seconds > 0
    ]


def _calibration_text(calibration: StoredCalibration) -> str:
    if calibration.fitted:
        return f"fleet calibration of {calibration.accelerator_id}, {calibration.n_observations} runs"
    return "default constants: the fleet has too few runs on this accelerator to fit"


def _reading(
    prediction: StepPrediction,
    calibration: StoredCalibration,
    measured: float | None,
    top: list[PredictedLossRead],
) -> str:
    predicted_text = f"{prediction.mfu:.1%} predicted ({_calibration_text(calibration)})"
    top_text = f"{top[0].name} ({top[0].mfu_points:.1f} MFU points)" if top else "nothing measurable"
    if measured is None:
        return f"No measurements yet; {predicted_text}; the largest predicted loss is {top_text}."
    gap = 100.0 * (prediction.mfu - measured)
    start = f"Measured {measured:.1%} MFU (median) against {predicted_text}"
    if top and gap > top[0].mfu_points:
        return (
            f"{start}: the run loses most outside the model, {gap:.1f} MFU points below the prediction (more "
            f"than its largest predicted loss, the {top_text}): look for stragglers, input-pipeline stalls, host "
            "overhead, checkpointing, or a layout detail the run did not record."
        )
    if gap > MATCH_POINTS:
        tail = f"; a further {gap:.1f} points are lost below the prediction."
    elif gap < -MATCH_POINTS:
        tail = f"; it runs {-gap:.1f} points above the prediction."
    else:
        tail = "; it runs as predicted (within 0.5 points)."
    return f"{start}: the run loses most to the {top_text}{tail}"


def predicted_vs_measured(stored: StoredRunPrediction, *, convention: str) -> PredictedVsMeasured:
    """The run's predicted step beside its measured median MFU (module docstring), or the note."""
    prediction, inputs, calibration, measured = (
        stored.prediction,
        stored.inputs,
        stored.calibration,
        stored.measured,
    )
    if prediction is None or inputs is None or calibration is None:
        return PredictedVsMeasured(None, stored.note)
    measured_mfu = measured.median_mfu if measured is not None else None
    gap = ratio = None
    if measured_mfu is not None:
        gap = 100.0 * (prediction.mfu - measured_mfu)
        ratio = measured_mfu / prediction.mfu
    top = largest_losses(prediction)
    assumptions = [
        *STORED_RUN_ASSUMPTIONS,
        f"calibration: {calibration.source}"
        + ("; the fit may count this run among the fleet's" if calibration.fitted else ""),
        f"predicted and measured MFU both count FLOPs under the run's {convention} convention; "
        "MFU points are percentage points of the dense peak",
    ]
    return PredictedVsMeasured(
        RunPredictionRead(
            calibration=calibration_read(calibration),
            layout=layout_read(prediction.layout),
            global_batch_sequences=inputs.global_batch_sequences,
            micro_batches_per_step=prediction.micro_batches_per_step,
            predicted_step_time_seconds=prediction.step_time_seconds,
            predicted_tokens_per_second=prediction.tokens_per_second,
            predicted_mfu=prediction.mfu,
            measured_median_mfu=measured_mfu,
            measured_tokens_per_second_at_median=measured.tokens_per_second if measured else None,
            measured_step_time_seconds_at_median=measured.step_time_seconds if measured else None,
            mfu_gap_points=gap,
            measured_to_predicted=ratio,
            largest_losses=top,
            reading=_reading(prediction, calibration, measured_mfu, top),
            assumptions=assumptions,
            warnings=prediction_warnings(prediction, inputs.cluster.accelerator),
        )
    )
