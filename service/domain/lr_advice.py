"""Peak learning rate, warmup and floor for a model size or a compute budget, each with its rule.

Rules
-----
Each rule counts only inside the range its source fitted; outside it is shown, flagged
(``applicable = False``), and left out of the recommendation.

- GPT-3 (Brown et al. 2020, Table 2.1): the eight published (params → LR, batch) rows, interpolated
  linearly in log(params)–log(LR); outside 125M–175B the nearest end value is shown.
- Kaplan et al. 2020 Eq. D.1: LR(N) ≈ 0.003239 − 0.0001395·ln N (N non-embedding parameters), fitted
  on their models of 768 to 1.5e9 non-embedding parameters (§2, App. D.1); it reaches zero near
  1.2e10, so it is not used above 1.5e9.
- DeepSeek LLM 2024 §3.1 Eq. 1: η_opt = 0.3118·C^−0.1250, B_opt = 0.2920·C^0.3271 tokens, with
  C = M·D, M = 72·n_layer·d_model² + 12·n_layer·d_model·l_seq non-embedding FLOPs per token. Without
  the dimensions C ≈ 6·N·D is used instead (flagged in the note).
- Published practice at 69B–530B (:data:`LARGE_DENSE_RUNS`): the peak LRs nine teams chose for dense
  AdamW pre-training at that scale, a power law in N fitted through them by least squares in
  log–log, with a band of ±2 standard deviations of its log residuals (×/÷ 1.99). No rule above was
  fitted there (GPT-3's table ends at 175B; DeepSeek's law was fitted at ≤3e20 FLOPs and advises
  3–6× what these teams chose), so this is the only evidence of what runs at that size tolerate.
  Each published choice at ≥175B lies inside the band fitted without it (leave-one-out, in the
  tests).

Recommendation: the geometric mean of the applicable rules' LRs (they are power laws; the mean of
logs is the natural centre), range = [min, max] of the applicable rules (the practice rule's band
counts with its ends). When no rule is applicable,
the geometric mean of all computed values, flagged. A rule leaving its range changes the set being
averaged, which could make the answer jump up with size (Kaplan's fit dropping out at 1e10 did:
1.06e-4 at 10B, 1.94e-4 at 15B). All three sources agree that the peak LR falls as models grow, so
the recommendation is capped by the one for every smaller model at the same token budget. Between the
sizes where a rule enters or leaves its range every rule falls with size, so the lowest of the smaller
models' values sits just below one of those boundaries (:func:`_envelope_sizes`; a log grid, as before,
missed the dip just under GPT-3's 175B end). The answer is monotonic non-increasing in model size, and
says when the cap applied.

Warmup (GPT-3 App. B: 375M warmup tokens of 300B = 0.125%; Kaplan: 3000 of 250k steps = 1.2%; the
service keeps warmup in 0.1%–1% of the steps): with a known batch, ceil(375M tokens / batch) clamped
to [0.1%, 1%] of the steps; otherwise 0.125% of the steps. Floor: 10% of the peak (GPT-3's cosine
to 10%; Chinchilla's 10× decay) unless asked otherwise.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any

from service.domain.errors import InvalidInput
from service.domain.schedules import ScheduleSpec

__all__ = [
    "GPT3_TABLE",
    "LARGE_DENSE_RUNS",
    "LrAdvice",
    "LrRule",
    "WarmupAdvice",
    "advise_lr",
    "deepseek_batch_tokens",
    "deepseek_compute_flops",
    "deepseek_flops_per_token",
    "deepseek_lr",
    "gpt3_batch_tokens",
    "gpt3_lr",
    "kaplan_lr",
    "practice_lr",
]


@dataclass(frozen=True, slots=True)
class Gpt3Row:
    params: float
    n_layers: int
    d_model: int
    n_heads: int
    batch_tokens: float
    lr: float


#: Brown et al. 2020 Table 2.1 (params, n_layers, d_model, n_heads, batch size in tokens, LR).
GPT3_TABLE: tuple[Gpt3Row, ...] = (
    Gpt3Row(125e6, 12, 768, 12, 0.5e6, 6.0e-4),
    Gpt3Row(350e6, 24, 1024, 16, 0.5e6, 3.0e-4),
    Gpt3Row(760e6, 24, 1536, 16, 0.5e6, 2.5e-4),
    Gpt3Row(1.3e9, 24, 2048, 24, 1e6, 2.0e-4),
    Gpt3Row(2.7e9, 32, 2560, 32, 1e6, 1.6e-4),
    Gpt3Row(6.7e9, 32, 4096, 32, 2e6, 1.2e-4),
    Gpt3Row(13e9, 40, 5120, 40, 2e6, 1.0e-4),
    Gpt3Row(175e9, 96, 12288, 96, 3.2e6, 0.6e-4),
)


@dataclass(frozen=True, slots=True)
class PublishedRun:
    name: str
    params: float
    peak_lr: float


#: Peak LRs of published dense pre-training runs with AdamW at 69B–530B parameters (PaLM's
#: Adafactor and MoE runs such as DeepSeek-V3 are left out: their LRs are on another scale).
LARGE_DENSE_RUNS: tuple[PublishedRun, ...] = (
    PublishedRun("Llama 2 70B, Touvron et al. 2023 Table 1", 69e9, 1.5e-4),
    PublishedRun("Chinchilla 70B, Hoffmann et al. 2022 Table 4", 70e9, 1.0e-4),
    PublishedRun("Llama 3 70B, Meta 2024 model card", 70.6e9, 1.5e-4),
    PublishedRun("GPT-3 175B, Brown et al. 2020 Table 2.1", 175e9, 0.6e-4),
    PublishedRun("OPT-175B, Zhang et al. 2022 Table 1", 175e9, 1.2e-4),
    PublishedRun("BLOOM 176B, BigScience 2022 Table 3", 176e9, 0.6e-4),
    PublishedRun("Gopher 280B, Rae et al. 2021 Table 1", 280e9, 0.4e-4),
    PublishedRun("Llama 3 405B, Dubey et al. 2024 §3.4.1", 405e9, 0.8e-4),
    PublishedRun("MT-NLG 530B, Smith et al. 2022 §3.2", 530e9, 0.5e-4),
)
#: The practice band: ±2 standard deviations of the fit's log residuals (a ~95% interval).
PRACTICE_BAND_SIGMAS = 2.0
#: Kaplan et al. 2020 Eq. D.1 coefficients and the size above which the paper says it breaks down.
KAPLAN_LR_INTERCEPT, KAPLAN_LR_SLOPE = 0.003239, 0.0001395
KAPLAN_LR_MIN_PARAMS, KAPLAN_LR_MAX_PARAMS = 768.0, 1.5e9  # Kaplan et al. 2020 §2: the models fitted
GPT3_MIN_PARAMS, GPT3_MAX_PARAMS = 125e6, 175e9
#: The monotone cap looks at sizes this fraction below each rule's range boundary (module docstring).
ENVELOPE_BELOW = 1e-12
#: DeepSeek LLM 2024 Eq. 1 (η_opt, B_opt) and Eq. 2 (M, FLOPs per token without embeddings).
DEEPSEEK_LR_COEFF, DEEPSEEK_LR_EXP = 0.3118, -0.1250
DEEPSEEK_BATCH_COEFF, DEEPSEEK_BATCH_EXP = 0.2920, 0.3271
#: DeepSeek fitted on budgets of 1e17–3e20 FLOPs and validated to ~1e24 (7B/67B); flagged outside.
DEEPSEEK_VALID_FLOPS = (1e17, 1e25)
#: GPT-3 App. B: linear warmup over the first 375M tokens (of 300B).
GPT3_WARMUP_TOKENS = 375e6
GPT3_WARMUP_FRACTION = 375e6 / 300e9  # 0.125%
WARMUP_MIN_FRACTION, WARMUP_MAX_FRACTION = 0.001, 0.01
#: GPT-3 (cosine to 10% of peak) and Chinchilla (10× decay): the default floor.
DEFAULT_FLOOR_RATIO = 0.1


@dataclass(frozen=True, slots=True)
class LrRule:
    rule: str  # "gpt3" | "kaplan" | "deepseek" | "practice"
    source: str
    lr: float | None
    applicable: bool
    extrapolated: bool
    note: str
    #: The spread of the choices the rule was fitted on, where it has one (the practice rule).
    band: tuple[float, float] | None = None


@dataclass(frozen=True, slots=True)
class WarmupAdvice:
    warmup_steps: int | None
    warmup_fraction: float
    reason: str


@dataclass(frozen=True, slots=True)
class LrAdvice:
    rules: tuple[LrRule, ...]
    recommended_lr: float
    recommendation_rule: str
    lr_range: tuple[float, float]
    params: float | None
    compute_flops: float | None
    warmup: WarmupAdvice
    floor_ratio: float
    floor_lr: float
    batch_tokens_suggested: float | None
    batch_source: str | None
    total_steps: int | None
    schedule: dict[str, Any]


def _positive(value: float | None, name: str) -> float:
    if value is None:
        raise InvalidInput(f"{name} is required.", field=name)
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise InvalidInput(f"{name} must be a finite number above 0.", field=name)
    return float(value)


def _interp_loglog(x: float, xs: list[float], ys: list[float]) -> tuple[float, bool]:
    if x <= xs[0]:
        return ys[0], x < xs[0]
    if x >= xs[-1]:
        return ys[-1], x > xs[-1]
    for i in range(1, len(xs)):
        if x <= xs[i]:
            f = (math.log(x) - math.log(xs[i - 1])) / (math.log(xs[i]) - math.log(xs[i - 1]))
            return math.exp(math.log(ys[i - 1]) + f * (math.log(ys[i]) - math.log(ys[i - 1]))), False
    raise AssertionError("unreachable")


def gpt3_lr(params: float) -> LrRule:
    """GPT-3 Table 2.1 LR at ``params``: exact at its sizes, log–log interpolated between them."""
    n = _positive(params, "params")
    value, outside = _interp_loglog(n, [r.params for r in GPT3_TABLE], [r.lr for r in GPT3_TABLE])
    note = (
        "outside GPT-3's 125M–175B: the nearest end value, not extrapolated"
        if outside
        else "GPT-3 Table 2.1, log–log interpolation between its sizes"
    )
    return LrRule("gpt3", "Brown et al. 2020 Table 2.1", value, not outside, outside, note)


def gpt3_batch_tokens(params: float) -> float:
    """GPT-3 Table 2.1 batch (tokens) of the row nearest in log(params)."""
    n = _positive(params, "params")
    row = min(GPT3_TABLE, key=lambda r: abs(math.log(r.params / n)))
    return row.batch_tokens


def kaplan_lr(non_embedding_params: float) -> LrRule:
    """Kaplan et al. 2020 Eq. D.1: LR(N) ≈ 0.003239 − 0.0001395·ln N."""
    n = _positive(non_embedding_params, "params")
    value = KAPLAN_LR_INTERCEPT - KAPLAN_LR_SLOPE * math.log(n)
    if value <= 0:
        return LrRule(
            "kaplan", "Kaplan et al. 2020 Eq. D.1", None, False, True, "Eq. D.1 gives LR ≤ 0 at this size"
        )
    if not KAPLAN_LR_MIN_PARAMS <= n <= KAPLAN_LR_MAX_PARAMS:
        return LrRule(
            "kaplan",
            "Kaplan et al. 2020 Eq. D.1",
            value,
            False,
            True,
            "outside the 768–1.5e9 non-embedding parameters Kaplan et al. fitted",
        )
    return LrRule("kaplan", "Kaplan et al. 2020 Eq. D.1", value, True, False, "N taken as non-embedding")


@functools.lru_cache(maxsize=64)
def _practice_fit(runs: tuple[PublishedRun, ...]) -> tuple[float, float, float, float]:
    """(mean log N, mean log LR, slope, residual σ) of the least-squares fit in log–log; fitted once
    per table, not once per size the monotone cap looks at."""
    if len(runs) < 3 or len({r.params for r in runs}) < 2:
        raise InvalidInput("the practice rule needs at least three runs at two sizes", field="runs")
    xs = [math.log(r.params) for r in runs]
    ys = [math.log(r.peak_lr) for r in runs]
    mean_x, mean_y = math.fsum(xs) / len(xs), math.fsum(ys) / len(ys)
    slope = math.fsum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / math.fsum(
        (x - mean_x) ** 2 for x in xs
    )
    residuals = [y - (mean_y + slope * (x - mean_x)) for x, y in zip(xs, ys, strict=True)]
    return mean_x, mean_y, slope, math.sqrt(math.fsum(r * r for r in residuals) / (len(runs) - 2))


def practice_lr(params: float, runs: tuple[PublishedRun, ...] = LARGE_DENSE_RUNS) -> LrRule:
    """The power law through published large dense runs' peak LRs (module docstring), with its band."""
    n = _positive(params, "params")
    mean_x, mean_y, slope, sigma = _practice_fit(runs)
    value = math.exp(mean_y + slope * (math.log(n) - mean_x))
    spread = math.exp(PRACTICE_BAND_SIGMAS * sigma)
    smallest, largest = min(r.params for r in runs), max(r.params for r in runs)
    inside = smallest <= n <= largest
    note = (
        f"power law N^{slope:.2f} through {len(runs)} published dense runs of "
        f"{smallest / 1e9:.0f}B–{largest / 1e9:.0f}B, band ×/÷ {spread:.2f} (±2σ)"
    )
    if not inside:
        note += "; outside those sizes: shown, not used"
    return LrRule(
        "practice",
        "published peak LRs of large dense AdamW runs (Llama 2/3, Chinchilla, GPT-3, OPT, BLOOM, "
        "Gopher, MT-NLG)",
        value,
        inside,
        not inside,
        note,
        (value / spread, value * spread),
    )


