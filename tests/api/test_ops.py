from __future__ import annotations

import gc
import time
from pathlib import Path

from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.app import create_app
from service.store import migrate
from tests.conftest import create_postgres_database, drop_postgres_database, make_settings
from tests.support.tcp_proxy import TcpProxy

PROBLEM = "application/problem+json"


def test_healthz_answers_while_the_process_is_up(client: TestClient) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_is_ok_on_a_current_schema(client: TestClient) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json()["schema"] == list(migrate.head_revisions())


def test_readyz_is_503_when_the_schema_is_behind(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'behind.db'}"
    app = create_app(make_settings(url, check_schema_on_start=False))
    with TestClient(app) as client:
        response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["database"] == "schema behind"
    assert "Retry-After" in response.headers


def test_the_app_refuses_to_start_on_a_schema_that_is_behind(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'behind.db'}"
    app = create_app(make_settings(url))
    try:
        with TestClient(app):
            pass
    except migrate.SchemaBehind as exc:
        assert "teff db upgrade" in str(exc)
    else:
        raise AssertionError("the app must refuse to start on an out-of-date schema")


def test_readyz_goes_503_when_postgres_is_gone_and_recovers_without_restart() -> None:
    url = create_postgres_database()
    proxy = None
    try:
        migrate.upgrade(url)
        proxy = TcpProxy("127.0.0.1", 5432)
        proxy.start()
        proxied = url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
        app = create_app(make_settings(proxied))
        with TestClient(app) as client:
            assert client.get("/readyz").status_code == 200
            proxy.stop()
            gone = client.get("/readyz")
            assert gone.status_code == 503
            assert gone.json()["database"] == "unreachable"
            assert gone.headers["Retry-After"]
            # Stateless endpoints keep answering while the database is gone.
            assert client.get("/healthz").status_code == 200
            proxy.start()
            deadline = time.monotonic() + 10
            while client.get("/readyz").status_code != 200:
                assert time.monotonic() < deadline, "readyz did not recover"
                time.sleep(0.2)
    finally:
        if proxy is not None:
            proxy.stop()
        drop_postgres_database(url)


def test_every_response_carries_a_request_id_and_echoes_a_safe_inbound_one(client: TestClient) -> None:
    assert len(client.get("/healthz").headers["x-request-id"]) == 32
    assert (
        client.get("/healthz", headers={"X-Request-ID": "sched-42.a"}).headers["x-request-id"] == "sched-42.a"
    )
    unsafe = client.get("/healthz", headers={"X-Request-ID": "bad id\twith spaces"})
    assert unsafe.headers["x-request-id"] != "bad id\twith spaces"


def test_metrics_count_requests_by_route_method_and_status(client: TestClient) -> None:
    client.get("/healthz")
    client.get("/no-such-path")
    body = client.get("/metrics").text
    assert 'teff_http_requests_total{method="GET",route="/healthz",status="200"}' in body
    assert 'route="unmatched",status="404"' in body
    assert "teff_http_request_duration_seconds_bucket" in body


def test_an_unknown_path_is_a_404_problem(client: TestClient) -> None:
    response = client.get("/v1/nothing-here")
    assert response.status_code == 404
    assert response.headers["content-type"] == PROBLEM
    body = response.json()
    assert body["type"] == "/problems/not-found"
    assert body["request_id"] == response.headers["x-request-id"]


def test_a_wrong_method_is_a_405_problem(client: TestClient) -> None:
    response = client.post("/healthz", json={})
    assert response.status_code == 405
    assert response.headers["content-type"] == PROBLEM
    assert "POST" in response.json()["detail"]


def test_a_non_json_body_is_a_415_problem(client: TestClient) -> None:
    response = client.post(
        "/v1/anything", content=b"a=1", headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert response.status_code == 415
    assert response.headers["content-type"] == PROBLEM


def test_a_body_over_the_limit_is_a_413_problem(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'small.db'}"
    migrate.upgrade(url)
    app = create_app(make_settings(url, max_body_bytes=2048))

    @app.post("/v1/echo-size")
    async def echo_size(body: dict[str, object]) -> dict[str, int]:
        return {"keys": len(body)}

    with TestClient(app) as client:
        declared = client.post(
            "/v1/anything", content=b"{" + b" " * 4000 + b"}", headers={"Content-Type": "application/json"}
        )
        assert declared.status_code == 413
        assert declared.headers["content-type"] == PROBLEM

        def chunks():  # no Content-Length: the limit is enforced while streaming
            for _ in range(10):
                yield b" " * 1000

        streamed = client.post(
            "/v1/echo-size", content=chunks(), headers={"Content-Type": "application/json"}
        )
        assert streamed.status_code == 413


def test_an_unexpected_failure_is_a_500_problem_without_a_traceback(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'boom.db'}"
    migrate.upgrade(url)
    app: FastAPI = create_app(make_settings(url))

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("secret internals")

    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.get("/boom")
    assert response.status_code == 500
    assert response.headers["content-type"] == PROBLEM
    body = response.json()
    assert body["request_id"] == response.headers["x-request-id"]
    assert "secret internals" not in response.text
    assert "Traceback" not in response.text


def test_problem_types_are_documented_at_their_uri(client: TestClient) -> None:
    response = client.get("/problems/payload-too-large")
    assert response.status_code == 200
    assert response.json()["status"] == 413


def test_cors_is_off_unless_configured(client: TestClient, tmp_path: Path) -> None:
    preflight = {"Origin": "https://ui.example", "Access-Control-Request-Method": "POST"}
    assert "access-control-allow-origin" not in client.options("/healthz", headers=preflight).headers
    url = f"sqlite:///{tmp_path / 'cors.db'}"
    migrate.upgrade(url)
    app = create_app(make_settings(url, cors_origins=["https://ui.example"]))
    with TestClient(app) as cors_client:
        response = cors_client.options("/healthz", headers=preflight)
    assert response.headers["access-control-allow-origin"] == "https://ui.example"


def test_swagger_ui_and_redoc_reference_only_local_assets(client: TestClient) -> None:
    for page in ("/docs", "/redoc"):
        html = client.get(page).text
        assert "cdn.jsdelivr" not in html and "fonts.googleapis" not in html and "unpkg" not in html
    assert client.get("/static/docs/swagger-ui-bundle.js").status_code == 200
    assert client.get("/static/docs/redoc.standalone.js").status_code == 200


def test_the_served_app_freezes_its_start_up_heap_out_of_the_garbage_collectors_sight(tmp_path: Path) -> None:
    """`teff serve`'s app (freeze_heap_on_start): a full collection then skips what start-up made.
    Apps made without it (every test's) leave the collector as it was."""
    url = f"sqlite:///{tmp_path / 'teff.db'}"
    migrate.upgrade(url)
    gc.unfreeze()
    try:
        with TestClient(create_app(make_settings(url))) as client:
            assert client.get("/healthz").status_code == 200
            assert gc.get_freeze_count() == 0
        with TestClient(create_app(make_settings(url), freeze_heap_on_start=True)) as client:
            assert client.get("/healthz").status_code == 200
            # Every module, route and schema of the app is among them: tens of thousands of objects.
            assert gc.get_freeze_count() > 10_000
    finally:
        gc.unfreeze()
