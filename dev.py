#!/usr/bin/env python3
"""Bootstrap for a fresh machine with only Python 3.11+: creates .venv, installs, then acts.

    python3 dev.py serve    create/refresh .venv, migrate the local SQLite database, serve
    python3 dev.py test     create/refresh .venv (with dev tools), run the whole test suite

Extra arguments after `test` go to pytest. The environment is reinstalled when pyproject.toml or
constraints.txt changes; constraints.txt pins every dependency to the versions the suite was last
run with.
Standard library only: this runs before anything is installed.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / "python"


def _ensure_environment(extras: str) -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 — this script may be run by an older python3
        sys.exit(f"dev.py: Python 3.11 or newer is needed (this is {sys.version.split()[0]})")
    digest = hashlib.sha256(
        (ROOT / "pyproject.toml").read_bytes() + (ROOT / "constraints.txt").read_bytes() + extras.encode()
    ).hexdigest()
    stamp = VENV / f".installed-{extras or 'runtime'}"
    if stamp.exists() and stamp.read_text() == digest and PYTHON.exists():
        return
    if not PYTHON.exists():
        print("dev.py: creating .venv", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    print(f"dev.py: installing the service{' with ' + extras if extras else ''} into .venv", flush=True)
    target = f".[{extras}]" if extras else "."
    subprocess.run(
        [
            str(PYTHON),
            "-m",
            "pip",
            "install",
            "--quiet",
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
    stamp.write_text(digest)


def serve() -> int:
    _ensure_environment("")
    teff = str(BIN / "teff")
    subprocess.run([teff, "db", "upgrade"], cwd=ROOT, check=True)
    return subprocess.call([teff, "serve"], cwd=ROOT)


def test(pytest_args: list[str]) -> int:
    _ensure_environment("dev")
    return subprocess.call([str(PYTHON), "-m", "pytest", *pytest_args], cwd=ROOT)


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in {"serve", "test"}:
        print(__doc__, file=sys.stderr)
        return 2
    if sys.argv[1] == "serve":
        return serve()
    return test(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
