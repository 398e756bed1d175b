"""Learning-rate schedules as numbers, CSV or charts."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from service import plots
from service.api.json_body import StrictJsonRoute
from service.api.negotiation import (
    CSV,
    JSON,
    NEGOTIATED,
    PNG,
    SVG,
    media_response,
    negotiate,
    representations,
)
from service.api.resolve import with_field_prefix
from service.api.schemas.schedules import (
    LrScheduleRead,
    LrScheduleRequest,
    SchedulePhaseRead,
    SchedulePointRead,
    ScheduleSummaryRead,
)
from service.domain import schedules

router = APIRouter(tags=["schedules"], route_class=StrictJsonRoute)

OFFERED = (JSON, CSV, SVG, PNG)

#: The step semantics each answer names (module docstring of ``service.domain.schedules``).
CONVENTIONS = {
    "transformers": "Hugging Face transformers step semantics: step t counts optimizer updates from 0; "
    "step 0 is the first update's LR; warmup is t/W (from warmup_start), the peak is reached exactly at "
    "step W; the LR at total_steps is the end value, which no update uses.",
    "optax": "optax semantics: the same values as transformers for 0 ≤ t ≤ total_steps (optax's "
    "decay_steps = total_steps, warmup included; init_value = warmup_start_lr), clamped at the end value "
    "for every step after total_steps.",
    "pytorch": "PyTorch semantics: SequentialLR([LinearLR(start_factor > 0, total_iters=W), decay], "
    "milestones=[W]); step t is the LR after t scheduler.step() calls; CosineAnnealingLR is periodic "
    "past T_max, CosineAnnealingWarmRestarts keeps restarting.",
}

_SPEC_FIELDS = (
    "kind",
    "peak_lr",
    "total_steps",
    "warmup_steps",
    "warmup_fraction",
    "min_lr",
    "min_lr_ratio",
    "warmup_start_lr",
    "warmup_start_ratio",
    "semantics",
    "past_end",
    "stable_steps",
    "decay_steps",
    "decay_fraction",
    "warmup_shape",
    "decay_shape",
    "power",
    "timescale_steps",
    "cycles",
)


def schedule_spec(body: LrScheduleRequest) -> schedules.ScheduleSpec:
    """The domain spec of a request: it checks the cross-field rules, naming the request field at fault."""
    values = {name: getattr(body, name) for name in _SPEC_FIELDS}
    return with_field_prefix("body", lambda: schedules.ScheduleSpec(**values))


def _csv(points: list[schedules.SchedulePoint]) -> str:
    # A CSV is read by people and spreadsheets: six significant digits (an LR is never set finer),
    # not float noise such as 2.9999999999999997e-05; JSON keeps full precision.
    return "step,lr\n" + "".join(f"{p.step},{p.lr:.6g}\n" for p in points)


async def _chart(
    media: str,
    spec: schedules.ScheduleSpec,
    points: list[schedules.SchedulePoint],
    phases: list[schedules.Phase],
) -> Response:
    ordered = sorted(points, key=lambda p: p.step)
    title = f"{spec.kind} LR schedule ({spec.semantics} semantics)"
    series = [("learning rate", [float(p.step) for p in ordered], [p.lr for p in ordered])]
    bands = [(phase.name, float(phase.start_step), float(phase.end_step)) for phase in phases]
    if media == SVG:
        svg = plots.line_chart_svg(title, "optimizer step", "learning rate", series, bands)
        return media_response(svg, SVG, filename="lr_schedule.svg")
    png = await run_in_threadpool(
        plots.line_chart_png, title, "optimizer step", "learning rate", series, bands
    )
    return media_response(png, PNG, filename="lr_schedule.png")


@router.post(
    "/schedules/lr",
    response_model=LrScheduleRead,
    responses=representations(CSV, SVG, PNG),
    openapi_extra=NEGOTIATED,
    summary="A learning-rate schedule: the LR at given steps, or the run sampled",
)
async def compute_lr_schedule(body: LrScheduleRequest, request: Request) -> LrScheduleRead | Response:
    """The LR at `steps`, or the whole run sampled (`points` N or `every` k steps; step 0, the end of
    warmup, the end of the stable phase, the last step and `total_steps` always included), with a
    summary (peak, floor, phase lengths, Σ LR, what happens past the end) and the phases.

    `Accept`: `application/json` (default), `text/csv` (`step,lr`), `image/svg+xml` or `image/png`
    (the schedule with its phases as labelled bands). Values are computed per step in O(1): a run of
    10^7 steps answers as fast as one of 100.
    """
    media = negotiate(request, OFFERED)
    spec = schedule_spec(body)
    if body.steps is not None:
        steps = body.steps
        points = with_field_prefix("body.steps", lambda: schedules.lrs_at(spec, steps), exact=True)
    else:
        points = with_field_prefix(
            "body",
            lambda: schedules.sample(spec, points=body.points, every=body.every, until_step=body.until_step),
        )
    phases = schedules.phases(spec)
    if media == CSV:
        return media_response(_csv(points), CSV, filename="lr_schedule.csv")
    if media in (SVG, PNG):
        return await _chart(media, spec, points, phases)
    s = schedules.summary(spec)
    return LrScheduleRead(
        kind=spec.kind,
        semantics=spec.semantics,
        convention=CONVENTIONS[spec.semantics],
        answered="steps" if body.steps is not None else "sampled",
        summary=ScheduleSummaryRead(
            kind=s.kind,
            semantics=s.semantics,
            past_end=spec.past_end,
            past_end_note=s.past_end,
            peak_lr=s.peak_lr,
            floor_lr=s.floor_lr,
            warmup_start_lr=s.warmup_start_lr,
            final_lr=s.final_lr,
            warmup_steps=s.warmup_steps,
            stable_steps=s.stable_steps,
            decay_steps=s.decay_steps,
            total_steps=s.total_steps,
            lr_sum=s.lr_sum,
            mean_lr=s.mean_lr,
        ),
        phases=[SchedulePhaseRead(name=p.name, start_step=p.start_step, end_step=p.end_step) for p in phases],
        points=[SchedulePointRead(step=p.step, lr=p.lr) for p in points],
    )
