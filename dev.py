#!/usr/bin/env python3
"""Bootstrap for a fresh machine with only Python 3.11+: creates .venv, installs, then acts.

    python3 dev.py serve    create/refresh .venv, migrate the local SQLite database, serve
    python3 dev.py test     create/refresh .venv (with dev tools), run the whole test suite
    python3 dev.py demo     create/refresh .venv, load the demo fleet into the local database, print a key

Extra arguments after `test` go to pytest. The environment is reinstalled when pyproject.toml or
constraints.txt changes; constraints.txt pins every dependency to the versions the suite was last
run with.
Standard library only: this runs before anything is installed.
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import venv
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / "python"


def _digest(extras: str) -> str:
    return hashlib.sha256(
        (ROOT / "pyproject.toml").read_bytes() + (ROOT / "constraints.txt").read_bytes() + extras.encode()
    ).hexdigest()


def _installed(extras: str) -> bool:
    stamp = VENV / f".installed-{extras or 'runtime'}"
    return PYTHON.exists() and stamp.exists() and stamp.read_text() == _digest(extras)


def _ensure_environment(extras: str) -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 — this script may be run by an older python3
        sys.exit(f"dev.py: Python 3.11 or newer is needed (this is {sys.version.split()[0]})")
    # The dev extra is a superset of the runtime: `serve` after `test` installs nothing.
    if _installed(extras) or (not extras and _installed("dev")):
        return
    if not PYTHON.exists():
        print("dev.py: [1/2] creating .venv (a few seconds)", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    print(
        f"dev.py: [2/2] installing the service{' with ' + extras if extras else ''} into .venv "
        f"(the first time takes 1-3 minutes; pip's progress follows)",
        flush=True,
    )
    target = f".[{extras}]" if extras else "."
    # pip prints a line per package (and progress bars on a terminal); quiet only when asked.
    quiet = ["--quiet"] if os.environ.get("DEV_QUIET") else []
    subprocess.run(
        [
            str(PYTHON),
            "-m",
            "pip",
            "install",
            *quiet,
            "--disable-pip-version-check",
            # The versions the suite was last run with: a fresh machine gets what was tested.
            "-c",
            "constraints.txt",
            "-e",
            target,
        ],
        cwd=ROOT,
        check=True,
    )
    (VENV / f".installed-{extras or 'runtime'}").write_text(_digest(extras))
    print("dev.py: .venv is ready", flush=True)


def child_environment(environ: Mapping[str, str], stdout_is_terminal: bool) -> dict[str, str]:
    """The server's environment: text logs on an interactive terminal unless TEFF_LOG_FORMAT is set
    (JSON lines suit log collectors, not a person reading a terminal)."""
    env = dict(environ)
    if stdout_is_terminal and "TEFF_LOG_FORMAT" not in env:
        env["TEFF_LOG_FORMAT"] = "text"
    return env


def port_problem(host: str, port: int) -> str | None:
    """One line saying why the server could not listen on host:port, or None when it can."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
        # SO_REUSEADDR as uvicorn sets it: a port in TIME_WAIT is free for it too.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            return (
                f"dev.py: cannot listen on {host}:{port} ({error.strerror or error}): another server "
                f"holds the port? Stop it, or choose another with TEFF_PORT=..."
            )
    return None


def _run_forwarding_signals(command: list[str], env: dict[str, str]) -> int:
    """Run the server in its own session and pass SIGINT/SIGTERM on to it, so that stopping dev.py
    stops the server (and a terminal's Ctrl-C reaches it once, not twice)."""
    child = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True)

    def forward(signum: int, _frame: object) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            try:
                return child.wait()
            except KeyboardInterrupt:  # pragma: no cover - the handler above replaces the default
                forward(signal.SIGINT, None)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def serve() -> int:
    host = os.environ.get("TEFF_HOST", "127.0.0.1")
    port_text = os.environ.get("TEFF_PORT", "8000")
    if port_text.isdigit():  # anything else is the service's own settings error to report
        problem = port_problem(host, int(port_text))
        if problem:
            print(problem, file=sys.stderr)
            return 1
    _ensure_environment("")
    teff = str(BIN / "teff")
    env = child_environment(os.environ, sys.stdout.isatty())
    print("dev.py: migrating the database", flush=True)
    subprocess.run([teff, "db", "upgrade"], cwd=ROOT, check=True, env=env)
    return _run_forwarding_signals([teff, "serve"], env)


def demo() -> int:
    """`teff demo` (it migrates the database itself): runs and measurements the docs' examples read."""
    _ensure_environment("")
    return subprocess.call([str(BIN / "teff"), "demo"], cwd=ROOT)


def test(pytest_args: list[str]) -> int:
    _ensure_environment("dev")
    return subprocess.call([str(PYTHON), "-m", "pytest", *pytest_args], cwd=ROOT)


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in {"serve", "test", "demo"}:
        print(__doc__, file=sys.stderr)
        return 2
    if sys.argv[1] == "serve":
        return serve()
    if sys.argv[1] == "demo":
        return demo()
    return test(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
