"""The step-time model proper: one prediction from the per-layer costs of :mod:`service.domain.step_costs`
(the terms are described in :mod:`service.domain.performance`'s docstring), the additive breakdown and
the prediction's types. Split from :mod:`service.domain.performance`, which re-exports these names."""

from __future__ import annotations

from dataclasses import dataclass, fields

from service.domain.flops import Convention, flops_per_token
from service.domain.hardware import Precision, peak_flops
from service.domain.hardware_behaviour import Calibration, behaviour_for
from service.domain.memory import (
    MemoryEstimate,
    Optimizer,
    ParallelLayout,
    optimizer_state_bytes,
    stage_layer_counts,
    stage_parameters,
)
from service.domain.memory_states import FP32_BYTES
from service.domain.models import ModelSpec
from service.domain.regimes import REGIME_MAE_MFU_POINTS, prediction_regimes
from service.domain.step_costs import (
    KERNEL_OVERHEAD_SECONDS,
    Cluster,
    _layer_costs,
    _link,
    _ring_allreduce,
    _ring_gather,
)

#: first for parameters; all compute for ZeRO-3) that data-parallel communication can use. Fitted.
DP_OVERLAP_FRACTION = 0.955
#: Share of tensor-parallel communication hidden with ``overlap_tp_comm`` (Transformer Engine
#: userbuffers GEMM/communication overlap). Fitted.
TP_OVERLAP_FRACTION = 0.955
#: Share of pipeline p2p time hidden with ``overlap_pp_comm`` (sends on a separate stream). Fitted.
PP_OVERLAP_FRACTION = 0.955
#: Share of the SMs a running NCCL collective occupies: up to 16 channels (NCCL_MAX_NCHANNELS default
#: on NVLink/IB systems), one thread block each, of the 108 SMs of an A100 / 132 of an H100 (NCCL
#: environment-variable docs; CUDA occupancy).
NCCL_SM_SHARE = 0.12
#: Weight and bias tensors of one transformer layer (QKV, output, two or three MLP matrices, their
#: biases and two norms' scales/shifts): the kernels an unfused gradient accumulation launches.
GRADIENT_TENSORS_PER_LAYER = 12
#: Share of a dense layer's GEMM FLOPs in its column-parallel projections (QKV 3h², MLP up 4h² of 12h²).
COLUMN_PARALLEL_GEMM_SHARE = 7.0 / 12.0


@dataclass(frozen=True, slots=True)
class StepBreakdown:
    """Seconds per step by cause; the fields sum to the step time (module docstring)."""

    ideal_matmul_seconds: float
    matmul_inefficiency_seconds: float
    memory_bound_seconds: float
    exposed_tensor_parallel_comm_seconds: float
    exposed_context_parallel_comm_seconds: float
    exposed_expert_parallel_comm_seconds: float
    exposed_data_parallel_comm_seconds: float
    exposed_pipeline_p2p_seconds: float
    pipeline_bubble_seconds: float
    recompute_seconds: float
    optimizer_step_seconds: float
    kernel_overhead_seconds: float

    @property
    def total_seconds(self) -> float:
        return sum(getattr(self, f.name) for f in fields(self))

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, slots=True)
class StepPrediction:
    """A predicted training step. ``mfu``/``hfu`` under ``convention``; ``memory`` from
    :func:`service.domain.memory.estimate_memory`; communication totals before overlap."""

    step_time_seconds: float
    tokens_per_second: float
    tokens_per_second_per_device: float
    mfu: float
    hfu: float
    achieved_tflops_per_device: float
    model_flops_per_step: float
    hardware_flops_per_step: float
    convention: str
    micro_batches_per_step: int
    bubble_fraction: float
    tensor_parallel_comm_seconds: float
    data_parallel_comm_seconds: float
    pipeline_p2p_seconds: float
    breakdown: StepBreakdown
    memory: MemoryEstimate
    layout: ParallelLayout
    precision: str
    calibration: Calibration
    regimes: tuple[str, ...] = ()
    uncertainty_mfu_points: float | None = None


