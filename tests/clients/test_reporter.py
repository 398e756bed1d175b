"""The training-loop reporter: log() never raises or blocks, reports survive an outage (in memory and
in the spill file) and are stored exactly once; against MockTransport and against a real server that
is killed (SIGKILL) in the middle of a run and started again on the same port and database."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from teff_client import Client, RetryPolicy
from teff_client.reporter import Reporter

from tests.clients.conftest import RestartableServer


class FakeService:
    """A MockTransport service that stores measurements by (step), first write wins, like the real one,
    and can be switched down (connection refused) or made to reject given steps (422)."""

    def __init__(self) -> None:
        self.stored: dict[int, dict[str, Any]] = {}
        self.events: dict[str, dict[str, Any]] = {}
        self.event_posts = 0
        self.down = False
        self.invalid_steps: set[int] = set()
        self.posts = 0
        self.lock = threading.Lock()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("refused")
        if request.method == "GET":
            return httpx.Response(200, json={"id": "run_1", "global_batch_tokens": 4096})
        items = json.loads(request.content)
        if request.url.path.endswith("/events"):
            return self.add_events(items)
        with self.lock:
            self.posts += 1
            bad = [index for index, item in enumerate(items) if item["step"] in self.invalid_steps]
            if bad:
                body = {
                    "type": "/problems/validation-error",
                    "title": "Invalid",
                    "status": 422,
                    "detail": "bad",
                    "errors": [{"field": f"body[{bad[0]}].throughput", "message": "bad"}],
                }
                return httpx.Response(422, json=body, headers={"content-type": "application/problem+json"})
            ignored = []
            for item in items:
                if item["step"] in self.stored:
                    ignored.append(item["step"])
                else:
                    self.stored[item["step"]] = item
        summary = {"latest_mfu": 0.42, "median_mfu": 0.41}
        return httpx.Response(
            200,
            json={
                "run_id": "run_1",
                "received": len(items),
                "stored": len(items) - len(ignored),
                "ignored_steps": ignored,
                "summary": summary,
            },
        )

    def add_events(self, items: list[dict[str, Any]]) -> httpx.Response:
        """Events by id, first write wins (a repeated id is listed, not changed), as the service does."""
        with self.lock:
            self.event_posts += 1
            ignored = [item["event_id"] for item in items if item["event_id"] in self.events]
            for item in items:
                self.events.setdefault(item["event_id"], item)
        body = {"run_id": "run_1", "received": len(items), "stored": len(items) - len(ignored)}
        return httpx.Response(200, json={**body, "ignored_event_ids": ignored})


def fake_reporter(service: FakeService, **options: Any) -> Reporter:
    client = Client(
        "http://teff.test",
        api_key="k",
        transport=httpx.MockTransport(service),
        retry=RetryPolicy(backoff_base_seconds=0.01, backoff_max_seconds=0.05),
    )
    options.setdefault("flush_interval_seconds", 0.02)
    options.setdefault("register_atexit", False)
    return Reporter(client, "run_1", **options)


def test_steps_are_delivered_in_batches_with_the_runs_batch_filled_in() -> None:
    service = FakeService()
    with fake_reporter(service, batch_size=50) as reporter:
        for step in range(1, 201):
            reporter.log(step, step_time_seconds=0.5, loss=2.0)
        assert reporter.flush(5)
    assert sorted(service.stored) == list(range(1, 201))
    assert service.stored[7]["throughput"] == {"step_time_seconds": 0.5, "global_batch_tokens": 4096}
    assert service.stored[7]["loss"] == 2.0
    assert service.posts <= 10, "batched, not one request a step"
    assert reporter.stats.latest_mfu == 0.42 and reporter.stats.delivered == 200


def test_tokens_alone_are_timed_by_the_reporter(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([100.0, 101.0, 103.0])  # creation, then two logs 1 s and 2 s apart
    monkeypatch.setattr("teff_client.reporter._now", lambda: next(clock))
    service = FakeService()
    reporter = fake_reporter(service, start=False)
    reporter.log(1, tokens=1000)
    reporter.log(2, tokens=1000)
    monkeypatch.undo()
    reporter.start()
    assert reporter.flush(5)
    reporter.close()
    assert service.stored[1]["throughput"] == {"tokens_per_second": 1000.0}
    assert service.stored[2]["throughput"] == {"tokens_per_second": 500.0}


def test_an_outage_keeps_reports_and_delivers_each_once_when_the_service_is_back(tmp_path: Path) -> None:
    service = FakeService()
    spill = tmp_path / "spill.jsonl"
    reporter = fake_reporter(service, batch_size=20, max_pending=30, spill_path=spill)
    for step in range(1, 51):
        reporter.log(step, step_time_seconds=1.0, tokens=100)
    assert reporter.flush(5)
    service.down = True
    for step in range(51, 301):
        reporter.log(step, step_time_seconds=1.0, tokens=100)  # never raises while the service is down
    deadline = time.monotonic() + 5
    while reporter.stats.spilled < 200 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert reporter.stats.spilled >= 200, "beyond max_pending the reports go to the spill file"
    assert len(reporter._pending) <= 30
    assert spill.exists()
    service.down = False
    assert reporter.flush(10)
    reporter.close()
    assert sorted(service.stored) == list(range(1, 301))
    assert reporter.stats.dropped == 0 and not spill.exists()


def test_without_a_spill_file_the_oldest_beyond_the_bound_are_dropped_and_counted() -> None:
    service = FakeService()
    service.down = True
    reporter = fake_reporter(service, max_pending=100)
    for step in range(1, 1001):
        reporter.log(step, step_time_seconds=1.0, tokens=100)
    time.sleep(0.3)
    service.down = False
    assert reporter.flush(10)
    reporter.close()
    assert reporter.stats.dropped == 900
    assert sorted(service.stored) == list(range(901, 1001)), "the newest are kept"


def test_undelivered_reports_are_spilled_at_close_and_sent_by_the_next_reporter(tmp_path: Path) -> None:
    service = FakeService()
    service.down = True
    spill = tmp_path / "spill.jsonl"
    first = fake_reporter(service, spill_path=spill)
    for step in range(1, 101):
        first.log(step, step_time_seconds=1.0, tokens=100)
    first.close(timeout_seconds=0.3)
    assert len(spill.read_text().splitlines()) == 100
    service.down = False
    second = fake_reporter(service, spill_path=spill)  # e.g. the job's next attempt, same run
    assert second.flush(5)
    second.close()
    assert sorted(service.stored) == list(range(1, 101))


def test_an_invalid_report_is_isolated_and_the_rest_stored() -> None:
    service = FakeService()
    service.invalid_steps = {37}
    with fake_reporter(service, batch_size=64) as reporter:
        for step in range(1, 65):
            reporter.log(step, step_time_seconds=1.0, tokens=100)
        assert reporter.flush(5)
    assert sorted(service.stored) == [step for step in range(1, 65) if step != 37]
    assert reporter.stats.rejected == 1


def test_log_never_raises_even_on_nonsense() -> None:
    service = FakeService()
    with fake_reporter(service) as reporter:
        reporter.log("not a step", step_time_seconds="x")  # type: ignore[arg-type]
        reporter.log(3)  # no throughput at all
        reporter.log(4, step_time_seconds=1.0, tokens=10)
        assert reporter.flush(5)
    assert sorted(service.stored) == [4]


def stored_steps(client: Client, run_id: str) -> list[int]:
    return [item["step"] for item in client.iter_measurements(run_id)]


def test_server_killed_mid_run_training_goes_on_and_every_step_is_stored_once(
    restartable_server: RestartableServer, tmp_path: Path
) -> None:
    with Client(
        restartable_server.base_url,
        api_key=restartable_server.api_key,
        retry=RetryPolicy(backoff_base_seconds=0.05, backoff_max_seconds=0.5),
    ) as client:
        check_outage(client, restartable_server, tmp_path)


def check_outage(client: Client, restartable_server: RestartableServer, tmp_path: Path) -> None:
    # 1 Mi tokens per ~4 s step on 64 H100s: MFU about 0.13 for Llama 3 8B.
    run = {
        "model": {"preset": "llama3-8b"},
        "hardware": {"accelerator": "h100-sxm", "device_count": 64},
        "seq_len_tokens": 8192,
        "global_batch_tokens": 1048576,
    }
    reporter = client.reporter(
        run=run,
        batch_size=25,
        flush_interval_seconds=0.05,
        spill_path=tmp_path / "spill.jsonl",
        backoff_max_seconds=0.5,
    )
    slowest_log = 0.0
    for step in range(1, 601):
        if step == 200:
            restartable_server.kill()
        if step == 450:
            restartable_server.start()
        started = time.perf_counter()
        reporter.log(step, step_time_seconds=4.0 + (step % 7) * 0.01, loss=3.0)
        slowest_log = max(slowest_log, time.perf_counter() - started)
        time.sleep(0.002)  # a (very fast) training step
    assert reporter.flush(30), reporter.stats
    reporter.close(status="finished")
    run_id = reporter.run_id
    assert run_id is not None, "the reporter's thread created the run"
    assert client.get_run(run_id)["status"] == "finished"
    steps = stored_steps(client, run_id)
    assert steps == list(range(1, 601)), "every step once, none missing"
    assert reporter.stats.failed_posts >= 1, "the outage was seen"
    assert reporter.stats.dropped == 0 and reporter.stats.rejected == 0
    assert slowest_log < 0.05, f"log() took {slowest_log * 1e3:.1f} ms at worst"
    stored = client.list_measurements(run_id, min_step=300, max_step=300)["items"][0]
    sent = {key: value for key, value in stored["throughput"].items() if value is not None}
    assert sent == {"step_time_seconds": 4.0 + (300 % 7) * 0.01, "global_batch_tokens": 1048576}


def test_events_go_out_once_each_through_an_outage_with_their_times_and_steps(tmp_path: Path) -> None:
    service = FakeService()
    spill = tmp_path / "spill.jsonl"
    reporter = fake_reporter(service, max_pending_events=2, spill_path=spill)
    before = time.time()
    started = reporter.event("job_started")
    reporter.event("first_step", step=0)
    assert reporter.flush(5)
    service.down = True
    with reporter.checkpoint_save(100):
        time.sleep(0.05)
    with reporter.evaluation(100):
        reporter.log(100, step_time_seconds=1.0, tokens=10)
    reporter.event("data_stall", step=101, duration_seconds=2.5)
    time.sleep(0.3)
    assert reporter.stats.spilled >= 3, "beyond max_pending_events the events go to the spill file"
    service.down = False
    reporter.end("failed", reason="NCCL timeout", step=120)
    after = time.time()
    assert sorted(service.stored) == [100]
    events = sorted(service.events.values(), key=lambda event: event["time"])
    kinds = [event["kind"] for event in events]
    assert kinds == [
        "job_started",
        "first_step",
        "checkpoint_save_begin",
        "checkpoint_save_end",
        "evaluation_begin",
        "evaluation_end",
        "data_stall",
        "failure",
    ]
    assert started in service.events and len({event["event_id"] for event in events}) == 8
    times = [dt.datetime.fromisoformat(event["time"]).timestamp() for event in events]
    assert before <= times[0] and times[-1] <= after and times == sorted(times)
    assert times[3] - times[2] >= 0.05, "the save's begin and end bracket the 50 ms it took"
    assert events[2]["step"] == events[3]["step"] == 100 and events[6]["duration_seconds"] == 2.5
    assert events[7]["reason"] == "NCCL timeout" and events[7]["step"] == 120
    assert reporter.stats.events_delivered == 8 and reporter.stats.dropped == 0
    assert not spill.exists()


def test_an_unknown_event_kind_is_refused_locally_and_the_rest_delivered() -> None:
    service = FakeService()
    with fake_reporter(service) as reporter:
        assert reporter.event("coffee_break") is not None  # never raises on the training thread
        reporter.event("evaluation_begin", step="x")  # type: ignore[arg-type]
        reporter.event("evaluation_end", step=3)
        assert reporter.flush(5)
    assert [event["kind"] for event in service.events.values()] == ["evaluation_end"]
    assert reporter.stats.events_rejected == 2


def test_after_close_log_and_event_are_refused_and_counted() -> None:
    service = FakeService()
    reporter = fake_reporter(service)
    reporter.log(1, step_time_seconds=1.0, tokens=10)
    reporter.close()
    reporter.log(2, step_time_seconds=1.0, tokens=10)
    assert reporter.event("job_ended") is None
    assert sorted(service.stored) == [1] and not service.events
    assert reporter.stats.dropped == 2 and reporter.stats.logged == 1


def test_spilled_events_are_sent_by_the_next_reporter_with_their_ids(tmp_path: Path) -> None:
    service = FakeService()
    service.down = True
    spill = tmp_path / "spill.jsonl"
    first = fake_reporter(service, spill_path=spill)
    ids = [first.event("checkpoint_save_begin", step=10), first.event("checkpoint_save_end", step=10)]
    first.close(timeout_seconds=0.3)
    assert len(spill.read_text().splitlines()) == 2
    service.down = False
    second = fake_reporter(service, spill_path=spill)
    assert second.flush(5)
    second.close()
    assert sorted(service.events) == sorted(ids)
