"""Regime-aware uncertainty: which validation regimes a prediction falls in, and the mean absolute MFU
error the validation table measured in each (split from :mod:`service.domain.performance`)."""

from __future__ import annotations

from service.domain.hardware_behaviour import behaviour_for
from service.domain.memory import ParallelLayout
from service.domain.models import ModelSpec
from service.domain.step_costs import Cluster

#: ``benchmarks/validate_predictions.py`` (its per-regime table; rerun it after a model change). A
#: prediction's band is the largest of its regimes'. Worst rows today (83 rows): a100 and megatron-tp-pp
#: 7.0, fsdp-zero3 and hopper 6.9, uneven-pp 5.3, zero3 at fixed global batch 4.6, long-context 3.7, fp8 3.5.
REGIME_MAE_MFU_POINTS: dict[str, float] = {
    "all": 2.32,
    "a100": 2.17,
    "hopper": 2.48,
    "blackwell": 2.67,
    "fp8": 1.49,
    "fsdp-zero3": 2.46,
    "zero3-fixed-global-batch": 2.14,
    "long-context": 1.67,
    "megatron-tp-pp": 2.17,
    "moe-ep": 2.80,
    "uneven-pp": 3.44,
}


def prediction_regimes(
    spec: ModelSpec, seq_len_tokens: int, cluster: Cluster, layout: ParallelLayout, precision: str, m: int
) -> tuple[str, ...]:
    """The validation regimes a prediction falls in (keys of :data:`REGIME_MAE_MFU_POINTS`)."""
    family = behaviour_for(cluster.accelerator).family
    regimes = ["all"]
    if family in ("ampere", "hopper", "blackwell"):
        regimes.append({"ampere": "a100"}.get(family, family))
    if precision == "fp8":
        regimes.append("fp8")
    if layout.zero_stage == 3:
        regimes.append("fsdp-zero3")
        if m == 1 and layout.micro_batch_sequences <= 4:
            regimes.append("zero3-fixed-global-batch")
    if layout.tp > 1 or layout.pp > 1:
        regimes.append("megatron-tp-pp")
    if layout.pp > 1 and (spec.n_layers % layout.pp or layout.first_stage_layers or layout.last_stage_layers):
        regimes.append("uneven-pp")
    if seq_len_tokens >= 32768:
        regimes.append("long-context")
    if spec.n_experts and layout.ep > 1:
        regimes.append("moe-ep")
    return tuple(regimes)
