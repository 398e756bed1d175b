"""The chart kinds: line charts with phase bands, stacked step-time bars, MFU over time, runs compared,
fleet percentiles.

Each kind has a ``*_figure`` builder (a laid-out matplotlib ``Figure``, for tests and for callers
that want to add to it) and a function that answers PNG bytes or SVG text for ``fmt``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from service.plots.render import (
    Format,
    add_legend,
    finish,
    new_figure,
    renderer,
    save,
    set_title,
)
from service.plots.style import colour_for, format_number, phase_colour

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

Series = tuple[str, Sequence[float], Sequence[float]]
Band = tuple[str, float, float]
Bar = tuple[str, Sequence[tuple[str, float]]]

GRID = "#e3e3e3"


def _finite_points(
    xs: Sequence[float], ys: Sequence[float], log_x: bool, log_y: bool
) -> tuple[list[float], list[float]]:
    px: list[float] = []
    py: list[float] = []
    for x, y in zip(xs, ys, strict=True):
        if math.isfinite(x) and math.isfinite(y) and (not log_x or x > 0) and (not log_y or y > 0):
            px.append(float(x))
            py.append(float(y))
    return px, py


def _short_axes(ax: Axes, log_x: bool, log_y: bool, percent_y: bool = False) -> None:
    from matplotlib.ticker import FuncFormatter, PercentFormatter

    fmt = FuncFormatter(lambda v, _pos: format_number(v))
    if log_x:
        ax.set_xscale("log")
    else:
        ax.xaxis.set_major_formatter(fmt)
    if log_y:
        ax.set_yscale("log")
    elif percent_y:
        ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=0))
    else:
        ax.yaxis.set_major_formatter(fmt)
    ax.grid(True, color=GRID)
    ax.set_axisbelow(True)


def _place_band_labels(fig: Figure, ax: Axes, bands: Sequence[Band]) -> None:
    """Each phase's name inside its band: level if it fits, upright if only that fits, else left out
    (the legend names every phase either way)."""
    r = renderer(fig)
    for label, b0, b1 in bands:
        lo, hi = ax.get_xlim()
        left, right = max(b0, lo), min(b1, hi)
        if right <= left:
            continue
        x0_px = ax.transData.transform((left, 0))[0]
        x1_px = ax.transData.transform((right, 0))[0]
        centre = ax.transData.inverted().transform(((x0_px + x1_px) / 2, 0))[0]
        for rotation in (0, 90):
            text = ax.text(
                centre, 0.03, label, transform=ax.get_xaxis_transform(), ha="center", va="bottom",
                rotation=rotation, fontsize=9, color="#333", clip_on=True,
                bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.7},
            )  # fmt: skip
            ext = text.get_window_extent(r)
            axes_box = ax.get_window_extent(r)
            if ext.x0 >= x0_px and ext.x1 <= x1_px and ext.y1 <= axes_box.y1:
                break
            text.remove()


def line_chart_figure(
    title: str,
    x_label: str,
    y_label: str,
    series: Sequence[Series],
    bands: Sequence[Band] = (),
    log_x: bool = False,
    log_y: bool = False,
    *,
    percent_y: bool = False,
    size: str = "medium",
) -> Figure:
    """Series over shared axes with shaded, named phase bands; a legend names every series and band."""
    from matplotlib.patches import Patch

    fig, ax = new_figure(size)
    handles: list[Artist] = []
    labels: list[str] = []
    for name, xs, ys in series:
        px, py = _finite_points(xs, ys, log_x, log_y)
        (line,) = ax.plot(px, py, color=colour_for(name), lw=2)
        handles.append(line)
        labels.append(name)
    _short_axes(ax, log_x, log_y, percent_y)
    ys_all = [y for _, _, ys in series for y in ys if math.isfinite(y)]
    if not log_y and ys_all and min(ys_all) >= 0:
        ax.set_ylim(bottom=0.0)
    for i, (label, b0, b1) in enumerate(bands):
        if b1 <= b0 or (log_x and b1 <= 0):
            continue
        colour = phase_colour(label, i)
        ax.axvspan(b0, b1, color=colour, alpha=0.14, lw=0)
        handles.append(Patch(color=colour, alpha=0.35, lw=0))
        labels.append(f"{label} (steps {format_number(b0)}–{format_number(b1)})")
    if series and not log_x:
        xs_all = [x for _, xs, _ in series for x in xs if math.isfinite(x)]
        if xs_all:
            ax.set_xlim(min(xs_all), max(xs_all))
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    set_title(fig, title)
    add_legend(fig, handles, labels)
    return finish(fig, lambda: _place_band_labels(fig, ax, bands))


def line_chart(
    fmt: Format,
    title: str,
    x_label: str,
    y_label: str,
    series: Sequence[Series],
    bands: Sequence[Band] = (),
    log_x: bool = False,
    log_y: bool = False,
    *,
    percent_y: bool = False,
    size: str = "medium",
) -> bytes | str:
    fig = line_chart_figure(
        title, x_label, y_label, series, bands, log_x, log_y, percent_y=percent_y, size=size
    )
    return save(fig, fmt)


def _bar_totals(bars: Sequence[Bar]) -> list[float]:
    totals = []
    for label, segments in bars:
        if any(not math.isfinite(v) or v < 0 for _, v in segments):
            raise ValueError(f"bar {label!r}: segment values must be finite and ≥ 0")
        totals.append(math.fsum(v for _, v in segments))
    return totals


def _segment_text(value: float, total: float, unit: str) -> str:
    share = 100 * value / total if total else 0.0
    share_text = "<1%" if 0 < share < 0.5 else f"{share:.0f}%"
    return f"{format_number(value)} {unit} ({share_text})"


def bar_chart_figure(
    title: str, value_label: str, bars: Sequence[Bar], unit: str = "s", *, size: str = "medium"
) -> Figure:
    """Stacked horizontal bars, one colour per component name in every chart. A segment shows its
    value and share inside it where the text fits; with one bar the legend carries them all too."""
    from matplotlib.patches import Patch

    totals = _bar_totals(bars)
    names: list[str] = []
    for _, segments in bars:
        names.extend(n for n, _ in segments if n not in names)
    fig, ax = new_figure(size)
    drawn: list[tuple[int, float, float, str]] = []  # row, left, value, text
    for row, ((_label, segments), total) in enumerate(zip(bars, totals, strict=True)):
        left = 0.0
        for name, value in segments:
            ax.barh(row, value, left=left, color=colour_for(name), height=0.6)
            drawn.append((row, left, value, _segment_text(value, total, unit)))
            left += value
    top = max(totals, default=0.0) or 1.0
    ax.set_xlim(0, top * 1.18)  # room for each bar's total at its end
    for row, total in enumerate(totals):
        ax.text(total + top * 0.01, row, f"{format_number(total)} {unit}", va="center", fontsize=9)
    ax.set_yticks(range(len(bars)), [b[0] for b in bars])
    ax.set_ylim(len(bars) - 0.5, -0.5)
    ax.xaxis.set_major_formatter(lambda v, _pos: format_number(v))
    ax.grid(True, axis="x", color=GRID)
    ax.set_axisbelow(True)
    ax.set_xlabel(value_label)
    single = len(bars) == 1
    values = dict(bars[0][1]) if single else {}
    labels = [f"{n}: {_segment_text(values[n], totals[0], unit)}" if single else n for n in names]
    handles = [Patch(color=colour_for(n)) for n in names]
    set_title(fig, title)
    add_legend(fig, handles, labels)

    def place() -> None:
        r = renderer(fig)
        for row, left, value, text in drawn:
            x0_px = ax.transData.transform((left, row))[0]
            x1_px = ax.transData.transform((left + value, row))[0]
            artist = ax.text(
                left + value / 2, row, text, ha="center", va="center", color="white", fontsize=8,
                fontweight="bold",
            )  # fmt: skip
            ext = artist.get_window_extent(r)
            if ext.x0 < x0_px + 2 or ext.x1 > x1_px - 2:
                artist.remove()

    return finish(fig, place)


def bar_chart(
    fmt: Format, title: str, value_label: str, bars: Sequence[Bar], unit: str = "s", *, size: str = "medium"
) -> bytes | str:
    return save(bar_chart_figure(title, value_label, bars, unit, size=size), fmt)


def mfu_over_time_figure(
    *,
    hours: Sequence[float],
    mfu: Sequence[float],
    mfu_min: Sequence[float],
    mfu_max: Sequence[float],
    median: float | None,
    model: str,
    cluster: str,
    run_id: str,
    size: str = "medium",
) -> Figure:
    """A run's MFU (fractions in, percent on the axis) with the min–max band of each point."""
    fig, ax = new_figure(size)
    colour = colour_for("MFU")
    band = ax.fill_between(hours, mfu_min, mfu_max, color=colour, alpha=0.2, lw=0)
    (line,) = ax.plot(hours, mfu, color=colour, lw=2)
    handles: list[Artist] = [line, band]
    labels = ["MFU (mean per point)", "min–max within each point"]
    if median is not None and hours:
        (med,) = ax.plot([hours[0], hours[-1]], [median] * 2, color="#444", lw=1.2, ls="--")
        handles.append(med)
        labels.append(f"median {median:.1%}")
    _short_axes(ax, False, False, percent_y=True)
    ax.set_ylim(bottom=0.0, top=max([*mfu_max, *mfu, 0.01]) * 1.1)
    ax.set_xlabel("hours since the first measurement")
    ax.set_ylabel("MFU")
    set_title(fig, f"MFU of {model} on {cluster} (run {run_id})")
    add_legend(fig, handles, labels)
    return finish(fig)


