"""Charts: one matplotlib renderer for PNG and SVG; nothing clipped, every legend entry present."""

from __future__ import annotations

import math
import struct
import xml.etree.ElementTree as ET
from collections.abc import Callable

import pytest
from matplotlib.figure import Figure

from service import plots
from service.domain.schedules import ScheduleSpec, phases, sample
from service.plots.render import renderer, save

SVG = "{http://www.w3.org/2000/svg}"
LONG_TITLE = "Llama 3.1 405B on 1024 × NVIDIA H100 80GB HBM3: step 12.3 s, MFU 41.2% (palm convention)"
COMPONENTS = [
    ("ideal matmul", 0.9), ("matmul inefficiency", 0.35), ("memory bound", 0.2),
    ("exposed tensor parallel comm", 0.12), ("exposed context parallel comm", 0.04),
    ("exposed expert parallel comm", 0.03), ("exposed data parallel comm", 0.05),
    ("exposed pipeline p2p", 0.02), ("pipeline bubble", 0.15), ("recompute", 0.02),
    ("optimizer step", 0.03), ("kernel overhead", 0.01),
]  # fmt: skip


def _schedule() -> tuple[list[plots.Series], list[plots.Band]]:
    spec = ScheduleSpec(
        kind="warmup_stable_decay", peak_lr=3e-4, total_steps=100_000, warmup_steps=2000, decay_fraction=0.2
    )
    pts = sample(spec, points=200)
    series: list[plots.Series] = [("WSD <cosine> & co", [float(p.step) for p in pts], [p.lr for p in pts])]
    bands: list[plots.Band] = [(p.name, float(p.start_step), float(p.end_step)) for p in phases(spec)]
    return series, bands


def _schedule_figure(size: str) -> Figure:
    series, bands = _schedule()
    return plots.line_chart_figure(LONG_TITLE, "optimizer step", "learning rate", series, bands, size=size)


def _breakdown_figure(size: str) -> Figure:
    return plots.bar_chart_figure(
        LONG_TITLE, "seconds per step", [("tp8 pp4 dp32 b1", COMPONENTS)], size=size
    )


def _mfu_figure(size: str) -> Figure:
    hours = [i / 4 for i in range(80)]
    mfu = [0.4 + 0.03 * math.sin(h) for h in hours]
    return plots.mfu_over_time_figure(
        hours=hours, mfu=mfu, mfu_min=[m - 0.02 for m in mfu], mfu_max=[m + 0.02 for m in mfu],
        median=0.4, model="llama3.1-405b", cluster="1024 × NVIDIA H100 80GB HBM3", run_id="run-7", size=size,
    )  # fmt: skip


def _ramp_figure(size: str) -> Figure:
    xs = [1e8, 1e9, 1e9, 1e10, 1e10, 1e12]
    ys = [1e6, 1e6, 2e6, 2e6, 4e6, 4e6]
    series: list[plots.Series] = [("batch (ramp)", xs, ys), ("critical batch", [1e8, 1e12], [5e5, 8e6])]
    return plots.line_chart_figure(LONG_TITLE, "tokens", "batch", series, log_x=True, log_y=True, size=size)


def _comparison_figure(size: str) -> Figure:
    runs = [
        (f"run_{i:020d} · llama3-8b · {8 * (i + 1)} × h100", 0.30 + 0.02 * i, 0.31 + 0.015 * i)
        for i in range(6)
    ]
    runs.append(("run_empty · llama3-8b · 8 × h100", None, None))
    return plots.run_comparison_figure(
        runs=runs, title=LONG_TITLE, best_run_id="run_00000000000000000005", size=size
    )


def _fleet_figure(size: str) -> Figure:
    rows: list[plots.PercentileRow] = [
        (f"fleet · h100-sxm · {size_class} · {12 + i} runs", 0.2 + i / 50, 0.3, 0.38, 0.45, 0.52)
        for i, size_class in enumerate(["below-1b", "1b-10b", "10b-100b", "100b-plus"])
    ]
    rows.append(("your tenant · a100-80gb · 1b-10b · 2 runs", 0.31, 0.33, 0.35, 0.36, 0.37))
    rows.append(("fleet · mi300x · 1b-10b · 3 runs", None, None, None, None, None))
    return plots.fleet_percentiles_figure(
        rows=rows, title=LONG_TITLE, marker=(1, 0.41, "run_00000000000000000005 (median)"), size=size
    )


KINDS: dict[str, tuple[Callable[[str], Figure], list[str]]] = {
    "schedule": (_schedule_figure, ["WSD <cosine> & co", "warmup", "stable", "decay"]),
    "breakdown": (_breakdown_figure, [name for name, _ in COMPONENTS]),
    "mfu": (_mfu_figure, ["MFU", "min–max", "median 40.0%"]),
    "ramp": (_ramp_figure, ["batch (ramp)", "critical batch"]),
    "comparison": (_comparison_figure, ["median MFU", "latest MFU"]),
    "fleet": (_fleet_figure, ["p10–p90", "p25–p75", "median", "run_00000000000000000005 (median)"]),
}


def _legend_texts(fig: Figure) -> list[str]:
    return [t.get_text() for legend in fig.legends for t in legend.get_texts()]


