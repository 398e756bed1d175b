"""Learning-rate schedules with the step semantics of the libraries people train with.

Step ``t`` counts optimizer updates from 0; the run has ``T = total_steps`` updates, ``t = 0 .. T − 1``.
``lr_at(spec, T)`` is the value the schedule reaches at the end (the floor for decaying kinds); it is
sampled and plotted but no update uses it.

Semantics (``ScheduleSpec.semantics``)
--------------------------------------
``"transformers"`` (default; DESIGN §4)
    Hugging Face transformers ``optimization.py`` lambdas, reproduced operation for operation: the
    LR is ``peak_lr × factor(t)``, step 0 is the first update's LR, warmup factor ``t/W`` (0 at step
    0), peak exactly at ``t = W``. Past the end (``t > T``) the library formulas keep running:
    ``cosine*`` rises again (transformers' ``num_cycles = 0.5`` cosine is not clamped), ``linear``
    clamps at 0 (at the floor), ``polynomial`` returns ``lr_end``, ``cosine_with_restarts`` and
    ``warmup_stable_decay`` return the floor, ``constant`` stays at the peak, ``inverse_sqrt`` keeps
    decaying.
``"optax"``
    optax ``warmup_cosine_decay_schedule`` / ``linear_schedule`` / ``polynomial_schedule`` /
    ``join_schedules``: the same values for ``0 ≤ t ≤ T`` (optax ``decay_steps`` is our ``total_steps``:
    it INCLUDES warmup; its ``init_value`` is ``warmup_start_lr``) and **clamped** at the value of
    step ``T`` for every ``t > T``. ``cosine_warmup_with_min_lr`` has no optax equivalent (refused).
``"pytorch"``
    ``SequentialLR([LinearLR(start_factor=s, total_iters=W), <decay scheduler>], milestones=[W])``:
    ``LinearLR`` rejects ``start_factor = 0``, so a warmup must start above zero (give
    ``warmup_start_lr`` or ``warmup_start_ratio`` > 0; refused otherwise). ``CosineAnnealingLR`` is
    periodic past ``T_max`` (cosine rises again); ``cosine_with_restarts`` follows
    ``CosineAnnealingWarmRestarts`` and keeps restarting; ``LinearLR`` / ``PolynomialLR`` hold their
    end value. ``cosine_warmup_with_min_lr`` has no PyTorch equivalent (refused).

``past_end`` policy
    ``"library"`` (default): whatever the chosen library does, as above. ``"hold"``: the value of step
    ``T`` for every ``t > T`` — what most users expect (no rebound of a cosine after the run; the
    PyTorch reports and transformers #26209 discussions). Inside ``0 ≤ t ≤ T`` both agree.

Extensions beyond transformers (documented, identity when unused): a floor for ``linear`` and
``cosine_with_restarts`` (``m + (1 − m)·shape``; with ``m = 0`` exactly the library) and a warmup
that starts above zero (``s + (1 − s)·t/W``, transformers #31870; with ``s = 0`` exactly ``t/W``).
``warmup_stable_decay`` starts its warmup at the floor, as ``get_wsd_schedule`` does.

Sources: transformers ``src/transformers/optimization.py`` (``get_*_schedule*`` lambdas) and
``tests/optimization/test_optimization.py``; optax ``optax/schedules/_schedule.py``; PyTorch
``torch/optim/lr_scheduler.py``; Hägele et al. 2024 (1-sqrt cooldown); ``reference/schedules.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, get_args

from service.domain.errors import InvalidInput

__all__ = [
    "KIND_ALIASES",
    "MAX_SAMPLE_POINTS",
    "PastEnd",
    "Phase",
    "ScheduleKind",
    "SchedulePoint",
    "ScheduleSpec",
    "ScheduleSummary",
    "Semantics",
    "Shape",
    "lr_at",
    "lrs_at",
    "phases",
    "sample",
    "summary",
]

ScheduleKind = Literal[
    "constant",
    "linear",
    "cosine",
    "cosine_with_min_lr",
    "cosine_warmup_with_min_lr",
    "cosine_with_restarts",
    "polynomial",
    "inverse_sqrt",
    "warmup_stable_decay",
]
Semantics = Literal["transformers", "optax", "pytorch"]
Shape = Literal["linear", "cosine", "1-sqrt"]
PastEnd = Literal["library", "hold"]

_KINDS: tuple[str, ...] = get_args(ScheduleKind)
_SEMANTICS: tuple[str, ...] = get_args(Semantics)
_SHAPES: tuple[str, ...] = get_args(Shape)
_PAST_END: tuple[str, ...] = get_args(PastEnd)

#: transformers ``SchedulerType`` names (and common short names) accepted for ``kind``.
KIND_ALIASES: dict[str, str] = {
    "constant_with_warmup": "constant",
    "cosine_with_hard_restarts": "cosine_with_restarts",
    "wsd": "warmup_stable_decay",
    "cosine_with_min_lr_schedule_with_warmup_lr_rate": "cosine_warmup_with_min_lr",
}

#: transformers ``get_polynomial_decay_schedule_with_warmup(lr_end=1e-7)`` default.
POLYNOMIAL_DEFAULT_LR_END = 1e-7
#: transformers ``get_inverse_sqrt_schedule``: ``timescale = num_warmup_steps or 10_000``.
INVERSE_SQRT_DEFAULT_TIMESCALE_STEPS = 10_000
#: transformers ``get_polynomial_decay_schedule_with_warmup(power=1.0)`` default.
POLYNOMIAL_DEFAULT_POWER = 1.0
#: transformers ``get_cosine_with_hard_restarts_schedule_with_warmup(num_cycles=1)`` default.
RESTARTS_DEFAULT_CYCLES = 1
#: Upper bound on restarts (keeps ``phases``/``summary`` O(#phases) small).
MAX_CYCLES = 10_000
#: Upper bound on the points one ``sample`` call returns.
MAX_SAMPLE_POINTS = 100_000

_FLOORED_KINDS = frozenset(
    {
        "linear",
        "cosine",
        "cosine_with_min_lr",
        "cosine_warmup_with_min_lr",
        "cosine_with_restarts",
        "polynomial",
        "warmup_stable_decay",
    }
)


def _ceil_fraction(total_steps: int, fraction: float) -> int:
    """``ceil(T·f)`` as transformers' ``TrainingArguments.get_warmup_steps`` does, without float noise.

    transformers computes ``math.ceil(num_training_steps * warmup_ratio)``; where ``T·f`` is an
    integer but the float product is one ulp above it (``10 × 0.7 = 7.000000000000001``) transformers
    gives one step more. We round the product to 9 decimals first and so give the intended 7.
    """
    return math.ceil(round(total_steps * fraction, 9))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(value: float, name: str) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise InvalidInput(f"{name} must be a finite number.", field=name)


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """A learning-rate schedule, validated at construction.

    Inputs (give at most one of each pair):

    - ``warmup_steps`` or ``warmup_fraction`` (of ``total_steps``, rounded up as transformers does);
      neither: no warmup.
    - ``min_lr`` (absolute) or ``min_lr_ratio`` (of ``peak_lr``): the floor. Required for
      ``cosine_with_min_lr`` / ``cosine_warmup_with_min_lr``; ``lr_end`` for ``polynomial``
      (default 1e-7 absolute, transformers' default); refused for ``constant`` and ``inverse_sqrt``.
    - ``warmup_start_lr`` (absolute) or ``warmup_start_ratio``: the warmup's first value (default 0;
      the floor for ``warmup_stable_decay``; transformers' ``warmup_lr_rate`` for
      ``cosine_warmup_with_min_lr``).
    - WSD: ``decay_steps`` or ``decay_fraction`` (of the total, rounded up), and/or ``stable_steps``;
      the missing one is ``T − W − (the other)``. When both are given and ``W + S + D < T`` the LR
      stays at the floor for the remaining steps.

    Derived (``init=False``): ``resolved_warmup_steps``, ``resolved_stable_steps``,
    ``resolved_decay_steps`` (the steps after warmup for non-WSD kinds), ``floor_ratio``,
    ``start_ratio``, ``resolved_timescale_steps``.
    """

    kind: ScheduleKind
    peak_lr: float
    total_steps: int
    warmup_steps: int | None = None
    warmup_fraction: float | None = None
    min_lr: float | None = None
    min_lr_ratio: float | None = None
    warmup_start_lr: float | None = None
    warmup_start_ratio: float | None = None
    semantics: Semantics = "transformers"
    past_end: PastEnd = "library"
    stable_steps: int | None = None
    decay_steps: int | None = None
    decay_fraction: float | None = None
    warmup_shape: Shape = "linear"
    decay_shape: Shape = "cosine"
    power: float = POLYNOMIAL_DEFAULT_POWER
    timescale_steps: float | None = None
    cycles: int = RESTARTS_DEFAULT_CYCLES

    resolved_warmup_steps: int = field(init=False, repr=False, compare=False)
    resolved_stable_steps: int = field(init=False, repr=False, compare=False)
    resolved_decay_steps: int = field(init=False, repr=False, compare=False)
    floor_ratio: float = field(init=False, repr=False, compare=False)
    start_ratio: float | None = field(init=False, repr=False, compare=False)
    resolved_timescale_steps: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        kind = KIND_ALIASES.get(self.kind, self.kind)
        if kind not in _KINDS:
            raise InvalidInput(
                f"Unknown schedule kind {self.kind!r}; use one of {', '.join(_KINDS)}.", field="kind"
            )
        object.__setattr__(self, "kind", kind)
        if self.semantics not in _SEMANTICS:
            raise InvalidInput(f"semantics must be one of {', '.join(_SEMANTICS)}.", field="semantics")
        if self.past_end not in _PAST_END:
            raise InvalidInput(f"past_end must be one of {', '.join(_PAST_END)}.", field="past_end")
        if kind == "cosine_warmup_with_min_lr" and self.semantics != "transformers":
            raise InvalidInput(
                "cosine_warmup_with_min_lr exists only in transformers; use semantics 'transformers' "
                "or kind 'cosine_with_min_lr'.",
                field="semantics",
            )
        _finite(self.peak_lr, "peak_lr")
        if self.peak_lr <= 0:
            raise InvalidInput("peak_lr must be above 0.", field="peak_lr")
        if not _is_int(self.total_steps) or self.total_steps < 1:
            raise InvalidInput("total_steps must be a whole number of at least 1.", field="total_steps")
        total = self.total_steps

        # Warmup length.
        if self.warmup_steps is not None and self.warmup_fraction is not None:
            raise InvalidInput("Give warmup_steps or warmup_fraction, not both.", field="warmup_fraction")
        if self.warmup_steps is not None:
            if not _is_int(self.warmup_steps) or self.warmup_steps < 0:
                raise InvalidInput("warmup_steps must be a whole number ≥ 0.", field="warmup_steps")
            warmup = self.warmup_steps
            warmup_field = "warmup_steps"
        elif self.warmup_fraction is not None:
            _finite(self.warmup_fraction, "warmup_fraction")
            if not 0 <= self.warmup_fraction < 1:
                raise InvalidInput(
                    "warmup_fraction must be in [0, 1): a fraction of total_steps.", field="warmup_fraction"
                )
            warmup = _ceil_fraction(total, self.warmup_fraction)
            warmup_field = "warmup_fraction"
        else:
            warmup, warmup_field = 0, "warmup_steps"
        if kind == "constant":
            if warmup > total:
                raise InvalidInput(
                    f"The warmup ({warmup} steps) is longer than the run ({total} steps); shorten it.",
                    field=warmup_field,
                )
        elif warmup >= total:
            raise InvalidInput(
                f"The warmup ({warmup} steps) leaves no step to decay in a {total}-step run; "
                "make it shorter than total_steps.",
                field=warmup_field,
            )

        # Floor.
        if self.min_lr is not None and self.min_lr_ratio is not None:
            raise InvalidInput("Give min_lr or min_lr_ratio, not both.", field="min_lr_ratio")
        floor_given = self.min_lr is not None or self.min_lr_ratio is not None
        floor_field = "min_lr" if self.min_lr is not None else "min_lr_ratio"
        if floor_given and kind not in _FLOORED_KINDS:
            raise InvalidInput(
                f"A {kind} schedule has no floor; drop {floor_field} or pick a decaying kind.",
                field=floor_field,
            )
        if self.min_lr is not None:
            _finite(self.min_lr, "min_lr")
            if self.min_lr < 0:
                raise InvalidInput("min_lr must be ≥ 0.", field="min_lr")
            if self.min_lr > self.peak_lr:
                raise InvalidInput(
                    f"min_lr ({self.min_lr:g}) is above peak_lr ({self.peak_lr:g}); lower it.", field="min_lr"
                )
            floor = self.min_lr / self.peak_lr
        elif self.min_lr_ratio is not None:
            _finite(self.min_lr_ratio, "min_lr_ratio")
            if not 0 <= self.min_lr_ratio <= 1:
                raise InvalidInput(
                    "min_lr_ratio must be in [0, 1] (a fraction of peak_lr).", field="min_lr_ratio"
                )
            floor = float(self.min_lr_ratio)
        elif kind in ("cosine_with_min_lr", "cosine_warmup_with_min_lr"):
            raise InvalidInput(f"{kind} needs a floor: give min_lr or min_lr_ratio.", field="min_lr_ratio")
        elif kind == "polynomial":
            floor = POLYNOMIAL_DEFAULT_LR_END / self.peak_lr
            floor_field = "peak_lr"
        else:
            floor = 0.0
        if kind == "polynomial" and floor >= 1:
            # transformers: "lr_end must be smaller than initial lr".
            raise InvalidInput(
                "A polynomial schedule's lr_end (min_lr) must be below peak_lr.", field=floor_field
            )

        # Warmup start.
        if self.warmup_start_lr is not None and self.warmup_start_ratio is not None:
            raise InvalidInput(
                "Give warmup_start_lr or warmup_start_ratio, not both.", field="warmup_start_ratio"
            )
        start: float | None
        if self.warmup_start_lr is not None:
            _finite(self.warmup_start_lr, "warmup_start_lr")
            if not 0 <= self.warmup_start_lr <= self.peak_lr:
                raise InvalidInput("warmup_start_lr must be in [0, peak_lr].", field="warmup_start_lr")
            start = self.warmup_start_lr / self.peak_lr
        elif self.warmup_start_ratio is not None:
            _finite(self.warmup_start_ratio, "warmup_start_ratio")
            if not 0 <= self.warmup_start_ratio <= 1:
                raise InvalidInput("warmup_start_ratio must be in [0, 1].", field="warmup_start_ratio")
            start = float(self.warmup_start_ratio)
        elif kind == "warmup_stable_decay":
            start = floor  # get_wsd_schedule warms up from min_lr_ratio
        elif kind == "cosine_warmup_with_min_lr":
            start = None  # (t + 1)/W, transformers' default when warmup_lr_rate is None
        else:
            start = 0.0
        if self.semantics == "pytorch" and warmup > 0 and (start is None or start <= 0):
            raise InvalidInput(
                "PyTorch's LinearLR cannot start a warmup at 0 (start_factor must be > 0); give "
                "warmup_start_lr > 0 (e.g. 1e-3 × peak_lr) or use semantics 'transformers'.",
                field="warmup_start_lr",
            )

        # Shapes and kind parameters.
        for name, shape in (("warmup_shape", self.warmup_shape), ("decay_shape", self.decay_shape)):
            if shape not in _SHAPES:
                raise InvalidInput(f"{name} must be one of {', '.join(_SHAPES)}.", field=name)
        if kind != "warmup_stable_decay" and self.warmup_shape != "linear":
            raise InvalidInput(
                "Only warmup_stable_decay supports a non-linear warmup_shape.", field="warmup_shape"
            )
        _finite(self.power, "power")
        if self.power <= 0:
            raise InvalidInput("power must be above 0.", field="power")
        if not _is_int(self.cycles) or not 1 <= self.cycles <= MAX_CYCLES:
            raise InvalidInput(f"cycles must be a whole number in [1, {MAX_CYCLES}].", field="cycles")
        if self.timescale_steps is not None:
            _finite(self.timescale_steps, "timescale_steps")
            if self.timescale_steps <= 0:
                raise InvalidInput("timescale_steps must be above 0.", field="timescale_steps")
            timescale = float(self.timescale_steps)
        else:
            timescale = float(warmup or INVERSE_SQRT_DEFAULT_TIMESCALE_STEPS)

        stable, decay = 0, total - warmup
        if kind == "warmup_stable_decay":
            stable, decay = self._resolve_wsd(total, warmup, warmup_field)
        else:
            for name in ("stable_steps", "decay_steps", "decay_fraction"):
                if getattr(self, name) is not None:
                    raise InvalidInput(f"{name} applies only to warmup_stable_decay; drop it.", field=name)

        object.__setattr__(self, "resolved_warmup_steps", warmup)
        object.__setattr__(self, "resolved_stable_steps", stable)
        object.__setattr__(self, "resolved_decay_steps", decay)
        object.__setattr__(self, "floor_ratio", floor)
        object.__setattr__(self, "start_ratio", start)
        object.__setattr__(self, "resolved_timescale_steps", timescale)

    def _resolve_wsd(self, total: int, warmup: int, warmup_field: str) -> tuple[int, int]:
        if self.decay_steps is not None and self.decay_fraction is not None:
            raise InvalidInput("Give decay_steps or decay_fraction, not both.", field="decay_fraction")
        decay: int | None = None
        decay_field = "decay_steps"
        if self.decay_steps is not None:
            if not _is_int(self.decay_steps) or self.decay_steps < 1:
                raise InvalidInput("decay_steps must be a whole number ≥ 1.", field="decay_steps")
            decay = self.decay_steps
        elif self.decay_fraction is not None:
            _finite(self.decay_fraction, "decay_fraction")
            if not 0 < self.decay_fraction <= 1:
                raise InvalidInput("decay_fraction must be in (0, 1].", field="decay_fraction")
            decay = max(1, _ceil_fraction(total, self.decay_fraction))
            decay_field = "decay_fraction"
        stable = self.stable_steps
        if stable is not None and (not _is_int(stable) or stable < 0):
            raise InvalidInput("stable_steps must be a whole number ≥ 0.", field="stable_steps")
        if decay is None and stable is None:
            raise InvalidInput(
                "warmup_stable_decay needs the decay length: give decay_steps or decay_fraction "
                "(the stable phase is then the rest of total_steps).",
                field="decay_steps",
            )
        if decay is None:
            assert stable is not None
            decay = total - warmup - stable
            if decay < 1:
                raise InvalidInput(
                    f"warmup ({warmup}) + stable ({stable}) leave no decay step in {total} steps; "
                    "shorten stable_steps or give decay_steps.",
                    field="stable_steps",
                )
        elif stable is None:
            stable = total - warmup - decay
            if stable < 0:
                raise InvalidInput(
                    f"warmup ({warmup}) + decay ({decay}) steps do not fit in {total} steps; "
                    "shorten the decay or the warmup.",
                    field=decay_field,
                )
        if warmup + stable + decay > total:
            raise InvalidInput(
                f"warmup ({warmup}) + stable ({stable}) + decay ({decay}) = {warmup + stable + decay} "
                f"steps exceed total_steps ({total}); shorten a phase or raise total_steps.",
                field="stable_steps",
            )
        return stable, decay


@dataclass(frozen=True, slots=True)
class SchedulePoint:
    step: int
    lr: float


@dataclass(frozen=True, slots=True)
class Phase:
    """A stretch of the schedule: steps ``start_step ≤ t < end_step``."""

    name: str
    start_step: int
    end_step: int


@dataclass(frozen=True, slots=True)
class ScheduleSummary:
    """``lr_sum`` is Σ LR over the run's updates, steps 0 .. T − 1 (closed form, no loop over steps)."""

    kind: str
    semantics: str
    peak_lr: float
    floor_lr: float
    warmup_start_lr: float
    final_lr: float
    warmup_steps: int
    stable_steps: int
    decay_steps: int
    total_steps: int
    lr_sum: float
    mean_lr: float
    past_end: str


