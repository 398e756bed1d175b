#!/usr/bin/env python3
"""The README's first hour on a fresh clone, timed, with each stumble newcomers met checked gone.

    python3 benchmarks/fresh_clone.py [REPOSITORY] [--keep]

It clones REPOSITORY (default: this checkout; what is committed, not the working tree) into a
temporary directory and follows the README's first lines exactly: ``python3 dev.py serve`` on a
terminal (a pseudo-terminal here), then ``python3 dev.py demo`` and a ``curl``-like read with the key it
prints. Nothing is installed outside the clone: HOME points into the temporary directory, so the
default database (``~/.local/share/teff/teff.db``) is a new one; pip keeps the machine's own
configuration (XDG_CONFIG_HOME and PIP_* as they are). The checks, each a line PASS or FAIL:

- ``dev.py serve`` says what it is doing within a few seconds (no silent minutes while pip works);
- ``/docs`` answers on the port it was told (TEFF_PORT), and the time from clone to ``/docs`` is printed;
- the server's log lines on a terminal are text, not JSON;
- the database is at the README's default path;
- a second ``dev.py serve`` on the busy port exits at once with one line that names the port;
- ``dev.py demo`` loads the fleet into that database and prints a key that reads it (GET /v1/runs);
- the ``teff`` CLI works from another directory (it resolves the same default database);
- SIGINT to ``dev.py`` stops the server (the port is free again) and dev.py exits.

Standard library only (it runs before anything is installed). Exit status: 0 when every check passes.
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
#: What "says what it is doing" means: the first line of output within this many seconds.
FIRST_WORD_SECONDS = 10.0
#: Creating .venv and installing take 1-3 minutes on a 2-core machine (README); a generous bound.
SERVE_DEADLINE_SECONDS = 900.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Terminal:
    """A command on a pseudo-terminal, its output collected as it comes."""

    def __init__(self, command: list[str], cwd: Path, env: dict[str, str]) -> None:
        primary, secondary = pty.openpty()
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            command, cwd=cwd, env=env, stdin=secondary, stdout=secondary, stderr=secondary, close_fds=True
        )
        os.close(secondary)
        self.primary = primary
        self.output = ""
        self.first_output_after: float | None = None

    def pump(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([self.primary], [], [], left)
            if not ready:
                return
            try:
                chunk = os.read(self.primary, 65536)
            except OSError:  # the terminal closed: the command ended
                return
            if not chunk:
                return
            if self.first_output_after is None:
                self.first_output_after = time.monotonic() - self.started
            self.output += chunk.decode(errors="replace")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        os.close(self.primary)


def http_get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # loopback only
            return int(response.status), response.read()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read()
    except OSError:
        return 0, b""


def port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("repository", nargs="?", default=str(REPOSITORY))
    parser.add_argument("--keep", action="store_true", help="leave the temporary directory in place")
    args = parser.parse_args()

    results: list[tuple[str, bool, str]] = []

    def check(name: str, ok: bool, detail: str = "") -> None:
        results.append((name, ok, detail))
        print(f"{'PASS' if ok else 'FAIL'}  {name}{': ' + detail if detail else ''}", flush=True)

    work = Path(tempfile.mkdtemp(prefix="teff-fresh-"))
    home = work / "home"
    home.mkdir()
    clone = work / "teff"
    port = free_port()
    env = {
        **os.environ,
        "HOME": str(home),
        # pip's own configuration (indexes, certificates) stays the machine's.
        "XDG_CONFIG_HOME": os.environ.get("XDG_CONFIG_HOME", str(Path.home() / ".config")),
        "TEFF_PORT": str(port),
    }
    for name in ("XDG_DATA_HOME", "TEFF_DATA_DIR", "TEFF_DATABASE_URL", "TEFF_LOG_FORMAT", "VIRTUAL_ENV"):
        env.pop(name, None)

    def run(command: list[str], *, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)

    started = time.monotonic()
    subprocess.run(["git", "clone", "--quiet", args.repository, str(clone)], check=True)
    print(f"cloned {args.repository} into {clone} in {time.monotonic() - started:.1f} s", flush=True)

    server = Terminal([sys.executable, "dev.py", "serve"], clone, env)
    try:
        served_after = None
        deadline = started + SERVE_DEADLINE_SECONDS
        while time.monotonic() < deadline and server.process.poll() is None:
            server.pump(1.0)
            if http_get(f"http://127.0.0.1:{port}/docs")[0] == 200:
                served_after = time.monotonic() - started
                break
        first = server.first_output_after
        check(
            "dev.py serve says what it is doing at once",
            first is not None and first <= FIRST_WORD_SECONDS,
            f"first line after {first:.1f} s" if first is not None else "no output",
        )
        check(
            "/docs is served on TEFF_PORT",
            served_after is not None,
            f"{served_after:.0f} s from clone to a served /docs" if served_after else server.output[-2000:],
        )
        if served_after is None:
            return 1
        http_get(f"http://127.0.0.1:{port}/healthz")
        server.pump(2.0)
        log_lines = [line for line in server.output.splitlines() if "GET /docs" in line or "Uvicorn running" in line
                     or "started" in line.lower()]  # fmt: skip
        json_lines = []
        for line in log_lines:
            try:
                json.loads(line.strip())
                json_lines.append(line)
            except ValueError:
                pass
        check(
            "the server logs text on a terminal",
            bool(log_lines) and not json_lines,
            f"{len(log_lines)} log lines seen, {len(json_lines)} of them JSON",
        )
        database = home / ".local" / "share" / "teff" / "teff.db"
        check("the database is at the README's default path", database.exists(), str(database))

        busy_started = time.monotonic()
        busy = run([sys.executable, "dev.py", "serve"], cwd=clone, timeout=60)
        said = (busy.stdout + busy.stderr).strip().splitlines()
        check(
            "a busy port is one line naming it",
            busy.returncode != 0 and len(said) == 1 and str(port) in said[0],
            f"exit {busy.returncode} after {time.monotonic() - busy_started:.1f} s: {said!r}",
        )

        demo = run([sys.executable, "dev.py", "demo"], cwd=clone, timeout=300)
        key = re.search(r"export TEFF_API_KEY=(\S+)", demo.stdout)
        status, body = (0, b"")
        if key:
            status, body = http_get(f"http://127.0.0.1:{port}/v1/runs?limit=20", {"X-API-Key": key.group(1)})
        runs = json.loads(body).get("items", []) if status == 200 else []
        check(
            "dev.py demo prints a key that reads its runs",
            demo.returncode == 0 and status == 200 and len(runs) >= 8,
            f"exit {demo.returncode}, GET /v1/runs {status}, {len(runs)} runs",
        )

        elsewhere = run(
            [str(clone / ".venv" / "bin" / "teff"), "keys", "list", "--tenant", "demo"], cwd=work, timeout=60
        )
        listed = key is not None and key.group(1).split("_")[1] in elsewhere.stdout
        check(
            "the teff CLI works from another directory, on the same database",
            elsewhere.returncode == 0 and listed,
            f"teff keys list --tenant demo from {work}: exit {elsewhere.returncode}, the demo's key "
            f"{'listed' if listed else 'not listed'}",
        )

        server.process.send_signal(signal.SIGINT)
        try:
            code = server.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            code = None
        server.pump(0.5)
        check(
            "Ctrl-C (SIGINT) to dev.py stops the server",
            code is not None and port_is_free(port),
            f"dev.py exit {code}, port {'free' if port_is_free(port) else 'still held'}",
        )
    finally:
        server.close()
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    failed = [name for name, ok, _ in results if not ok]
    print(f"{len(results) - len(failed)}/{len(results)} checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
