"""The ingest transaction's statements (service.store.ingest) on SQLite and PostgreSQL, held to the
store's own repository functions: what lock_for_ingest reads is what get_run / run_histogram read,
and what the batch's writes write reads back exactly (values through PostgreSQL's JSON parameters
included)."""

from __future__ import annotations

import random
from datetime import UTC, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import Engine, select

from service.domain import fleet
from service.store import histograms as histograms_store
from service.store import ingest as ingest_store
from service.store import keys as key_store
from service.store import measurements as measurements_store
from service.store import records as records_store
from service.store import runs as store
from service.store.tables import fleet_mfu_bins, measurements, tenant_mfu_bins
from service.store.uow import UnitOfWork
from tests.store.test_runs_store import NOW, _create, _row


def _measurement_values(
    run: records_store.RunRecord, steps: range, rng: random.Random
) -> list[tuple[Any, ...]]:
    """Rows with awkward values: floats across exponents, times with microseconds in other zones."""
    zones = [UTC, timezone(timedelta(hours=-7, minutes=-30)), timezone(timedelta(hours=9))]
    rows = []
    for step in steps:
        row = _row(
            run, step, (NOW + timedelta(microseconds=rng.randrange(10**12))).astimezone(rng.choice(zones))
        )
        row.update(
            mfu=rng.uniform(0.05, 0.9),
            throughput_value=rng.uniform(1.0, 1e9) * 10 ** rng.randint(-3, 6),
            tokens_per_second=rng.random() * 1e7,
            loss=rng.choice([None, rng.random() * 10, 1e-300, 1.7976931348623157e308]),
            memory_bytes=rng.choice([None, 2**62 + rng.randrange(1000)]),
            global_batch_tokens=rng.choice([None, 4_194_304]),
        )
        rows.append(row)
    return measurements_store.measurement_values(rows)


def _write(
    engine: Engine, run: records_store.RunRecord, values: list[tuple[Any, ...]]
) -> records_store.RunRecord:
    """One batch through lock_for_ingest and the store's writes, as ingest commits one."""
    with UnitOfWork(engine, write=True) as uow:
        locked = ingest_store.lock_for_ingest(
            uow.connection, key_ids=[], run_ids=[run.id], series_above=10**9
        )
        before = locked.runs[run.id].applied_to(run)
        counts = fleet.bin_counts(row[measurements_store.MEASUREMENT_COLUMNS.index("mfu")] for row in values)
        histogram = dict(locked.histograms.get(run.pk, {}))
        for mfu_bin, count in counts.items():
            histogram[mfu_bin] = histogram.get(mfu_bin, 0) + count
        median = fleet.percentile_from_histogram(histogram, 0.5)
        assert median is not None
        last = max(values, key=lambda row: row[1])
        after = records_store.RunRecord(
            **{
                **{name: getattr(before, name) for name in records_store.RunRecord.__dataclass_fields__},
                "measurement_count": before.measurement_count + len(values),
                "median_mfu": median,
                "fleet_bin": fleet.mfu_bin(median),
                "updated_at": NOW,
                "first_measured_at": min(row[measurements_store.MEASURED_AT] for row in values).astimezone(
                    UTC
                ),
                "latest_step": last[1],
                "latest_measured_at": last[measurements_store.MEASURED_AT].astimezone(UTC),
                "latest_mfu": last[measurements_store.MEASUREMENT_COLUMNS.index("mfu")],
                "latest_tokens_per_second": last[
                    measurements_store.MEASUREMENT_COLUMNS.index("tokens_per_second")
                ],
            }
        )
        measurements_store.insert_measurements(
            uow.connection,
            parameters=measurements_store.measurement_parameters(uow.connection.dialect, values),
        )
        histograms_store.add_to_run_histograms(uow.connection, counts={run.pk: counts})
        store.update_summaries(uow.connection, summaries=[after])
        histograms_store.move_runs_in_histograms(
            uow.connection, moves=[(before, before.fleet_bin, after.fleet_bin)]
        )
        uow.commit()
    return after


