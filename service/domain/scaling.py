"""Compute-optimal model size and token count, and loss predictors.

Conventions: ``params`` are parameters (Chinchilla counts all non-embedding-excluded parameters as
published; Kaplan uses non-embedding ones), ``tokens`` training tokens, ``compute_flops`` training
FLOPs with C ≈ 6·N·D (Kaplan et al. 2020 §2.1; Hoffmann et al. 2022 §3). Loss in nats per token.

Sources: Hoffmann et al. 2022 (arXiv 2203.15556) Eq. 4, Eq. 10, Table 3; Besiroglu et al. 2024
(arXiv 2404.10102, the Epoch AI refit); DeepSeek LLM (arXiv 2401.02954) §3; Kaplan et al. 2020
(arXiv 2001.08361) Eq. 1.5; ``reference/batch_and_scaling.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from service.domain.errors import InvalidInput

__all__ = [
    "CHINCHILLA_ROUNDED",
    "CHINCHILLA_TABLE3",
    "CHINCHILLA_UNROUNDED",
    "EPOCH_REFIT",
    "FITS",
    "ComputeOptimal",
    "IsoFlopPoint",
    "LossFit",
    "chinchilla_loss",
    "compute_optimal",
    "compute_optimal_all",
    "consensus_optimal",
    "deepseek_optimal",
    "iso_flop_curve",
    "kaplan_loss",
    "practical_compute_flops",
    "table3_approach1",
    "twenty_tokens_per_param",
]


def _positive(value: float, name: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise InvalidInput(f"{name} must be a finite number above 0.", field=name)
    return float(value)


@dataclass(frozen=True, slots=True)
class LossFit:
    """A Chinchilla-form loss fit L(N, D) = E + A/N^α + B/D^β (Hoffmann et al. 2022 Eq. 2)."""

    name: str
    irreducible_loss: float  # E
    a_coeff: float  # A
    b_coeff: float  # B
    alpha: float
    beta: float
    source: str
    #: The smallest and largest training-token counts the fit was made on: Hoffmann et al. 2022
    #: (abstract, §3) trained "over 400 language models ranging from 70 million to over 16 billion
    #: parameters on 5 to 500 billion tokens"; Besiroglu et al. 2024 refit the same runs. Below the
    #: smallest, B/D^β diverges (412 nats at one token): callers hold the loss there.
    min_tokens_fitted: float = 5e9
    max_tokens_fitted: float = 5e11


#: Hoffmann et al. 2022 Eq. 10 as printed (rounded): gives N_opt ≈ 32.2B at the Gopher budget.
CHINCHILLA_ROUNDED = LossFit(
    "chinchilla_rounded", 1.69, 406.4, 410.7, 0.34, 0.28, "Hoffmann et al. 2022 Eq. 10 (rounded constants)"
)
#: Hoffmann et al. 2022 Eq. 10 with the unrounded exponents (α 0.3392, β 0.2849, E 1.6934; A, B as
#: printed): gives ≈ 40.3B at 5.76e23, the paper's "40B".
CHINCHILLA_UNROUNDED = LossFit(
    "chinchilla_unrounded",
    1.6934,
    406.4,
    410.7,
    0.3392,
    0.2849,
    "Hoffmann et al. 2022 Eq. 10 (unrounded α, β, E)",
)
#: Besiroglu et al. 2024 (Epoch AI) refit of Chinchilla Approach 3.
EPOCH_REFIT = LossFit("epoch", 1.8172, 482.01, 2085.43, 0.3478, 0.3658, "Besiroglu et al. 2024 refit")
FITS: dict[str, LossFit] = {f.name: f for f in (CHINCHILLA_ROUNDED, CHINCHILLA_UNROUNDED, EPOCH_REFIT)}

#: Chinchilla Table 3 (Approach 1): (params, FLOPs, tokens) as printed.
CHINCHILLA_TABLE3: tuple[tuple[float, float, float], ...] = (
    (400e6, 1.92e19, 8.0e9),
    (1e9, 1.21e20, 20.2e9),
    (10e9, 1.23e22, 205.1e9),
    (67e9, 5.76e23, 1.5e12),
    (175e9, 3.85e24, 3.7e12),
    (280e9, 9.90e24, 5.9e12),
    (520e9, 3.43e25, 11.0e12),
    (1e12, 1.27e26, 21.2e12),
    (10e12, 1.30e28, 216.2e12),
)
#: Least-squares power law N_opt = K·C^a through the Table 3 rows (log–log): a = 0.4981 (the paper's
#: Approach 1 reports a = 0.50), K = 0.09916. Tokens follow from C = 6·N·D.
TABLE3_EXPONENT = 0.4981
TABLE3_COEFF = 0.09916
#: "About 20 tokens per parameter" (Hoffmann et al. 2022 Table 3 at small budgets): C = 6·N·20·N.
TOKENS_PER_PARAM_RULE = 20.0
#: DeepSeek LLM (2024) §3.2 Eq. 4: M_opt = 0.1715·C^0.5243, D_opt = 5.8316·C^0.4757 (M in
#: non-embedding FLOPs per token, C = M·D).
DEEPSEEK_M_COEFF, DEEPSEEK_M_EXP = 0.1715, 0.5243
DEEPSEEK_D_COEFF, DEEPSEEK_D_EXP = 5.8316, 0.4757
#: Kaplan et al. 2020 Eq. 1.5 / Table 2: α_N 0.076, α_D 0.103, N_c 6.4e13 params, D_c 1.8e13 tokens.
KAPLAN_ALPHA_N, KAPLAN_ALPHA_D = 0.076, 0.103
KAPLAN_N_C, KAPLAN_D_C = 6.4e13, 1.8e13


@dataclass(frozen=True, slots=True)
class ComputeOptimal:
    """One rule's compute-optimal answer at a budget."""

    rule: str
    source: str
    compute_flops: float
    params: float
    tokens: float
    tokens_per_param: float
    predicted_loss: float | None
    note: str = ""


