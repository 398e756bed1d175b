"""`teff-client` against the real server, and the log parsers on lines in the formats Megatron-LM,
torchtitan and NeMo print (copied from published logs and docs: OpenSeek's Megatron run, torchtitan's
debug-model and MoE write-ups, NVIDIA's NeMo performance recipes)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from teff_client import Client
from teff_client.cli import main
from teff_client.logparse import parse_line, parse_lines, parse_megatron, parse_nemo, parse_torchtitan

from tests.clients.conftest import KeyedServer, client_env

MEGATRON = (
    "[default0]: [2025-05-27 15:23:07] iteration        1/    24000 | consumed samples:          1024 | "
    "elapsed time per iteration (ms): 271607.0 | throughput per GPU (TFLOP/s/GPU): 40.4 | learning rate: "
    "1.500000E-06 | global batch size:  1024 | lm loss: 1.192634E+01 | load_balancing_loss: 1.041994E+00 | "
    "loss scale: 1.0 | grad norm: 5.960 | num zeros: 0.0 | params norm: 238.330 | number of skipped iterations:    0 |"
)
MEGATRON_RUNNING_MEAN = (
    " [2026-01-02 10:00:00] iteration      200/    1000 | consumed samples:       25600 | "
    "elapsed time per iteration (ms): 4012.5/4100.0 | learning rate: 3.0E-04 | global batch size:   128 | lm loss: 2.5E+00 |"
)
TITAN = (
    "[rank0]:[titan] 2025-10-30 14:32:58,897 - root - INFO - step:  1  loss:  8.1661  grad_norm:  3.6855  "
    "memory:  2.47GiB(3.12%)  tps: 3,502  tflops: 1.90  mfu: 0.19%"
)
TITAN_COLOURED = (
    "[rank0]:2025-04-01 00:25:47,084 - root - INFO - \x1b[31mstep: 640/644 = 99.3789%  \x1b[32mloss:  6.2116  "
    "\x1b[33mmemory: 87.04GiB(93.48%)  \x1b[34mtps: 52,142  \x1b[35mmfu: 3.09%\x1b[39m"
)
NEMO = (
    "Training epoch 0, iteration 49/49 | lr: 7.496e-06 | global_batch_size: 128 | global_step: 49 | "
    "peak_memory_usage: 70833405952 | memory_allocated: 44271689728 | reduced_train_loss: 11.96 | "
    "train_step_timing in s: 12.39 | consumed_samples: 6400"
)
NEMO_PER_GPU = (
    "[2025-11-20T14:55:23+08:00] retraining/0 Training epoch 0, iteration 97/99 | lr: 1.469e-05 | "
    "global_batch_size: 128 | global_step: 97 | reduced_train_loss: 6.265 | train_step_timing in s: 12.22 | "
    "tokens_per_sec_per_gpu: 1.073e+04 | consumed_samples: 12544"
)
NEMO_SUMMARY = (
    "[NeMo I 2025-03-04 02:58:29 perf_metrics_utils:56] train_step_timing in s: [11.85, 6.98, 5.36]"
)


def test_megatron_lines() -> None:
    assert parse_megatron(MEGATRON) == {
        "step": 1,
        "throughput": {"step_time_seconds": 271.607, "global_batch_sequences": 1024},
        "loss": pytest.approx(11.92634),
    }
    running = parse_megatron(MEGATRON_RUNNING_MEAN)
    assert running is not None and running["throughput"]["step_time_seconds"] == pytest.approx(4.0125)
    assert parse_megatron(TITAN) is None and parse_megatron(NEMO) is None


def test_torchtitan_lines() -> None:
    assert parse_torchtitan(TITAN) == {
        "step": 1,
        "throughput": {"tokens_per_second_per_device": 3502.0},
        "loss": pytest.approx(8.1661),
        "memory_bytes": int(2.47 * 2**30),
    }
    coloured = parse_torchtitan(TITAN_COLOURED)
    assert coloured is not None and coloured["step"] == 640
    assert coloured["throughput"] == {"tokens_per_second_per_device": 52142.0}
    assert parse_torchtitan(MEGATRON) is None


def test_nemo_lines() -> None:
    # global_step is logged before the optimizer step: iteration 49 of 0..49 is the 50th completed.
    assert parse_nemo(NEMO) == {
        "step": 50,
        "throughput": {"step_time_seconds": 12.39, "global_batch_sequences": 128},
        "loss": pytest.approx(11.96),
    }
    per_gpu = parse_nemo(NEMO_PER_GPU)
    assert per_gpu is not None and per_gpu["throughput"] == {"tokens_per_second_per_device": 10730.0}
    assert parse_nemo(NEMO_SUMMARY) is None, "the end-of-run list of step times is not one step"


def test_auto_detection_fixes_the_format_on_the_first_line() -> None:
    lines = ["loading checkpoint...", MEGATRON, "random noise", MEGATRON_RUNNING_MEAN]
    assert [m["step"] for m in parse_lines(lines)] == [1, 200]
    assert parse_line(NEMO)["step"] == 50  # type: ignore[index]


def run_cli(server: KeyedServer, *args: str, stdin: str = "") -> tuple[int, str]:
    out = io.StringIO()
    argv = ["--url", server.base_url, "--api-key", server.api_key, *args]
    from contextlib import redirect_stdout

    with redirect_stdout(out):
        code = main(argv, stdin=io.StringIO(stdin))
    return code, out.getvalue()


def test_mfu_command_reproduces_torchtitans_published_figure(keyed_server: KeyedServer) -> None:
    code, out = run_cli(
        keyed_server,
        "--json",
        "mfu",
        "--model",
        "llama3.1-8b",
        "--seq-len",
        "8192",
        "--hardware",
        "NVIDIA H100 80GB HBM3",
        "--count",
        "8",
        "--tokens-per-second-per-device",
        "5762",
        "--embedding-policy",
        "exclude_input",
    )
    assert code == 0 and json.loads(out)["mfu"] == pytest.approx(0.337, abs=0.001)


def test_report_from_a_nemo_log_gives_nemos_own_tokens_per_second(
    keyed_server: KeyedServer, tmp_path: Path
) -> None:
    # NVIDIA's recipe doc: 8192 × 128 / 12.39 s = 84,631 tokens/s for this line.
    run = {
        "model": {"preset": "llama3-70b"},
        "hardware": {"accelerator": "h100-sxm", "device_count": 64},
        "seq_len_tokens": 8192,
        "global_batch_sequences": 128,
        "cluster": "cli",
        "scheduler_job_id": "nemo-1",
    }
    (tmp_path / "run.json").write_text(json.dumps(run))
    log = "\n".join(["[NeMo I] setting up", NEMO, NEMO_SUMMARY]) + "\n"
    code, out = run_cli(
        keyed_server,
        "--json",
        "report",
        "--from-log",
        "-",
        "--run",
        f"@{tmp_path / 'run.json'}",
        "--finish",
        "finished",
        stdin=log,
    )
    assert code == 0, out
    answer = json.loads(out)
    assert (answer["parsed"], answer["stored"]) == (1, 1)
    with Client(keyed_server.base_url, api_key=keyed_server.api_key) as client:
        stored = client.list_measurements(answer["run_id"])["items"]
        assert stored[0]["step"] == 50
        assert stored[0]["tokens_per_second"] == pytest.approx(84631, abs=1)
        assert client.get_run(answer["run_id"])["status"] == "finished"
    # Again: every step is already there, nothing stored twice; the run is resumed, not duplicated.
    code, out = run_cli(
        keyed_server, "--json", "report", "--from-log", "-", "--run", f"@{tmp_path / 'run.json'}", stdin=log
    )
    assert json.loads(out)["run_id"] == answer["run_id"] and json.loads(out)["ignored"] == 1

    code, out = run_cli(keyed_server, "runs", "show", answer["run_id"])
    assert code == 0 and answer["run_id"] in out
    code, out = run_cli(keyed_server, "runs", "list", "--cluster", "cli")
    assert answer["run_id"] in out


def test_the_installed_entry_point_and_its_errors(keyed_server: KeyedServer) -> None:
    listed = subprocess.run(
        [
            sys.executable,
            "-m",
            "teff_client",
            "--url",
            keyed_server.base_url,
            "--api-key",
            "teff_bad_key",
            "runs",
            "list",
        ],
        capture_output=True,
        text=True,
        env=client_env(),
        timeout=60,
    )
    assert listed.returncode == 1 and "401" in listed.stderr
    plan = json.dumps(
        {
            "model": {"preset": "llama3-8b"},
            "seq_len_tokens": 8192,
            "global_batch_sequences": 256,
            "cluster": {"accelerator": "h100-sxm", "device_count": 64},
        }
    )
    planned = subprocess.run(
        [sys.executable, "-m", "teff_client", "--url", keyed_server.base_url, "plan", plan, "--top", "3"],
        capture_output=True,
        text=True,
        env=client_env(),
        timeout=120,
    )
    assert planned.returncode == 0, planned.stderr
    assert "feasible" in planned.stdout and "1." in planned.stdout


def test_job_end_records_the_exit_code_once_and_leaves_a_self_marked_run_alone(
    keyed_server: KeyedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """``job end`` after a step killed by SIGKILL (bash: 128 + 9), called twice as a retried hook
    would: one failure event naming the signal; a run its job already marked gets no event."""
    client = Client(keyed_server.base_url, api_key=keyed_server.api_key)
    base = ["--url", keyed_server.base_url, "--api-key", keyed_server.api_key]
    description = {
        "model": {"preset": "llama3.1-8b"},
        "hardware": {"accelerator": "NVIDIA H100 80GB HBM3", "device_count": 8},
        "seq_len_tokens": 8192,
        "global_batch_sequences": 64,
        "cluster": "cli-test",
    }
    killed = client.create_run({**description, "scheduler_job_id": "cli-killed"})
    for _ in range(2):
        assert main([*base, "job", "end", "--run-id", killed["id"], "--exit-code", "137"]) == 0
    assert client.get_run(killed["id"])["status"] == "failed"
    goodput = client.get_goodput(killed["id"])
    assert goodput["event_count"] == 1
    assert [(a["failed"], a["failure_reason"]) for a in goodput["attempts"]] == [
        (True, "exit code 137 (killed by signal 9)")
    ]

    marked = client.create_run({**description, "scheduler_job_id": "cli-marked"})
    client.finish_run(marked["id"], "finished")
    assert main([*base, "job", "end", "--run-id", marked["id"], "--exit-code", "1"]) == 0
    assert client.get_run(marked["id"])["status"] == "finished", "the job's own word stands"
    assert client.get_goodput(marked["id"])["event_count"] == 0
    capsys.readouterr()
    client.close()
