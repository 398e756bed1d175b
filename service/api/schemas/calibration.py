"""A prediction's calibration: constants, or a fit on the run store (``fleet`` / ``tenant``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    Field,
    PlainValidator,
    SerializerFunctionWrapHandler,
    model_serializer,
)
from pydantic_core import PydanticCustomError

from service.api.schemas.common import (
    ApiModel,
)
from service.api.schemas.fields import Fraction


class CalibrationIn(ApiModel):
    """Overrides of the performance model's fitted defaults (e.g. from your own measured runs)."""

    matmul_efficiency_scale: Annotated[float, Field(ge=0.1, le=3.0)] = Field(
        default=1.0,
        description="multiplies the accelerator family's matmul and attention efficiency (1 = the defaults)",
    )
    overlap_fraction: Fraction | None = Field(
        default=None,
        description="share of overlapped communication that hides behind compute (default: the model's "
        "fitted 0.955)",
    )


#: Calibrations fitted on the run store: ``fleet`` (every tenant's runs, open) or ``tenant`` (the API
#: key's own runs; needs a key with the read scope).
CalibrationScopeName = Literal["fleet", "tenant"]
CALIBRATION_SCOPES: tuple[str, ...] = ("fleet", "tenant")


def _calibration_request(value: Any) -> CalibrationIn | str:
    """Constants or a scope. Validated by hand rather than as a pydantic union so that an error names
    ``body.calibration.<field>`` (a union would put its member's name in the path)."""
    if isinstance(value, str):
        if value in CALIBRATION_SCOPES:
            return value
        raise PydanticCustomError(
            "literal_error", "Input should be 'fleet' or 'tenant', or an object of calibration constants"
        )
    if isinstance(value, CalibrationIn):
        return value
    if not isinstance(value, dict):
        raise PydanticCustomError(
            "model_type", "Input should be an object of calibration constants, or 'fleet' or 'tenant'"
        )
    return CalibrationIn.model_validate(value)


CalibrationRequest = Annotated[
    CalibrationIn | CalibrationScopeName,
    PlainValidator(_calibration_request, json_schema_input_type=CalibrationIn | CalibrationScopeName),
]

CALIBRATION_FIELD: Any = Field(
    default=None,
    description="omitted: the model's fitted defaults. Constants ({matmul_efficiency_scale, "
    'overlap_fraction}): used as given. "fleet": fitted on the most recent stored runs on this '
    "accelerator that have measured throughput and a layout (every tenant's; only the fitted constants "
    'are answered). "tenant": the same over the API key\'s own runs (send X-API-Key or Authorization: '
    "Bearer with the read scope). A fit needs 3 such runs; with fewer the defaults are used and "
    "calibration.source says so. Fits are cached for a minute",
)


#: Fields of CalibrationRead answered only for a calibration asked as "fleet" or "tenant".
STORE_CALIBRATION_FIELDS = (
    "scope",
    "accelerator",
    "fitted",
    "fitted_on_runs",
    "skipped_runs",
    "minimum_runs",
    "rms_error_mfu",
    "default_rms_error_mfu",
    "fitted_at",
    "pending",
    "note",
)


class CalibrationRead(ApiModel):
    """The calibration a prediction ran under. The fields after ``source`` come only with a calibration
    asked as ``fleet`` or ``tenant`` (answers to other requests keep the three fields they always had)."""

    matmul_efficiency_scale: float
    overlap_fraction: float | None = Field(description="null: the model's defaults")
    source: str = Field(
        description="where the constants come from: `default (uncalibrated)`, `request override`, "
        "`fleet fit`, `tenant fit`, or `default (fallback from fleet)` / `default (fallback from tenant)` "
        "when too few stored runs could be fitted (`note` says why)"
    )
    scope: CalibrationScopeName | None = Field(default=None, description="the runs a fit was asked over")
    accelerator: str | None = Field(default=None, description="catalog id the runs were selected by")
    fitted: bool | None = Field(default=None, description="false: too few runs, the defaults are used")
    fitted_on_runs: int | None = Field(
        default=None, description="stored runs the fit used (with a fallback: the usable runs found)"
    )
    skipped_runs: int | None = Field(
        default=None,
        description="stored runs left out because their recorded layout cannot be predicted (e.g. the "
        "global batch is not a multiple of dp × micro-batch)",
    )
    minimum_runs: int | None = Field(default=None, description="runs a fit needs")
    rms_error_mfu: float | None = Field(
        default=None,
        description="root-mean-square error of the fitted model's MFU against the runs' median MFU "
        "(fraction; 0.01 = 1 MFU point); null without a fit",
    )
    default_rms_error_mfu: float | None = Field(
        default=None, description="the same error with the default constants, on the same runs"
    )
    fitted_at: AwareDatetime | None = Field(
        default=None, description="when the runs were read and fitted (answers reuse a fit for a minute)"
    )
    pending: bool | None = Field(
        default=None,
        description="true: no fit was ready, so the defaults were used while it is fitted in the "
        "background; later answers use it (a run's efficiency never waits for a fit)",
    )
    note: str | None = Field(default=None, description="the calibration in a sentence")

    @model_serializer(mode="wrap")
    def _store_fields_only_when_asked(self, handler: SerializerFunctionWrapHandler):
        # No return annotation: pydantic then documents the model's own fields (an annotation such as
        # dict[str, Any] would replace them in the published schema).
        data = handler(self)
        if self.scope is None and isinstance(data, dict):
            for name in STORE_CALIBRATION_FIELDS:
                data.pop(name, None)
        return data