@dataclass(frozen=True, slots=True)
class IsoFlopPoint:
    params: float
    tokens: float
    loss: float


def get_fit(name: str) -> LossFit:
    try:
        return FITS[name]
    except KeyError:
        raise InvalidInput(f"Unknown loss fit {name!r}; use one of {', '.join(FITS)}.", field="fit") from None


def chinchilla_loss(fit: LossFit, params: float, tokens: float) -> float:
    """L(N, D) = E + A/N^α + B/D^β (Hoffmann et al. 2022 Eq. 2 with the fit's constants)."""
    n = _positive(params, "params")
    d = _positive(tokens, "tokens")
    return fit.irreducible_loss + fit.a_coeff / n**fit.alpha + fit.b_coeff / d**fit.beta


def compute_optimal(fit: LossFit, compute_flops: float) -> ComputeOptimal:
    """Hoffmann et al. 2022 Eq. 4: N_opt = G·(C/6)^a, D_opt = G⁻¹·(C/6)^b,
    G = (αA/(βB))^(1/(α+β)), a = β/(α+β), b = α/(α+β)."""
    c = _positive(compute_flops, "compute_flops")
    al, be = fit.alpha, fit.beta
    g = (al * fit.a_coeff / (be * fit.b_coeff)) ** (1 / (al + be))
    n = g * (c / 6) ** (be / (al + be))
    d = (c / 6) ** (al / (al + be)) / g
    return ComputeOptimal(fit.name, fit.source, c, n, d, d / n, chinchilla_loss(fit, n, d))


def twenty_tokens_per_param(compute_flops: float, fit: LossFit = CHINCHILLA_ROUNDED) -> ComputeOptimal:
    """N = √(C/120), D = 20·N (C = 6·N·D, D/N = 20); loss from ``fit``."""
    c = _positive(compute_flops, "compute_flops")
    n = math.sqrt(c / (6 * TOKENS_PER_PARAM_RULE))
    d = TOKENS_PER_PARAM_RULE * n
    return ComputeOptimal(
        "20_tokens_per_param",
        "Hoffmann et al. 2022 (≈20 tokens per parameter)",
        c,
        n,
        d,
        TOKENS_PER_PARAM_RULE,
        chinchilla_loss(fit, n, d),
        f"loss from {fit.name}",
    )


def table3_approach1(compute_flops: float, fit: LossFit = CHINCHILLA_ROUNDED) -> ComputeOptimal:
    """Chinchilla Approach 1 as tabulated (Table 3): N = 0.09916·C^0.4981, D = C/(6N)."""
    c = _positive(compute_flops, "compute_flops")
    n = TABLE3_COEFF * c**TABLE3_EXPONENT
    d = c / (6 * n)
    return ComputeOptimal(
        "chinchilla_approach1",
        "Hoffmann et al. 2022 Table 3 (Approach 1; power law fitted to its rows)",
        c,
        n,
        d,
        d / n,
        chinchilla_loss(fit, n, d),
        f"loss from {fit.name}",
    )


def deepseek_optimal(compute_flops: float) -> ComputeOptimal:
    """DeepSeek LLM Eq. 4: M_opt = 0.1715·C^0.5243 FLOPs/token, D_opt = 5.8316·C^0.4757 tokens.

    DeepSeek's M counts non-embedding FLOPs per token *including attention*; ``params`` here is the
    approximation M/6 (6 FLOPs per parameter per token), which overstates the parameters a little
    where attention FLOPs are a large share (long sequences, small models).
    """
    c = _positive(compute_flops, "compute_flops")
    m = DEEPSEEK_M_COEFF * c**DEEPSEEK_M_EXP
    d = DEEPSEEK_D_COEFF * c**DEEPSEEK_D_EXP
    n = m / 6
    return ComputeOptimal(
        "deepseek",
        "DeepSeek LLM 2024 Eq. 4",
        c,
        n,
        d,
        d / n,
        None,
        f"non-embedding FLOPs/token M = {m:.4g}; params ≈ M/6 (approximation)",
    )


