"""Predicted vs published MFU on validation/published_runs.json (25 runs): a regression fails CI.

The script benchmarks/validate_predictions.py states the conventions, the configuration rules and the
fitted constants; this test holds it to MAE ≤ 3 MFU points and no row off by more than 8.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import validate_predictions as vp


@pytest.fixture(scope="module")
def results() -> list[vp.RowResult]:
    return vp.validate(vp.load_rows())


def test_all_25_rows_predicted(results: list[vp.RowResult]) -> None:
    assert len(results) == 25
    assert all(0.2 < r.predicted_mfu < 0.7 for r in results)


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
    assert vp.main([]) == 0
    out = capsys.readouterr().out
    assert "mean absolute error" in out and "narayanan2021-t1-1T" in out
