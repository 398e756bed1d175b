"""Large measurement bodies parsed and computed in the ingest helper process: the rows stored are the
server's own to the last bit, a bad body answers as always, and a helper that dies is replaced."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from datetime import UTC, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import select

from service.api.services.ingest import HELPER_BODY_BYTES, MeasurementIngest
from service.store.tables import measurements, runs
from service.store.uow import UnitOfWork
from tests.api.conftest import T0, StoreClient, open_store_client

HELPER_START_SECONDS = 60


@pytest.fixture(params=["sqlite", "postgresql"])
def helper_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreClient]:
    with open_store_client(request.param, tmp_path, ingest_helper_process=True) as store:
        yield store


def _items(steps: range) -> list[dict[str, Any]]:
    """Every throughput form, times in several zones, the optional readings now and then."""
    zones = [UTC, timezone(timedelta(hours=2)), timezone(-timedelta(hours=7, minutes=30))]
    items: list[dict[str, Any]] = []
    for i in steps:
        throughput: dict[str, Any] = [
            {"tokens_per_second": 380_000.0 + 17.3 * i},
            {"tokens_per_second_per_device": 5_900.0 + 0.11 * i},
            {"step_time_seconds": 11.0 + (i % 13) / 7, "global_batch_tokens": 4_194_304},
            {"step_time_seconds": 10.5 + (i % 5) / 3, "global_batch_sequences": 512},
            {"sequences_per_second": 46.0 + (i % 11) / 9},
        ][i % 5]
        item: dict[str, Any] = {
            "step": i,
            "time": (T0 + timedelta(seconds=30 * i, microseconds=i % 3 * 7))
            .astimezone(zones[i % 3])
            .isoformat(),
            "throughput": throughput,
        }
        if i % 4 == 0:
            item["loss"] = 2.0 + 1 / (i + 1)
            item["memory_bytes"] = 60_000_000_000 + i
        if i % 9 == 0:
            item |= {
                "grad_norm_sq_small": 3.5,
                "grad_norm_sq_big": 1.25,
                "batch_small_tokens": 2**20,
                "batch_big_tokens": 2**22,
            }
        items.append(item)
    return items


def _ingest(store: StoreClient) -> MeasurementIngest:
    ingest: MeasurementIngest = store.client.app.state.measurement_ingest  # type: ignore[attr-defined]
    return ingest


def _wait_for_helper(store: StoreClient) -> None:
    deadline = time.monotonic() + HELPER_START_SECONDS
    while not _ingest(store).helper_ready:
        assert time.monotonic() < deadline, "the ingest helper process did not start"
        time.sleep(0.05)


def _prepared_in(where: str) -> float:
    return REGISTRY.get_sample_value("teff_ingest_large_bodies_total", {"prepared_in": where}) or 0.0


def _stored_rows(store: StoreClient, run_id: str) -> list[tuple[Any, ...]]:
    columns = [column for column in measurements.c if column.name != "run_pk"]
    with UnitOfWork(store.engine, write=False) as uow:
        query = (
            select(*columns)
            .join(runs, runs.c.pk == measurements.c.run_pk)
            .where(runs.c.id == run_id)
            .order_by(measurements.c.step)
        )
        return [tuple(row) for row in uow.connection.execute(query)]


def test_a_large_body_prepared_in_the_helper_stores_what_the_server_would(helper_store: StoreClient) -> None:
    items = _items(range(3000))
    assert len(str(items)) > HELPER_BODY_BYTES
    here, there = helper_store.create_run(), helper_store.create_run()
    # The first large body starts the helper and is prepared here meanwhile ...
    before = _prepared_in("server"), _prepared_in("helper")
    by_server = helper_store.add(here["id"], items)
    assert (_prepared_in("server"), _prepared_in("helper")) == (before[0] + 1, before[1])
    # ... the same body once it has started, there.
    _wait_for_helper(helper_store)
    by_helper = helper_store.add(there["id"], items)
    assert (_prepared_in("server"), _prepared_in("helper")) == (before[0] + 1, before[1] + 1)

    assert by_helper["stored"] == by_server["stored"] == 3000
    assert {**by_helper, "run_id": None} == {**by_server, "run_id": None}
    stored_by_server = _stored_rows(helper_store, here["id"])
    assert len(stored_by_server) == 3000
    assert _stored_rows(helper_store, there["id"]) == stored_by_server  # every column, to the bit
    efficiency = [
        helper_store.client.get(f"/v1/runs/{run['id']}/efficiency", headers=helper_store.reader).json()
        for run in (here, there)
    ]
    assert {**efficiency[0], "run_id": None} == {**efficiency[1], "run_id": None}


def test_a_bad_large_body_answers_as_it_would_without_the_helper(helper_store: StoreClient) -> None:
    run = helper_store.create_run()
    helper_store.add(run["id"], _items(range(3000)))  # starts the helper
    _wait_for_helper(helper_store)
    bad = _items(range(3000, 6000))
    bad[1234]["throughput"] = {"tokens_per_second": 5.0, "sequences_per_second": 2.0}
    bad[2345]["step"] = -1
    before = _prepared_in("server")
    response = helper_store.client.post(
        f"/v1/runs/{run['id']}/measurements", json=bad, headers=helper_store.writer
    )
    assert response.status_code == 422, response.text
    problem = response.json()
    assert [error["field"] for error in problem["errors"]] == ["body[1234].throughput", "body[2345].step"]
    assert _prepared_in("server") == before + 1  # the helper declined it; the server raised the error
    summary = helper_store.client.get(f"/v1/runs/{run['id']}", headers=helper_store.reader).json()["summary"]
    assert summary["measurement_count"] == 3000  # nothing of the bad body stored
    # An unknown run answers 404 (a good body) as without the helper.
    response = helper_store.client.post(
        "/v1/runs/run_doesnotexist/measurements", json=_items(range(3000)), headers=helper_store.writer
    )
    assert response.status_code == 404


def test_a_helper_that_dies_is_replaced_and_its_body_is_prepared_here(helper_store: StoreClient) -> None:
    run = helper_store.create_run()
    helper_store.add(run["id"], _items(range(3000)))
    _wait_for_helper(helper_store)
    helper = _ingest(helper_store)._helper
    assert helper is not None
    for pid in list(helper._processes):  # type: ignore[attr-defined]
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
    before = _prepared_in("server"), _prepared_in("helper")
    added = helper_store.add(run["id"], _items(range(3000, 6000)))
    assert added["stored"] == 3000
    assert _prepared_in("server") == before[0] + 1
    # A new helper starts (the next large body, or this one's fallback, starts it) and takes over.
    helper_store.add(run["id"], _items(range(6000, 9000)))
    _wait_for_helper(helper_store)
    assert _ingest(helper_store)._helper is not helper
    helper_store.add(run["id"], _items(range(9000, 12000)))
    assert _prepared_in("helper") == before[1] + 1
    summary = helper_store.client.get(f"/v1/runs/{run['id']}", headers=helper_store.reader).json()["summary"]
    assert summary["measurement_count"] == 12000
