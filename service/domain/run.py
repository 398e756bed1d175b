"""A stored training run as the domain sees it: what it runs on (from the description it was recorded
with) and its measurement summary, with the rule that updates the summary when measurements arrive.

The summary is what lists, comparisons and fleet statistics read instead of the measurement history
(DESIGN.md section 5): the count, the first time, the latest step's reading, and the median MFU from the
run's MFU histogram (:func:`service.domain.fleet.percentile_from_histogram`), with its fleet bin.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from service.domain import fleet, hardware, models
from service.domain.errors import InvalidInput

#: A run's tags at most: the contract's bound on every tag list (a request's tags, add_tags and
#: remove_tags), and so on the set an edit leaves.
MAX_TAGS = 50
#: Statuses a run does not leave: a restart is a new run with the next attempt number.
FINAL_STATUSES = frozenset({"finished", "failed"})


@dataclass(frozen=True, slots=True)
class NewMeasurement:
    """What the summary reads of one measurement of a step the run did not have."""

    step: int
    measured_at: datetime
    mfu: float
    tokens_per_second: float


@dataclass(frozen=True, slots=True)
class FreshMeasurements:
    """What the summary reads of a batch of measurements of steps the run did not have: how many, the
    earliest time, and the one of the highest step."""

    count: int
    earliest_measured_at: datetime
    top: NewMeasurement

    @classmethod
    def of(cls, measurements: Sequence[NewMeasurement]) -> FreshMeasurements | None:
        if not measurements:
            return None
        return cls(
            len(measurements),
            min(measurement.measured_at for measurement in measurements),
            max(measurements, key=lambda measurement: measurement.step),
        )


@dataclass(frozen=True, slots=True)
class RunSummary:
    """A run's measurement summary (all None / 0 before its first measurement)."""

    measurement_count: int = 0
    median_mfu: float | None = None
    fleet_bin: int | None = None
    first_measured_at: datetime | None = None
    latest_step: int | None = None
    latest_measured_at: datetime | None = None
    latest_mfu: float | None = None
    latest_tokens_per_second: float | None = None

    def after(self, fresh: FreshMeasurements | None, histogram: Mapping[int, int]) -> RunSummary:
        """The summary once ``fresh`` measurements (of steps the run did not have) are stored, given the
        run's MFU histogram with them counted: the count grows, the median is the histogram's (and
        its fleet bin), the first time may move earlier, and the latest_* fields follow the highest
        step only (a late report of a lower step does not move them)."""
        if fresh is None:
            return self
        median = fleet.percentile_from_histogram(dict(histogram), 0.5)
        if median is None:
            raise ValueError("the run's histogram is empty after adding measurements")
        first = fresh.earliest_measured_at.astimezone(UTC)
        top = fresh.top
        summary = replace(
            self,
            measurement_count=self.measurement_count + fresh.count,
            median_mfu=median,
            fleet_bin=fleet.mfu_bin(median),
            first_measured_at=first
            if self.first_measured_at is None or first < self.first_measured_at
            else self.first_measured_at,
        )
        if self.latest_step is not None and top.step <= self.latest_step:
            return summary
        return replace(
            summary,
            latest_step=top.step,
            latest_measured_at=top.measured_at.astimezone(UTC),
            latest_mfu=top.mfu,
            latest_tokens_per_second=top.tokens_per_second,
        )


def status_after(current: str, requested: str) -> str:
    """A run's status after a change is asked: running → finished | failed, once. The same status again
    changes nothing (a retried call is safe); leaving a final status is :class:`FinalStatusLocked`."""
    if requested != current and current in FINAL_STATUSES:
        raise FinalStatusLocked(current, requested)
    return requested


class FinalStatusLocked(Exception):
    """A finished or failed run was asked to take another status."""

    def __init__(self, current: str, requested: str) -> None:
        super().__init__(f"a {current} run cannot become {requested}")
        self.current = current
        self.requested = requested


def tags_after(
    current: Sequence[str],
    *,
    replace_with: Sequence[str] | None = None,
    add: Sequence[str] | None = None,
    remove: Sequence[str] | None = None,
) -> list[str] | None:
    """A run's tags after an edit (``replace_with`` the set, or ``add`` then ``remove``), first
    occurrence order kept, duplicates dropped; None when the edit names no tags. More than
    :data:`MAX_TAGS` is refused at ``body.add_tags``, the only way to reach it past the schema."""
    if replace_with is not None:
        tags = list(dict.fromkeys(replace_with))
    elif add is not None or remove is not None:
        removed = set(remove or ())
        tags = [tag for tag in dict.fromkeys([*current, *(add or ())]) if tag not in removed]
    else:
        return None
    if len(tags) > MAX_TAGS:
        raise InvalidInput(f"a run has at most {MAX_TAGS} tags.", field="body.add_tags")
    return tags


#: The summary's field names (as the store's run record names them too).
SUMMARY_FIELDS = tuple(RunSummary.__dataclass_fields__)


def global_batch(*, tokens: int | None, sequences: int | None, seq_len_tokens: int) -> tuple[int, int | None]:
    """A run's global batch as (tokens, sequences) from whichever was given: sequences × sequence
    length in tokens; tokens ÷ sequence length in sequences when whole (None when not: a batch that is
    no whole number of sequences, e.g. packed documents, has no sequence count)."""
    if sequences is not None:
        return sequences * seq_len_tokens, sequences
    if tokens is None:
        raise ValueError("give the global batch in tokens or in sequences")
    return tokens, tokens // seq_len_tokens if tokens % seq_len_tokens == 0 else None


def stored_model(spec: Mapping[str, Any]) -> models.ModelSpec:
    """The model of a run's stored description (``spec["model"]``: a preset id, dimensions, or a
    Hugging Face config, exactly as validated when the run was recorded)."""
    model = spec["model"]
    if model.get("preset") is not None:
        return models.get_preset(model["preset"]).spec
    if model.get("dimensions") is not None:
        return models.build_model_spec(**model["dimensions"])
    return models.from_hf_config(model["hf_config"])


def stored_accelerator(spec: Mapping[str, Any]) -> hardware.Accelerator:
    """The accelerator of a run's stored description (``spec["hardware"]``: a catalog id or device
    name, or a caller-described part)."""
    given = spec["hardware"]
    custom = given.get("custom")
    if custom is None:
        return hardware.lookup_accelerator(given["accelerator"])
    return hardware.custom_accelerator(
        name=custom["name"],
        peak_tflops={str(key): value for key, value in custom["peak_tflops"].items()},
        memory_bytes=custom.get("memory_bytes"),
        hbm_bandwidth_bytes_per_second=custom.get("hbm_bandwidth_bytes_per_second"),
        intra_node_bandwidth_bytes_per_second=custom.get("intra_node_bandwidth_bytes_per_second"),
        tdp_watts=custom.get("tdp_watts"),
    )