def mfu_over_time_chart(
    fmt: Format,
    *,
    hours: Sequence[float],
    mfu: Sequence[float],
    mfu_min: Sequence[float],
    mfu_max: Sequence[float],
    median: float | None,
    model: str,
    cluster: str,
    run_id: str,
    size: str = "medium",
) -> bytes | str:
    fig = mfu_over_time_figure(
        hours=hours, mfu=mfu, mfu_min=mfu_min, mfu_max=mfu_max, median=median, model=model,
        cluster=cluster, run_id=run_id, size=size,
    )  # fmt: skip
    return save(fig, fmt)


def run_comparison_figure(
    *,
    runs: Sequence[tuple[str, float | None, float | None]],
    title: str,
    best_run_id: str | None = None,
    size: str = "medium",
) -> Figure:
    """Median MFU per run as bars (percent), the latest MFU as a marker; ``runs`` holds
    ``(label, median_mfu, latest_mfu)`` with MFU as fractions, in the order to draw them, top down.
    A run without measurements keeps its row, marked "no measurements"."""
    fig, ax = new_figure(size)
    colour = colour_for("MFU")
    rows = list(range(len(runs)))
    medians = [m if m is not None else 0.0 for _, m, _ in runs]
    bars = ax.barh(rows, medians, height=0.6, color=colour)
    for row, (label, median, _) in enumerate(runs):
        if best_run_id is not None and label.startswith(best_run_id):
            bars[row].set_edgecolor("#222")
            bars[row].set_linewidth(1.5)
        if median is None:
            ax.text(0.005, row, "no measurements", va="center", fontsize=8, color="#444")
    latest = [(row, v) for row, (_, _, v) in enumerate(runs) if v is not None]
    handles: list[Artist] = [bars.patches[0]] if runs else []
    labels = ["median MFU"]
    if latest:
        marks = ax.scatter([v for _, v in latest], [r for r, _ in latest], marker="D", color="#222", zorder=3)
        handles.append(marks)
        labels.append("latest MFU")
    _short_axes(ax, False, False)
    ax.set_yticks(rows, [label for label, _, _ in runs])
    ax.invert_yaxis()
    from matplotlib.ticker import PercentFormatter

    ax.xaxis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=0))
    ax.set_xlim(0.0, max([*medians, *(v for _, v in latest), 0.01]) * 1.15)
    ax.set_xlabel("MFU")
    ax.grid(True, axis="x", color=GRID)
    set_title(fig, title)
    add_legend(fig, handles, labels)
    return finish(fig)


