"""Request and answer shapes of the training-efficiency service, generated from its openapi.yaml
by clients/python/scripts/generate_models.py (do not edit by hand; run it again).
Contract version: 0.1.0.
"""

from __future__ import annotations

from typing import Any, Literal, Required, TypedDict


class AcceleratorBrief(TypedDict, total=False):
    """AcceleratorBrief"""

    id: Required[str]
    display_name: Required[str]


class AcceleratorIn(TypedDict, total=False):
    """Exactly one of ``accelerator`` (a catalog id or a framework device name) or ``custom``."""

    accelerator: str | None
    custom: CustomAccelerator | None


class AcceleratorList(TypedDict, total=False):
    """AcceleratorList"""

    items: Required[list[AcceleratorRead]]
    count: Required[int]


class AcceleratorRead(TypedDict, total=False):
    """AcceleratorRead"""

    id: Required[str]
    display_name: Required[str]
    vendor: Required[str]
    peak_tflops: Required[dict[str, float | None]]
    supported_precisions: Required[list[str]]
    memory_bytes: Required[int | None]
    hbm_bandwidth_bytes_per_second: Required[float | None]
    intra_node_bandwidth_bytes_per_second: Required[float | None]
    intra_node_link: Required[str | None]
    tdp_watts: Required[float | None]
    device_granularity: Required[str]
    uncertain_fields: Required[list[str]]
    notes: Required[str]
    sources: Required[list[str]]


class AcceleratorUsedRead(TypedDict, total=False):
    """AcceleratorUsedRead"""

    id: Required[str]
    display_name: Required[str]
    memory_bytes: Required[int | None]


class AttemptRead(TypedDict, total=False):
    """AttemptRead"""

    attempt: Required[int]
    run_id: Required[str | None]
    seconds: Required[float]
    failed: Required[bool]
    failure_reason: Required[str | None]


class BadputItem(TypedDict, total=False):
    """BadputItem"""

    kind: Required[Phase]
    seconds: Required[float]
    fraction: Required[float]
    device_hours: Required[float]


class BatchAdviceRead(TypedDict, total=False):
    """BatchAdviceRead"""

    loss: Required[float | None]
    loss_source: Required[str | None]
    critical_batch: Required[CriticalBatchRead]
    noise_scale: Required[NoiseScaleRead | None]
    tradeoff: Required[TradeoffRead]
    recommendation: Required[BatchRecommendationRead]
    gradient_accumulation: Required[GradientAccumulationRead | None]
    ramp: Required[BatchRampRead | None]
    convention: Required[str]


class BatchAdviceRequest(TypedDict, total=False):
    """The current loss (or ``model`` + ``tokens_seen`` to predict it), the current batch, and what to"""

    loss: float | None
    model: ModelRef | None
    tokens_seen: float | None
    loss_fit: Literal["chinchilla_rounded", "chinchilla_unrounded", "epoch"]
    global_batch_tokens: float
    critical_batch_model: Literal["kaplan", "inverse_loss", "noise_scale", "minicpm"]
    calibration_loss: float | None
    calibration_batch_tokens: float | None
    gradient_noise: GradientNoiseIn | None
    objective: Literal["fewest_steps", "balanced", "least_compute"]
    max_compute_overhead: float
    max_steps_overhead: float
    seq_len_tokens: int | None
    micro_batch_sequences: int | None
    data_parallel_size: int
    ramp: BatchRampIn | None
    batch_tokens: float | None


class BatchItemError(TypedDict, total=False):
    """BatchItemError"""

    type: Required[str]
    title: Required[str]
    status: Required[int]
    detail: Required[str]
    errors: list[dict[str, Any]] | None
    close_matches: list[str] | None


class BatchRampIn(TypedDict, total=False):
    """A doubling batch ramp over the run: the batch doubles once the critical batch at the predicted"""

    token_budget_tokens: float
    start_batch_tokens: float | None
    max_batch_tokens: float | None
    tokens: float | None


class BatchRampRead(TypedDict, total=False):
    """BatchRampRead"""

    phases: Required[list[RampPhaseRead]]
    tokens: Required[float]
    total_steps: Required[int]
    constant_batch_tokens: Required[float]
    constant_batch_steps: Required[int]
    steps_saved: Required[int]
    steps_saved_fraction: Required[float]
    comparison: Required[str]
    loss_evaluated_from_tokens: Required[float]
    data_efficiency: Required[float]
    constant_batch_data_efficiency: Required[float]
    granularity_tokens: Required[float]
    critical_batch_rule: Required[str]
    loss_predictor: Required[str]


class BatchRecommendationRead(TypedDict, total=False):
    """BatchRecommendationRead"""

    objective: Required[str]
    batch_tokens: Required[float]
    rule: Required[str]
    granularity_tokens: Required[float | None]
    meets_caps: Required[bool]
    tradeoff: Required[TradeoffRead]


class BreakdownItemRead(TypedDict, total=False):
    """BreakdownItemRead"""

    component: Required[
        Literal[
            "ideal_matmul",
            "matmul_inefficiency",
            "memory_bound",
            "exposed_tensor_parallel_comm",
            "exposed_context_parallel_comm",
            "exposed_expert_parallel_comm",
            "exposed_data_parallel_comm",
            "exposed_pipeline_p2p",
            "pipeline_bubble",
            "recompute",
            "optimizer_step",
            "kernel_overhead",
        ]
    ]
    seconds: Required[float]
    fraction_of_step: Required[float]
    description: Required[str]


class CalibrationIn(TypedDict, total=False):
    """Overrides of the performance model's fitted defaults (e.g. from your own measured runs)."""

    matmul_efficiency_scale: float
    overlap_fraction: float | None


class CalibrationRead(TypedDict, total=False):
    """The calibration a prediction ran under. The fields after ``source`` come only with a calibration"""

    matmul_efficiency_scale: Required[float]
    overlap_fraction: Required[float | None]
    source: Required[str]
    scope: Literal["fleet", "tenant"] | None
    accelerator: str | None
    fitted: bool | None
    fitted_on_runs: int | None
    skipped_runs: int | None
    minimum_runs: int | None
    rms_error_mfu: float | None
    default_rms_error_mfu: float | None
    fitted_at: str | None
    pending: bool | None
    note: str | None


class CheckpointAdviceRead(TypedDict, total=False):
    """CheckpointAdviceRead"""

    interval_seconds: Required[float | None]
    young_interval_seconds: Required[float | None]
    current_interval_seconds: Required[float | None]
    mtbf_seconds: Required[float | None]
    save_seconds: Required[float | None]
    note: Required[str]


class ClusterIn(TypedDict, total=False):
    """The devices the job runs on: an accelerator (catalog id, device name, or ``custom``), how many,"""

    accelerator: str | None
    custom: CustomAccelerator | None
    device_count: Required[int]
    devices_per_node: int
    inter_node_bandwidth_bytes_per_second: float
    intra_node_bandwidth_bytes_per_second: float | None


class ClusterRead(TypedDict, total=False):
    """ClusterRead"""

    accelerator: Required[AcceleratorUsedRead]
    device_count: Required[int]
    devices_per_node: Required[int]
    nodes: Required[int]
    inter_node_bandwidth_bytes_per_second: Required[float]
    intra_node_bandwidth_bytes_per_second: Required[float]
    peak_tflops_per_device: Required[float]


class ComputeBudgetRead(TypedDict, total=False):
    """ComputeBudgetRead"""

    total_training_flops: Required[float]
    basis: Required[Literal["total_training_flops", "hardware"]]
    formula: Required[str]
    accelerator: str | None
    device_count: int | None
    precision: str | None
    peak_flops_per_device: float | None
    mfu: float | None
    wall_clock_hours: float | None
    device_hours: float | None