def deepseek_flops_per_token(n_layers: int, d_model: int, seq_len: int) -> float:
    """DeepSeek LLM Eq. 2: M = 72·n_layer·d_model² + 12·n_layer·d_model·l_seq (no embedding)."""
    for name, v in (("n_layers", n_layers), ("d_model", d_model), ("seq_len", seq_len)):
        _positive(v, name)
    return 72 * n_layers * d_model**2 + 12 * n_layers * d_model * seq_len


def deepseek_compute_flops(
    *,
    tokens: float,
    params: float | None = None,
    n_layers: int | None = None,
    d_model: int | None = None,
    seq_len: int | None = None,
) -> tuple[float, str]:
    """C = M·D with DeepSeek's M when the dimensions are known, else C ≈ 6·N·D."""
    d = _positive(tokens, "tokens")
    if n_layers is not None and d_model is not None and seq_len is not None:
        return deepseek_flops_per_token(n_layers, d_model, seq_len) * d, "C = M·D with DeepSeek's M"
    return 6 * _positive(params, "params") * d, "C ≈ 6·N·D (no n_layers/d_model/seq_len given)"


def deepseek_lr(compute_flops: float) -> float:
    """DeepSeek LLM Eq. 1: η_opt = 0.3118·C^−0.1250."""
    return DEEPSEEK_LR_COEFF * _positive(compute_flops, "compute_flops") ** DEEPSEEK_LR_EXP


