"""Model FLOPs Utilization (MFU) and Hardware FLOPs Utilization (HFU) from a measured throughput.

MFU = model FLOPs per token × global tokens/s ÷ (devices × dense peak FLOP/s per device); model FLOPs
exclude recomputation. HFU uses the FLOPs the hardware executed, recomputation included (Chowdhery et
al. 2022, Appendix B; ``reference/flops_and_mfu.md``). Both are fractions in [0, 1]: a value above 1
is :class:`ImplausibleResult` naming the likely cause. Typical LLM training MFU is 0.30-0.60.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from service.domain.errors import ImplausibleResult, InvalidInput
from service.domain.flops import DEFAULT_CONVENTION, Convention, EmbeddingPolicy, Recompute, flops_per_token
from service.domain.hardware import TERA, Accelerator, Precision, peak_flops
from service.domain.models import ModelSpec

Band = Literal["below_typical", "typical", "above_typical"]

#: Typical LLM-training MFU range (reference/flops_and_mfu.md, "Typical LLM training MFU is 30-60%").
TYPICAL_MFU_LOW = 0.30
TYPICAL_MFU_HIGH = 0.60
#: Typical MFU against the peak of the run's precision, where it differs from the BF16-era 30-60%.
#: FP8 (against the FP8 peak, twice BF16's): FP8 runs train 1.2-1.5x faster end to end than BF16
#: (PyTorch blog "Supercharging training using float8 and FSDP2", 2024: 1.28-1.5x on Llama 3 8B-405B),
#: since only the matmuls speed up, so 30-60% of the BF16 peak becomes ~18-45% of the FP8 peak:
#: 15-45% with the ends rounded out. FP32 / TF32 runs are judged against their own (lower) peak as BF16.
TYPICAL_MFU_BANDS: dict[str, tuple[float, float]] = {"fp8": (0.15, 0.45)}

#: Beyond this overshoot a single wrong factor (devices, per-device vs global, precision) cannot explain
#: an MFU above 1, so the answer points at the throughput's unit instead of listing factors.
MAX_EXPLAINED_OVERSHOOT = 1000.0
#: Below this an MFU is a unit error, not a slow job: one H100 at 0.01 token/s on an 8B model is 6e-7
#: (a stalled job reports no throughput at all rather than a rate like this).
MIN_PLAUSIBLE_MFU = 1e-7


# --------------------------------------------------------------------------------------------------
# Throughput forms


@dataclass(frozen=True, slots=True)
class GlobalTokensPerSecond:
    """Tokens per second over the whole job (all devices)."""

    tokens_per_second: float


@dataclass(frozen=True, slots=True)
class TokensPerSecondPerDevice:
    """Tokens per second per device (torchtitan's ``tps``, MosaicML's T/s/GPU)."""

    tokens_per_second_per_device: float


@dataclass(frozen=True, slots=True)
class StepTime:
    """Seconds per optimizer step and the global batch, in tokens or in sequences (exactly one)."""

    step_time_seconds: float
    global_batch_tokens: int | None = None
    global_batch_sequences: int | None = None


@dataclass(frozen=True, slots=True)
class SamplesPerSecond:
    """Sequences (samples) per second over the whole job."""

    sequences_per_second: float


Throughput = GlobalTokensPerSecond | TokensPerSecondPerDevice | StepTime | SamplesPerSecond

_RATE_FORMS: dict[str, type[GlobalTokensPerSecond | TokensPerSecondPerDevice | SamplesPerSecond]] = {
    "tokens_per_second": GlobalTokensPerSecond,
    "tokens_per_second_per_device": TokensPerSecondPerDevice,
    "sequences_per_second": SamplesPerSecond,
}


def throughput_from_fields(fields: Mapping[str, Any]) -> tuple[str, float, Throughput]:
    """The form sent, its value and the throughput, from one given as named fields (the API's
    ``throughput`` object: one rate form, or ``step_time_seconds`` with ``global_batch_tokens`` or
    ``global_batch_sequences``; the rate forms are read first)."""
    for form, kind in _RATE_FORMS.items():
        value = fields.get(form)
        if value is not None:
            return form, value, kind(value)
    value = fields.get("step_time_seconds")
    if value is None:
        raise InvalidInput(
            f"give the throughput as one of {', '.join(_RATE_FORMS)} or step_time_seconds.",
            field="throughput",
        )
    throughput = StepTime(
        value,
        global_batch_tokens=fields.get("global_batch_tokens"),
        global_batch_sequences=fields.get("global_batch_sequences"),
    )
    return "step_time_seconds", value, throughput


def _positive(value: float | None, field: str, what: str) -> float:
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{field} is required: give {what}.", field=field)
    if not math.isfinite(value) or value <= 0:
        raise InvalidInput(f"{field} must be a positive finite number ({what}), got {value!r}.", field=field)
    return float(value)


def _seq_len(seq_len_tokens: int | None, form: str) -> int:
    if seq_len_tokens is None:
        raise InvalidInput(
            f"{form} needs seq_len_tokens to turn sequences into tokens.", field="seq_len_tokens"
        )
    if isinstance(seq_len_tokens, bool) or not isinstance(seq_len_tokens, int) or seq_len_tokens <= 0:
        raise InvalidInput(
            f"seq_len_tokens must be a positive integer, got {seq_len_tokens!r}.", field="seq_len_tokens"
        )
    return seq_len_tokens


def global_tokens_per_second(
    throughput: Throughput, *, device_count: int, seq_len_tokens: int | None = None
) -> float:
    """Any throughput form as global tokens/s (``seq_len_tokens`` needed for the sequence forms)."""
    if isinstance(throughput, GlobalTokensPerSecond):
        return _positive(throughput.tokens_per_second, "throughput.tokens_per_second", "global tokens/s")
    if isinstance(throughput, TokensPerSecondPerDevice):
        per_device = _positive(
            throughput.tokens_per_second_per_device,
            "throughput.tokens_per_second_per_device",
            "tokens/s per device",
        )
        return per_device * device_count
    if isinstance(throughput, SamplesPerSecond):
        rate = _positive(
            throughput.sequences_per_second, "throughput.sequences_per_second", "global sequences/s"
        )
        return rate * _seq_len(seq_len_tokens, "samples/s")
    if isinstance(throughput, StepTime):
        step = _positive(throughput.step_time_seconds, "throughput.step_time_seconds", "seconds per step")
        tokens, sequences = throughput.global_batch_tokens, throughput.global_batch_sequences
        if (tokens is None) == (sequences is None):
            raise InvalidInput(
                "give exactly one of global_batch_tokens and global_batch_sequences with a step time.",
                field="throughput.global_batch_tokens",
            )
        if tokens is not None:
            return _positive(tokens, "throughput.global_batch_tokens", "tokens per step") / step
        batch = _positive(sequences, "throughput.global_batch_sequences", "sequences per step")
        return batch * _seq_len(seq_len_tokens, "a batch in sequences") / step
    raise InvalidInput("unknown throughput form.", field="throughput")


def global_rate_scale(
    throughput: Throughput, *, device_count: int, seq_len_tokens: int | None = None
) -> tuple[float, bool]:
    """Global tokens/s per unit of the throughput's value, and whether the rate is inversely
    proportional to it: every form's rate is ``value × scale`` except a step time's, which is
    ``scale / step_time_seconds`` (its batch fixed). The scale is :func:`global_tokens_per_second` of
    a value of 1, so a rate made from it is that function's to the last bit; ingest normalises up to
    10,000 measurements of one run a request with one scale per form and batch."""
    if isinstance(throughput, StepTime):
        unit: Throughput = StepTime(
            1.0,
            global_batch_tokens=throughput.global_batch_tokens,
            global_batch_sequences=throughput.global_batch_sequences,
        )
        return global_tokens_per_second(unit, device_count=device_count, seq_len_tokens=seq_len_tokens), True
    if isinstance(throughput, GlobalTokensPerSecond | TokensPerSecondPerDevice | SamplesPerSecond):
        unit = type(throughput)(1.0)
        return global_tokens_per_second(unit, device_count=device_count, seq_len_tokens=seq_len_tokens), False
    raise InvalidInput("unknown throughput form.", field="throughput")


# --------------------------------------------------------------------------------------------------
# MFU


@dataclass(frozen=True, slots=True)
class MfuResult:
    """MFU and HFU of one measurement, with the quantities that produced them."""

    mfu: float
    hfu: float
    achieved_tflops_per_device: float
    hardware_tflops_per_device: float
    peak_tflops_per_device: float
    model_flops_per_token: float
    hardware_flops_per_token: float
    tokens_per_second: float
    tokens_per_second_per_device: float
    device_count: int
    precision: Precision
    convention: str
    band: Band
    reading: str
    mfu_vs_bf16_peak: float | None = None
    bf16_peak_tflops_per_device: float | None = None


def typical_mfu_range(precision: str = "bf16") -> tuple[float, float]:
    """The typical MFU band against ``precision``'s own peak (:data:`TYPICAL_MFU_BANDS`)."""
    return TYPICAL_MFU_BANDS.get(precision, (TYPICAL_MFU_LOW, TYPICAL_MFU_HIGH))


