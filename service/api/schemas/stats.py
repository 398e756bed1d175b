"""Fleet MFU statistics: percentiles of per-run median MFU by accelerator and model-size class."""

from __future__ import annotations

from pydantic import Field

from service.api.schemas.common import ApiModel
from service.api.schemas.runs import SizeClassName


class MfuPercentiles(ApiModel):
    p10: float | None
    p25: float | None
    p50: float | None
    p75: float | None
    p90: float | None


class FleetGroup(ApiModel):
    accelerator: str = Field(description="catalog id (`custom` for caller-described parts, tenant only)")
    size_class: SizeClassName
    run_count: int = Field(description="runs with at least one measurement")
    percentiles: MfuPercentiles


class GoodputGroup(ApiModel):
    accelerator: str = Field(description="catalog id (`custom` for caller-described parts, tenant only)")
    size_class: SizeClassName
    job_count: int = Field(
        description="jobs with an ended attempt (job_ended or failure; each job once, in its latest run's group)"
    )
    goodput: MfuPercentiles = Field(description="percentiles of job goodput (productive ÷ allocated time)")
    effective_mfu_job_count: int = Field(description="of those, jobs with a measured MFU")
    effective_mfu: MfuPercentiles = Field(
        description="percentiles of effective MFU = the job's MFU (mean of its attempts' medians) × goodput"
    )


class RunRank(ApiModel):
    run_id: str
    accelerator: str
    size_class: SizeClassName
    median_mfu: float | None
    fleet_percentile_rank: float | None = Field(
        description="mid-rank among the fleet group's run medians, 0-1 (null when the group is not shown)"
    )
    fleet_run_count: int | None
    tenant_percentile_rank: float | None = Field(description="mid-rank among the tenant's runs in the group")
    tenant_run_count: int | None
    note: str


class SizeClassRead(ApiModel):
    name: SizeClassName
    min_parameters: int
    max_parameters_exclusive: float | None


class FleetMfuStats(ApiModel):
    statistic: str
    bin_width: float = Field(
        description="resolution of the histograms the percentiles are interpolated from (MFU fraction)"
    )
    minimum_runs_per_group: int = Field(description="fleet groups with fewer runs are not shown")
    size_classes: list[SizeClassRead] = Field(description="by total parameters (all experts of a MoE)")
    fleet: list[FleetGroup] = Field(description="across every tenant: aggregates only")
    tenant: list[FleetGroup] = Field(description="the caller's tenant alone (every group)")
    run: RunRank | None = Field(description="where `run_id` ranks, when it was given")
    goodput_statistic: str
    goodput_fleet: list[GoodputGroup] = Field(
        description="across every tenant: aggregates only, groups of at least minimum_runs_per_group jobs"
    )
    goodput_tenant: list[GoodputGroup] = Field(description="the caller's tenant alone (every group)")
