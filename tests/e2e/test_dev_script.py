"""dev.py, the first command a new user runs: text logs on a terminal, a one-line error for a busy
port, and SIGTERM to dev.py stopping the server it started."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _dev() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dev_script", ROOT / "dev.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_terminal_gets_text_logs_unless_the_user_chose_a_format() -> None:
    dev = _dev()
    assert dev.child_environment({}, stdout_is_terminal=True)["TEFF_LOG_FORMAT"] == "text"
    assert "TEFF_LOG_FORMAT" not in dev.child_environment({}, stdout_is_terminal=False)
    chosen = dev.child_environment({"TEFF_LOG_FORMAT": "json"}, stdout_is_terminal=True)
    assert chosen["TEFF_LOG_FORMAT"] == "json"


def test_a_busy_port_is_one_line_naming_the_port_and_the_setting(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        env = {**os.environ, "TEFF_PORT": str(port), "TEFF_DATA_DIR": str(tmp_path)}
        done = subprocess.run(
            [sys.executable, "dev.py", "serve"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"127.0.0.1:{port}" in lines[0] and "TEFF_PORT" in lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_dev_py_stops_its_server_and_frees_the_port(tmp_path: Path, signum: int) -> None:
    port = _free_port()
    env = {**os.environ, "TEFF_PORT": str(port), "TEFF_DATA_DIR": str(tmp_path)}
    env.pop("TEFF_DATABASE_URL", None)
    dev = subprocess.Popen(
        [sys.executable, "dev.py", "serve"], cwd=ROOT, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while True:
            assert dev.poll() is None, "dev.py exited before serving"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as answer:
                    assert answer.status == 200
                    break
            except OSError:
                assert time.monotonic() < deadline, "the server never answered /healthz"
                time.sleep(0.5)
        dev.send_signal(signum)
        assert dev.wait(timeout=30) is not None
    finally:
        if dev.poll() is None:
            dev.kill()
    # The server left with dev.py: nobody answers and the port can be bound again.
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)
    assert _dev().port_problem("127.0.0.1", port) is None
