"""A run's time to its token budget when that time lies past the last representable datetime (issue 17:
a 1e16-token budget at 30,000 tokens/s is ~10,563 years away), on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.api.conftest import StoreClient, measurement

BUDGET = 10**16  # the schema's largest token budget
RATE = 30_000.0


def _run_far_from_its_budget(store: StoreClient) -> str:
    run_id: str = store.create_run(token_budget_tokens=BUDGET)["id"]
    store.add(run_id, [measurement(1, tokens_per_second=RATE), measurement(2, tokens_per_second=RATE)])
    return run_id


def test_efficiency_of_a_budget_past_year_9999_answers_null_and_says_so(store_client: StoreClient) -> None:
    run_id = _run_far_from_its_budget(store_client)
    response = store_client.client.get(f"/v1/runs/{run_id}/efficiency", headers=store_client.reader)
    assert response.status_code == 200, response.text
    body = response.json()
    tokens_done = 2 * 4_194_304  # latest step × global batch tokens
    # seconds left computed here: (budget − tokens done) / tokens/s ≈ 3.3e11 s ≈ 10,570 years
    assert body["seconds_to_budget"] == pytest.approx((BUDGET - tokens_done) / RATE)
    assert body["seconds_to_budget"] / (365.25 * 86400) > 9999 - 2026
    assert body["estimated_budget_reached_at"] is None
    assert body["budget_reached_after_year_9999"] is True


@pytest.mark.parametrize("accept", ["image/svg+xml", "image/png"])
def test_the_efficiency_chart_of_a_budget_past_year_9999_is_drawn(
    store_client: StoreClient, accept: str
) -> None:
    run_id = _run_far_from_its_budget(store_client)
    response = store_client.client.get(
        f"/v1/runs/{run_id}/efficiency", headers={**store_client.reader, "Accept": accept}
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith(accept)


def test_a_budget_within_range_still_gets_its_date(store_client: StoreClient) -> None:
    run_id: str = store_client.create_run(token_budget_tokens=10**12)["id"]
    store_client.add(run_id, [measurement(1, tokens_per_second=RATE), measurement(2, tokens_per_second=RATE)])
    body = store_client.client.get(f"/v1/runs/{run_id}/efficiency", headers=store_client.reader).json()
    latest = datetime(2026, 12, 2, 10, 0, 2, tzinfo=UTC)  # the second measurement's time
    expected = latest + timedelta(seconds=(10**12 - 2 * 4_194_304) / RATE)
    assert datetime.fromisoformat(body["estimated_budget_reached_at"]) == expected
    assert body["budget_reached_after_year_9999"] is False


def test_run_read_list_and_compare_of_a_budget_past_year_9999_answer(store_client: StoreClient) -> None:
    run_id = _run_far_from_its_budget(store_client)
    other = _run_far_from_its_budget(store_client)
    read = store_client.client.get(f"/v1/runs/{run_id}", headers=store_client.reader)
    assert read.status_code == 200, read.text
    assert read.json()["summary"]["seconds_to_budget"] > 3e11
    listed = store_client.client.get("/v1/runs", headers=store_client.reader)
    assert listed.status_code == 200, listed.text
    compared = store_client.client.post(
        "/v1/runs/compare", json={"run_ids": [run_id, other]}, headers=store_client.reader
    )
    assert compared.status_code == 200, compared.text
