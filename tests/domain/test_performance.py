"""Step-time model: formulas with hand-computed numbers, efficiency curves, calibration, and the
properties the seed names (MFU falls as the cluster grows, micro-batch amortises fixed costs until
memory runs out, BF16 beats FP32, norms/activations are memory-bound, the breakdown adds up)."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.domain.collectives import all_to_all_seconds, ring_gather_seconds, size_efficiency
from service.domain.errors import InvalidInput
from service.domain.hardware import custom_accelerator, get_accelerator
from service.domain.hardware_behaviour import (
    CALCULON_MATMUL_BY_GFLOPS,
    CALCULON_MEMORY_BY_MB,
    FAMILIES,
    Calibration,
    EfficiencyCurve,
    behaviour_for,
    family_of,
)
from service.domain.memory import ParallelLayout
from service.domain.models import build_model_spec, get_preset
from service.domain.performance import (
    Cluster,
    PredictionInputs,
    StepPrediction,
    _ring_allreduce,
    _ring_gather,
    fit_calibration,
    predict_step,
)

A100 = get_accelerator("a100-sxm4-80gb")
H100 = get_accelerator("h100-sxm")
SMALL = build_model_spec(
    name="gpt-1.3b", n_layers=24, d_model=2048, n_heads=16, vocab_size=51200, ffn_kind="plain",
    position_embedding="learned", max_position_embeddings=2048, norm_kind="layernorm", norm_has_bias=True,
)  # fmt: skip
LLAMA8 = get_preset("llama3-8b").spec


# --------------------------------------------------------------------------------------------------
# Formulas


def test_ring_allreduce_and_gather_hand_numbers() -> None:
    # 2·(n−1)/n·S/B: 8 ranks, 1 GB at 100 GB/s → 17.5 ms (a 1 GB message runs at 1e9/(1e9 + 1 MB) of
    # the large-message bus bandwidth on NVLink); + 2·(n−1) steps of 1 µs
    eff = 1e9 / (1e9 + 1e6)
    assert _ring_allreduce(8, 1e9, 100e9, 0.0) == pytest.approx(0.0175 / eff)
    assert _ring_allreduce(8, 1e9, 100e9, 1e-6) == pytest.approx(0.0175 / eff + 14e-6)
    assert _ring_gather(4, 1e9, 100e9, 0.0) == pytest.approx(0.0075 / eff)
    assert _ring_allreduce(1, 1e9, 100e9, 1e-6) == 0.0


def test_small_messages_reach_a_smaller_share_of_the_bus_bandwidth() -> None:
    # 1 MB on NVLink runs at half the large-message rate (NCCL-tests shape); 8 MB across nodes too.
    assert size_efficiency(1e6, inter_node=False) == pytest.approx(0.5)
    assert size_efficiency(8e6, inter_node=True) == pytest.approx(0.5)
    assert size_efficiency(1e9, inter_node=True) > 0.99
    per_byte_small = ring_gather_seconds(8, 1e6, 100e9, 0.0) / 1e6
    per_byte_large = ring_gather_seconds(8, 1e9, 100e9, 0.0) / 1e9
    assert per_byte_small == pytest.approx(2 * per_byte_large, rel=0.01)


def test_all_to_all_across_nodes_is_bound_by_the_nics() -> None:
    # 64 ranks, 8 per node: 56/64 of 1 GB crosses the NICs at 50 GB/s, 7/64 rides NVLink at 450.
    t = all_to_all_seconds(64, 1e9, 8, 450e9, 50e9, 0.0, 0.0)
    assert t == pytest.approx(56 / 64 * 1e9 / (50e9 * size_efficiency(56 / 64 * 1e9, True)))
    # Within one node, NVLink decides.
    assert all_to_all_seconds(8, 1e9, 8, 450e9, 50e9, 0.0, 0.0) < t / 5


def test_efficiency_curve_interpolates_in_log_size() -> None:
    curve = EfficiencyCurve(((1.0, 0.5), (100.0, 0.9)), "test")
    assert curve.at(1.0) == 0.5 and curve.at(100.0) == 0.9
    assert curve.at(10.0) == pytest.approx(0.7)  # halfway in log10
    assert curve.at(0.01) == 0.5 and curve.at(1e6) == 0.9  # clamped
    with pytest.raises(InvalidInput):
        EfficiencyCurve(((10.0, 0.5), (1.0, 0.9)), "descending")


def test_calculon_a100_points() -> None:
    assert CALCULON_MATMUL_BY_GFLOPS.at(128) == 0.95
    assert CALCULON_MATMUL_BY_GFLOPS.at(16) == 0.9
    assert CALCULON_MATMUL_BY_GFLOPS.at(1) == 0.6
    assert CALCULON_MEMORY_BY_MB.at(100) == 0.9


def test_matmul_efficiency_falls_for_small_and_skinny_gemms() -> None:
    b = behaviour_for(A100)
    big = b.matmul_efficiency(8192, 8192, 8192)
    assert big == pytest.approx(b.matmul_scale * 0.95)
    assert b.matmul_efficiency(8192, 8192, 64) < 0.6 * big  # skinny
    assert b.matmul_efficiency(128, 128, 128) < 0.3 * big  # tiny


def test_families_from_the_catalog() -> None:
    assert family_of(A100) == "ampere"
    assert family_of(get_accelerator("h200-sxm")) == "hopper"
    assert family_of(get_accelerator("gb200")) == "blackwell"
    assert family_of(get_accelerator("mi300x")) == "cdna"
    assert family_of(get_accelerator("tpu-v5p")) == "tpu"
    assert family_of(get_accelerator("a10g")) == "ampere"
    assert set(FAMILIES) >= {"ampere", "hopper", "blackwell", "cdna", "tpu"}
    for fam in FAMILIES.values():
        assert fam.sources and 0 < fam.intra_node.efficiency <= 1 and 0 < fam.inter_node.efficiency <= 1


def test_calibration_validation() -> None:
    with pytest.raises(InvalidInput) as info:
        Calibration(matmul_efficiency_scale=0.0)
    assert info.value.field == "matmul_efficiency_scale"
    with pytest.raises(InvalidInput):
        Calibration(overlap_fraction=1.5)


# --------------------------------------------------------------------------------------------------
# One prediction, inspected


def _predict(layout: ParallelLayout, devices: int, batch: int, **kw: Any) -> StepPrediction:
    acc = kw.pop("accelerator", A100)
    cluster = Cluster(acc, devices, 8, 25e9)
    return predict_step(kw.pop("spec", SMALL), kw.pop("seq", 2048), cluster, layout, batch, **kw)


def test_breakdown_adds_up_and_mfu_matches_ideal_view() -> None:
    layout = ParallelLayout(
        tp=2, pp=2, dp=4, micro_batch_sequences=2, sequence_parallel=True, recompute="selective"
    )
    p = _predict(layout, 16, 64)
    assert p.breakdown.total_seconds == pytest.approx(p.step_time_seconds, rel=1e-9)
    assert p.micro_batches_per_step == 8
    assert p.bubble_fraction == pytest.approx(1 / 8)
    assert p.tokens_per_second == pytest.approx(64 * 2048 / p.step_time_seconds)
    assert 0 < p.mfu < p.hfu < 1
    assert p.achieved_tflops_per_device == pytest.approx(p.mfu * 312)
    assert p.memory.fits is True


def test_interleaving_shrinks_the_bubble() -> None:
    base = dict(tp=1, pp=4, dp=2, micro_batch_sequences=1)
    p1 = _predict(ParallelLayout(**base), 8, 16)  # type: ignore[arg-type]
    p3 = _predict(ParallelLayout(**base, virtual_stages=3), 8, 16)  # type: ignore[arg-type]
    assert p1.bubble_fraction == pytest.approx(3 / 8) and p3.bubble_fraction == pytest.approx(1 / 8)
    assert p3.breakdown.pipeline_bubble_seconds < p1.breakdown.pipeline_bubble_seconds
    assert p3.pipeline_p2p_seconds == pytest.approx(3 * p1.pipeline_p2p_seconds)


def test_recompute_costs_time_and_raises_hfu() -> None:
    none = _predict(ParallelLayout(dp=8, micro_batch_sequences=2), 8, 64)
    sel = _predict(ParallelLayout(dp=8, micro_batch_sequences=2, recompute="selective"), 8, 64)
    full = _predict(ParallelLayout(dp=8, micro_batch_sequences=2, recompute="full"), 8, 64)
    assert none.breakdown.recompute_seconds == 0
    assert none.step_time_seconds < sel.step_time_seconds < full.step_time_seconds
    assert none.hfu == pytest.approx(none.mfu)
    assert full.hfu > full.mfu
    # full recompute re-runs about one forward: roughly a third more layer compute
    assert 0.2 < full.breakdown.recompute_seconds / full.step_time_seconds < 0.3


def test_tensor_parallel_comm_follows_the_ring_formula() -> None:
    layout = ParallelLayout(tp=8, dp=1, micro_batch_sequences=1)
    p = _predict(layout, 8, 8)
    fam = behaviour_for(A100)
    bw = 300e9 * fam.intra_node.efficiency
    one = _ring_allreduce(8, 1 * 2048 * 2048 * 2, bw, fam.intra_node.latency_seconds)
    # 4 collectives per layer (2 forward, 2 backward), 24 layers, 8 micro-batches, not overlapped
    assert p.tensor_parallel_comm_seconds == pytest.approx(8 * 24 * 4 * one)
    assert p.breakdown.exposed_tensor_parallel_comm_seconds == pytest.approx(p.tensor_parallel_comm_seconds)


def test_dp_allreduce_volume_and_no_overlap() -> None:
    layout = ParallelLayout(dp=16, micro_batch_sequences=4, overlap_dp_comm=False)
    p = _predict(layout, 16, 64)
    # the group spans two nodes: 8 ranks per node share 8 NICs of 25 GB/s at InfiniBand efficiency,
    # capped by NVLink; ring all-reduce of 2-byte gradients
    fam = behaviour_for(A100)
    bw = min(8 * 25e9 * fam.inter_node.efficiency, 300e9 * fam.intra_node.efficiency)
    params = p.memory.parameters_on_device
    expected = _ring_allreduce(16, params * 2, bw, fam.inter_node.latency_seconds)
    assert p.data_parallel_comm_seconds == pytest.approx(expected)
    assert p.breakdown.exposed_data_parallel_comm_seconds == pytest.approx(expected)


def test_input_errors() -> None:
    with pytest.raises(InvalidInput) as info:
        _predict(ParallelLayout(dp=4), 8, 64)
    assert info.value.field == "dp"
    with pytest.raises(InvalidInput) as info:
        _predict(ParallelLayout(dp=8, micro_batch_sequences=3), 8, 64)
    assert info.value.field == "global_batch_sequences"
    with pytest.raises(InvalidInput) as info:
        _predict(ParallelLayout(tp=8, dp=1), 8, 8, spec=build_model_spec(
            name="x", n_layers=2, d_model=1200, n_heads=12, vocab_size=100))  # fmt: skip
    assert info.value.field == "tp"
    with pytest.raises(InvalidInput) as info:
        _predict(ParallelLayout(pp=2, dp=4, virtual_stages=2), 8, 4)
    assert info.value.field == "virtual_stages"


# --------------------------------------------------------------------------------------------------
# The seed's effects


def test_mfu_falls_as_the_cluster_grows() -> None:
    """Fixed per-device work (4 sequences per device), more data-parallel ranks across nodes."""
    mfus = []
    for devices in (8, 16, 64, 256, 1024):
        layout = ParallelLayout(dp=devices, micro_batch_sequences=4, overlap_dp_comm=False)
        mfus.append(_predict(layout, devices, 4 * devices).mfu)
    assert all(later <= earlier for earlier, later in itertools.pairwise(mfus))
    assert mfus[-1] < mfus[0] - 0.01


def test_micro_batch_amortises_fixed_costs_until_memory_runs_out() -> None:
    tps = {}
    fits = {}
    for b in (1, 2, 4, 8, 64):
        p = _predict(ParallelLayout(dp=8, micro_batch_sequences=b, zero_stage=1), 8, 512)
        tps[b], fits[b] = p.tokens_per_second, p.memory.fits
    assert tps[1] < tps[2] < tps[4] < tps[8]
    assert fits[8] and not fits[64]
    assert p.memory.max_micro_batch_sequences is not None and 8 <= p.memory.max_micro_batch_sequences < 64
    assert p.breakdown.kernel_overhead_seconds > 0


def test_bf16_beats_fp32() -> None:
    layout = ParallelLayout(dp=8, micro_batch_sequences=2)
    bf16 = _predict(layout, 8, 64, precision="bf16")
    fp32 = _predict(layout, 8, 64, precision="fp32")
    assert bf16.tokens_per_second > 5 * fp32.tokens_per_second
    assert bf16.memory.total_bytes < fp32.memory.total_bytes


def test_norms_and_activations_are_memory_bound() -> None:
    """Doubling HBM bandwidth halves the memory-bound time (up to the size-dependent efficiency) and
    leaves the matmul time alone; doubling the peak does the opposite."""
    base = custom_accelerator(name="x", peak_tflops={"bf16": 312}, memory_bytes=80 * 2**30,
                              hbm_bandwidth_bytes_per_second=2e12, intra_node_bandwidth_bytes_per_second=300e9)  # fmt: skip
    fast_hbm = dataclasses.replace(base, hbm_bandwidth_bytes_per_second=4e12)
    layout = ParallelLayout(dp=8, micro_batch_sequences=2)
    p = _predict(layout, 8, 64, accelerator=base)
    q = _predict(layout, 8, 64, accelerator=fast_hbm)
    assert p.breakdown.memory_bound_seconds > 0
    assert q.breakdown.memory_bound_seconds == pytest.approx(p.breakdown.memory_bound_seconds / 2)
    assert q.breakdown.matmul_inefficiency_seconds == pytest.approx(p.breakdown.matmul_inefficiency_seconds)


def test_step_time_falls_with_more_devices_until_communication_dominates() -> None:
    """Strong scaling at a fixed global batch of 64 sequences: faster with more devices, but the share
    of exposed data-parallel communication grows."""
    steps, shares = [], []
    for devices in (1, 2, 4, 8, 16, 32, 64):
        layout = ParallelLayout(dp=devices, micro_batch_sequences=1, overlap_dp_comm=False)
        p = _predict(layout, devices, 64)
        steps.append(p.step_time_seconds)
        shares.append(p.breakdown.exposed_data_parallel_comm_seconds / p.step_time_seconds)
    assert all(later < earlier for earlier, later in itertools.pairwise(steps))
    assert shares[-1] > shares[1] and shares[-1] > 0.2


# --------------------------------------------------------------------------------------------------
# Properties

layouts = st.builds(
    lambda tp, pp, b, rec, zero, flash, sp, v: (tp, pp, b, rec, zero, flash, sp, v),
    st.sampled_from([1, 2, 4]),
    st.sampled_from([1, 2]),
    st.sampled_from([1, 2, 4]),
    st.sampled_from(["none", "selective", "full"]),
    st.integers(0, 3),
    st.booleans(),
    st.booleans(),
    st.sampled_from([1, 2, 3]),
)


@settings(max_examples=80, deadline=None)
@given(cfg=layouts)
def test_breakdown_sums_and_mfu_le_hfu_le_1(cfg: tuple[Any, ...]) -> None:
    tp, pp, b, rec, zero, flash, sp, v = cfg
    devices = 16
    dp = devices // (tp * pp)
    v = v if pp > 1 else 1
    layout = ParallelLayout(tp=tp, pp=pp, dp=dp, micro_batch_sequences=b, recompute=rec, zero_stage=zero,
                            flash_attention=flash, sequence_parallel=sp and tp > 1, virtual_stages=v)  # fmt: skip
    p = _predict(layout, devices, dp * b * 4, convention="megatron_causal")
    assert p.breakdown.total_seconds == pytest.approx(p.step_time_seconds, rel=1e-9)
    assert all(value >= 0 for value in p.breakdown.as_dict().values())
    assert 0 < p.mfu <= p.hfu <= 1
    assert p.breakdown.ideal_matmul_seconds / p.step_time_seconds == pytest.approx(p.mfu, rel=1e-6)


@settings(max_examples=40, deadline=None)
@given(nodes=st.integers(1, 16), b=st.sampled_from([1, 2, 4]))
def test_more_nodes_never_raise_mfu_at_fixed_per_device_work(nodes: int, b: int) -> None:
    def mfu(n: int) -> float:
        layout = ParallelLayout(
            tp=2, dp=4 * n, micro_batch_sequences=b, sequence_parallel=True, overlap_dp_comm=False
        )
        return _predict(layout, 8 * n, 4 * n * b * 2).mfu

    assert mfu(nodes + 1) <= mfu(nodes) + 1e-12


# --------------------------------------------------------------------------------------------------
# Calibration fit


def test_fit_calibration_recovers_a_known_scale() -> None:
    truth = Calibration(matmul_efficiency_scale=0.8)
    observations = []
    for dp, b in ((8, 1), (8, 4), (16, 2)):
        inputs = PredictionInputs(SMALL, 2048, Cluster(A100, dp, 8, 25e9), ParallelLayout(dp=dp, micro_batch_sequences=b),
                                  dp * b * 2)  # fmt: skip
        observations.append((inputs, inputs.predict(truth).mfu))
    fitted = fit_calibration(observations)
    assert fitted.matmul_efficiency_scale == pytest.approx(0.8, abs=0.01)
    assert fitted.accelerator_id == A100.id and fitted.n_observations == 3
    assert fitted.rms_error is not None and fitted.rms_error < 1e-3
    with pytest.raises(InvalidInput):
        fit_calibration([])
    with pytest.raises(InvalidInput):
        fit_calibration([(observations[0][0], 1.5)])


def test_calibration_changes_the_prediction() -> None:
    layout = ParallelLayout(dp=8, micro_batch_sequences=2)
    slow = _predict(layout, 8, 64, calibration=Calibration(matmul_efficiency_scale=0.7))
    fast = _predict(layout, 8, 64, calibration=Calibration(matmul_efficiency_scale=1.2))
    assert fast.mfu > slow.mfu
