"""Planner speed: layout candidates evaluated per second (memory check + step prediction).

Usage: ``python benchmarks/planner_speed.py [--repeat N]``

Plans Llama 3 70B at sequence 8192 on 1,024 H100s (global batch 1,024 sequences) and GPT-3 175B at 2,048
on 512 A100s with every tp/pp/micro-batch/recompute/ZeRO/interleaving combination, and prints
candidates per second. The first run per model fills the per-(model, sequence, tp, micro-batch) cost
caches; the figure is the best of ``--repeat`` cold runs (caches cleared before each) and a warm run
beside it. Baseline measured in the same run: one :func:`predict_step` call through the public API.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from service.domain import performance  # noqa: E402
from service.domain.hardware import get_accelerator  # noqa: E402
from service.domain.memory import ParallelLayout, activation_coefficients, stage_parameters  # noqa: E402
from service.domain.models import get_preset  # noqa: E402
from service.domain.performance import Cluster, predict_step  # noqa: E402
from service.domain.planner import plan_parallelism  # noqa: E402

TARGET_CANDIDATES_PER_SECOND = 10_000


def _clear_caches() -> None:
    performance._layer_costs.cache_clear()
    activation_coefficients.cache_clear()
    stage_parameters.cache_clear()


def _cases() -> list[tuple[str, object, int, Cluster, int]]:
    return [
        ("llama3-70b s=8192, 1024x H100", get_preset("llama3-70b").spec, 8192,
         Cluster(get_accelerator("h100-sxm"), 1024, 8, 50e9), 1024),
        ("gpt3-175b s=2048, 512x A100", get_preset("gpt3-175b").spec, 2048,
         Cluster(get_accelerator("a100-sxm4-80gb"), 512, 8, 25e9), 1536),
    ]  # fmt: skip


def measure(repeat: int = 3) -> float:
    """Candidates per second over all cases (best cold run); prints the detail."""
    rates = []
    for label, spec, seq, cluster, batch in _cases():
        best = 0.0
        for _ in range(repeat):
            _clear_caches()
            start = time.perf_counter()
            plan = plan_parallelism(spec, seq, cluster, batch)  # type: ignore[arg-type]
            elapsed = time.perf_counter() - start
            best = max(best, plan.evaluated_count / elapsed)
        start = time.perf_counter()
        plan = plan_parallelism(spec, seq, cluster, batch)  # type: ignore[arg-type]
        warm = plan.evaluated_count / (time.perf_counter() - start)
        top = plan.best
        print(f"{label}: {plan.evaluated_count} candidates, {plan.feasible_count} feasible; "
              f"cold {best:,.0f}/s, warm {warm:,.0f}/s; best MFU "
              f"{top.mfu:.3f} with {top.layout if top else None}" if top else "no feasible layout")  # fmt: skip
        rates.append(best)
    # Baseline: the public predict_step (validation + memory + prediction) per call.
    spec = get_preset("llama3-70b").spec
    cluster = Cluster(get_accelerator("h100-sxm"), 64, 8, 50e9)
    layout = ParallelLayout(tp=8, pp=2, dp=4, micro_batch_sequences=1, sequence_parallel=True, zero_stage=1)
    n = 2000
    start = time.perf_counter()
    for _ in range(n):
        predict_step(spec, 8192, cluster, layout, 64)
    per_call = (time.perf_counter() - start) / n
    rate = min(rates)
    print(f"baseline: predict_step {1 / per_call:,.0f} calls/s; planner/baseline ratio {rate * per_call:.2f}")
    return rate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="planner candidates per second")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    rate = measure(args.repeat)
    print(f"planner speed: {rate:,.0f} candidates/s (target ≥ {TARGET_CANDIDATES_PER_SECOND:,})")
    return 0 if rate >= TARGET_CANDIDATES_PER_SECOND else 1


if __name__ == "__main__":
    raise SystemExit(main())
