"""Accelerator catalog: dense peaks from reference/hardware.md and the device-name traps."""

from __future__ import annotations

import pytest

from service.domain.errors import InvalidInput, NotFound, UnsupportedPrecision
from service.domain.hardware import (
    ACCELERATORS,
    custom_accelerator,
    get_accelerator,
    lookup_accelerator,
    peak_flops,
    resolve_device_name,
)
from service.domain.hardware_behaviour import behaviour_for


@pytest.mark.parametrize(
    ("device_name", "expected"),
    [
        ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
        ("NVIDIA A100-SXM4-40GB", "a100-sxm4-40gb"),
        ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H100 NVL", "h100-nvl"),
        ("NVIDIA H200", "h200-sxm"),
        ("NVIDIA H200 NVL", "h200-nvl"),
        ("NVIDIA GH200 480GB", "gh200"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA GB200", "gb200"),
        ("NVIDIA B300 SXM6 AC", "b300"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA A10G", "a10g"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("Tesla V100-SXM2-32GB", "v100-sxm2-32gb"),
        ("AMD Instinct MI250X/MI250", "mi250x-gcd"),
        ("AMD Instinct MI300X", "mi300x"),
        ("AMD Instinct MI325X", "mi325x"),
        ("AMD Instinct MI355X", "mi355x"),
        ("TPU v4", "tpu-v4"),
        ("TPU v5 lite", "tpu-v5e"),
        ("TPU v5", "tpu-v5p"),
        ("TPU v6 lite", "tpu-v6e"),
        ("TPU7x", "tpu-v7"),
    ],
)
def test_framework_device_strings_resolve_to_the_right_part(device_name: str, expected: str) -> None:
    assert resolve_device_name(device_name) == expected


def test_l40s_is_not_an_l4() -> None:
    assert resolve_device_name("NVIDIA L40S") == "l40s"
    assert get_accelerator("l40s").bf16_tflops == 362


def test_gb200_is_not_a_b200() -> None:
    assert resolve_device_name("NVIDIA GB200") == "gb200"


def test_gb300_is_its_own_part_with_the_rack_figures_per_gpu() -> None:
    # GB300 NVL72 spec table: 360 PF BF16 and 720 PF FP8 with sparsity over 72 GPUs -> dense per GPU
    # 360e3 / 72 / 2 = 2,500 and 720e3 / 72 / 2 = 5,000 TFLOP/s; 288 GB of HBM3e at 8 TB/s.
    gb300 = get_accelerator(resolve_device_name("NVIDIA GB300"))
    assert gb300.id == "gb300"
    assert gb300.bf16_tflops == 360e3 / 72 / 2 and gb300.fp8_tflops == 720e3 / 72 / 2
    assert gb300.hbm_bandwidth_bytes_per_second == 8e12
    assert behaviour_for(gb300).family == "blackwell"


def test_h200_nvl_is_not_an_sxm_part() -> None:
    part = lookup_accelerator("NVIDIA H200 NVL")
    assert part.id == "h200-nvl"
    assert part.bf16_tflops == 835.5


def test_gh200_is_not_an_h200() -> None:
    assert resolve_device_name("NVIDIA GH200 480GB") == "gh200"


def test_h20_does_not_match_h200() -> None:
    assert resolve_device_name("NVIDIA H20") == "h20"
    assert resolve_device_name("NVIDIA H200") == "h200-sxm"


def test_tpu_v5_lite_is_v5e_and_plain_v5_is_v5p() -> None:
    assert resolve_device_name("TPU v5 lite") == "tpu-v5e"
    assert resolve_device_name("TPU v5") == "tpu-v5p"


def test_names_are_matched_ignoring_case_and_spacing() -> None:
    assert resolve_device_name("  nvidia   h100 80gb hbm3 ") == "h100-sxm"
    assert resolve_device_name("H100-SXM") == "h100-sxm"


def test_every_catalog_id_resolves_to_itself() -> None:
    for part_id in ACCELERATORS:
        assert resolve_device_name(part_id) == part_id


def test_unknown_device_is_a_clear_error_listing_ids_and_offering_a_custom_peak() -> None:
    with pytest.raises(NotFound) as err:
        resolve_device_name("NVIDIA H900")
    assert "h100-sxm" in err.value.message
    assert "custom" in err.value.message
    assert err.value.close_matches


def test_unknown_id_has_close_matches() -> None:
    with pytest.raises(NotFound) as err:
        get_accelerator("h100-sx")
    assert "h100-sxm" in err.value.close_matches


@pytest.mark.parametrize(
    ("part_id", "precision", "tflops"),
    [
        ("a100-sxm4-80gb", "bf16", 312),
        ("h100-sxm", "bf16", 989.4),
        ("h100-sxm", "fp8", 1978.9),
        ("b200", "bf16", 2250),  # dense, not torchtitan's old sparse 4500
        ("h200-sxm", "bf16", 989.4),  # not Lightning's sparse 2000
        ("rtx-4090", "bf16", 165.2),  # FP32-accumulate tensor rate
        ("mi250x-gcd", "bf16", 191.5),  # per GCD, half the package
        ("mi300x", "bf16", 1307.4),
        ("tpu-v4", "bf16", 275),
        ("tpu-v5e", "bf16", 197),
        ("tpu-v5p", "bf16", 459),
        ("tpu-v6e", "bf16", 918),
        ("tpu-v7", "bf16", 1153.5),  # per TensorCore device
        ("gaudi3", "bf16", 1835),
        ("trainium2", "fp8", 1299 / 4),  # the chip's 1299 over its 4 logical cores (LNC=2)
        ("v100-sxm2-32gb", "fp16", 125),
    ],
)
def test_dense_peaks_match_the_reference(part_id: str, precision: str, tflops: float) -> None:
    assert peak_flops(get_accelerator(part_id), precision) == pytest.approx(tflops * 1e12)  # type: ignore[arg-type]


def test_v100_has_no_bf16_peak() -> None:
    with pytest.raises(UnsupportedPrecision) as err:
        peak_flops(get_accelerator("v100-sxm2-32gb"), "bf16")
    assert err.value.field == "precision"
    assert "fp16" in err.value.message


def test_unknown_precision_is_invalid() -> None:
    with pytest.raises(InvalidInput):
        peak_flops(get_accelerator("h100-sxm"), "int4")  # type: ignore[arg-type]


def test_memory_and_bandwidth_are_in_bytes() -> None:
    h100 = get_accelerator("h100-sxm")
    assert h100.memory_bytes == 80 * 2**30
    assert h100.hbm_bandwidth_bytes_per_second == pytest.approx(3.35e12)
    assert h100.intra_node_bandwidth_bytes_per_second == pytest.approx(450e9)
    assert h100.tdp_watts == 700


def test_uncertain_values_are_flagged() -> None:
    assert "tdp_watts" in get_accelerator("gh200").uncertain_fields
    assert "tf32_tflops" in get_accelerator("mi300x").uncertain_fields
    assert get_accelerator("gh200").tdp_watts is None


def test_every_part_cites_a_source_and_has_a_bf16_or_fp16_peak() -> None:
    for part in ACCELERATORS.values():
        assert part.sources
        assert part.bf16_tflops or part.fp16_tflops


def test_a_custom_accelerator_carries_its_own_peak() -> None:
    part = custom_accelerator(name="my chip", peak_tflops={"bf16": 500.0}, memory_bytes=64 * 2**30)
    assert peak_flops(part, "bf16") == 500e12
    assert part.is_custom
    with pytest.raises(UnsupportedPrecision):
        peak_flops(part, "fp8")


def test_a_custom_peak_given_in_flops_is_rejected() -> None:
    with pytest.raises(InvalidInput) as err:
        custom_accelerator(name="x", peak_tflops={"bf16": 989e12})
    assert err.value.field == "peak_tflops.bf16"
    assert "TFLOP/s" in err.value.message


def test_a_custom_accelerator_needs_a_peak() -> None:
    with pytest.raises(InvalidInput):
        custom_accelerator(name="x", peak_tflops={})


# Datasheet dense peaks (TFLOP/s) and memory (GB) of the parts people rent, and every string the
# frameworks report for them (torch.cuda.get_device_name(), rocm-smi --showproductname).
RENTED_PARTS = [
    ("h800-sxm", "bf16", 989.4, 80, ["NVIDIA H800", "NVIDIA H800 80GB HBM3"]),
    ("h20", "bf16", 148, 96, ["NVIDIA H20"]),
    ("a800-sxm4-80gb", "bf16", 312, 80, ["NVIDIA A800-SXM4-80GB"]),
    ("a100-pcie-40gb", "bf16", 312, 40, ["NVIDIA A100-PCIE-40GB"]),
    ("v100-sxm2-16gb", "fp16", 125, 16, ["Tesla V100-SXM2-16GB"]),
    ("v100-pcie-16gb", "fp16", 112, 16, ["Tesla V100-PCIE-16GB"]),
    ("t4", "fp16", 65, 16, ["Tesla T4"]),
    ("a40", "bf16", 149.7, 48, ["NVIDIA A40"]),
    ("l40", "bf16", 181.05, 48, ["NVIDIA L40"]),
    ("rtx-a6000", "bf16", 154.8, 48, ["NVIDIA RTX A6000"]),
    ("rtx-6000-ada", "bf16", 364.2, 48, ["NVIDIA RTX 6000 Ada Generation"]),
    ("mi210", "bf16", 181, 64, ["AMD Instinct MI210"]),
    ("rtx-5090", "bf16", 209.5, 32, ["NVIDIA GeForce RTX 5090"]),
    ("h100-hbm2e-96gb", "bf16", 989.4, 96, ["NVIDIA H100 96GB HBM2e"]),
]


@pytest.mark.parametrize(("part_id", "precision", "tflops", "memory_gb", "names"), RENTED_PARTS)
def test_a_rented_part_answers_by_id_and_by_every_reported_name(
    part_id: str, precision: str, tflops: float, memory_gb: int, names: list[str]
) -> None:
    part = get_accelerator(part_id)
    assert part.peak_tflops(precision) == pytest.approx(tflops)  # type: ignore[arg-type]
    assert part.memory_bytes == memory_gb * 2**30
    assert part.sources and part.device_granularity
    for name in names:
        assert resolve_device_name(name) == part_id, name


def test_a_bare_nvidia_h100_answers_with_the_candidates() -> None:
    with pytest.raises(NotFound) as err:
        resolve_device_name("NVIDIA H100")
    assert {"h100-sxm", "h100-pcie", "h100-nvl", "h100-hbm2e-96gb"} <= set(err.value.close_matches)


def test_trainium_entries_are_both_per_framework_rank() -> None:
    # Trainium1: two NeuronCore-v2 per chip, one rank each; Trainium2: LNC=2 gives 4 logical cores per
    # chip, 64 ranks per trn2.48xlarge (16 chips), about 24 GiB each.
    trn2 = get_accelerator("trainium2")
    assert trn2.peak_tflops("bf16") * 4 == pytest.approx(667)
    assert trn2.memory_bytes * 4 == 96 * 2**30
    for part in (trn2, get_accelerator("trainium1")):
        assert "NeuronCore" in part.device_granularity
