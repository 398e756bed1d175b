"""`teff demo` (issue 20): the real CLI in a subprocess, on an empty SQLite file and an empty
PostgreSQL database, then the app read with the key it printed.

Checked against published figures written here (not imported from the demo): each run's median MFU
lies in the published range its step times were derived from; MPT-7B on 8 H100s runs at MosaicML's
published 10,643 tokens/s per GPU (a figure the demo does not use: it derives step times from the
46.44 % MFU, so this checks the FLOPs count behind them); the loss follows Hoffmann et al.'s Eq. 10.
A second `teff demo` prints a new key and stores no run, measurement or event again; what the demo
stored is what POST /v1/runs and POST /v1/runs/{id}/measurements store for the same bodies.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.store import keys as keys_store
from service.store.engine import build_engine
from service.store.uow import UnitOfWork
from service.usecases import demo
from tests.conftest import make_settings

ROOT = Path(__file__).resolve().parents[1]
KEY = re.compile(r"teff_[0-9a-f]{12}_[A-Za-z0-9_-]{43}")

#: Published MFU ranges, from the sources (validation/published_runs.json, reference/flops_and_mfu.md):
TORCHTITAN = (0.337, 0.390)  # torchtitan Llama 3.1 8B on H100: 5,762 and 6,667 tokens/s per GPU
MOSAICML_H100 = (0.3665, 0.4644)  # llm-foundry benchmarks on H100 SXM: MPT-1B at 512 GPUs … MPT-7B at 8
MEGATRON_H100 = (0.41, 0.49)  # Megatron-LM README H100 table, 2024
# Narayanan et al. 2021 Table 1 (A100): 43-52 % with full recomputation, i.e. 4 forward passes of work
# for 3 of model FLOPs.
NARAYANAN_A100 = (0.43 * 0.75, 0.52 * 0.75)

#: Each demo run: (model, accelerator, devices, status, published MFU range).
EXPECTED: dict[str, tuple[str, str, int, str, tuple[float, float]]] = {
    "run_5f0c2a9b1d3e4f6a7b8c": ("llama3-8b", "h100-sxm", 8, "running", TORCHTITAN),
    "run_9e8d7c6b5a4f3e2d1c0b": ("mpt-7b", "h100-sxm", 8, "finished", MOSAICML_H100),
    "run_d40ed047c2f68d7f865a": ("llama3-8b", "h100-sxm", 64, "failed", TORCHTITAN),
    "run_953d6f21f0f0a089d627": ("llama3-8b", "h100-sxm", 64, "running", TORCHTITAN),
    "run_cc580ae4b7c32aa3d4bc": ("mpt-7b", "h100-sxm", 512, "finished", MOSAICML_H100),
    "run_ad2187caebdc4a48a4c0": ("mixtral-8x7b", "h100-sxm", 64, "running", MEGATRON_H100),
    "run_5a75bdb4f98b8563578e": ("llama2-70b", "a100-sxm4-80gb", 64, "finished", NARAYANAN_A100),
    "run_54b6058b4a3ac997ebbb": ("gpt3-1.3b", "a100-sxm4-80gb", 8, "finished", NARAYANAN_A100),
}
#: The run medians are read from histograms of this bin width (GET .../efficiency says so).
MEDIAN_RESOLUTION = 0.001
#: MosaicML, MPT-7B on 8 H100 SXM at sequence 2048 (reference/flops_and_mfu.md).
MPT_7B_TOKENS_PER_SECOND_PER_GPU = 10_643


def _chinchilla(parameters: float, tokens: float) -> float:
    # Hoffmann et al. 2022 Eq. 10, rounded constants (reference/batch_and_scaling.md).
    return 1.69 + 406.4 / parameters**0.34 + 410.7 / tokens**0.28


def _teff_demo(url: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("TEFF_")}
    env.pop("DATABASE_URL", None)
    # This checkout's service, whichever one the environment has installed; from another directory.
    path = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(TEFF_DATABASE_URL=url, TEFF_DATA_DIR=str(tmp_path / "data"), PYTHONPATH=path)
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "service", "demo"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done, time.perf_counter() - began


def _key(output: str) -> str:
    found = KEY.findall(output)
    assert found, output
    assert len(set(found)) == 1  # the key and its export line
    return found[0]


@pytest.fixture
def client_for(empty_database_url: str) -> Iterator[Any]:
    clients: list[TestClient] = []

    def make() -> TestClient:
        client = TestClient(create_app(make_settings(empty_database_url)), raise_server_exceptions=False)
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


def _runs(client: TestClient, key: str) -> dict[str, dict[str, Any]]:
    answer = client.get("/v1/runs", params={"limit": 100}, headers={"X-API-Key": key})
    assert answer.status_code == 200, answer.text
    return {run["id"]: run for run in answer.json()["items"]}


def test_teff_demo_loads_a_fleet_every_read_answers_and_a_second_load_adds_nothing(
    empty_database_url: str, tmp_path: Path, client_for: Any
) -> None:
    first, first_seconds = _teff_demo(empty_database_url, tmp_path)
    assert first.returncode == 0, first.stderr
    key = _key(first.stdout)
    assert "8 created" in first.stdout
    assert f"/v1/runs/{demo.DEMO_RUNS[0].id}/efficiency" in first.stdout and "/docs" in first.stdout
    assert "migrated" in first.stderr  # the database was empty
    headers = {"X-API-Key": key}
    client = client_for()

    runs = _runs(client, key)
    assert set(runs) == set(EXPECTED) == set(demo.DEMO_RUN_IDS.values())
    for run_id, (model, accelerator, devices, status, (low, high)) in EXPECTED.items():
        run = runs[run_id]
        assert (run["model_name"], run["accelerator_id"], run["device_count"], run["status"]) == (
            model,
            accelerator,
            devices,
            status,
        )
        assert set(run["parallelism"]) >= {"tp", "pp", "dp", "micro_batch_sequences", "zero_stage"}
        efficiency = client.get(f"/v1/runs/{run_id}/efficiency", headers=headers)
        assert efficiency.status_code == 200, efficiency.text
        median = efficiency.json()["mfu"]["median"]
        assert low - MEDIAN_RESOLUTION <= median <= high + MEDIAN_RESOLUTION, (run_id, median, low, high)
        assert efficiency.json()["measurement_count"] >= 190
        if status != "running":
            assert run["finished_at"] > run["summary"]["latest_measured_at"]

    # MosaicML's published throughput, from a step time derived from its MFU: the FLOPs count agrees.
    mpt = client.get(
        "/v1/runs/run_9e8d7c6b5a4f3e2d1c0b/measurements", params={"limit": 1000}, headers=headers
    ).json()["items"]
    per_gpu = statistics.median(item["tokens_per_second_per_device"] for item in mpt)
    assert per_gpu == pytest.approx(MPT_7B_TOKENS_PER_SECOND_PER_GPU, rel=0.01)
    # The loss falls along Hoffmann et al.'s curve in the tokens seen (noise of a fraction of a percent).
    parameters = runs["run_9e8d7c6b5a4f3e2d1c0b"]["parameters"]["total"]
    batch = runs["run_9e8d7c6b5a4f3e2d1c0b"]["global_batch_tokens"]
    for item in mpt:
        assert item["loss"] == pytest.approx(_chinchilla(parameters, item["step"] * batch), rel=0.02)
    assert mpt[-1]["loss"] < mpt[0]["loss"] - 1.0

    compared = client.post("/v1/runs/compare", json={"run_ids": list(EXPECTED)}, headers=headers)
    assert compared.status_code == 200, compared.text
    assert [item["run_id"] for item in compared.json()["runs"]] == list(EXPECTED)

    stats = client.get("/v1/stats/mfu", params={"run_id": demo.DEMO_RUNS[0].id}, headers=headers)
    assert stats.status_code == 200, stats.text
    groups = {(group["accelerator"], group["size_class"]): group for group in stats.json()["fleet"]}
    assert groups[("h100-sxm", "1b_to_10b")]["run_count"] == 5  # enough runs for a fleet group
    assert stats.json()["run"]["fleet_run_count"] == 5

    # The failed attempt and its restart are one job: goodput below 1 with the hang, the progress lost
    # since the last checkpoint, and the idle time between the attempts among its badput.
    goodput = client.get("/v1/runs/run_d40ed047c2f68d7f865a/goodput", headers=headers)
    assert goodput.status_code == 200, goodput.text
    badput = {item["kind"]: item["seconds"] for item in goodput.json()["badput"]}
    assert 0.5 < goodput.json()["goodput"] < 1
    assert badput["hang"] == demo.FAILURE_AFTER_SECONDS
    assert badput["lost_progress"] > 0 and badput["idle_between_attempts"] > 0
    assert goodput.json()["job_run_ids"] == ["run_d40ed047c2f68d7f865a", "run_953d6f21f0f0a089d627"]

    counts = {run_id: run["summary"]["measurement_count"] for run_id, run in runs.items()}
    events = goodput.json()["event_count"]
    second, second_seconds = _teff_demo(empty_database_url, tmp_path)
    assert second.returncode == 0, second.stderr
    assert "0 created, 8 already there; 0 measurements and 0 events stored" in second.stdout
    assert "the 1 made before stay valid" in second.stdout
    new_key = _key(second.stdout)
    assert new_key != key
    for each in (key, new_key):  # the earlier key still reads the same runs
        again = _runs(client, each)
        assert {run_id: run["summary"]["measurement_count"] for run_id, run in again.items()} == counts
    assert (
        client.get("/v1/runs/run_d40ed047c2f68d7f865a/goodput", headers=headers).json()["event_count"]
        == events
    )
    print(
        f"teff demo on {empty_database_url.split(':')[0]}: {first_seconds:.2f} s, again {second_seconds:.2f} s"
    )


#: Fields of a run that differ between two records of one body (who made it and when).
_OWN_FIELDS = {"id", "created_at", "updated_at", "links", "status", "finished_at"}


def test_the_demo_stores_what_the_api_stores_for_the_same_bodies(
    empty_database_url: str, tmp_path: Path, client_for: Any
) -> None:
    done, _ = _teff_demo(empty_database_url, tmp_path)
    assert done.returncode == 0, done.stderr
    key = _key(done.stdout)
    engine = build_engine(empty_database_url, pool_size=1)
    try:
        with UnitOfWork(engine, write=True) as uow:
            other = keys_store.create_key(uow.connection, tenant="http", scopes=frozenset({"read", "write"}))
            uow.commit()
    finally:
        engine.dispose()
    client = client_for()
    for demo_run in demo.DEMO_RUNS:
        stored = client.get(f"/v1/runs/{demo_run.id}", headers={"X-API-Key": key}).json()
        body = {**demo_run.body, "started_at": stored["started_at"]}
        created = client.post("/v1/runs", json=body, headers={"X-API-Key": other})
        assert created.status_code == 201, created.text
        run_id = created.json()["id"]
        facts = demo.RunFacts(
            model_flops_per_token=stored["model_flops_per_token"],
            peak_tflops_per_device=stored["peak_tflops_per_device"],
            device_count=stored["device_count"],
            global_batch_tokens=stored["global_batch_tokens"],
            parameters_total=stored["parameters"]["total"],
        )
        started_at = datetime.fromisoformat(stored["started_at"])
        items = demo.demo_measurements(demo_run, facts, started_at=started_at)
        added = client.post(f"/v1/runs/{run_id}/measurements", json=items, headers={"X-API-Key": other})
        assert added.status_code == 200, added.text
        via_http = client.get(f"/v1/runs/{run_id}", headers={"X-API-Key": other}).json()
        assert {k: v for k, v in via_http.items() if k not in _OWN_FIELDS} == {
            k: v for k, v in stored.items() if k not in _OWN_FIELDS
        }
        pages = [
            client.get(
                f"/v1/runs/{rid}/measurements", params={"limit": 1000}, headers={"X-API-Key": k}
            ).json()["items"]
            for rid, k in ((demo_run.id, key), (run_id, other))
        ]
        assert pages[0] == pages[1]


def test_dev_py_demo_runs_teff_demo_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    sys.path.insert(0, str(ROOT))
    try:
        import dev
    finally:
        sys.path.remove(str(ROOT))
    calls: list[list[str]] = []
    monkeypatch.setattr(dev, "_ensure_environment", lambda extras: calls.append(["ensure", extras]))
    monkeypatch.setattr(dev.subprocess, "call", lambda command, cwd: calls.append(command) or 0)
    monkeypatch.setattr(sys, "argv", ["dev.py", "demo"])
    assert dev.main() == 0
    assert calls == [["ensure", ""], [str(dev.BIN / "teff"), "demo"]]
