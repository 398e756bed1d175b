"""`teff` from any directory and on a busy port (issue 17; issue 20's data path).

* Without TEFF_DATABASE_URL or TEFF_DATA_DIR the SQLite file is $XDG_DATA_HOME/teff/teff.db, so `teff
  db upgrade`, `teff keys create` and `teff keys list` run from three directories share one database
  (before, the default `data` directory was relative: each directory got its own empty database).
* `teff serve` on a port already in use prints one line and exits 1 (no traceback).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import free_port

pytestmark = pytest.mark.slow


def _teff(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60
    )


def _clean_env(**extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("TEFF_") and key not in {"DATABASE_URL", "XDG_DATA_HOME"}
    }
    env.update(extra)
    return env


def test_keys_made_in_one_directory_are_the_servers_in_another(tmp_path: Path) -> None:
    env = _clean_env(XDG_DATA_HOME=str(tmp_path / "xdg"))
    directories = [tmp_path / name for name in ("deploy", "ops", "elsewhere")]
    for directory in directories:
        directory.mkdir()
    upgraded = _teff("db", "upgrade", env=env, cwd=directories[0])
    assert upgraded.returncode == 0, upgraded.stderr
    created = _teff("keys", "create", "--tenant", "acme", env=env, cwd=directories[1])
    assert created.returncode == 0, created.stderr
    prefix = created.stdout.strip().split("_")[1]
    listed = _teff("keys", "list", env=env, cwd=directories[2])
    assert listed.returncode == 0, listed.stderr
    assert prefix in listed.stdout and "acme" in listed.stdout
    assert (tmp_path / "xdg" / "teff" / "teff.db").is_file()
    for directory in directories:
        assert not (directory / "data").exists()


def test_serve_on_a_busy_port_says_so_in_one_line_and_exits_1(tmp_path: Path) -> None:
    port = free_port()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        env = _clean_env(
            TEFF_DATABASE_URL=f"sqlite:///{tmp_path / 'teff.db'}",
            TEFF_PORT=str(port),
            TEFF_CHECK_SCHEMA_ON_START="false",
        )
        result = _teff("serve", env=env, cwd=tmp_path)
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [f"teff: cannot listen on 127.0.0.1:{port}: Address already in use"], result.stderr


def test_db_upgrade_stores_the_bootstrap_key_once_and_it_authenticates(tmp_path: Path) -> None:
    from service.store import keys
    from service.store.engine import build_engine
    from service.store.uow import UnitOfWork

    key = "teff_00112233aabb_" + "made-by-the-operator-with-secrets-token-urlsafe"
    database = tmp_path / "teff.db"
    env = _clean_env(
        TEFF_DATABASE_URL=f"sqlite:///{database}",
        TEFF_BOOTSTRAP_API_KEY=key,
        TEFF_BOOTSTRAP_TENANT="platform",
    )
    first = _teff("db", "upgrade", env=env, cwd=tmp_path)
    assert first.returncode == 0 and "bootstrap key for tenant 'platform' stored" in first.stderr, (
        first.stderr
    )
    again = _teff("db", "upgrade", env=env, cwd=tmp_path)
    assert again.returncode == 0 and "already known" in again.stderr, again.stderr
    assert key not in first.stderr + first.stdout + again.stderr + again.stdout  # never echoed
    engine = build_engine(f"sqlite:///{database}")
    try:
        with UnitOfWork(engine, write=False) as uow:
            principal = keys.authenticate(uow.connection, key)
            assert len(keys.list_keys(uow.connection)) == 1
    finally:
        engine.dispose()
    assert principal is not None and principal.tenant == "platform" and principal.scopes == {"read", "write"}
    bad = _teff("db", "upgrade", env={**env, "TEFF_BOOTSTRAP_API_KEY": "hunter2"}, cwd=tmp_path)
    assert bad.returncode == 2 and "secrets.token_hex(6)" in bad.stderr and "hunter2" not in bad.stderr
