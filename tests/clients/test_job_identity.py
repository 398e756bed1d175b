"""How a run is named by its scheduler's job, and what a restarted job reports to: the running run of
its attempt (resumed), or, when that one ended, a new run with the next attempt."""

from __future__ import annotations

from teff_client import Client
from teff_client.integrations._common import scheduler_facts

from tests.clients.conftest import KeyedServer


def test_slurm_ids_from_the_environment() -> None:
    env = {"SLURM_JOB_ID": "4242", "SLURM_RESTART_COUNT": "2", "SLURM_CLUSTER_NAME": "eu-a"}
    assert scheduler_facts(env) == {"scheduler_job_id": "slurm-4242", "attempt": 2, "cluster": "eu-a"}
    array = {"SLURM_JOB_ID": "4300", "SLURM_ARRAY_JOB_ID": "4299", "SLURM_ARRAY_TASK_ID": "1"}
    assert scheduler_facts(array) == {"scheduler_job_id": "slurm-4299_1", "attempt": 0}


def test_kubernetes_and_explicit_ids() -> None:
    env = {"TEFF_K8S_JOB_NAME": "pretrain", "TEFF_K8S_NAMESPACE": "ml", "TEFF_CLUSTER": "gke-1"}
    assert scheduler_facts(env) == {"scheduler_job_id": "k8s-ml/pretrain", "attempt": 0, "cluster": "gke-1"}
    explicit = {"SLURM_JOB_ID": "1", "TEFF_SCHEDULER_JOB_ID": "mine", "TEFF_ATTEMPT": "5"}
    assert scheduler_facts(explicit) == {"scheduler_job_id": "mine", "attempt": 5}
    assert scheduler_facts({}) == {}


def test_a_restarted_job_resumes_its_running_run_and_starts_the_next_attempt_after_an_ended_one(
    keyed_server: KeyedServer,
) -> None:
    run = {
        "model": {"preset": "llama3-8b"},
        "hardware": {"accelerator": "h100-sxm", "device_count": 64},
        "seq_len_tokens": 8192,
        "global_batch_tokens": 1048576,
        "cluster": "identity",
        "scheduler_job_id": "job-7",
        "attempt": 0,
    }
    with Client(keyed_server.base_url, api_key=keyed_server.api_key) as client:
        first = client.reporter(run=run, register_atexit=False)
        first.log(1, step_time_seconds=4.0)
        assert first.flush(10)
        first.close()  # the process died without a final status: the run is still running
        again = client.reporter(run=run, register_atexit=False)
        again.log(2, step_time_seconds=4.0)
        assert again.flush(10)
        assert again.run_id == first.run_id, "the running run is resumed"
        again.close(status="failed")
        assert again.finished_status == "failed"
        retry = client.reporter(run=run, register_atexit=False)
        retry.log(1, step_time_seconds=4.0)
        assert retry.flush(10)
        retry.close(status="finished")
        assert retry.run_id not in (None, first.run_id)
        assert retry.run is not None and retry.run["attempt"] == 1
        assert [m["step"] for m in client.iter_measurements(first.run_id or "")] == [1, 2]
        assert client.get_run(retry.run_id or "")["status"] == "finished"
