"""The validated description of a learning-rate schedule: its kind, peak, floor, warmup and phase
lengths, resolved at construction the way the libraries resolve them (transformers' warmup rounding,
WSD's missing phase). What the schedule's values are, step by step, is :mod:`service.domain.schedules`.

Sources: transformers ``src/transformers/optimization.py`` and ``training_args.py``
(``get_warmup_steps``); optax ``optax/schedules/_schedule.py``; PyTorch ``torch/optim/lr_scheduler.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, get_args

from service.domain.errors import InvalidInput

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


def is_whole_number(value: object) -> bool:
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
        if not is_whole_number(self.total_steps) or self.total_steps < 1:
            raise InvalidInput("total_steps must be a whole number of at least 1.", field="total_steps")
        total = self.total_steps

        # Warmup length.
        if self.warmup_steps is not None and self.warmup_fraction is not None:
            raise InvalidInput("Give warmup_steps or warmup_fraction, not both.", field="warmup_fraction")
        if self.warmup_steps is not None:
            if not is_whole_number(self.warmup_steps) or self.warmup_steps < 0:
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
        if not is_whole_number(self.cycles) or not 1 <= self.cycles <= MAX_CYCLES:
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
            if not is_whole_number(self.decay_steps) or self.decay_steps < 1:
                raise InvalidInput("decay_steps must be a whole number ≥ 1.", field="decay_steps")
            decay = self.decay_steps
        elif self.decay_fraction is not None:
            _finite(self.decay_fraction, "decay_fraction")
            if not 0 < self.decay_fraction <= 1:
                raise InvalidInput("decay_fraction must be in (0, 1].", field="decay_fraction")
            decay = max(1, _ceil_fraction(total, self.decay_fraction))
            decay_field = "decay_fraction"
        stable = self.stable_steps
        if stable is not None and (not is_whole_number(stable) or stable < 0):
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
