"""Fleet MFU statistics through the API, on SQLite and PostgreSQL."""

from __future__ import annotations

import statistics
from typing import Any

import pytest
from sqlalchemy import func, select

from service.domain import fleet
from service.store.tables import fleet_mfu_bins, runs, tenant_mfu_bins
from service.store.uow import UnitOfWork
from tests.api.conftest import StoreClient, measurement

# Llama-3 8B on 64 H100 SXM at 8,192 tokens (see test_runs.py): MFU per global token/s.
MFU_PER_TOKEN_PER_SECOND = (6 * 8_030_261_248 + 12 * 32 * 32 * 128 * 8192) / (64 * 989.4e12)


def _run_with_mfu(store_client: StoreClient, target_mfu: float, headers: dict[str, str] | None = None) -> str:
    run = store_client.create_run(headers)
    rate = target_mfu / MFU_PER_TOKEN_PER_SECOND
    store_client.add(run["id"], [measurement(s, rate) for s in (1, 2, 3)], headers=headers)
    return str(run["id"])


def _stats(store_client: StoreClient, headers: dict[str, str] | None = None, **params: Any) -> dict[str, Any]:
    response = store_client.client.get("/v1/stats/mfu", params=params, headers=headers or store_client.reader)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _group(groups: list[dict[str, Any]], accelerator: str, size_class: str) -> dict[str, Any] | None:
    return next(
        (g for g in groups if g["accelerator"] == accelerator and g["size_class"] == size_class), None
    )


def _consistent(store_client: StoreClient) -> None:
    """Every measured run counts once in its tenant's histogram and (catalog parts) in the fleet's."""
    with UnitOfWork(store_client.engine, write=False) as uow:
        connection = uow.connection
        measured = connection.execute(
            select(func.count()).select_from(runs).where(runs.c.measurement_count > 0)
        ).scalar_one()
        measured_catalog = connection.execute(
            select(func.count())
            .select_from(runs)
            .where(runs.c.measurement_count > 0, runs.c.accelerator != "custom")
        ).scalar_one()
        tenant_total = connection.execute(
            select(func.coalesce(func.sum(tenant_mfu_bins.c.n_runs), 0))
        ).scalar_one()
        fleet_total = connection.execute(
            select(func.coalesce(func.sum(fleet_mfu_bins.c.n_runs), 0))
        ).scalar_one()
    assert tenant_total == measured
    assert fleet_total == measured_catalog


def test_fleet_percentiles_pool_every_tenants_run_medians(store_client: StoreClient) -> None:
    mine = [0.30, 0.35, 0.40, 0.45, 0.50]
    theirs = [0.20, 0.25, 0.55]
    for value in mine:
        _run_with_mfu(store_client, value)
    for value in theirs:
        _run_with_mfu(store_client, value, store_client.other)
    answer = _stats(store_client)
    group = _group(answer["fleet"], "h100-sxm", "1b_to_10b")
    assert group is not None and group["run_count"] == 8
    pooled = sorted(mine + theirs)
    assert group["percentiles"]["p50"] == pytest.approx(
        statistics.median(pooled), abs=2 * fleet.MFU_BIN_WIDTH
    )
    assert group["percentiles"]["p10"] <= group["percentiles"]["p25"] <= group["percentiles"]["p50"]
    assert group["percentiles"]["p50"] <= group["percentiles"]["p75"] <= group["percentiles"]["p90"]
    assert group["percentiles"]["p10"] >= 0.20 and group["percentiles"]["p90"] <= 0.56
    own = _group(answer["tenant"], "h100-sxm", "1b_to_10b")
    assert own is not None and own["run_count"] == 5
    assert own["percentiles"]["p50"] == pytest.approx(0.40, abs=fleet.MFU_BIN_WIDTH)
    assert answer["bin_width"] == fleet.MFU_BIN_WIDTH
    assert answer["minimum_runs_per_group"] == 5
    assert [c["name"] for c in answer["size_classes"]] == list(fleet.SIZE_CLASSES)
    _consistent(store_client)


def test_a_fleet_group_of_fewer_than_five_runs_is_not_shown_but_the_tenant_sees_its_own(
    store_client: StoreClient,
) -> None:
    for value in (0.3, 0.4, 0.5, 0.45):
        _run_with_mfu(store_client, value)
    answer = _stats(store_client)
    assert _group(answer["fleet"], "h100-sxm", "1b_to_10b") is None
    own = _group(answer["tenant"], "h100-sxm", "1b_to_10b")
    assert own is not None and own["run_count"] == 4
    other_view = _stats(store_client, store_client.other)
    assert other_view["fleet"] == [] and other_view["tenant"] == []


def test_a_run_ranks_within_its_fleet_group_and_its_tenant(store_client: StoreClient) -> None:
    values = [0.20, 0.30, 0.40, 0.50, 0.60]
    ids = [_run_with_mfu(store_client, value) for value in values]
    _run_with_mfu(store_client, 0.45, store_client.other)
    answer = _stats(store_client, run_id=ids[1])
    rank = answer["run"]
    assert rank["run_id"] == ids[1]
    assert rank["median_mfu"] == pytest.approx(0.30, abs=fleet.MFU_BIN_WIDTH)
    # Mid-rank: one of six fleet runs below it → (1 + 0.5) / 6; one of five of the tenant's → 1.5 / 5.
    assert rank["fleet_percentile_rank"] == pytest.approx(1.5 / 6)
    assert rank["fleet_run_count"] == 6
    assert rank["tenant_percentile_rank"] == pytest.approx(1.5 / 5)
    assert rank["tenant_run_count"] == 5