# ---------------------------------------------------------------------------------------------
# Values per step


def _shape_up(shape: str, progress: float) -> float:
    """transformers ``_get_wsd_scheduler_lambda`` warmup shapes (0 → 1)."""
    if shape == "linear":
        return progress
    if shape == "cosine":
        return 0.5 * (1.0 - math.cos(math.pi * progress))
    return 1.0 - math.sqrt(1.0 - progress)


def _shape_down(shape: str, progress: float) -> float:
    """transformers ``_get_wsd_scheduler_lambda`` decay shapes (1 → 0), ``num_cycles = 0.5``."""
    if shape == "linear":
        return 1.0 - progress
    if shape == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * 0.5 * 2.0 * progress))
    return 1.0 - math.sqrt(progress)


def _factor(spec: ScheduleSpec, t: int) -> float:
    """The multiplier of ``peak_lr`` at step ``t`` under the library's own rules (no ``past_end``)."""
    kind = spec.kind
    w = spec.resolved_warmup_steps
    total = spec.total_steps
    m = spec.floor_ratio
    s = spec.start_ratio
    if kind == "warmup_stable_decay":
        stable, decay = spec.resolved_stable_steps, spec.resolved_decay_steps
        s_wsd = m if s is None else s
        if t < w:
            progress = float(t) / float(max(1, w))
            return max(0.0, _shape_up(spec.warmup_shape, progress) * (1.0 - s_wsd) + s_wsd)
        if t < w + stable:
            return 1.0
        if t < w + stable + decay:
            progress = float(t - w - stable) / float(max(1, decay))
            return max(0.0, _shape_down(spec.decay_shape, progress) * (1.0 - m) + m)
        return m
    if kind == "cosine_warmup_with_min_lr":
        # transformers _get_cosine_with_min_lr_schedule_with_warmup_lr_rate_lambda
        if t < w:
            if s is None:
                return (float(t) + 1.0) / max(1.0, float(w))
            return s + (1.0 - s) * float(t) / max(1, w - 1)
        progress = (float(t) - float(w) + 1.0) / max(1.0, float(total) - float(w))
        factor = 0.5 * (1.0 + math.cos(math.pi * 0.5 * 2.0 * progress))
        return max(0.0, factor * (1 - m) + m)
    if t < w:
        progress = float(t) / float(max(1, w))
        return progress if not s else progress * (1.0 - s) + s
    if kind == "constant":
        return 1.0
    if kind == "inverse_sqrt":
        timescale = spec.resolved_timescale_steps
        shift = timescale - w
        return 1.0 / math.sqrt((t + shift) / timescale)
    if kind == "linear":
        value = max(0.0, float(total - t) / float(max(1, total - w)))
        return value if not m else value * (1.0 - m) + m
    progress = float(t - w) / float(max(1, total - w))
    if kind in ("cosine", "cosine_with_min_lr"):
        factor = 0.5 * (1.0 + math.cos(math.pi * 0.5 * 2.0 * progress))
        if kind == "cosine" and not m:
            return max(0.0, factor)
        return max(0.0, factor * (1 - m) + m)
    if kind == "cosine_with_restarts":
        if progress >= 1.0 and spec.semantics != "pytorch":
            return m
        value = max(0.0, 0.5 * (1.0 + math.cos(math.pi * ((float(spec.cycles) * progress) % 1.0))))
        return value if not m else value * (1.0 - m) + m
    # polynomial: transformers computes in LR units, then divides by lr_init.
    lr_init = spec.peak_lr
    lr_end = m * lr_init if spec.min_lr is None else spec.min_lr
    if t > total:
        return lr_end / lr_init
    pct_remaining = 1 - (t - w) / (total - w)
    return ((lr_init - lr_end) * pct_remaining**spec.power + lr_end) / lr_init


