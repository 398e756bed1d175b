"""The accelerator catalog: dense peaks per precision, memory, bandwidth, power."""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, get_args

from fastapi import APIRouter, Path, Query

from service.api.json_body import StrictJsonRoute
from service.api.problems import NOT_FOUND, ProblemError
from service.api.schemas.catalog import AcceleratorList, AcceleratorRead
from service.api.schemas.fields import NO_NUL_PATTERN
from service.domain import hardware
from service.domain.errors import NotFound

router = APIRouter(tags=["hardware"], route_class=StrictJsonRoute)


@lru_cache(maxsize=128)
def _read(accelerator_id: str) -> AcceleratorRead:
    part = hardware.get_accelerator(accelerator_id)
    return AcceleratorRead(
        id=part.id,
        display_name=part.display_name,
        vendor=part.vendor,
        peak_tflops={precision: part.peak_tflops(precision) for precision in get_args(hardware.Precision)},
        supported_precisions=list(part.supported_precisions),
        memory_bytes=part.memory_bytes,
        hbm_bandwidth_bytes_per_second=part.hbm_bandwidth_bytes_per_second,
        intra_node_bandwidth_bytes_per_second=part.intra_node_bandwidth_bytes_per_second,
        intra_node_link=part.intra_node_link,
        tdp_watts=part.tdp_watts,
        device_granularity=part.device_granularity,
        uncertain_fields=list(part.uncertain_fields),
        notes=part.notes,
        sources=list(part.sources),
    )


def _not_found(exc: NotFound) -> ProblemError:
    return ProblemError(NOT_FOUND, exc.message, close_matches=list(exc.close_matches))


@router.get(
    "/hardware",
    summary="List the accelerator catalog, or resolve a framework device name",
    openapi_extra={"x-problems": ["404"]},
)
async def list_accelerators(
    device_name: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=100,
            pattern=NO_NUL_PATTERN,
            description="a device string as a framework reports it (torch.cuda.get_device_name(), JAX "
            "device_kind), e.g. `NVIDIA H100 80GB HBM3`: answers the one matching part or 404 with close "
            "matches — never a guess",
        ),
    ] = None,
    vendor: Annotated[str | None, Query(max_length=50, pattern=NO_NUL_PATTERN)] = None,
) -> AcceleratorList:
    if device_name is not None:
        try:
            ids = [hardware.resolve_device_name(device_name)]
        except NotFound as exc:
            raise _not_found(exc) from None
    else:
        ids = list(hardware.ACCELERATORS)
    items = [_read(part_id) for part_id in ids]
    if vendor is not None:
        items = [item for item in items if item.vendor.lower() == vendor.lower()]
    return AcceleratorList(items=items, count=len(items))


@router.get("/hardware/{accelerator_id}", summary="One accelerator with its dense peaks and sources")
async def get_accelerator(accelerator_id: Annotated[str, Path(max_length=100)]) -> AcceleratorRead:
    try:
        return _read(hardware.get_accelerator(accelerator_id.lower()).id)
    except NotFound as exc:
        raise _not_found(exc) from None
