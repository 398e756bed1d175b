"""deploy/slurm/teff-run.sh on a real one-node Slurm (slurmctld + slurmd + munged on loopback, set up
by the test): sbatch jobs train a tiny model on CPU with the plain-PyTorch tracker; the stored run
carries the job's id, attempt and cluster, its measurements, and the status the exit code says."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from teff_client import Client

from tests.clients.conftest import CLIENT_ROOT, KeyedServer, client_env, require
from tests.clients.slurm_cluster import SlurmCluster, missing_tools
from tests.clients.slurm_train import TINY_LLAMA
from tests.conftest import skip_or_fail

require("torch")  # the Slurm job trains with torch
require("transformers")

ROOT = Path(__file__).resolve().parents[2]
WRAPPER = ROOT / "deploy" / "slurm" / "teff-run.sh"
TRAIN = Path(__file__).resolve().parent / "slurm_train.py"
RUN = {
    # What the job's wrapper registers: the same tiny Llama the job trains (its run is the one the
    # tracker resumes, so it must describe the real model).
    "model": {"hf_config": {"model_type": "llama", **TINY_LLAMA}},
    "hardware": {"custom": {"name": "test-cpu", "peak_tflops": {"fp32": 0.5}}, "count": 1},
    "precision": "fp32",
    "seq_len_tokens": 32,
    "global_batch_sequences": 4,
}


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    missing = missing_tools()
    if missing:
        skip_or_fail(f"Slurm test skipped: {', '.join(missing)} not installed (apt-get install slurm-wlm)")
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def submit(
    slurm: SlurmCluster, server: KeyedServer, tmp_path: Path, name: str, *train_args: str
) -> tuple[str, str, Path]:
    run_file = tmp_path / f"{name}.json"
    run_file.write_text(json.dumps(RUN))
    output = tmp_path / f"{name}.out"
    script = tmp_path / f"{name}.sbatch"
    script.write_text(
        f"""#!/bin/bash
#SBATCH --job-name={name}
#SBATCH --output={output}
#SBATCH --ntasks=1
srun {WRAPPER} {sys.executable} {TRAIN} {" ".join(train_args)}
"""
    )
    env = client_env(
        TEFF_URL=server.base_url,
        TEFF_API_KEY=server.api_key,
        TEFF_RUN=str(run_file),
        TEFF_PYTHON=sys.executable,
    )
    job_id = slurm.sbatch(script, env)
    return job_id, slurm.wait(job_id), output


def job_run(client: Client, job_id: str) -> dict:
    runs = [
        run for run in client.iter_runs(cluster="teff-ci") if run["scheduler_job_id"] == f"slurm-{job_id}"
    ]
    assert len(runs) == 1, runs
    return dict(runs[0])


def test_a_job_that_succeeds_is_stored_finished_with_its_slurm_ids(
    slurm: SlurmCluster, keyed_server: KeyedServer, tmp_path: Path
) -> None:
    job_id, state, output = submit(slurm, keyed_server, tmp_path, "tiny-ok", "30")
    log = output.read_text()
    assert state == "COMPLETED", log + slurm.logs()
    with Client(keyed_server.base_url, api_key=keyed_server.api_key) as client:
        run = job_run(client, job_id)
        assert (run["cluster"], run["attempt"], run["status"]) == ("teff-ci", 0, "finished")
        printed_lines = [line for line in log.splitlines() if line.startswith("{")]
        assert printed_lines, log
        printed = json.loads(printed_lines[-1])
        assert printed["run_id"] == printed["wrapper_run_id"] == run["id"], (
            "the tracker resumed the wrapper's run"
        )
        stored = list(client.iter_measurements(run["id"]))
        assert [item["step"] for item in stored] == [5, 10, 15, 20, 25, 30]
        for item in stored:  # MFU from the run's facts and the reported step time
            tokens_per_second = run["global_batch_tokens"] / item["throughput"]["step_time_seconds"]
            expected = tokens_per_second * run["model_flops_per_token"] / (0.5e12 * run["device_count"])
            assert item["mfu"] == pytest.approx(expected, rel=1e-6) and 0 < item["mfu"] < 1


def test_a_crash_and_a_hard_exit_are_stored_failed(
    slurm: SlurmCluster, keyed_server: KeyedServer, tmp_path: Path
) -> None:
    crash_id, crash_state, crash_out = submit(
        slurm, keyed_server, tmp_path, "tiny-crash", "30", "--crash-at", "12"
    )
    killed_id, killed_state, killed_out = submit(
        slurm, keyed_server, tmp_path, "tiny-oom", "30", "--hard-exit-at", "17"
    )
    assert crash_state == "FAILED" and killed_state == "FAILED", (
        crash_out.read_text() + killed_out.read_text()
    )
    with Client(keyed_server.base_url, api_key=keyed_server.api_key) as client:
        crashed = job_run(client, crash_id)
        assert crashed["status"] == "failed"
        assert [m["step"] for m in client.iter_measurements(crashed["id"])] == [5, 10]
        killed = job_run(client, killed_id)
        assert killed["status"] == "failed", "only the wrapper saw exit code 3"
        assert [m["step"] for m in client.iter_measurements(killed["id"])] == [5, 10, 15]
        # The wrapper's exit code is the failure the job's goodput records (slurm_train.py's
        # --hard-exit-at calls os._exit(3)).
        attempts = client.get_goodput(killed["id"])["attempts"]
        assert [(a["attempt"], a["failed"], a["failure_reason"]) for a in attempts] == [
            (0, True, "exit code 3")
        ]


def test_wrapper_is_in_the_checkout() -> None:
    assert WRAPPER.stat().st_mode & 0o111, "teff-run.sh is executable"
    assert (CLIENT_ROOT / "teff_client" / "cli.py").exists()