def _library_holds_past_end(spec: ScheduleSpec) -> bool:
    return spec.semantics == "optax" or spec.past_end == "hold"


def lr_at(spec: ScheduleSpec, step: int) -> float:
    """The learning rate at optimizer step ``step`` (0-based). O(1).

    ``step > total_steps`` follows ``spec.past_end`` and ``spec.semantics`` (module docstring).
    """
    if not _is_int(step) or step < 0:
        raise InvalidInput("step must be a whole number ≥ 0.", field="step")
    if step > spec.total_steps and _library_holds_past_end(spec):
        step = spec.total_steps
    return spec.peak_lr * _factor(spec, step)


def lrs_at(spec: ScheduleSpec, steps: list[int] | tuple[int, ...]) -> list[SchedulePoint]:
    """The LR at each of the given steps, in the given order."""
    return [SchedulePoint(step, lr_at(spec, step)) for step in steps]


def key_steps(spec: ScheduleSpec) -> list[int]:
    """Steps a plot must show: 0, the end of warmup (peak), phase boundaries, T − 1 and T."""
    total = spec.total_steps
    w = spec.resolved_warmup_steps
    keys = {0, w, max(0, total - 1), total}
    if spec.kind == "warmup_stable_decay":
        keys.add(w + spec.resolved_stable_steps)
        keys.add(w + spec.resolved_stable_steps + spec.resolved_decay_steps)
    if spec.kind == "cosine_with_restarts":
        for phase in phases(spec):
            keys.add(phase.start_step)
            keys.add(max(phase.start_step, phase.end_step - 1))
    return sorted(k for k in keys if 0 <= k <= total)


