"""Chart rendering: well-formed SVG and real PNG bytes."""

from __future__ import annotations

import struct
import xml.etree.ElementTree as ET

from service.domain.schedules import ScheduleSpec, phases, sample
from service.plots import (
    Band,
    Series,
    bar_chart_png,
    bar_chart_svg,
    format_number,
    line_chart_svg,
    nice_ticks,
    to_png,
)

SVG = "{http://www.w3.org/2000/svg}"


def _schedule_chart_args() -> tuple[str, str, str, list[Series], list[Band]]:
    spec = ScheduleSpec(
        kind="warmup_stable_decay", peak_lr=3e-4, total_steps=100_000, warmup_steps=2000, decay_fraction=0.2
    )
    pts = sample(spec, points=200)
    series: list[Series] = [("WSD <cosine> & co", [float(p.step) for p in pts], [p.lr for p in pts])]
    bands: list[Band] = [(p.name, float(p.start_step), float(p.end_step)) for p in phases(spec)]
    return "LR schedule", "step", "learning rate", series, bands


def test_axis_numbers_are_printed_short() -> None:
    assert [format_number(v) for v in (0, 3e-4, 2.5e-5, 1_200_000, 1500, 0.5, 12, 3e9)] == [
        "0", "3e-4", "2.5e-5", "1.2M", "1.5k", "0.5", "12", "3B",
    ]  # fmt: skip


def test_ticks_are_nice_round_numbers() -> None:
    assert nice_ticks(0, 3e-4) == [0, 5e-5, 1e-4, 1.5e-4, 2e-4, 2.5e-4, 3e-4]
    assert nice_ticks(1e3, 1e7, log=True) == [1e3, 1e4, 1e5, 1e6, 1e7]


def test_line_chart_is_valid_svg_with_title_series_bands_and_escaped_text() -> None:
    svg = line_chart_svg(*_schedule_chart_args())
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "LR schedule" in texts and "step" in texts and "learning rate" in texts
    assert "WSD <cosine> & co" in texts  # escaped in the file, intact once parsed
    assert {"warmup", "stable", "decay"} <= set(texts)
    assert "3e-4" in texts and "100k" in texts
    assert len([e for e in root.iter(f"{SVG}polyline")]) == 1
    assert len([e for e in root.iter(f"{SVG}rect") if e.get("class") == "band"]) == 3


def test_log_axes_drop_non_positive_points() -> None:
    svg = line_chart_svg("t", "x", "y", [("s", [0, 1, 10, 100], [0, 1, 2, 3])], log_x=True, log_y=True)
    poly = next(ET.fromstring(svg).iter(f"{SVG}polyline"))
    assert len(poly.get("points", "").split()) == 3


def test_bar_chart_labels_each_segment_with_seconds_and_share() -> None:
    bars = [("predicted", [("compute", 1.5), ("communication", 0.5)])]
    root = ET.fromstring(bar_chart_svg("Step time", "seconds", bars))
    titles = [t.text for t in root.iter(f"{SVG}title")]
    assert "compute: 1.5 s (75%)" in titles and "communication: 0.5 s (25%)" in titles


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_png_of_a_schedule_is_a_real_png_of_the_expected_size() -> None:
    width, height = _png_size(to_png(*_schedule_chart_args()))
    assert (width, height) == (820, 480)


def test_png_bar_chart_renders() -> None:
    width, height = _png_size(bar_chart_png("Step time", "seconds", [("a", [("x", 1.0), ("y", 2.0)])]))
    assert width == 820 and height > 100


def test_png_rendering_leaves_no_pyplot_figures_behind() -> None:
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    to_png(*_schedule_chart_args())
    assert plt.get_fignums() == before