def run_comparison_chart(
    fmt: Format,
    *,
    runs: Sequence[tuple[str, float | None, float | None]],
    title: str,
    best_run_id: str | None = None,
    size: str = "medium",
) -> bytes | str:
    return save(run_comparison_figure(runs=runs, title=title, best_run_id=best_run_id, size=size), fmt)


#: A fleet group's row: (label, p10, p25, p50, p75, p90), MFU as fractions (None: not enough runs).
PercentileRow = tuple[str, float | None, float | None, float | None, float | None, float | None]


def fleet_percentiles_figure(
    *,
    rows: Sequence[PercentileRow],
    title: str,
    marker: tuple[int, float, str] | None = None,
    size: str = "medium",
) -> Figure:
    """One row per fleet group, top down: p10–p90 as a light bar, p25–p75 as a dark one, the median
    as a tick (MFU in percent). ``marker`` = (row, MFU, label) puts one run on its group's row."""
    fig, ax = new_figure(size)
    colour = colour_for("MFU")
    positions = list(range(len(rows)))
    outer = inner = median_mark = None
    for row, (_, p10, p25, p50, p75, p90) in enumerate(rows):
        if p10 is None or p90 is None:
            ax.text(0.005, row, "too few runs to show", va="center", fontsize=8, color="#444")
            continue
        outer = ax.barh(row, p90 - p10, left=p10, height=0.6, color=colour, alpha=0.3)
        if p25 is not None and p75 is not None:
            inner = ax.barh(row, p75 - p25, left=p25, height=0.6, color=colour, alpha=0.85)
        if p50 is not None:
            median_mark = ax.vlines(p50, row - 0.3, row + 0.3, color="#222", linewidth=2)
    handles: list[Artist] = []
    labels: list[str] = []
    for artist, text in ((outer, "p10–p90"), (inner, "p25–p75"), (median_mark, "median")):
        if artist is not None:
            handles.append(artist.patches[0] if hasattr(artist, "patches") else artist)
            labels.append(text)
    values = [v for row in rows for v in row[1:] if v is not None]
    if marker is not None:
        row, mfu, text = marker
        handles.append(ax.scatter([mfu], [row], marker="D", color="#d62728", zorder=3))
        labels.append(text)
        values.append(mfu)
    _short_axes(ax, False, False)
    ax.set_yticks(positions, [row[0] for row in rows])
    ax.set_ylim(len(rows) - 0.4, -0.6)  # top down, a whole row's room at both ends
    from matplotlib.ticker import PercentFormatter

    ax.xaxis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=0))
    ax.set_xlim(0.0, max([*values, 0.01]) * 1.15)
    ax.set_xlabel("median MFU per run")
    ax.grid(True, axis="x", color=GRID)
    set_title(fig, title)
    add_legend(fig, handles, labels)
    return finish(fig)


def fleet_percentiles_chart(
    fmt: Format,
    *,
    rows: Sequence[PercentileRow],
    title: str,
    marker: tuple[int, float, str] | None = None,
    size: str = "medium",
) -> bytes | str:
    return save(fleet_percentiles_figure(rows=rows, title=title, marker=marker, size=size), fmt)
