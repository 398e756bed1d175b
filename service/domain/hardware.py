"""Accelerator catalog: dense peak FLOP/s per precision, memory, bandwidths, power.

Every figure is from ``reference/hardware.md`` (vendor datasheets, cross-checked against torchtitan,
composer, Lightning, llm-analysis and stas00/ml-engineering; sources per part below). Rules:

* Peaks are **dense** (no 2:4 sparsity). NVIDIA datasheets from Ampere on print the sparse figure for
  TF32/FP16/BF16/FP8; the catalog holds half of it.
* Peaks are **per device as the framework sees a device** (the unit is in each entry's
  ``device_granularity``): one MI250X GCD (half a package), one TPU v3 core, one TPU7x TensorCore
  device (half a chip), one Trainium1 NeuronCore-v2 (two per chip), one Trainium2 logical NeuronCore
  (LNC=2 default: four per chip, so the chip's 667 BF16 TFLOP/s and 96 GiB are 166.75 and 24 GiB per
  rank, as torch-neuronx counts ranks).
* Consumer GeForce cards: the BF16/FP16 tensor rate with FP32 accumulation (RTX 4090: 165.2), not the
  FP32 shader rate nor the FP16-accumulate rate.
* Memory is in bytes with the vendor's "GB" read as GiB (HBM stacks come in power-of-two sizes; the
  framework reports slightly less as usable). Bandwidths are bytes/s, decimal; interconnect is per
  device, **one direction**.
* ``uncertain_fields`` names the values marked ⚠ (single or disputed source) in the reference.

Device-name resolution (:func:`resolve_device_name`) matches whole normalised names against an
explicit alias table, never substrings: "GB200" is not "B200", "L40S" is not "L4", "GH200" is not
"H200", "H200 NVL" is not the SXM part. An unknown name is a :class:`NotFound`, never a fallback.
"""

from __future__ import annotations

import difflib
import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, get_args

from service.domain.errors import InvalidInput, NotFound, UnsupportedPrecision

Precision = Literal["bf16", "fp16", "fp8", "tf32", "fp32", "fp64"]
PRECISIONS: tuple[str, ...] = get_args(Precision)

GIB = 2**30
TERA = 1e12
GIGA = 1e9

#: A per-device dense peak above this is almost certainly FLOP/s typed where TFLOP/s was asked
#: (the largest part in the catalog is 5,000 TFLOP/s at FP8).
MAX_PLAUSIBLE_PEAK_TFLOPS = 50_000.0


@dataclass(frozen=True, slots=True)
class Accelerator:
    """One accelerator device, as the training framework sees a device."""

    id: str
    display_name: str
    vendor: str
    bf16_tflops: float | None
    fp16_tflops: float | None
    fp8_tflops: float | None
    tf32_tflops: float | None
    fp32_tflops: float | None
    fp64_tflops: float | None
    memory_bytes: int | None
    hbm_bandwidth_bytes_per_second: float | None
    intra_node_bandwidth_bytes_per_second: float | None
    intra_node_link: str | None
    tdp_watts: float | None
    device_granularity: str
    sources: tuple[str, ...]
    uncertain_fields: tuple[str, ...] = ()
    notes: str = ""
    is_custom: bool = False

    def peak_tflops(self, precision: Precision) -> float | None:
        """Dense peak TFLOP/s at ``precision``; None where the part has none."""
        value: float | None = getattr(self, f"{precision}_tflops")
        return value

    @property
    def supported_precisions(self) -> tuple[str, ...]:
        return tuple(p for p in PRECISIONS if getattr(self, f"{p}_tflops") is not None)


def _check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise InvalidInput(
            f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}.", field="precision"
        )


def peak_flops(accelerator: Accelerator, precision: Precision) -> float:
    """Dense peak FLOP/s per device at ``precision``; UnsupportedPrecision where the part has none."""
    _check_precision(precision)
    tflops = accelerator.peak_tflops(precision)
    if tflops is None:
        supported = ", ".join(accelerator.supported_precisions) or "none"
        raise UnsupportedPrecision(
            f"{accelerator.display_name} has no dense {precision} peak (supported: {supported}); "
            "choose one of those precisions or give a custom peak.",
            field="precision",
        )
    return tflops * TERA


