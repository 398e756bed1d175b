"""The accelerator and cluster of a prediction."""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    Field,
    model_validator,
)

from service.api.schemas.common import (
    ApiModel,
    CustomAccelerator,
)
from service.api.schemas.fields import Bandwidth, DeviceCount, Text
from service.api.schemas.rules import exactly_one, states


@states(exactly_one("accelerator", "custom"))
class AcceleratorIn(ApiModel):
    """Exactly one of ``accelerator`` (a catalog id or a framework device name) or ``custom``."""

    accelerator: Text | None = Field(default=None, min_length=1, max_length=100)
    custom: CustomAccelerator | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> AcceleratorIn:
        if (self.accelerator is None) == (self.custom is None):
            raise ValueError("give exactly one of accelerator (id or device name) or custom")
        return self


@states(exactly_one("accelerator", "custom"))
class ClusterIn(ApiModel):
    """The devices the job runs on: an accelerator (catalog id, device name, or ``custom``), how many,
    how many per node, and the scale-out bandwidth."""

    accelerator: Text | None = Field(
        default=None, min_length=1, max_length=100, description="catalog id or framework device name"
    )
    custom: CustomAccelerator | None = None
    device_count: DeviceCount = Field(description="devices in the job")
    devices_per_node: Annotated[int, Field(ge=1, le=1024)] = Field(
        default=8, description="devices sharing the intra-node link (NVLink domain)"
    )
    inter_node_bandwidth_bytes_per_second: Bandwidth = Field(
        default=50e9,
        description="scale-out bandwidth per device, one way, bytes/s. Default 50e9: one 400 Gb/s NDR "
        "InfiniBand NIC per GPU (25e9 for 200 Gb/s HDR)",
    )
    intra_node_bandwidth_bytes_per_second: Bandwidth | None = Field(
        default=None, description="per device, one way; default: the accelerator's (NVLink) figure"
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> ClusterIn:
        if (self.accelerator is None) == (self.custom is None):
            raise ValueError("give exactly one of accelerator (id or device name) or custom")
        return self


class AcceleratorUsedRead(ApiModel):
    id: str = Field(description="catalog id (custom for a custom part)")
    display_name: str
    memory_bytes: int | None


class ClusterRead(ApiModel):
    accelerator: AcceleratorUsedRead
    device_count: int
    devices_per_node: int
    nodes: int = Field(description="ceil(device_count / devices_per_node)")
    inter_node_bandwidth_bytes_per_second: float = Field(description="per device, one way")
    intra_node_bandwidth_bytes_per_second: float = Field(description="per device, one way, as used")
    peak_tflops_per_device: float = Field(description="dense peak at the request's precision")
