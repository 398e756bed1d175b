"""Request schemas → domain values. Domain errors come back with the request's field path."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import TypeVar

from service.api.schemas.common import HardwareRef, ModelDimensions, ModelRef, ThroughputIn
from service.domain import hardware, mfu, models
from service.domain.errors import DomainError

T = TypeVar("T")


def with_field_prefix(
    prefix: str, action: Callable[[], T], *, exact: bool = False, fields: Mapping[str, str] | None = None
) -> T:
    """Run ``action``; a domain error is raised again naming the request path of its field: ``fields``
    maps bare names to full paths, any other field goes under ``prefix`` (unless it already starts
    with it), and ``exact`` (or a field of None) names ``prefix`` itself: the whole sub-object at
    ``prefix`` is the one value at fault. The one place a domain error's field is re-rooted; the
    domain's error is left as raised (a copy names the path)."""
    try:
        return action()
    except DomainError as exc:
        name = exc.field
        if exact or name is None:
            path = prefix
        elif fields and name in fields:
            path = fields[name]
        elif name.startswith(prefix):
            path = name
        else:
            path = f"{prefix}.{name}"
        if path == name:
            raise
        rooted = copy.copy(exc)
        rooted.field = path
        raise rooted from exc


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
    if throughput.tokens_per_second is not None:
        return mfu.GlobalTokensPerSecond(throughput.tokens_per_second)
    if throughput.tokens_per_second_per_device is not None:
        return mfu.TokensPerSecondPerDevice(throughput.tokens_per_second_per_device)
    if throughput.sequences_per_second is not None:
        return mfu.SamplesPerSecond(throughput.sequences_per_second)
    assert throughput.step_time_seconds is not None
    return mfu.StepTime(
        throughput.step_time_seconds,
        global_batch_tokens=throughput.global_batch_tokens,
        global_batch_sequences=throughput.global_batch_sequences,
    )