def test_no_fleet_rank_is_given_in_a_group_too_small_to_show(store_client: StoreClient) -> None:
    run_id = _run_with_mfu(store_client, 0.4)
    rank = _stats(store_client, run_id=run_id)["run"]
    assert rank["fleet_percentile_rank"] is None and rank["fleet_run_count"] is None
    assert rank["tenant_percentile_rank"] == pytest.approx(0.5)
    assert "fewer than 5" in rank["note"]


def test_a_run_without_measurements_has_no_rank_yet(store_client: StoreClient) -> None:
    run = store_client.create_run()
    rank = _stats(store_client, run_id=run["id"])["run"]
    assert rank["median_mfu"] is None and rank["tenant_percentile_rank"] is None


def test_models_of_other_sizes_and_parts_are_separate_groups(store_client: StoreClient) -> None:
    big = store_client.create_run(model={"preset": "llama3-70b"}, parallelism={"tp": 8})
    store_client.add(big["id"], measurement(1, 30_000.0))
    a100 = store_client.create_run(hardware={"accelerator": "a100-sxm4-80gb", "device_count": 64})
    store_client.add(a100["id"], measurement(1, 60_000.0))
    answer = _stats(store_client)
    groups = {(g["accelerator"], g["size_class"]) for g in answer["tenant"]}
    assert groups == {("h100-sxm", "10b_to_100b"), ("a100-sxm4-80gb", "1b_to_10b")}
    filtered = _stats(store_client, accelerator="NVIDIA A100-SXM4-80GB")
    assert [(g["accelerator"], g["size_class"]) for g in filtered["tenant"]] == [
        ("a100-sxm4-80gb", "1b_to_10b")
    ]
    by_size = _stats(store_client, size_class="10b_to_100b")
    assert [g["size_class"] for g in by_size["tenant"]] == ["10b_to_100b"]


def test_custom_accelerators_stay_out_of_the_fleet(store_client: StoreClient) -> None:
    hardware = {"custom": {"name": "lab-chip", "peak_tflops": {"bf16": 989.4}}, "count": 64}
    for _ in range(5):
        run = store_client.create_run(hardware=hardware)
        store_client.add(run["id"], measurement(1, 400_000.0))
    answer = _stats(store_client)
    assert answer["fleet"] == []
    assert _group(answer["tenant"], "custom", "1b_to_10b") is not None
    _consistent(store_client)


def test_new_measurements_move_a_run_between_bins_and_delete_takes_it_out(store_client: StoreClient) -> None:
    ids = [_run_with_mfu(store_client, value) for value in (0.30, 0.32, 0.34, 0.36, 0.38)]
    before = _group(_stats(store_client)["fleet"], "h100-sxm", "1b_to_10b")
    assert before is not None
    # Four more high readings move the first run's median from 0.30 to 0.50.
    store_client.add(ids[0], [measurement(s, 0.50 / MFU_PER_TOKEN_PER_SECOND) for s in (4, 5, 6, 7)])
    _consistent(store_client)
    after = _group(_stats(store_client)["fleet"], "h100-sxm", "1b_to_10b")
    assert after is not None and after["run_count"] == 5
    assert after["percentiles"]["p90"] > before["percentiles"]["p90"]
    assert store_client.client.delete(f"/v1/runs/{ids[0]}", headers=store_client.writer).status_code == 204
    _consistent(store_client)
    answer = _stats(store_client)
    assert _group(answer["fleet"], "h100-sxm", "1b_to_10b") is None
    own = _group(answer["tenant"], "h100-sxm", "1b_to_10b")
    assert own is not None and own["run_count"] == 4


def test_statistics_need_a_key_with_the_read_scope(store_client: StoreClient) -> None:
    assert store_client.client.get("/v1/stats/mfu").status_code == 401
    write_only = store_client.headers("team-a", "write")
    assert store_client.client.get("/v1/stats/mfu", headers=write_only).status_code == 403
    assert (
        store_client.client.get(
            "/v1/stats/mfu", params={"size_class": "huge"}, headers=store_client.reader
        ).status_code
        == 422
    )


def test_the_fleet_percentiles_are_drawn_as_svg_and_png_with_the_run_marked(
    store_client: StoreClient,
) -> None:
    ids = [_run_with_mfu(store_client, value) for value in (0.20, 0.30, 0.40, 0.50, 0.60)]
    url = f"/v1/stats/mfu?run_id={ids[1]}"
    svg = store_client.client.get(url, headers={**store_client.reader, "Accept": "image/svg+xml"})
    assert svg.status_code == 200, svg.text
    assert svg.headers["content-type"].startswith("image/svg+xml")
    text = svg.text
    # One fleet row and one tenant row for the group, both with their run count; the run in the legend.
    assert "fleet · h100-sxm" in text and "your tenant · h100-sxm" in text and "5 runs" in text
    assert f"{ids[1]} (median)" in text and "p25–p75" in text
    png = store_client.client.get(url, headers={**store_client.reader, "Accept": "image/png"})
    assert png.status_code == 200 and png.content.startswith(b"\x89PNG\r\n\x1a\n")
    refused = store_client.client.get(url, headers={**store_client.reader, "Accept": "text/csv"})
    assert refused.status_code == 406
