"""Charts for the API's image answers: standalone SVG (pure Python) and PNG (matplotlib, Agg).

- ``line_chart_svg`` / ``line_chart_png`` (alias ``to_png``): one or more series over shared axes, with
  shaded, labelled phase bands (an LR schedule's warmup / stable / decay), optional log axes.
- ``bar_chart_svg`` / ``bar_chart_png``: stacked horizontal bars (a step time split into compute,
  memory-bound ops, exposed communication, ...), each segment labelled with its value and share.

Text is XML-escaped; numbers on axes are "nice" (1, 2, 5 × 10^k) and printed short (3e-4, 1.2M).
The PNG path imports matplotlib lazily and uses ``Figure`` + ``FigureCanvasAgg`` directly, never
``pyplot``, so no global figure state or backend switch leaks out of a call.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from xml.sax.saxutils import escape, quoteattr

__all__ = [
    "Band",
    "Bar",
    "Series",
    "bar_chart_png",
    "bar_chart_svg",
    "format_number",
    "line_chart_png",
    "line_chart_svg",
    "nice_ticks",
    "to_png",
]

Series = tuple[str, Sequence[float], Sequence[float]]
Band = tuple[str, float, float]
Bar = tuple[str, Sequence[tuple[str, float]]]

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
BAND_FILLS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3")
WIDTH, HEIGHT = 820, 480
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 84, 180, 56, 64


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


def nice_ticks(lo: float, hi: float, *, log: bool = False, target: int = 6) -> list[float]:
    """Tick values covering [lo, hi]: 1/2/5 × 10^k steps, or decades (with 2 and 5) on a log axis."""
    if log:
        lo_e, hi_e = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
        mults = (1.0,) if hi_e - lo_e > 3 else (1.0, 2.0, 5.0)
        ticks = [m * 10.0**e for e in range(lo_e, hi_e + 1) for m in mults]
        inside = [t for t in ticks if lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9)]
        return inside if len(inside) >= 2 else [lo, hi]
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / target
    mag = 10.0 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw * (1 - 1e-9))
    first = math.floor(lo / step + 1e-9)
    ticks = []
    i = first
    while i * step <= hi + step * 1e-9:
        ticks.append(float(f"{i * step:.12g}"))
        i += 1
    return ticks


class _Axis:
    def __init__(self, lo: float, hi: float, log: bool, p0: float, p1: float) -> None:
        if log:
            lo, hi = max(lo, 1e-300), max(hi, 1e-300)
            if hi <= lo:
                lo, hi = lo / 10, hi * 10
        elif hi <= lo:
            pad = abs(lo) * 0.1 or 1.0
            lo, hi = lo - pad, hi + pad
        self.ticks = nice_ticks(lo, hi, log=log)
        if not log:
            lo, hi = min(lo, self.ticks[0]), max(hi, self.ticks[-1])
        self.lo, self.hi, self.log, self.p0, self.p1 = lo, hi, log, p0, p1

    def __call__(self, v: float) -> float:
        if self.log:
            f = (math.log10(v) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        else:
            f = (v - self.lo) / (self.hi - self.lo)
        return self.p0 + f * (self.p1 - self.p0)


def _points(series: Sequence[Series], log_x: bool, log_y: bool) -> list[list[tuple[float, float]]]:
    out = []
    for _, xs, ys in series:
        pts = [
            (float(x), float(y))
            for x, y in zip(xs, ys, strict=True)
            if math.isfinite(x) and math.isfinite(y) and (not log_x or x > 0) and (not log_y or y > 0)
        ]
        out.append(pts)
    return out


def _text(x: float, y: float, text: str, **attrs: str | float) -> str:
    extra = "".join(f" {k.replace('_', '-')}={quoteattr(str(v))}" for k, v in attrs.items())
    return f'<text x="{x:.1f}" y="{y:.1f}"{extra}>{escape(text)}</text>'


def line_chart_svg(
    title: str,
    x_label: str,
    y_label: str,
    series: Sequence[Series],
    bands: Sequence[Band] = (),
    log_x: bool = False,
    log_y: bool = False,
) -> str:
    """A standalone SVG line chart: title, axes with nice ticks, gridlines, legend, phase bands."""
    pts = _points(series, log_x, log_y)
    all_x = [p[0] for s in pts for p in s] or [1.0]
    all_y = [p[1] for s in pts for p in s] or [1.0]
    x0, x1 = MARGIN_LEFT, WIDTH - MARGIN_RIGHT
    y0, y1 = HEIGHT - MARGIN_BOTTOM, MARGIN_TOP
    y_lo = min(all_y) if log_y else min(0.0, min(all_y))
    # 4% headroom so a curve that sits at its maximum (an LR at its peak) stays off the frame.
    y_hi = max(all_y) * (1.25 if log_y else 1.04)
    ax = _Axis(min(all_x), max(all_x), log_x, x0, x1)
    ay = _Axis(y_lo, y_hi, log_y, y0, y1)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="DejaVu Sans, Arial, sans-serif" font-size="12">',
        f"<title>{escape(title)}</title>",
        f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        _text(WIDTH / 2, 28, title, text_anchor="middle", font_size=16, font_weight="bold"),
    ]
    for i, (label, b0, b1) in enumerate(bands):
        if log_x and (b0 <= 0 or b1 <= 0):
            b0 = max(b0, ax.lo)
        lo_px = max(x0, min(x1, ax(max(b0, ax.lo))))
        hi_px = max(x0, min(x1, ax(min(b1, ax.hi))))
        if hi_px <= lo_px:
            continue
        fill = BAND_FILLS[i % len(BAND_FILLS)]
        parts.append(
            f'<rect class="band" x="{lo_px:.1f}" y="{y1}" width="{hi_px - lo_px:.1f}" height="{y0 - y1}" '
            f'fill="{fill}" fill-opacity="0.12"><title>{escape(label)}</title></rect>'
        )
        # Labels sit at the bottom of their band: LR curves live near the top of the plot.
        parts.append(_text(lo_px + 3, y0 - 8 - 14 * (i % 2), label, font_size=11, fill="#444"))
    for t in ax.ticks:
        px = ax(t)
        parts.append(f'<line x1="{px:.1f}" y1="{y0}" x2="{px:.1f}" y2="{y1}" stroke="#e3e3e3"/>')
        parts.append(f'<line x1="{px:.1f}" y1="{y0}" x2="{px:.1f}" y2="{y0 + 5}" stroke="#333"/>')
        parts.append(_text(px, y0 + 19, format_number(t), text_anchor="middle"))
    for t in ay.ticks:
        py = ay(t)
        parts.append(f'<line x1="{x0}" y1="{py:.1f}" x2="{x1}" y2="{py:.1f}" stroke="#e3e3e3"/>')
        parts.append(f'<line x1="{x0 - 5}" y1="{py:.1f}" x2="{x0}" y2="{py:.1f}" stroke="#333"/>')
        parts.append(_text(x0 - 8, py + 4, format_number(t), text_anchor="end"))
    parts.append(f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" stroke="#333"/>')
    parts.append(f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" stroke="#333"/>')
    parts.append(_text((x0 + x1) / 2, HEIGHT - 18, x_label, text_anchor="middle", font_size=13))
    cy = (y0 + y1) / 2
    parts.append(_text(20, cy, y_label, text_anchor="middle", font_size=13, transform=f"rotate(-90 20 {cy})"))
    for i, ((name, _, _), s) in enumerate(zip(series, pts, strict=True)):
        color = PALETTE[i % len(PALETTE)]
        coords = " ".join(f"{ax(x):.2f},{ay(y):.2f}" for x, y in s)
        parts.append(
            f'<polyline class="series" points="{coords}" fill="none" stroke="{color}" stroke-width="2">'
            f"<title>{escape(name)}</title></polyline>"
        )
        ly = MARGIN_TOP + 10 + 20 * i
        parts.append(
            f'<line x1="{x1 + 16}" y1="{ly}" x2="{x1 + 40}" y2="{ly}" stroke="{color}" stroke-width="3"/>'
        )
        parts.append(_text(x1 + 46, ly + 4, name))
    parts.append("</svg>")
    return "\n".join(parts)


def _bar_totals(bars: Sequence[Bar]) -> list[float]:
    totals = []
    for label, segments in bars:
        if any(not math.isfinite(v) or v < 0 for _, v in segments):
            raise ValueError(f"bar {label!r}: segment values must be finite and ≥ 0")
        totals.append(math.fsum(v for _, v in segments))
    return totals


def bar_chart_svg(title: str, value_label: str, bars: Sequence[Bar], unit: str = "s") -> str:
    """Stacked horizontal bars; each segment labelled ``value unit (share%)`` where it fits."""
    totals = _bar_totals(bars)
    names: list[str] = []
    for _, segments in bars:
        names.extend(n for n, _ in segments if n not in names)
    colors = {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}
    row_h, gap = 34, 18
    label_w = 150
    x0, x1 = label_w, WIDTH - MARGIN_RIGHT
    height = MARGIN_TOP + len(bars) * (row_h + gap) + 70
    ax = _Axis(0.0, max(totals, default=1.0) or 1.0, False, x0, x1)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="DejaVu Sans, Arial, sans-serif" font-size="12">',
        f"<title>{escape(title)}</title>",
        f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="white"/>',
        _text(WIDTH / 2, 28, title, text_anchor="middle", font_size=16, font_weight="bold"),
    ]
    axis_y = MARGIN_TOP + len(bars) * (row_h + gap)
    for t in ax.ticks:
        px = ax(t)
        parts.append(
            f'<line x1="{px:.1f}" y1="{MARGIN_TOP - 6}" x2="{px:.1f}" y2="{axis_y}" stroke="#e3e3e3"/>'
        )
        parts.append(_text(px, axis_y + 18, format_number(t), text_anchor="middle"))
    parts.append(f'<line x1="{x0}" y1="{axis_y}" x2="{x1}" y2="{axis_y}" stroke="#333"/>')
    parts.append(_text((x0 + x1) / 2, axis_y + 42, value_label, text_anchor="middle", font_size=13))
    for r, ((label, segments), total) in enumerate(zip(bars, totals, strict=True)):
        y = MARGIN_TOP + r * (row_h + gap)
        parts.append(_text(x0 - 8, y + row_h / 2 + 4, label, text_anchor="end"))
        acc = 0.0
        for name, v in segments:
            px0, px1 = ax(acc), ax(acc + v)
            acc += v
            share = 100 * v / total if total else 0.0
            text = f"{format_number(v)} {unit} ({share:.0f}%)"
            parts.append(
                f'<rect class="segment" x="{px0:.1f}" y="{y}" width="{px1 - px0:.1f}" height="{row_h}" '
                f'fill="{colors[name]}"><title>{escape(f"{name}: {text}")}</title></rect>'
            )
            if px1 - px0 > 7 * len(text):
                parts.append(
                    _text((px0 + px1) / 2, y + row_h / 2 + 4, text, text_anchor="middle", fill="white")
                )
        parts.append(_text(ax(acc) + 6, y + row_h / 2 + 4, f"{format_number(total)} {unit}"))
    for i, name in enumerate(names):
        ly = MARGIN_TOP + 10 + 20 * i
        parts.append(f'<rect x="{x1 + 50}" y="{ly - 8}" width="14" height="14" fill="{colors[name]}"/>')
        parts.append(_text(x1 + 70, ly + 4, name))
    parts.append("</svg>")
    return "\n".join(parts)


def line_chart_png(
    title: str,
    x_label: str,
    y_label: str,
    series: Sequence[Series],
    bands: Sequence[Band] = (),
    log_x: bool = False,
    log_y: bool = False,
) -> bytes:
    """The same chart as ``line_chart_svg``, as PNG bytes (matplotlib Agg, no pyplot)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    fig = Figure(figsize=(8.2, 4.8), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    pts = _points(series, log_x, log_y)
    for i, ((name, _, _), s) in enumerate(zip(series, pts, strict=True)):
        ax.plot([p[0] for p in s], [p[1] for p in s], color=PALETTE[i % len(PALETTE)], lw=2, label=name)
    if log_x:
        ax.set_xscale("log")
    if log_y:
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=min(0.0, ax.get_ylim()[0]))
    for i, (label, b0, b1) in enumerate(bands):
        if b1 <= b0 or (log_x and b1 <= 0):
            continue
        ax.axvspan(b0, b1, color=BAND_FILLS[i % len(BAND_FILLS)], alpha=0.12, lw=0)
        ax.annotate(
            label, (b0, 0), xycoords=("data", "axes fraction"), xytext=(3, 4 + 12 * (i % 2)),
            textcoords="offset points", fontsize=9, color="#444",
        )  # fmt: skip
    fmt = FuncFormatter(lambda v, _pos: format_number(v))
    if not log_x:
        ax.xaxis.set_major_formatter(fmt)
    if not log_y:
        ax.yaxis.set_major_formatter(fmt)
    ax.grid(True, color="#e3e3e3")
    ax.set_title(title, fontweight="bold")
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    if series:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, frameon=False)
    fig.subplots_adjust(left=0.1, right=0.78, top=0.9, bottom=0.12)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


