"""Predict a stored run: its recorded description (model, accelerator and count, parallel layout, global
batch, precision, FLOPs convention) through :func:`service.domain.performance.predict_step` under the
fleet calibration of its accelerator (:func:`service.usecases.calibration.stored_calibration`; the
defaults, said so, when the fleet has too few runs to fit), set beside the run's median MFU. A run that
does not record a micro-batch size or a global batch of whole sequences gets no prediction and a note
naming those fields."""

from __future__ import annotations

import math
from dataclasses import dataclass

from service.domain import economics, hardware
from service.domain.errors import DomainError
from service.domain.performance import StepPrediction
from service.store import records as records_store
from service.store.uow import Transaction
from service.usecases.calibration import (
    PredictionInputs,
    StoredCalibration,
    stored_calibration,
    stored_run_inputs,
)


@dataclass(frozen=True, slots=True)
class Measured:
    """The run's median MFU (a positive one) and what it means in tokens/s and step time."""

    median_mfu: float
    tokens_per_second: float
    step_time_seconds: float


@dataclass(frozen=True, slots=True)
class StoredRunPrediction:
    """The prediction with what it was made from, or None with the ``note`` saying why."""

    prediction: StepPrediction | None
    note: str | None = None
    inputs: PredictionInputs | None = None
    calibration: StoredCalibration | None = None
    measured: Measured | None = None


def _no_prediction(note: str) -> StoredRunPrediction:
    return StoredRunPrediction(None, note)


def predict_stored_run(transaction: Transaction, run: records_store.RunRecord) -> StoredRunPrediction:
    stored = stored_run_inputs(
        run.spec,
        precision=run.precision,
        seq_len_tokens=run.seq_len_tokens,
        device_count=run.device_count,
        convention=run.convention,
    )
    if stored.inputs is None:
        if stored.missing:
            return _no_prediction(
                f"No prediction: the run does not record {' and '.join(stored.missing)}. Record runs with "
                "them (POST /v1/runs) to see predicted against measured MFU and where the gap is."
            )
        return _no_prediction(f"No prediction: the recorded run cannot be predicted ({stored.problem}).")
    inputs = stored.inputs
    calibration = stored_calibration(
        transaction.engine,
        scope="fleet",
        tenant=None,
        accelerator=inputs.cluster.accelerator,
        connection=transaction,
        wait=False,  # an efficiency answer never waits for a fit (see calibration)
    )
    try:
        prediction = inputs.predict(calibration)
    except DomainError as exc:
        return _no_prediction(f"No prediction: the recorded layout cannot be predicted ({exc.message})")
    values = (prediction.step_time_seconds, prediction.mfu, *prediction.breakdown.as_dict().values())
    if not all(math.isfinite(v) for v in values) or prediction.step_time_seconds <= 0:
        return _no_prediction("No prediction: the recorded run predicts no finite step time.")
    measured = None
    if run.median_mfu is not None and run.median_mfu > 0:
        seconds_per_billion = economics.seconds_per_billion_tokens(
            model_flops_per_token=run.model_flops_per_token,
            device_count=run.device_count,
            peak_flops_per_device=run.peak_tflops_per_device * hardware.TERA,
            mfu=run.median_mfu,
        )
        tokens_per_second = economics.tokens_per_second_at(seconds_per_billion=seconds_per_billion)
        measured = Measured(run.median_mfu, tokens_per_second, run.global_batch_tokens / tokens_per_second)
    return StoredRunPrediction(prediction, None, inputs, calibration, measured)
