"""Security through the real server process, with keys made and revoked by the CLI the way an
operator does it: tenants never see or change each other's runs (404, exactly as an unknown id), a
revoked key stops working on the very next request, a read-only key cannot write, and no key ever
reaches the server's log — even at debug level, even when authentication fails.

(tests/api/test_runs.py checks the same rules through the ASGI app in-process; here the keys cross a
real socket, the CLI and the server are separate processes on one database, and the log is the
process's real output.)
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.api.conftest import measurement, run_body
from tests.e2e.conftest import LiveServer, server_env, start_server, stop_server, teff
from tests.support.live_api import assert_problem, cli_key, cli_revoke, stored_steps, wait_for_log_line

pytestmark = pytest.mark.slow


@dataclass
class Secured:
    server: LiveServer
    mine: str  # tenant acme: read, write
    reader: str  # tenant acme: read
    theirs: str  # tenant globex: read, write

    def client(self, key: str | None, *, bearer: bool = False) -> httpx.Client:
        headers = {} if key is None else {"Authorization": f"Bearer {key}"} if bearer else {"X-API-Key": key}
        return httpx.Client(base_url=self.server.base_url, headers=headers, timeout=30)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    directory = tmp_path_factory.mktemp("secured")
    url = f"sqlite:///{directory / 'teff.db'}"
    env = server_env(url, 8000)
    migrated = teff("db", "upgrade", env=env)
    assert migrated.returncode == 0, migrated.stderr
    keys = {
        "mine": cli_key(env, "acme", "read,write"),
        "reader": cli_key(env, "acme", "read"),
        "theirs": cli_key(env, "globex", "read,write"),
    }
    # Debug level: not even the most verbose log may carry a key.
    server = start_server(url, directory / "server.log", TEFF_LOG_LEVEL="debug")
    try:
        yield Secured(server, **keys)
    finally:
        stop_server(server)


def _create(http: httpx.Client, **overrides: Any) -> dict[str, Any]:
    response = http.post("/v1/runs", json=run_body(**overrides))
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


# --------------------------------------------------------------------------------------------------
# Tenant isolation


def test_another_tenants_run_is_not_found_on_every_store_endpoint(secured: Secured) -> None:
    with secured.client(secured.theirs) as them, secured.client(secured.mine) as me:
        theirs = _create(them, cluster="globex-cluster", tags=["secret-project"])
        assert them.post(f"/v1/runs/{theirs['id']}/measurements", json=measurement(1)).status_code == 200
        mine = _create(me, cluster="acme-cluster")
        assert me.post(f"/v1/runs/{mine['id']}/measurements", json=measurement(1)).status_code == 200
        run_url = f"/v1/runs/{theirs['id']}"

        answers = {
            "get_run": me.get(run_url),
            "update_run": me.patch(run_url, json={"status": "failed", "add_tags": ["pwned"]}),
            "add_measurements": me.post(f"{run_url}/measurements", json=[measurement(2), measurement(3)]),
            "list_measurements": me.get(f"{run_url}/measurements"),
            "get_run_efficiency": me.get(f"{run_url}/efficiency"),
            "get_run_efficiency_svg": me.get(f"{run_url}/efficiency", headers={"Accept": "image/svg+xml"}),
            "compare_runs_mixed": me.post("/v1/runs/compare", json={"run_ids": [mine["id"], theirs["id"]]}),
            "get_fleet_mfu_stats_run": me.get("/v1/stats/mfu", params={"run_id": theirs["id"]}),
            "delete_run": me.delete(run_url),
        }
        unknown_id = "run_" + "0" * 20
        unknown = me.get(f"/v1/runs/{unknown_id}")
        for operation, response in answers.items():
            problem = assert_problem(response, 404, "not-found")
            assert theirs["id"] in problem["detail"], operation
        # Indistinguishable from an id that does not exist: no oracle for other tenants' ids.
        known_detail = answers["get_run"].json()["detail"].replace(theirs["id"], "<id>")
        assert unknown.json()["detail"].replace(unknown_id, "<id>") == known_detail
        assert answers["compare_runs_mixed"].json()["missing_run_ids"] == [theirs["id"]]
        assert "secret-project" not in "".join(response.text for response in answers.values())

        # Lists and statistics show the caller's own runs; other tenants only as fleet aggregates.
        listed = me.get("/v1/runs", params={"limit": 200}).json()["items"]
        assert theirs["id"] not in {item["id"] for item in listed}
        assert me.get("/v1/runs", params={"cluster": "globex-cluster"}).json()["items"] == []
        assert me.get("/v1/runs", params={"tag": "secret-project"}).json()["items"] == []
        stats = me.get("/v1/stats/mfu")
        assert stats.status_code == 200
        assert sum(group["run_count"] for group in stats.json()["tenant"]) == 1  # my run only
        assert theirs["id"] not in stats.text and "globex" not in stats.text

        # Nothing of theirs changed.
        owner_view = them.get(run_url).json()
        assert owner_view["status"] == "running"
        assert owner_view["tags"] == ["secret-project"]
        assert owner_view["summary"]["measurement_count"] == 1
        assert stored_steps(them, theirs["id"]) == [1]


# --------------------------------------------------------------------------------------------------
# Revocation and scopes


def test_a_key_revoked_with_the_cli_is_refused_on_the_very_next_request(secured: Secured) -> None:
    env = secured.server.env
    key = cli_key(env, "acme", "read,write", name="to-revoke")
    with secured.client(key) as by_header, secured.client(key, bearer=True) as by_bearer:
        run = _create(by_header, cluster="revocation")
        assert by_bearer.get(f"/v1/runs/{run['id']}").status_code == 200

        cli_revoke(env, key)

        for http in (by_header, by_bearer):
            refused = http.get(f"/v1/runs/{run['id']}")
            assert assert_problem(refused, 401, "unauthorized")["detail"] == (
                "The API key is not valid or has been revoked."
            )
            assert refused.headers["www-authenticate"].startswith("Bearer")
            assert_problem(http.post(f"/v1/runs/{run['id']}/measurements", json=measurement(1)), 401)
            assert_problem(http.post("/v1/runs", json=run_body(cluster="revocation")), 401)
    listed = teff("keys", "list", "--tenant", "acme", env=env)
    line = next(line for line in listed.stdout.splitlines() if line.startswith(key.split("_")[1]))
    _, tenant, _, _, revoked_at, *name = line.split()
    assert (tenant, name) == ("acme", ["to-revoke"])
    assert revoked_at != "-"  # listed with its revocation time
    # Other keys of the tenant keep working, and the run is still there for them.
    with secured.client(secured.mine) as me:
        assert me.get(f"/v1/runs/{run['id']}").status_code == 200


def test_a_read_only_key_is_forbidden_every_write_and_changes_nothing(secured: Secured) -> None:
    with secured.client(secured.mine) as writer, secured.client(secured.reader) as reader:
        run = _create(writer, cluster="read-only", tags=["kept"])
        assert writer.post(f"/v1/runs/{run['id']}/measurements", json=measurement(1)).status_code == 200
        run_url = f"/v1/runs/{run['id']}"

        writes = {
            "create_run": reader.post("/v1/runs", json=run_body(cluster="read-only")),
            "update_run": reader.patch(run_url, json={"status": "finished", "tags": ["changed"]}),
            "add_measurements": reader.post(f"{run_url}/measurements", json=[measurement(2)]),
            "delete_run": reader.delete(run_url),
        }
        for operation, response in writes.items():
            problem = assert_problem(response, 403, "forbidden")
            assert "`write` scope" in problem["detail"], operation

        # Reads are what the key is for.
        for path in (
            run_url,
            f"{run_url}/measurements",
            f"{run_url}/efficiency",
            "/v1/runs",
            "/v1/stats/mfu",
        ):
            assert reader.get(path).status_code == 200, path
        compared = reader.post("/v1/runs/compare", json={"run_ids": [run["id"], _create(writer)["id"]]})
        assert compared.status_code == 200  # a read despite being a POST

        unchanged = reader.get(run_url).json()
        assert (unchanged["status"], unchanged["tags"]) == ("running", ["kept"])
        assert stored_steps(reader, run["id"]) == [1]
        assert [
            item["id"] for item in reader.get("/v1/runs", params={"cluster": "read-only"}).json()["items"]
        ] == [run["id"]]


# --------------------------------------------------------------------------------------------------
# Nothing secret in the log


def test_no_key_or_secret_reaches_the_server_log(secured: Secured) -> None:
    env = secured.server.env
    good = cli_key(env, "acme", "read,write", name="log-check")
    revoked = cli_key(env, "acme", "read,write", name="log-check-revoked")
    read_only = cli_key(env, "acme", "read", name="log-check-read")
    prefix = good.split("_")[1]
    wrong_secret = f"teff_{prefix}_{'W' * 43}"  # a real prefix with a wrong secret
    malformed = "teff-not-a-key-" + uuid.uuid4().hex
    base = secured.server.base_url

    with httpx.Client(base_url=base, timeout=30) as http:
        created = http.post("/v1/runs", json=run_body(cluster="log-check"), headers={"X-API-Key": good})
        assert created.status_code == 201
        run_id = created.json()["id"]
        sent: list[httpx.Response] = [
            http.get(f"/v1/runs/{run_id}", headers={"X-API-Key": good}),
            http.get(f"/v1/runs/{run_id}", headers={"Authorization": f"Bearer {good}"}),
            http.post(f"/v1/runs/{run_id}/measurements", json=measurement(1), headers={"X-API-Key": good}),
            # Failed authentication, each way a key can be wrong.
            http.get("/v1/runs", headers={"X-API-Key": wrong_secret}),
            http.get("/v1/runs", headers={"Authorization": f"Bearer {wrong_secret}"}),
            http.get("/v1/runs", headers={"X-API-Key": malformed}),
            http.get("/v1/runs", headers={"Authorization": f"Bearer {malformed}"}),
            http.get("/v1/runs", headers={"Authorization": f"Basic {good}"}),  # the wrong scheme
            # A key where keys do not go: the query string.
            http.get("/v1/runs", params={"api_key": good}),
            # Forbidden: authenticated, lacking the scope.
            http.post("/v1/runs", json=run_body(), headers={"X-API-Key": read_only}),
            # A validation error on an authenticated request.
            http.post(f"/v1/runs/{run_id}/measurements", json={"step": -1}, headers={"X-API-Key": good}),
        ]
        cli_revoke(env, revoked)
        sent.append(http.get("/v1/runs", headers={"X-API-Key": revoked}))
        sent.append(http.get("/v1/runs", headers={"Authorization": f"Bearer {revoked}"}))
        assert [response.status_code for response in sent] == [
            200, 200, 200, 401, 401, 401, 401, 401, 401, 403, 422, 401, 401
        ]  # fmt: skip
        marker = "log-check-" + uuid.uuid4().hex[:8]
        http.get("/healthz", headers={"X-Request-ID": marker})

    lines = wait_for_log_line(secured.server, marker)
    text = secured.server.log()
    requests_logged = [line for line in lines if line.get("logger") == "teff.http"]
    assert len(requests_logged) >= len(sent) + 2, (
        "every request is logged (and the check below is not vacuous)"
    )
    for key in (good, revoked, read_only, wrong_secret, malformed):
        secret = key.split("_", 2)[2] if key.startswith("teff_") else key  # the secret may hold "_"
        assert len(secret) >= 40
        assert key not in text
        assert secret not in text, f"the secret part of a key is in the server log: {secret[:6]}…"
    assert "Bearer " not in text and "x-api-key" not in text.lower()
    # The access log names the path, never the query string that carried a key.
    assert all("api_key" not in json.dumps(line) for line in lines)