# --------------------------------------------------------------------------------------------------
# The catalog

_NV = "NVIDIA"
_AMD = "AMD"
_GOOGLE = "Google"
_INTEL = "Intel"
_AWS = "AWS"
_ONE = "one package = one device"

# id, display, vendor, (bf16, fp16, fp8, tf32, fp32, fp64), memory GB(GiB), HBM TB/s, link GB/s one way,
# link kind, TDP W, granularity, sources, uncertain fields, notes
_Row = tuple[
    str,
    str,
    str,
    tuple[float | None, float | None, float | None, float | None, float | None, float | None],
    float | None,
    float | None,
    float | None,
    str | None,
    float | None,
    str,
    tuple[str, ...],
    tuple[str, ...],
    str,
]
_N = None
_SRC_A100 = ("NVIDIA A100 datasheet (dense = half the 'with sparsity' figure)",)
_SRC_H100 = ("NVIDIA H100 datasheet (dense = half the 'with sparsity' figure)",)
_SRC_H200 = ("NVIDIA H200 datasheet",)
_SRC_BW = ("NVIDIA Blackwell HGX / GB200 NVL72 spec tables",)
_SRC_TPU = ("Google Cloud TPU documentation",)
_ROWS: tuple[_Row, ...] = (
    ("v100-sxm2-32gb", "NVIDIA V100 SXM2 32GB", _NV, (_N, 125, _N, _N, 15.7, 7.8),
     32, 0.9, 150, "NVLink 2", 300, _ONE, ("NVIDIA V100 datasheet",), (), "no BF16 tensor cores"),
    ("v100-sxm2-16gb", "NVIDIA V100 SXM2 16GB", _NV, (_N, 125, _N, _N, 15.7, 7.8),
     16, 0.9, 150, "NVLink 2", 300, _ONE, ("NVIDIA V100 datasheet",), (), "no BF16 tensor cores"),
    ("v100-pcie-16gb", "NVIDIA V100 PCIe 16GB", _NV, (_N, 112, _N, _N, 14, 7),
     16, 0.9, 16, "PCIe 3", 250, _ONE, ("NVIDIA V100 datasheet",), (), "no BF16 tensor cores"),
    ("t4", "NVIDIA T4", _NV, (_N, 65, _N, _N, 8.1, _N),
     16, 0.32, 16, "PCIe 3", 70, _ONE, ("NVIDIA T4 datasheet (FP16 mixed precision 65 TFLOPS)",), (),
     "Turing: no BF16; GDDR6"),
    ("a100-sxm4-40gb", "NVIDIA A100 SXM4 40GB", _NV, (312, 312, _N, 156, 19.5, 9.7),
     40, 1.555, 300, "NVLink 3", 400, _ONE, _SRC_A100, (), ""),
    ("a100-sxm4-80gb", "NVIDIA A100 SXM4 80GB", _NV, (312, 312, _N, 156, 19.5, 9.7),
     80, 2.039, 300, "NVLink 3", 400, _ONE, _SRC_A100, (), ""),
    ("a100-pcie-80gb", "NVIDIA A100 PCIe 80GB", _NV, (312, 312, _N, 156, 19.5, 9.7),
     80, 1.935, 32, "PCIe 4", 300, _ONE, _SRC_A100, (), ""),
    ("a100-pcie-40gb", "NVIDIA A100 PCIe 40GB", _NV, (312, 312, _N, 156, 19.5, 9.7),
     40, 1.555, 32, "PCIe 4", 250, _ONE, _SRC_A100, (), ""),
    ("a800-sxm4-80gb", "NVIDIA A800 SXM4 80GB", _NV, (312, 312, _N, 156, 19.5, 9.7),
     80, 2.039, 200, "NVLink 3 (400 GB/s both ways)", 400, _ONE,
     ("NVIDIA A800 datasheet (the A100 with NVLink cut to 400 GB/s)",), (), "China export part"),
    ("a40", "NVIDIA A40", _NV, (149.7, 149.7, _N, 74.8, 37.4, _N),
     48, 0.696, 32, "PCIe 4", 300, _ONE, ("NVIDIA A40 datasheet (dense = half the sparse figure)",), (),
     "GDDR6; an NVLink bridge pairs two cards (112.5 GB/s both ways)"),
    ("rtx-a6000", "NVIDIA RTX A6000", _NV, (154.8, 154.8, _N, 77.4, 38.7, _N),
     48, 0.768, 32, "PCIe 4", 300, _ONE, ("NVIDIA RTX A6000 datasheet (dense = half the sparse figure)",),
     (), "GDDR6; professional card: FP32 accumulation at full rate"),
    ("l40", "NVIDIA L40", _NV, (181.05, 181.05, 362.1, 90.5, 90.5, _N),
     48, 0.864, 32, "PCIe 4", 300, _ONE, ("NVIDIA L40 datasheet (dense = half the sparse figure)",), (),
     "GDDR6; not the L40S (362 BF16)"),
    ("rtx-6000-ada", "NVIDIA RTX 6000 Ada Generation", _NV, (364.2, 364.2, 728.5, 182.1, 91.1, _N),
     48, 0.96, 32, "PCIe 4", 300, _ONE,
     ("NVIDIA RTX 6000 Ada datasheet (dense = half the sparse figure)",), (),
     "GDDR6; professional card: FP32 accumulation at full rate"),
    ("rtx-5090", "NVIDIA GeForce RTX 5090", _NV, (209.5, 209.5, 419, 104.8, 104.8, _N),
     32, 1.792, 64, "PCIe 5", 575, _ONE, ("NVIDIA RTX Blackwell GPU architecture white paper",),
     ("bf16_tflops", "fp16_tflops", "fp8_tflops"),
     "GDDR7; BF16/FP16 with FP32 accumulation, dense"),
    ("h800-sxm", "NVIDIA H800 SXM5 80GB", _NV, (989.4, 989.4, 1978.9, 494.7, 67, 1),
     80, 3.35, 200, "NVLink 4 (400 GB/s both ways)", 700, _ONE,
     ("NVIDIA H800 datasheet (the H100 SXM with NVLink cut to 400 GB/s and FP64 to 1 TFLOP/s)",
      "DeepSeek-V3 report (arXiv 2412.19437) §3.1: trained on H800"),
     (), "China export part"),
    ("h20", "NVIDIA H20", _NV, (148, 148, 296, 74, 44, 1),
     96, 4.0, 450, "NVLink 4", 400, _ONE, ("NVIDIA H20 product brief (via OEM spec sheets)",),
     ("bf16_tflops", "fp16_tflops", "fp8_tflops", "tf32_tflops", "fp32_tflops", "tdp_watts"),
     "China export part; no public NVIDIA datasheet"),
    ("h100-hbm2e-96gb", "NVIDIA H100 96GB HBM2e (500 W)", _NV, (989.4, 989.4, 1978.9, 494.7, 67, 34),
     96, _N, 450, "NVLink 4", 500, _ONE,
     ("TorchTitan (Liang et al. 2024, arXiv 2410.06511) §3: 'non-standard H100 with HBM2e, limited to a "
      "lower TDP; the actual peak should be between SXM and NVL'",),
     ("bf16_tflops", "fp16_tflops", "fp8_tflops", "tf32_tflops"),
     "the SXM peak as torchtitan's MFU uses it; the part may sustain less (NVL: 835.5). HBM bandwidth "
     "unpublished"),
    ("h100-sxm", "NVIDIA H100 SXM5 80GB", _NV, (989.4, 989.4, 1978.9, 494.7, 67, 34),
     80, 3.35, 450, "NVLink 4", 700, _ONE, _SRC_H100, (), ""),
    ("h100-pcie", "NVIDIA H100 PCIe", _NV, (756.5, 756.5, 1513, 378, 51, 26),
     80, 2.0, 64, "PCIe 5", 350, _ONE, _SRC_H100, (), ""),
    ("h100-nvl", "NVIDIA H100 NVL", _NV, (835.5, 835.5, 1670.5, 417.5, 60, 30),
     94, 3.9, 300, "NVLink bridge", 400, _ONE, _SRC_H100, (), "power-limited: not the SXM peak"),
    ("h200-sxm", "NVIDIA H200 SXM", _NV, (989.4, 989.4, 1978.9, 494.7, 67, 34),
     141, 4.8, 450, "NVLink 4", 700, _ONE, _SRC_H200, (), ""),
    ("h200-nvl", "NVIDIA H200 NVL", _NV, (835.5, 835.5, 1670.5, 417.5, 60, 30),
     141, 4.8, 450, "NVLink bridge", 600, _ONE, _SRC_H200, (), "power-limited: not the SXM peak"),
    ("gh200", "NVIDIA GH200 Grace Hopper (96GB HBM3)", _NV, (989.4, 989.4, 1978.9, 494.7, 67, 34),
     96, 4.0, 450, "NVLink 4", _N, _ONE, ("NVIDIA GH200 datasheet",), ("tdp_watts",),
     "representative part: the original 96 GB HBM3 at 4.0 TB/s (torch: 'NVIDIA GH200 480GB', the "
     "480 GB being LPDDR5X); the 144 GB HBM3e variant has 4.9 TB/s. Module power is configurable "
     "(450-1000 W including Grace), so no TDP is given."),
    ("b200", "NVIDIA B200", _NV, (2250, 2250, 4500, 1125, 75, 37),
     180, 8.0, 900, "NVLink 5", 1000, _ONE, _SRC_BW, (), "HBM 8.0 TB/s (7.7 on the HGX page)"),
    ("gb200", "NVIDIA GB200 (per Blackwell GPU)", _NV, (2500, 2500, 5000, 1250, 80, 40),
     186, 8.0, 900, "NVLink 5", 1200, _ONE, _SRC_BW, (), ""),
    ("gb300", "NVIDIA GB300 (per Blackwell Ultra GPU)", _NV, (2500, 2500, 5000, 1250, 80, 1.39),
     288, 8.0, 900, "NVLink 5", 1400, _ONE,
     ("NVIDIA GB300 NVL72 spec table: the rack's 360 PF BF16, 720 PF FP8 and 180 PF TF32 with sparsity, "
      "100 TF FP64, over 72 GPUs (dense = half); 288 GB HBM3e at 8 TB/s per GPU",),
     ("fp32_tflops", "tdp_watts"), "per GPU of the NVL72 rack; FP64 cut as on the B300"),
    ("b300", "NVIDIA B300", _NV, (2250, 2250, 4500, 1125, 75, 1.25),
     288, 8.0, 900, "NVLink 5", 1100, _ONE, _SRC_BW, ("tf32_tflops", "tdp_watts"),
     "TF32 and TDP approximate"),
    ("l4", "NVIDIA L4", _NV, (121, 121, 242.5, 60, 30.3, _N),
     24, 0.3, 32, "PCIe 4", 72, _ONE, ("NVIDIA L4 datasheet",), (), ""),
    ("l40s", "NVIDIA L40S", _NV, (362, 362, 733, 183, 91.6, _N),
     48, 0.864, 32, "PCIe 4", 350, _ONE, ("NVIDIA L40S datasheet",), (), ""),
    ("a10", "NVIDIA A10", _NV, (125, 125, _N, 62.5, 31.2, _N),
     24, 0.6, 32, "PCIe 4", 150, _ONE, ("NVIDIA A10 datasheet",), (), ""),
    ("a10g", "NVIDIA A10G (AWS)", _NV, (70, 70, _N, _N, 31.2, _N),
     24, 0.6, 32, "PCIe 4", 300, _ONE, ("AWS G5 documentation; secondary sources",),
     ("bf16_tflops", "fp16_tflops", "tf32_tflops", "fp32_tflops", "tdp_watts"),
     "no official datasheet: BF16 ~70, FP32 ~31-35, TF32 unpublished"),
    ("rtx-4090", "NVIDIA GeForce RTX 4090", _NV, (165.2, 165.2, 330.3, 82.6, 82.6, _N),
     24, 1.008, 32, "PCIe 4", 450, _ONE, ("NVIDIA Ada Lovelace architecture white paper",), (),
     "BF16/FP16 with FP32 accumulation (the FP16-accumulate rate 330 would halve MFU)"),
    ("rtx-3090", "NVIDIA GeForce RTX 3090", _NV, (71, 71, _N, 35.6, 35.6, _N),
     24, 0.936, 56, "NVLink bridge", 350, _ONE, ("NVIDIA Ampere GA102 white paper",),
     ("intra_node_bandwidth_bytes_per_second",), "BF16/FP16 with FP32 accumulation"),
    ("mi250x-gcd", "AMD Instinct MI250X (one GCD)", _AMD, (191.5, 191.5, _N, _N, 23.9, 23.9),
     64, 1.6, 175, "Infinity Fabric", 280, "one torch device = one GCD = half an MI250X package",
     ("AMD Instinct MI250X product page (package figures halved)",),
     ("intra_node_bandwidth_bytes_per_second", "tdp_watts"), "FP32 is the vector rate"),
    ("mi210", "AMD Instinct MI210", _AMD, (181, 181, _N, _N, 45.3, 22.6),
     64, 1.6, 100, "Infinity Fabric (bridge)", 300, _ONE, ("AMD Instinct MI210 product page",),
     ("intra_node_bandwidth_bytes_per_second",), "FP32 is the matrix rate (vector 22.6)"),
    ("mi300x", "AMD Instinct MI300X", _AMD, (1307.4, 1307.4, 2614.9, 653.7, 163.4, 81.7),
     192, 5.3, 448, "Infinity Fabric", 750, _ONE,
     ("AMD CDNA3 white paper", "AMD Instinct MI300X product page"),
     ("tf32_tflops",), "TF32 653.7 on the product page, 490.3 in the white paper"),
    ("mi325x", "AMD Instinct MI325X", _AMD, (1307.4, 1307.4, 2614.9, 653.7, 163.4, 81.7),
     256, 6.0, 448, "Infinity Fabric", 1000, _ONE, ("AMD Instinct MI325X product page",),
     ("tf32_tflops",), "TF32 as MI300X"),
    ("mi355x", "AMD Instinct MI355X", _AMD, (2500, 2500, 5000, _N, 157.3, 78.6),
     288, 8.0, 535.5, "Infinity Fabric", 1400, _ONE, ("AMD Instinct MI355X product page",),
     ("fp64_tflops",), "BF16 2516.6 by FMA count; TF32 unpublished"),
    ("tpu-v3", "Google TPU v3 (one core)", _GOOGLE, (61.5, _N, _N, _N, _N, _N),
     16, 0.45, _N, "ICI", _N, "one JAX device = one TensorCore = half a chip", _SRC_TPU,
     ("intra_node_bandwidth_bytes_per_second", "tdp_watts"), ""),
    ("tpu-v4", "Google TPU v4", _GOOGLE, (275, _N, _N, _N, _N, _N),
     32, 1.2, 270, "ICI", 192, "one JAX device = one chip (megacore)", _SRC_TPU,
     ("intra_node_bandwidth_bytes_per_second",), "TDP is the maximum measured power (192 W)"),
    ("tpu-v5e", "Google TPU v5e", _GOOGLE, (197, _N, _N, _N, _N, _N),
     16, 0.819, 200, "ICI", _N, "one JAX device = one chip", _SRC_TPU, (),
     "JAX device_kind 'TPU v5 lite'"),
    ("tpu-v5p", "Google TPU v5p", _GOOGLE, (459, _N, 459, _N, _N, _N),
     95, 2.765, 600, "ICI", _N, "one JAX device = one chip (megacore)", _SRC_TPU, (),
     "JAX device_kind 'TPU v5'"),
    ("tpu-v6e", "Google TPU v6e (Trillium)", _GOOGLE, (918, _N, 918, _N, _N, _N),
     32, 1.638, 400, "ICI", _N, "one JAX device = one chip", _SRC_TPU, (),
     "JAX device_kind 'TPU v6 lite'"),
    ("tpu-v7", "Google TPU7x (Ironwood, one TensorCore device)", _GOOGLE, (1153.5, _N, 2307, _N, _N, _N),
     96, 3.7, 300, "ICI", _N, "one JAX device = one TensorCore = half a chip", _SRC_TPU,
     ("hbm_bandwidth_bytes_per_second", "intra_node_bandwidth_bytes_per_second"),
     "JAX device_kind 'TPU7x'"),
    ("gaudi2", "Intel Gaudi 2", _INTEL, (432, 432, 865, _N, _N, _N),
     96, 2.46, 262.5, "RoCE (on-chip)", 600, _ONE, ("Intel Gaudi 2 white paper",),
     ("intra_node_bandwidth_bytes_per_second",), ""),
    ("gaudi3", "Intel Gaudi 3", _INTEL, (1835, 1835, 1835, _N, _N, _N),
     128, 3.67, 525, "RoCE (on-chip)", 900, _ONE, ("Intel Gaudi 3, Hot Chips 2024",), (),
     "1677 TFLOP/s BF16 at the shipped clock"),
    ("trainium1", "AWS Trainium1 (one NeuronCore-v2)", _AWS, (95, 95, _N, 95, 23.75, _N),
     16, 0.41, 192, "NeuronLink", _N, "one device = one NeuronCore-v2 (two per chip)",
     ("AWS Neuron documentation",), ("intra_node_bandwidth_bytes_per_second",),
     "some sources use 90 TFLOP/s BF16"),
    ("trainium2", "AWS Trainium2 (one logical NeuronCore, LNC=2)", _AWS,
     (166.75, 166.75, 324.75, 166.75, 45.25, _N),
     24, 0.725, 160, "NeuronLink", _N,
     "one device = one logical NeuronCore (LNC=2, the default: two physical cores, four per chip; "
     "64 ranks per trn2.48xlarge)",
     ("AWS Neuron documentation: Trainium2 architecture (per chip 667 BF16, 1299 FP8, 96 GiB, 2.9 TB/s; "
      "chip figures divided by the 4 logical cores)",),
     (), "per-chip figures are 4x these"),
)  # fmt: skip


