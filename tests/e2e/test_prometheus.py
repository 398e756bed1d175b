"""A real Prometheus (Debian's ``prometheus``) scrapes a live server's /metrics on loopback and
answers a PromQL query for fleet MFU with the median of the runs' medians computed here."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from service.domain import fleet
from tests.api.conftest import measurement, run_body
from tests.api.test_fleet_metrics import MFU_PER_TOKEN_PER_SECOND
from tests.conftest import skip_or_fail
from tests.e2e.conftest import LiveServer, free_port
from tests.support.live_api import cli_key

PROMETHEUS = shutil.which("prometheus")
DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "fleet-mfu.json"


@pytest.fixture
def prometheus_binary() -> str:
    if PROMETHEUS is None:
        skip_or_fail("Prometheus test skipped: no `prometheus` binary (Debian: apt-get install prometheus)")
    assert PROMETHEUS is not None
    return PROMETHEUS


def _start_prometheus(binary: str, target: str, directory: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    config = directory / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: teff\n    metrics_path: /metrics\n"
        f"    static_configs:\n      - targets: ['{target}']\n"
    )
    port = free_port()
    log_path = directory / "prometheus.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return process, f"http://127.0.0.1:{port}", log_path


@pytest.fixture
def prometheus(
    prometheus_binary: str, live_server: LiveServer, tmp_path: Path
) -> Iterator[tuple[str, LiveServer, Path]]:
    target = live_server.base_url.removeprefix("http://")
    process, url, log_path = _start_prometheus(prometheus_binary, target, tmp_path)
    try:
        yield url, live_server, log_path
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _query(http: httpx.Client, url: str, promql: str) -> list[dict[str, object]]:
    response = http.get(f"{url}/api/v1/query", params={"query": promql})
    response.raise_for_status()
    body = response.json()
    assert body["status"] == "success", body
    result: list[dict[str, object]] = body["data"]["result"]
    return result


def test_prometheus_scrapes_fleet_mfu_and_answers_promql(
    prometheus: tuple[str, LiveServer, Path], live_server: LiveServer
) -> None:
    url, server, log_path = prometheus
    key = cli_key(server.env, tenant="prometheus-test")
    rates_by_run = [[2.0e5, 2.2e5], [2.6e5, 2.4e5], [3.0e5, 3.2e5], [1.8e5, 1.6e5], [2.8e5, 3.0e5]]
    with httpx.Client(base_url=server.base_url, headers={"X-API-Key": key}, timeout=10) as api:
        for rates in rates_by_run:
            created = api.post("/v1/runs", json=run_body())
            assert created.status_code == 201, created.text
            added = api.post(
                f"/v1/runs/{created.json()['id']}/measurements",
                json=[measurement(step, rate) for step, rate in enumerate(rates, 1)],
            )
            assert added.status_code == 200, added.text
    expected = statistics.median(statistics.median(r) * MFU_PER_TOKEN_PER_SECOND for r in rates_by_run)

    promql = 'teff_fleet_run_mfu{accelerator="h100-sxm", size_class="1b_to_10b", quantile="0.5"}'
    deadline = time.monotonic() + 60
    result: list[dict[str, object]] = []
    with httpx.Client(timeout=5) as http:
        while time.monotonic() < deadline:
            try:
                result = _query(http, url, promql)
            except httpx.HTTPError:
                result = []  # Prometheus still starting
            if result:
                break
            time.sleep(0.5)
        assert result, f"no sample of {promql} within 60 s; Prometheus log:\n{log_path.read_text()}"
        (sample,) = result
        assert sample["metric"]["job"] == "teff"  # type: ignore[index]
        assert float(sample["value"][1]) == pytest.approx(expected, abs=fleet.MFU_BIN_WIDTH)  # type: ignore[index]
        # An aggregate over the fleet, as a dashboard would ask for it.
        (running,) = _query(http, url, "sum(teff_fleet_runs_running)")
        assert float(running["value"][1]) == len(rates_by_run)  # type: ignore[index]
        (up,) = _query(http, url, 'up{job="teff"}')
        assert up["value"][1] == "1"  # type: ignore[index]
        # Every query of the Grafana dashboard is PromQL this Prometheus accepts, and the ones that
        # need no rate window already answer.
        dashboard = json.loads(DASHBOARD.read_text())
        expressions = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
        assert expressions
        for expression in expressions:
            concrete = expression.replace("$accelerator", ".*").replace("$size_class", ".*")
            answer = _query(http, url, concrete)
            if "rate(" not in concrete:
                assert answer, f"the dashboard query {concrete!r} has no data"
