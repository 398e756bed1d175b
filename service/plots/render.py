"""The one renderer: a matplotlib ``Figure`` laid out so nothing clips, saved as PNG or SVG.

Every chart is built on a ``Figure`` with its own Agg canvas (never ``pyplot``: no global figure
state, no backend switch). ``finish`` wraps the title to the figure's width, picks the legend's
column count so it fits, runs the constrained layout once and then freezes it, so labels placed
afterwards in data coordinates (phase names, segment values) stay where they were measured.
"""

from __future__ import annotations

import io
import textwrap
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal
from xml.sax.saxutils import escape

from service.plots.style import DPI, SIZES

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.axes import Axes
    from matplotlib.backend_bases import RendererBase
    from matplotlib.figure import Figure
    from matplotlib.text import Text

Format = Literal["png", "svg"]
PAD_PX = 6.0
# rc_context changes process-wide rcParams for the SVG writer's text mode; the lock keeps two
# threads of the server's threadpool from seeing each other's settings.
_RC_LOCK = threading.Lock()


def new_figure(size: str = "medium") -> tuple[Figure, Axes]:
    """A figure of one of ``SIZES`` with one axes and a constrained layout."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, not {size!r}")
    width, height = SIZES[size]
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    fig = Figure(figsize=(width / DPI, height / DPI), dpi=DPI)
    fig.set_layout_engine(ConstrainedLayoutEngine(w_pad=PAD_PX / DPI, h_pad=PAD_PX / DPI))
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def renderer(fig: Figure) -> RendererBase:
    return fig.canvas.get_renderer()  # type: ignore[attr-defined]


def text_width_px(fig: Figure, text: Text) -> float:
    return float(text.get_window_extent(renderer(fig)).width)


def set_title(fig: Figure, title: str) -> Text:
    """A bold title over the figure, wrapped onto more lines until it fits the figure's width."""
    artist = fig.suptitle(title, fontsize=13, fontweight="bold")
    limit = fig.bbox.width - 2 * PAD_PX
    width = len(title)
    while text_width_px(fig, artist) > limit and width > 10:
        width = int(width * 0.85)
        artist.set_text(textwrap.fill(title, width=width, break_long_words=True))
    return artist


def add_legend(fig: Figure, handles: Sequence[Artist], labels: Sequence[str]) -> None:
    """A legend below the axes, with as many columns as fit the figure's width."""
    if not handles:
        return
    limit = fig.bbox.width - 2 * PAD_PX
    for ncols in range(len(handles), 0, -1):
        legend = fig.legend(
            handles, labels, loc="outside lower center", ncols=ncols, frameon=False, fontsize=9
        )
        if legend.get_window_extent(renderer(fig)).width <= limit or ncols == 1:
            return
        legend.remove()


def finish(fig: Figure, place_labels: Callable[[], None] | None = None) -> Figure:
    """Run the layout once, freeze it, then let ``place_labels`` add artists measured against it."""
    fig.canvas.draw()
    fig.set_layout_engine("none")
    if place_labels is not None:
        place_labels()
    return fig


def save(fig: Figure, fmt: Format) -> bytes | str:
    """PNG bytes, or SVG text with text kept as ``<text>`` (searchable, screen-readable)."""
    import matplotlib

    buf = io.BytesIO()
    if fmt == "png":
        fig.savefig(buf, format="png", metadata={"Software": None})
        return buf.getvalue()
    if fmt != "svg":
        raise ValueError(f"format must be 'png' or 'svg', not {fmt!r}")
    with _RC_LOCK, matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "teff"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = buf.getvalue().decode("utf-8")
    # A document <title> names the picture to screen readers and in a browser tab.
    title = escape(" ".join(fig.get_suptitle().split()))
    head, sep, rest = _split_after_svg_tag(svg)
    return f"{head}{sep}<title>{title}</title>\n{rest}" if title else svg


def _split_after_svg_tag(svg: str) -> tuple[str, str, str]:
    end = svg.index(">", svg.index("<svg")) + 1
    return svg[:end], "\n", svg[end:].lstrip("\n")


def clipped_texts(fig: Figure) -> list[str]:
    """The visible texts whose drawn extent leaves the figure (what the layout must never produce)."""
    from matplotlib.text import Text

    fig.canvas.draw()
    r = renderer(fig)
    box = fig.bbox
    # Axes keep Tick objects for locations outside the view; those are never drawn.
    undrawn: set[int] = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
                if not lo - 1e-9 * abs(hi - lo) <= tick.get_loc() <= hi + 1e-9 * abs(hi - lo):
                    undrawn.update({id(tick.label1), id(tick.label2)})
    out = []
    for text in fig.findobj(Text):
        if id(text) in undrawn or not text.get_visible() or not text.get_text().strip():
            continue
        ext = text.get_window_extent(r)
        if ext.x0 < box.x0 - 0.5 or ext.y0 < box.y0 - 0.5 or ext.x1 > box.x1 + 0.5 or ext.y1 > box.y1 + 0.5:
            out.append(text.get_text())
    return out
