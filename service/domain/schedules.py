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
from dataclasses import dataclass

from service.domain.errors import InvalidInput
from service.domain.schedule_spec import (
    KIND_ALIASES,
    MAX_SAMPLE_POINTS,
    PastEnd,
    ScheduleKind,
    ScheduleSpec,
    Semantics,
    Shape,
    is_whole_number,
)

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
    if not is_whole_number(step) or step < 0:
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


def round_stride(stride: float, *, at_least: float = 1.0) -> int:
    """The whole number of steps of the form 1, 2, 2.5 or 5 × 10^k nearest to ``stride`` (in ratio), and
    not below ``at_least``: sampled steps read 0, 500, 1000 … rather than 0, 503, 1005, 1508, for
    between 0.7 and 1.4 times the points asked."""
    target = max(stride, at_least, 1.0)
    decade = 10 ** math.floor(math.log10(target))
    candidates = [
        int(c)
        for m in (1, 2, 2.5, 5, 10)
        if (c := m * decade) >= max(at_least, 1.0) * (1 - 1e-12) and float(c).is_integer()
    ]
    return min(candidates, key=lambda c: abs(math.log(c / max(stride, 1.0))))


def sample(
    spec: ScheduleSpec,
    *,
    points: int | None = None,
    every: int | None = None,
    until_step: int | None = None,
) -> list[SchedulePoint]:
    """Sample the schedule over ``0 ≤ t ≤ until_step`` (default ``total_steps``).

    Give ``points`` (about that many evenly spaced steps, at a round stride: :func:`round_stride`) or
    ``every`` (a stride); neither means 200 points. The key steps (``key_steps``: 0, end of warmup, end of the stable phase, T − 1, T) are
    always included, so the result may hold a few more points than asked. O(points): the run is never
    materialised.
    """
    end = spec.total_steps if until_step is None else until_step
    if not is_whole_number(end) or end < 0:
        raise InvalidInput("until_step must be a whole number ≥ 0.", field="until_step")
    if points is not None and every is not None:
        raise InvalidInput("Give points or every, not both.", field="every")
    steps: set[int] = {k for k in key_steps(spec) if k <= end}
    steps.add(end)
    if every is not None:
        if not is_whole_number(every) or every < 1:
            raise InvalidInput("every must be a whole number ≥ 1.", field="every")
        if end // every + 1 > MAX_SAMPLE_POINTS:
            raise InvalidInput(
                f"every={every} gives more than {MAX_SAMPLE_POINTS} points; use a larger stride.",
                field="every",
            )
        steps.update(range(0, end + 1, every))
    else:
        n = 200 if points is None else points
        if not is_whole_number(n) or not 2 <= n <= MAX_SAMPLE_POINTS:
            raise InvalidInput(f"points must be a whole number in [2, {MAX_SAMPLE_POINTS}].", field="points")
        # A round stride, but never more points than one call may answer.
        steps.update(range(0, end + 1, round_stride(end / (n - 1), at_least=end / (MAX_SAMPLE_POINTS - 1))))
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