class ComputeOptimalRead(TypedDict, total=False):
    """ComputeOptimalRead"""

    budget: Required[ComputeBudgetRead]
    fit: Required[str]
    result: Required[ComputeOptimalResultRead]
    results: Required[list[ComputeOptimalResultRead]]
    constants: Required[list[LossFitRead]]
    iso_flop_curve: Required[IsoFlopCurveRead]
    at_other_mfus: Required[list[MfuScenarioRead] | None]
    convention: Required[str]


class ComputeOptimalRequest(TypedDict, total=False):
    """The budget as ``total_training_flops``, or as ``hardware`` × ``wall_clock_hours`` × ``mfu`` (practical"""

    total_training_flops: float | None
    hardware: HardwareRef | None
    wall_clock_hours: float | None
    mfu: float | None
    precision: Literal["bf16", "fp16", "fp8", "tf32", "fp32", "fp64"]
    fit: Literal[
        "consensus",
        "chinchilla",
        "chinchilla_unrounded",
        "epoch",
        "chinchilla_approach1",
        "twenty_tokens_per_param",
        "deepseek",
        "all",
    ]
    loss_fit: Literal["chinchilla_rounded", "chinchilla_unrounded", "epoch"]
    iso_flop_points: int
    iso_flop_span: float


class ComputeOptimalResultRead(TypedDict, total=False):
    """ComputeOptimalResultRead"""

    rule: Required[str]
    source: Required[str]
    parameter_count: Required[float]
    tokens: Required[float]
    tokens_per_parameter: Required[float]
    predicted_loss: Required[float | None]
    loss_fit: Required[str | None]
    note: Required[str]


class CriticalBatchRead(TypedDict, total=False):
    """CriticalBatchRead"""

    batch_tokens: Required[float]
    model: Required[str]
    source: Required[str]


class CustomAccelerator(TypedDict, total=False):
    """A part the catalog lacks: dense (non-sparse) peaks in TFLOP/s per precision."""

    name: Required[str]
    peak_tflops: Required[dict[str, float]]
    memory_bytes: int | None
    hbm_bandwidth_bytes_per_second: float | None
    intra_node_bandwidth_bytes_per_second: float | None
    tdp_watts: float | None


class EventIn(TypedDict, total=False):
    """One event of a run. Point events (``data_stall``, ``hang_detected``) carry the stall's length,"""

    event_id: Required[str]
    kind: Required[EventKind]
    time: Required[str]
    step: int | None
    attempt: int | None
    duration_seconds: float | None
    reason: str | None


class EventKind(TypedDict, total=False):
    """EventKind"""

    pass


class EventsAdded(TypedDict, total=False):
    """EventsAdded"""

    run_id: Required[str]
    received: Required[int]
    stored: Required[int]
    ignored_event_ids: Required[list[str]]


class FleetGroup(TypedDict, total=False):
    """FleetGroup"""

    accelerator: Required[str]
    size_class: Required[Literal["below_1b", "1b_to_10b", "10b_to_100b", "above_100b"]]
    run_count: Required[int]
    percentiles: Required[MfuPercentiles]


class FleetMfuStats(TypedDict, total=False):
    """FleetMfuStats"""

    statistic: Required[str]
    bin_width: Required[float]
    minimum_runs_per_group: Required[int]
    size_classes: Required[list[SizeClassRead]]
    fleet: Required[list[FleetGroup]]
    tenant: Required[list[FleetGroup]]
    run: Required[RunRank | None]
    goodput_statistic: Required[str]
    goodput_fleet: Required[list[GoodputGroup]]
    goodput_tenant: Required[list[GoodputGroup]]


class FlopsComponentsRead(TypedDict, total=False):
    """FlopsComponentsRead"""

    attention_projections_flops: Required[float]
    attention_scores_flops: Required[float]
    mlp_flops: Required[float]
    logits_flops: Required[float]
    other_flops: Required[float]
    total_flops: Required[float]


class FlopsRead(TypedDict, total=False):
    """FlopsRead"""

    convention: Required[Literal["palm", "6n", "kaplan", "hf_trainer", "megatron", "megatron_causal"]]
    embedding_policy: Required[Literal["all", "exclude_input", "exclude_all"] | None]
    recompute: Required[Literal["none", "selective", "full"]]
    seq_len_tokens: Required[int]
    parameter_count_used: Required[float | None]
    total_parameters: Required[int]
    active_parameters_per_token: Required[int]
    forward_per_token: Required[FlopsComponentsRead]
    training_per_token: Required[FlopsComponentsRead]
    recompute_flops_per_token: Required[float]
    forward_flops_per_token: Required[float]
    training_flops_per_token: Required[float]
    hardware_flops_per_token: Required[float]
    forward_flops_per_sequence: Required[float]
    training_flops_per_sequence: Required[float]
    hardware_flops_per_sequence: Required[float]
    notes: Required[list[str]]


class FlopsRequest(TypedDict, total=False):
    """FlopsRequest"""

    model: Required[ModelRef]
    seq_len_tokens: Required[int]
    convention: Literal["palm", "6n", "kaplan", "hf_trainer", "megatron", "megatron_causal"]
    recompute: Literal["none", "selective", "full"]
    embedding_policy: Literal["all", "exclude_input", "exclude_all"] | None
    parameter_count: float | None


class GoodputGain(TypedDict, total=False):
    """GoodputGain"""

    target_goodput: Required[float]
    devices_worth: Required[float]


class GoodputGroup(TypedDict, total=False):
    """GoodputGroup"""

    accelerator: Required[str]
    size_class: Required[Literal["below_1b", "1b_to_10b", "10b_to_100b", "above_100b"]]
    job_count: Required[int]
    goodput: Required[MfuPercentiles]
    effective_mfu_job_count: Required[int]
    effective_mfu: Required[MfuPercentiles]


class GoodputRead(TypedDict, total=False):
    """GoodputRead"""

    run_id: Required[str]
    job_run_ids: Required[list[str]]
    event_count: Required[int]
    total_seconds: Required[float]
    productive_seconds: Required[float]
    goodput: Required[float | None]
    mfu: Required[float | None]
    effective_mfu: Required[float | None]
    device_count: Required[int]
    total_device_hours: Required[float]
    badput: Required[list[BadputItem]]
    attempts: Required[list[AttemptRead]]
    timeline: Required[list[PhaseSpan]]
    checkpoint: Required[CheckpointAdviceRead]
    gains: Required[list[GoodputGain]]
    warnings: Required[list[str]]


class GradientAccumulationRead(TypedDict, total=False):
    """GradientAccumulationRead"""

    target_batch_tokens: Required[float]
    micro_batch_sequences: Required[int]
    seq_len_tokens: Required[int]
    data_parallel_size: Required[int]
    accumulation_steps: Required[int]
    global_batch_sequences: Required[int]
    global_batch_tokens: Required[int]
    overshoot_fraction: Required[float]


class GradientNoiseIn(TypedDict, total=False):
    """Squared gradient norms measured at two batch sizes (McCandlish et al. 2018 App. A), named as a"""

    batch_small_tokens: Required[int]
    batch_big_tokens: Required[int]
    grad_norm_sq_small: Required[float | list[float]]
    grad_norm_sq_big: Required[float | list[float]]
    averaging: Literal["mean", "ema"]
    ema_decay: float


class HardwareRead(TypedDict, total=False):
    """The hardware a run was described with, in today's names (runs stored before 2026-12 said"""

    accelerator: str | None
    custom: CustomAccelerator | None
    device_count: Required[int]


class HardwareRef(TypedDict, total=False):
    """Exactly one of ``accelerator`` (a catalog id such as ``h100-sxm`` or a device name a framework"""

    accelerator: str | None
    custom: CustomAccelerator | None
    device_count: int
    count: int | None


class InfeasibleGroupRead(TypedDict, total=False):
    """InfeasibleGroupRead"""

    reason: Required[str]
    count: Required[int]
    examples: Required[list[LayoutRead]]