def deepseek_batch_tokens(compute_flops: float) -> float:
    """DeepSeek LLM Eq. 1: B_opt = 0.2920·C^0.3271 tokens."""
    return DEEPSEEK_BATCH_COEFF * _positive(compute_flops, "compute_flops") ** DEEPSEEK_BATCH_EXP


def _combine(
    n: float, c: float | None, c_note: str, size_note: str, runs: tuple[PublishedRun, ...]
) -> tuple[list[LrRule], float, str]:
    """The rules at size ``n`` (and budget ``c``) and their geometric mean (module docstring)."""
    rules = [
        dataclasses.replace(rule, note=rule.note + size_note)
        for rule in (gpt3_lr(n), kaplan_lr(n), practice_lr(n, runs))
    ]
    if c is not None:
        inside = DEEPSEEK_VALID_FLOPS[0] <= c <= DEEPSEEK_VALID_FLOPS[1]
        note = c_note if inside else c_note + "; outside the 1e17–1e25 FLOPs DeepSeek fitted and checked"
        rules.append(LrRule("deepseek", "DeepSeek LLM 2024 Eq. 1", deepseek_lr(c), inside, not inside, note))
    else:
        rules.append(
            LrRule(
                "deepseek", "DeepSeek LLM 2024 Eq. 1", None, False, False, "needs a compute budget or tokens"
            )
        )
    usable = [r.lr for r in rules if r.applicable and r.lr is not None]
    how = "geometric mean of the applicable rules"
    if not usable:
        usable = [r.lr for r in rules if r.lr is not None]
        how = "geometric mean of all rules (none applicable at this size: extrapolated)"
    return rules, math.exp(math.fsum(math.log(v) for v in usable) / len(usable)), how


