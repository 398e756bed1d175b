"""Tests of the Python client (clients/python) against a real server process: `teff db upgrade` on a
SQLite file, then `teff serve` on a free port, as tests/e2e starts it; an API key made with the CLI.

The client package is imported from clients/python when it is not installed, so that the suite runs
from a plain checkout (`pip install ./clients/python` is what a user does).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import LiveServer, free_port, server_env, start_server, stop_server, teff
from tests.support.live_api import cli_key

CLIENT_ROOT = Path(__file__).resolve().parents[2] / "clients" / "python"
if str(CLIENT_ROOT) not in sys.path:
    try:
        import teff_client  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(CLIENT_ROOT))


def client_env(**extra: str) -> dict[str, str]:
    """The environment of a child process that imports teff_client (from the checkout if needed)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(CLIENT_ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


@dataclass
class KeyedServer:
    server: LiveServer
    api_key: str

    @property
    def base_url(self) -> str:
        return self.server.base_url


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KeyedServer]:
    directory = tmp_path_factory.mktemp("client-live")
    database_url = f"sqlite:///{directory / 'teff.db'}"
    env = server_env(database_url, 8000)
    migrated = teff("db", "upgrade", env=env)
    assert migrated.returncode == 0, migrated.stderr
    key = cli_key(env, tenant="client-tests")
    server = start_server(database_url, directory / "server.log")
    yield KeyedServer(server, key)
    stop_server(server)


class RestartableServer:
    """A server on a fixed port and SQLite file that a test can kill and start again."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.database_url = f"sqlite:///{directory / 'teff.db'}"
        self.port = free_port()
        self.env = server_env(self.database_url, self.port)
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        migrated = teff("db", "upgrade", env=self.env)
        assert migrated.returncode == 0, migrated.stderr
        self.api_key = cli_key(self.env, tenant="reporter-tests")

    def start(self) -> None:
        self.starts += 1
        log_path = self.directory / f"server-{self.starts}.log"
        with log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "service", "serve"], env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 30
        while True:
            assert self.process.poll() is None, log_path.read_text()
            try:
                if httpx.get(self.base_url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"server did not start: {log_path.read_text()}"
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, an in-flight request is cut."""
        assert self.process is not None
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def restartable_server(tmp_path: Path) -> Iterator[RestartableServer]:
    server = RestartableServer(tmp_path)
    server.start()
    yield server
    server.stop()


def require(module_name: str) -> Any:
    """Import a test dependency of the client's integrations, or skip the module with a visible
    notice (a failure under TEFF_TEST_REQUIRE_ALL=1: CI installs clients/python[test], torch first)."""
    import importlib

    from tests.conftest import REQUIRE_ALL

    try:
        return importlib.import_module(module_name)
    except ImportError:
        reason = f"{module_name} not installed: pip install torch==2.13.0, then ./clients/python[test]"
        if REQUIRE_ALL:
            pytest.fail(f"{reason} (TEFF_TEST_REQUIRE_ALL=1: CI runs every test)", pytrace=False)
        pytest.skip(reason, allow_module_level=True)
