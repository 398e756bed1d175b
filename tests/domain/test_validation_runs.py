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


def test_the_held_out_megatron_bridge_sets_are_predicted_and_their_errors_set_the_bands(
    all_results: list[vp.RowResult],
) -> None:
    # Two sets assembled after the constants were fixed: NVIDIA Megatron-Bridge's 25.11 and 26.06
    # performance summaries (benchmarks/data/megatron_bridge_2511.json, _2606.json), on GB300, GB200,
    # B200, B300 and H100. Every published layout is accepted (DeepSeek-V3's 61 layers over 2 to 16
    # stages, EP 64 inside an NVL72 domain, Llama 3.1 405B's 126 layers on pp 16 with v 8), and the
    # uncertainty a prediction states in each regime is no smaller than what the held-out rows measure.
    refused: list[tuple[str, str]] = []
    held_out = []
    for path, count in ((vp.HELD_OUT_RUNS, 14), (vp.HELD_OUT_RUNS_2606, 15)):
        rows = vp.load_rows(path)
        results = vp.validate(rows, refused)
        assert len(results) == len(rows) == count
        held_out += results
    assert not refused
    # Every held-out row falls in a regime whose band the held-out sets set, so its stated band is no
    # smaller than the held-out error of that regime.
    widened = ("fp8", "blackwell", "moe-ep")
    assert all(set(r.regimes) & set(widened) for r in held_out)
    table = vp.per_regime(held_out)
    for regime in widened:
        assert REGIME_MAE_MFU_POINTS[regime] >= round(table[regime][1], 2), regime
    in_sample = vp.per_regime(all_results)
    for regime in ("all", "hopper", "megatron-tp-pp", "uneven-pp"):
        assert REGIME_MAE_MFU_POINTS[regime] == pytest.approx(in_sample[regime][1], abs=0.01), regime
