"""Issue 21's end-to-end test: a tiny HF Trainer job that saves checkpoints, is killed (SIGKILL) after
its second save, has the failure recorded as a scheduler epilog would (``teff-client job end`` style:
a ``failure`` event at the kill), and is resumed as attempt 1 from its last checkpoint. The service's
goodput and badput are checked against the durations this test measured itself (each attempt writes
its own clock, line by line, at the callback hooks)."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from teff_client import Client

from tests.clients.conftest import KeyedServer, client_env, require

require("torch")
require("transformers")

TRAINER = Path(__file__).with_name("goodput_trainer.py")


def _clock(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _saves(entries: list[dict[str, Any]]) -> list[tuple[float, float]]:
    begins = [e["at"] for e in entries if e["kind"] == "save_begin"]
    ends = [e["at"] for e in entries if e["kind"] == "save_end"]
    return list(zip(begins, ends, strict=False))


def test_a_killed_and_resumed_job_has_the_goodput_the_test_measured(
    keyed_server: KeyedServer, tmp_path: Path
) -> None:
    args = [sys.executable, str(TRAINER), keyed_server.base_url, keyed_server.api_key, str(tmp_path / "out")]
    env = client_env()
    first_clock = tmp_path / "attempt0.jsonl"
    first = subprocess.Popen([*args, str(first_clock), "0", "40"], env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    # Kill a few steps after the second checkpoint (step 10) is written: those steps are lost.
    while time.monotonic() < deadline:
        entries = _clock(first_clock)
        saved = [e for e in entries if e["kind"] == "save_end"]
        if len(saved) >= 2 and any(e["kind"] == "step" and e["step"] >= 13 for e in entries):
            break
        assert first.poll() is None, "attempt 0 ended before the test killed it"
        time.sleep(0.02)
    else:
        first.kill()
        pytest.fail("attempt 0 did not reach step 13 in time")
    os.kill(first.pid, signal.SIGKILL)
    killed_at = time.time()
    first.wait(30)
    entries0 = _clock(first_clock)
    run0 = next(e["run_id"] for e in reversed(entries0) if e.get("run_id"))
    last_save_end = max(at for _, at in _saves(entries0))
    steps_done = max(e["step"] for e in entries0 if e["kind"] in ("step", "save_begin"))

    client = Client(keyed_server.base_url, api_key=keyed_server.api_key)
    # The scheduler's epilog: the job left with 137 (killed by signal 9), at the moment it died.
    client.add_events(
        run0,
        {
            "event_id": f"epilog-{run0}",
            "kind": "failure",
            "time": dt.datetime.fromtimestamp(killed_at, dt.UTC).isoformat(),
            "reason": "exit code 137 (killed by signal 9)",
            "step": steps_done,
        },
    )
    checkpoint = max((tmp_path / "out").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    assert checkpoint.name == "checkpoint-10"
    second_clock = tmp_path / "attempt1.jsonl"
    subprocess.run([*args, str(second_clock), "1", "20", str(checkpoint)], env=env, check=True, timeout=180,
                   stderr=subprocess.DEVNULL)  # fmt: skip
    entries1 = _clock(second_clock)
    run1 = next(e["run_id"] for e in entries1 if e["kind"] == "done")

    goodput = client.get_goodput(run1)
    assert sorted(goodput["job_run_ids"]) == sorted([run0, run1])
    attempts = {a["attempt"]: a for a in goodput["attempts"]}
    assert attempts[0]["failed"] and "signal 9" in (attempts[0]["failure_reason"] or "")
    assert not attempts[1]["failed"]
    badput = {item["kind"]: item["seconds"] for item in goodput["badput"]}

    # Saves: both attempts' windows, as the test's clock saw them at the same hooks.
    measured_saves = sum(end - begin for begin, end in _saves(entries0) + _saves(entries1))
    assert badput["checkpoint_save"] == pytest.approx(measured_saves, rel=0.1, abs=0.05)
    # Lost progress: training between the last completed save (step 10) and the kill, redone by
    # attempt 1. The failure event carries the kill time; the save's end is the callback's stamp.
    assert badput["lost_progress"] == pytest.approx(killed_at - last_save_end, rel=0.1, abs=0.1)
    assert badput["checkpoint_restore"] > 0
    # Idle between attempts: from the kill to attempt 1's start (its callback's construction), which
    # lies between the kill and attempt 1's first step.
    first_step_1 = min(e["at"] for e in entries1 if e["kind"] in ("step", "save_begin"))
    assert 0 < badput["idle_between_attempts"] < first_step_1 - killed_at
    total = sum(badput.values()) + goodput["productive_seconds"]
    assert total == pytest.approx(goodput["total_seconds"], rel=1e-6)
    assert 0 < goodput["goodput"] < 1
    client.close()
