"""Fleet MFU aggregates at /metrics (service/api/fleet_metrics.py), on SQLite and PostgreSQL: the
gauges a scrape shows against quantiles computed here from the measurements sent."""

from __future__ import annotations

import statistics
from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from service.api.fleet_metrics import FleetMetricsCollector, FleetSnapshot
from service.domain import fleet
from tests.api.conftest import StoreClient, measurement

# MFU of Llama-3 8B on 64 H100 SXM at 8,192 tokens, per global token/s: model FLOPs per token
# 6N + 12·L·d·T (Chinchilla appendix F / PaLM appendix B: 32 layers, d = 32 heads x 128, T = 8192,
# N = 8,030,261,248 parameters) over 64 x 989.4 dense BF16 TFLOP/s (H100 SXM datasheet).
MFU_PER_TOKEN_PER_SECOND = (6 * 8_030_261_248 + 12 * 32 * 32 * 128 * 8192) / (64 * 989.4e12)


def _scrape(store_client: StoreClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = store_client.client.get("/metrics")
    assert response.status_code == 200, response.text
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def _labels(**labels: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def _inclusive_quantile(values: list[float], q: float) -> float:
    """Linear interpolation between order statistics at position q·(n−1) (NumPy's default)."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def test_a_scrape_shows_fleet_quantiles_of_run_medians_and_counts(store_client: StoreClient) -> None:
    # The counter is the process's (shared by every app a test run builds): its change is what counts.
    # Read without a scrape, which would fill the fleet snapshot's cache before the runs exist.
    ingested_before = REGISTRY.get_sample_value("teff_measurements_ingested_total") or 0.0
    # Seven runs of one group across two tenants, each with three measurements of different rates.
    rates_by_run = [
        [2.0e5, 2.4e5, 2.2e5],
        [2.6e5, 2.5e5, 2.7e5],
        [3.0e5, 1.0e5, 3.1e5],
        [1.8e5, 1.9e5, 2.0e5],
        [2.9e5, 2.8e5, 3.3e5],
        [1.5e5, 1.6e5, 1.4e5],
        [3.5e5, 3.6e5, 3.4e5],
    ]
    run_ids = []
    for index, rates in enumerate(rates_by_run):
        headers = store_client.other if index % 3 == 0 else store_client.writer
        run = store_client.create_run(headers)
        store_client.add(run["id"], [measurement(s, r) for s, r in enumerate(rates, 1)], headers=headers)
        run_ids.append(run["id"])
    # A repeated step is not stored again, so it counts neither as stored nor as ingested.
    store_client.add(run_ids[1], [measurement(1, 9.9e5)])
    # A group of two runs (on A100) stays below the fleet minimum: it must not be shown.
    for rate in (1.0e5, 1.1e5):
        small = store_client.create_run(hardware={"accelerator": "a100-sxm4-80gb", "device_count": 64})
        store_client.add(small["id"], [measurement(1, rate)])
    finished = store_client.client.patch(
        f"/v1/runs/{run_ids[0]}", json={"status": "finished"}, headers=store_client.other
    )
    assert finished.status_code == 200, finished.text

    samples = _scrape(store_client)

    run_medians = [statistics.median(rates) * MFU_PER_TOKEN_PER_SECOND for rates in rates_by_run]
    group = {"accelerator": "h100-sxm", "size_class": "1b_to_10b"}
    for q in (0.1, 0.5, 0.9):
        shown = samples[("teff_fleet_run_mfu", _labels(**group, quantile=f"{q:g}"))]
        # Read from 0.1-point bins: within one bin width of the exact quantile.
        assert shown == pytest.approx(_inclusive_quantile(run_medians, q), abs=fleet.MFU_BIN_WIDTH)
    assert samples[("teff_fleet_run_mfu", _labels(**group, quantile="0.5"))] == pytest.approx(
        statistics.median(run_medians), abs=fleet.MFU_BIN_WIDTH
    )
    assert samples[("teff_fleet_runs_counted", _labels(**group))] == len(rates_by_run)
    assert not [key for key in samples if dict(key[1]).get("accelerator") == "a100-sxm4-80gb"]
    assert samples[("teff_fleet_runs_running", ())] == len(rates_by_run) + 2 - 1
    stored = sum(len(rates) for rates in rates_by_run) + 2
    assert samples[("teff_fleet_measurements_stored", ())] == stored
    assert samples[("teff_measurements_ingested_total", ())] - ingested_before == stored

    # Within the cache's lifetime a scrape reads no new snapshot: one more run does not show yet.
    store_client.create_run()
    again = _scrape(store_client)
    assert again[("teff_fleet_runs_running", ())] == samples[("teff_fleet_runs_running", ())]


def test_fleet_labels_name_no_tenant_and_no_run(store_client: StoreClient) -> None:
    for _ in range(fleet.MIN_FLEET_GROUP_RUNS):
        run = store_client.create_run(cluster="secret-cluster-of-team-a", tags=["secret-tag"])
        store_client.add(run["id"], [measurement(1, 2.0e5)])
    body = store_client.client.get("/metrics").text
    fleet_lines = [line for line in body.splitlines() if line.startswith("teff_fleet_")]
    assert any(line.startswith("teff_fleet_run_mfu{") for line in fleet_lines)
    for line in fleet_lines:
        assert "team-a" not in line and "secret" not in line and run["id"] not in line
        labels = line.partition("{")[2].partition("}")[0]
        names = {pair.partition("=")[0] for pair in labels.split(",") if pair}
        assert names <= {"accelerator", "size_class", "quantile"}


def test_an_empty_store_exports_zero_counts_and_no_quantiles(store_client: StoreClient) -> None:
    samples = _scrape(store_client)
    assert samples[("teff_fleet_runs_running", ())] == 0
    assert samples[("teff_fleet_measurements_stored", ())] == 0
    assert not [key for key in samples if key[0] == "teff_fleet_run_mfu"]


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_collector_reads_the_store_at_most_once_per_ttl() -> None:
    reads: list[int] = []

    def read() -> FleetSnapshot:
        reads.append(1)
        return FleetSnapshot(groups=(), running_runs=len(reads), measurements_stored=0)

    clock = _Clock()
    collector = FleetMetricsCollector(read, ttl_seconds=15.0, clock=clock)
    list(collector.describe())
    assert reads == []  # registering (describe) never queries

    def running() -> float:
        families: Iterator = collector.collect()
        family = next(f for f in families if f.name == "teff_fleet_runs_running")
        return float(family.samples[0].value)

    assert running() == 1
    clock.now += 14.9
    assert running() == 1 and len(reads) == 1
    clock.now += 0.2
    assert running() == 2 and len(reads) == 2
