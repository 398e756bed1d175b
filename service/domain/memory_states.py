"""Model-state bytes per parameter: weights, gradients and optimizer state by optimizer and precision,
and what ZeRO sharding leaves on one device (split from :mod:`service.domain.memory`, which re-exports
these names)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from service.domain.errors import InvalidInput
from service.domain.hardware import PRECISIONS, Precision

Optimizer = Literal["adam", "adam_mixed", "adam_fp32", "sgd_momentum", "adafactor", "adam_8bit"]
OPTIMIZER_NAMES: tuple[str, ...] = get_args(Optimizer)

#: Bytes of one fp32 element (fp32 gradients under Megatron's main_grad, logits, log-sum-exp).
FP32_BYTES = 4


@dataclass(frozen=True, slots=True)
class OptimizerStateBytes:
    """Bytes per parameter of one optimizer, before sharding."""

    name: str
    weight_bytes: float
    gradient_bytes: float
    optimizer_bytes: float
    source: str

    @property
    def total_bytes(self) -> float:
        return self.weight_bytes + self.gradient_bytes + self.optimizer_bytes


_ZERO_SRC = "Rajbhandari et al. 2020 (ZeRO, arXiv 1910.02054) §3.1"

#: Bytes per parameter with 16-bit (mixed-precision) weights: 2-byte weights and gradients and an fp32
#: master copy (4) counted in the optimizer state.
OPTIMIZERS: dict[str, OptimizerStateBytes] = {
    "adam_mixed": OptimizerStateBytes(
        "adam_mixed", 2, 2, 12, f"{_ZERO_SRC}: fp32 master 4 + m 4 + v 4 = 12, 16 bytes in all"
    ),
    "adam_fp32": OptimizerStateBytes(
        "adam_fp32", 4, 4, 8, f"{_ZERO_SRC}: fp32 weights 4 + gradients 4 + m, v 8 = 16 (no master copy)"
    ),
    "sgd_momentum": OptimizerStateBytes(
        "sgd_momentum",
        2,
        2,
        8,
        "SGD with momentum (PyTorch torch.optim.SGD): fp32 master 4 + momentum 4; fp32 training: 4+4+4",
    ),
    "adafactor": OptimizerStateBytes(
        "adafactor",
        2,
        2,
        4,
        "Shazeer & Stern 2018 (arXiv 1804.04235): factored second moment O(rows + cols) ≈ 0 per "
        "parameter, no first moment (β1 = 0); fp32 master 4. Approximate",
    ),
    "adam_8bit": OptimizerStateBytes(
        "adam_8bit",
        2,
        2,
        6,
        "Dettmers et al. 2022 (8-bit optimizers, arXiv 2110.02861): m and v in 8 bits (1 + 1) with "
        "block-wise fp32 scales (8/2048 bytes, neglected) + fp32 master 4",
    ),
}

#: The fp32-training variants (no master copy; gradients in fp32).
_FP32_VARIANTS: dict[str, OptimizerStateBytes] = {
    "adam_mixed": OPTIMIZERS["adam_fp32"],
    "adam_fp32": OPTIMIZERS["adam_fp32"],
    "sgd_momentum": OptimizerStateBytes("sgd_momentum", 4, 4, 4, OPTIMIZERS["sgd_momentum"].source),
    "adafactor": OptimizerStateBytes("adafactor", 4, 4, 0, OPTIMIZERS["adafactor"].source),
    "adam_8bit": OptimizerStateBytes("adam_8bit", 4, 4, 2, OPTIMIZERS["adam_8bit"].source),
}

_FP32_PRECISIONS = ("fp32", "tf32", "fp64")


def activation_element_bytes(precision: Precision) -> int:
    """Bytes per stored activation element: 4 for fp32/tf32 (8 for fp64), 2 otherwise (FP8 runs keep
    BF16 activations between FP8 GEMMs in Transformer Engine)."""
    if precision == "fp64":
        return 8
    return 4 if precision in _FP32_PRECISIONS else 2


def optimizer_state_bytes(
    optimizer: Optimizer = "adam", precision: Precision = "bf16", *, fp32_grad_accumulation: bool = False
) -> OptimizerStateBytes:
    """Bytes per parameter (weights, gradients, optimizer state) before sharding.

    ``adam`` is mixed-precision Adam for 16-bit and FP8 precisions and fp32 Adam for fp32/tf32.
    ``fp32_grad_accumulation`` (Megatron ``main_grad``) makes 16-bit gradients 4 bytes (18 in all).
    """
    if optimizer not in OPTIMIZER_NAMES:
        raise InvalidInput(
            f"optimizer must be one of {', '.join(OPTIMIZER_NAMES)}, got {optimizer!r}.", field="optimizer"
        )
    if precision not in PRECISIONS:
        raise InvalidInput(
            f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}.", field="precision"
        )
    name = "adam_mixed" if optimizer == "adam" else optimizer
    table = _FP32_VARIANTS if precision in _FP32_PRECISIONS else OPTIMIZERS
    state = table[name]
    if fp32_grad_accumulation and state.gradient_bytes < FP32_BYTES:
        state = OptimizerStateBytes(
            state.name,
            state.weight_bytes,
            FP32_BYTES,
            state.optimizer_bytes,
            state.source + "; fp32 gradient accumulation (Megatron main_grad): gradients 4 bytes",
        )
    return state


def model_state_bytes_per_parameter(
    state: OptimizerStateBytes, *, zero_stage: int, shard_degree: int
) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per parameter on one device after ZeRO sharding over
    ``shard_degree`` ranks. Stage 1 shards the optimizer, 2 also gradients, 3 also weights."""
    d = float(shard_degree)
    w, g, o = state.weight_bytes, state.gradient_bytes, state.optimizer_bytes
    return (
        w / d if zero_stage >= 3 else w,
        g / d if zero_stage >= 2 else g,
        o / d if zero_stage >= 1 else o,
    )
