"""Which calibration a prediction runs under: the request's overrides, or the model's fitted defaults.

The seam for calibration fitted from the run store: a request will later say ``calibration: "fleet"``
and :func:`resolve_calibration` will fit one (``service.domain.performance.fit_calibration``) on the
stored runs of the accelerator it is given. Everything that predicts (``/v1/predictions/step``,
``/v1/plans/parallelism``, the ``predict`` form of ``/v1/estimates/training``) goes through here, so that
change is made in one place; the answers already echo the calibration used (``CalibrationRead``).
"""

from __future__ import annotations

from service.api.resolve import with_field_prefix
from service.api.schemas.performance import CalibrationIn, CalibrationRead
from service.domain.hardware import Accelerator
from service.domain.hardware_behaviour import NO_CALIBRATION, Calibration

REQUEST_SOURCE = "request override"


def resolve_calibration(
    given: CalibrationIn | None, *, accelerator: Accelerator, field: str = "body.calibration"
) -> Calibration:
    """The calibration for a prediction on ``accelerator``: the defaults when ``given`` is None, else the
    request's overrides (a domain error names ``field``.<name>)."""
    if given is None:
        return NO_CALIBRATION
    scale, overlap = given.matmul_efficiency_scale, given.overlap_fraction
    return with_field_prefix(
        field,
        lambda: Calibration(
            matmul_efficiency_scale=scale,
            overlap_fraction=overlap,
            accelerator_id=accelerator.id,
            source=REQUEST_SOURCE,
        ),
    )


def calibration_read(calibration: Calibration) -> CalibrationRead:
    return CalibrationRead(
        matmul_efficiency_scale=calibration.matmul_efficiency_scale,
        overlap_fraction=calibration.overlap_fraction,
        source=calibration.source,
    )
