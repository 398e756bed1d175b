"""Measurement ingest through the group-commit writer (service.usecases.ingest), on SQLite and
PostgreSQL: concurrent requests share transactions without losing or doubling a step, and what the
process caches (the key's principal, the run's compute facts) never lets a revoked key or a deleted
run write."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import func, select

from service.domain import fleet
from service.store import keys
from service.store import measurements as measurements_store
from service.store.tables import measurements, run_mfu_bins, runs
from service.store.uow import UnitOfWork
from tests.api.conftest import StoreClient, measurement

REQUESTS = 96
RUNS = 3


def _count(store_client: StoreClient, table: Any, **where: Any) -> int:
    query = select(func.count()).select_from(table)
    for name, value in where.items():
        query = query.where(table.c[name] == value)
    with UnitOfWork(store_client.engine, write=False) as uow:
        return int(uow.connection.execute(query).scalar_one())


def test_concurrent_single_measurements_are_batched_and_each_step_is_stored_once(
    store_client: StoreClient,
) -> None:
    run_ids = [store_client.create_run()["id"] for _ in range(RUNS)]
    # Every (run, step) is sent twice, by different threads: one write wins, the other is ignored.
    work = [(run_ids[i % RUNS], i // RUNS + 1, 4.0e5 + 1000 * i) for i in range(REQUESTS)] * 2

    def post(item: tuple[str, int, float]) -> dict[str, Any]:
        run_id, step, rate = item
        response = store_client.client.post(
            f"/v1/runs/{run_id}/measurements",
            json=measurement(step, tokens_per_second=rate),
            headers=store_client.writer,
        )
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = list(pool.map(post, work))

    assert sum(answer["stored"] for answer in answers) == REQUESTS
    assert sum(len(answer["ignored_steps"]) for answer in answers) == REQUESTS
    per_run = REQUESTS // RUNS
    for run_id in run_ids:
        run = store_client.client.get(f"/v1/runs/{run_id}", headers=store_client.writer).json()
        with UnitOfWork(store_client.engine, write=False) as uow:
            pk = uow.connection.execute(select(runs.c.pk).where(runs.c.id == run_id)).scalar_one()
            mfus = list(
                uow.connection.execute(
                    select(measurements.c.mfu).where(measurements.c.run_pk == pk)
                ).scalars()
            )
            histogram = dict(
                uow.connection.execute(
                    select(run_mfu_bins.c.mfu_bin, run_mfu_bins.c.n_measurements).where(
                        run_mfu_bins.c.run_pk == pk
                    )
                ).all()
            )
        assert len(mfus) == per_run
        assert run["summary"]["measurement_count"] == per_run
        assert run["summary"]["latest_step"] == per_run
        # The summary and histogram are those of the stored rows, computed independently here.
        assert histogram == fleet.bin_counts(mfus)
        assert run["summary"]["median_mfu"] == fleet.percentile_from_histogram(fleet.bin_counts(mfus), 0.5)
    ingest = store_client.client.app.state.measurement_ingest  # type: ignore[attr-defined]
    assert ingest.writer.jobs == 2 * REQUESTS
    # 16 threads at once: some requests shared a transaction.
    assert ingest.writer.batches < 2 * REQUESTS


def test_a_key_revoked_after_it_was_used_writes_nothing_more(store_client: StoreClient) -> None:
    key = store_client.key("team-a", "read,write")
    headers = {"X-API-Key": key}
    run_id = store_client.create_run(headers)["id"]
    store_client.add(run_id, [measurement(1)], headers=headers)  # the key is now in the process's cache
    with UnitOfWork(store_client.engine, write=True) as uow:
        assert keys.revoke_key(uow.connection, prefix=key.split("_")[1])
        uow.commit()
    url = f"/v1/runs/{run_id}/measurements"
    for _ in range(2):  # refused in the write transaction, then at authentication
        response = store_client.client.post(url, json=[measurement(2)], headers=headers)
        assert response.status_code == 401
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["type"].endswith("/unauthorized")
    assert _count(store_client, measurements) == 1
    # Another key of the tenant still writes.
    assert store_client.add(run_id, [measurement(2)])["stored"] == 1


def test_a_run_deleted_after_it_was_used_answers_404_and_keeps_no_rows(store_client: StoreClient) -> None:
    run_id = store_client.create_run()["id"]
    store_client.add(run_id, [measurement(1), measurement(2)])  # its facts are now cached
    assert store_client.client.delete(f"/v1/runs/{run_id}", headers=store_client.writer).status_code == 204
    response = store_client.client.post(
        f"/v1/runs/{run_id}/measurements", json=[measurement(3)], headers=store_client.writer
    )
    assert response.status_code == 404
    assert response.json()["run_id"] == run_id
    assert _count(store_client, measurements) == 0
    assert _count(store_client, run_mfu_bins) == 0


def test_another_tenants_run_answers_404_even_after_its_owner_ingested(store_client: StoreClient) -> None:
    run_id = store_client.create_run()["id"]
    store_client.add(run_id, [measurement(1)])
    response = store_client.client.post(
        f"/v1/runs/{run_id}/measurements", json=[measurement(2)], headers=store_client.other
    )
    assert response.status_code == 404
    assert _count(store_client, measurements) == 1


def test_a_large_body_goes_the_same_way_as_a_small_one(store_client: StoreClient) -> None:
    run_id = store_client.create_run()["id"]
    # > 32 KiB, parsed in the threadpool; 2,123 rows: four full multi-row INSERTs and a remainder.
    items = [measurement(step, tokens_per_second=4.0e5 + step) for step in range(1, 2124)]
    answer = store_client.add(run_id, items)
    assert answer["stored"] == 2123 and answer["ignored_steps"] == []
    again = store_client.add(run_id, [*items[:10], measurement(2124)])
    assert again["stored"] == 1 and again["ignored_steps"] == list(range(1, 11))
    assert again["summary"]["measurement_count"] == 2124
    page = store_client.client.get(
        f"/v1/runs/{run_id}/measurements?limit=1000", headers=store_client.writer
    ).json()
    # Every column arrived in its place: the throughput sent reads back with the step it came with.
    assert all(m["throughput"]["tokens_per_second"] == 4.0e5 + m["step"] for m in page["items"])
    assert len(page["items"]) == 1000


def test_the_documented_examples_work_together(store_client: StoreClient) -> None:
    """The contract's run example takes the contract's measurement examples (a reader trying them in
    Swagger UI gets a 200 and a plausible MFU, not an implausible-result)."""
    document = store_client.client.get("/openapi.json").json()
    run_example = document["components"]["schemas"]["RunCreate"]["examples"][0]
    created = store_client.client.post("/v1/runs", json=run_example, headers=store_client.writer)
    assert created.status_code == 201, created.text
    operation = document["paths"]["/v1/runs/{run_id}/measurements"]["post"]
    for name, example in operation["requestBody"]["content"]["application/json"]["examples"].items():
        response = store_client.client.post(
            f"/v1/runs/{created.json()['id']}/measurements",
            json=example["value"],
            headers=store_client.writer,
        )
        assert response.status_code == 200, (name, response.text)
        summary = response.json()["summary"]
        assert 0.3 < summary["latest_mfu"] < 0.6, (name, summary)


def test_ingest_reads_the_key_from_either_header_and_checks_the_scope(store_client: StoreClient) -> None:
    """The ingest route authenticates without FastAPI's security dependencies (its hot path): the same
    headers, answers and scope check as every other keyed operation."""
    run_id = store_client.create_run()["id"]
    url = f"/v1/runs/{run_id}/measurements"
    key = store_client.writer["X-API-Key"]
    for step, headers in enumerate(
        [{"Authorization": f"Bearer {key}"}, {"Authorization": f"bearer  {key} "}, {"X-API-Key": f" {key}"}],
        start=1,
    ):
        response = store_client.client.post(url, json=measurement(step), headers=headers)
        assert response.status_code == 200, (headers, response.text)
        assert response.json()["stored"] == 1
    for headers in [{}, {"Authorization": f"Basic {key}"}, {"Authorization": "Bearer "}, {"X-API-Key": " "}]:
        response = store_client.client.post(url, json=measurement(9), headers=headers)
        assert response.status_code == 401, headers
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert "X-API-Key" in response.json()["detail"]
    response = store_client.client.post(url, json=measurement(9), headers={"X-API-Key": key + "x"})
    assert response.status_code == 401
    reader = store_client.reader
    response = store_client.client.post(url, json=measurement(9), headers=reader)
    assert response.status_code == 403
    assert "`write` scope" in response.json()["detail"]
    assert _count(store_client, measurements) == 3


def test_a_batch_whose_write_fails_commits_nothing(store_client: StoreClient) -> None:
    """A write that fails in the batch's transaction (here a step stored behind the store's back, so
    the run's summary does not know it and the insert breaks the (run, step) key) rolls the whole
    transaction back: nothing of the request is stored."""
    run_id = store_client.create_run()["id"]
    with UnitOfWork(store_client.engine, write=True) as uow:
        pk = uow.connection.execute(select(runs.c.pk).where(runs.c.id == run_id)).scalar_one()
        row = dict(
            zip(
                measurements_store.MEASUREMENT_COLUMNS,
                [pk, 7, *[None] * (len(measurements_store.MEASUREMENT_COLUMNS) - 2)],
                strict=True,
            )
        )
        row.update(
            measured_at=datetime(2026, 1, 1, tzinfo=UTC), throughput_form="tokens_per_second",
            throughput_value=1.0, tokens_per_second=1.0, tokens_per_second_per_device=1.0,
            mfu=0.1, hfu=0.1, achieved_tflops_per_device=1.0,
        )  # fmt: skip
        measurements_store.insert_measurements(uow.connection, rows=[row])
        uow.commit()
    response = store_client.client.post(
        f"/v1/runs/{run_id}/measurements",
        json=[measurement(6), measurement(7)],
        headers=store_client.writer,
    )
    # The store's state contradicts itself (not the caller's doing): an internal error, said so.
    assert response.status_code == 500
    assert response.json()["type"] == "/problems/internal-error"
    assert _count(store_client, measurements) == 1  # only the one written behind its back
    assert _count(store_client, run_mfu_bins) == 0
    summary = store_client.client.get(f"/v1/runs/{run_id}", headers=store_client.writer).json()["summary"]
    assert summary["measurement_count"] == 0


def test_each_value_of_a_measurement_lands_in_its_own_column(store_client: StoreClient) -> None:
    # The ingest path builds its rows positionally in the table's column order: every column gets
    # its own value (distinct ones here), and MFU is the stored run's FLOPs at its stored peak.
    run = store_client.create_run()
    item = measurement(
        5,
        tokens_per_second=1.25e5,
        loss=2.25,
        memory_bytes=7_000_000_000,
        grad_norm_sq_small=3.5,
        grad_norm_sq_big=1.5,
        batch_small_tokens=4096,
        batch_big_tokens=65536,
    )
    assert store_client.add(run["id"], item)["stored"] == 1
    with UnitOfWork(store_client.engine, write=False) as uow:
        stored_run = uow.connection.execute(select(runs).where(runs.c.id == run["id"])).one()
        row = uow.connection.execute(select(measurements).where(measurements.c.run_pk == stored_run.pk)).one()
    devices, peak = stored_run.device_count, stored_run.peak_tflops_per_device * 1e12
    assert (row.step, row.throughput_form, row.throughput_value) == (5, "tokens_per_second", 1.25e5)
    assert (row.global_batch_tokens, row.global_batch_sequences) == (None, None)
    assert row.tokens_per_second == 1.25e5
    assert row.tokens_per_second_per_device == pytest.approx(1.25e5 / devices, rel=1e-12)
    assert row.mfu == pytest.approx(1.25e5 * stored_run.model_flops_per_token / (devices * peak), rel=1e-12)
    assert row.hfu == pytest.approx(
        1.25e5 * stored_run.hardware_flops_per_token / (devices * peak), rel=1e-12
    )
    assert row.achieved_tflops_per_device == pytest.approx(
        row.mfu * stored_run.peak_tflops_per_device, rel=1e-12
    )
    assert (row.loss, row.memory_bytes) == (2.25, 7_000_000_000)
    assert (row.grad_norm_sq_small, row.grad_norm_sq_big) == (3.5, 1.5)
    assert (row.batch_small_tokens, row.batch_big_tokens) == (4096, 65536)
    assert row.measured_at == datetime(2026, 12, 2, 10, 0, 5, tzinfo=UTC)
