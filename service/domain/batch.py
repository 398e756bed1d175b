"""Critical batch size, the steps/data trade-off, batch recommendations, accumulation and ramps.

Batch sizes are in tokens unless a name says ``_sequences``; loss in nats per token.

Physics (Kaplan et al. 2020 §5; McCandlish et al. 2018): the critical batch GROWS as the loss falls
(B_crit ∝ L^(−1/α_B) ≈ L^−4.8): early, high-loss training is served by small batches; later, larger
batches pay. Steps and data trade off as S = S_min·(1 + B_crit/B), E = E_min·(1 + B/B_crit), so
(S/S_min − 1)(E/E_min − 1) = 1.

Regimes (this service's convention): with r = B / B_crit, ``below`` if r < 0.5 (doubling the batch cuts
steps by more than 25% for less than 25% more data), ``near`` if 0.5 ≤ r ≤ 2, ``above`` if r > 2
(doubling cuts fewer than 17% of the steps for more than 40% more data: mostly wasted compute).

Sources: Kaplan et al. 2020 (arXiv 2001.08361) Eq. 5.1–5.5, Table 5; McCandlish et al. 2018
(arXiv 1812.06162) §2.2 and App. A; MiniCPM (arXiv 2404.06395) §4.1; ``reference/batch_and_scaling.md``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from service.domain.errors import ImplausibleResult, InvalidInput
from service.domain.scaling import LossFit, chinchilla_loss

__all__ = [
    "BatchRamp",
    "BatchRecommendation",
    "CriticalBatch",
    "CriticalBatchModel",
    "GradientAccumulation",
    "NoiseScaleEstimate",
    "Objective",
    "RampPhase",
    "Regime",
    "Tradeoff",
    "chinchilla_loss_predictor",
    "critical_batch",
    "gradient_accumulation",
    "inverse_loss_critical_batch_tokens",
    "kaplan_critical_batch_tokens",
    "kaplan_minimum_steps",
    "minicpm_optimal_batch_tokens",
    "noise_scale",
    "ramp",
    "recommend_batch",
    "recommend_batch_tokens",
    "tradeoff",
]

CriticalBatchModel = Literal["kaplan", "inverse_loss", "noise_scale", "minicpm"]
Objective = Literal["fewest_steps", "balanced", "least_compute"]
Regime = Literal["below", "near", "above"]
Averaging = Literal["mean", "ema"]

#: Kaplan et al. 2020 Eq. 1.4 / 5.3: B* ≈ 2e8 tokens (Table 5 prints 2.1e8; the reference vectors
#: use 2e8), α_B ≈ 0.21.
KAPLAN_B_STAR_TOKENS = 2e8
KAPLAN_ALPHA_B = 0.21
#: MiniCPM (Hu et al. 2024) §4.1: B_opt = 1.2110e9 / L^6.2393 tokens.
MINICPM_COEFF_TOKENS, MINICPM_EXPONENT = 1.2110e9, 6.2393
#: Regime thresholds on B / B_crit (this service's convention, see the module docstring).
REGIME_BELOW_RATIO, REGIME_ABOVE_RATIO = 0.5, 2.0
#: Default EMA decay for noise-scale series (McCandlish et al. 2018 App. A average with an EMA).
NOISE_EMA_DECAY = 0.95
MAX_RAMP_PHASES = 64


def _positive(value: float, name: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise InvalidInput(f"{name} must be a finite number above 0.", field=name)
    return float(value)


def _whole(value: int, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInput(f"{name} must be a whole number ≥ {minimum}.", field=name)
    return value


# ---------------------------------------------------------------------------------------------
# Critical batch models


def kaplan_critical_batch_tokens(
    loss: float, *, b_star_tokens: float = KAPLAN_B_STAR_TOKENS, alpha_b: float = KAPLAN_ALPHA_B
) -> float:
    """Kaplan et al. 2020 Eq. 5.3: B_crit(L) = B* / L^(1/α_B) tokens."""
    loss = _positive(loss, "loss")
    return _positive(b_star_tokens, "b_star_tokens") / loss ** (1 / _positive(alpha_b, "alpha_b"))


def inverse_loss_critical_batch_tokens(
    loss: float, *, calibration_loss: float | None, calibration_batch_tokens: float | None
) -> float:
    """B_crit ∝ 1/L (the seed's relation), calibrated on one known point: B_cal·L_cal / L."""
    if calibration_loss is None or calibration_batch_tokens is None:
        raise InvalidInput(
            "The inverse_loss model needs a calibration point: give calibration_loss and "
            "calibration_batch_tokens (a critical batch measured at some loss).",
            field="calibration_loss" if calibration_loss is None else "calibration_batch_tokens",
        )
    loss = _positive(loss, "loss")
    cal_l = _positive(calibration_loss, "calibration_loss")
    cal_b = _positive(calibration_batch_tokens, "calibration_batch_tokens")
    return cal_b * cal_l / loss


def minicpm_optimal_batch_tokens(loss: float) -> float:
    """MiniCPM §4.1: B_opt = 1.2110e9 / L^6.2393 tokens."""
    return MINICPM_COEFF_TOKENS / _positive(loss, "loss") ** MINICPM_EXPONENT


@dataclass(frozen=True, slots=True)
class NoiseScaleEstimate:
    """McCandlish et al. 2018 App. A estimates; ``b_simple`` is in the units of the batch sizes given."""

    gradient_norm_sq: float  # |G|²
    trace_sigma: float  # tr(Σ)
    b_simple: float  # tr(Σ)/|G|²
    averaging: str


def _average(values: float | Sequence[float], averaging: str, decay: float, name: str) -> float:
    series: list[float] = [float(values)] if isinstance(values, int | float) else list(values)
    if not series:
        raise InvalidInput(f"{name} is empty; give at least one squared gradient norm.", field=name)
    for v in series:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise InvalidInput(f"{name} must hold finite numbers ≥ 0.", field=name)
    if averaging == "mean":
        try:
            return math.fsum(series) / len(series)
        except OverflowError:  # readings near the float limit (1e308) sum past it
            raise InvalidInput(
                f"{name} sums past the float range; divide every reading by one common factor (the noise "
                "scale does not change).",
                field=name,
            ) from None
    ema = float(series[0])  # started at the first reading: no bias correction needed
    for v in series[1:]:
        ema = decay * ema + (1 - decay) * v
    return ema


def noise_scale(
    *,
    b_small: float,
    b_big: float,
    grad_norm_sq_small: float | Sequence[float],
    grad_norm_sq_big: float | Sequence[float],
    averaging: Averaging = "mean",
    ema_decay: float = NOISE_EMA_DECAY,
) -> NoiseScaleEstimate:
    """The simple noise scale B_simple = tr(Σ)/|G|² from squared gradient norms at two batch sizes.

    E|G_B|² = |G|² + tr(Σ)/B (McCandlish et al. 2018 App. A.1), so
    |G|² ≈ (B_big·|G_big|² − B_small·|G_small|²)/(B_big − B_small) and
    tr(Σ) ≈ (|G_small|² − |G_big|²)/(1/B_small − 1/B_big). Each series is averaged first —
    ``"mean"`` (arithmetic) or ``"ema"`` (exponential, ``ema_decay`` per reading, started at the first
    reading) — and the ratio is taken of the averages (a ratio of noisy estimates is biased).
    """
    bs = _positive(b_small, "b_small")
    bb = _positive(b_big, "b_big")
    if bb <= bs:
        raise InvalidInput("b_big must be larger than b_small.", field="b_big")
    if averaging not in get_args(Averaging):
        raise InvalidInput("averaging must be 'mean' or 'ema'.", field="averaging")
    if not 0 < ema_decay < 1:
        raise InvalidInput("ema_decay must be in (0, 1).", field="ema_decay")
    g_small = _average(grad_norm_sq_small, averaging, ema_decay, "grad_norm_sq_small")
    g_big = _average(grad_norm_sq_big, averaging, ema_decay, "grad_norm_sq_big")
    g_sq = (bb * g_big - bs * g_small) / (bb - bs)
    trace = (g_small - g_big) / (1 / bs - 1 / bb)
    if not (math.isfinite(g_sq) and math.isfinite(trace)):
        raise InvalidInput(
            "The squared gradient norms times the batch sizes leave the float range; divide every reading "
            "by one common factor (the noise scale does not change).",
            field="grad_norm_sq_big",
        )
    if g_sq <= 0 or trace <= 0:
        raise ImplausibleResult(
            "The readings give a non-positive |G|² or tr(Σ) (noise dominates the difference); average "
            "over more steps or widen the gap between b_small and b_big.",
            field="grad_norm_sq_big",
        )
    return NoiseScaleEstimate(g_sq, trace, trace / g_sq, averaging)


@dataclass(frozen=True, slots=True)
class CriticalBatch:
    model: str
    batch_tokens: float
    source: str


def critical_batch(
    model: CriticalBatchModel,
    *,
    loss: float | None = None,
    b_star_tokens: float = KAPLAN_B_STAR_TOKENS,
    alpha_b: float = KAPLAN_ALPHA_B,
    calibration_loss: float | None = None,
    calibration_batch_tokens: float | None = None,
    noise: NoiseScaleEstimate | None = None,
    tokens_per_sample: float = 1.0,
) -> CriticalBatch:
    """The critical batch under one model. ``noise_scale`` needs ``noise`` (its ``b_simple`` is in
    samples when the batch sizes were; ``tokens_per_sample`` converts, e.g. the sequence length)."""
    if model == "noise_scale":
        if noise is None:
            raise InvalidInput("The noise_scale model needs gradient-noise readings.", field="noise")
        return CriticalBatch(
            model,
            noise.b_simple * _positive(tokens_per_sample, "tokens_per_sample"),
            "McCandlish et al. 2018",
        )
    if loss is None:
        raise InvalidInput(f"The {model} model needs the current loss (nats per token).", field="loss")
    if model == "kaplan":
        value = kaplan_critical_batch_tokens(loss, b_star_tokens=b_star_tokens, alpha_b=alpha_b)
        return CriticalBatch(model, value, "Kaplan et al. 2020 Eq. 5.3")
    if model == "inverse_loss":
        value = inverse_loss_critical_batch_tokens(
            loss, calibration_loss=calibration_loss, calibration_batch_tokens=calibration_batch_tokens
        )
        return CriticalBatch(model, value, "B_crit ∝ 1/L, calibrated on the given point")
    if model == "minicpm":
        return CriticalBatch(model, minicpm_optimal_batch_tokens(loss), "MiniCPM (Hu et al. 2024) §4.1")
    raise InvalidInput(
        f"Unknown critical-batch model {model!r}; use one of {', '.join(get_args(CriticalBatchModel))}.",
        field="model",
    )


# ---------------------------------------------------------------------------------------------
# Trade-off and recommendations


@dataclass(frozen=True, slots=True)
class Tradeoff:
    """Kaplan Eq. 5.4–5.5 at one batch: ratios to the minimum steps and minimum data."""

    batch_tokens: float
    critical_batch_tokens: float
    batch_over_critical: float
    steps_over_min: float  # S/S_min = 1 + B_crit/B
    data_over_min: float  # E/E_min = 1 + B/B_crit
    regime: Regime
    doubling_steps_cut_fraction: float  # 1 − S(2B)/S(B)
    doubling_extra_data_fraction: float  # E(2B)/E(B) − 1
    summary: str


def tradeoff(batch_tokens: float, critical_batch_tokens: float) -> Tradeoff:
    """Where a batch sits against the critical batch, and what doubling it would do."""
    b = _positive(batch_tokens, "batch_tokens")
    bc = _positive(critical_batch_tokens, "critical_batch_tokens")
    r = b / bc
    steps_ratio = 1 + bc / b
    data_ratio = 1 + b / bc
    cut = 1 - (1 + bc / (2 * b)) / steps_ratio
    extra = (1 + 2 * b / bc) / data_ratio - 1
    regime: Regime = "below" if r < REGIME_BELOW_RATIO else "above" if r > REGIME_ABOVE_RATIO else "near"
    text = (
        f"Batch is {r:.3g}× the critical batch ({regime}); doubling it would cut steps by "
        f"{100 * cut:.1f}% and cost {100 * extra:.1f}% more data."
    )
    return Tradeoff(b, bc, r, steps_ratio, data_ratio, regime, cut, extra, text)


@dataclass(frozen=True, slots=True)
class MinimumSteps:
    steps_min: float
    compute_min_over_compute: float  # C_min/C = E_min/E
    steps_over_min: float


def kaplan_minimum_steps(steps: float, batch_tokens: float, critical_batch_tokens: float) -> MinimumSteps:
    """Kaplan Eq. 5.4–5.5: S_min = S/(1 + B_crit/B), C_min/C = 1/(1 + B/B_crit)."""
    s = _positive(steps, "steps")
    t = tradeoff(batch_tokens, critical_batch_tokens)
    return MinimumSteps(s / t.steps_over_min, 1 / t.data_over_min, t.steps_over_min)


def _round_to(value: float, granularity: float) -> float:
    return max(granularity, round(value / granularity) * granularity)


def _floor_to(value: float, granularity: float) -> float:
    """The largest multiple of ``granularity`` ≤ ``value`` (0 when none), forgiving 1e-9 of float noise."""
    return math.floor(round(value / granularity, 9)) * granularity


def _ceil_to(value: float, granularity: float) -> float:
    return max(1, math.ceil(round(value / granularity, 9))) * granularity


@dataclass(frozen=True, slots=True)
class BatchRecommendation:
    """A batch for an objective, runnable by the layout, and whether it meets the request's caps."""

    batch_tokens: float
    meets_caps: bool
    note: str  # how the batch was rounded, and which cap it breaks when none runnable meets it


def recommend_batch(
    critical_batch_tokens: float,
    *,
    objective: Objective = "balanced",
    max_compute_overhead: float = 1.0,
    max_steps_overhead: float = 4.0,
    min_batch_tokens: float = 0.0,
    granularity_tokens: float | None = None,
) -> BatchRecommendation:
    """A batch for an objective, a multiple of ``granularity_tokens`` (what the layout can run: one
    micro-step, micro_batch × data-parallel size × seq_len, or seq_len × DP without a micro-batch):

    - ``"balanced"``: B = B_crit (2× the minimum steps and 2× the minimum data; Kaplan §5.1), the
      nearest runnable multiple.
    - ``"fewest_steps"``: the largest batch whose data overhead E/E_min − 1 = B/B_crit stays within
      ``max_compute_overhead`` → B = overhead·B_crit (default 1.0), rounded DOWN to a runnable multiple so
      the cap still holds; when even one micro-step breaks it, that micro-step with ``meets_caps`` false.
    - ``"least_compute"``: the smallest batch whose step overhead S/S_min − 1 = B_crit/B stays within
      ``max_steps_overhead`` → B = B_crit/overhead (default 4: S/S_min = 5, E/E_min = 1.25), rounded UP
      so the cap still holds, never below ``min_batch_tokens`` (e.g. one sequence per rank).
    """
    bc = _positive(critical_batch_tokens, "critical_batch_tokens")
    if objective not in get_args(Objective):
        raise InvalidInput(
            f"Unknown objective {objective!r}; use one of {', '.join(get_args(Objective))}.",
            field="objective",
        )
    if min_batch_tokens < 0:
        raise InvalidInput("min_batch_tokens must be ≥ 0.", field="min_batch_tokens")
    step = None if granularity_tokens is None else _positive(granularity_tokens, "granularity_tokens")
    if objective == "fewest_steps":
        cap = _positive(max_compute_overhead, "max_compute_overhead")
        b = max(cap * bc, float(min_batch_tokens))
        if step is None:
            return BatchRecommendation(b, b <= cap * bc, "")
        down = _floor_to(cap * bc, step)
        if down >= step and down >= min_batch_tokens:
            note = f"rounded down to a multiple of {step:,.0f} tokens so B/B_crit ≤ max_compute_overhead"
            return BatchRecommendation(down, True, note)
        b = _ceil_to(max(step, float(min_batch_tokens)), step)
        note = (
            f"no runnable batch meets the max_compute_overhead cap of {cap:g}: the smallest multiple of "
            f"{step:,.0f} tokens is {b / bc:.3g}× B_crit; use a smaller micro-batch or fewer ranks"
        )
        return BatchRecommendation(b, False, note)
    if objective == "least_compute":
        steps_cap = _positive(max_steps_overhead, "max_steps_overhead")
        b = max(bc / steps_cap, float(min_batch_tokens))
        if not math.isfinite(b):
            raise InvalidInput(
                f"max_steps_overhead {steps_cap:g} asks for a batch past any number; give a larger cap",
                field="max_steps_overhead",
            )
        if step is None:
            return BatchRecommendation(b, True, "")
        note = f"rounded up to a multiple of {step:,.0f} tokens so B_crit/B ≤ max_steps_overhead"
        return BatchRecommendation(_ceil_to(b, step), True, note)
    b = max(bc, float(min_batch_tokens))
    if step is None:
        return BatchRecommendation(b, True, "")
    return BatchRecommendation(
        _round_to(b, step), True, f"rounded to the nearest multiple of {step:,.0f} tokens"
    )


def recommend_batch_tokens(
    critical_batch_tokens: float,
    *,
    objective: Objective = "balanced",
    max_compute_overhead: float = 1.0,
    max_steps_overhead: float = 4.0,
    min_batch_tokens: float = 0.0,
    granularity_tokens: float | None = None,
) -> float:
    """:func:`recommend_batch`'s batch alone."""
    return recommend_batch(
        critical_batch_tokens,
        objective=objective,
        max_compute_overhead=max_compute_overhead,
        max_steps_overhead=max_steps_overhead,
        min_batch_tokens=min_batch_tokens,
        granularity_tokens=granularity_tokens,
    ).batch_tokens


@dataclass(frozen=True, slots=True)
class GradientAccumulation:
    accumulation_steps: int
    global_batch_sequences: int
    global_batch_tokens: int
    overshoot_fraction: float  # actual / target − 1


def gradient_accumulation(
    target_batch_tokens: float, *, micro_batch_sequences: int, seq_len: int, data_parallel_size: int
) -> GradientAccumulation:
    """Accumulation steps = ceil(target / (micro_batch × seq_len × DP)); the global batch it gives."""
    target = _positive(target_batch_tokens, "target_batch_tokens")
    micro = _whole(micro_batch_sequences, "micro_batch_sequences")
    seq = _whole(seq_len, "seq_len")
    dp = _whole(data_parallel_size, "data_parallel_size")
    per_step = micro * seq * dp
    steps = max(1, math.ceil(round(target / per_step, 9)))
    tokens = steps * per_step
    return GradientAccumulation(steps, steps * micro * dp, tokens, tokens / target - 1)


# ---------------------------------------------------------------------------------------------
# Batch ramp


@dataclass(frozen=True, slots=True)
class RampPhase:
    start_tokens: float
    end_tokens: float
    batch_tokens: float
    steps: int
    loss_at_start: float
    critical_batch_tokens_at_start: float


@dataclass(frozen=True, slots=True)
class BatchRamp:
    phases: tuple[RampPhase, ...]
    total_tokens: float
    total_steps: int
    constant_batch_tokens: float  # the constant batch compared with: by default the target (last) one
    constant_batch_steps: int
    steps_saved: int  # constant_batch_steps − total_steps (negative: the ramp takes more steps)
    steps_saved_fraction: float  # steps_saved / constant_batch_steps
    comparison: str  # what the saving is measured against, in words
    loss_evaluated_from_tokens: float  # the loss before this token count is taken at it
    data_efficiency: float  # E_min/E of the ramp over the run (:func:`data_efficiency`)
    constant_batch_data_efficiency: float  # the same for the constant batch over the same tokens


#: Midpoint-rule points per stretch of constant batch when integrating the data efficiency.
DATA_EFFICIENCY_POINTS = 64


def data_efficiency(
    stretches: list[tuple[float, float, float]], critical_batch_at_tokens: Callable[[float], float]
) -> float:
    """E_min/E: the fraction of a run's tokens that count, for batches held over token stretches
    ``(start_tokens, end_tokens, batch_tokens)``.

    Kaplan et al. 2020 Eq. 5.5 (McCandlish et al. 2018 Eq. 2.12): at batch B against the critical batch
    B_crit, reaching a loss takes E = E_min·(1 + B/B_crit) tokens, so a token spent at B does
    1/(1 + B/B_crit) of the work of one at a vanishing batch. Integrated over each stretch (midpoint
    rule, :data:`DATA_EFFICIENCY_POINTS` points: B_crit changes smoothly with the loss) and divided by
    the tokens. 1 means every token as useful as at a vanishing batch; a batch at B_crit gives 0.5.
    """
    useful = 0.0
    spent = 0.0
    for start, end, batch in stretches:
        width = (end - start) / DATA_EFFICIENCY_POINTS
        if width <= 0:
            continue
        for i in range(DATA_EFFICIENCY_POINTS):
            b_crit = critical_batch_at_tokens(start + (i + 0.5) * width)
            useful += width / (1.0 + batch / b_crit)
        spent += end - start
    return useful / spent if spent > 0 else 1.0


def chinchilla_loss_predictor(fit: LossFit, params: float) -> Callable[[float], float]:
    """Loss after ``tokens`` tokens for a model of ``params`` parameters (Chinchilla Eq. 2 with ``fit``;
    a run-to-completion fit used along the run, an approximation). Below the smallest token count the
    fit was made on (``fit.min_tokens_fitted``) the loss is held at its value there: B/D^β diverges as
    D → 0 (412 nats at one token for an 8B model), far outside anything the fit saw."""
    floor = fit.min_tokens_fitted
    return lambda tokens: chinchilla_loss(fit, params, max(tokens, floor))


def ramp(
    *,
    total_tokens: float,
    loss_at_tokens: Callable[[float], float],
    critical_batch_at_loss: Callable[[float], float],
    start_batch_tokens: float,
    max_batch_tokens: float,
    granularity_tokens: float,
    constant_batch_tokens: float | None = None,
    loss_valid_from_tokens: float = 0.0,
) -> BatchRamp:
    """A doubling batch ramp: the batch doubles once the critical batch (at the predicted loss) reaches
    the doubled batch, so the batch stays at or below B_crit; the last doubling stops at the target,
    the largest multiple of ``granularity_tokens`` ≤ ``max_batch_tokens``.

    Batches are multiples of ``granularity_tokens`` (what the layout runs in one step). Loss must fall
    with tokens; it is evaluated no earlier than ``loss_valid_from_tokens`` (the smallest token count
    the loss fit was made on: earlier tokens take the loss there). Each phase boundary is found by
    bisection (60 evaluations), so the cost is O(#phases). Steps saved are counted against a constant
    batch, by default the TARGET batch (the one the run ramps to): a ramp spends smaller batches early,
    so over the same tokens it takes more steps than the target batch (a negative saving) and buys
    data efficiency early on (Kaplan Eq. 5.5: E/E_min = 1 + B/B_crit). Steps per phase are
    ceil(phase tokens / batch).
    """
    total = _positive(total_tokens, "total_tokens")
    gran = _positive(granularity_tokens, "granularity_tokens")
    b = _round_to(_positive(start_batch_tokens, "start_batch_tokens"), gran)
    cap = _positive(max_batch_tokens, "max_batch_tokens")
    if cap < b:
        raise InvalidInput("max_batch_tokens must be at least start_batch_tokens.", field="max_batch_tokens")
    if not math.isfinite(loss_valid_from_tokens) or loss_valid_from_tokens < 0:
        raise InvalidInput("loss_valid_from_tokens must be ≥ 0.", field="loss_valid_from_tokens")
    target = max(b, _floor_to(cap, gran))
    floor = float(loss_valid_from_tokens)

    def loss_at(tokens: float) -> float:
        return loss_at_tokens(max(tokens, floor))

    def bcrit(tokens: float) -> float:
        return critical_batch_at_loss(loss_at(tokens))

    phases: list[RampPhase] = []
    start = 0.0
    while start < total and len(phases) < MAX_RAMP_PHASES:
        nxt = min(_round_to(2 * b, gran), target)
        if nxt <= b or bcrit(total) < nxt:
            end = total
        elif bcrit(start) >= nxt:
            end = start
        else:
            lo, hi = start, total
            for _ in range(60):
                mid = (lo + hi) / 2
                if bcrit(mid) >= nxt:
                    hi = mid
                else:
                    lo = mid
            end = hi
        if end > start:
            steps = max(1, math.ceil(round((end - start) / b, 9)))
            loss0 = loss_at(start)
            phases.append(RampPhase(start, end, b, steps, loss0, critical_batch_at_loss(loss0)))
        start = end
        b = nxt
    total_steps = sum(p.steps for p in phases)
    const = target if constant_batch_tokens is None else constant_batch_tokens
    const = _positive(const, "constant_batch_tokens")
    # A run shorter than one batch still takes one step (round() would make it 0 steps).
    const_steps = max(1, math.ceil(round(total / const, 9)))
    saved = const_steps - total_steps
    ramp_efficiency = data_efficiency([(p.start_tokens, p.end_tokens, p.batch_tokens) for p in phases], bcrit)
    const_efficiency = data_efficiency([(0.0, total, const)], bcrit)
    which = "the target batch" if constant_batch_tokens is None else "the given constant batch"
    comparison = (
        f"against a constant batch of {const:,.0f} tokens ({which}) over the same {total:,.0f} tokens: "
        f"{const_steps:,} steps; the ramp takes {total_steps:,} "
        f"({abs(saved):,} {'fewer' if saved >= 0 else 'more'}); of its tokens "
        f"{ramp_efficiency:.1%} count against {const_efficiency:.1%} at the constant batch "
        "(E_min/E, Kaplan et al. 2020 Eq. 5.5)"
    )
    return BatchRamp(
        tuple(phases),
        total,
        total_steps,
        const,
        const_steps,
        saved,
        saved / const_steps,
        comparison,
        floor,
        ramp_efficiency,
        const_efficiency,
    )