@pytest.mark.parametrize("size", sorted(plots.SIZES))
@pytest.mark.parametrize("fmt", ["png", "svg"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_chart_kind_at_every_size_keeps_its_text_inside_and_its_legend_whole(
    kind: str, fmt: plots.Format, size: str
) -> None:
    build, expected = KINDS[kind]
    fig = build(size)
    out = save(fig, fmt)
    assert plots.clipped_texts(fig) == []
    legend = _legend_texts(fig)
    for entry in expected:
        assert any(text.startswith(entry) for text in legend), (entry, legend)
    title = fig.get_suptitle().replace("\n", " ")
    assert title == LONG_TITLE or title.startswith("MFU of llama3.1-405b on 1024 × NVIDIA H100")
    if fmt == "svg":
        assert isinstance(out, str)
        svg_text = " ".join("".join(t.itertext()) for t in ET.fromstring(out).iter(f"{SVG}text"))
        for entry in expected:
            assert entry in svg_text
    else:
        assert isinstance(out, bytes)
        width, height = struct.unpack(">II", out[16:24])
        assert (width, height) == plots.SIZES[size]


def test_schedule_phase_names_sit_inside_their_phases() -> None:
    fig = _schedule_figure("medium")
    ax = fig.axes[0]
    r = renderer(fig)
    _series, bands = _schedule()
    placed = {t.get_text(): t for t in ax.texts}
    assert {"stable", "decay"} <= set(placed)  # warmup is 2% of the axis: upright, or in the legend only
    for name, start, end in bands:
        if name not in placed:
            continue
        ext = placed[name].get_window_extent(r)
        lo_px = ax.transData.transform((start, 0))[0]
        hi_px = ax.transData.transform((end, 0))[0]
        assert lo_px <= ext.x0 and ext.x1 <= hi_px, name


def test_a_component_has_one_colour_whatever_the_chart_holds() -> None:
    from matplotlib.colors import to_hex

    def colours(segments: list[tuple[str, float]]) -> dict[str, str]:
        fig = plots.bar_chart_figure("t", "s", [("b", segments)])
        return {
            text.get_text().split(":")[0]: to_hex(handle.get_facecolor())  # type: ignore[union-attr]
            for legend in fig.legends
            for text, handle in zip(legend.get_texts(), legend.legend_handles, strict=True)
        }

    first = colours([("ideal matmul", 1.0), ("memory bound", 0.5), ("optimizer step", 0.2)])
    second = colours([("optimizer step", 0.2), ("pipeline bubble", 0.3)])
    assert first["optimizer step"] == second["optimizer step"]
    assert len(set(plots.COMPONENT_COLOURS.values())) == len(plots.COMPONENT_COLOURS)
    assert plots.colour_for("optimizer_step") == plots.colour_for("optimizer step")


def test_mfu_axis_is_in_percent() -> None:
    fig = _mfu_figure("medium")
    fig.canvas.draw()
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels() if t.get_text()]
    assert labels and all(label.endswith("%") for label in labels)
    assert "40%" in labels


def test_segment_values_are_printed_where_they_fit_and_the_legend_carries_every_share() -> None:
    fig = plots.bar_chart_figure("Step", "seconds", [("x", [("compute", 1.5), ("communication", 0.5)])])
    inside = {t.get_text() for t in fig.axes[0].texts}
    assert "1.5 s (75%)" in inside and "0.5 s (25%)" in inside
    assert set(_legend_texts(fig)) == {"compute: 1.5 s (75%)", "communication: 0.5 s (25%)"}


def test_negative_segments_are_refused() -> None:
    with pytest.raises(ValueError, match="finite and ≥ 0"):
        plots.bar_chart_png("t", "s", [("b", [("x", -1.0)])])


def test_axis_numbers_are_printed_short() -> None:
    assert [plots.format_number(v) for v in (0, 3e-4, 2.5e-5, 1_200_000, 1500, 0.5, 12, 3e9)] == [
        "0", "3e-4", "2.5e-5", "1.2M", "1.5k", "0.5", "12", "3B",
    ]  # fmt: skip


def test_the_routers_wrappers_answer_svg_text_and_png_bytes() -> None:
    series, bands = _schedule()
    svg = plots.line_chart_svg("LR schedule", "step", "learning rate", series, bands)
    assert ET.fromstring(svg).tag == f"{SVG}svg"
    assert plots.to_png("t", "x", "y", series)[:8] == b"\x89PNG\r\n\x1a\n"
    assert plots.bar_chart_svg("t", "s", [("b", [("x", 1.0)])]).lstrip().startswith("<?xml")
    assert plots.bar_chart_png("t", "s", [("b", [("x", 1.0)])])[:4] == b"\x89PNG"


def test_log_axes_drop_non_positive_points() -> None:
    fig = plots.line_chart_figure(
        "t", "x", "y", [("s", [0, 1, 10, 100], [0, 1, 2, 3])], log_x=True, log_y=True
    )
    (line,) = fig.axes[0].get_lines()
    assert [float(x) for x in line.get_xdata()] == [1.0, 10.0, 100.0]  # type: ignore[arg-type,union-attr]


def test_png_rendering_leaves_no_pyplot_figures_behind() -> None:
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    plots.to_png("t", "x", "y", _schedule()[0])
    assert plt.get_fignums() == before
