"""The typical-MFU band is per precision: an FP8 run is judged against the FP8 peak's own band."""

from __future__ import annotations

from service.domain.mfu import TYPICAL_MFU_BANDS, mfu_band, typical_mfu_range


def test_an_fp8_run_at_18_percent_of_the_fp8_peak_is_typical() -> None:
    # The case: 17.8% of the FP8 peak is ~36% of the BF16 peak, a healthy run; the BF16-era
    # 30-60% band called it a problem.
    assert mfu_band(0.178, "fp8") == "typical"
    assert mfu_band(0.178, "bf16") == "below_typical"


def test_the_fp8_band_is_the_bf16_band_moved_by_the_published_speedups() -> None:
    # 30-60% of the BF16 peak at 1.2-1.5x the BF16 speed, against a peak twice BF16's: 18-45%.
    low, high = typical_mfu_range("fp8")
    bf16_low, bf16_high = typical_mfu_range("bf16")
    assert low <= bf16_low * 1.2 / 2 and high >= bf16_high * 1.5 / 2
    assert set(TYPICAL_MFU_BANDS) == {"fp8"}
    assert mfu_band(0.50, "fp8") == "above_typical"