def _from_row(row: _Row) -> Accelerator:
    (aid, display, vendor, peaks, mem_gb, hbm_tbs, link_gbs, link, tdp, gran, sources, uncertain, notes) = row
    bf16, fp16, fp8, tf32, fp32, fp64 = (None if v is None else float(v) for v in peaks)
    return Accelerator(
        id=aid,
        display_name=display,
        vendor=vendor,
        bf16_tflops=bf16,
        fp16_tflops=fp16,
        fp8_tflops=fp8,
        tf32_tflops=tf32,
        fp32_tflops=fp32,
        fp64_tflops=fp64,
        memory_bytes=None if mem_gb is None else int(mem_gb * GIB),
        hbm_bandwidth_bytes_per_second=None if hbm_tbs is None else hbm_tbs * TERA,
        intra_node_bandwidth_bytes_per_second=None if link_gbs is None else link_gbs * GIGA,
        intra_node_link=link,
        tdp_watts=None if tdp is None else float(tdp),
        device_granularity=gran,
        sources=sources,
        uncertain_fields=uncertain,
        notes=notes,
    )


ACCELERATORS: dict[str, Accelerator] = {row[0]: _from_row(row) for row in _ROWS}


# --------------------------------------------------------------------------------------------------
# Looking parts up

_VENDOR_WORDS = frozenset(
    {"nvidia", "amd", "tesla", "instinct", "geforce", "google", "cloud", "intel", "habana", "aws"}
)
_SEPARATORS = re.compile(r"[\s_/\-()]+")

