"""Two real server processes on one PostgreSQL database (migrated once), under concurrent load.

All correctness lives in the database, not in either process: a measurement retried on the other
replica is stored once, an Idempotency-Key sent to both at once makes one run, and a scheduler job
attempt names one run whichever replica sees it first.
"""

from __future__ import annotations

import queue
import random
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from tests.api.conftest import measurement, run_body
from tests.conftest import create_postgres_database, drop_postgres_database
from tests.e2e.conftest import LiveServer, server_env, start_server, stop_server, teff
from tests.support.live_api import assert_problem, cli_key, stored_steps

pytestmark = pytest.mark.slow

THREADS = 4
TIMEOUT = 30.0


@dataclass
class Replicas:
    servers: tuple[LiveServer, LiveServer]
    database_url: str
    key: str

    @property
    def urls(self) -> tuple[str, str]:
        return self.servers[0].base_url, self.servers[1].base_url

    def headers(self, **extra: str) -> dict[str, str]:
        return {"X-API-Key": self.key, **extra}


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    directory = tmp_path_factory.mktemp("replicas")
    url = create_postgres_database()
    started: list[LiveServer] = []
    try:
        migrated = teff("db", "upgrade", env=server_env(url, 8000))
        assert migrated.returncode == 0, migrated.stderr
        key = cli_key(server_env(url, 8000), "fleet-team")
        for name in ("a", "b"):
            # A small pool each: the PostgreSQL server is shared with the other tests.
            started.append(start_server(url, directory / f"{name}.log", TEFF_DB_POOL_SIZE="4"))
        yield Replicas((started[0], started[1]), url, key)
        for server in started:
            assert server.process.poll() is None, f"a replica exited: {server.log()[-2000:]}"
    finally:
        for server in started:
            stop_server(server)
        drop_postgres_database(url)


def _concurrently(
    calls: list[tuple[str, str, str, dict[str, Any] | None, dict[str, str]]],
) -> list[httpx.Response]:
    """Send (method, base_url, path, json, headers) all at once (a barrier releases them together)."""
    barrier = threading.Barrier(len(calls))

    def send(call: tuple[str, str, str, dict[str, Any] | None, dict[str, str]]) -> httpx.Response:
        method, base_url, path, body, headers = call
        with httpx.Client(base_url=base_url, timeout=TIMEOUT) as http:
            http.get("/healthz")  # connect before the barrier, so the requests really overlap
            barrier.wait(timeout=TIMEOUT)
            return http.request(method, path, json=body, headers=headers)

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(send, calls))


# --------------------------------------------------------------------------------------------------
# (a) ingest split across the replicas, with retries on the other one

RUNS = 4
STEPS = 400
WINDOW = 50  # each request: steps [start, start + 50), starts every 25 steps: windows overlap by half
STRIDE = 25


def _throughput(step: int) -> float:
    # MFU ≈ 0.29-0.75 on Llama-3 8B × 64 H100: medians move between histogram bins as data arrives.
    return 3.0e5 + (step * 7919 % 97) * 5.0e3