class IsoFlopCurveRead(TypedDict, total=False):
    """IsoFlopCurveRead"""

    loss_fit: Required[str]
    total_training_flops: Required[float]
    points: Required[list[IsoFlopPointRead]]


class IsoFlopPointRead(TypedDict, total=False):
    """IsoFlopPointRead"""

    parameter_count: Required[float]
    tokens: Required[float]
    loss: Required[float]


class JobCostRead(TypedDict, total=False):
    """JobCostRead"""

    mfu: Required[float]
    wall_clock_seconds: Required[float]
    wall_clock_days: Required[float]
    device_hours: Required[float]
    cost: Required[float | None]
    energy_kwh_upper_bound: Required[float | None]
    devices_to_match_wall_clock: Required[int]


class LayoutIn(TypedDict, total=False):
    """How the job is split over devices (devices = tp·pp·dp·cp; ``ep`` is carved out of dp·cp), the"""

    tp: int
    pp: int
    virtual_stages: int
    dp: int
    cp: int
    ep: int
    micro_batch_sequences: int
    sequence_parallel: bool | None
    zero_stage: int | Literal["no_shard", "shard_grad_op", "full_shard"]
    distributed_optimizer: bool
    fp32_grad_accumulation: bool | None
    recompute: Literal["none", "selective", "full"]
    flash_attention: bool
    overlap_tp_comm: bool
    overlap_dp_comm: bool
    overlap_pp_comm: bool
    first_stage_layers: int | None
    last_stage_layers: int | None
    recompute_every_k_layers: int
    selective_policy: Literal["attention_core", "per_op"]
    reshard_after_forward: bool
    regather_for_recompute: bool
    zero3_gather_unit: Literal["layer", "module"]
    shard_group_size: int | None
    pooled_nic_collectives: bool
    overlap_ep_comm: bool
    expert_load_imbalance: float
    attention_kernel: Literal["best", "flash2", "triton"]
    fused_elementwise: bool
    gradient_accumulation_fusion: bool
    async_tp_backward: bool


class LayoutRead(TypedDict, total=False):
    """The layout used, every default resolved (post it back as ``layout`` to the other endpoints)."""

    tp: Required[int]
    pp: Required[int]
    virtual_stages: Required[int]
    dp: Required[int]
    cp: Required[int]
    ep: Required[int]
    micro_batch_sequences: Required[int]
    sequence_parallel: Required[bool]
    zero_stage: Required[int]
    distributed_optimizer: Required[bool]
    fp32_grad_accumulation: Required[bool]
    recompute: Required[Literal["none", "selective", "full"]]
    flash_attention: Required[bool]
    overlap_tp_comm: Required[bool]
    overlap_dp_comm: Required[bool]
    overlap_pp_comm: Required[bool]
    first_stage_layers: Required[int | None]
    last_stage_layers: Required[int | None]
    recompute_every_k_layers: Required[int]
    selective_policy: Required[Literal["attention_core", "per_op"]]
    reshard_after_forward: Required[bool]
    regather_for_recompute: Required[bool]
    zero3_gather_unit: Required[Literal["layer", "module"]]
    shard_group_size: Required[int | None]
    pooled_nic_collectives: Required[bool]
    overlap_ep_comm: Required[bool]
    expert_load_imbalance: Required[float]
    attention_kernel: Required[Literal["best", "flash2", "triton"]]
    fused_elementwise: Required[bool]
    gradient_accumulation_fusion: Required[bool]
    async_tp_backward: Required[bool]


class LossFitRead(TypedDict, total=False):
    """The constants of a Chinchilla-form fit L(N, D) = E + A/N^α + B/D^β."""

    name: Required[str]
    constants: Required[Literal["rounded", "unrounded", "refit"]]
    irreducible_loss: Required[float]
    a_coeff: Required[float]
    b_coeff: Required[float]
    alpha: Required[float]
    beta: Required[float]
    source: Required[str]


class LrAdviceRead(TypedDict, total=False):
    """LrAdviceRead"""

    recommended_peak_lr: Required[float]
    recommendation_rule: Required[str]
    peak_lr_low: Required[float]
    peak_lr_high: Required[float]
    rules: Required[list[LrRuleRead]]
    parameter_count: Required[float]
    parameter_count_basis: Required[str]
    total_training_flops: Required[float | None]
    warmup: Required[WarmupAdviceRead]
    min_lr_ratio: Required[float]
    min_lr: Required[float]
    floor_reason: Required[str]
    suggested_batch_tokens: Required[float | None]
    suggested_batch_source: Required[str | None]
    batch_tokens: Required[float | None]
    batch_tokens_basis: Required[str | None]
    total_steps: Required[int | None]
    schedule_request: Required[LrScheduleRequest | None]
    schedule_note: Required[str]


class LrAdviceRequest(TypedDict, total=False):
    """Give the size as ``parameter_count`` or ``model``, and/or the budget as ``total_training_flops``"""

    parameter_count: float | None
    model: ModelRef | None
    total_training_flops: float | None
    token_budget_tokens: float | None
    seq_len_tokens: int | None
    global_batch_tokens: float | None
    total_steps: int | None
    min_lr_ratio: float
    tokens: float | None
    batch_tokens: float | None


class LrRuleRead(TypedDict, total=False):
    """LrRuleRead"""

    rule: Required[str]
    source: Required[str]
    peak_lr: Required[float | None]
    peak_lr_low: Required[float | None]
    peak_lr_high: Required[float | None]
    applicable: Required[bool]
    extrapolated: Required[bool]
    note: Required[str]


class LrScheduleRead(TypedDict, total=False):
    """LrScheduleRead"""

    kind: Required[str]
    semantics: Required[str]
    convention: Required[str]
    answered: Required[Literal["steps", "sampled"]]
    summary: Required[ScheduleSummaryRead]
    phases: Required[list[SchedulePhaseRead]]
    points: Required[list[SchedulePointRead]]


class LrScheduleRequest(TypedDict, total=False):
    """A schedule and what to answer: the LR at ``steps``, or the run sampled (``points`` or ``every``)."""

    kind: Required[
        Literal[
            "constant",
            "linear",
            "cosine",
            "cosine_with_min_lr",
            "cosine_warmup_with_min_lr",
            "cosine_with_restarts",
            "polynomial",
            "inverse_sqrt",
            "warmup_stable_decay",
            "constant_with_warmup",
            "cosine_with_hard_restarts",
            "wsd",
        ]
    ]
    peak_lr: Required[float]
    total_steps: Required[int]
    warmup_steps: int | None
    warmup_fraction: float | None
    min_lr: float | None
    min_lr_ratio: float | None
    warmup_start_lr: float | None
    warmup_start_ratio: float | None
    semantics: Literal["transformers", "optax", "pytorch"]
    past_end: Literal["library", "hold"]
    stable_steps: int | None
    decay_steps: int | None
    decay_fraction: float | None
    warmup_shape: Literal["linear", "cosine", "1-sqrt"]
    decay_shape: Literal["linear", "cosine", "1-sqrt"]
    power: float
    timescale_steps: float | None
    cycles: int
    steps: list[int] | None
    points: int | None
    every: int | None
    until_step: int | None


class MeasurementIn(TypedDict, total=False):
    """One measurement. A (run, step) is stored once: a repeated step is ignored (first write wins)."""

    step: Required[int]
    time: str | None
    throughput: Required[ThroughputItem]
    loss: float | None
    memory_bytes: int | None
    grad_norm_sq_small: float | None
    grad_norm_sq_big: float | None
    batch_small_tokens: int | None
    batch_big_tokens: int | None


class MeasurementInBatchItem(TypedDict, total=False):
    """One measurement. A (run, step) is stored once: a repeated step is ignored (first write wins)."""

    step: Required[int]
    time: str | None
    throughput: Required[ThroughputItemBatchItem]
    loss: float | None
    memory_bytes: int | None
    grad_norm_sq_small: float | None
    grad_norm_sq_big: float | None
    batch_small_tokens: int | None
    batch_big_tokens: int | None


