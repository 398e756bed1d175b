"""Two instances starting at once both run `teff db upgrade`: the database lock lets one migrate and
the other find the schema at head; neither fails, and the schema is whole."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from service.store import migrate
from service.store.engine import build_engine
from tests.conftest import create_postgres_database, drop_postgres_database
from tests.e2e.conftest import server_env


def _upgrade_twice_at_once(url: str) -> list[subprocess.CompletedProcess[str]]:
    env = server_env(url, 8000)
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "service", "db", "upgrade"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = []
    for process in processes:
        stdout, stderr = process.communicate(timeout=120)
        results.append(subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr))
    return results


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_two_upgrades_started_together_both_succeed(backend: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'teff.db'}" if backend == "sqlite" else create_postgres_database()
    try:
        results = _upgrade_twice_at_once(url)
        assert [result.returncode for result in results] == [0, 0], [result.stderr for result in results]
        engine = build_engine(url, pool_size=1)
        try:
            migrate.ensure_schema_current(engine)
        finally:
            engine.dispose()
    finally:
        if backend == "postgresql":
            drop_postgres_database(url)