def test_ingest_split_across_replicas_with_retries_stores_each_measurement_once(replicas: Replicas) -> None:
    headers = replicas.headers()
    run_ids = []
    for index in range(RUNS):
        created = httpx.post(
            replicas.urls[index % 2] + "/v1/runs",
            json=run_body(cluster="ingest", tags=["replicas"]),
            headers=headers,
            timeout=TIMEOUT,
        )
        assert created.status_code == 201, created.text
        run_ids.append(created.json()["id"])

    # Every window is sent to both replicas, the two sends next to each other in the queue so that
    # they are often in flight at the same moment (a retry racing the original); windows overlap.
    windows = [
        (run_id, start, min(start + WINDOW, STEPS)) for run_id in run_ids for start in range(0, STEPS, STRIDE)
    ]
    random.Random(20261202).shuffle(windows)
    work: queue.Queue[tuple[str, int, int, int]] = queue.Queue()
    for number, (run_id, first, last) in enumerate(windows):
        for replica in (number % 2, 1 - number % 2):
            work.put((run_id, first, last, replica))
    answers: list[tuple[str, list[int], int, dict[str, Any]]] = []
    lock = threading.Lock()

    def worker() -> None:
        clients = [httpx.Client(base_url=url, headers=headers, timeout=TIMEOUT) for url in replicas.urls]
        try:
            while True:
                try:
                    run_id, first, last, replica = work.get_nowait()
                except queue.Empty:
                    return
                batch = [measurement(step, _throughput(step)) for step in range(first, last)]
                response = clients[replica].post(f"/v1/runs/{run_id}/measurements", json=batch)
                body = response.json() if response.headers.get("content-type") == "application/json" else {}
                with lock:
                    answers.append(
                        (run_id, list(range(first, last)), response.status_code, body or response.text)
                    )
        finally:
            for client in clients:
                client.close()

    threads = [threading.Thread(target=worker) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "ingest did not finish"
    assert len(answers) == 2 * len(windows)

    # Every request was acknowledged (no lost race, no deadlock, no 5xx), and accounted for itself.
    failed = [(run_id, steps[0], status, body) for run_id, steps, status, body in answers if status != 200]
    assert not failed, failed[:3]
    stored_by_run = dict.fromkeys(run_ids, 0)
    for run_id, steps, _, body in answers:
        assert body["received"] == len(steps)
        assert body["stored"] + len(body["ignored_steps"]) == len(steps)
        assert set(body["ignored_steps"]) <= set(steps)
        stored_by_run[run_id] += body["stored"]
    # Each step was stored by exactly one of the requests that carried it, on whichever replica.
    assert stored_by_run == dict.fromkeys(run_ids, STEPS)

    with httpx.Client(base_url=replicas.urls[0], headers=headers, timeout=TIMEOUT) as http:
        for run_id in run_ids:
            assert stored_steps(http, run_id) == list(range(STEPS))  # each step once, none missing
            summary = http.get(f"/v1/runs/{run_id}").json()["summary"]
            assert summary["measurement_count"] == STEPS
            assert summary["latest_step"] == STEPS - 1
        stats = http.get("/v1/stats/mfu").json()
        assert sum(group["run_count"] for group in stats["tenant"]) == RUNS
    # Both replicas see the same state.
    with httpx.Client(base_url=replicas.urls[1], headers=headers, timeout=TIMEOUT) as http:
        for run_id in run_ids:
            assert http.get(f"/v1/runs/{run_id}").json()["summary"]["measurement_count"] == STEPS

    # The counters kept beside the history agree with it: no concurrent update was lost.
    engine = create_engine(replicas.database_url)
    try:
        with engine.connect() as connection:
            per_run = dict(
                connection.execute(
                    text(
                        "SELECT r.id, SUM(b.n_measurements) FROM run_mfu_bins b JOIN runs r ON r.pk = b.run_pk "
                        "WHERE r.cluster = 'ingest' GROUP BY r.id"
                    )
                ).all()
            )
            assert per_run == dict.fromkeys(run_ids, STEPS)
            total, duplicated = connection.execute(
                text(
                    "SELECT COUNT(*), (SELECT COUNT(*) FROM (SELECT run_pk, step FROM measurements "
                    "GROUP BY run_pk, step HAVING COUNT(*) > 1) d) FROM measurements"
                )
            ).one()
            assert (total, duplicated) == (RUNS * STEPS, 0)
            medians = sorted(
                connection.execute(text("SELECT fleet_bin FROM runs WHERE fleet_bin IS NOT NULL")).scalars()
            )
            for table in ("tenant_mfu_bins", "fleet_mfu_bins"):
                counted = connection.execute(
                    text(f"SELECT mfu_bin, n_runs FROM {table} WHERE n_runs <> 0 ORDER BY mfu_bin")
                ).all()
                assert all(n > 0 for _, n in counted), (table, counted)
                assert sorted(b for b, n in counted for _ in range(n)) == medians, table
    finally:
        engine.dispose()


# --------------------------------------------------------------------------------------------------
# (b) one Idempotency-Key sent to both replicas at once


@pytest.mark.parametrize("round_", range(3))
def test_one_idempotency_key_sent_to_both_replicas_at_once_makes_one_run(
    replicas: Replicas, round_: int
) -> None:
    cluster = f"idem-{round_}"
    body = run_body(cluster=cluster, scheduler_job_id=f"idem-job-{round_}")
    headers = replicas.headers(**{"Idempotency-Key": str(uuid.uuid4())})
    answers = _concurrently([("POST", replicas.urls[i % 2], "/v1/runs", body, headers) for i in range(6)])

    assert [answer.status_code for answer in answers] == [201] * 6, [answer.text for answer in answers]
    assert len({answer.content for answer in answers}) == 1, (
        "every caller gets the first answer, byte for byte"
    )
    replayed = [answer.headers.get("Idempotent-Replayed") for answer in answers]
    assert replayed.count(None) == 1 and replayed.count("true") == 5
    run_id = answers[0].json()["id"]
    for url in replicas.urls:
        listed = httpx.get(
            url + "/v1/runs", params={"cluster": cluster}, headers=replicas.headers(), timeout=TIMEOUT
        )
        assert [item["id"] for item in listed.json()["items"]] == [run_id]

    # The same key with another body is refused on either replica, now and when sent at once.
    other = {**body, "tags": ["different"]}
    for answer in _concurrently([("POST", url, "/v1/runs", other, headers) for url in replicas.urls]):
        assert_problem(answer, 422, "idempotency-key-reused")


# --------------------------------------------------------------------------------------------------
# (c) (cluster, scheduler job, attempt) names one run across the replicas


@pytest.mark.parametrize("round_", range(3))
def test_one_job_attempt_created_on_both_replicas_at_once_is_one_run_and_conflicts(
    replicas: Replicas, round_: int
) -> None:
    cluster = f"unique-{round_}"
    job = {"cluster": cluster, "scheduler_job_id": "slurm-4242", "attempt": 0}
    # Six schedulers' retries, bodies differing in a tag (no Idempotency-Key: uniqueness must hold anyway).
    calls = [
        ("POST", replicas.urls[i % 2], "/v1/runs", run_body(**job, tags=[f"sender-{i}"]), replicas.headers())
        for i in range(6)
    ]
    answers = _concurrently(calls)

    statuses = sorted(answer.status_code for answer in answers)
    assert statuses == [201, 409, 409, 409, 409, 409], [answer.text for answer in answers]
    winner = next(answer for answer in answers if answer.status_code == 201).json()["id"]
    for answer in answers:
        if answer.status_code == 409:
            problem = assert_problem(answer, 409, "conflict")
            assert problem["existing_run_id"] == winner
            assert winner in problem["detail"]
    for url in replicas.urls:
        listed = httpx.get(
            url + "/v1/runs", params={"cluster": cluster}, headers=replicas.headers(), timeout=TIMEOUT
        )
        assert [item["id"] for item in listed.json()["items"]] == [winner]
    # The next attempt is a new run.
    restarted = httpx.post(
        replicas.urls[1] + "/v1/runs",
        json=run_body(**{**job, "attempt": 1}),
        headers=replicas.headers(),
        timeout=TIMEOUT,
    )
    assert restarted.status_code == 201, restarted.text
