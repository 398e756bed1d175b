"""A real server process, started the way the README starts it (`teff db upgrade`, `teff serve`)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class LiveServer:
    base_url: str
    process: subprocess.Popen[bytes]
    env: dict[str, str]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def teff(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def server_env(database_url: str, port: int, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("TEFF_")}
    env.update(
        {"TEFF_DATABASE_URL": database_url, "TEFF_PORT": str(port), "TEFF_LOG_FORMAT": "json", **extra}
    )
    return env


def start_server(database_url: str, log_path: Path, **extra: str) -> LiveServer:
    port = free_port()
    env = server_env(database_url, port, **extra)
    with log_path.open("wb") as log:  # the child keeps its own copy of the descriptor
        process = subprocess.Popen(
            [sys.executable, "-m", "service", "serve"], env=env, stdout=log, stderr=subprocess.STDOUT
        )
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}: {log_path.read_text()}")
        try:
            if httpx.get(base_url + "/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"server did not start: {log_path.read_text()}")
        time.sleep(0.1)
    return LiveServer(base_url, process, env, log_path)


def stop_server(server: LiveServer) -> None:
    if server.process.poll() is None:
        server.process.terminate()
        try:
            server.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    directory = tmp_path_factory.mktemp("live")
    database_url = f"sqlite:///{directory / 'teff.db'}"
    migrated = teff("db", "upgrade", env=server_env(database_url, 8000))
    assert migrated.returncode == 0, migrated.stderr
    server = start_server(database_url, directory / "server.log")
    yield server
    stop_server(server)
