"""Colours, sizes and number formatting shared by every chart.

Colours are keyed by name, never by position: "optimizer step" is the same colour in every chart
that shows it, whatever else the chart holds and in whatever order.
"""

from __future__ import annotations

import math
import zlib

__all__ = [
    "COMPONENT_COLOURS",
    "DPI",
    "PHASE_COLOURS",
    "SIZES",
    "colour_for",
    "format_number",
    "phase_colour",
]

#: Pixel sizes a chart is offered at (width, height); "medium" is the default.
SIZES: dict[str, tuple[int, int]] = {"small": (640, 400), "medium": (820, 480), "large": (1280, 720)}
DPI = 100

# Step-time breakdown components (the API's BreakdownComponentName): useful work in greens, compute
# losses in warm colours, communication in blues and purples, scheduling losses in greys.
COMPONENT_COLOURS: dict[str, str] = {
    "ideal_matmul": "#2ca02c",
    "matmul_inefficiency": "#98df8a",
    "memory_bound": "#ff7f0e",
    "exposed_tensor_parallel_comm": "#1f77b4",
    "exposed_context_parallel_comm": "#aec7e8",
    "exposed_expert_parallel_comm": "#9467bd",
    "exposed_data_parallel_comm": "#17becf",
    "exposed_pipeline_p2p": "#c5b0d5",
    "pipeline_bubble": "#7f7f7f",
    "recompute": "#8c564b",
    "optimizer_step": "#d62728",
    "kernel_overhead": "#bcbd22",
}

#: LR schedule phases (service.domain.schedules phase names).
PHASE_COLOURS: dict[str, str] = {
    "warmup": "#dd8452",
    "stable": "#55a868",
    "constant": "#55a868",
    "decay": "#4c72b0",
    "cooldown": "#4c72b0",
}

# Series and anything not named above: a name always hashes to the same entry (crc32, not hash(),
# which Python salts per process).
FALLBACK_PALETTE = (
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
)  # fmt: skip


def _key(name: str) -> str:
    return name.strip().lower().replace(" ", "_").replace("-", "_")


def colour_for(name: str) -> str:
    """The fixed colour of a breakdown component (by API name or its spaced label) or any other name."""
    key = _key(name)
    if key in COMPONENT_COLOURS:
        return COMPONENT_COLOURS[key]
    return FALLBACK_PALETTE[zlib.crc32(key.encode()) % len(FALLBACK_PALETTE)]


def phase_colour(name: str, index: int) -> str:
    """A schedule phase's colour: by name where known, else by position among the phases."""
    return PHASE_COLOURS.get(_key(name), FALLBACK_PALETTE[index % len(FALLBACK_PALETTE)])


def format_number(value: float) -> str:
    """Short axis/label text: 0, 0.5, 12, 1.5k, 1.2M, 3B, 3e-4, 2.5e-5."""
    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else str(value)
    a = abs(value)
    sign = "-" if value < 0 else ""
    for limit, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if a >= limit:
            return f"{sign}{_trim(a / limit)}{suffix}"
    if a >= 0.01:
        return f"{sign}{_trim(a)}"
    exp = math.floor(math.log10(a))
    mant = a / 10**exp
    if round(mant, 2) >= 10:
        mant, exp = mant / 10, exp + 1
    return f"{sign}{_trim(mant)}e{exp}"


def _trim(x: float) -> str:
    text = f"{x:.3g}"
    if "e" in text:  # e.g. 1e+03 after rounding: print plainly
        text = f"{x:.0f}"
    return text