def test_what_the_lock_reads_is_what_the_repository_reads(engine: Engine) -> None:
    run = _create(engine, tags=[])
    other = _create(engine, tenant="team-b", tags=[])
    _write(engine, run, _measurement_values(run, range(1, 40), random.Random(1)))
    with UnitOfWork(engine, write=True) as uow:
        active = key_store.create_key(uow.connection, tenant="team-a", scopes=key_store.parse_scopes("write"))
        revoked = key_store.create_key(
            uow.connection, tenant="team-a", scopes=key_store.parse_scopes("write")
        )
        uow.commit()
    with UnitOfWork(engine, write=False) as uow:
        active_id = key_store.authenticate(uow.connection, active).key_id  # type: ignore[union-attr]
        revoked_id = key_store.authenticate(uow.connection, revoked).key_id  # type: ignore[union-attr]
    with UnitOfWork(engine, write=True) as uow:
        assert key_store.revoke_key(uow.connection, prefix=revoked.split("_")[1])
        uow.commit()

    with UnitOfWork(engine, write=True) as uow:
        locked = ingest_store.lock_for_ingest(
            uow.connection,
            key_ids=[active_id, revoked_id, 999_999],
            run_ids=[run.id, other.id, "run_missing"],
            series_above=0,
        )
        expected_run = store.get_run(uow.connection, tenant="team-a", run_id=run.id, with_tags=False)
        expected_other = store.get_run(uow.connection, tenant="team-b", run_id=other.id, with_tags=False)
        histogram = histograms_store.run_histogram(uow.connection, run_pk=run.pk)

    assert locked.active_key_ids == {active_id}
    assert set(locked.runs) == {run.id, other.id}
    # The records as created (no summary yet) plus what the lock read are the runs as they stand.
    assert locked.runs[run.id].applied_to(run) == expected_run
    assert locked.runs[other.id].applied_to(other) == expected_other
    assert (locked.runs[other.id].tenant, locked.runs[other.id].summary["median_mfu"]) == ("team-b", None)
    # Times read as UTC (the record's fields compare equal across zones; the offsets must match too).
    assert expected_run is not None and expected_run.first_measured_at is not None
    locked_first = locked.runs[run.id].summary["first_measured_at"]
    assert locked_first is not None and locked_first.utcoffset() == timedelta(0)
    with pytest.raises(ValueError, match="another run"):
        locked.runs[run.id].applied_to(other)
    assert locked.histograms == {run.pk: histogram}
    assert sum(histogram.values()) == 39
    assert locked.series_extents == {}  # no stored step buckets yet


def test_a_written_batch_reads_back_exactly(engine: Engine) -> None:
    run = _create(engine, tags=[])
    rng = random.Random(7)
    first = _measurement_values(run, range(1, 300), rng)
    second = _measurement_values(run, range(300, 310), rng)
    _write(engine, run, first)
    after = _write(engine, run, second)

    with UnitOfWork(engine, write=False) as uow:
        stored = uow.connection.execute(select(measurements).order_by(measurements.c.step)).all()
        record = store.get_run(uow.connection, tenant="team-a", run_id=run.id, with_tags=False)
        histogram = histograms_store.run_histogram(uow.connection, run_pk=run.pk)
        tenant_rows = uow.connection.execute(select(tenant_mfu_bins)).all()
        fleet_rows = uow.connection.execute(select(fleet_mfu_bins)).all()

    expected = first + second
    assert len(stored) == len(expected)
    for row, values in zip(stored, expected, strict=True):
        assert tuple(row) == values  # floats bit for bit, ints past 2**53, times to the microsecond
    assert record == after
    assert histogram == fleet.bin_counts(
        row[measurements_store.MEASUREMENT_COLUMNS.index("mfu")] for row in expected
    )
    # The run's median sits in one bin of each histogram (it moved there from the first batch's bin).
    assert after.fleet_bin is not None
    assert [(row.mfu_bin, row.n_runs) for row in tenant_rows if row.n_runs] == [(after.fleet_bin, 1)]
    assert [(row.mfu_bin, row.n_runs) for row in fleet_rows if row.n_runs] == [(after.fleet_bin, 1)]
