"""How accelerators behave below their datasheet peaks: efficiency curves and link efficiencies as data.

The catalog (:mod:`service.domain.hardware`) gives peaks, memory and bandwidths. This module gives, per
accelerator *family*, the fraction of those peaks that real kernels and collectives reach:

* matmul efficiency as a function of the GEMM's size: Calculon's curve by GFLOPs per GEMM (Isaev et
  al., SC'23; ``calculon-ai/calculon`` ``systems/a100_80g.json``: 0.95 at ≥128 GFLOP, 0.9 at 16, 0.6 at
  1, 0.1 at 0) times a curve by the GEMM's *smallest* dimension (tile and wave quantisation: NVIDIA
  "Matrix Multiplication Background User's Guide"; skinny GEMMs run far below peak), times a per-family
  scale fitted once on the published runs (``benchmarks/validate_predictions.py``);
* fused (flash) attention efficiency, forward and backward, as a fraction of the dense peak on the
  FLOPs the kernel executes (Dao 2023, FlashAttention-2: 50-73 % forward on A100; Shah et al. 2024,
  FlashAttention-3: ~75 % forward on H100, backward lower);
* memory-bound kernels: achieved HBM bandwidth fraction by MB moved per kernel (Calculon ``mem1``:
  0.9 at ≥100 MB, 0.75 at 10, 0.6 at 1, 0.3 at 0);
* links: NVLink efficiency 0.65 and InfiniBand 0.9 (Calculon; ``reference/performance_model.md``),
  a latency per collective step (Calculon: 1 µs NVLink, 2 µs InfiniBand), PCIe 0.8 (typical NCCL
  bus bandwidth on PCIe 4/5 hosts), TPU ICI 0.8 (assumed).

Families without published curves of their own take the Hopper/Ampere shapes with their own peaks and
bandwidths from the catalog (``derived_from`` says so). A :class:`Calibration` scales or overrides the
defaults from measured runs (``fit_calibration`` in :mod:`service.domain.performance` fits one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from service.domain.errors import InvalidInput
from service.domain.hardware import Accelerator


@dataclass(frozen=True, slots=True)
class EfficiencyCurve:
    """Efficiency as a piecewise-linear function of log10(x) through ``points`` (x ascending, x > 0),
    clamped to the end values outside them."""

    points: tuple[tuple[float, float], ...]
    source: str
    _log_x: tuple[float, ...] = field(init=False, repr=False, compare=False)
    _eff: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.points:
            raise InvalidInput("an efficiency curve needs at least one point.", field="points")
        xs = [p[0] for p in self.points]
        if any(x <= 0 for x in xs) or xs != sorted(xs):
            raise InvalidInput("efficiency curve sizes must be positive and ascending.", field="points")
        if any(not 0 < p[1] <= 1 for p in self.points):
            raise InvalidInput("efficiencies must be in (0, 1].", field="points")
        object.__setattr__(self, "_log_x", tuple(math.log10(x) for x in xs))
        object.__setattr__(self, "_eff", tuple(p[1] for p in self.points))

    def at(self, x: float) -> float:
        lx, ef = self._log_x, self._eff
        if x <= 0:
            return ef[0]
        v = math.log10(x)
        if v <= lx[0]:
            return ef[0]
        for i in range(1, len(lx)):
            if v <= lx[i]:
                f = (v - lx[i - 1]) / (lx[i] - lx[i - 1])
                return ef[i - 1] + f * (ef[i] - ef[i - 1])
        return ef[-1]


@dataclass(frozen=True, slots=True)
class LinkBehaviour:
    """Achieved fraction of a link's one-way bandwidth and the latency of one collective step."""

    efficiency: float
    latency_seconds: float
    source: str


@dataclass(frozen=True, slots=True)
class HardwareBehaviour:
    """Efficiencies of one accelerator family (module docstring gives the sources)."""

    family: str
    matmul_by_gflops: EfficiencyCurve
    matmul_by_min_dim: EfficiencyCurve
    matmul_scale: float
    attention_forward_efficiency: float
    attention_backward_efficiency: float
    memory_by_megabytes: EfficiencyCurve
    intra_node: LinkBehaviour
    inter_node: LinkBehaviour
    derived_from: str | None
    sources: tuple[str, ...]

    def matmul_efficiency(self, m: float, n: float, k: float, scale: float = 1.0) -> float:
        """Fraction of the dense peak one GEMM (m×k)·(k×n) reaches."""
        gflops = 2.0 * m * n * k / 1e9
        eff = (
            self.matmul_scale
            * scale
            * self.matmul_by_gflops.at(gflops)
            * self.matmul_by_min_dim.at(min(m, n, k))
        )
        return min(eff, 1.0)

    def matmul_efficiency_for(self, flops: float, min_dim: float, scale: float = 1.0) -> float:
        """Fraction of the dense peak of an op of ``flops`` whose smallest GEMM dimension is ``min_dim``
        (batched GEMMs: the whole batch's FLOPs)."""
        eff = (
            self.matmul_scale
            * scale
            * self.matmul_by_gflops.at(flops / 1e9)
            * self.matmul_by_min_dim.at(min_dim)
        )
        return min(eff, 1.0)

    def memory_efficiency(self, bytes_per_kernel: float) -> float:
        return self.memory_by_megabytes.at(bytes_per_kernel / 1e6)