def _predict(
    spec: ModelSpec,
    s: int,
    cluster: Cluster,
    layout: ParallelLayout,
    global_batch: int,
    m: int,
    precision: Precision,
    calibration: Calibration,
    optimizer: Optimizer,
    convention: Convention,
    dropout: bool,
    memory: MemoryEstimate,
) -> StepPrediction:
    acc = cluster.accelerator
    behaviour = behaviour_for(acc)
    peak = peak_flops(acc, precision)
    hbm = acc.hbm_bandwidth_bytes_per_second or 1e12
    tp, pp, dp, cp, v = layout.tp, layout.pp, layout.dp, layout.cp, layout.virtual_stages
    devices = cluster.device_count
    lc = _layer_costs(spec, s, tp, cp, layout.ep, layout.micro_batch_sequences, layout.sequence_parallel,
                      layout.flash_attention, dropout, cluster, precision,
                      calibration.matmul_efficiency_scale, layout.expert_load_imbalance,
                      layout.attention_kernel, layout.fused_elementwise)  # fmt: skip
    overlap = calibration.overlap_fraction
    f_tp = TP_OVERLAP_FRACTION if overlap is None else overlap
    f_dp = DP_OVERLAP_FRACTION if overlap is None else overlap
    f_pp = PP_OVERLAP_FRACTION if overlap is None else overlap

    # One layer, one micro-batch, forward + backward (no recomputation).
    gemm_layer = 3.0 * lc.gemm_f + lc.attn_f + lc.attn_b
    mem_layer = 3.0 * (lc.mem_f + lc.softmax_mem_f)
    tp_total_layer = 4.0 * lc.tp_collective
    tp_exposed_layer = tp_total_layer * (1.0 - f_tp if layout.overlap_tp_comm else 1.0)
    if layout.async_tp_backward and not layout.overlap_tp_comm and tp > 1:
        # Megatron-LM's column-parallel backward (LinearWithGradAccumulationAndAsyncCommunication):
        # the input-gradient all-reduce (with sequence parallelism: its reduce-scatter) runs behind the
        # weight-gradient GEMM, and with sequence parallelism the input is all-gathered again for that
        # GEMM behind the input-gradient GEMM. QKV and the MLP's first projection are column-parallel:
        # 7/12 of a dense layer's GEMM FLOPs. Hidden at most what those GEMMs take.
        column_gemm = COLUMN_PARALLEL_GEMM_SHARE * lc.gemm_f
        if layout.sequence_parallel:
            tp_total_layer = 5.0 * lc.tp_collective
            hidden = 2.0 * min(lc.tp_collective, column_gemm)
        else:
            hidden = min(2.0 * lc.tp_collective, column_gemm)
        tp_exposed_layer = tp_total_layer - hidden
    ep_total_layer = 4.0 * lc.ep_all_to_all
    if layout.overlap_ep_comm:
        # DualPipe-style overlap: a micro-batch's dispatch/combine run behind another's compute.
        ep_layer = max(ep_total_layer - f_dp * (gemm_layer + mem_layer), 0.0)
    else:
        ep_layer = ep_total_layer
    cp_layer = max(0.0, lc.cp_exchange_f - lc.attn_f) + max(0.0, 2 * lc.cp_exchange_f - lc.attn_b)
    kernels = 3.0 * lc.kernels_f
    if layout.recompute == "full":
        # One layer in k is checkpointed (k = 1: every layer) and re-runs its forward in backward.
        share = 1.0 / layout.recompute_every_k_layers
        tp_re = 2.0 * lc.tp_collective * (1.0 - f_tp if layout.overlap_tp_comm else 1.0)
        ep_re = 2.0 * lc.ep_all_to_all * (ep_layer / ep_total_layer if ep_total_layer else 1.0)
        re_layer = share * (lc.gemm_f + lc.attn_f + lc.mem_f + lc.softmax_mem_f + tp_re + ep_re)
        tp_total_layer += share * 2.0 * lc.tp_collective
        kernels += share * lc.kernels_f
    elif layout.recompute == "selective" and layout.selective_policy == "per_op":
        # torchtitan per-op SAC: every other matmul and the memory-bound ops re-run; attention is saved.
        re_layer = 0.5 * lc.gemm_f + lc.mem_f + lc.softmax_mem_f
        kernels += lc.kernels_f - lc.attention_kernels_f
    elif layout.recompute == "selective":
        re_layer = lc.attn_f + lc.softmax_mem_f
        kernels += lc.attention_kernels_f
    else:
        re_layer = 0.0
    sp_params = stage_parameters(spec, tp, pp, layout.ep, layout.first_stage_layers, layout.last_stage_layers)
    state = optimizer_state_bytes(optimizer, precision, fp32_grad_accumulation=layout.fp32_grad_accumulation)
    if layout.fp32_grad_accumulation and not layout.gradient_accumulation_fusion:
        # Unfused fp32 gradient accumulation: after each micro-batch's backward every local weight's
        # 16-bit gradient is added into its fp32 main_grad by a separate kernel (Megatron-LM's grad hook
        # ``param.main_grad.add_(param.grad)``; ``--gradient-accumulation-fusion`` folds it into the
        # weight-gradient GEMM, wgrad_gemm_accum_fp32): read the model-dtype gradient (2 bytes), read
        # and write the fp32 one (4 + 4), one kernel per weight and bias tensor.
        acc_params = sp_params.layer_dense + sp_params.layer_expert
        acc_bytes = acc_params * (state.weight_bytes + 2 * FP32_BYTES)
        mem_layer += acc_bytes / (hbm * behaviour.memory_efficiency(acc_bytes / GRADIENT_TENSORS_PER_LAYER))
        kernels += GRADIENT_TENSORS_PER_LAYER
    kernel_layer = kernels * KERNEL_OVERHEAD_SECONDS
    layer_time = gemm_layer + mem_layer + tp_exposed_layer + ep_layer + cp_layer + re_layer + kernel_layer

    L = spec.n_layers
    first_layers, middle_layers, last_layers = stage_layer_counts(
        L, pp, layout.first_stage_layers, layout.last_stage_layers
    )
    logits_gemm = 3.0 * lc.logits_f
    logits_mem = 3.0 * lc.logits_mem_f
    logits_kernels = 9.0 * KERNEL_OVERHEAD_SECONDS  # final norm, logits GEMM, cross-entropy; ×3
    embed_mem = 3.0 * lc.embed_mem_f
    if pp == 1:
        stage_time = L * layer_time + logits_gemm + logits_mem + logits_kernels + embed_mem
        stage_layers = L
    else:
        first_time = first_layers * layer_time + embed_mem
        last_time = last_layers * layer_time + logits_gemm + logits_mem + logits_kernels
        middle_time = middle_layers * layer_time if pp > 2 else 0.0
        stage_time = max(first_time, last_time, middle_time)
        # The stage that sets the pace is the one whose layers the data-parallel traffic rides on.
        stage_layers = (
            last_layers
            if stage_time == last_time
            else first_layers
            if stage_time == first_time
            else middle_layers
        )
    # Averages over stages (per device, per micro-batch): what each device does on average.
    avg_gemm = (L * gemm_layer + logits_gemm) / pp
    avg_mem = (L * mem_layer + logits_mem + embed_mem) / pp
    avg_tp = L * tp_exposed_layer / pp
    avg_ep = L * ep_layer / pp
    avg_cp = L * cp_layer / pp
    avg_re = L * re_layer / pp
    avg_kernel = (L * kernel_layer + logits_kernels) / pp
    avg_time = avg_gemm + avg_mem + avg_tp + avg_ep + avg_cp + avg_re + avg_kernel
    # Fill and drain: the first micro-batch's forward and the last one's backward pass through every
    # stage once, each at its own pace (Σ tᵢ = p·avg); only the steady state runs at the slowest
    # stage's pace. So 1F1B takes (m − 1)·t_max + p·avg = m·t_max + (p − 1)·avg − (t_max − avg);
    # interleaving divides the fill by v (Narayanan et al. 2021 §2.2.2).
    fill_time = avg_time
    bubble = (pp - 1) / v * fill_time + m * max(stage_time - avg_time, 0.0)

    # Pipeline p2p.
    dpn = cluster.devices_per_node
    pp_total = 0.0
    pp_exposed = 0.0
    if pp > 1:
        span = tp * cp * dp * pp
        bw, lat = _link(cluster, behaviour, span, 1)
        sends = 2.0 * m * v
        pp_total = sends * (lc.p2p_send / bw + lat)
        pp_exposed = sends * (lc.p2p_send / bw * (1.0 - f_pp if layout.overlap_pp_comm else 1.0) + lat)

    # Data-parallel communication.
    dense_params = max(
        sp_params.first_dense, sp_params.last_dense, sp_params.layers_middle_stage * sp_params.layer_dense
    )
    expert_params = max(sp_params.first_expert, sp_params.last_expert)
    grad_bytes = state.gradient_bytes
    weight_bytes = state.weight_bytes
    n_dp = dp * cp
    zero = layout.zero_stage
    # Hybrid sharding: ZeRO collectives within groups of shard_group_size, an all-reduce of the shard
    # across the groups once per step.
    n_shard = layout.shard_degree if zero >= 1 else n_dp
    n_replicas = n_dp // n_shard
    group_stride = tp * cp
    # A ring over r ranks per node pools their r NICs (NCCL's rail-aligned channels: only one hop in r
    # crosses the network). Without pooling each rank's share crosses its own NIC: DeepSpeed ZeRO-3's
    # per-layer gathers in 2021 ran at one HDR NIC per A100 (Narayanan et al. 2021 Table 2: 175B at
    # 768 and 1,536 GPUs, the step time flat at the bytes moved over 25 GB/s).
    pooled = max(min(dpn // group_stride, n_shard), 1) if group_stride < dpn else 1
    ranks_per_node = pooled if layout.pooled_nic_collectives else 1
    bw, lat = _link(cluster, behaviour, group_stride * n_shard if n_shard > 1 else 1, ranks_per_node)
    n_eshard = max(n_shard // layout.ep, 1)
    bw_e, lat_e = _link(
        cluster, behaviour, group_stride * layout.ep * n_eshard, max(ranks_per_node // layout.ep, 1)
    )
    fwd_layer = (
        lc.gemm_f
        + lc.attn_f
        + lc.mem_f
        + lc.softmax_mem_f
        + tp_exposed_layer / 2
        + lc.kernels_f * KERNEL_OVERHEAD_SECONDS
    )
    bwd_layer = max(layer_time - fwd_layer, 0.0)
    fwd_stage = stage_layers * fwd_layer
    bwd_stage = max(stage_time - fwd_stage, 0.0)
    replica_grads = 0.0
    if n_replicas > 1:
        rbw, rlat = _link(cluster, behaviour, group_stride * n_dp, 1)
        replica_grads = _ring_allreduce(n_replicas, dense_params * grad_bytes / n_shard, rbw, rlat)
    if zero == 0:
        grads = _ring_allreduce(n_dp, dense_params * grad_bytes, bw, lat) + _ring_allreduce(
            n_dp // layout.ep if n_dp >= layout.ep else 1, expert_params * grad_bytes, bw_e, lat_e
        )
        params = 0.0
    elif zero in (1, 2):
        grads = (
            _ring_gather(n_shard, dense_params * grad_bytes, bw, lat)
            + _ring_gather(n_eshard, expert_params * grad_bytes, bw_e, lat_e)
            + replica_grads
        )
        params = _ring_gather(n_shard, dense_params * weight_bytes, bw, lat) + _ring_gather(
            n_eshard, expert_params * weight_bytes, bw_e, lat_e
        )
    else:
        # ZeRO-3 / FSDP, per layer and micro-batch: gather the weights for forward, again for backward
        # unless kept (reshard_after_forward), again for a checkpointed layer's recomputation where the
        # framework releases them in between (DeepSpeed); reduce-scatter the gradients after backward.
        layers_here = max(stage_layers, 1)
        dense_layer = dense_params / layers_here
        expert_layer = expert_params / layers_here
        gather_l = _ring_gather(n_shard, dense_layer * weight_bytes, bw, lat) + _ring_gather(
            n_eshard, expert_layer * weight_bytes, bw_e, lat_e
        )
        rs_l = _ring_gather(n_shard, dense_layer * grad_bytes, bw, lat) + _ring_gather(
            n_eshard, expert_layer * grad_bytes, bw_e, lat_e
        )
        back_gathers = 1.0 if layout.reshard_after_forward else 0.0
        if layout.regather_for_recompute and layout.recompute == "full":
            back_gathers += 1.0 / layout.recompute_every_k_layers
        per_layer_total = gather_l * (1.0 + back_gathers) + rs_l
        grads = m * layers_here * rs_l + replica_grads
        params = m * layers_here * gather_l * (1.0 + back_gathers)
        if layout.overlap_dp_comm:
            # Prefetch one layer ahead: a layer's collectives hide behind its neighbour's compute
            # (FSDP forward/backward prefetch); the first gather and the last reduce-scatter of each
            # micro-batch cannot hide.
            hidden_f = min(gather_l, f_dp * fwd_layer)
            hidden_b = min(gather_l * back_gathers + rs_l, f_dp * bwd_layer)
            zero3_exposed = m * (layers_here * (per_layer_total - hidden_f - hidden_b) + gather_l + rs_l)
            zero3_exposed = min(zero3_exposed, m * layers_here * per_layer_total)
        else:
            zero3_exposed = m * layers_here * per_layer_total
        _ = per_layer_total
    dp_total = grads + params
    if not layout.overlap_dp_comm or dp_total == 0.0:
        dp_exposed = dp_total
    elif zero == 3:
        dp_exposed = zero3_exposed + max(replica_grads - f_dp * bwd_layer, 0.0)
    else:
        # Gradients reduce behind the last micro-batch's backward and the pipeline drain; parameters
        # gather behind the first micro-batch's forward and the pipeline fill (half the bubble each).
        half_bubble = 0.5 * (pp - 1) / v * stage_time
        dp_exposed = max(grads - f_dp * (bwd_stage + half_bubble), 0.0) + max(
            params - f_dp * (fwd_stage + half_bubble), 0.0
        )

    # Hidden data-parallel traffic still takes the SMs its NCCL kernels run on: the compute it overlaps
    # runs that much slower.
    hidden_dp = max(dp_total - dp_exposed, 0.0)
    dp_exposed += hidden_dp * NCCL_SM_SHARE / (1.0 - NCCL_SM_SHARE)

    # Optimizer step: memory-bound over the local parameters.
    shard = n_shard if zero >= 1 else 1
    shard_e = n_eshard if zero >= 1 else 1
    local_params = dense_params / shard + expert_params / shard_e
    # Adam reads and writes its state (master weights, m, v), reads the gradient and zeroes it, and
    # writes the 16-bit weights. Around it: the gradient norm for clipping reads the gradients once
    # (Megatron-LM clip_grad 1.0, torchtitan max_norm 1.0); fp16 loss scaling unscales them in place
    # first (torch._amp_foreach_non_finite_check_and_unscale_: read and write); the copy of the fp32
    # master weights into the 16-bit model weights reads the master again (Megatron-LM
    # Float16OptimizerWithFloat16Params._copy_main_params_to_model_params).
    opt_bytes_per_param = 2.0 * state.optimizer_bytes + 3.0 * grad_bytes + weight_bytes
    if precision == "fp16":
        opt_bytes_per_param += 2.0 * grad_bytes
    if weight_bytes < FP32_BYTES:
        opt_bytes_per_param += FP32_BYTES
    opt_bytes = local_params * opt_bytes_per_param
    optimizer_time = opt_bytes / (hbm * behaviour.memory_efficiency(opt_bytes / 8))

    tokens_per_step = float(global_batch * s)
    useful = flops_per_token(spec, s, convention="megatron_causal").training_flops_per_token
    ideal = useful * tokens_per_step / devices / peak
    compute_time = m * avg_gemm
    breakdown = StepBreakdown(
        ideal_matmul_seconds=ideal,
        matmul_inefficiency_seconds=compute_time - ideal,
        memory_bound_seconds=m * avg_mem,
        exposed_tensor_parallel_comm_seconds=m * avg_tp,
        exposed_context_parallel_comm_seconds=m * avg_cp,
        exposed_expert_parallel_comm_seconds=m * avg_ep,
        exposed_data_parallel_comm_seconds=dp_exposed,
        exposed_pipeline_p2p_seconds=pp_exposed,
        pipeline_bubble_seconds=bubble,
        recompute_seconds=m * avg_re,
        optimizer_step_seconds=optimizer_time,
        kernel_overhead_seconds=m * avg_kernel,
    )
    step = m * stage_time + (pp - 1) / v * fill_time + dp_exposed + pp_exposed + optimizer_time
    counted = flops_per_token(spec, s, convention=convention, recompute=layout.recompute)
    model_flops = counted.training_flops_per_token * tokens_per_step
    hardware_flops = counted.hardware_flops_per_token * tokens_per_step
    capacity = devices * peak * step
    return StepPrediction(
        step_time_seconds=step,
        tokens_per_second=tokens_per_step / step,
        tokens_per_second_per_device=tokens_per_step / step / devices,
        mfu=model_flops / capacity,
        hfu=hardware_flops / capacity,
        achieved_tflops_per_device=model_flops / step / devices / 1e12,
        model_flops_per_step=model_flops,
        hardware_flops_per_step=hardware_flops,
        convention=convention,
        micro_batches_per_step=m,
        bubble_fraction=(pp - 1) / (v * m),
        tensor_parallel_comm_seconds=m * L * tp_total_layer / pp,
        data_parallel_comm_seconds=dp_total,
        pipeline_p2p_seconds=pp_total,
        breakdown=breakdown,
        memory=memory,
        layout=layout,
        precision=precision,
        calibration=calibration,
        regimes=(regimes := prediction_regimes(spec, s, cluster, layout, precision, m)),
        uncertainty_mfu_points=max(REGIME_MAE_MFU_POINTS[r] for r in regimes),
    )
