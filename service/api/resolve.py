"""Request schemas → domain values. Domain errors come back with the request's field path
(``with_field_prefix``, the domain's one re-rooting helper, re-exported for the routers)."""

from __future__ import annotations

from functools import lru_cache

from service.api.schemas.common import HardwareRef, ModelDimensions, ModelRef, ThroughputIn
from service.domain import hardware, mfu, models
from service.domain.errors import with_field_prefix
from service.store import records as records_store


@lru_cache(maxsize=1024)
def _spec_from_dimensions(dimensions: ModelDimensions) -> models.ModelSpec:
    values = dimensions.model_dump(exclude_none=True)
    return models.build_model_spec(**values)


def resolve_model(ref: ModelRef, *, field: str = "body.model") -> models.ModelSpec:
    if ref.preset is not None:
        preset = ref.preset
        return with_field_prefix(f"{field}.preset", lambda: models.get_preset(preset).spec, exact=True)
    if ref.dimensions is not None:
        dimensions = ref.dimensions
        return with_field_prefix(f"{field}.dimensions", lambda: _spec_from_dimensions(dimensions))
    config = ref.hf_config or {}
    return with_field_prefix(f"{field}.hf_config", lambda: models.from_hf_config(config))


def resolve_accelerator(ref: HardwareRef, *, field: str = "body.hardware") -> hardware.Accelerator:
    if ref.custom is not None:
        custom = ref.custom
        return with_field_prefix(
            f"{field}.custom",
            lambda: hardware.custom_accelerator(
                name=custom.name,
                peak_tflops={str(key): value for key, value in custom.peak_tflops.items()},
                memory_bytes=custom.memory_bytes,
                hbm_bandwidth_bytes_per_second=custom.hbm_bandwidth_bytes_per_second,
                intra_node_bandwidth_bytes_per_second=custom.intra_node_bandwidth_bytes_per_second,
                tdp_watts=custom.tdp_watts,
            ),
        )
    name = ref.accelerator or ""
    return with_field_prefix(f"{field}.accelerator", lambda: hardware.lookup_accelerator(name), exact=True)


def resolve_throughput(throughput: ThroughputIn) -> mfu.Throughput:
    return mfu.throughput_from_fields(throughput.model_dump(exclude_none=True))[2]


def normalise_accelerator(value: str | None) -> str | None:
    if value is None:
        return None
    if value.strip().lower() == records_store.CUSTOM_ACCELERATOR:
        return records_store.CUSTOM_ACCELERATOR
    return with_field_prefix("query.accelerator", lambda: hardware.lookup_accelerator(value).id)


def normalise_model(value: str | None) -> str | None:
    if value is None:
        return None
    preset = models.PRESETS.get(value.strip().lower())
    return preset.id if preset is not None else value