class MeasurementPage(TypedDict, total=False):
    """MeasurementPage"""

    items: Required[list[MeasurementRead]]
    next_cursor: Required[str | None]
    limit: Required[int]


class MeasurementRead(TypedDict, total=False):
    """MeasurementRead"""

    step: Required[int]
    time: Required[str]
    throughput: Required[ThroughputIn]
    tokens_per_second: Required[float]
    tokens_per_second_per_device: Required[float]
    mfu: Required[float]
    hfu: Required[float]
    achieved_tflops_per_device: Required[float]
    loss: Required[float | None]
    memory_bytes: Required[int | None]
    grad_norm_sq_small: Required[float | None]
    grad_norm_sq_big: Required[float | None]
    batch_small_tokens: Required[int | None]
    batch_big_tokens: Required[int | None]


class MeasurementsAdded(TypedDict, total=False):
    """MeasurementsAdded"""

    run_id: Required[str]
    received: Required[int]
    stored: Required[int]
    ignored_steps: Required[list[int]]
    summary: Required[RunSummary]


class MemoryRead(TypedDict, total=False):
    """MemoryRead"""

    weights_bytes: Required[float]
    gradients_bytes: Required[float]
    optimizer_state_bytes: Required[float]
    model_states_bytes: Required[float]
    activations_bytes: Required[float]
    buffers_bytes: Required[float]
    framework_overhead_bytes: Required[float]
    fragmentation_bytes: Required[float]
    total_bytes: Required[float]
    total_gib: Required[float]
    capacity_bytes: Required[float | None]
    fits: Required[bool | None]
    headroom_bytes: Required[float | None]
    max_micro_batch_sequences: Required[int | None]
    stage: Required[Literal["only", "first", "middle", "last"]]
    model: Required[str]
    seq_len_tokens: Required[int]
    precision: Required[Literal["bf16", "fp16", "fp8", "tf32", "fp32", "fp64"]]
    layout: Required[LayoutRead]
    accelerator: Required[AcceleratorUsedRead | None]
    optimizer: Required[OptimizerRead]
    parameters_on_device: Required[float]
    model_state_bytes_per_parameter: Required[float]
    activations_per_micro_batch_bytes: Required[float]
    in_flight_micro_batches: Required[float]
    first_stage_total_bytes: Required[float]
    last_stage_total_bytes: Required[float]
    assumptions: Required[list[str]]
    warnings: Required[list[str]]
    reading: Required[str]


class MemoryRequest(TypedDict, total=False):
    """Memory per device for a model, a layout and a micro-batch; with ``hardware``, whether it fits."""

    model: Required[ModelRef]
    seq_len_tokens: Required[int]
    layout: LayoutIn
    precision: Literal["bf16", "fp16", "fp8", "tf32", "fp32", "fp64"]
    optimizer: Literal["adam", "adam_mixed", "adam_fp32", "sgd_momentum", "adafactor", "adam_8bit"]
    hardware: AcceleratorIn | None
    global_batch_sequences: int | None
    dropout: bool


class MemorySummaryRead(TypedDict, total=False):
    """Bytes per device on the worst pipeline stage (``stage``)."""

    weights_bytes: Required[float]
    gradients_bytes: Required[float]
    optimizer_state_bytes: Required[float]
    model_states_bytes: Required[float]
    activations_bytes: Required[float]
    buffers_bytes: Required[float]
    framework_overhead_bytes: Required[float]
    fragmentation_bytes: Required[float]
    total_bytes: Required[float]
    total_gib: Required[float]
    capacity_bytes: Required[float | None]
    fits: Required[bool | None]
    headroom_bytes: Required[float | None]
    max_micro_batch_sequences: Required[int | None]
    stage: Required[Literal["only", "first", "middle", "last"]]


class MfuBatchItem(TypedDict, total=False):
    """MfuBatchItem"""

    index: Required[int]
    ok: Required[bool]
    result: MfuRead | None
    error: BatchItemError | None


class MfuBatchRead(TypedDict, total=False):
    """MfuBatchRead"""

    items: Required[list[MfuBatchItem]]
    succeeded: Required[int]
    failed: Required[int]


class MfuBatchRequest(TypedDict, total=False):
    """Up to 1,000 MFU requests; each item answers or fails on its own, in order."""

    items: Required[list[MfuRequest]]


class MfuCostRead(TypedDict, total=False):
    """MfuCostRead"""

    component: Required[
        Literal[
            "ideal_matmul",
            "matmul_inefficiency",
            "memory_bound",
            "exposed_tensor_parallel_comm",
            "exposed_context_parallel_comm",
            "exposed_expert_parallel_comm",
            "exposed_data_parallel_comm",
            "exposed_pipeline_p2p",
            "pipeline_bubble",
            "recompute",
            "optimizer_step",
            "kernel_overhead",
        ]
    ]
    mfu_cost: Required[float]


class MfuDistribution(TypedDict, total=False):
    """MfuDistribution"""

    median: Required[float | None]
    p10: Required[float | None]
    p90: Required[float | None]
    latest: Required[float | None]
    latest_hfu: Required[float | None]
    bin_width: Required[float]


class MfuGapRead(TypedDict, total=False):
    """Where the MFU points go. ``useful_mfu`` = ideal matmul seconds / step time: the useful FLOPs (causal"""

    useful_mfu: Required[float]
    mfu: Required[float]
    convention: Required[Literal["palm", "6n", "kaplan", "hf_trainer", "megatron", "megatron_causal"]]
    convention_difference: Required[float]
    total_cost: Required[float]
    costs: Required[list[MfuCostRead]]


class MfuPercentiles(TypedDict, total=False):
    """MfuPercentiles"""

    p10: Required[float | None]
    p25: Required[float | None]
    p50: Required[float | None]
    p75: Required[float | None]
    p90: Required[float | None]


class MfuRead(TypedDict, total=False):
    """MfuRead"""

    mfu: Required[float]
    hfu: Required[float]
    achieved_tflops_per_device: Required[float]
    hardware_tflops_per_device: Required[float]
    peak_tflops_per_device: Required[float]
    model_flops_per_token: Required[float]
    hardware_flops_per_token: Required[float]
    tokens_per_second: Required[float]
    tokens_per_second_per_device: Required[float]
    device_count: Required[int]
    accelerator: Required[AcceleratorBrief]
    precision: Required[Literal["bf16", "fp16", "fp8", "tf32", "fp32", "fp64"]]
    convention: Required[Literal["palm", "6n", "kaplan", "hf_trainer", "megatron", "megatron_causal"]]
    recompute: Required[Literal["none", "selective", "full"]]
    band: Required[Literal["below_typical", "typical", "above_typical"]]
    reading: Required[str]
    mfu_vs_bf16_peak: Required[float | None]
    bf16_peak_tflops_per_device: Required[float | None]


class MfuRequest(TypedDict, total=False):
    """MfuRequest"""

    model: Required[ModelRef]
    seq_len_tokens: Required[int]
    hardware: Required[HardwareRef]
    precision: Literal["bf16", "fp16", "fp8", "tf32", "fp32", "fp64"]
    throughput: Required[ThroughputIn]
    recompute: Literal["none", "selective", "full"]
    convention: Literal["palm", "6n", "kaplan", "hf_trainer", "megatron", "megatron_causal"]
    embedding_policy: Literal["all", "exclude_input", "exclude_all"] | None
    parameter_count: float | None


class MfuScenarioRead(TypedDict, total=False):
    """MfuScenarioRead"""

    mfu: Required[float]
    total_training_flops: Required[float]
    compute_over_given: Required[float]
    parameter_count: Required[float]
    tokens: Required[float]
    predicted_loss: Required[float | None]


