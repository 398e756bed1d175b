"""Parallel-layout planner: feasibility rules, ranking, constraints and the infeasibility report."""

from __future__ import annotations

import pytest

from service.domain.errors import InvalidInput
from service.domain.hardware import get_accelerator
from service.domain.models import build_model_spec, get_preset
from service.domain.parallel_layout import ParallelLayout
from service.domain.performance import Cluster, predict_step
from service.domain.planner import PlannerConstraints, plan_parallelism

H100 = get_accelerator("h100-sxm")
A100 = get_accelerator("a100-sxm4-80gb")
LLAMA8 = get_preset("llama3-8b").spec
LLAMA70 = get_preset("llama3-70b").spec


def test_every_candidate_is_feasible_and_ranked() -> None:
    cluster = Cluster(H100, 64, 8, 50e9)
    plan = plan_parallelism(LLAMA70, 4096, cluster, 256)
    assert plan.candidates and plan.best is plan.candidates[0]
    rates = [c.tokens_per_second for c in plan.candidates]
    assert rates == sorted(rates, reverse=True)
    for cand in plan.candidates:
        lay = cand.layout
        assert lay.tp * lay.pp * lay.dp * lay.cp == 64
        assert LLAMA70.n_heads % lay.tp == 0 and lay.tp <= 8
        assert LLAMA70.n_layers % lay.pp == 0
        assert (256 // lay.dp) % lay.micro_batch_sequences == 0
        assert cand.prediction.memory.fits is True
        if lay.virtual_stages > 1:
            assert (LLAMA70.n_layers // lay.pp) % lay.virtual_stages == 0
            assert (256 // (lay.dp * lay.micro_batch_sequences)) % lay.pp == 0
    assert plan.feasible_count >= len(plan.candidates)
    assert plan.feasible_count + sum(g.count for g in plan.infeasible) == plan.evaluated_count


def test_ranking_matches_predict_step() -> None:
    cluster = Cluster(H100, 16, 8, 50e9)
    plan = plan_parallelism(LLAMA8, 4096, cluster, 64, constraints=PlannerConstraints(max_results=3))
    best = plan.best
    assert best is not None and len(plan.candidates) == 3
    again = predict_step(LLAMA8, 4096, cluster, best.layout, 64)
    assert again.step_time_seconds == pytest.approx(best.prediction.step_time_seconds)
    assert best.mfu == pytest.approx(again.mfu)


def test_infeasible_layouts_are_reported_by_reason() -> None:
    # 70B without enough devices: most layouts run out of memory; 24 heads forbid tp = 16
    odd = build_model_spec(name="odd", n_layers=30, d_model=3072, n_heads=24, vocab_size=32000)
    plan = plan_parallelism(odd, 4096, Cluster(A100, 32, 8, 25e9), 64,
                            constraints=PlannerConstraints(tp_within_node=False))  # fmt: skip
    reasons = {g.reason: g for g in plan.infeasible}
    assert "tp does not divide n_heads" in reasons  # tp = 16, 32
    assert "pp exceeds n_layers" in reasons  # pp = 32 > 30 layers
    # 30 layers on 4 stages split unevenly (7, 8, 8, 7) instead of being refused.
    assert any(c.layout.pp == 4 for c in plan.candidates) or plan.feasible_count > 0
    memory = plan_parallelism(LLAMA70, 4096, Cluster(H100, 8, 8, 50e9), 64)
    groups = {g.reason: g for g in memory.infeasible}
    oom = groups["does not fit in device memory"]
    assert oom.count > 0 and 1 <= len(oom.examples) <= 3
    assert groups["ZeRO needs data parallelism (dp·cp > 1)"].count > 0


def test_constraints_are_respected() -> None:
    cluster = Cluster(H100, 32, 8, 50e9)
    c = PlannerConstraints(max_tp=2, recompute_modes=("selective",), zero_stages=(1,), max_virtual_stages=1,
                           max_micro_batch=2)  # fmt: skip
    plan = plan_parallelism(LLAMA8, 4096, cluster, 128, constraints=c)
    assert plan.candidates
    for cand in plan.candidates:
        lay = cand.layout
        assert lay.tp <= 2 and lay.recompute == "selective" and lay.zero_stage == 1
        assert lay.virtual_stages == 1 and lay.micro_batch_sequences <= 2


def test_tp_across_nodes_only_when_allowed() -> None:
    cluster = Cluster(H100, 32, 8, 50e9)
    inside = plan_parallelism(LLAMA70, 4096, cluster, 64)
    assert all(c.layout.tp <= 8 for c in inside.candidates)
    assert any(g.reason == "tp exceeds devices per node" for g in inside.infeasible)


def test_small_model_prefers_data_parallel() -> None:
    small = get_preset("gpt3-350m").spec
    plan = plan_parallelism(small, 2048, Cluster(A100, 8, 8, 25e9), 64)
    assert plan.best is not None
    assert plan.best.layout.tp == 1 and plan.best.layout.pp == 1 and plan.best.layout.dp == 8


def test_nothing_fits() -> None:
    plan = plan_parallelism(LLAMA70, 8192, Cluster(get_accelerator("l4"), 1, 1, 25e9), 1)
    assert plan.best is None and plan.feasible_count == 0
    assert "does not fit in device memory" in {g.reason for g in plan.infeasible}


def test_bad_constraints() -> None:
    with pytest.raises(InvalidInput) as info:
        PlannerConstraints(recompute_modes=("sometimes",))  # type: ignore[arg-type]
    assert info.value.field == "recompute_modes"
    with pytest.raises(InvalidInput):
        PlannerConstraints(zero_stages=(5,))
    with pytest.raises(InvalidInput):
        PlannerConstraints(min_micro_batch=4, max_micro_batch=2)
    with pytest.raises(InvalidInput):
        plan_parallelism(LLAMA8, 0, Cluster(H100, 8), 8)


def test_interleaving_with_an_embedding_only_chunk_is_planned() -> None:
    # Megatron-Bridge 26.06 ran Llama 3.1 405B on 256 GB200 with pp 16 and v 8 (its performance summary):
    # 126 layers are 7 on the first and last stage, so each of them gives one of its 8 chunks to the
    # embedding or the loss alone (--account-for-embedding/loss-in-pipeline-split). Pinned, it is
    # planned, and its bubble is smaller than v 4's on the same split; a stage short of that is refused.
    spec = get_preset("llama3.1-405b").spec
    cluster = Cluster(get_accelerator("gb200"), 256, 72, 50e9)
    pinned = dict(tp_values=(4,), pp_values=(16,), dp_values=(4,), max_micro_batch=1, zero_stages=(1,))
    by_v = {}
    for v in (4, 8):
        plan = plan_parallelism(spec, 8192, cluster, 1536, "fp8",
                                PlannerConstraints(virtual_stage_values=(v,), **pinned))  # fmt: skip
        assert plan.best is not None, [g.reason for g in plan.infeasible]
        assert plan.best.layout.virtual_stages == v
        by_v[v] = plan.best.prediction
    assert by_v[8].bubble_fraction < by_v[4].bubble_fraction
    with pytest.raises(InvalidInput) as info:
        predict_step(spec, 8192, cluster, ParallelLayout(tp=4, pp=16, dp=4, virtual_stages=9,
                     sequence_parallel=True), 1536, "fp8")  # fmt: skip
    assert info.value.field == "virtual_stages"
