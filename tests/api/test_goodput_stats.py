"""Goodput and effective-MFU percentiles in fleet statistics and at /metrics, on SQLite and PostgreSQL,
against percentiles computed here from the timelines sent."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.api.conftest import T0, StoreClient, measurement

# Llama-3 8B on 64 H100 SXM at 8,192 tokens: MFU per global token/s, 6N + 12·L·d·T over 64 × 989.4e12
# (PaLM appendix B; H100 SXM datasheet), as in test_stats.py.
MFU_PER_TOKEN_PER_SECOND = (6 * 8_030_261_248 + 12 * 32 * 32 * 128 * 8192) / (64 * 989.4e12)
BIN = 0.001  # the histograms' resolution


def _event(event_id: str, kind: str, seconds: float) -> dict[str, Any]:
    return {"event_id": event_id, "kind": kind, "time": (T0 + timedelta(seconds=seconds)).isoformat()}


def _job(store: StoreClient, startup_seconds: float, mfu: float | None, headers: dict[str, str]) -> str:
    """A one-attempt job of 1,000 s whose first step comes at ``startup_seconds``: goodput
    1 − startup/1000; measured at ``mfu`` when given."""
    run_id: str = store.create_run(headers)["id"]
    body = [
        _event("s", "job_started", 0),
        _event("f", "first_step", startup_seconds),
        _event("e", "job_ended", 1000),
    ]
    response = store.client.post(f"/v1/runs/{run_id}/events", json=body, headers=headers)
    assert response.status_code == 200, response.text
    if mfu is not None:
        rate = mfu / MFU_PER_TOKEN_PER_SECOND
        store.add(run_id, [measurement(s, rate) for s in (200, 300, 400)], headers=headers)
    return run_id


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _stats(store: StoreClient, headers: dict[str, str]) -> dict[str, Any]:
    response = store.client.get("/v1/stats/mfu", headers=headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_fleet_statistics_give_goodput_and_effective_mfu_percentiles(store_client: StoreClient) -> None:
    startups = [100, 200, 300, 400, 500, 150]  # goodput 0.9, 0.8, 0.7, 0.6, 0.5, 0.85
    mfus = [0.40, 0.40, 0.30, 0.30, 0.50, None]  # the last job is never measured
    for index, (startup, mfu) in enumerate(zip(startups, mfus, strict=True)):
        _job(store_client, startup, mfu, store_client.other if index == 0 else store_client.writer)
    goodputs = [1 - s / 1000 for s in startups]
    effective = [m * g for m, g in zip(mfus, goodputs, strict=True) if m is not None]

    body = _stats(store_client, store_client.reader)
    (group,) = body["goodput_fleet"]
    assert (group["accelerator"], group["size_class"], group["job_count"]) == ("h100-sxm", "1b_to_10b", 6)
    for name, q in (("p10", 0.1), ("p50", 0.5), ("p90", 0.9)):
        assert group["goodput"][name] == pytest.approx(_quantile(goodputs, q), abs=BIN)
        assert group["effective_mfu"][name] == pytest.approx(_quantile(effective, q), abs=BIN)
    assert group["effective_mfu_job_count"] == 5
    # the tenant's own groups: team-a has five of the six jobs
    (mine,) = body["goodput_tenant"]
    assert mine["job_count"] == 5
    assert mine["goodput"]["p50"] == pytest.approx(_quantile(goodputs[1:], 0.5), abs=BIN)


def test_a_fleet_group_of_fewer_than_five_jobs_is_not_shown_across_tenants(store_client: StoreClient) -> None:
    for startup in (100, 200, 300, 400):
        _job(store_client, startup, 0.4, store_client.writer)
    assert _stats(store_client, store_client.reader)["goodput_fleet"] == []
    assert _stats(store_client, store_client.reader)["goodput_tenant"][0]["job_count"] == 4
    assert _stats(store_client, store_client.other)["goodput_tenant"] == []  # nothing of team-a's


def test_a_job_of_two_attempts_counts_once_with_its_whole_goodput(store_client: StoreClient) -> None:
    job = {"cluster": "c1", "scheduler_job_id": "job-twice"}
    first = store_client.create_run(attempt=0, **job)["id"]
    second = store_client.create_run(attempt=1, **job)["id"]
    # attempt 0: 0-1000, first step at 100, failure at 1000 without a save (900 s lost);
    # idle 1000-1200; attempt 1: 1200-2200, first step at 1300. Productive 900 of 2200 s.
    for run_id, events in (
        (first, [_event("s", "job_started", 0), _event("f", "first_step", 100), _event("x", "failure", 1000)]),
        (second, [_event("s", "job_started", 1200), _event("f", "first_step", 1300), _event("e", "job_ended", 2200)]),
    ):  # fmt: skip
        response = store_client.client.post(
            f"/v1/runs/{run_id}/events", json=events, headers=store_client.writer
        )
        assert response.status_code == 200, response.text
    (group,) = _stats(store_client, store_client.reader)["goodput_tenant"]
    assert group["job_count"] == 1
    assert group["goodput"]["p50"] == pytest.approx(900 / 2200, abs=BIN)


def test_metrics_show_fleet_goodput_quantiles_without_tenants(store_client: StoreClient) -> None:
    startups = [100, 200, 300, 400, 500]
    for index, startup in enumerate(startups):
        _job(store_client, startup, 0.4, store_client.other if index % 2 else store_client.writer)
    response = store_client.client.get("/metrics")
    assert response.status_code == 200, response.text
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }
    goodputs = [1 - s / 1000 for s in startups]
    labels = (("accelerator", "h100-sxm"), ("size_class", "1b_to_10b"))
    for q in (0.1, 0.5, 0.9):
        key = tuple(sorted((*labels, ("quantile", f"{q:g}"))))
        assert samples[("teff_fleet_job_goodput", key)] == pytest.approx(_quantile(goodputs, q), abs=BIN)
        assert samples[("teff_fleet_job_effective_mfu", key)] == pytest.approx(
            0.4 * _quantile(goodputs, q), abs=BIN
        )
    assert samples[("teff_fleet_jobs_goodput_counted", labels)] == 5
    names = {label for _, sample_labels in samples for label, _ in sample_labels}
    assert "tenant" not in names and "run_id" not in names


def test_a_job_counts_once_an_attempt_has_ended_and_late_events_update_it(store_client: StoreClient) -> None:
    run_id = store_client.create_run()["id"]

    def send(*events: dict[str, Any]) -> None:
        response = store_client.client.post(
            f"/v1/runs/{run_id}/events", json=list(events), headers=store_client.writer
        )
        assert response.status_code == 200, response.text

    send(_event("s", "job_started", 0), _event("f", "first_step", 100))
    assert _stats(store_client, store_client.reader)["goodput_tenant"] == []  # still running
    send(_event("e", "job_ended", 1000))
    (group,) = _stats(store_client, store_client.reader)["goodput_tenant"]
    assert group["goodput"]["p50"] == pytest.approx(0.9, abs=BIN)  # 900 of 1,000 s
    # a late 100 s evaluation inside the ended attempt: 800 of 1,000 s
    send({**_event("eb", "evaluation_begin", 400)}, {**_event("ee", "evaluation_end", 500)})
    (group,) = _stats(store_client, store_client.reader)["goodput_tenant"]
    assert group["goodput"]["p50"] == pytest.approx(0.8, abs=BIN)
