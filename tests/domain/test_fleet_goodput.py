"""Fleet goodput histograms: each job once, in its latest run's group; effective MFU = MFU × goodput."""

from __future__ import annotations

import pytest

from service.domain import fleet

H100 = ("h100-sxm", "1b_to_10b")
A100 = ("a100-sxm4-80gb", "1b_to_10b")


def test_a_job_of_several_runs_counts_once_in_its_latest_runs_group() -> None:
    samples = [
        # job A: two attempts (pk 1 on A100, pk 5 on H100) at goodput 0.75, MFUs 0.30 and 0.50
        fleet.GoodputSample(job=("t", "c", "A"), pk=1, group=A100, goodput=0.75, median_mfu=0.30),
        fleet.GoodputSample(job=("t", "c", "A"), pk=5, group=H100, goodput=0.75, median_mfu=0.50),
        # job B: one run, never measured
        fleet.GoodputSample(job=("t", 2), pk=2, group=H100, goodput=0.5, median_mfu=None),
    ]
    groups = fleet.goodput_histograms(samples)
    assert set(groups) == {H100}
    h100 = groups[H100]
    assert h100.job_count == 2
    assert h100.goodput == {750: 1, 500: 1}  # bins of 0.001
    # job A: mean MFU (0.30 + 0.50) / 2 = 0.40, × 0.75 = 0.30 (bin 299 or 300: 0.4 × 0.75 in floats)
    assert sum(h100.effective_mfu.values()) == 1
    (effective_bin,) = h100.effective_mfu
    assert effective_bin * fleet.MFU_BIN_WIDTH == pytest.approx(0.30, abs=fleet.MFU_BIN_WIDTH)


def test_goodput_percentiles_read_as_mfu_percentiles_do() -> None:
    samples = [
        fleet.GoodputSample(job=("t", i), pk=i, group=H100, goodput=g, median_mfu=0.4)
        for i, g in enumerate([0.5, 0.6, 0.7, 0.8, 0.9])
    ]
    group = fleet.goodput_histograms(samples)[H100]
    # the median of 0.5…0.9 is 0.7, read within one bin
    assert fleet.percentile_from_histogram(group.goodput, 0.5) == pytest.approx(0.7, abs=0.001)
    assert fleet.percentile_from_histogram(group.effective_mfu, 0.5) == pytest.approx(0.28, abs=0.001)
    assert fleet.goodput_histograms([]) == {}