# --------------------------------------------------------------------------------------------------
# The data

_CALCULON = "Isaev et al. SC'23 (Calculon), calculon-ai/calculon systems/a100_80g.json, h100_80g_nvl8.json"
_GEMM_GUIDE = (
    "NVIDIA Deep Learning Performance docs, 'Matrix Multiplication Background' (tile/wave quantisation); "
    "shape read from cuBLAS BF16 GEMM sweeps, normalised to 1 for large dimensions"
)
_FITTED = (
    "scale fitted once on the 25 rows of validation/published_runs.json (benchmarks/validate_predictions.py)"
)

#: Calculon's matmul curve by GFLOPs per GEMM (its points at 0 GFLOP are placed at 0.01 GFLOP here).
CALCULON_MATMUL_BY_GFLOPS = EfficiencyCurve(
    ((0.01, 0.1), (1.0, 0.6), (16.0, 0.9), (128.0, 0.95)), f"{_CALCULON}: matrix gflops_efficiency"
)
#: Calculon's HBM efficiency by MB per kernel.
CALCULON_MEMORY_BY_MB = EfficiencyCurve(
    ((0.01, 0.3), (1.0, 0.6), (10.0, 0.75), (100.0, 0.9)), f"{_CALCULON}: mem1 MB_efficiency"
)

#: Share of the large-GEMM rate by the smallest GEMM dimension (Ampere: mma.sync tiles).
AMPERE_MIN_DIM = EfficiencyCurve(
    ((64.0, 0.45), (128.0, 0.6), (256.0, 0.74), (512.0, 0.84), (1024.0, 0.91), (2048.0, 0.96), (4096.0, 1.0)),
    _GEMM_GUIDE,
)
#: Hopper needs twice the tile size for the same share of peak (wgmma 64×N×16 per warpgroup).
HOPPER_MIN_DIM = EfficiencyCurve(
    ((128.0, 0.45), (256.0, 0.6), (512.0, 0.74), (1024.0, 0.84), (2048.0, 0.91), (4096.0, 0.96),
     (8192.0, 1.0)),
    _GEMM_GUIDE,
)  # fmt: skip

NVLINK = LinkBehaviour(0.65, 1e-6, f"{_CALCULON}; reference/performance_model.md (NVLink at 0.65)")
INFINIBAND = LinkBehaviour(0.9, 2e-6, f"{_CALCULON}: InfiniBand at 0.9, 2 µs")
PCIE = LinkBehaviour(0.8, 2e-6, "typical NCCL bus bandwidth on PCIe 4/5 hosts (assumed)")
ICI = LinkBehaviour(0.8, 2e-6, "TPU ICI (assumed; no public efficiency figure)")
ETHERNET_SCALE_OUT = LinkBehaviour(0.85, 5e-6, "RoCE scale-out (assumed)")

#: Fitted scales of the matmul curves (see module docstring; rerun the fit with
#: ``python benchmarks/validate_predictions.py --fit``).
AMPERE_MATMUL_SCALE = 0.775
HOPPER_MATMUL_SCALE = 0.550


def _family(
    family: str,
    min_dim: EfficiencyCurve,
    scale: float,
    attention: tuple[float, float],
    intra: LinkBehaviour,
    inter: LinkBehaviour,
    derived_from: str | None,
    sources: tuple[str, ...],
) -> HardwareBehaviour:
    return HardwareBehaviour(
        family=family,
        matmul_by_gflops=CALCULON_MATMUL_BY_GFLOPS,
        matmul_by_min_dim=min_dim,
        matmul_scale=scale,
        attention_forward_efficiency=attention[0],
        attention_backward_efficiency=attention[1],
        memory_by_megabytes=CALCULON_MEMORY_BY_MB,
        intra_node=intra,
        inter_node=inter,
        derived_from=derived_from,
        sources=sources,
    )


_FA2 = "Dao 2023 (FlashAttention-2, arXiv 2307.08691): 50-73% of peak forward on A100, backward lower"
_FA3 = "Shah et al. 2024 (FlashAttention-3, arXiv 2407.08608): ~75% forward on H100; FA2/cuDNN lower"

