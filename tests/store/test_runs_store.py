"""The run store's repository functions on SQLite and PostgreSQL (the ``engine`` fixture)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import Engine, event, func, insert, select
from sqlalchemy.exc import IntegrityError

from service.api.run_request import prepare_run
from service.api.schemas.runs import RunCreate
from service.store import histograms as histograms_store
from service.store import idempotency as idempotency_store
from service.store import measurements as measurements_store
from service.store import migrate
from service.store import records as records_store
from service.store import run_filters as run_filters_store
from service.store import runs as store
from service.store.engine import build_engine
from service.store.tables import fleet_mfu_bins, measurements, run_mfu_bins, run_tags, tenant_mfu_bins
from service.store.uow import UnitOfWork
from tests.api.conftest import run_body

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def _create(engine: Engine, tenant: str = "team-a", **overrides: Any) -> records_store.RunRecord:
    prepared = prepare_run(RunCreate.model_validate(run_body(**overrides)), now=NOW)
    with UnitOfWork(engine, write=True) as uow:
        run = store.create_run(uow.connection, tenant=tenant, values=prepared.values, tags=prepared.tags)
        uow.commit()
    return run


def _row(run: records_store.RunRecord, step: int, measured_at: datetime, mfu: float = 0.4) -> dict[str, Any]:
    return {
        "run_pk": run.pk,
        "step": step,
        "measured_at": measured_at,
        "throughput_form": "tokens_per_second",
        "throughput_value": 4e5,
        "global_batch_tokens": None,
        "global_batch_sequences": None,
        "tokens_per_second": 4e5,
        "tokens_per_second_per_device": 4e5 / 64,
        "mfu": mfu,
        "hfu": mfu,
        "achieved_tflops_per_device": mfu * 989.4,
        "loss": None,
        "memory_bytes": None,
        "grad_norm_sq_small": None,
        "grad_norm_sq_big": None,
        "batch_small_tokens": None,
        "batch_big_tokens": None,
    }


def test_a_run_is_found_only_under_its_own_tenant(engine: Engine) -> None:
    run = _create(engine, tags=["b", "a"])
    with UnitOfWork(engine, write=False) as uow:
        found = store.get_run(uow.connection, tenant="team-a", run_id=run.id)
        assert found is not None and found.tags == ("a", "b")
        assert store.get_run(uow.connection, tenant="team-b", run_id=run.id) is None
        assert store.get_runs(uow.connection, tenant="team-b", run_ids=[run.id]) == {}
        listed = run_filters_store.list_runs(
            uow.connection,
            tenant="team-b",
            filters=run_filters_store.RunFilters(),
            sort="started_at",
            descending=True,
            limit=10,
        )
        assert listed == []


def test_the_database_refuses_a_second_run_for_one_job_attempt(engine: Engine) -> None:
    _create(engine, scheduler_job_id="slurm-1", attempt=0)
    with pytest.raises(IntegrityError):
        _create(engine, scheduler_job_id="slurm-1", attempt=0)
    _create(engine, tenant="team-b", scheduler_job_id="slurm-1", attempt=0)


def test_the_database_refuses_a_second_measurement_of_a_step(engine: Engine) -> None:
    run = _create(engine)
    with UnitOfWork(engine, write=True) as uow:
        measurements_store.insert_measurements(uow.connection, rows=[_row(run, 1, NOW)])
        uow.commit()
    with pytest.raises(IntegrityError), UnitOfWork(engine, write=True) as uow:
        measurements_store.insert_measurements(uow.connection, rows=[_row(run, 1, NOW, mfu=0.9)])


def test_times_written_in_bulk_read_back_and_sort_like_times_written_through_core(engine: Engine) -> None:
    run = _create(engine)
    paris = timezone(timedelta(hours=1))
    bulk = [
        _row(run, 1, datetime(2026, 12, 2, 13, 0, 0, 250_000, tzinfo=paris)),  # 12:00:00.25 UTC
        _row(run, 3, datetime(2026, 12, 2, 12, 0, 1, tzinfo=UTC)),
    ]
    core = _row(run, 2, datetime(2026, 12, 2, 12, 0, 0, 500_000, tzinfo=UTC))
    with UnitOfWork(engine, write=True) as uow:
        measurements_store.insert_measurements(uow.connection, rows=bulk)
        uow.connection.execute(insert(measurements), [core])
        uow.commit()
    with UnitOfWork(engine, write=False) as uow:
        rows = uow.connection.execute(
            select(measurements.c.step, measurements.c.measured_at).order_by(measurements.c.measured_at)
        ).all()
        latest = uow.connection.execute(select(func.max(measurements.c.measured_at))).scalar_one()
    assert [step for step, _ in rows] == [1, 2, 3]
    assert rows[0][1] == datetime(2026, 12, 2, 12, 0, 0, 250_000, tzinfo=UTC)
    assert all(value.tzinfo is not None and value.utcoffset() == timedelta(0) for _, value in rows)
    assert latest == datetime(2026, 12, 2, 12, 0, 1, tzinfo=UTC)


def test_every_value_a_request_can_carry_is_stored_as_sent_by_the_bulk_insert(engine: Engine) -> None:
    # JSON integers in number columns (the strict decoder keeps 2 as an int), every nullable column
    # filled, the largest values the contract allows: PostgreSQL's binary COPY packs each as its
    # column's type, SQLite's multi-row INSERT binds it.
    run = _create(engine)
    full = {
        **_row(run, 10**12, datetime(2026, 12, 2, 17, 30, tzinfo=timezone(timedelta(hours=5, minutes=30)))),
        "throughput_form": "step_time_seconds",
        "throughput_value": 2,
        "global_batch_tokens": 10**12,
        "global_batch_sequences": 4096,
        "loss": 3,
        "memory_bytes": 10**15,
        "grad_norm_sq_small": 1.5,
        "grad_norm_sq_big": 0,
        "batch_small_tokens": 1,
        "batch_big_tokens": 10**12,
    }
    with UnitOfWork(engine, write=True) as uow:
        measurements_store.insert_measurements(uow.connection, rows=[full])
        uow.commit()
    with UnitOfWork(engine, write=False) as uow:
        stored = uow.connection.execute(select(measurements)).one()._asdict()
    assert stored == {**full, "measured_at": datetime(2026, 12, 2, 12, 0, tzinfo=UTC)}
    assert stored["measured_at"].utcoffset() == timedelta(0)


def test_a_bulk_insert_keeps_each_rows_values_whichever_columns_other_rows_leave_empty(
    engine: Engine,
) -> None:
    # SQLite leaves out of the INSERT a column that is NULL in every row: a column filled only in a
    # later row, one filled in the first row only and one filled in none must each come back as sent.
    run = _create(engine)
    rows = [_row(run, step, NOW + timedelta(seconds=step)) for step in range(1, 5001)]
    rows[0]["loss"] = 2.5
    rows[-1]["memory_bytes"] = 7 * 2**30
    for index in range(0, len(rows), 3):
        rows[index]["grad_norm_sq_small"] = float(index)
    with UnitOfWork(engine, write=True) as uow:
        measurements_store.insert_measurements(uow.connection, rows=rows)
        uow.commit()
    with UnitOfWork(engine, write=False) as uow:
        stored = [row._asdict() for row in uow.connection.execute(select(measurements).order_by("step"))]
    assert stored == rows


def test_the_binary_copy_names_the_migrated_column_types(postgres_url: str) -> None:
    from psycopg.postgres import types as postgres_types

    migrate.upgrade(postgres_url)
    engine = build_engine(postgres_url, pool_size=1)
    try:
        with UnitOfWork(engine, write=False) as uow:
            migrated = dict(
                uow.connection.exec_driver_sql(
                    "SELECT attname, atttypid::int FROM pg_attribute "
                    "WHERE attrelid = 'measurements'::regclass AND attnum > 0 AND NOT attisdropped"
                ).all()
            )
    finally:
        engine.dispose()
    named = {
        column: postgres_types[name].oid
        for column, name in zip(
            measurements_store.MEASUREMENT_COLUMNS, measurements_store.copy_column_types(), strict=True
        )
    }
    assert named == migrated


def test_a_naive_time_is_refused_by_the_bulk_insert(engine: Engine) -> None:
    run = _create(engine)
    with pytest.raises(ValueError, match="naive"), UnitOfWork(engine, write=True) as uow:
        measurements_store.insert_measurements(
            uow.connection, rows=[_row(run, 1, datetime(2026, 12, 2, 12, 0))]
        )


def test_existing_steps_are_found_in_a_range(engine: Engine) -> None:
    run = _create(engine)
    with UnitOfWork(engine, write=True) as uow:
        measurements_store.insert_measurements(
            uow.connection, rows=[_row(run, step, NOW) for step in (1, 5, 9, 20)]
        )
        assert measurements_store.existing_steps(uow.connection, run_pk=run.pk, first=5, last=19) == {5, 9}
        assert measurements_store.step_range(uow.connection, run_pk=run.pk) == (1, 20)
        uow.commit()


def test_deleting_a_run_cascades_and_takes_its_median_out_of_the_histograms(engine: Engine) -> None:
    run = _create(engine, tags=["x"])
    with UnitOfWork(engine, write=True) as uow:
        connection = uow.connection
        measurements_store.insert_measurements(connection, rows=[_row(run, 1, NOW)])
        histograms_store.add_to_run_histogram(connection, run_pk=run.pk, counts={400: 1})
        store.update_run(connection, run_pk=run.pk, values={"fleet_bin": 400, "median_mfu": 0.4005})
        histograms_store.move_run_in_histograms(connection, run=run, old_bin=None, new_bin=400)
        uow.commit()
    with UnitOfWork(engine, write=True) as uow:
        current = store.get_run(uow.connection, tenant="team-a", run_id=run.id, for_update=True)
        assert current is not None
        store.delete_run(uow.connection, run=current)
        uow.commit()
    with UnitOfWork(engine, write=False) as uow:
        for table in (measurements, run_tags, run_mfu_bins):
            assert uow.connection.execute(select(func.count()).select_from(table)).scalar_one() == 0
        for table in (tenant_mfu_bins, fleet_mfu_bins):
            assert uow.connection.execute(select(func.sum(table.c.n_runs))).scalar_one() == 0


def test_a_run_moves_between_bins_in_both_histograms_and_custom_parts_stay_out_of_the_fleet(
    engine: Engine,
) -> None:
    catalog = _create(engine)
    custom = _create(
        engine,
        hardware={"custom": {"name": "lab", "peak_tflops": {"bf16": 900.0}}, "count": 64},
        parallelism={"tp": 2},
    )
    with UnitOfWork(engine, write=True) as uow:
        histograms_store.move_run_in_histograms(uow.connection, run=catalog, old_bin=None, new_bin=300)
        histograms_store.move_run_in_histograms(uow.connection, run=catalog, old_bin=300, new_bin=410)
        histograms_store.move_run_in_histograms(uow.connection, run=custom, old_bin=None, new_bin=410)
        uow.commit()
    with UnitOfWork(engine, write=False) as uow:
        tenant = histograms_store.tenant_histograms(uow.connection, tenant="team-a")
        fleet = histograms_store.fleet_histograms(uow.connection)
    assert tenant == {("h100-sxm", "1b_to_10b"): {410: 1}, ("custom", "1b_to_10b"): {410: 1}}
    assert fleet == {("h100-sxm", "1b_to_10b"): {410: 1}}


def test_an_idempotency_key_is_claimed_once_and_taken_over_only_when_stale(engine: Engine) -> None:
    arguments = {"tenant": "team-a", "key": "k", "operation": "create_run", "request_hash": "h"}
    with UnitOfWork(engine, write=True) as uow:
        assert idempotency_store.claim_idempotency_key(uow.connection, now=NOW, **arguments)
        assert not idempotency_store.claim_idempotency_key(uow.connection, now=NOW, **arguments)
        record = idempotency_store.get_idempotency_record(uow.connection, tenant="team-a", key="k")
        assert record is not None and record.state == "in_flight"
        fresh = idempotency_store.reclaim_idempotency_key(
            uow.connection,
            tenant="team-a",
            key="k",
            request_hash="h",
            stale_before=NOW - timedelta(seconds=60),
            now=NOW,
        )
        assert not fresh
        stale = idempotency_store.reclaim_idempotency_key(
            uow.connection,
            tenant="team-a",
            key="k",
            request_hash="h",
            stale_before=NOW + timedelta(seconds=1),
            now=NOW,
        )
        assert stale
        other_body = idempotency_store.reclaim_idempotency_key(
            uow.connection,
            tenant="team-a",
            key="k",
            request_hash="other",
            stale_before=NOW + timedelta(hours=1),
            now=NOW,
        )
        assert not other_body
        idempotency_store.complete_idempotency_key(
            uow.connection, tenant="team-a", key="k", response_status=201, response_body="{}"
        )
        idempotency_store.release_idempotency_key(
            uow.connection, tenant="team-a", key="k"
        )  # done: not released
        done = idempotency_store.get_idempotency_record(uow.connection, tenant="team-a", key="k")
        assert done is not None and done.state == "done" and done.response_status == 201
        uow.commit()


def test_keyset_pages_cover_every_run_once(engine: Engine) -> None:
    created = [_create(engine, started_at=(NOW + timedelta(minutes=i % 4)).isoformat()) for i in range(11)]
    seen: list[str] = []
    after = None
    with UnitOfWork(engine, write=False) as uow:
        while True:
            page = run_filters_store.list_runs(
                uow.connection,
                tenant="team-a",
                filters=run_filters_store.RunFilters(),
                sort="started_at",
                descending=False,
                limit=3,
                after=after,
            )
            if not page:
                break
            seen += [run.id for run in page]
            after = (page[-1].started_at, page[-1].pk)
    assert sorted(seen) == sorted(run.id for run in created)
    assert len(seen) == len(set(seen))


def _listed_with_plan(
    engine: Engine, filters: run_filters_store.RunFilters
) -> tuple[list[records_store.RunRecord], list[str]]:
    """A time-ordered page and, on SQLite, the plan of its query (EXPLAIN QUERY PLAN details)."""
    statements: list[tuple[str, Any]] = []

    def capture(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "FROM runs" in statement:
            statements.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", capture)
    try:
        with UnitOfWork(engine, write=False) as uow:
            page = run_filters_store.list_runs(
                uow.connection, tenant="team-a", filters=filters, sort="started_at", descending=True, limit=50
            )
            plan: list[str] = []
            if engine.dialect.name == "sqlite":
                statement, parameters = statements[0]
                rows = uow.connection.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters)
                plan = [row[-1] for row in rows]
    finally:
        event.remove(engine, "before_cursor_execute", capture)
    return page, plan


def test_a_finished_filter_beside_a_model_pages_through_the_model_index(engine: Engine) -> None:
    # Most runs end finished: beside a model (or accelerator) the status must not steer SQLite's
    # planner to the (tenant, status) index, which tests every finished run of the tenant.
    wanted = {"finished": set(), "failed": set()}
    for i in range(12):
        status = ("finished", "failed", "running")[i % 3]
        preset = "llama3-8b" if i % 2 else "llama3-70b"
        run = _create(engine, model={"preset": preset}, scheduler_job_id=f"job-{i}")
        with UnitOfWork(engine, write=True) as uow:
            store.update_run(uow.connection, run_pk=run.pk, values={"status": status})
            uow.commit()
        if preset == "llama3-8b" and status in wanted:
            wanted[status].add(run.id)
    for status, indexed_by in (
        ("finished", "ix_runs_tenant_model_name"),
        ("failed", "ix_runs_tenant_status"),
    ):
        page, plan = _listed_with_plan(engine, run_filters_store.RunFilters(model="llama3-8b", status=status))
        assert {run.id for run in page} == wanted[status]
        assert all(run.status == status and run.model_name == "llama3-8b" for run in page)
        if engine.dialect.name == "sqlite":
            assert any(indexed_by in detail for detail in plan), plan


def test_measurement_times_bind_on_sqlite_as_sqlalchemy_writes_them() -> None:
    # Ingest formats up to 10,000 times a request in bulk (measurements_store._sqlite_times); each must be the text
    # SQLAlchemy's own UtcDateTime binding writes, or rows written by the two paths would not compare.
    import random

    from pydantic import AwareDatetime, TypeAdapter
    from sqlalchemy.dialects import sqlite

    dialect = sqlite.dialect()
    bind = measurements.c.measured_at.type.dialect_impl(dialect).bind_processor(dialect)
    assert bind is not None
    rng = random.Random(3)
    zones = [UTC, timezone(timedelta(hours=2)), timezone(-timedelta(hours=5, minutes=30))]
    times = [datetime(1, 1, 1, tzinfo=UTC), datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)]
    times += [datetime(999, 12, 31, 23, 0, tzinfo=timezone(-timedelta(hours=1)))]
    for _ in range(3000):
        moment = datetime(2000, 1, 1, tzinfo=UTC) + timedelta(
            seconds=rng.randint(0, 10**9), microseconds=rng.choice([0, rng.randint(0, 999_999)])
        )
        times.append(moment.astimezone(rng.choice(zones)))
    # As ingest has them: parsed by pydantic, with its own tzinfo.
    times += TypeAdapter(list[AwareDatetime]).validate_python(
        ["2026-12-02T12:00:00Z", "2026-12-02T12:00:00.5+00:00", "2026-12-02T23:30:00.000001-01:00"]
    )
    assert measurements_store._sqlite_times(times) == [bind(moment) for moment in times]
    with pytest.raises(ValueError, match="naive"):
        measurements_store._sqlite_times([datetime(2026, 12, 2)])
