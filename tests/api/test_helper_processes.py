"""A helper process leaves when the server process that started it goes, however that one ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

PARENT = """
import os, sys, time
from service.usecases.helper_processes import helper_pool
pool = helper_pool()
print(pool.submit(os.getpid).result(), flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its new parent) counts as gone.
    state = (
        Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if Path(f"/proc/{pid}").exists()
        else "X"
    )
    return state != "Z"


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_a_helper_leaves_within_seconds_of_its_parent(how: signal.Signals) -> None:
    with subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True) as parent:
        _check_the_helper_leaves(parent, how)


def _check_the_helper_leaves(parent: subprocess.Popen[str], how: signal.Signals) -> None:
    try:
        assert parent.stdout is not None
        helper_pid = int(parent.stdout.readline())
        assert helper_pid != parent.pid and _alive(helper_pid)
        parent.send_signal(how)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _alive(helper_pid):
            assert time.monotonic() < deadline, f"helper {helper_pid} outlived its parent"
            time.sleep(0.1)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
