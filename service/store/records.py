"""A stored run as the store reads it (:class:`RunRecord`), and how records are built from rows."""

from __future__ import annotations

import operator
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Row, Select, select

from service.store.tables import runs

RUN_ID_PREFIX = "run_"
#: The accelerator value of caller-described parts: their peaks are the caller's, so they are
#: counted in the caller's own statistics but not across tenants.
CUSTOM_ACCELERATOR = "custom"


def new_run_id() -> str:
    return RUN_ID_PREFIX + secrets.token_hex(10)


@dataclass(frozen=True, slots=True)
class RunRecord:
    pk: int
    id: str
    tenant: str
    status: str
    started_at: datetime
    finished_at: datetime | None
    created_at: datetime
    updated_at: datetime
    spec: dict[str, Any]
    model_name: str
    parameters_total: int
    parameters_active: int
    parameters_non_embedding: int
    size_class: str
    accelerator: str
    accelerator_name: str
    device_count: int
    precision: str
    seq_len_tokens: int
    global_batch_tokens: int
    convention: str
    recompute: str
    model_flops_per_token: float
    hardware_flops_per_token: float
    peak_tflops_per_device: float
    framework: str | None
    cluster: str | None
    scheduler_job_id: str | None
    attempt: int | None
    token_budget_tokens: int | None
    price_per_device_hour: float | None
    measurement_count: int
    first_measured_at: datetime | None
    latest_step: int | None
    latest_measured_at: datetime | None
    latest_mfu: float | None
    latest_tokens_per_second: float | None
    median_mfu: float | None
    fleet_bin: int | None
    tags: tuple[str, ...] = ()

    @property
    def in_fleet(self) -> bool:
        """Whether the run counts in the cross-tenant statistics."""
        return self.accelerator != CUSTOM_ACCELERATOR


_RUN_FIELDS = tuple(name for name in RunRecord.__dataclass_fields__ if name != "tags")


#: The columns of a RunRecord, in its field order: every query that builds records selects exactly
#: these, so a row is the record's arguments as they stand (no lookup by name per field; that was
#: most of an ingest batch's time in ``getattr``).
_RUN_COLUMNS = tuple(runs.c[name] for name in _RUN_FIELDS)
_MEDIAN_AT = _RUN_FIELDS.index("median_mfu")
_new_record: Callable[..., RunRecord] = RunRecord  # positional: mypy cannot see the row's arity


_ALL_RUN_FIELDS = tuple(RunRecord.__dataclass_fields__)
_run_values = operator.attrgetter(*_ALL_RUN_FIELDS)
_RUN_FIELD_AT = {name: index for index, name in enumerate(_ALL_RUN_FIELDS)}


def replace_run(run: RunRecord, values: Mapping[str, Any]) -> RunRecord:
    """``dataclasses.replace(run, **values)`` at half its cost (one C call reads every field; ingest
    replaces each run's summary in every batch)."""
    fields = list(_run_values(run))
    for name, value in values.items():
        fields[_RUN_FIELD_AT[name]] = value
    return _new_record(*fields)


def _select_runs() -> Select[Any]:
    return select(*_RUN_COLUMNS)


def median_as_read(stored: float | None) -> float | None:
    """A run's median as its summary reads: None for NO_MFU, the column's "none yet" that sorts last."""
    return None if stored is not None and stored < 0 else stored


def _record(row: Row[Any], tags: Sequence[str] = ()) -> RunRecord:
    """A record from a row of :func:`_select_runs`."""
    median = row[_MEDIAN_AT]
    if median is not None and median_as_read(median) is None:  # stored NO_MFU
        values = list(row)
        values[_MEDIAN_AT] = None
        return _new_record(*values, tags=tuple(tags))
    return _new_record(*row, tags=tuple(tags))
