"""The goodput picture: a job's timeline by phase (one row per attempt) above its badput breakdown.

matplotlib's ``Figure`` + ``FigureCanvasAgg`` directly, never ``pyplot`` (as service.plots does), so no
global figure state leaks out of a call; imported lazily, since most answers are JSON.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

from service.domain.goodput import Phase, Segment

PHASE_COLOURS: dict[Phase, str] = {
    Phase.PRODUCTIVE: "#2ca02c",
    Phase.INITIALISATION: "#9467bd",
    Phase.CHECKPOINT_SAVE: "#1f77b4",
    Phase.CHECKPOINT_RESTORE: "#17becf",
    Phase.EVALUATION: "#bcbd22",
    Phase.DATA_STALL: "#ff7f0e",
    Phase.HANG: "#8c564b",
    Phase.LOST_PROGRESS: "#d62728",
    Phase.IDLE_BETWEEN_ATTEMPTS: "#7f7f7f",
}


def goodput_chart(
    title: str, segments: Sequence[Segment], seconds_by_phase: dict[Phase, float], image_format: str
) -> bytes:
    """``image_format``: "svg" or "png"."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.0, 4.8), dpi=100)
    FigureCanvasAgg(fig)
    timeline, breakdown = fig.subplots(2, 1, height_ratios=(3, 1))
    rows = sorted({segment.attempt for segment in segments if segment.attempt is not None})
    row_of = {attempt: index for index, attempt in enumerate(rows)}
    hours = 3600.0
    for segment in segments:
        # idle time sits on the row of the attempt that follows it
        row = (
            row_of.get(segment.attempt)
            if segment.attempt is not None
            else _next_row(segment, segments, row_of)
        )
        timeline.broken_barh(
            [(segment.start_seconds / hours, segment.seconds / hours)],
            ((row or 0) - 0.4, 0.8),
            facecolors=PHASE_COLOURS[segment.phase],
        )
    timeline.set_yticks(range(len(rows)), [f"attempt {attempt}" for attempt in rows])
    timeline.invert_yaxis()
    timeline.set_xlabel("hours since the job started (attempts end to end)")
    timeline.set_title(title, fontweight="bold")
    timeline.grid(True, axis="x", color="#e3e3e3")
    total = sum(seconds_by_phase.values()) or 1.0
    left = 0.0
    for phase, seconds in seconds_by_phase.items():
        if seconds <= 0:
            continue
        share = seconds / total
        breakdown.barh(0, share, left=left, color=PHASE_COLOURS[phase], label=f"{phase.value} {share:.1%}")
        left += share
    breakdown.set_xlim(0, 1)
    breakdown.set_yticks([])
    breakdown.set_xlabel("share of allocated time")
    breakdown.legend(loc="upper left", bbox_to_anchor=(1.01, 2.8), fontsize=8, frameon=False)
    fig.subplots_adjust(left=0.1, right=0.74, top=0.92, bottom=0.1, hspace=0.6)
    buffer = io.BytesIO()
    fig.savefig(buffer, format=image_format)
    return buffer.getvalue()


def _next_row(segment: Segment, segments: Sequence[Segment], row_of: dict[int, int]) -> int:
    later = [s.attempt for s in segments if s.attempt is not None and s.start_seconds >= segment.end_seconds]
    return row_of[later[0]] if later else 0