class MfuTrend(TypedDict, total=False):
    """MfuTrend"""

    slope_mfu_per_hour: Required[float | None]
    first_quartile_mean_mfu: Required[float]
    last_quartile_mean_mfu: Required[float]
    quartile_change: Required[float]
    quartile_change_relative: Required[float | None]
    hours_covered: Required[float]
    measurements: Required[int]
    method: Required[str]


class ModelDimensions(TypedDict, total=False):
    """A decoder-only transformer by its dimensions. Omitted fields take the usual defaults:"""

    name: str
    n_layers: Required[int]
    d_model: Required[int]
    n_heads: Required[int]
    n_kv_heads: int | None
    head_dim: int | None
    d_ff: int | None
    ffn_kind: Literal["plain", "gated"]
    vocab_size: Required[int]
    tied_embeddings: bool
    position_embedding: Literal["learned", "rope", "alibi", "none"]
    max_position_embeddings: int | None
    norm_kind: Literal["layernorm", "rmsnorm"]
    norm_has_bias: bool
    qkv_bias: bool
    attn_out_bias: bool
    mlp_bias: bool
    n_experts: int
    experts_per_token: int
    expert_d_ff: int
    n_shared_experts: int
    shared_expert_d_ff: int
    first_k_dense_layers: int
    moe_layer_frequency: int
    sliding_window: int | None


class ModelParameterCountsRead(TypedDict, total=False):
    """ModelParameterCountsRead"""

    total: Required[int]
    embedding: Required[int]
    non_embedding: Required[int]
    active_per_token: Required[int]
    attention: Required[int]
    mlp: Required[int]
    norms: Required[int]


class ModelPresetList(TypedDict, total=False):
    """ModelPresetList"""

    items: Required[list[ModelPresetSummary]]
    count: Required[int]


class ModelPresetRead(TypedDict, total=False):
    """ModelPresetRead"""

    id: Required[str]
    display_name: Required[str]
    family: Required[str]
    total_parameters: Required[int]
    active_parameters_per_token: Required[int]
    published_parameters: Required[float | None]
    source: Required[str]
    dimensions: Required[dict[str, Any]]
    other_architecture_details: Required[dict[str, Any]]
    parameter_counts: Required[ModelParameterCountsRead]


class ModelPresetSummary(TypedDict, total=False):
    """ModelPresetSummary"""

    id: Required[str]
    display_name: Required[str]
    family: Required[str]
    total_parameters: Required[int]
    active_parameters_per_token: Required[int]
    published_parameters: Required[float | None]
    source: Required[str]


class ModelRef(TypedDict, total=False):
    """Exactly one of ``preset``, ``dimensions`` or ``hf_config``."""

    preset: str | None
    dimensions: ModelDimensions | None
    hf_config: dict[str, Any] | None


class NoiseScaleRead(TypedDict, total=False):
    """NoiseScaleRead"""

    gradient_norm_sq: Required[float]
    trace_sigma: Required[float]
    b_simple_tokens: Required[float]
    averaging: Required[str]


class OptimizerRead(TypedDict, total=False):
    """Bytes per parameter before any sharding (the optimizer's own footprint)."""

    requested: Required[Literal["adam", "adam_mixed", "adam_fp32", "sgd_momentum", "adafactor", "adam_8bit"]]
    name: Required[str]
    weight_bytes_per_parameter: Required[float]
    gradient_bytes_per_parameter: Required[float]
    optimizer_state_bytes_per_parameter: Required[float]
    total_bytes_per_parameter: Required[float]
    source: Required[str]


class Phase(TypedDict, total=False):
    """What an instant of allocated time was spent on."""

    pass


class PhaseSpan(TypedDict, total=False):
    """PhaseSpan"""

    attempt: Required[int | None]
    start_seconds: Required[float]
    end_seconds: Required[float]
    phase: Required[Phase]


class PlanCandidateRead(TypedDict, total=False):
    """PlanCandidateRead"""

    rank: Required[int]
    layout: Required[LayoutRead]
    step_time_seconds: Required[float]
    tokens_per_second: Required[float]
    tokens_per_second_per_device: Required[float]
    mfu: Required[float]
    hfu: Required[float]
    bubble_fraction: Required[float]
    memory_per_device_bytes: Required[float]
    memory_per_device_gib: Required[float]
    headroom_bytes: Required[float | None]
    fits: Required[bool | None]
    largest_loss: Required[
        Literal[
            "ideal_matmul",
            "matmul_inefficiency",
            "memory_bound",
            "exposed_tensor_parallel_comm",
            "exposed_context_parallel_comm",
            "exposed_expert_parallel_comm",
            "exposed_data_parallel_comm",
            "exposed_pipeline_p2p",
            "pipeline_bubble",
            "recompute",
            "optimizer_step",
            "kernel_overhead",
        ]
    ]
    largest_loss_fraction: Required[float]
    regimes: Required[list[str]]
    uncertainty_mfu_points: Required[float | None]


class PlanConstraintsIn(TypedDict, total=False):
    """What the search may vary (omitted: the model and the cluster decide)."""

    max_tp: int | None
    tp_within_node: bool
    tp_values: list[int] | None
    pp_values: list[int] | None
    dp_values: list[int] | None
    cp_values: list[int]
    ep_values: list[int]
    recompute_modes: list[Literal["none", "selective", "full"]]
    zero_stages: list[int]
    max_virtual_stages: int
    min_micro_batch_sequences: int
    max_micro_batch_sequences: int | None
    sequence_parallel: bool | None
    flash_attention: bool
    fp32_grad_accumulation: bool
    overlap_tp_comm: bool
    overlap_dp_comm: bool
    overlap_pp_comm: bool
    max_results: int
    recompute_every_k_values: list[int]
    selective_policies: list[Literal["attention_core", "per_op"]]
    virtual_stage_values: list[int] | None
    first_stage_layers: int | None
    last_stage_layers: int | None
    shard_group_sizes: list[int | None]
    reshard_after_forward: bool
    regather_for_recompute: bool
    zero3_gather_unit: Literal["layer", "module"]
    pooled_nic_collectives: bool
    overlap_ep_comm: bool
    expert_load_imbalance: float
    attention_kernel: Literal["best", "flash2", "triton"]
    fused_elementwise: bool
    gradient_accumulation_fusion: bool
    async_tp_backward: bool


class PlanRead(TypedDict, total=False):
    """PlanRead"""

    model: Required[str]
    seq_len_tokens: Required[int]
    global_batch_sequences: Required[int]
    global_batch_tokens: Required[int]
    precision: Required[Literal["bf16", "fp16", "fp8", "tf32", "fp32", "fp64"]]
    convention: Required[Literal["palm", "6n", "kaplan", "hf_trainer", "megatron", "megatron_causal"]]
    cluster: Required[ClusterRead]
    calibration: Required[CalibrationRead]
    candidates: Required[list[PlanCandidateRead]]
    evaluated_count: Required[int]
    feasible_count: Required[int]
    returned_count: Required[int]
    infeasible: Required[list[InfeasibleGroupRead]]
    elapsed_seconds: Required[float]
    candidates_per_second: Required[float]
    reading: Required[str]


class PlanRequest(TypedDict, total=False):
    """A model, a cluster and a global batch → every layout that fits, fastest first."""

    seq_len_tokens: Required[int]
    global_batch_sequences: int | None
    global_batch_tokens: int | None
    model: Required[ModelRef]
    cluster: Required[ClusterIn]
    precision: Literal["bf16", "fp16", "fp8", "tf32", "fp32", "fp64"]
    optimizer: Literal["adam", "adam_mixed", "adam_fp32", "sgd_momentum", "adafactor", "adam_8bit"]
    convention: Literal["palm", "6n", "kaplan", "hf_trainer", "megatron", "megatron_causal"]
    dropout: bool
    calibration: CalibrationIn | Literal["fleet", "tenant"] | None
    constraints: PlanConstraintsIn