# Whole normalised names (see _normalise) → catalog id. Exact keys only: no substring can match.
_ALIASES: dict[str, str] = {
    # torch.cuda.get_device_name()
    "v100 sxm2 32gb": "v100-sxm2-32gb",
    "v100 sxm2 16gb": "v100-sxm2-16gb",
    "v100 pcie 16gb": "v100-pcie-16gb",
    "t4": "t4",
    "a100 pcie 40gb": "a100-pcie-40gb",
    "a800 sxm4 80gb": "a800-sxm4-80gb",
    "a40": "a40",
    "rtx a6000": "rtx-a6000",
    "l40": "l40",
    "rtx 6000 ada generation": "rtx-6000-ada",
    "rtx 5090": "rtx-5090",
    "h800": "h800-sxm",
    "h800 80gb hbm3": "h800-sxm",
    "h20": "h20",
    "h100 96gb hbm2e": "h100-hbm2e-96gb",
    "mi210": "mi210",
    "a100 sxm4 40gb": "a100-sxm4-40gb",
    "a100 sxm4 80gb": "a100-sxm4-80gb",
    "a100 80gb pcie": "a100-pcie-80gb",
    "h100 80gb hbm3": "h100-sxm",
    "h100 sxm5 80gb": "h100-sxm",
    "h100 sxm5": "h100-sxm",
    "h100 pcie": "h100-pcie",
    "h100 nvl": "h100-nvl",
    "h200": "h200-sxm",
    "h200 nvl": "h200-nvl",
    "gh200 480gb": "gh200",
    "gh200 144g hbm3e": "gh200",
    "b200": "b200",
    "gb200": "gb200",
    "gb300": "gb300",
    "b300 sxm6 ac": "b300",
    "l4": "l4",
    "l40s": "l40s",
    "a10": "a10",
    "a10g": "a10g",
    "rtx 4090": "rtx-4090",
    "rtx 3090": "rtx-3090",
    "mi250x mi250": "mi250x-gcd",  # torch reports one string for both parts
    "mi250x": "mi250x-gcd",
    "mi300x": "mi300x",
    "mi325x": "mi325x",
    "mi355x": "mi355x",
    # JAX device_kind
    "tpu v3": "tpu-v3",
    "tpu v4": "tpu-v4",
    "tpu v5 lite": "tpu-v5e",
    "tpu v5e": "tpu-v5e",
    "tpu v5": "tpu-v5p",
    "tpu v5p": "tpu-v5p",
    "tpu v6 lite": "tpu-v6e",
    "tpu v6e": "tpu-v6e",
    "tpu7x": "tpu-v7",
    "tpu v7": "tpu-v7",
    "tpu v7x": "tpu-v7",
    # Habana / Neuron
    "gaudi2": "gaudi2",
    "gaudi 2": "gaudi2",
    "gaudi3": "gaudi3",
    "gaudi 3": "gaudi3",
    "trainium": "trainium1",
    "trn1": "trainium1",
    "trn2": "trainium2",
    "trainium2": "trainium2",
}