def _warmup(total_steps: int | None, batch_tokens: float | None) -> WarmupAdvice:
    if total_steps is None:
        return WarmupAdvice(
            None, GPT3_WARMUP_FRACTION, "GPT-3: 375M of 300B tokens = 0.125% of the run (no step count known)"
        )
    lo = max(1, math.ceil(WARMUP_MIN_FRACTION * total_steps))
    hi = max(lo, math.floor(WARMUP_MAX_FRACTION * total_steps))
    if batch_tokens is not None:
        raw = math.ceil(GPT3_WARMUP_TOKENS / batch_tokens)
        steps = min(hi, max(lo, raw))
        why = f"GPT-3's 375M warmup tokens at {batch_tokens:.4g} tokens/step = {raw} steps"
        if steps != raw:
            why += f", clamped to {steps} (0.1%–1% of {total_steps} steps)"
    else:
        steps = min(hi, max(lo, math.ceil(GPT3_WARMUP_FRACTION * total_steps)))
        why = f"GPT-3's 0.125% of the run ({total_steps} steps)"
    steps = min(steps, total_steps - 1) if total_steps > 1 else 0
    return WarmupAdvice(steps, steps / total_steps, why)


def _envelope_sizes(
    n: float, c: float | None, budget_power: int, runs: tuple[PublishedRun, ...]
) -> list[float]:
    """The smaller sizes whose recommendation can be the lowest of all sizes below ``n``: just below
    each size where a rule enters or leaves its range. Between two such sizes the set of rules averaged
    is fixed and every rule falls with size (GPT-3's table, Kaplan's Eq. D.1 and DeepSeek's
    C^−0.125 at a budget that grows with the size), so the lowest value of an interval is at its upper
    end; (1 − 1e-12) of a boundary is that end, on the interval's side."""
    boundaries = [
        KAPLAN_LR_MIN_PARAMS,
        KAPLAN_LR_MAX_PARAMS,
        math.exp(KAPLAN_LR_INTERCEPT / KAPLAN_LR_SLOPE),  # Eq. D.1 reaches zero
        GPT3_MIN_PARAMS,
        GPT3_MAX_PARAMS,
        min(r.params for r in runs),
        max(r.params for r in runs),
    ]
    if c is not None:  # where the budget, scaled with the size, crosses DeepSeek's range
        boundaries += [n * (bound / c) ** (1 / budget_power) for bound in DEEPSEEK_VALID_FLOPS]
    sizes = {size for b in boundaries for size in (b, b * (1 - ENVELOPE_BELOW)) if 0 < size < n}
    return sorted(sizes)