FAMILIES: dict[str, HardwareBehaviour] = {
    "ampere": _family("ampere", AMPERE_MIN_DIM, AMPERE_MATMUL_SCALE, (0.65, 0.5), NVLINK, INFINIBAND, None,
                      (_CALCULON, _GEMM_GUIDE, _FA2, _FITTED)),
    "volta": _family("volta", AMPERE_MIN_DIM, AMPERE_MATMUL_SCALE, (0.55, 0.45), NVLINK, INFINIBAND, "ampere",
                     (_CALCULON, _GEMM_GUIDE)),
    "ada": _family("ada", AMPERE_MIN_DIM, AMPERE_MATMUL_SCALE, (0.6, 0.45), PCIE, ETHERNET_SCALE_OUT, "ampere",
                   (_CALCULON, _GEMM_GUIDE)),
    "hopper": _family("hopper", HOPPER_MIN_DIM, HOPPER_MATMUL_SCALE, (0.55, 0.45), NVLINK, INFINIBAND, None,
                      (_CALCULON, _GEMM_GUIDE, _FA3, _FITTED)),
    "blackwell": _family("blackwell", HOPPER_MIN_DIM, HOPPER_MATMUL_SCALE, (0.55, 0.45), NVLINK, INFINIBAND,
                         "hopper", (_CALCULON, _GEMM_GUIDE)),
    "cdna": _family("cdna", HOPPER_MIN_DIM, HOPPER_MATMUL_SCALE * 0.85, (0.45, 0.35), NVLINK, INFINIBAND,
                    "hopper (scaled 0.85: ROCm BF16 GEMMs reach a smaller share of the MI300X peak)",
                    (_CALCULON, _GEMM_GUIDE)),
    "tpu": _family("tpu", AMPERE_MIN_DIM, AMPERE_MATMUL_SCALE, (0.55, 0.45), ICI, ICI, "ampere",
                   (_CALCULON, _GEMM_GUIDE)),
    "generic": _family("generic", HOPPER_MIN_DIM, HOPPER_MATMUL_SCALE, (0.5, 0.4), NVLINK, INFINIBAND, "hopper",
                       (_CALCULON, _GEMM_GUIDE)),
}  # fmt: skip

_FAMILY_BY_PREFIX: tuple[tuple[str, str], ...] = (
    ("a100", "ampere"),
    ("a10", "ampere"),
    ("a10g", "ampere"),
    ("rtx-3090", "ampere"),
    ("v100", "volta"),
    ("h100", "hopper"),
    ("h200", "hopper"),
    ("gh200", "hopper"),
    ("gb200", "blackwell"),
    ("gb300", "blackwell"),
    ("b200", "blackwell"),
    ("b300", "blackwell"),
    ("l4", "ada"),
    ("l40s", "ada"),
    ("rtx-4090", "ada"),
    ("mi", "cdna"),
    ("tpu", "tpu"),
)


def family_of(accelerator: Accelerator) -> str:
    """The behaviour family of a catalog part ("generic" for custom and unlisted parts)."""
    if accelerator.is_custom:
        return "generic"
    aid = accelerator.id
    for prefix, family in _FAMILY_BY_PREFIX:
        if (
            aid == prefix
            or aid.startswith(prefix + "-")
            or (prefix in ("mi", "tpu") and aid.startswith(prefix))
        ):
            return family
    return "generic"


def behaviour_for(accelerator: Accelerator) -> HardwareBehaviour:
    return FAMILIES[family_of(accelerator)]


# --------------------------------------------------------------------------------------------------
# Calibration


@dataclass(frozen=True, slots=True)
class Calibration:
    """Multipliers and overrides fitted from measured runs.

    ``matmul_efficiency_scale`` multiplies the family's matmul (and attention) efficiency;
    ``overlap_fraction`` (None = the model's defaults) replaces the fraction of data-parallel,
    pipeline and tensor-parallel communication that hides behind compute when overlap is on.
    ``accelerator_id`` names the part the fit used (None: several or unknown). ``rms_error`` is the
    root-mean-square MFU error (fraction) of the fit on its observations.
    """

    matmul_efficiency_scale: float = 1.0
    overlap_fraction: float | None = None
    accelerator_id: str | None = None
    n_observations: int = 0
    rms_error: float | None = None
    source: str = "default (uncalibrated)"

    def __post_init__(self) -> None:
        s = self.matmul_efficiency_scale
        if (
            isinstance(s, bool)
            or not isinstance(s, int | float)
            or not math.isfinite(s)
            or not 0.1 <= s <= 3.0
        ):
            raise InvalidInput(
                f"matmul_efficiency_scale must be within [0.1, 3], got {s!r}.",
                field="matmul_efficiency_scale",
            )
        o = self.overlap_fraction
        if o is not None and (isinstance(o, bool) or not isinstance(o, int | float) or not 0.0 <= o <= 1.0):
            raise InvalidInput(
                f"overlap_fraction must be within [0, 1], got {o!r}.", field="overlap_fraction"
            )


NO_CALIBRATION = Calibration()