def sample(
    spec: ScheduleSpec,
    *,
    points: int | None = None,
    every: int | None = None,
    until_step: int | None = None,
) -> list[SchedulePoint]:
    """Sample the schedule over ``0 ≤ t ≤ until_step`` (default ``total_steps``).

    Give ``points`` (about that many evenly spaced steps) or ``every`` (a stride); neither means 200
    points. The key steps (``key_steps``: 0, end of warmup, end of the stable phase, T − 1, T) are
    always included, so the result may hold a few more points than asked. O(points): the run is never
    materialised.
    """
    end = spec.total_steps if until_step is None else until_step
    if not _is_int(end) or end < 0:
        raise InvalidInput("until_step must be a whole number ≥ 0.", field="until_step")
    if points is not None and every is not None:
        raise InvalidInput("Give points or every, not both.", field="every")
    steps: set[int] = {k for k in key_steps(spec) if k <= end}
    steps.add(end)
    if every is not None:
        if not _is_int(every) or every < 1:
            raise InvalidInput("every must be a whole number ≥ 1.", field="every")
        if end // every + 1 > MAX_SAMPLE_POINTS:
            raise InvalidInput(
                f"every={every} gives more than {MAX_SAMPLE_POINTS} points; use a larger stride.",
                field="every",
            )
        steps.update(range(0, end + 1, every))
    else:
        n = 200 if points is None else points
        if not _is_int(n) or not 2 <= n <= MAX_SAMPLE_POINTS:
            raise InvalidInput(f"points must be a whole number in [2, {MAX_SAMPLE_POINTS}].", field="points")
        steps.update(round(i * end / (n - 1)) for i in range(n))
    return [SchedulePoint(t, lr_at(spec, t)) for t in sorted(steps)]