def mfu_band(mfu: float, precision: str = "bf16") -> Band:
    low, high = typical_mfu_range(precision)
    if mfu < low:
        return "below_typical"
    if mfu > high:
        return "above_typical"
    return "typical"


def _reading(mfu: float, band: Band, precision: str = "bf16") -> str:
    pct = f"{mfu * 100:.1f}%"
    low, high = typical_mfu_range(precision)
    typical = f"{low * 100:.0f}-{high * 100:.0f}%"
    if precision in TYPICAL_MFU_BANDS:
        typical += f" for {precision.upper()} LLM training (against the {precision.upper()} peak)"
    else:
        typical += " for LLM training"
    if band == "below_typical":
        return (
            f"MFU {pct} is below the typical {typical}: look for exposed communication, "
            "small micro-batches, pipeline bubbles or data-loader stalls."
        )
    if band == "above_typical":
        return (
            f"MFU {pct} is above the typical {typical}: check the FLOPs convention (non-causal attention at "
            "long sequences counts more), the peak precision and the throughput unit."
        )
    return f"MFU {pct} is within the typical {typical}."


def mfu_from_achieved_tflops(achieved_tflops_per_device: float, peak_tflops_per_device: float) -> float:
    """Achieved over peak TFLOP/s per device (the reference's seed example: 140 / 312 ≈ 0.449)."""
    achieved = _positive(achieved_tflops_per_device, "achieved_tflops_per_device", "achieved TFLOP/s")
    peak = _positive(peak_tflops_per_device, "peak_tflops_per_device", "dense peak TFLOP/s")
    return achieved / peak