def advise_lr(
    *,
    params: float | None = None,
    compute_flops: float | None = None,
    tokens: float | None = None,
    n_layers: int | None = None,
    d_model: int | None = None,
    seq_len: int | None = None,
    batch_tokens: float | None = None,
    total_steps: int | None = None,
    floor_ratio: float = DEFAULT_FLOOR_RATIO,
    practice_runs: tuple[PublishedRun, ...] = LARGE_DENSE_RUNS,
) -> LrAdvice:
    """Each rule's peak LR, a recommendation (geometric mean of the applicable rules), warmup, floor,
    and a ``ScheduleSpec`` dict (cosine to the floor) for the schedules endpoint.

    Give ``params``, or ``compute_flops``, or ``params`` + ``tokens`` (C from DeepSeek's M when
    ``n_layers``, ``d_model``, ``seq_len`` are given). ``params`` are used as Kaplan's non-embedding
    N. With only a budget, the size is the 20-tokens-per-parameter optimum N = √(C/120) (noted).
    ``total_steps`` defaults to tokens / batch_tokens when both are known. ``practice_runs`` is the
    practice rule's table (the tests leave a run out to check the rule on it).
    """
    if params is None and compute_flops is None:
        raise InvalidInput("Give params, or compute_flops, or params and tokens.", field="params")
    if not 0 <= floor_ratio <= 1:
        raise InvalidInput("floor_ratio must be in [0, 1].", field="floor_ratio")
    c_note = "compute_flops as given"
    if compute_flops is not None:
        c: float | None = _positive(compute_flops, "compute_flops")
    elif tokens is not None:
        c, c_note = deepseek_compute_flops(
            tokens=tokens, params=params, n_layers=n_layers, d_model=d_model, seq_len=seq_len
        )
    else:
        c = None
    size_note = ""
    if params is not None:
        n = _positive(params, "params")
    else:
        assert c is not None
        n = math.sqrt(c / 120)  # Hoffmann et al. 2022: ~20 tokens per parameter, C = 6·N·20N
        size_note = f"; params assumed compute-optimal (20 tokens/param): {n:.4g}"
    rules, rec, how = _combine(n, c, c_note, size_note, practice_runs)
    counted = [r for r in rules if r.applicable and r.lr is not None] or [
        r for r in rules if r.lr is not None
    ]
    ends = [end for r in counted for end in (r.band or (r.lr, r.lr)) if end is not None]
    lr_range = (min(ends), max(ends))
    # The monotone cap: no smaller model at the same token budget (or, with only a budget, at its
    # own compute-optimal budget) gets a lower LR.
    capped_at: float | None = None
    budget_power = 2 if params is None else 1
    for smaller in _envelope_sizes(n, c, budget_power, practice_runs):
        c_small = None if c is None else c * (smaller / n) ** budget_power
        _, value, _ = _combine(smaller, c_small, c_note, size_note, practice_runs)
        if value < rec:
            rec, capped_at = value, smaller
    if capped_at is not None:
        how += (
            f"; capped at the recommendation for {capped_at:.3g} parameters, a smaller model "
            "(the peak LR does not rise with size)"
        )
        lr_range = (min(lr_range[0], rec), lr_range[1])

    if c is not None:
        batch_suggested: float | None = deepseek_batch_tokens(c)
        batch_source: str | None = "DeepSeek LLM 2024 Eq. 1 (B_opt)"
    else:
        batch_suggested, batch_source = gpt3_batch_tokens(n), "GPT-3 Table 2.1 (nearest size)"
    steps = total_steps
    if steps is None and tokens is not None and batch_tokens is not None:
        steps = max(1, math.ceil(_positive(tokens, "tokens") / _positive(batch_tokens, "batch_tokens")))
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise InvalidInput("total_steps must be a whole number ≥ 1.", field="total_steps")
    warm = _warmup(steps, batch_tokens)
    kind = "cosine_with_min_lr" if floor_ratio > 0 else "cosine"
    schedule: dict[str, Any] = {"kind": kind, "peak_lr": rec}
    if floor_ratio > 0:
        schedule["min_lr_ratio"] = floor_ratio
    if steps is not None:
        schedule["total_steps"] = steps
        schedule["warmup_steps"] = warm.warmup_steps
        ScheduleSpec(**schedule)  # the dict is a valid spec
    else:
        schedule["warmup_fraction"] = warm.warmup_fraction
    return LrAdvice(
        rules=tuple(rules),
        recommended_lr=rec,
        recommendation_rule=how,
        lr_range=lr_range,
        params=n,
        compute_flops=c,
        warmup=warm,
        floor_ratio=floor_ratio,
        floor_lr=rec * floor_ratio,
        batch_tokens_suggested=batch_suggested,
        batch_source=batch_source,
        total_steps=steps,
        schedule=schedule,
    )
