from __future__ import annotations

from pathlib import Path

import httpx

from tests.e2e.conftest import LiveServer, server_env, teff
from tests.support.live_api import wait_for_log_line


def test_the_real_server_answers_health_readiness_and_docs(live_server: LiveServer) -> None:
    with httpx.Client(base_url=live_server.base_url) as http:
        assert http.get("/healthz").json() == {"status": "ok"}
        assert http.get("/readyz").status_code == 200
        assert "swagger-ui" in http.get("/docs").text
        assert http.get("/openapi.json").json()["info"]["title"] == "Training-efficiency service"


def test_the_server_logs_one_json_line_per_request_with_its_request_id(live_server: LiveServer) -> None:
    response = httpx.get(live_server.base_url + "/healthz", headers={"X-Request-ID": "e2e-log-check"})
    assert response.headers["x-request-id"] == "e2e-log-check"
    lines = wait_for_log_line(live_server, "e2e-log-check")
    access = [line for line in lines if line.get("request_id") == "e2e-log-check"]
    assert access and access[0]["status"] == 200 and access[0]["route"] == "/healthz"


def test_serve_refuses_to_start_on_an_unmigrated_database(tmp_path: Path) -> None:
    env = server_env(f"sqlite:///{tmp_path / 'empty.db'}", 8000)
    result = teff("serve", env=env)
    assert result.returncode != 0
    assert "teff db upgrade" in result.stderr


def test_a_bad_setting_stops_the_cli_with_the_variable_named(tmp_path: Path) -> None:
    env = server_env(f"sqlite:///{tmp_path / 'x.db'}", 8000, TEFF_WORKERS="many")
    result = teff("serve", env=env)
    assert result.returncode == 2
    assert "TEFF_WORKERS" in result.stderr
