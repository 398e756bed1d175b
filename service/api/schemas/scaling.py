"""Schemas of ``POST /v1/compute-optimal``: compute-optimal parameters and tokens for a budget.

C ≈ 6·N·D (training FLOPs); parameters as the fits count them (Chinchilla: all parameters); loss in
nats per token.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator

from service.api.schemas.common import ApiModel, HardwareRef, PrecisionName
from service.api.schemas.fields import field_error
from service.api.schemas.rules import either, not_both, only_with, states

__all__ = [
    "MIN_TRAINING_FLOPS",
    "ComputeBudgetRead",
    "ComputeOptimalRead",
    "ComputeOptimalRequest",
    "ComputeOptimalResultRead",
    "ConstantsKind",
    "FitChoice",
    "FitName",
    "IsoFlopCurveRead",
    "IsoFlopPointRead",
    "LossFitRead",
    "MfuScenarioRead",
]

FitName = Literal[
    "consensus",
    "chinchilla",
    "chinchilla_unrounded",
    "epoch",
    "chinchilla_approach1",
    "twenty_tokens_per_param",
    "deepseek",
]
#: ``fit`` in a request: one rule, or all of them side by side.
FitChoice = Literal[
    "consensus",
    "chinchilla",
    "chinchilla_unrounded",
    "epoch",
    "chinchilla_approach1",
    "twenty_tokens_per_param",
    "deepseek",
    "all",
]
LossFitName = Literal["chinchilla_rounded", "chinchilla_unrounded", "epoch"]
#: The smallest budget answered (a megaFLOP: nothing smaller trains a model; keeps the fits finite).
MIN_TRAINING_FLOPS = 1e6
ConstantsKind = Literal["rounded", "unrounded", "refit"]


@states(
    not_both("total_training_flops", "hardware"),
    either("total_training_flops", "hardware"),
    only_with("hardware", "wall_clock_hours", "mfu"),
    only_with("wall_clock_hours", "hardware"),
    only_with("mfu", "hardware"),
)
class ComputeOptimalRequest(ApiModel):
    """The budget as ``total_training_flops``, or as ``hardware`` × ``wall_clock_hours`` × ``mfu`` (practical
    compute = devices × dense peak at ``precision`` × MFU × seconds)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"total_training_flops": 5.76e23},
                {
                    "hardware": {"accelerator": "h100-sxm", "device_count": 1024},
                    "wall_clock_hours": 720,
                    "mfu": 0.4,
                    "fit": "all",
                },
                {
                    "hardware": {
                        "custom": {"name": "my-npu", "peak_tflops": {"bf16": 400}},
                        "device_count": 256,
                    },
                    "wall_clock_hours": 168,
                    "mfu": 0.35,
                    "fit": "epoch",
                },
            ]
        }
    )

    total_training_flops: Annotated[float, Field(ge=MIN_TRAINING_FLOPS, le=1e35)] | None = Field(
        default=None, description="training compute in FLOPs (give this or hardware)"
    )
    hardware: HardwareRef | None = Field(default=None, description="the accelerator and device count")
    wall_clock_hours: Annotated[float, Field(gt=0, le=1e6)] | None = Field(
        default=None, description="with hardware: hours the devices train"
    )
    mfu: Annotated[float, Field(gt=0, le=1)] | None = Field(
        default=None, description="with hardware: the Model FLOPs Utilization you expect (fraction)"
    )
    precision: PrecisionName = Field(default="bf16", description="with hardware: whose dense peak to use")
    fit: FitChoice = Field(
        default="consensus",
        description="consensus (default: the geometric mean of the fits that agree, epoch, "
        "chinchilla_approach1 and twenty_tokens_per_param, each member in the note: 69.8B at the Gopher "
        "budget; Besiroglu et al. 2024 showed the rounded Approach 3 inconsistent), chinchilla (Hoffmann et al. 2022 Eq. 10, rounded constants as printed: 32.2B at the "
        "Gopher budget), chinchilla_unrounded (α 0.3392, β 0.2849, E 1.6934: the paper's 40B), epoch "
        "(Besiroglu et al. 2024 refit), chinchilla_approach1 (Table 3's power law), "
        "twenty_tokens_per_param (N = √(C/120)), deepseek (DeepSeek LLM Eq. 4), or all side by side",
    )
    loss_fit: LossFitName = Field(
        default="chinchilla_rounded",
        description="the loss fit for rules without their own (approach1, 20 tokens/param, deepseek) "
        "and their iso-FLOP curve",
    )
    iso_flop_points: Annotated[int, Field(ge=3, le=1000)] = Field(
        default=21, description="points of the iso-FLOP curve (log-uniform in N)"
    )
    iso_flop_span: Annotated[float, Field(gt=1, le=1000)] = Field(
        default=10.0, description="the curve spans N_opt/span .. N_opt·span"
    )

    @model_validator(mode="after")
    def _one_budget(self) -> ComputeOptimalRequest:
        if self.total_training_flops is not None and self.hardware is not None:
            raise field_error(
                "total_training_flops", "give total_training_flops or hardware (× hours × mfu), not both"
            )
        if self.total_training_flops is None and self.hardware is None:
            raise field_error(
                "total_training_flops",
                "give the budget: total_training_flops, or hardware with wall_clock_hours and mfu",
                code="missing",
            )
        if self.hardware is not None:
            for name in ("wall_clock_hours", "mfu"):
                if getattr(self, name) is None:
                    raise field_error(name, f"a hardware budget needs {name}", code="missing")
        else:
            for name in ("wall_clock_hours", "mfu"):
                if getattr(self, name) is not None:
                    raise field_error(name, f"{name} goes with hardware; with total_training_flops drop it")
        return self