def _implausible(
    value: float,
    *,
    throughput: Throughput,
    device_count: int,
    precision: Precision,
    accelerator: Accelerator,
) -> ImplausibleResult:
    """MFU > 1: name the likely causes, each with the MFU its correction would give."""
    causes: list[str] = []
    if isinstance(throughput, TokensPerSecondPerDevice) and device_count > 1:
        causes.append(
            f"tokens_per_second_per_device looks like the global rate: read as global it gives "
            f"MFU {value / device_count:.2f}"
        )
    else:
        factor = next((f for f in (2, 4, 8) if value <= f * 1.05), math.ceil(value))
        causes.append(
            f"device_count ({device_count}) may be too small (nodes or packages counted instead of "
            f"devices), or the throughput summed twice: {factor}× the devices gives MFU {value / factor:.2f}"
        )
    own = accelerator.peak_tflops(precision) or 0.0
    faster = [
        (tflops, p)
        for p in accelerator.supported_precisions
        if (tflops := accelerator.peak_tflops(p)) is not None and tflops > own  # type: ignore[arg-type]
    ]
    if faster:
        tflops, name = max(faster)
        causes.append(
            f"the run may have used {name} (peak {tflops:g} TFLOP/s) rather than {precision} ({own:g}): "
            f"against that peak MFU is {value * own / tflops:.2f}"
        )
    if accelerator.is_custom:
        causes.append(
            f"the custom peak may be a sparse figure halved twice or a per-package peak split too far: "
            f"it would have to be {value:.2f}× higher"
        )
    causes.append("the FLOPs per token may count all MoE experts instead of the active ones")
    return ImplausibleResult(
        f"MFU would be {value:.2f}, above 1: the inputs overstate achieved FLOP/s or understate the peak by "
        f"at least {value:.2f}×. Likely causes: " + "; ".join(causes) + ". Correct the input at fault.",
        field="throughput",
    )


