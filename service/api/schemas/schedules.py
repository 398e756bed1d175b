"""Schemas of ``POST /v1/schedules/lr``: a learning-rate schedule, asked at steps or sampled.

The request's schedule fields carry the names of :class:`service.domain.schedules.ScheduleSpec`, so a
domain error's ``field`` is the request field to change. Step semantics (DESIGN §4): Hugging Face
transformers by default; ``semantics`` picks optax or PyTorch, ``past_end`` what happens after the run.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator

from service.api.schemas.common import ApiModel
from service.api.schemas.fields import field_error
from service.api.schemas.rules import not_both, states

__all__ = [
    "MAX_REQUESTED_STEPS",
    "MAX_TOTAL_STEPS",
    "LrScheduleRead",
    "LrScheduleRequest",
    "ScheduleKindName",
    "SchedulePhaseRead",
    "SchedulePointRead",
    "ScheduleSummaryRead",
    "field_error",
]

ScheduleKindName = Literal[
    "constant",
    "linear",
    "cosine",
    "cosine_with_min_lr",
    "cosine_warmup_with_min_lr",
    "cosine_with_restarts",
    "polynomial",
    "inverse_sqrt",
    "warmup_stable_decay",
    # transformers SchedulerType names and short names, answered under the canonical kind
    "constant_with_warmup",
    "cosine_with_hard_restarts",
    "wsd",
]
ShapeName = Literal["linear", "cosine", "1-sqrt"]

#: Largest run the endpoint answers (values are O(1) per step; nothing is materialised).
MAX_TOTAL_STEPS = 10**10
#: Most steps one request may list in ``steps``.
MAX_REQUESTED_STEPS = 10_000
#: The domain's cap on sampled points (``schedules.MAX_SAMPLE_POINTS``).
MAX_SAMPLE_POINTS = 100_000

Step = Annotated[int, Field(ge=0, le=MAX_TOTAL_STEPS * 10)]
LearningRate = Annotated[float, Field(gt=0, le=1e3)]
NonNegativeLr = Annotated[float, Field(ge=0, le=1e3)]
Ratio = Annotated[float, Field(ge=0, le=1)]


@states(not_both("steps", "points", "every", "until_step"), not_both("points", "every"))
class LrScheduleRequest(ApiModel):
    """A schedule and what to answer: the LR at ``steps``, or the run sampled (``points`` or ``every``).

    Give at most one of each pair: ``warmup_steps`` / ``warmup_fraction``, ``min_lr`` / ``min_lr_ratio``,
    ``warmup_start_lr`` / ``warmup_start_ratio``, ``decay_steps`` / ``decay_fraction``.
    """

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "kind": "cosine_with_min_lr",
                    "peak_lr": 3e-4,
                    "total_steps": 100_000,
                    "warmup_steps": 2_000,
                    "min_lr_ratio": 0.1,
                    "points": 200,
                },
                {
                    "kind": "warmup_stable_decay",
                    "peak_lr": 1e-3,
                    "total_steps": 50_000,
                    "warmup_fraction": 0.01,
                    "decay_fraction": 0.2,
                    "decay_shape": "1-sqrt",
                    "min_lr_ratio": 0.1,
                    "steps": [0, 250, 500, 20_000, 40_000, 45_000, 49_999, 50_000],
                },
                {
                    "kind": "cosine",
                    "peak_lr": 6e-4,
                    "total_steps": 10_000,
                    "warmup_steps": 500,
                    "min_lr": 6e-5,
                    "warmup_start_lr": 6e-7,
                    "semantics": "pytorch",
                    "past_end": "hold",
                    "every": 500,
                    "until_step": 12_000,
                },
            ]
        }
    )

    kind: ScheduleKindName = Field(
        description="constant (with warmup), linear, cosine, cosine_with_min_lr (cosine to a floor), "
        "cosine_warmup_with_min_lr (transformers' variant, one step earlier), cosine_with_restarts, "
        "polynomial, inverse_sqrt, warmup_stable_decay. Aliases: constant_with_warmup, "
        "cosine_with_hard_restarts, wsd."
    )
    peak_lr: LearningRate = Field(description="the peak (base) learning rate, reached at the end of warmup")
    total_steps: Annotated[int, Field(gt=0, le=MAX_TOTAL_STEPS)] = Field(
        description="optimizer updates in the run (T); the LR of steps 0 .. T − 1 is used, step T is the end value"
    )
    warmup_steps: Annotated[int, Field(ge=0, le=MAX_TOTAL_STEPS)] | None = Field(
        default=None, description="warmup length W in steps (default: no warmup)"
    )
    warmup_fraction: Annotated[float, Field(ge=0, lt=1)] | None = Field(
        default=None, description="warmup as a fraction of total_steps, rounded up as transformers does"
    )
    min_lr: NonNegativeLr | None = Field(default=None, description="the floor as an absolute LR")
    min_lr_ratio: Ratio | None = Field(
        default=None,
        description="the floor as a fraction of peak_lr (required by cosine_with_min_lr; polynomial's "
        "lr_end defaults to 1e-7 absolute)",
    )
    warmup_start_lr: NonNegativeLr | None = Field(
        default=None,
        description="the warmup's first LR (default 0; the floor for warmup_stable_decay; must be > 0 "
        "for semantics pytorch)",
    )
    warmup_start_ratio: Ratio | None = Field(
        default=None, description="the warmup's first LR as a fraction of peak_lr"
    )
    semantics: Literal["transformers", "optax", "pytorch"] = Field(
        default="transformers",
        description="whose step semantics: transformers (step 0 = first update's LR, peak at step W), "
        "optax (clamped after the end), pytorch (SequentialLR; cosine periodic past the end)",
    )
    past_end: Literal["library", "hold"] = Field(
        default="library",
        description="steps after total_steps: what the library does (library), or hold the final value",
    )
    stable_steps: Annotated[int, Field(ge=0, le=MAX_TOTAL_STEPS)] | None = Field(
        default=None,
        description="warmup_stable_decay: the stable phase (default: the rest of total_steps)",
    )
    decay_steps: Annotated[int, Field(gt=0, le=MAX_TOTAL_STEPS)] | None = Field(
        default=None, description="warmup_stable_decay: the decay phase in steps"
    )
    decay_fraction: Annotated[float, Field(gt=0, le=1)] | None = Field(
        default=None, description="warmup_stable_decay: the decay phase as a fraction of total_steps"
    )
    warmup_shape: ShapeName = Field(
        default="linear", description="warmup_stable_decay only: linear, cosine or 1-sqrt"
    )
    decay_shape: ShapeName = Field(
        default="cosine", description="warmup_stable_decay: shape of the decay (1-sqrt: Hägele et al. 2024)"
    )
    power: Annotated[float, Field(gt=0, le=10)] = Field(
        default=1.0,
        description="polynomial: the power (1 = linear; up to 10 keeps the LR sum in floating point)",
    )
    timescale_steps: Annotated[float, Field(gt=0)] | None = Field(
        default=None,
        description="inverse_sqrt: the timescale (default: warmup_steps, or 10,000 without warmup)",
    )
    cycles: Annotated[int, Field(ge=1, le=10_000)] = Field(
        default=1, description="cosine_with_restarts: the number of cosine cycles"
    )

    steps: list[Step] | None = Field(
        default=None,
        max_length=MAX_REQUESTED_STEPS,
        description=f"answer the LR at these steps (0-based; up to {MAX_REQUESTED_STEPS:,}; steps past "
        "total_steps follow past_end), in the given order. Without it the run is sampled.",
    )
    points: Annotated[int, Field(ge=2, le=MAX_SAMPLE_POINTS)] | None = Field(
        default=None,
        description="sample about this many evenly spaced steps (default 200); step 0, the end of "
        "warmup, the end of the stable phase, the last step and total_steps are always included",
    )
    every: Annotated[int, Field(ge=1, le=MAX_TOTAL_STEPS)] | None = Field(
        default=None, description="sample every k-th step instead of a number of points"
    )
    until_step: Annotated[int, Field(ge=0, le=MAX_TOTAL_STEPS * 10)] | None = Field(
        default=None,
        description="sample up to this step (default total_steps); beyond total_steps shows the past_end policy",
    )

    @model_validator(mode="after")
    def _one_way_to_answer(self) -> LrScheduleRequest:
        if self.steps is not None:
            for name in ("points", "every", "until_step"):
                if getattr(self, name) is not None:
                    raise field_error(
                        name, f"give steps (the LR at those steps) or {name} (a sampled run), not both"
                    )
        if self.points is not None and self.every is not None:
            raise field_error("every", "give points or every, not both")
        return self


class SchedulePointRead(ApiModel):
    step: int
    lr: float


class SchedulePhaseRead(ApiModel):
    """A named stretch of the run: ``start_step ≤ t < end_step``."""

    name: str
    start_step: int
    end_step: int


class ScheduleSummaryRead(ApiModel):
    kind: str = Field(description="the canonical kind (aliases resolved)")
    semantics: str
    past_end: str = Field(description="the past-end policy used: library or hold")
    past_end_note: str = Field(description="what the LR does after total_steps under this request")
    peak_lr: float
    floor_lr: float = Field(description="the floor the decay ends at (constant: the peak)")
    warmup_start_lr: float = Field(description="the LR at step 0")
    final_lr: float = Field(description="the LR at step total_steps (the end value)")
    warmup_steps: int
    stable_steps: int
    decay_steps: int
    total_steps: int
    lr_sum: float = Field(description="Σ LR over the run's updates, steps 0 .. total_steps − 1 (closed form)")
    mean_lr: float = Field(description="lr_sum / total_steps")


class LrScheduleRead(ApiModel):
    kind: str
    semantics: str
    convention: str = Field(description="the step semantics this answer follows")
    answered: Literal["steps", "sampled"] = Field(
        description="steps: the LR at the requested steps, in order; sampled: the run sampled, ascending"
    )
    summary: ScheduleSummaryRead
    phases: list[SchedulePhaseRead]
    points: list[SchedulePointRead]