#: Names that several parts report (some drivers print a bare "NVIDIA H100"): answered with the
#: candidates, never a guess.
_AMBIGUOUS: dict[str, tuple[str, ...]] = {
    "h100": ("h100-sxm", "h100-hbm2e-96gb", "h100-pcie", "h100-nvl"),
    "a100": ("a100-sxm4-40gb", "a100-sxm4-80gb", "a100-pcie-40gb", "a100-pcie-80gb"),
    "v100": ("v100-sxm2-16gb", "v100-sxm2-32gb", "v100-pcie-16gb"),
}


def _normalise(name: str) -> str:
    words = _SEPARATORS.sub(" ", name.lower()).split()
    return " ".join(w for w in words if w not in _VENDOR_WORDS)


# Every catalog id is a valid name too ("h100-sxm" → "h100 sxm").
_NAME_TO_ID: dict[str, str] = {_normalise(aid): aid for aid in ACCELERATORS} | _ALIASES


def _close_ids(query: str) -> tuple[str, ...]:
    keys = difflib.get_close_matches(query, list(_NAME_TO_ID), n=8, cutoff=0.6)
    seen: dict[str, None] = {}
    for key in keys:
        seen.setdefault(_NAME_TO_ID[key], None)
    return tuple(seen)[:5]


def _not_found(what: str, given: object, query: str, field: str) -> NotFound:
    close = _close_ids(query)
    hint = f" Close matches: {', '.join(close)}." if close else ""
    return NotFound(
        f"unknown {what} {given!r}.{hint} Known ids: {', '.join(ACCELERATORS)}. "
        "Or give the device's own dense peak TFLOP/s (a custom accelerator) instead.",
        field=field,
        close_matches=close,
    )