def compute_mfu(
    *,
    model_flops_per_token: float,
    accelerator: Accelerator,
    device_count: int,
    precision: Precision,
    throughput: Throughput,
    seq_len_tokens: int | None = None,
    hardware_flops_per_token: float | None = None,
    convention: str = "palm",
) -> MfuResult:
    """MFU and HFU of a measured throughput.

    ``model_flops_per_token`` is the training FLOPs per token without recomputation (from
    :func:`service.domain.flops.flops_per_token`: ``training_flops_per_token``; or a per-step form
    divided by the step's tokens); ``hardware_flops_per_token`` adds recomputation (default: the same,
    so HFU = MFU). For FP8 and other non-BF16 runs on a part with a different BF16 peak,
    ``mfu_vs_bf16_peak`` gives the value against the BF16 peak as well (torchtitan's peak table is BF16).
    """
    if isinstance(device_count, bool) or not isinstance(device_count, int) or device_count <= 0:
        raise InvalidInput(
            f"device_count must be a positive integer, got {device_count!r}.", field="device_count"
        )
    model_flops = _positive(model_flops_per_token, "model_flops_per_token", "model FLOPs per token")
    hardware_flops = (
        model_flops
        if hardware_flops_per_token is None
        else _positive(hardware_flops_per_token, "hardware_flops_per_token", "hardware FLOPs per token")
    )
    if hardware_flops < model_flops:
        raise InvalidInput(
            "hardware_flops_per_token must be at least model_flops_per_token (it adds recomputation).",
            field="hardware_flops_per_token",
        )
    peak = peak_flops(accelerator, precision)
    tokens = global_tokens_per_second(throughput, device_count=device_count, seq_len_tokens=seq_len_tokens)
    capacity = peak * device_count
    mfu = model_flops * tokens / capacity
    hfu = hardware_flops * tokens / capacity
    if not math.isfinite(mfu) or mfu > MAX_EXPLAINED_OVERSHOOT:
        raise ImplausibleResult(
            f"MFU would be {mfu:.3g}, orders of magnitude above 1: the throughput cannot be real for "
            f"{device_count} × {accelerator.display_name}. Check its unit (tokens per second, not per minute; "
            "tokens, not FLOPs) and the form (global vs per device).",
            field="throughput",
        )
    if mfu < MIN_PLAUSIBLE_MFU:
        raise ImplausibleResult(
            f"MFU would be {mfu:.3g}, below {MIN_PLAUSIBLE_MFU:g}: no training job runs this slowly. Check the "
            "throughput's unit (tokens per second, not per hour or per millisecond) and the device count.",
            field="throughput",
        )
    if mfu > 1:
        raise _implausible(
            mfu,
            throughput=throughput,
            device_count=device_count,
            precision=precision,
            accelerator=accelerator,
        )
    if hfu > 1:
        raise ImplausibleResult(
            f"HFU would be {hfu:.2f} (MFU {mfu:.2f}), above 1: the declared recomputation adds more FLOPs "
            "than the hardware can run. Check the recompute mode (full vs selective) and the throughput.",
            field="recompute",
        )
    band = mfu_band(mfu, precision)
    bf16 = accelerator.bf16_tflops
    own_tflops = peak / TERA
    vs_bf16 = None
    if precision != "bf16" and bf16 is not None and bf16 != own_tflops:
        vs_bf16 = model_flops * tokens / (bf16 * TERA * device_count)
    return MfuResult(
        mfu=mfu,
        hfu=hfu,
        achieved_tflops_per_device=model_flops * tokens / device_count / TERA,
        hardware_tflops_per_device=hardware_flops * tokens / device_count / TERA,
        peak_tflops_per_device=own_tflops,
        model_flops_per_token=model_flops,
        hardware_flops_per_token=hardware_flops,
        tokens_per_second=tokens,
        tokens_per_second_per_device=tokens / device_count,
        device_count=device_count,
        precision=precision,
        convention=convention,
        band=band,
        reading=_reading(mfu, band, precision),
        mfu_vs_bf16_peak=vs_bf16,
        bf16_peak_tflops_per_device=bf16 if vs_bf16 is not None else None,
    )


