"""Regime-aware uncertainty: which validation regimes a prediction falls in, and the mean absolute MFU
error the validation table measured in each (split from :mod:`service.domain.performance`)."""

from __future__ import annotations

from service.domain.hardware_behaviour import behaviour_for
from service.domain.memory import ParallelLayout
from service.domain.models import ModelSpec
from service.domain.step_costs import Cluster

#: Mean absolute MFU error per regime, from ``benchmarks/validate_predictions.py``: its 83 rows (3
#: constants fitted on 25 of them) and two sets held out from every fit, NVIDIA Megatron-Bridge's 25.11
#: and 26.06 performance summaries (``benchmarks/data/megatron_bridge_2511.json``, 14 rows;
#: ``megatron_bridge_2606.json``, 15). Every held-out row is FP8 or Blackwell, so those sets set the
#: FP8, Blackwell and MoE-EP bands (the larger of their error and the in-sample one), and through them
#: the band of each held-out row; the other regimes, "all" included (every prediction's floor), keep
#: their in-sample error. A prediction's band is the largest of its regimes'. Rerun the script with each
#: ``--runs`` after a model change. What widens them: 25.11's small-expert MoE runs on B200/H100 sit
#: 10-11 points under the model, 26.06's GB300 rows 7-9 points over it (the Blackwell family's curve,
#: shared with GB200, does not know that GB300 sustains more of the same peak).
REGIME_MAE_MFU_POINTS: dict[str, float] = {
    "all": 2.26,
    "a100": 2.16,
    "hopper": 2.34,
    "blackwell": 5.20,
    "fp8": 5.11,
    "fsdp-zero3": 2.60,
    "zero3-fixed-global-batch": 2.41,
    "long-context": 1.26,
    "megatron-tp-pp": 1.93,
    "moe-ep": 6.05,
    "uneven-pp": 2.14,
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