class PredictMfuIn(TypedDict, total=False):
    """Predict the MFU a training estimate runs at, instead of giving it. The estimate's ``model``,"""

    layout: LayoutIn | None
    constraints: PlanConstraintsIn | None
    devices_per_node: int
    inter_node_bandwidth_bytes_per_second: float
    intra_node_bandwidth_bytes_per_second: float | None
    global_batch_sequences: int | None
    global_batch_tokens: int | None
    optimizer: Literal["adam", "adam_mixed", "adam_fp32", "sgd_momentum", "adafactor", "adam_8bit"]
    dropout: bool
    calibration: CalibrationIn | Literal["fleet", "tenant"] | None


class PredictedLossRead(TypedDict, total=False):
    """One component of the predicted step that is not useful model FLOPs."""

    component: Required[
        Literal[
            "ideal_matmul",
            "matmul_inefficiency",
            "memory_bound",
            "exposed_tensor_parallel_comm",
            "exposed_context_parallel_comm",
            "exposed_expert_parallel_comm",
            "exposed_data_parallel_comm",
            "exposed_pipeline_p2p",
            "pipeline_bubble",
            "recompute",
            "optimizer_step",
            "kernel_overhead",
        ]
    ]
    name: Required[str]
    seconds: Required[float]
    mfu_points: Required[float]
    what_to_try: Required[str]


class PredictionSummaryRead(TypedDict, total=False):
    """The prediction a training estimate ran at (``mfu_source`` = predicted)."""

    layout_source: Required[Literal["given", "planner_best"]]
    layout: Required[LayoutRead]
    global_batch_sequences: Required[int]
    step_time_seconds: Required[float]
    tokens_per_second: Required[float]
    mfu: Required[float]
    hfu: Required[float]
    fits: Required[bool | None]
    memory_per_device_gib: Required[float]
    largest_loss: Required[
        Literal[
            "ideal_matmul",
            "matmul_inefficiency",
            "memory_bound",
            "exposed_tensor_parallel_comm",
            "exposed_context_parallel_comm",
            "exposed_expert_parallel_comm",
            "exposed_data_parallel_comm",
            "exposed_pipeline_p2p",
            "pipeline_bubble",
            "recompute",
            "optimizer_step",
            "kernel_overhead",
        ]
    ]
    calibration: Required[CalibrationRead]
    reading: Required[str]


class Problem(TypedDict, total=False):
    """RFC 9457 problem details. `type` is stable per error kind; see /problems/{slug}."""

    type: Required[
        Literal[
            "/problems/conflict",
            "/problems/database-unavailable",
            "/problems/forbidden",
            "/problems/headers-too-large",
            "/problems/idempotency-in-flight",
            "/problems/idempotency-key-reused",
            "/problems/implausible-result",
            "/problems/internal-error",
            "/problems/invalid-input",
            "/problems/method-not-allowed",
            "/problems/not-acceptable",
            "/problems/not-found",
            "/problems/payload-too-large",
            "/problems/request-timeout",
            "/problems/server-busy",
            "/problems/storage-full",
            "/problems/unauthorized",
            "/problems/unknown-reference",
            "/problems/unsupported-media-type",
            "/problems/unsupported-precision",
            "/problems/validation-error",
        ]
    ]
    title: Required[str]
    status: Required[int]
    detail: Required[str]
    instance: str
    request_id: str
    errors: list[dict[str, Any]]
    close_matches: list[str]


class RampPhaseRead(TypedDict, total=False):
    """RampPhaseRead"""

    start_tokens: Required[float]
    end_tokens: Required[float]
    batch_tokens: Required[float]
    steps: Required[int]
    loss_at_start: Required[float]
    critical_batch_tokens_at_start: Required[float]


class RunCompareRequest(TypedDict, total=False):
    """RunCompareRequest"""

    run_ids: Required[list[str]]


class RunComparison(TypedDict, total=False):
    """RunComparison"""

    runs: Required[list[RunComparisonItem]]
    differing_fields: Required[list[str]]
    same_fields: Required[dict[str, str | int | float | bool | None]]
    best_median_mfu_run_id: Required[str | None]


class RunComparisonItem(TypedDict, total=False):
    """RunComparisonItem"""

    run_id: Required[str]
    status: Required[Literal["running", "finished", "failed"]]
    model_name: Required[str]
    accelerator_id: Required[str]
    device_count: Required[int]
    median_mfu: Required[float | None]
    latest_mfu: Required[float | None]
    median_tflops_per_device: Required[float | None]
    median_tokens_per_second_per_device: Required[float | None]
    latest_tokens_per_second_per_device: Required[float | None]
    cost_per_billion_tokens: Required[float | None]
    tokens_so_far: Required[int]
    token_budget_tokens: Required[int | None]
    seconds_to_budget: Required[float | None]
    seconds_for_budget_at_median: Required[float | None]
    configuration: Required[dict[str, str | int | float | bool | None]]


class RunCreate(TypedDict, total=False):
    """A training run as the scheduler knows it when the job starts."""

    model: Required[ModelRef]
    hardware: Required[HardwareRef]
    precision: Literal["bf16", "fp16", "fp8", "tf32", "fp32", "fp64"]
    seq_len_tokens: Required[int]
    global_batch_tokens: int | None
    global_batch_sequences: int | None
    parallelism: RunLayoutIn
    framework: str | None
    cluster: str | None
    scheduler_job_id: str | None
    attempt: int | None
    tags: list[str]
    token_budget_tokens: int | None
    price_per_device_hour: float | None
    convention: Literal["palm", "6n", "kaplan", "hf_trainer", "megatron", "megatron_causal"]
    started_at: str | None


class RunEfficiency(TypedDict, total=False):
    """RunEfficiency"""

    run_id: Required[str]
    status: Required[Literal["running", "finished", "failed"]]
    convention: Required[Literal["palm", "6n", "kaplan", "hf_trainer", "megatron", "megatron_causal"]]
    precision: Required[Literal["bf16", "fp16", "fp8", "tf32", "fp32", "fp64"]]
    peak_tflops_per_device: Required[float]
    measurement_count: Required[int]
    mfu: Required[MfuDistribution]
    trend: Required[MfuTrend | None]
    series: Required[list[SeriesPointRead]]
    tokens_so_far: Required[int]
    tokens_method: Required[str]
    current_tokens_per_second: Required[float | None]
    token_budget_tokens: Required[int | None]
    budget_fraction_done: Required[float | None]
    seconds_to_budget: Required[float | None]
    estimated_budget_reached_at: Required[str | None]
    budget_reached_after_year_9999: bool
    prediction: RunPredictionRead | None
    prediction_note: str | None
    goodput: RunGoodputSummary | None


class RunGoodputSummary(TypedDict, total=False):
    """The goodput part of a run's efficiency answer: the same figures as ``GET /v1/runs/{id}/goodput``"""

    job_run_ids: Required[list[str]]
    event_count: Required[int]
    total_seconds: Required[float]
    productive_seconds: Required[float]
    goodput: Required[float | None]
    mfu: Required[float | None]
    effective_mfu: Required[float | None]
    badput: Required[list[BadputItem]]
    link: Required[str]


class RunLayoutIn(TypedDict, total=False):
    """A run's layout: the knobs of the performance endpoints' ``layout``, so a run's ``parallelism``"""

    tp: int
    pp: int
    virtual_stages: int
    dp: int | None
    cp: int
    ep: int
    micro_batch_sequences: int | None
    sequence_parallel: bool | None
    zero_stage: int | Literal["no_shard", "shard_grad_op", "full_shard"]
    distributed_optimizer: bool
    fp32_grad_accumulation: bool | None
    recompute: Literal["none", "selective", "full"]
    flash_attention: bool
    overlap_tp_comm: bool
    overlap_dp_comm: bool
    overlap_pp_comm: bool
    first_stage_layers: int | None
    last_stage_layers: int | None
    recompute_every_k_layers: int
    selective_policy: Literal["attention_core", "per_op"]
    reshard_after_forward: bool
    regather_for_recompute: bool
    zero3_gather_unit: Literal["layer", "module"]
    shard_group_size: int | None
    pooled_nic_collectives: bool
    overlap_ep_comm: bool
    expert_load_imbalance: float
    attention_kernel: Literal["best", "flash2", "triton"]
    fused_elementwise: bool
    gradient_accumulation_fusion: bool
    async_tp_backward: bool
    virtual_pipeline_stages: int | None
    fsdp: bool | None