def compute_mfu_for_model(
    spec: ModelSpec,
    seq_len_tokens: int,
    *,
    accelerator: Accelerator,
    device_count: int,
    precision: Precision,
    throughput: Throughput,
    convention: Convention = DEFAULT_CONVENTION,
    recompute: Recompute = "none",
    embedding_policy: EmbeddingPolicy | None = None,
    parameter_count: float | None = None,
) -> MfuResult:
    """MFU/HFU of ``spec`` at ``seq_len_tokens``: FLOPs per token under ``convention`` (cached per spec),
    then :func:`compute_mfu`. HFU counts the declared ``recompute``."""
    flops = flops_per_token(
        spec,
        seq_len_tokens,
        convention=convention,
        recompute=recompute,
        embedding_policy=embedding_policy,
        parameter_count=parameter_count,
    )
    return compute_mfu(
        model_flops_per_token=flops.training_flops_per_token,
        hardware_flops_per_token=flops.hardware_flops_per_token,
        accelerator=accelerator,
        device_count=device_count,
        precision=precision,
        throughput=throughput,
        seq_len_tokens=seq_len_tokens,
        convention=convention,
    )


@dataclass(frozen=True, slots=True)
class RateFactors:
    """What one global token/s is worth for a job: MFU, HFU, achieved TFLOP/s per device and tokens/s
    per device are each proportional to the global rate (the job's FLOPs per token, devices and peak
    fixed), so a measurement's values are its rate times these. Taken from one full
    :func:`compute_mfu` of the job (:meth:`of`), they give the same values one multiply each."""

    mfu: float
    hfu: float
    achieved_tflops_per_device: float
    tokens_per_second_per_device: float

    @classmethod
    def of(cls, result: MfuResult) -> RateFactors:
        rate = result.tokens_per_second
        return cls(
            mfu=result.mfu / rate,
            hfu=result.hfu / rate,
            achieved_tflops_per_device=result.achieved_tflops_per_device / rate,
            tokens_per_second_per_device=result.tokens_per_second_per_device / rate,
        )

    def plausible(self, tokens_per_second: float) -> bool:
        """Whether :func:`compute_mfu` accepts this rate (MFU in [MIN_PLAUSIBLE_MFU, 1], HFU at most 1);
        when not, it is the one to explain why."""
        return (
            MIN_PLAUSIBLE_MFU <= tokens_per_second * self.mfu <= 1.0 and tokens_per_second * self.hfu <= 1.0
        )
