"""Predicted vs published MFU on validation/published_runs.json (25 runs) and the extended set
(benchmarks/data/published_runs_extended.json): a regression fails CI.

The script benchmarks/validate_predictions.py states the conventions, the configuration rules and the
fitted constants; this test holds the shared 25 to MAE ≤ 3 MFU points and no row off by more than 8,
and the whole set (issue 16's held-out regimes) to the same targets: MAE ≤ 3 points, worst ≤ 8.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import validate_predictions as vp
from service.domain.regimes import REGIME_MAE_MFU_POINTS


@pytest.fixture(scope="module")
def results() -> list[vp.RowResult]:
    return vp.validate(vp.load_rows(extended=False))


@pytest.fixture(scope="module")
def all_results() -> list[vp.RowResult]:
    return vp.validate(vp.load_rows())


def test_all_25_rows_predicted(results: list[vp.RowResult]) -> None:
    assert len(results) == 25
    assert all(0.2 < r.predicted_mfu < 0.7 for r in results)


def test_every_extended_row_is_predicted_none_refused(all_results: list[vp.RowResult]) -> None:
    # Uneven pipelines (Llama 3 405B, BLOOM, DeepSeek-V3) and ZeRO-3 at 2,560 GPUs included.
    assert len(all_results) == len(vp.load_rows()) >= 60
    regimes = {g for r in all_results for g in r.regimes}
    for regime in ("fsdp-zero3", "zero3-fixed-global-batch", "uneven-pp", "long-context", "moe-ep", "fp8",
                   "hopper", "blackwell", "a100"):  # fmt: skip
        assert regime in regimes


def test_whole_set_holds_its_current_error(all_results: list[vp.RowResult]) -> None:
    mae, worst = vp.summary(all_results)
    assert mae <= vp.MAE_TARGET_POINTS, f"MAE {mae:.2f} points"
    assert worst <= vp.MAX_TARGET_POINTS, f"worst {worst:.2f} points"


def test_zero3_at_fixed_global_batch_falls_as_published(all_results: list[vp.RowResult]) -> None:
    # Narayanan et al. 2021 Table 2: 175B with ZeRO-3, 1,536 sequences per step, 384 -> 1,536 GPUs.
    by_id = {r.id: r for r in all_results}
    mfus = [by_id[f"narayanan2021-t2-zero3-175B-{n}gpu"].predicted_mfu for n in (384, 768, 1536)]
    assert mfus[0] > mfus[1] > mfus[2]
    assert mfus[2] < 0.5 * mfus[0]


def test_mean_absolute_error_at_most_3_points_and_worst_at_most_8(results: list[vp.RowResult]) -> None:
    mae, worst = vp.summary(results)
    assert mae <= vp.MAE_TARGET_POINTS, f"MAE {mae:.2f} points"
    assert worst <= vp.MAX_TARGET_POINTS, f"worst {worst:.2f} points"


def test_reported_numbers_converted_to_one_convention() -> None:
    rows = {r["id"]: r for r in vp.load_rows()}
    # Narayanan 1T: Eq. 3 counts full recompute; the ratio to Megatron's no-recompute count is ≈ 3/4
    assert vp.reported_mfu(rows["narayanan2021-t1-1T"]) == pytest.approx(163 * 0.75 / 312, rel=0.01)
    # Megatron 2024 rows use the same convention: TFLOP/s over the H100 peak
    assert vp.reported_mfu(rows["megatron-h100-2024-16B"]) == pytest.approx(489.1 / 989.4)
    # MPT: the MosaicML form and the Megatron count nearly agree for a tied-embedding GPT
    assert vp.reported_mfu(rows["mpt-7b-h100-sxm-8gpu-seq2048"]) == pytest.approx(0.4644, rel=0.01)


def test_script_prints_the_table(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert vp.main(["--shared-only"]) == 0
    out = capsys.readouterr().out
    assert "mean absolute error" in out and "narayanan2021-t1-1T" in out
    vp.main([])
    out = capsys.readouterr().out
    assert "long-context" in out and "llama3-405b-8192gpu-seq8192" in out and "REFUSED" not in out


def test_korthikanti_2022_iteration_times(all_results: list[vp.RowResult]) -> None:
    # The paper's eight runs (Table 5): iteration-time error = reported / predicted MFU − 1. Calculon
    # reports 3.65% mean, 8.87% worst on them (its megatron validation); this model stands at 3.4% /
    # 6.7% since the 2022 software's asynchronous column-parallel backward and fused gradient
    # accumulation are modelled, and this test keeps it below Calculon's.
    rows = [r for r in all_results if r.id.startswith("korthikanti2022-")]
    assert len(rows) == 8
    errors = [abs(r.reported_mfu / r.predicted_mfu - 1) for r in rows]
    assert sum(errors) / 8 < 0.0365
    assert max(errors) < 0.0887


def test_the_held_out_megatron_bridge_set_is_predicted_and_its_errors_set_the_bands() -> None:
    # Assembled after the constants were fixed (benchmarks/data/megatron_bridge_2511.json): every
    # published layout is accepted (DeepSeek-V3's 61 layers over 4, 8 and 16 stages, EP 64 inside an
    # NVL72 domain), and the uncertainty a prediction states for Blackwell and MoE-EP is no smaller
    # than what this set measured.
    rows = vp.load_rows(vp.HELD_OUT_RUNS)
    refused: list[tuple[str, str]] = []
    results = vp.validate(rows, refused)
    assert not refused and len(results) == len(rows) == 14
    table = vp.per_regime(results)
    for regime in ("blackwell", "moe-ep"):
        assert REGIME_MAE_MFU_POINTS[regime] >= table[regime][1] * 0.9


def test_the_newer_megatron_bridge_release_is_predicted_within_the_targets() -> None:
    # Held out too (benchmarks/data/megatron_bridge_2606.json, assembled after every constant was
    # fixed): nine published 26.06 runs on GB200, B300 and H100, each layout pinned as published. Llama
    # 3.1 405B's pp 16 with v 8 (7 layers on the first and last stage) is accepted, and the errors stay
    # within the targets without any row in the fit.
    rows = vp.load_rows(vp.HELD_OUT_RUNS_2606)
    refused: list[tuple[str, str]] = []
    results = vp.validate(rows, refused)
    assert not refused and len(results) == len(rows) == 9
    errors = [abs(r.error_points) for r in results]
    assert sum(errors) / len(errors) <= vp.MAE_TARGET_POINTS
    assert max(errors) <= vp.MAX_TARGET_POINTS
