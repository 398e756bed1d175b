"""Fleet MFU statistics (API key)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from service import plots
from service.api.deps import Reader
from service.api.json_body import StrictJsonRoute
from service.api.negotiation import JSON, PNG, SVG, media_response, negotiate, representations
from service.api.presenters.fleet_stats import fleet_stats_read
from service.api.resolve import normalise_accelerator
from service.api.schemas.fields import NO_NUL_PATTERN, RUN_ID_PATTERN
from service.api.schemas.runs import SizeClassName
from service.api.schemas.stats import FleetGroup, FleetMfuStats
from service.usecases import fleet_stats

router = APIRouter(tags=["stats"], route_class=StrictJsonRoute)


@router.get(
    "/stats/mfu",
    response_model=FleetMfuStats,
    summary="Fleet MFU percentiles by accelerator and model size; where a run ranks",
    description="Percentiles p10-p90 of per-run median MFU by accelerator and model-size class (total "
    "parameters: below 1B, 1-10B, 10-100B, 100B and above), across all tenants as aggregates only (a "
    "group with fewer than 5 runs is not shown; caller-described `custom` parts are not pooled), and "
    "for the caller's tenant alone. Read from histograms kept on ingest (bins of 0.001 MFU, "
    "interpolated), so the answer costs the same with a million runs. `run_id` adds where that run "
    "ranks in its fleet group and within its tenant (404 when it is not the caller's tenant's). "
    "`Accept: image/svg+xml` or `image/png` answers a chart of the groups' percentiles, the run marked.",
    responses=representations(SVG, PNG),
    openapi_extra={"x-problems": ["404", "406"]},
)
def get_fleet_mfu_stats(
    request: Request,
    reader: Reader,
    accelerator: Annotated[
        str | None,
        Query(max_length=100, pattern=NO_NUL_PATTERN, description="catalog id or device name, or `custom`"),
    ] = None,
    size_class: SizeClassName | None = None,
    run_id: Annotated[str | None, Query(min_length=1, max_length=32, pattern=RUN_ID_PATTERN)] = None,
) -> FleetMfuStats | Response:
    media_type = negotiate(request, (JSON, SVG, PNG))
    with reader.unit_of_work() as uow:
        stats = fleet_stats_read(
            fleet_stats.fleet_stats(
                uow,
                tenant=reader.principal.tenant,
                accelerator=normalise_accelerator(accelerator),
                size_class=size_class,
                run_id=run_id,
            )
        )
    if media_type == JSON:
        return stats
    fmt: plots.Format = "svg" if media_type == SVG else "png"
    return media_response(_percentiles_chart(stats, fmt), media_type, filename=f"fleet-mfu.{fmt}")


def _percentiles_chart(stats: FleetMfuStats, fmt: plots.Format) -> bytes | str:
    def row(scope: str, group: FleetGroup) -> plots.PercentileRow:
        p = group.percentiles
        label = f"{scope} · {group.accelerator} · {group.size_class} · {group.run_count} runs"
        return (label, p.p10, p.p25, p.p50, p.p75, p.p90)

    groups = [("fleet", g) for g in stats.fleet] + [("your tenant", g) for g in stats.tenant]
    marker = None
    if stats.run is not None and stats.run.median_mfu is not None:
        at = next(
            (
                index
                for index, (_, g) in enumerate(groups)
                if (g.accelerator, g.size_class) == (stats.run.accelerator, stats.run.size_class)
            ),
            None,
        )
        if at is not None:
            marker = (at, stats.run.median_mfu, f"{stats.run.run_id} (median)")
    return plots.fleet_percentiles_chart(
        fmt,
        rows=[row(scope, g) for scope, g in groups],
        title=f"Median MFU per run: {len(stats.fleet)} fleet and {len(stats.tenant)} tenant groups",
        marker=marker,
    )