class LossFitRead(ApiModel):
    """The constants of a Chinchilla-form fit L(N, D) = E + A/N^α + B/D^β."""

    name: str
    constants: ConstantsKind = Field(
        description="rounded: Eq. 10 as printed; unrounded: α, β, E to four decimals; refit: Epoch AI"
    )
    irreducible_loss: float = Field(description="E")
    a_coeff: float = Field(description="A")
    b_coeff: float = Field(description="B")
    alpha: float
    beta: float
    source: str


class ComputeOptimalResultRead(ApiModel):
    rule: str = Field(description="the fit, in the request's vocabulary")
    source: str
    parameter_count: float = Field(description="N_opt")
    tokens: float = Field(description="D_opt")
    tokens_per_parameter: float
    predicted_loss: float | None = Field(description="nats per token; null for deepseek (no loss fit)")
    loss_fit: str | None = Field(description="the fit that predicted the loss")
    note: str


class IsoFlopPointRead(ApiModel):
    parameter_count: float
    tokens: float = Field(description="C / (6·parameter_count)")
    loss: float


class IsoFlopCurveRead(ApiModel):
    loss_fit: str
    total_training_flops: float
    points: list[IsoFlopPointRead]


class ComputeBudgetRead(ApiModel):
    total_training_flops: float
    basis: Literal["total_training_flops", "hardware"]
    formula: str
    accelerator: str | None = None
    device_count: int | None = None
    precision: str | None = None
    peak_flops_per_device: float | None = Field(default=None, description="dense peak FLOP/s at precision")
    mfu: float | None = None
    wall_clock_hours: float | None = None
    device_hours: float | None = None


class MfuScenarioRead(ApiModel):
    mfu: float
    total_training_flops: float
    compute_over_given: float = Field(description="this compute / the request's compute")
    parameter_count: float
    tokens: float
    predicted_loss: float | None


class ComputeOptimalRead(ApiModel):
    budget: ComputeBudgetRead
    fit: str
    result: ComputeOptimalResultRead = Field(description="the requested fit (chinchilla when fit is all)")
    results: list[ComputeOptimalResultRead] = Field(description="every fit side by side when fit is all")
    constants: list[LossFitRead] = Field(description="the loss-fit constants this answer used")
    iso_flop_curve: IsoFlopCurveRead = Field(description="loss vs model size at this budget")
    at_other_mfus: list[MfuScenarioRead] | None = Field(
        description="hardware budgets: the same at MFU 0.3/0.4/0.5/0.6 (and the given one)"
    )
    convention: str
