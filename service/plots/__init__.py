"""Charts for the API's image answers, PNG and SVG alike from one matplotlib renderer.

- ``line_chart`` (``line_chart_svg`` / ``line_chart_png``, alias ``to_png``): series over shared axes
  with shaded phase bands named inside them (an LR schedule's warmup / stable / decay), log axes.
- ``bar_chart`` (``bar_chart_svg`` / ``bar_chart_png``): stacked horizontal bars of a step time by
  component, one fixed colour per component name (``style.COMPONENT_COLOURS``).
- ``mfu_over_time_chart``: a run's MFU in percent with its per-point min–max band and median.
- ``run_comparison_chart``: runs side by side (median and latest MFU).
- ``fleet_percentiles_chart``: fleet groups' p10–p90 / p25–p75 / median MFU, one run marked.

Layouts never clip: the title wraps to the figure, the legend takes as many columns as fit, and
labels inside the plot are kept only where they fit (``render.clipped_texts`` is the check).
"""

from __future__ import annotations

from collections.abc import Sequence

from service.plots.charts import (
    Band,
    Bar,
    PercentileRow,
    Series,
    bar_chart,
    bar_chart_figure,
    fleet_percentiles_chart,
    fleet_percentiles_figure,
    line_chart,
    line_chart_figure,
    mfu_over_time_chart,
    mfu_over_time_figure,
    run_comparison_chart,
    run_comparison_figure,
)
from service.plots.render import Format, clipped_texts
from service.plots.style import COMPONENT_COLOURS, SIZES, colour_for, format_number

__all__ = [
    "COMPONENT_COLOURS",
    "SIZES",
    "Band",
    "Bar",
    "Format",
    "PercentileRow",
    "Series",
    "bar_chart",
    "bar_chart_figure",
    "bar_chart_png",
    "bar_chart_svg",
    "clipped_texts",
    "colour_for",
    "fleet_percentiles_chart",
    "fleet_percentiles_figure",
    "format_number",
    "line_chart",
    "line_chart_figure",
    "line_chart_png",
    "line_chart_svg",
    "mfu_over_time_chart",
    "mfu_over_time_figure",
    "run_comparison_chart",
    "run_comparison_figure",
    "to_png",
]


# The functions the routers call: same names and arguments as before the single renderer.


def line_chart_svg(
    title: str,
    x_label: str,
    y_label: str,
    series: Sequence[Series],
    bands: Sequence[Band] = (),
    log_x: bool = False,
    log_y: bool = False,
) -> str:
    out = line_chart("svg", title, x_label, y_label, series, bands, log_x, log_y)
    assert isinstance(out, str)
    return out


def line_chart_png(
    title: str,
    x_label: str,
    y_label: str,
    series: Sequence[Series],
    bands: Sequence[Band] = (),
    log_x: bool = False,
    log_y: bool = False,
) -> bytes:
    out = line_chart("png", title, x_label, y_label, series, bands, log_x, log_y)
    assert isinstance(out, bytes)
    return out


#: The PNG twin of ``line_chart_svg`` (same arguments).
to_png = line_chart_png


def bar_chart_svg(title: str, value_label: str, bars: Sequence[Bar], unit: str = "s") -> str:
    out = bar_chart("svg", title, value_label, bars, unit)
    assert isinstance(out, str)
    return out


def bar_chart_png(title: str, value_label: str, bars: Sequence[Bar], unit: str = "s") -> bytes:
    out = bar_chart("png", title, value_label, bars, unit)
    assert isinstance(out, bytes)
    return out