#: The fits that agree with one another (Besiroglu et al. 2024 §4: Chinchilla's Approach 3 as printed
#: is inconsistent with Approaches 1 and 2 and with its own data; their refit agrees with them).
CONSENSUS_MEMBERS = ("epoch", "chinchilla_approach1", "20_tokens_per_param")


def consensus_optimal(compute_flops: float) -> ComputeOptimal:
    """The default answer: the geometric mean N of the consistent fits (:data:`CONSENSUS_MEMBERS`:
    Besiroglu et al. 2024's refit of Approach 3, Chinchilla Approach 1 as tabulated in Table 3, and
    20 tokens per parameter), D = C/(6N), loss from the refit. The note gives each member's N and
    tokens/parameter and the spread (max/min N), so the disagreement stays visible.

    At the Gopher budget (5.76e23) the members give 72.2B, 67.8B and 69.3B parameters (consensus 69.8B,
    19.7 tokens/param), where the rounded Approach 3 gives 32.2B (Besiroglu et al. 2024 §4).
    """
    c = _positive(compute_flops, "compute_flops")
    members = [
        compute_optimal(EPOCH_REFIT, c),
        table3_approach1(c, EPOCH_REFIT),
        twenty_tokens_per_param(c, EPOCH_REFIT),
    ]
    n = math.exp(math.fsum(math.log(m.params) for m in members) / len(members))
    d = c / (6 * n)
    spread = max(m.params for m in members) / min(m.params for m in members)
    detail = ", ".join(f"{m.rule} {m.params:.3g} ({m.tokens_per_param:.3g} tokens/param)" for m in members)
    return ComputeOptimal(
        "consensus",
        "geometric mean of Besiroglu et al. 2024's refit, Chinchilla Approach 1 (Table 3) and 20 tokens/param",
        c,
        n,
        d,
        d / n,
        chinchilla_loss(EPOCH_REFIT, n, d),
        f"members: {detail}; spread {spread:.3g}x; loss from epoch",
    )


def compute_optimal_all(compute_flops: float, fit_name: str = "chinchilla_rounded") -> list[ComputeOptimal]:
    """Every rule at once: the consensus (first), the three Eq. 4 fits, Table 3's power law, 20 tokens/param and DeepSeek."""
    fit = get_fit(fit_name)
    return [
        consensus_optimal(compute_flops),
        compute_optimal(CHINCHILLA_ROUNDED, compute_flops),
        compute_optimal(CHINCHILLA_UNROUNDED, compute_flops),
        compute_optimal(EPOCH_REFIT, compute_flops),
        table3_approach1(compute_flops, fit),
        twenty_tokens_per_param(compute_flops, fit),
        deepseek_optimal(compute_flops),
    ]


def kaplan_loss(params: float, tokens: float) -> float:
    """Kaplan et al. 2020 Eq. 1.5: L(N, D) = [(N_c/N)^(α_N/α_D) + D_c/D]^α_D (N non-embedding)."""
    n = _positive(params, "params")
    d = _positive(tokens, "tokens")
    return float(((KAPLAN_N_C / n) ** (KAPLAN_ALPHA_N / KAPLAN_ALPHA_D) + KAPLAN_D_C / d) ** KAPLAN_ALPHA_D)


def iso_flop_curve(
    fit: LossFit, compute_flops: float, *, points: int = 21, span: float = 10.0
) -> list[IsoFlopPoint]:
    """Loss vs model size at a fixed budget (D = C/(6N)): N log-uniform in [N_opt/span, N_opt·span]."""
    c = _positive(compute_flops, "compute_flops")
    if isinstance(points, bool) or not isinstance(points, int) or not 3 <= points <= 1000:
        raise InvalidInput("points must be a whole number in [3, 1000].", field="points")
    if not span > 1:
        raise InvalidInput("span must be above 1.", field="span")
    n_opt = compute_optimal(fit, c).params
    out = []
    for i in range(points):
        n = n_opt * span ** (2 * i / (points - 1) - 1)
        d = c / (6 * n)
        out.append(IsoFlopPoint(n, d, chinchilla_loss(fit, n, d)))
    return out


def practical_compute_flops(devices: int, peak_flops_per_device: float, mfu: float, seconds: float) -> float:
    """C = devices × dense peak FLOP/s × MFU × seconds: what a budget of device time buys."""
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise InvalidInput("devices must be a whole number ≥ 1.", field="devices")
    _positive(peak_flops_per_device, "peak_flops_per_device")
    _positive(seconds, "seconds")
    if isinstance(mfu, bool) or not isinstance(mfu, int | float) or not 0 < mfu <= 1:
        raise InvalidInput("mfu must be a fraction in (0, 1].", field="mfu")
    return devices * peak_flops_per_device * mfu * seconds
