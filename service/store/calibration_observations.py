"""Stored runs as calibration observations (what a fit of the performance model reads)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, func, select

from service.store.records import CUSTOM_ACCELERATOR
from service.store.tables import runs

#: Most runs one calibration fit reads (the most recent ones).
CALIBRATION_MAX_RUNS = 500
#: How far back a calibration read looks: the most recent runs recorded (fleet-wide: by any tenant on
#: any accelerator, a primary-key range; one tenant: its runs on the accelerator, by start time).
#: Bounds the rows a read examines whatever the size of the table.
CALIBRATION_SCAN_RUNS = 20_000


@dataclass(frozen=True, slots=True)
class CalibrationObservation:
    """One measured run as a calibration fit needs it: the description as given (``spec``: model,
    hardware, parallelism, global batch) and its median MFU under ``convention``. Carries no id and
    no tenant: fleet-wide observations only ever leave the service as fitted constants."""

    spec: dict[str, Any]
    precision: str
    seq_len_tokens: int
    device_count: int
    convention: str
    median_mfu: float


def calibration_observations(
    connection: Connection,
    *,
    accelerator: str,
    tenant: str | None,
    limit: int = CALIBRATION_MAX_RUNS,
    scan: int = CALIBRATION_SCAN_RUNS,
) -> list[CalibrationObservation]:
    """The most recent runs on ``accelerator`` (a catalog id) that have a median MFU in (0, 1] and
    record what a step prediction needs beyond the model: a micro-batch size and a global batch of
    whole sequences. ``tenant`` None: across tenants (fleet-wide; caller-described parts never
    count, their peaks are their owners'); else that tenant's runs only.

    Bounded twice: at most ``limit`` runs come back, and at most the ``scan`` most recent runs are
    looked at (fleet-wide: the last ``scan`` primary keys, a range scan; one tenant: its last
    ``scan`` runs on the accelerator, read from the (tenant, accelerator, started_at) index)."""
    if tenant is None and accelerator == CUSTOM_ACCELERATOR:
        return []
    c = runs.c
    micro_batch = c.spec[("parallelism", "micro_batch_sequences")].as_integer()
    usable = (
        c.median_mfu > 0,
        c.median_mfu <= 1,
        c.global_batch_tokens % c.seq_len_tokens == 0,
        micro_batch.is_not(None),
    )
    columns = (c.spec, c.precision, c.seq_len_tokens, c.device_count, c.convention, c.median_mfu)
    if tenant is None:
        newest = connection.execute(select(func.max(c.pk))).scalar_one_or_none()
        if newest is None:
            return []
        query = (
            select(*columns)
            .where(c.pk > newest - scan, c.accelerator == accelerator, *usable)
            .order_by(c.pk.desc())
        )
    else:
        # The tenant's last ``scan`` runs on the accelerator first (from the index, materialised by
        # the LIMIT), then their rows by primary key: the filters never widen the read.
        recent = (
            select(c.pk, c.started_at)
            .where(c.tenant == tenant, c.accelerator == accelerator)
            .order_by(c.started_at.desc())
            .limit(scan)
            .subquery("recent")
        )
        query = (
            select(*columns)
            .select_from(recent.join(runs, runs.c.pk == recent.c.pk))
            .where(*usable)
            .order_by(recent.c.started_at.desc(), recent.c.pk.desc())
        )
    return [CalibrationObservation(*row) for row in connection.execute(query.limit(limit))]