def get_accelerator(accelerator_id: str) -> Accelerator:
    """The catalog part with this id (case-insensitive); NotFound with close matches otherwise."""
    key = accelerator_id.strip().lower() if isinstance(accelerator_id, str) else ""
    part = ACCELERATORS.get(key)
    if part is None:
        raise _not_found("accelerator id", accelerator_id, _normalise(key), "accelerator")
    return part


@functools.lru_cache(maxsize=1024)  # hot path: every /v1/mfu call may name its device; failures aren't cached
def resolve_device_name(name: str) -> str:
    """The catalog id for a framework device string (``torch.cuda.get_device_name()``, JAX
    ``device_kind``) or a catalog id. Case, spaces, ``-``/``_``/``/`` and vendor words are ignored;
    the rest must match a known name whole."""
    query = _normalise(name) if isinstance(name, str) else ""
    found = _NAME_TO_ID.get(query)
    if found is None:
        candidates = _AMBIGUOUS.get(query)
        if candidates is not None and len(candidates) > 1:
            raise NotFound(
                f"device name {name!r} fits several parts: {', '.join(candidates)}. Give the accelerator "
                "id, or the full name the driver reports (nvidia-smi --query-gpu=name).",
                field="device_name",
                close_matches=candidates,
            )
        raise _not_found("device name", name, query, "device_name")
    return found