class RunLayoutRead(TypedDict, total=False):
    """A run's layout as stored, every default resolved, in the knob names of ``layout`` elsewhere."""

    tp: Required[int]
    pp: Required[int]
    virtual_stages: Required[int]
    dp: Required[int]
    cp: Required[int]
    ep: Required[int]
    micro_batch_sequences: Required[int | None]
    sequence_parallel: Required[bool]
    zero_stage: Required[int]
    distributed_optimizer: Required[bool]
    fp32_grad_accumulation: Required[bool]
    recompute: Required[Literal["none", "selective", "full"]]
    flash_attention: Required[bool]
    overlap_tp_comm: Required[bool]
    overlap_dp_comm: Required[bool]
    overlap_pp_comm: Required[bool]
    first_stage_layers: Required[int | None]
    last_stage_layers: Required[int | None]
    recompute_every_k_layers: Required[int]
    selective_policy: Required[Literal["attention_core", "per_op"]]
    reshard_after_forward: Required[bool]
    regather_for_recompute: Required[bool]
    zero3_gather_unit: Required[Literal["layer", "module"]]
    shard_group_size: Required[int | None]
    pooled_nic_collectives: Required[bool]
    overlap_ep_comm: Required[bool]
    expert_load_imbalance: Required[float]
    attention_kernel: Required[Literal["best", "flash2", "triton"]]
    fused_elementwise: Required[bool]
    gradient_accumulation_fusion: Required[bool]
    async_tp_backward: Required[bool]


class RunLinks(TypedDict, total=False):
    """RunLinks"""

    self: Required[str]
    measurements: Required[str]
    efficiency: Required[str]


class RunPage(TypedDict, total=False):
    """RunPage"""

    items: Required[list[RunRead]]
    next_cursor: Required[str | None]
    limit: Required[int]
    sort: Required[Literal["started_at", "median_mfu"]]
    order: Required[Literal["asc", "desc"]]


class RunParameterCountsRead(TypedDict, total=False):
    """RunParameterCountsRead"""

    total: Required[int]
    active_per_token: Required[int]
    non_embedding: Required[int]


class RunPredictionRead(TypedDict, total=False):
    """Predicted against measured for a stored run. MFU under the run's `convention` on both sides;"""

    calibration: Required[CalibrationRead]
    layout: Required[LayoutRead]
    global_batch_sequences: Required[int]
    micro_batches_per_step: Required[int]
    predicted_step_time_seconds: Required[float]
    predicted_tokens_per_second: Required[float]
    predicted_mfu: Required[float]
    measured_median_mfu: Required[float | None]
    measured_tokens_per_second_at_median: Required[float | None]
    measured_step_time_seconds_at_median: Required[float | None]
    mfu_gap_points: Required[float | None]
    measured_to_predicted: Required[float | None]
    largest_losses: Required[list[PredictedLossRead]]
    reading: Required[str]
    assumptions: Required[list[str]]
    warnings: Required[list[str]]


class RunRank(TypedDict, total=False):
    """RunRank"""

    run_id: Required[str]
    accelerator: Required[str]
    size_class: Required[Literal["below_1b", "1b_to_10b", "10b_to_100b", "above_100b"]]
    median_mfu: Required[float | None]
    fleet_percentile_rank: Required[float | None]
    fleet_run_count: Required[int | None]
    tenant_percentile_rank: Required[float | None]
    tenant_run_count: Required[int | None]
    note: Required[str]


class RunRead(TypedDict, total=False):
    """RunRead"""

    id: Required[str]
    status: Required[Literal["running", "finished", "failed"]]
    started_at: Required[str]
    finished_at: Required[str | None]
    created_at: Required[str]
    updated_at: Required[str]
    model: Required[ModelRef]
    model_name: Required[str]
    parameters: Required[RunParameterCountsRead]
    size_class: Required[Literal["below_1b", "1b_to_10b", "10b_to_100b", "above_100b"]]
    hardware: Required[HardwareRead]
    accelerator_id: Required[str]
    accelerator_name: Required[str]
    device_count: Required[int]
    precision: Required[Literal["bf16", "fp16", "fp8", "tf32", "fp32", "fp64"]]
    seq_len_tokens: Required[int]
    global_batch_tokens: Required[int]
    global_batch_sequences: Required[int | None]
    parallelism: Required[RunLayoutRead]
    framework: Required[str | None]
    cluster: Required[str | None]
    scheduler_job_id: Required[str | None]
    attempt: Required[int | None]
    tags: Required[list[str]]
    token_budget_tokens: Required[int | None]
    price_per_device_hour: Required[float | None]
    convention: Required[Literal["palm", "6n", "kaplan", "hf_trainer", "megatron", "megatron_causal"]]
    model_flops_per_token: Required[float]
    hardware_flops_per_token: Required[float]
    peak_tflops_per_device: Required[float]
    summary: Required[RunSummary]
    links: Required[RunLinks]


class RunSummary(TypedDict, total=False):
    """Kept up to date on every ingest (no history is read to answer it)."""

    measurement_count: Required[int]
    first_measured_at: Required[str | None]
    latest_step: Required[int | None]
    latest_measured_at: Required[str | None]
    latest_mfu: Required[float | None]
    median_mfu: Required[float | None]
    latest_tokens_per_second: Required[float | None]
    tokens_so_far: Required[int]
    seconds_to_budget: Required[float | None]


class RunUpdate(TypedDict, total=False):
    """Change status, tags, finish time, budget or price. ``running`` → ``finished`` | ``failed``;"""

    status: Literal["running", "finished", "failed"] | None
    finished_at: str | None
    tags: list[str] | None
    add_tags: list[str] | None
    remove_tags: list[str] | None
    token_budget_tokens: int | None
    price_per_device_hour: float | None


class SchedulePhaseRead(TypedDict, total=False):
    """A named stretch of the run: ``start_step ≤ t < end_step``."""

    name: Required[str]
    start_step: Required[int]
    end_step: Required[int]


class SchedulePointRead(TypedDict, total=False):
    """SchedulePointRead"""

    step: Required[int]
    lr: Required[float]


class ScheduleSummaryRead(TypedDict, total=False):
    """ScheduleSummaryRead"""

    kind: Required[str]
    semantics: Required[str]
    past_end: Required[str]
    past_end_note: Required[str]
    peak_lr: Required[float]
    floor_lr: Required[float]
    warmup_start_lr: Required[float]
    final_lr: Required[float]
    warmup_steps: Required[int]
    stable_steps: Required[int]
    decay_steps: Required[int]
    total_steps: Required[int]
    lr_sum: Required[float]
    mean_lr: Required[float]


class SeriesPointRead(TypedDict, total=False):
    """SeriesPointRead"""

    time: Required[str]
    hours_since_first: Required[float]
    step: Required[int | None]
    mfu: Required[float]
    mfu_min: Required[float]
    mfu_max: Required[float]
    tokens_per_second: Required[float | None]
    measurements: Required[int]


class SizeClassRead(TypedDict, total=False):
    """SizeClassRead"""

    name: Required[Literal["below_1b", "1b_to_10b", "10b_to_100b", "above_100b"]]
    min_parameters: Required[int]
    max_parameters_exclusive: Required[float | None]


