"""POST /v1/runs/{id}/events and GET /v1/runs/{id}/goodput on SQLite and PostgreSQL."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest

from tests.api.conftest import T0, StoreClient, measurement

PROBLEM = "application/problem+json"


def event(event_id: str, kind: str, seconds: float, **extra: Any) -> dict[str, Any]:
    return {
        "event_id": event_id,
        "kind": kind,
        "time": (T0 + timedelta(seconds=seconds)).isoformat(),
        **extra,
    }


def post(store: StoreClient, run_id: str, body: Any, headers: dict[str, str] | None = None) -> Any:
    return store.client.post(f"/v1/runs/{run_id}/events", json=body, headers=headers or store.writer)


def two_attempt_job(store: StoreClient) -> tuple[str, str]:
    """Attempt 0: start-up 0-100, save 1000-1060, failure at 1600 (540 s lost); 200 s idle; attempt 1:
    start-up 1800-1900 with a restore 1820-1880, a 30 s data stall ending at 2500, end at 3800."""
    job = {
        "cluster": "c1",
        "scheduler_job_id": "job-goodput",
        "hardware": {"accelerator": "h100-sxm", "device_count": 8},
    }
    first = store.create_run(attempt=0, **job)["id"]
    second = store.create_run(attempt=1, **job)["id"]
    response = post(
        store,
        first,
        [
            event("start", "job_started", 0),
            event("first", "first_step", 100, step=0),
            event("save-b", "checkpoint_save_begin", 1000, step=900),
            event("save-e", "checkpoint_save_end", 1060, step=900),
            event("fail", "failure", 1600, reason="XID 79"),
        ],
    )
    assert response.status_code == 200, response.text
    response = post(
        store,
        second,
        [
            event("start", "job_started", 1800),
            event("restore-b", "checkpoint_restore_begin", 1820),
            event("restore-e", "checkpoint_restore_end", 1880),
            event("first", "first_step", 1900, step=900),
            event("stall", "data_stall", 2500, duration_seconds=30),
            event("end", "job_ended", 3800),
        ],
    )
    assert response.status_code == 200, response.text
    return first, second


def test_goodput_of_a_two_attempt_job_is_computed_over_both(store_client: StoreClient) -> None:
    first, second = two_attempt_job(store_client)
    store_client.add(first, [measurement(s, tokens_per_second=5.0e4) for s in (200, 300)])
    response = store_client.client.get(f"/v1/runs/{second}/goodput", headers=store_client.reader)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["job_run_ids"] == [first, second]
    # allocated: 1600 + 200 idle + 2000 = 3800 s
    # productive: attempt 0 100-1000 (900) + attempt 1 1900-3800 minus 30 stall (1870) = 2770
    assert body["total_seconds"] == pytest.approx(3800)
    assert body["productive_seconds"] == pytest.approx(2770)
    assert body["goodput"] == pytest.approx(2770 / 3800)
    badput = {item["kind"]: item for item in body["badput"]}
    assert badput["lost_progress"]["seconds"] == pytest.approx(540)
    assert badput["idle_between_attempts"]["seconds"] == pytest.approx(200)
    assert badput["checkpoint_restore"]["seconds"] == pytest.approx(60)
    assert badput["initialisation"]["seconds"] == pytest.approx(100 + 40)
    assert badput["data_stall"]["seconds"] == pytest.approx(30)
    assert badput["checkpoint_save"]["device_hours"] == pytest.approx(60 * 8 / 3600)
    assert body["total_device_hours"] == pytest.approx(3800 * 8 / 3600)
    mfu = store_client.client.get(f"/v1/runs/{first}", headers=store_client.reader).json()["summary"][
        "median_mfu"
    ]
    assert body["mfu"] == pytest.approx(mfu, rel=1e-6)
    assert body["effective_mfu"] == pytest.approx(mfu * 2770 / 3800, rel=1e-6)
    assert body["attempts"][0]["failure_reason"] == "XID 79"
    # one failure in 3600 s of attempts, a 60 s save: Young sqrt(2 · 60 · 3600) s
    assert body["checkpoint"]["young_interval_seconds"] == pytest.approx((2 * 60 * 3600) ** 0.5)
    assert body["checkpoint"]["mtbf_seconds"] == pytest.approx(3600)
    assert [gain["target_goodput"] for gain in body["gains"]] == [0.9, 0.95]


def test_the_efficiency_of_an_attempt_carries_its_jobs_goodput_and_effective_mfu(
    store_client: StoreClient,
) -> None:
    first, second = two_attempt_job(store_client)
    store_client.add(first, [measurement(s, tokens_per_second=5.0e4) for s in (200, 300)])
    response = store_client.client.get(f"/v1/runs/{first}/efficiency", headers=store_client.reader)
    assert response.status_code == 200, response.text
    body = response.json()
    goodput = body["goodput"]
    assert goodput["job_run_ids"] == [first, second]
    assert goodput["goodput"] == pytest.approx(2770 / 3800)  # the hand count of two_attempt_job
    badput = {item["kind"]: item["seconds"] for item in goodput["badput"]}
    assert badput["lost_progress"] == pytest.approx(540) and badput["idle_between_attempts"] == 200
    assert sum(badput.values()) == pytest.approx(3800 - 2770)
    # only attempt 0 measured: the job's MFU is its median, and effective MFU that × goodput
    assert goodput["mfu"] == pytest.approx(body["mfu"]["median"], rel=1e-6)
    assert goodput["effective_mfu"] == pytest.approx(body["mfu"]["median"] * 2770 / 3800, rel=1e-6)
    assert goodput["link"] == f"/v1/runs/{first}/goodput"


def test_the_efficiency_of_a_run_without_events_has_no_goodput(store_client: StoreClient) -> None:
    run_id = store_client.create_run()["id"]
    store_client.add(run_id, [measurement(s) for s in (1, 2)])
    body = store_client.client.get(f"/v1/runs/{run_id}/efficiency", headers=store_client.reader).json()
    assert body["goodput"] is None
    assert body["mfu"]["median"] is not None


def test_a_retried_post_stores_nothing_twice(store_client: StoreClient) -> None:
    run_id = store_client.create_run()["id"]
    batch = [event("a", "job_started", 0), event("b", "first_step", 10), event("b", "first_step", 11)]
    first = post(store_client, run_id, batch).json()
    assert (first["received"], first["stored"], first["ignored_event_ids"]) == (3, 2, ["b"])
    again = post(store_client, run_id, batch[0]).json()
    assert (again["stored"], again["ignored_event_ids"]) == (0, ["a"])


def test_another_tenants_run_is_not_found_and_a_read_key_cannot_write(store_client: StoreClient) -> None:
    run_id = store_client.create_run()["id"]
    response = post(store_client, run_id, event("a", "job_started", 0), headers=store_client.other)
    assert response.status_code == 404 and response.headers["content-type"] == PROBLEM
    assert run_id in response.json()["detail"]
    assert (
        store_client.client.get(f"/v1/runs/{run_id}/goodput", headers=store_client.other).status_code == 404
    )
    assert (
        post(store_client, run_id, event("a", "job_started", 0), headers=store_client.reader).status_code
        == 403
    )
    assert store_client.client.post(f"/v1/runs/{run_id}/events", json=[]).status_code == 401


def test_bad_events_are_422_naming_the_field(store_client: StoreClient) -> None:
    run_id = store_client.create_run()["id"]
    bad_kind = post(store_client, run_id, event("a", "coffee_break", 0))
    assert bad_kind.status_code == 422 and bad_kind.headers["content-type"] == PROBLEM
    naive = post(
        store_client, run_id, {"event_id": "a", "kind": "job_started", "time": "2026-12-02T10:00:00"}
    )
    assert naive.status_code == 422
    assert post(store_client, run_id, []).status_code == 422


def test_a_run_without_events_answers_with_a_note(store_client: StoreClient) -> None:
    run_id = store_client.create_run()["id"]
    body = store_client.client.get(f"/v1/runs/{run_id}/goodput", headers=store_client.reader).json()
    assert body["goodput"] is None and body["event_count"] == 0
    assert "No events" in body["checkpoint"]["note"]


def test_the_goodput_picture_by_accept(store_client: StoreClient) -> None:
    _, second = two_attempt_job(store_client)
    svg = store_client.client.get(
        f"/v1/runs/{second}/goodput", headers={**store_client.reader, "Accept": "image/svg+xml"}
    )
    assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml")
    assert b"<svg" in svg.content and b"attempt 1" in svg.content
    png = store_client.client.get(
        f"/v1/runs/{second}/goodput", headers={**store_client.reader, "Accept": "image/png"}
    )
    assert png.status_code == 200 and png.content.startswith(b"\x89PNG")


def test_a_thousand_events_in_one_request(
    store_client: StoreClient, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = store_client.create_run()["id"]
    batch = [event(f"e{i}", "data_stall", i, duration_seconds=0.5) for i in range(1000)]
    started = time.perf_counter()
    response = post(store_client, run_id, batch)
    elapsed = time.perf_counter() - started
    assert response.status_code == 200 and response.json()["stored"] == 1000
    with capsys.disabled():
        print(f"\n1,000 events in one POST: {elapsed * 1000:.0f} ms ({1000 / elapsed:,.0f} events/s)")