def phases(spec: ScheduleSpec) -> list[Phase]:
    """The named stretches of the run (``start ≤ t < end``), for labelled plot bands."""
    total = spec.total_steps
    w = spec.resolved_warmup_steps
    out: list[Phase] = []
    if w > 0:
        out.append(Phase("warmup", 0, w))
    if spec.kind == "warmup_stable_decay":
        s, d = spec.resolved_stable_steps, spec.resolved_decay_steps
        if s > 0:
            out.append(Phase("stable", w, w + s))
        out.append(Phase("decay", w + s, w + s + d))
        if w + s + d < total:
            out.append(Phase("floor", w + s + d, total))
    elif spec.kind == "constant":
        if w < total:
            out.append(Phase("constant", w, total))
    elif spec.kind == "cosine_with_restarts":
        d, n = total - w, spec.cycles
        bounds = [w + -((-k * d) // n) for k in range(n + 1)]  # first step of cycle k: ceil(k·D/n)
        out.extend(
            Phase(f"cycle {k + 1}", bounds[k], bounds[k + 1]) for k in range(n) if bounds[k] < bounds[k + 1]
        )
    else:
        out.append(Phase("decay", w, total))
    return out


# ---------------------------------------------------------------------------------------------
# Closed-form sums


def _cos_sum(theta0: float, step: float, n: int) -> float:
    """Σ_{j=0}^{n−1} cos(θ0 + j·a) = sin(n·a/2)/sin(a/2) · cos(θ0 + (n − 1)·a/2) (Lagrange identity)."""
    if n <= 0:
        return 0.0
    half = math.sin(step / 2)
    if abs(half) < 1e-300:
        return n * math.cos(theta0)
    return math.sin(n * step / 2) / half * math.cos(theta0 + (n - 1) * step / 2)


_EM_DIRECT_TERMS = 256
# Bernoulli numbers B2, B4, B6 over (2k)!: Euler–Maclaurin correction coefficients.
_EM_COEFFS = ((1, 1 / 12), (3, -1 / 720), (5, 1 / 30240))


def _power_sum(a: float, n: int, p: float) -> float:
    """Σ_{j=0}^{n−1} (a + j)^p for a ≥ 0, any real p (p < 0 needs a > 0).

    The first 256 terms are added directly; the tail by the Euler–Maclaurin formula with the B2, B4,
    B6 corrections (truncation error ≲ |f⁽⁷⁾(256)|, below 1e-13 relative for |p| ≤ 4).
    """
    if n <= 0:
        return 0.0
    direct = min(n, _EM_DIRECT_TERMS)
    total = math.fsum((a + j) ** p for j in range(direct))
    if n == direct:
        return total
    lo, hi = a + direct, a + n - 1
    integral = math.log(hi / lo) if p == -1 else (hi ** (p + 1) - lo ** (p + 1)) / (p + 1)
    tail = integral + (lo**p + hi**p) / 2
    for order, coeff in _EM_COEFFS:
        deriv = math.prod(p - i for i in range(order))  # d^order/dx^order x^p = deriv · x^(p − order)
        tail += coeff * deriv * (hi ** (p - order) - lo ** (p - order))
    return total + tail


def _warmup_factor_sum(spec: ScheduleSpec) -> float:
    w = spec.resolved_warmup_steps
    if w == 0:
        return 0.0
    s = spec.start_ratio
    if spec.kind == "cosine_warmup_with_min_lr":
        if s is None:
            return (w + 1) / 2  # Σ (t + 1)/W
        return w * s + (1 - s) * (w * (w - 1) / 2) / max(1, w - 1)
    if spec.kind == "warmup_stable_decay":
        s = spec.floor_ratio if s is None else s
        if spec.warmup_shape == "cosine":
            shape_sum = 0.5 * (w - _cos_sum(0.0, math.pi / w, w))
        elif spec.warmup_shape == "1-sqrt":
            shape_sum = w - _power_sum(1.0, w, 0.5) / math.sqrt(w)
        else:
            shape_sum = (w - 1) / 2
        return shape_sum * (1 - s) + w * s
    s = s or 0.0
    return (w - 1) / 2 * (1 - s) + w * s


def _decay_factor_sum(spec: ScheduleSpec) -> float:
    """Σ factor over steps W .. T − 1."""
    total, w, m = spec.total_steps, spec.resolved_warmup_steps, spec.floor_ratio
    n = total - w
    d = max(1, n)
    kind = spec.kind
    if n <= 0:
        return 0.0
    if kind == "constant":
        return float(n)
    if kind == "linear":
        return n * m + (1 - m) * (n * (n + 1) / 2) / d
    if kind in ("cosine", "cosine_with_min_lr"):
        return n * m + (1 - m) * 0.5 * (n + _cos_sum(0.0, math.pi / d, n))
    if kind == "cosine_warmup_with_min_lr":
        return n * m + (1 - m) * 0.5 * (n + _cos_sum(math.pi / d, math.pi / d, n))
    if kind == "cosine_with_restarts":
        c = spec.cycles
        cos_total = 0.0
        for k in range(c):
            first = -((-k * d) // c)  # ceil(k·D/c): first j with floor(c·j/D) = k
            last = min(n, -((-(k + 1) * d) // c))  # exclusive
            if first >= last:
                continue
            cos_total += _cos_sum(math.pi * (c * first / d - k), math.pi * c / d, last - first)
        return n * m + (1 - m) * 0.5 * (n + cos_total)
    if kind == "polynomial":
        # Σ_{j=0}^{n−1} ((D − j)/D)^k = D^−k · Σ_{i=1}^{D} i^k
        return n * m + (1 - m) * _power_sum(1.0, d, spec.power) / d**spec.power
    if kind == "inverse_sqrt":
        tau = spec.resolved_timescale_steps
        return math.sqrt(tau) * _power_sum(tau, n, -0.5)
    # warmup_stable_decay
    stable, dec = spec.resolved_stable_steps, spec.resolved_decay_steps
    if spec.decay_shape == "linear":
        shape_sum = dec - (dec - 1) / 2
    elif spec.decay_shape == "cosine":
        shape_sum = 0.5 * (dec + _cos_sum(0.0, math.pi / dec, dec))
    else:
        shape_sum = dec - _power_sum(0.0, dec, 0.5) / math.sqrt(dec)
    tail = n - stable - dec
    return stable + shape_sum * (1 - m) + dec * m + tail * m


def lr_sum(spec: ScheduleSpec) -> float:
    """Σ_{t=0}^{T−1} lr_at(spec, t) in closed form (O(#phases); no loop over steps)."""
    return spec.peak_lr * (_warmup_factor_sum(spec) + _decay_factor_sum(spec))


def summary(spec: ScheduleSpec) -> ScheduleSummary:
    """Peak, floor, phase lengths and the LR sum of the run (steps 0 .. T − 1)."""
    total = lr_sum(spec)
    if spec.kind == "constant":
        floor_lr = spec.peak_lr
    elif spec.kind == "inverse_sqrt":
        floor_lr = lr_at(spec, spec.total_steps)
    else:
        floor_lr = spec.peak_lr * spec.floor_ratio
    start = spec.start_ratio
    warmup_start = spec.peak_lr * (1.0 / max(1, spec.resolved_warmup_steps) if start is None else start)
    if spec.resolved_warmup_steps == 0:
        warmup_start = lr_at(spec, 0)
    return ScheduleSummary(
        kind=spec.kind,
        semantics=spec.semantics,
        peak_lr=spec.peak_lr,
        floor_lr=floor_lr,
        warmup_start_lr=warmup_start,
        final_lr=lr_at(spec, spec.total_steps),
        warmup_steps=spec.resolved_warmup_steps,
        stable_steps=spec.resolved_stable_steps,
        decay_steps=spec.resolved_decay_steps,
        total_steps=spec.total_steps,
        lr_sum=total,
        mean_lr=total / spec.total_steps,
        past_end=past_end_note(spec),
    )


def past_end_note(spec: ScheduleSpec) -> str:
    """One sentence: what this spec does for steps beyond ``total_steps``."""
    if _library_holds_past_end(spec):
        why = "optax clamps after decay_steps" if spec.past_end == "library" else "past_end='hold'"
        return f"Past total_steps the LR holds its final value ({why})."
    kind, sem = spec.kind, spec.semantics
    if kind.startswith("cosine") and not (kind == "cosine_with_restarts" and sem == "transformers"):
        lib = "PyTorch's cosine annealing is periodic" if sem == "pytorch" else "transformers' cosine"
        return (
            f"Past total_steps the LR rises again ({lib} keeps running); "
            "set past_end='hold' to keep the final value."
        )
    if kind == "inverse_sqrt":
        return "Past total_steps the LR keeps decaying as 1/√t."
    if kind == "constant":
        return "Past total_steps the LR stays at the peak."
    return "Past total_steps the LR stays at the floor."