#: The PNG twin of ``line_chart_svg`` (same arguments).
to_png = line_chart_png


def bar_chart_png(title: str, value_label: str, bars: Sequence[Bar], unit: str = "s") -> bytes:
    """The same chart as ``bar_chart_svg``, as PNG bytes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    totals = _bar_totals(bars)
    names: list[str] = []
    for _, segments in bars:
        names.extend(n for n, _ in segments if n not in names)
    colors = {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}
    fig = Figure(figsize=(8.2, 1.6 + 0.6 * len(bars)), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    labelled: set[str] = set()
    for r, ((_label, segments), total) in enumerate(zip(bars, totals, strict=True)):
        left = 0.0
        for name, v in segments:
            ax.barh(r, v, left=left, color=colors[name], label=None if name in labelled else name, height=0.6)
            labelled.add(name)
            if total and v / total > 0.2:
                ax.text(
                    left + v / 2, r, f"{format_number(v)} {unit} ({100 * v / total:.0f}%)",
                    ha="center", va="center", color="white", fontsize=8,
                )  # fmt: skip
            left += v
    ax.set_yticks(range(len(bars)), [b[0] for b in bars])
    ax.invert_yaxis()
    ax.set_title(title, fontweight="bold")
    ax.set_xlabel(value_label)
    ax.grid(True, axis="x", color="#e3e3e3")
    if names:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 0.8, 1))
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
