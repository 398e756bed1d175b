"""Schemas of the ``predict`` form of ``/v1/estimates/training``: MFU from the performance model."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    Field,
    model_validator,
)

from service.api.schemas.calibration import CALIBRATION_FIELD, CalibrationRead, CalibrationRequest
from service.api.schemas.common import (
    ApiModel,
    PositiveInt,
)
from service.api.schemas.fields import (
    DROPOUT_FIELD,
    OPTIMIZER_FIELD,
    Bandwidth,
    GlobalBatchSequences,
    OptimizerName,
    field_error,
)
from service.api.schemas.layout import LayoutIn, LayoutRead
from service.api.schemas.plans import PlanConstraintsIn
from service.api.schemas.predictions import BreakdownComponentName
from service.api.schemas.rules import not_both, states


class PredictionSummaryRead(ApiModel):
    """The prediction a training estimate ran at (``mfu_source`` = predicted)."""

    layout_source: Literal["given", "planner_best"]
    layout: LayoutRead
    global_batch_sequences: int
    step_time_seconds: float
    tokens_per_second: float
    mfu: float
    hfu: float
    fits: bool | None
    memory_per_device_gib: float
    largest_loss: BreakdownComponentName
    calibration: CalibrationRead
    reading: str


@states(not_both("layout", "constraints"), not_both("global_batch_sequences", "global_batch_tokens"))
class PredictMfuIn(ApiModel):
    """Predict the MFU a training estimate runs at, instead of giving it. The estimate's ``model``,
    ``seq_len_tokens``, ``hardware`` (accelerator and count), ``precision`` and ``convention`` describe the
    job; this adds the cluster's network, the global batch and the layout. With ``layout`` that layout is
    predicted; without it the planner's fastest layout is (``constraints`` narrow its search)."""

    layout: LayoutIn | None = Field(
        default=None, description="tp·pp·dp·cp = hardware.device_count; omitted: the planner's best layout"
    )
    constraints: PlanConstraintsIn | None = Field(default=None, description="planner constraints (no layout)")
    devices_per_node: Annotated[int, Field(ge=1, le=1024)] = 8
    inter_node_bandwidth_bytes_per_second: Bandwidth = Field(
        default=50e9, description="per device, one way; default one 400 Gb/s NDR NIC per GPU"
    )
    intra_node_bandwidth_bytes_per_second: Bandwidth | None = None
    global_batch_sequences: GlobalBatchSequences | None = Field(
        default=None,
        description="sequences per step; or global_batch_tokens; default: the estimate's batch_tokens",
    )
    global_batch_tokens: PositiveInt | None = Field(default=None, description="tokens per step")
    optimizer: OptimizerName = OPTIMIZER_FIELD
    dropout: bool = DROPOUT_FIELD
    calibration: CalibrationRequest | None = CALIBRATION_FIELD

    @model_validator(mode="after")
    def _layout_or_constraints(self) -> PredictMfuIn:
        if self.layout is not None and self.constraints is not None:
            raise field_error(
                "constraints", "constraints narrow the planner's search: give layout or constraints"
            )
        if self.global_batch_sequences is not None and self.global_batch_tokens is not None:
            raise field_error(
                "global_batch_tokens", "give global_batch_sequences or global_batch_tokens, not both"
            )
        return self