def lookup_accelerator(id_or_device_name: str) -> Accelerator:
    """A catalog part by id or by framework device string."""
    return ACCELERATORS[resolve_device_name(id_or_device_name)]


def custom_accelerator(
    *,
    name: str,
    peak_tflops: Mapping[str, float],
    memory_bytes: int | None = None,
    hbm_bandwidth_bytes_per_second: float | None = None,
    intra_node_bandwidth_bytes_per_second: float | None = None,
    tdp_watts: float | None = None,
) -> Accelerator:
    """An accelerator the caller describes: dense peak TFLOP/s per precision (at least one), and
    optionally memory, bandwidths and power. Its id is ``custom``."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidInput("a custom accelerator needs a name.", field="name")
    if not peak_tflops:
        raise InvalidInput(
            "give at least one dense peak, e.g. {'bf16': 989.4} (TFLOP/s, without sparsity).",
            field="peak_tflops",
        )
    peaks: dict[str, float] = {}
    for precision, value in peak_tflops.items():
        field = f"peak_tflops.{precision}"
        if precision not in PRECISIONS:
            raise InvalidInput(
                f"unknown precision {precision!r}; use {', '.join(PRECISIONS)}.", field="peak_tflops"
            )
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value <= 0
        ):
            raise InvalidInput(f"{field} must be a positive number of TFLOP/s, got {value!r}.", field=field)
        if value > MAX_PLAUSIBLE_PEAK_TFLOPS:
            raise InvalidInput(
                f"{field} = {value:g} TFLOP/s is more than any device offers; give TFLOP/s "
                f"(e.g. 989.4), not FLOP/s.",
                field=field,
            )
        peaks[precision] = float(value)
    optional: tuple[tuple[float | None, str], ...] = (
        (memory_bytes, "memory_bytes"),
        (hbm_bandwidth_bytes_per_second, "hbm_bandwidth_bytes_per_second"),
        (intra_node_bandwidth_bytes_per_second, "intra_node_bandwidth_bytes_per_second"),
        (tdp_watts, "tdp_watts"),
    )
    for extra, extra_field in optional:
        if extra is not None and (
            isinstance(extra, bool)
            or not isinstance(extra, int | float)
            or not math.isfinite(extra)
            or extra <= 0
        ):
            raise InvalidInput(f"{extra_field} must be a positive number, got {extra!r}.", field=extra_field)
    return Accelerator(
        id="custom",
        display_name=name.strip(),
        vendor="custom",
        bf16_tflops=peaks.get("bf16"),
        fp16_tflops=peaks.get("fp16"),
        fp8_tflops=peaks.get("fp8"),
        tf32_tflops=peaks.get("tf32"),
        fp32_tflops=peaks.get("fp32"),
        fp64_tflops=peaks.get("fp64"),
        memory_bytes=memory_bytes,
        hbm_bandwidth_bytes_per_second=hbm_bandwidth_bytes_per_second,
        intra_node_bandwidth_bytes_per_second=intra_node_bandwidth_bytes_per_second,
        intra_node_link=None,
        tdp_watts=tdp_watts,
        device_granularity="as given by the caller",
        sources=("caller-supplied",),
        is_custom=True,
    )
