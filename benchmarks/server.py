"""Start the real server for a benchmark, as deployed: `teff db upgrade`, then `teff serve`."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def machine_description() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {cpu}, Python {platform.python_version()}"


@dataclass
class Server:
    base_url: str
    process: subprocess.Popen[bytes]
    env: dict[str, str]
    started_seconds: float

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def resident_memory_bytes(self) -> int:
        """RSS of the server and its worker processes."""
        total = 0
        pids = [self.process.pid]
        try:
            children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
            pids += [int(pid) for pid in children]
        except OSError:
            pass
        for pid in pids:
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
            except OSError:
                pass
        return total


def server_env(database_url: str, port: int, workers: int = 1, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("TEFF_")}
    env.update(
        {
            "TEFF_DATABASE_URL": database_url,
            "TEFF_PORT": str(port),
            "TEFF_WORKERS": str(workers),
            "TEFF_LOG_LEVEL": "warning",  # access logs to a file would measure the disk, not the service
            "TEFF_BENCHMARK_ROUTES": "true",
            **extra,
        }
    )
    return env


def migrate(database_url: str) -> None:
    env = server_env(database_url, 8000)
    subprocess.run(
        [sys.executable, "-m", "service", "db", "upgrade"], env=env, check=True, capture_output=True
    )


def start(database_url: str, *, workers: int = 1, log_path: Path | None = None, **extra: str) -> Server:
    port = free_port()
    env = server_env(database_url, port, workers, **extra)
    log = open(log_path or os.devnull, "wb")  # noqa: SIM115 — handed to the child
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "service", "serve"], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    log.close()
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            if httpx.get(base_url + "/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("server did not start within 60 s")
        time.sleep(0.05)
    return Server(base_url, process, env, time.perf_counter() - started)
