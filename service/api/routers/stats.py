"""Fleet MFU statistics (API key)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from service.api.deps import Reader
from service.api.json_body import StrictJsonRoute
from service.api.schemas.fields import NO_NUL_PATTERN, RUN_ID_PATTERN
from service.api.schemas.runs import SizeClassName
from service.api.schemas.stats import FleetMfuStats
from service.api.services import fleet_stats
from service.api.services import runs as service

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
    "ranks in its fleet group and within its tenant (404 when it is not the caller's tenant's).",
    openapi_extra={"x-problems": ["404"]},
)
def get_fleet_mfu_stats(
    reader: Reader,
    accelerator: Annotated[
        str | None,
        Query(max_length=100, pattern=NO_NUL_PATTERN, description="catalog id or device name, or `custom`"),
    ] = None,
    size_class: SizeClassName | None = None,
    run_id: Annotated[str | None, Query(min_length=1, max_length=32, pattern=RUN_ID_PATTERN)] = None,
) -> FleetMfuStats:
    with reader.unit_of_work() as uow:
        return fleet_stats.fleet_mfu_stats(
            uow.connection,
            principal=reader.principal,
            accelerator=service.normalise_accelerator(accelerator),
            size_class=size_class,
            run_id=run_id,
        )