class StepPredictionRead(TypedDict, total=False):
    """StepPredictionRead"""

    model: Required[str]
    seq_len_tokens: Required[int]
    global_batch_sequences: Required[int]
    global_batch_tokens: Required[int]
    micro_batches_per_step: Required[int]
    precision: Required[Literal["bf16", "fp16", "fp8", "tf32", "fp32", "fp64"]]
    convention: Required[Literal["palm", "6n", "kaplan", "hf_trainer", "megatron", "megatron_causal"]]
    cluster: Required[ClusterRead]
    layout: Required[LayoutRead]
    calibration: Required[CalibrationRead]
    step_time_seconds: Required[float]
    tokens_per_second: Required[float]
    tokens_per_second_per_device: Required[float]
    mfu: Required[float]
    hfu: Required[float]
    achieved_tflops_per_device: Required[float]
    model_flops_per_step: Required[float]
    hardware_flops_per_step: Required[float]
    bubble_fraction: Required[float]
    tensor_parallel_comm_seconds: Required[float]
    data_parallel_comm_seconds: Required[float]
    pipeline_p2p_seconds: Required[float]
    fits: Required[bool | None]
    memory: Required[MemorySummaryRead]
    breakdown: Required[list[BreakdownItemRead]]
    mfu_gap: Required[MfuGapRead]
    reading: Required[str]
    regimes: Required[list[str]]
    uncertainty_mfu_points: Required[float | None]
    assumptions: Required[list[str]]
    warnings: Required[list[str]]


class StepPredictionRequest(TypedDict, total=False):
    """A model, a cluster, a layout and a global batch → the predicted step."""

    seq_len_tokens: Required[int]
    global_batch_sequences: int | None
    global_batch_tokens: int | None
    model: Required[ModelRef]
    cluster: Required[ClusterIn]
    layout: Required[LayoutIn]
    precision: Literal["bf16", "fp16", "fp8", "tf32", "fp32", "fp64"]
    optimizer: Literal["adam", "adam_mixed", "adam_fp32", "sgd_momentum", "adafactor", "adam_8bit"]
    convention: Literal["palm", "6n", "kaplan", "hf_trainer", "megatron", "megatron_causal"]
    dropout: bool
    calibration: CalibrationIn | Literal["fleet", "tenant"] | None


class ThroughputIn(TypedDict, total=False):
    """One measured throughput, in exactly one of four forms: ``tokens_per_second`` (global),"""

    tokens_per_second: float | None
    tokens_per_second_per_device: float | None
    step_time_seconds: float | None
    global_batch_tokens: int | None
    global_batch_sequences: int | None
    sequences_per_second: float | None


class ThroughputItem(TypedDict, total=False):
    """One measured throughput, in exactly one of four forms: ``tokens_per_second`` (global),"""

    tokens_per_second: float | None
    tokens_per_second_per_device: float | None
    step_time_seconds: float | None
    global_batch_tokens: int | None
    global_batch_sequences: int | None
    sequences_per_second: float | None


class ThroughputItemBatchItem(TypedDict, total=False):
    """One measured throughput, in exactly one of four forms: ``tokens_per_second`` (global),"""

    tokens_per_second: float | None
    tokens_per_second_per_device: float | None
    step_time_seconds: float | None
    global_batch_tokens: int | None
    global_batch_sequences: int | None
    sequences_per_second: float | None


class TradeoffRead(TypedDict, total=False):
    """Kaplan Eq. 5.4–5.5 at one batch: S = S_min·(1 + B_crit/B), E = E_min·(1 + B/B_crit)."""

    batch_tokens: Required[float]
    critical_batch_tokens: Required[float]
    batch_over_critical: Required[float]
    regime: Required[Literal["below", "near", "above"]]
    steps_over_min: Required[float]
    data_over_min: Required[float]
    doubling_steps_cut_fraction: Required[float]
    doubling_extra_data_fraction: Required[float]
    summary: Required[str]


class TrainingEstimateRead(TypedDict, total=False):
    """TrainingEstimateRead"""

    mfu_source: Required[Literal["given", "predicted"]]
    prediction: Required[PredictionSummaryRead | None]
    total_training_flops: Required[float]
    tokens: Required[float | None]
    model_flops_per_token: Required[float | None]
    device_count: Required[int]
    accelerator: Required[AcceleratorBrief]
    precision: Required[Literal["bf16", "fp16", "fp8", "tf32", "fp32", "fp64"]]
    peak_tflops_per_device: Required[float]
    price_per_device_hour: Required[float | None]
    convention: Required[Literal["palm", "6n", "kaplan", "hf_trainer", "megatron", "megatron_causal"]]
    at_given_mfu: Required[JobCostRead]
    at_other_mfus: Required[list[JobCostRead]]
    summary: Required[str]


class TrainingEstimateRequest(TypedDict, total=False):
    """TrainingEstimateRequest"""

    model: ModelRef | None
    seq_len_tokens: int | None
    total_training_flops: float | None
    hardware: Required[HardwareRef]
    precision: Literal["bf16", "fp16", "fp8", "tf32", "fp32", "fp64"]
    token_budget_tokens: float | None
    total_steps: int | None
    global_batch_tokens: int | None
    mfu: float | None
    predict: PredictMfuIn | None
    price_per_device_hour: float | None
    convention: Literal["palm", "6n", "kaplan", "hf_trainer", "megatron", "megatron_causal"]
    tokens: float | None
    steps: int | None
    batch_tokens: int | None


class WarmupAdviceRead(TypedDict, total=False):
    """WarmupAdviceRead"""

    warmup_steps: Required[int | None]
    warmup_fraction: Required[float]
    reason: Required[str]


#: operationId -> (method, path) of every operation in the contract
OPERATIONS: dict[str, tuple[str, str]] = {
    "get_health": ("GET", "/healthz"),
    "get_readiness": ("GET", "/readyz"),
    "get_metrics": ("GET", "/metrics"),
    "get_problem_type": ("GET", "/problems/{slug}"),
    "list_model_presets": ("GET", "/v1/models"),
    "get_model_preset": ("GET", "/v1/models/{preset_id}"),
    "list_accelerators": ("GET", "/v1/hardware"),
    "get_accelerator": ("GET", "/v1/hardware/{accelerator_id}"),
    "compute_flops": ("POST", "/v1/flops"),
    "compute_mfu": ("POST", "/v1/mfu"),
    "compute_mfu_batch": ("POST", "/v1/mfu/batch"),
    "estimate_training": ("POST", "/v1/estimates/training"),
    "estimate_memory": ("POST", "/v1/memory"),
    "predict_step_time": ("POST", "/v1/predictions/step"),
    "plan_parallelism": ("POST", "/v1/plans/parallelism"),
    "compute_lr_schedule": ("POST", "/v1/schedules/lr"),
    "advise_learning_rate": ("POST", "/v1/advice/lr"),
    "advise_batch_size": ("POST", "/v1/advice/batch"),
    "compute_optimal_size": ("POST", "/v1/compute-optimal"),
    "compare_runs": ("POST", "/v1/runs/compare"),
    "create_run": ("POST", "/v1/runs"),
    "list_runs": ("GET", "/v1/runs"),
    "get_run": ("GET", "/v1/runs/{run_id}"),
    "update_run": ("PATCH", "/v1/runs/{run_id}"),
    "delete_run": ("DELETE", "/v1/runs/{run_id}"),
    "add_measurements": ("POST", "/v1/runs/{run_id}/measurements"),
    "list_measurements": ("GET", "/v1/runs/{run_id}/measurements"),
    "get_run_efficiency": ("GET", "/v1/runs/{run_id}/efficiency"),
    "get_fleet_mfu_stats": ("GET", "/v1/stats/mfu"),
    "add_events": ("POST", "/v1/runs/{run_id}/events"),
    "get_goodput": ("GET", "/v1/runs/{run_id}/goodput"),
}
