"""The run store through the API, on SQLite and PostgreSQL (the ``store_client`` fixture)."""

from __future__ import annotations

import dataclasses
import gc
import statistics
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import delete, func, select

from service.api.run_request import request_fingerprint
from service.domain import fleet
from service.store import keys
from service.store import measurements as measurements_store
from service.store import runs as runs_store
from service.store import series as series_store
from service.store.tables import idempotency_keys, measurements, run_mfu_bins, run_series_bins, run_tags
from service.store.uow import UnitOfWork
from service.usecases import record_run
from tests.api.conftest import T0, StoreClient, measurement, run_body

PROBLEM = "application/problem+json"

# Llama-3 8B at 8,192 tokens under the PaLM convention (Chowdhery et al. 2022, App. B):
# 6N + 12·L·H·Q·T = 6 × 8,030,261,248 + 12 × 32 × 32 × 128 × 8,192.
LLAMA3_8B_PARAMETERS = 8_030_261_248
LLAMA3_8B_FLOPS_PER_TOKEN = 6 * LLAMA3_8B_PARAMETERS + 12 * 32 * 32 * 128 * 8192
H100_SXM_BF16_DENSE = 989.4e12  # NVIDIA H100 SXM5 datasheet, dense BF16
DEVICES = 64


def expected_mfu(tokens_per_second: float) -> float:
    return LLAMA3_8B_FLOPS_PER_TOKEN * tokens_per_second / (DEVICES * H100_SXM_BF16_DENSE)


def problem_fields(response: Any) -> list[str]:
    return [error["field"] for error in response.json().get("errors", [])]


# --------------------------------------------------------------------------------------------------
# Recording a run


def test_a_recorded_run_reads_back_with_its_parameter_counts_flops_and_peak(
    store_client: StoreClient,
) -> None:
    response = store_client.client.post("/v1/runs", json=run_body(), headers=store_client.writer)
    assert response.status_code == 201
    run = response.json()
    assert response.headers["location"] == f"/v1/runs/{run['id']}"
    assert run["status"] == "running"
    assert run["parameters"]["total"] == LLAMA3_8B_PARAMETERS
    assert run["size_class"] == "1b_to_10b"
    assert run["model_flops_per_token"] == pytest.approx(LLAMA3_8B_FLOPS_PER_TOKEN)
    assert run["hardware_flops_per_token"] == pytest.approx(LLAMA3_8B_FLOPS_PER_TOKEN)
    assert run["peak_tflops_per_device"] == pytest.approx(989.4)
    assert run["global_batch_sequences"] == 4_194_304 // 8192
    assert run["parallelism"]["dp"] == DEVICES // 2
    assert run["links"] == {
        "self": f"/v1/runs/{run['id']}",
        "measurements": f"/v1/runs/{run['id']}/measurements",
        "efficiency": f"/v1/runs/{run['id']}/efficiency",
    }
    read = store_client.client.get(f"/v1/runs/{run['id']}", headers=store_client.reader)
    assert read.status_code == 200
    assert read.json() == run


def test_full_recomputation_raises_hardware_flops_but_not_model_flops(store_client: StoreClient) -> None:
    run = store_client.create_run(parallelism={"tp": 2, "recompute": "full"})
    assert run["model_flops_per_token"] == pytest.approx(LLAMA3_8B_FLOPS_PER_TOKEN)
    assert run["hardware_flops_per_token"] > run["model_flops_per_token"] * 1.2


def test_a_batch_in_sequences_is_stored_in_tokens_too(store_client: StoreClient) -> None:
    run = store_client.create_run(global_batch_tokens=None, global_batch_sequences=256)
    assert run["global_batch_tokens"] == 256 * 8192
    assert run["global_batch_sequences"] == 256


def test_a_custom_accelerator_run_uses_its_given_peak(store_client: StoreClient) -> None:
    run = store_client.create_run(
        hardware={"custom": {"name": "lab-chip", "peak_tflops": {"bf16": 500.0}}, "count": 8},
        parallelism={"tp": 8},
    )
    assert run["accelerator_id"] == "custom"
    assert run["peak_tflops_per_device"] == 500.0


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"parallelism": {"tp": 2, "dp": 16}}, "body.parallelism.dp"),
        ({"parallelism": {"tp": 3}}, "body.parallelism"),
        ({"parallelism": {"tp": 2, "ep": 3}}, "body.parallelism.ep"),
        ({"parallelism": {"tp": 1, "sequence_parallel": True}}, "body.parallelism.sequence_parallel"),
        (
            {"parallelism": {"tp": 2, "virtual_pipeline_stages": 2}},
            "body.parallelism.virtual_pipeline_stages",
        ),
        ({"parallelism": {"tp": 2, "virtual_stages": 2}}, "body.parallelism.virtual_stages"),
        (
            {"parallelism": {"virtual_stages": 2, "virtual_pipeline_stages": 2, "pp": 2}},
            "body.parallelism.virtual_pipeline_stages",
        ),
        ({"parallelism": {"pp": 64}}, "body.parallelism.pp"),
        ({"global_batch_sequences": 512}, "body"),
        ({"scheduler_job_id": "job-x", "cluster": None}, "body"),
        ({"model": {"preset": "llama-9000"}}, "body.model.preset"),
        ({"hardware": {"accelerator": "h1000", "device_count": 64}}, "body.hardware.accelerator"),
        (
            {"precision": "fp8", "hardware": {"accelerator": "a100-sxm4-80gb", "device_count": 64}},
            "body.precision",
        ),
        ({"tags": ["ok", "has,comma"]}, "body.tags[1]"),
        ({"started_at": "2026-12-02T10:00:00"}, "body.started_at"),
        ({"unknown_field": 1}, "body.unknown_field"),
    ],
)
def test_an_inconsistent_run_is_refused_naming_the_field(
    store_client: StoreClient, change: dict[str, Any], field: str
) -> None:
    response = store_client.client.post("/v1/runs", json=run_body(**change), headers=store_client.writer)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == PROBLEM
    assert field in problem_fields(response)


def test_a_second_run_for_the_same_job_attempt_is_a_conflict_naming_the_first(
    store_client: StoreClient,
) -> None:
    first = store_client.create_run(scheduler_job_id="slurm-42", attempt=0)
    again = store_client.client.post(
        "/v1/runs", json=run_body(scheduler_job_id="slurm-42", attempt=0), headers=store_client.writer
    )
    assert again.status_code == 409
    assert again.json()["existing_run_id"] == first["id"]
    restart = store_client.create_run(scheduler_job_id="slurm-42", attempt=1)
    assert restart["attempt"] == 1
    elsewhere = store_client.create_run(scheduler_job_id="slurm-42", attempt=0, cluster="us-east")
    assert elsewhere["cluster"] == "us-east"
    other_tenant = store_client.create_run(store_client.other, scheduler_job_id="slurm-42", attempt=0)
    assert other_tenant["id"] != first["id"]


def test_a_job_id_without_an_attempt_is_attempt_zero(store_client: StoreClient) -> None:
    first = store_client.create_run(scheduler_job_id="slurm-7")
    assert first["attempt"] == 0
    again = store_client.client.post(
        "/v1/runs", json=run_body(scheduler_job_id="slurm-7", attempt=0), headers=store_client.writer
    )
    assert again.status_code == 409


def test_runs_without_job_ids_never_collide(store_client: StoreClient) -> None:
    a = store_client.create_run(scheduler_job_id=None, cluster=None)
    b = store_client.create_run(scheduler_job_id=None, cluster=None)
    assert a["id"] != b["id"]


# --------------------------------------------------------------------------------------------------
# Idempotency-Key


def _post_run(store_client: StoreClient, body: dict[str, Any], key: str) -> Any:
    return store_client.client.post(
        "/v1/runs", json=body, headers={**store_client.writer, "Idempotency-Key": key}
    )


def _run_count(store_client: StoreClient) -> int:
    page = store_client.client.get("/v1/runs", params={"limit": 200}, headers=store_client.reader).json()
    return len(page["items"])


def test_the_same_key_and_body_answer_the_first_response_again(store_client: StoreClient) -> None:
    body = run_body()
    first = _post_run(store_client, body, "key-1")
    second = _post_run(store_client, body, "key-1")
    assert first.status_code == second.status_code == 201
    assert second.content == first.content
    assert second.headers["idempotent-replayed"] == "true"
    assert second.headers["location"] == first.headers["location"]
    assert _run_count(store_client) == 1


def test_the_same_key_with_another_body_is_refused(store_client: StoreClient) -> None:
    body = run_body()
    assert _post_run(store_client, body, "key-2").status_code == 201
    changed = _post_run(store_client, {**body, "tags": ["other"]}, "key-2")
    assert changed.status_code == 422
    assert changed.json()["type"] == "/problems/idempotency-key-reused"
    assert _run_count(store_client) == 1


def test_keys_are_per_tenant(store_client: StoreClient) -> None:
    body = run_body()
    mine = _post_run(store_client, body, "shared-key")
    theirs = store_client.client.post(
        "/v1/runs", json=body, headers={**store_client.other, "Idempotency-Key": "shared-key"}
    )
    assert mine.status_code == theirs.status_code == 201
    assert mine.json()["id"] != theirs.json()["id"]


def test_a_key_still_in_flight_answers_409_after_a_short_wait(
    store_client: StoreClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(record_run, "IDEMPOTENCY_WAIT_SECONDS", 0.2)
    body = run_body()
    from service.api.schemas.runs import RunCreate

    fingerprint = request_fingerprint(RunCreate.model_validate(body))
    now = datetime.now(UTC)
    with UnitOfWork(store_client.engine, write=True) as uow:
        uow.connection.execute(
            idempotency_keys.insert().values(
                tenant="team-a",
                key="busy",
                operation="create_run",
                request_hash=fingerprint,
                state="in_flight",
                created_at=now,
                claimed_at=now,
            )
        )
        uow.commit()
    response = _post_run(store_client, body, "busy")
    assert response.status_code == 409
    assert response.json()["type"] == "/problems/idempotency-in-flight"
    assert response.headers["retry-after"] == "1"
    assert _run_count(store_client) == 0


def test_a_claim_left_by_a_dead_process_is_taken_over(store_client: StoreClient) -> None:
    body = run_body()
    from service.api.schemas.runs import RunCreate

    fingerprint = request_fingerprint(RunCreate.model_validate(body))
    long_ago = datetime.now(UTC) - timedelta(minutes=5)
    with UnitOfWork(store_client.engine, write=True) as uow:
        uow.connection.execute(
            idempotency_keys.insert().values(
                tenant="team-a",
                key="orphan",
                operation="create_run",
                request_hash=fingerprint,
                state="in_flight",
                created_at=long_ago,
                claimed_at=long_ago,
            )
        )
        uow.commit()
    response = _post_run(store_client, body, "orphan")
    assert response.status_code == 201
    assert _post_run(store_client, body, "orphan").content == response.content


def test_a_key_expires_after_a_day(store_client: StoreClient) -> None:
    old = datetime.now(UTC) - timedelta(hours=25)
    with UnitOfWork(store_client.engine, write=True) as uow:
        uow.connection.execute(
            idempotency_keys.insert().values(
                tenant="team-a",
                key="yesterday",
                operation="create_run",
                request_hash="0" * 64,
                state="done",
                response_status=201,
                response_body="{}",
                created_at=old,
                claimed_at=old,
            )
        )
        uow.commit()
    response = _post_run(store_client, run_body(), "yesterday")
    assert response.status_code == 201
    assert "idempotent-replayed" not in response.headers


def test_a_failed_request_releases_its_key_for_the_retry(store_client: StoreClient) -> None:
    first = store_client.create_run(scheduler_job_id="slurm-9")
    body = run_body(scheduler_job_id="slurm-9")
    conflict = _post_run(store_client, body, "retry-me")
    assert conflict.status_code == 409
    store_client.client.delete(f"/v1/runs/{first['id']}", headers=store_client.writer)
    retried = _post_run(store_client, body, "retry-me")
    assert retried.status_code == 201


def test_two_concurrent_identical_requests_make_one_run_and_get_the_same_answer(
    store_client: StoreClient,
) -> None:
    body = run_body()
    barrier = threading.Barrier(4)

    def send(_: int) -> tuple[int, bytes]:
        barrier.wait()
        response = _post_run(store_client, body, "race")
        return response.status_code, response.content

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(send, range(4)))
    assert {status for status, _ in answers} == {201}
    assert len({content for _, content in answers}) == 1
    assert _run_count(store_client) == 1


def test_an_overlong_idempotency_key_is_refused(store_client: StoreClient) -> None:
    response = _post_run(store_client, run_body(), "k" * 201)
    assert response.status_code == 422
    assert "header.Idempotency-Key" in problem_fields(response)


# --------------------------------------------------------------------------------------------------
# Measurements


def test_each_measurement_is_stored_with_its_mfu_from_the_throughput(store_client: StoreClient) -> None:
    run = store_client.create_run()
    added = store_client.add(run["id"], [measurement(10, 400_000.0), measurement(20, 420_000.0)])
    assert added["stored"] == 2 and added["ignored_steps"] == []
    page = store_client.client.get(f"/v1/runs/{run['id']}/measurements", headers=store_client.reader).json()
    first, second = page["items"]
    assert first["mfu"] == pytest.approx(expected_mfu(400_000.0))
    assert first["hfu"] == pytest.approx(first["mfu"])
    assert first["tokens_per_second_per_device"] == pytest.approx(400_000.0 / DEVICES)
    assert first["achieved_tflops_per_device"] == pytest.approx(expected_mfu(400_000.0) * 989.4)
    assert second["mfu"] == pytest.approx(expected_mfu(420_000.0))
    assert first["time"] == "2026-12-02T10:00:10Z"


@pytest.mark.parametrize(
    ("throughput", "tokens_per_second"),
    [
        ({"tokens_per_second": 400_000.0}, 400_000.0),
        ({"tokens_per_second_per_device": 6_250.0}, 6_250.0 * DEVICES),
        ({"step_time_seconds": 10.0, "global_batch_tokens": 4_194_304}, 419_430.4),
        ({"step_time_seconds": 10.0, "global_batch_sequences": 512}, 512 * 8192 / 10.0),
        ({"sequences_per_second": 50.0}, 50.0 * 8192),
    ],
)
def test_every_throughput_form_is_normalised_to_global_tokens_per_second(
    store_client: StoreClient, throughput: dict[str, Any], tokens_per_second: float
) -> None:
    run = store_client.create_run()
    store_client.add(run["id"], {"step": 1, "time": "2026-12-02T10:00:00Z", "throughput": throughput})
    item = store_client.client.get(f"/v1/runs/{run['id']}/measurements", headers=store_client.reader).json()[
        "items"
    ][0]
    assert item["tokens_per_second"] == pytest.approx(tokens_per_second)
    assert item["mfu"] == pytest.approx(expected_mfu(tokens_per_second))
    assert {key: value for key, value in item["throughput"].items() if value is not None} == throughput


def test_the_summary_follows_every_ingest(store_client: StoreClient) -> None:
    run = store_client.create_run(token_budget_tokens=10**12)
    rates = [380_000.0, 400_000.0, 410_000.0, 395_000.0, 405_000.0]
    added = store_client.add(run["id"], [measurement(100 * (i + 1), rate) for i, rate in enumerate(rates)])
    summary = added["summary"]
    assert summary["measurement_count"] == 5
    assert summary["latest_step"] == 500
    assert summary["latest_mfu"] == pytest.approx(expected_mfu(405_000.0))
    assert summary["latest_tokens_per_second"] == pytest.approx(405_000.0)
    exact_median = statistics.median(expected_mfu(rate) for rate in rates)
    assert summary["median_mfu"] == pytest.approx(exact_median, abs=fleet.MFU_BIN_WIDTH)
    assert summary["tokens_so_far"] == 500 * 4_194_304
    assert summary["seconds_to_budget"] == pytest.approx((10**12 - 500 * 4_194_304) / 405_000.0)
    assert summary["first_measured_at"] == "2026-12-02T10:01:40Z"
    read = store_client.client.get(f"/v1/runs/{run['id']}", headers=store_client.reader).json()
    assert read["summary"] == summary


def test_an_earlier_step_arriving_late_does_not_replace_the_latest(store_client: StoreClient) -> None:
    run = store_client.create_run()
    store_client.add(run["id"], measurement(200, 400_000.0))
    added = store_client.add(run["id"], measurement(100, 300_000.0))
    assert added["summary"]["latest_step"] == 200
    assert added["summary"]["latest_mfu"] == pytest.approx(expected_mfu(400_000.0))
    assert added["summary"]["measurement_count"] == 2
    assert added["summary"]["first_measured_at"] == "2026-12-02T10:01:40Z"


def test_a_repeated_step_is_ignored_and_reported_and_the_first_write_wins(store_client: StoreClient) -> None:
    run = store_client.create_run()
    store_client.add(run["id"], [measurement(1, 400_000.0), measurement(2, 400_000.0)])
    retried = store_client.add(
        run["id"], [measurement(2, 300_000.0), measurement(3, 400_000.0), measurement(3, 100_000.0)]
    )
    assert retried["received"] == 3
    assert retried["stored"] == 1
    assert retried["ignored_steps"] == [2, 3]
    assert retried["summary"]["measurement_count"] == 3
    items = store_client.client.get(f"/v1/runs/{run['id']}/measurements", headers=store_client.reader).json()[
        "items"
    ]
    assert [item["tokens_per_second"] for item in items] == [400_000.0, 400_000.0, 400_000.0]
    again = store_client.add(run["id"], [measurement(1), measurement(2), measurement(3)])
    assert again["stored"] == 0 and again["ignored_steps"] == [1, 2, 3]
    assert again["summary"] == retried["summary"]


def test_one_invalid_item_refuses_the_whole_request_naming_it(store_client: StoreClient) -> None:
    run = store_client.create_run()
    items = [measurement(step) for step in range(5)]
    items[3]["throughput"] = {"tokens_per_second": -1.0}
    response = store_client.client.post(
        f"/v1/runs/{run['id']}/measurements", json=items, headers=store_client.writer
    )
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "body[3].throughput.tokens_per_second"
    assert gc.isenabled(), "the collector paused for ingest must be running again after a failure"
    assert "body[3].throughput.tokens_per_second" in response.json()["detail"]
    assert (
        store_client.client.get(f"/v1/runs/{run['id']}", headers=store_client.reader).json()["summary"][
            "measurement_count"
        ]
        == 0
    )


@pytest.mark.parametrize(
    ("item", "field"),
    [
        ({"step": 1, "throughput": {}}, "body[1].throughput"),
        (
            {"step": 1, "throughput": {"tokens_per_second": 1.0, "sequences_per_second": 1.0}},
            "body[1].throughput",
        ),
        ({"step": 1, "throughput": {"step_time_seconds": 2.0}}, "body[1].throughput"),
        ({"step": -1, "throughput": {"tokens_per_second": 1.0}}, "body[1].step"),
        (
            {"step": 1, "time": "2026-12-02T10:00:00", "throughput": {"tokens_per_second": 1.0}},
            "body[1].time",
        ),
        ({"step": 1, "throughput": {"tokens_per_second": 1.0}, "los": 2.0}, "body[1].los"),
        ({"step": 1, "throughput": {"tokens_per_second": 1.0}, "grad_norm_sq_small": 2.0}, "body[1]"),
        ({"throughput": {"tokens_per_second": 1.0}}, "body[1].step"),
    ],
)
def test_invalid_measurements_are_named_by_position_and_field(
    store_client: StoreClient, item: dict[str, Any], field: str
) -> None:
    run = store_client.create_run()
    response = store_client.client.post(
        f"/v1/runs/{run['id']}/measurements", json=[measurement(0), item], headers=store_client.writer
    )
    assert response.status_code == 422, response.text
    assert problem_fields(response) == [field]


def test_an_mfu_above_one_refuses_the_whole_request_with_the_likely_cause(store_client: StoreClient) -> None:
    run = store_client.create_run()
    items = [measurement(1), measurement(2, tokens_per_second=2_000_000.0)]
    response = store_client.client.post(
        f"/v1/runs/{run['id']}/measurements", json=items, headers=store_client.writer
    )
    assert response.status_code == 422
    assert response.json()["type"] == "/problems/implausible-result"
    assert problem_fields(response) == ["body[1].throughput"]
    assert "above 1" in response.json()["detail"]
    listed = store_client.client.get(f"/v1/runs/{run['id']}/measurements", headers=store_client.reader).json()
    assert listed["items"] == []


def test_later_requests_of_a_run_are_judged_and_computed_item_by_item(store_client: StoreClient) -> None:
    # Ingest keeps a run's per-(token/s) factors once a request has computed them: a later request's
    # first item is still refused with the domain's explanation, and other forms get their own MFU.
    run = store_client.create_run()
    store_client.add(run["id"], measurement(1, 400_000.0))
    for step, tokens_per_second, words in ((2, 2_000_000.0, "above 1"), (3, 1e-3, "below")):
        response = store_client.client.post(
            f"/v1/runs/{run['id']}/measurements",
            json=[measurement(step, tokens_per_second), measurement(step + 10)],
            headers=store_client.writer,
        )
        assert response.status_code == 422, response.text
        assert response.json()["type"] == "/problems/implausible-result"
        assert problem_fields(response) == ["body[0].throughput"]
        assert words in response.json()["detail"]
    per_device = {"step": 4, "throughput": {"tokens_per_second_per_device": 6_000.0}}
    added = store_client.add(run["id"], per_device)
    assert added["summary"]["latest_mfu"] == pytest.approx(expected_mfu(6_000.0 * DEVICES))
    assert added["summary"]["measurement_count"] == 2


@pytest.mark.parametrize(
    "throughput",
    [
        {"tokens_per_second": 1e5},
        {"tokens_per_second_per_device": 1e3},
        {"step_time_seconds": 2.0, "global_batch_tokens": 1024},
        {"step_time_seconds": 2.0, "global_batch_sequences": 8},
        {"sequences_per_second": 3.0},
        {},
        {"tokens_per_second": 1e5, "sequences_per_second": 3.0},
        {"step_time_seconds": 2.0},
        {"step_time_seconds": 2.0, "global_batch_tokens": 1024, "global_batch_sequences": 8},
        {"tokens_per_second": 1e5, "global_batch_tokens": 1024},
        {"tokens_per_second": 0},
        {"tokens_per_second": None, "sequences_per_second": 3.0},
        {"global_batch_tokens": 0, "step_time_seconds": 1.0},
        {"tokens_per_sec": 1e5},
        {"tokens_per_second": "fast"},
    ],
)
def test_the_ingest_throughput_accepts_and_refuses_exactly_what_throughput_in_does(
    throughput: dict[str, Any],
) -> None:
    from pydantic import TypeAdapter, ValidationError

    from service.api.schemas.common import ThroughputIn
    from service.api.schemas.measurements import MeasurementItem

    def outcome(validate: Any) -> str:
        try:
            validate()
        except ValidationError as exc:
            return "; ".join(sorted(str(e["msg"]) for e in exc.errors()))
        return "ok"

    item = TypeAdapter(MeasurementItem)
    as_model = outcome(lambda: ThroughputIn.model_validate(throughput))
    as_item = outcome(lambda: item.validate_python({"step": 1, "throughput": throughput}))
    assert as_item == as_model


def test_one_measurement_object_is_accepted_without_a_list(store_client: StoreClient) -> None:
    run = store_client.create_run()
    added = store_client.add(run["id"], measurement(7))
    assert added["stored"] == 1
    bad = store_client.client.post(
        f"/v1/runs/{run['id']}/measurements",
        json={"step": "x", "throughput": {}},
        headers=store_client.writer,
    )
    assert bad.status_code == 422
    assert "body.step" in problem_fields(bad)


def test_a_measurement_without_a_time_is_stamped_now(store_client: StoreClient) -> None:
    run = store_client.create_run()
    before = datetime.now(UTC)
    store_client.add(run["id"], {"step": 1, "throughput": {"tokens_per_second": 400_000.0}})
    item = store_client.client.get(f"/v1/runs/{run['id']}/measurements", headers=store_client.reader).json()[
        "items"
    ][0]
    stamped = datetime.fromisoformat(item["time"].replace("Z", "+00:00"))
    assert before - timedelta(seconds=1) <= stamped <= datetime.now(UTC) + timedelta(seconds=1)


def test_loss_memory_and_gradient_noise_readings_are_kept(store_client: StoreClient) -> None:
    run = store_client.create_run()
    extra = {
        "loss": 2.31,
        "memory_bytes": 61_000_000_000,
        "grad_norm_sq_small": 4.0,
        "grad_norm_sq_big": 1.5,
        "batch_small_tokens": 524_288,
        "batch_big_tokens": 4_194_304,
    }
    store_client.add(run["id"], measurement(5, **extra))
    item = store_client.client.get(f"/v1/runs/{run['id']}/measurements", headers=store_client.reader).json()[
        "items"
    ][0]
    assert {key: item[key] for key in extra} == extra


def test_a_batch_above_the_limit_is_refused(store_client: StoreClient) -> None:
    run = store_client.create_run()
    items = [{"step": step, "throughput": {"tokens_per_second": 4e5}} for step in range(10_001)]
    response = store_client.client.post(
        f"/v1/runs/{run['id']}/measurements", json=items, headers=store_client.writer
    )
    assert response.status_code == 422
    assert problem_fields(response) == ["body"]
    assert "10000" in response.json()["detail"]


def test_a_full_batch_of_ten_thousand_is_stored_in_one_request(store_client: StoreClient) -> None:
    run = store_client.create_run()
    items = [measurement(step, 400_000.0 + step % 1000) for step in range(10_000)]
    added = store_client.add(run["id"], items)
    assert added["stored"] == 10_000
    with UnitOfWork(store_client.engine, write=False) as uow:
        stored = uow.connection.execute(select(func.count()).select_from(measurements)).scalar_one()
        histogram_total = uow.connection.execute(select(func.sum(run_mfu_bins.c.n_measurements))).scalar_one()
    assert stored == histogram_total == 10_000


def test_measurements_page_by_step(store_client: StoreClient) -> None:
    run = store_client.create_run()
    store_client.add(run["id"], [measurement(step) for step in range(0, 250, 10)])
    seen: list[int] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 7}
        if cursor:
            params["cursor"] = cursor
        page = store_client.client.get(
            f"/v1/runs/{run['id']}/measurements", params=params, headers=store_client.reader
        ).json()
        seen += [item["step"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(range(0, 250, 10))
    ranged = store_client.client.get(
        f"/v1/runs/{run['id']}/measurements",
        params={"min_step": 50, "max_step": 90},
        headers=store_client.reader,
    ).json()
    assert [item["step"] for item in ranged["items"]] == [50, 60, 70, 80, 90]
    bad = store_client.client.get(
        f"/v1/runs/{run['id']}/measurements", params={"cursor": "not-ours"}, headers=store_client.reader
    )
    assert bad.status_code == 422


# --------------------------------------------------------------------------------------------------
# Update and delete


def test_a_running_run_finishes_once_and_stays_finished(store_client: StoreClient) -> None:
    run = store_client.create_run()
    url = f"/v1/runs/{run['id']}"
    finished = store_client.client.patch(url, json={"status": "finished"}, headers=store_client.writer)
    assert finished.status_code == 200
    assert finished.json()["status"] == "finished"
    assert finished.json()["finished_at"] is not None
    again = store_client.client.patch(url, json={"status": "finished"}, headers=store_client.writer)
    assert again.status_code == 200
    assert again.json()["finished_at"] == finished.json()["finished_at"]
    for status in ("running", "failed"):
        refused = store_client.client.patch(url, json={"status": status}, headers=store_client.writer)
        assert refused.status_code == 409
        assert refused.json()["current_status"] == "finished"
        assert refused.json()["detail"].startswith(f"Run {run['id']} is finished, a final status")


def test_a_failed_run_records_its_given_finish_time(store_client: StoreClient) -> None:
    run = store_client.create_run(started_at="2026-12-01T00:00:00Z")
    response = store_client.client.patch(
        f"/v1/runs/{run['id']}",
        json={"status": "failed", "finished_at": "2026-12-02T06:30:00+01:00"},
        headers=store_client.writer,
    )
    assert response.status_code == 200
    assert response.json()["finished_at"] == "2026-12-02T05:30:00Z"


@pytest.mark.parametrize(
    "change",
    [
        {"finished_at": "2026-12-02T00:00:00Z"},
        {"status": "finished", "finished_at": "2026-11-30T00:00:00Z"},
        {"status": None},
        {"status": "paused"},
        {"tags": ["a"], "add_tags": ["b"]},
    ],
)
def test_an_impossible_update_is_refused(store_client: StoreClient, change: dict[str, Any]) -> None:
    run = store_client.create_run(started_at="2026-12-01T00:00:00Z")
    response = store_client.client.patch(f"/v1/runs/{run['id']}", json=change, headers=store_client.writer)
    assert response.status_code == 422, response.text


def test_tags_can_be_replaced_added_and_removed(store_client: StoreClient) -> None:
    run = store_client.create_run(tags=["pretrain", "llama3"])
    url = f"/v1/runs/{run['id']}"
    edited = store_client.client.patch(
        url,
        json={"add_tags": ["baseline", "llama3"], "remove_tags": ["pretrain"]},
        headers=store_client.writer,
    )
    assert sorted(edited.json()["tags"]) == ["baseline", "llama3"]
    replaced = store_client.client.patch(url, json={"tags": ["ablation"]}, headers=store_client.writer)
    assert replaced.json()["tags"] == ["ablation"]
    tagged = store_client.client.get(
        "/v1/runs", params={"tag": "ablation"}, headers=store_client.reader
    ).json()
    assert [item["id"] for item in tagged["items"]] == [run["id"]]


def test_budget_and_price_can_be_set_and_cleared(store_client: StoreClient) -> None:
    run = store_client.create_run()
    url = f"/v1/runs/{run['id']}"
    set_ = store_client.client.patch(
        url,
        json={"token_budget_tokens": 2 * 10**12, "price_per_device_hour": 3.0},
        headers=store_client.writer,
    ).json()
    assert set_["token_budget_tokens"] == 2 * 10**12 and set_["price_per_device_hour"] == 3.0
    cleared = store_client.client.patch(
        url, json={"price_per_device_hour": None}, headers=store_client.writer
    ).json()
    assert cleared["price_per_device_hour"] is None and cleared["token_budget_tokens"] == 2 * 10**12


def test_deleting_a_run_removes_its_measurements_tags_and_histogram(store_client: StoreClient) -> None:
    run = store_client.create_run(tags=["doomed"])
    store_client.add(run["id"], [measurement(step) for step in range(20)])
    deleted = store_client.client.delete(f"/v1/runs/{run['id']}", headers=store_client.writer)
    assert deleted.status_code == 204
    assert deleted.content == b""
    assert store_client.client.get(f"/v1/runs/{run['id']}", headers=store_client.reader).status_code == 404
    assert store_client.client.delete(f"/v1/runs/{run['id']}", headers=store_client.writer).status_code == 404
    with UnitOfWork(store_client.engine, write=False) as uow:
        for table in (measurements, run_tags, run_mfu_bins):
            assert uow.connection.execute(select(func.count()).select_from(table)).scalar_one() == 0


# --------------------------------------------------------------------------------------------------
# Listing: filters, sorts, pagination


def _ids(store_client: StoreClient, **params: Any) -> list[str]:
    response = store_client.client.get(
        "/v1/runs", params={"limit": 200, **params}, headers=store_client.reader
    )
    assert response.status_code == 200, response.text
    return [item["id"] for item in response.json()["items"]]


@pytest.fixture
def fleet_of_runs(store_client: StoreClient) -> dict[str, dict[str, Any]]:
    """Five runs of team-a that differ in one thing each, with measurements (and one of team-b)."""
    runs = {
        "h100_8b": store_client.create_run(started_at="2026-11-01T00:00:00Z", tags=["pretrain", "llama3"]),
        "h100_70b": store_client.create_run(
            model={"preset": "llama3-70b"},
            parallelism={"tp": 8},
            started_at="2026-11-05T00:00:00Z",
            tags=["pretrain"],
        ),
        "a100_8b": store_client.create_run(
            hardware={"accelerator": "NVIDIA A100-SXM4-80GB", "device_count": 64},
            started_at="2026-11-10T00:00:00Z",
            cluster="us-east",
            tags=["ablation"],
        ),
        "small": store_client.create_run(
            model={"preset": "gpt3-350m"}, parallelism={"tp": 1}, started_at="2026-11-15T00:00:00Z", tags=[]
        ),
        "empty": store_client.create_run(started_at="2026-11-20T00:00:00Z", tags=["llama3"]),
    }
    store_client.add(runs["h100_8b"]["id"], [measurement(s, 400_000.0) for s in (1, 2, 3)])
    # Median MFUs ≈ 0.386, 0.231, 0.184 and 0.144.
    store_client.add(runs["h100_70b"]["id"], [measurement(s, 30_000.0) for s in (1, 2, 3)])
    store_client.add(runs["a100_8b"]["id"], [measurement(s, 60_000.0) for s in (1, 2, 3)])
    store_client.add(runs["small"]["id"], [measurement(s, 2_000_000.0) for s in (1, 2, 3)])
    store_client.client.patch(
        f"/v1/runs/{runs['small']['id']}", json={"status": "finished"}, headers=store_client.writer
    )
    store_client.create_run(store_client.other, started_at="2026-11-03T00:00:00Z")
    return {
        name: store_client.client.get(f"/v1/runs/{run['id']}", headers=store_client.reader).json()
        for name, run in runs.items()
    }


def test_a_list_shows_only_the_callers_tenant_newest_first(
    store_client: StoreClient, fleet_of_runs: dict[str, dict[str, Any]]
) -> None:
    ids = _ids(store_client)
    order = ["empty", "small", "a100_8b", "h100_70b", "h100_8b"]
    assert ids == [fleet_of_runs[name]["id"] for name in order]


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"accelerator": "h100-sxm"}, {"h100_8b", "h100_70b", "small", "empty"}),
        ({"accelerator": "NVIDIA A100-SXM4-80GB"}, {"a100_8b"}),
        ({"model": "llama3-70b"}, {"h100_70b"}),
        ({"model": "LLAMA3-8B"}, {"h100_8b", "a100_8b", "empty"}),
        ({"min_parameters": 10**10}, {"h100_70b"}),
        ({"max_parameters": 10**9}, {"small"}),
        ({"min_parameters": 10**9, "max_parameters": 10**10}, {"h100_8b", "a100_8b", "empty"}),
        ({"tag": "llama3"}, {"h100_8b", "empty"}),
        ({"tag": ["pretrain", "llama3"]}, {"h100_8b"}),
        ({"cluster": "us-east"}, {"a100_8b"}),
        ({"status": "finished"}, {"small"}),
        ({"status": "running"}, {"h100_8b", "h100_70b", "a100_8b", "empty"}),
        ({"started_after": "2026-11-05T00:00:00Z"}, {"h100_70b", "a100_8b", "small", "empty"}),
        ({"started_before": "2026-11-05T00:00:00Z"}, {"h100_8b"}),
        ({"min_mfu": 0.3}, {"h100_8b"}),
        ({"max_mfu": 0.2}, {"a100_8b", "small"}),
        ({"min_mfu": 0.0}, {"h100_8b", "h100_70b", "a100_8b", "small"}),
    ],
)
def test_every_filter_selects_the_runs_it_names(
    store_client: StoreClient,
    fleet_of_runs: dict[str, dict[str, Any]],
    params: dict[str, Any],
    expected: set[str],
) -> None:
    names = {run["id"]: name for name, run in fleet_of_runs.items()}
    assert {names[run_id] for run_id in _ids(store_client, **params)} == expected


def test_runs_sort_by_median_mfu_with_unmeasured_runs_lowest(
    store_client: StoreClient, fleet_of_runs: dict[str, dict[str, Any]]
) -> None:
    medians = {name: run["summary"]["median_mfu"] for name, run in fleet_of_runs.items()}
    measured = sorted((name for name in medians if medians[name] is not None), key=lambda n: medians[n])
    ascending = _ids(store_client, sort="median_mfu", order="asc")
    assert ascending == [fleet_of_runs[name]["id"] for name in ["empty", *measured]]
    descending = _ids(store_client, sort="median_mfu", order="desc")
    assert descending == list(reversed(ascending))
    assert _ids(store_client, sort="started_at", order="asc") == list(reversed(_ids(store_client)))


@pytest.mark.parametrize(
    "params",
    [
        {"limit": 0},
        {"limit": 201},
        {"sort": "loss"},
        {"order": "up"},
        {"min_mfu": 1.5},
        {"min_mfu": 0.5, "max_mfu": 0.4},
        {"min_parameters": 10, "max_parameters": 5},
        {"started_after": "2026-11-01T00:00:00"},
        {"accelerator": "h1000"},
        {"cursor": "garbage!"},
    ],
)
def test_bad_list_parameters_are_refused(store_client: StoreClient, params: dict[str, Any]) -> None:
    response = store_client.client.get("/v1/runs", params=params, headers=store_client.reader)
    assert response.status_code == 422, response.text


def test_a_cursor_only_continues_the_listing_it_came_from(store_client: StoreClient) -> None:
    for _ in range(3):
        store_client.create_run()
    page = store_client.client.get("/v1/runs", params={"limit": 1}, headers=store_client.reader).json()
    other = store_client.client.get(
        "/v1/runs",
        params={"limit": 1, "cursor": page["next_cursor"], "sort": "median_mfu"},
        headers=store_client.reader,
    )
    assert other.status_code == 422
    assert "cursor" in other.json()["detail"]


@pytest.mark.parametrize(
    ("sort", "order"), [("started_at", "desc"), ("started_at", "asc"), ("median_mfu", "desc")]
)
def test_paging_while_runs_are_inserted_never_repeats_or_skips_an_existing_run(
    store_client: StoreClient, sort: str, order: str
) -> None:
    existing = {
        store_client.create_run(started_at=(T0 + timedelta(minutes=10 * i)).isoformat())["id"]
        for i in range(24)
    }
    stop = threading.Event()
    inserted: list[str] = []

    def insert_runs() -> None:
        i = 0
        while not stop.is_set() and i < 40:
            started = T0 + timedelta(minutes=10 * (i % 24) + 5)
            inserted.append(store_client.create_run(started_at=started.isoformat())["id"])
            i += 1

    writer = threading.Thread(target=insert_runs)
    writer.start()
    seen: list[str] = []
    cursor = None
    try:
        while True:
            params: dict[str, Any] = {"limit": 5, "sort": sort, "order": order}
            if cursor:
                params["cursor"] = cursor
            page = store_client.client.get("/v1/runs", params=params, headers=store_client.reader)
            assert page.status_code == 200, page.text
            seen += [item["id"] for item in page.json()["items"]]
            cursor = page.json()["next_cursor"]
            if cursor is None:
                break
    finally:
        stop.set()
        writer.join()
    assert len(seen) == len(set(seen)), "a run was listed twice"
    assert existing <= set(seen), "a run that existed before paging began was skipped"
    assert inserted, "the writer thread recorded no runs while the client paged"


# --------------------------------------------------------------------------------------------------
# Efficiency


def test_efficiency_summarises_the_mfu_distribution_and_its_trend(store_client: StoreClient) -> None:
    run = store_client.create_run(token_budget_tokens=10**12)
    # MFU rising linearly with time: 360k → 399k tokens/s over 39 measurements one minute apart.
    rates = [360_000.0 + 1_000.0 * i for i in range(40)]
    items = [
        {
            "step": 10 * (i + 1),
            "time": (T0 + timedelta(minutes=i)).isoformat(),
            "throughput": {"tokens_per_second": rate},
        }
        for i, rate in enumerate(rates)
    ]
    store_client.add(run["id"], items)
    answer = store_client.client.get(f"/v1/runs/{run['id']}/efficiency", headers=store_client.reader).json()
    mfus = [expected_mfu(rate) for rate in rates]
    deciles = statistics.quantiles(mfus, n=10, method="inclusive")
    assert answer["mfu"]["median"] == pytest.approx(statistics.median(mfus), abs=0.001)
    assert answer["mfu"]["p10"] == pytest.approx(deciles[0], abs=0.001)
    assert answer["mfu"]["p90"] == pytest.approx(deciles[-1], abs=0.001)
    assert answer["mfu"]["latest"] == pytest.approx(mfus[-1])
    # d(MFU)/dt = expected_mfu(1,000 tokens/s) per minute.
    assert answer["trend"]["slope_mfu_per_hour"] == pytest.approx(expected_mfu(1_000.0) * 60)
    first, last = statistics.fmean(mfus[:10]), statistics.fmean(mfus[-10:])
    assert answer["trend"]["quartile_change"] == pytest.approx(last - first)
    assert answer["trend"]["hours_covered"] == pytest.approx(39 / 60)
    assert len(answer["series"]) == 40
    assert answer["tokens_so_far"] == 400 * 4_194_304
    assert answer["seconds_to_budget"] == pytest.approx((10**12 - 400 * 4_194_304) / rates[-1])
    reached = datetime.fromisoformat(answer["estimated_budget_reached_at"].replace("Z", "+00:00"))
    assert reached == pytest.approx(
        T0 + timedelta(minutes=39, seconds=answer["seconds_to_budget"]), abs=timedelta(seconds=1)
    )
    assert answer["budget_fraction_done"] == pytest.approx(400 * 4_194_304 / 10**12)
    assert answer["prediction"] is None
    assert "latest_step" in answer["tokens_method"]


def _long_run_items(steps: range) -> list[dict[str, Any]]:
    return [
        {
            "step": i,
            "time": (T0 + timedelta(seconds=30 * i)).isoformat(),
            "throughput": {"tokens_per_second": 380_000.0 + 20.0 * i + (i % 7) * 500.0},
        }
        for i in steps
    ]


def _assert_close_to_exact(bucketed: dict[str, Any], exact: dict[str, Any], count: int) -> None:
    assert "step ranges" in bucketed["trend"]["method"]
    assert "step ranges" not in exact["trend"]["method"]
    assert bucketed["trend"]["slope_mfu_per_hour"] == pytest.approx(
        exact["trend"]["slope_mfu_per_hour"], rel=0.01
    )
    assert bucketed["trend"]["quartile_change"] == pytest.approx(exact["trend"]["quartile_change"], rel=0.02)
    assert len(bucketed["series"]) <= 240
    assert sum(point["measurements"] for point in bucketed["series"]) == count
    assert bucketed["mfu"] == exact["mfu"]


def test_a_long_run_is_trended_from_its_stored_buckets_close_to_the_exact_trend(
    store_client: StoreClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = store_client.create_run()
    # The run outgrows the exact series in the second request (buckets built from its
    # measurements, 16 steps wide), and the buckets widen to 64 steps in the third ...
    store_client.add(run["id"], _long_run_items(range(0, 1500)))
    store_client.add(run["id"], _long_run_items(range(1500, 3000)))
    store_client.add(run["id"], _long_run_items(range(3001, 9000)))
    # ... and in a fourth, a late lower step goes into its old bucket, a repeated one nowhere.
    late = store_client.add(run["id"], _long_run_items(range(3000, 3001)) + _long_run_items(range(5, 6)))
    assert late["stored"] == 1 and late["ignored_steps"] == [5]
    url = f"/v1/runs/{run['id']}/efficiency"
    bucketed = store_client.client.get(url, headers=store_client.reader).json()
    with UnitOfWork(store_client.engine, write=False) as uow:
        record = runs_store.get_run(uow.connection, tenant="team-a", run_id=run["id"])
        assert record is not None
        width, stored = series_store.run_series(uow.connection, run_pk=record.pk)
        rows = measurements_store.measurement_points(uow.connection, run_pk=record.pk)
    # The stored buckets are exactly those of every measurement at the smallest width that holds them.
    assert width == fleet.series_width(0, 8999) == 64
    expected = fleet.series_bins(
        ((row.step, row.measured_at, row.mfu, row.tokens_per_second) for row in rows), width=width
    )
    assert len(stored) == len(expected) == 141
    for got, want in zip(stored, expected, strict=True):
        # Sums in another order: equal to rounding.
        assert got.mfu_sum == pytest.approx(want.mfu_sum, rel=1e-12)
        assert got.tokens_per_second_sum == pytest.approx(want.tokens_per_second_sum, rel=1e-12)
        assert dataclasses.replace(got, mfu_sum=0.0, tokens_per_second_sum=0.0) == dataclasses.replace(
            want, mfu_sum=0.0, tokens_per_second_sum=0.0
        )
    monkeypatch.setattr(fleet, "EXACT_SERIES_MAX", 100_000)  # the same run read whole
    exact = store_client.client.get(url, headers=store_client.reader).json()
    _assert_close_to_exact(bucketed, exact, 9000)


def test_a_long_run_without_stored_buckets_is_grouped_by_the_database_until_its_next_ingest(
    store_client: StoreClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A run that outgrew the exact series before buckets were kept (the migration adds none).
    run = store_client.create_run()
    store_client.add(run["id"], _long_run_items(range(3000)))
    with UnitOfWork(store_client.engine, write=True) as uow:
        uow.connection.execute(delete(run_series_bins))
        uow.commit()
    url = f"/v1/runs/{run['id']}/efficiency"
    grouped = store_client.client.get(url, headers=store_client.reader).json()
    monkeypatch.setattr(fleet, "EXACT_SERIES_MAX", 100_000)
    exact = store_client.client.get(url, headers=store_client.reader).json()
    monkeypatch.undo()
    _assert_close_to_exact(grouped, exact, 3000)
    store_client.add(run["id"], _long_run_items(range(3000, 3010)))
    with UnitOfWork(store_client.engine, write=False) as uow:
        record = runs_store.get_run(uow.connection, tenant="team-a", run_id=run["id"])
        assert record is not None
        _, stored = series_store.run_series(uow.connection, run_pk=record.pk)
    assert sum(item.count for item in stored) == 3010


def test_efficiency_of_a_run_without_measurements_is_empty_not_an_error(store_client: StoreClient) -> None:
    run = store_client.create_run()
    answer = store_client.client.get(f"/v1/runs/{run['id']}/efficiency", headers=store_client.reader).json()
    assert answer["mfu"]["median"] is None and answer["trend"] is None and answer["series"] == []
    assert answer["tokens_so_far"] == 0


def test_efficiency_is_a_chart_when_asked_for_one(store_client: StoreClient) -> None:
    run = store_client.create_run()
    store_client.add(run["id"], [measurement(step, 400_000.0 + step) for step in range(1, 30)])
    url = f"/v1/runs/{run['id']}/efficiency"
    svg = store_client.client.get(url, headers={**store_client.reader, "Accept": "image/svg+xml"})
    assert svg.status_code == 200
    assert svg.headers["content-type"].startswith("image/svg+xml")
    assert "<svg" in svg.text and "MFU" in svg.text
    png = store_client.client.get(url, headers={**store_client.reader, "Accept": "image/png"})
    assert png.status_code == 200 and png.content.startswith(b"\x89PNG")
    refused = store_client.client.get(url, headers={**store_client.reader, "Accept": "text/csv"})
    assert refused.status_code == 406


def test_the_efficiency_chart_shows_mfu_in_percent_and_names_the_model_and_cluster(
    store_client: StoreClient,
) -> None:
    run = store_client.create_run()
    store_client.add(run["id"], [measurement(step, 400_000.0) for step in range(1, 30)])
    url = f"/v1/runs/{run['id']}/efficiency"
    median = store_client.client.get(url, headers=store_client.reader).json()["mfu"]["median"]
    svg = store_client.client.get(url, headers={**store_client.reader, "Accept": "image/svg+xml"}).text
    assert f"median {median:.1%}" in svg  # the fraction 0.4.. is read as percent on the chart
    assert "llama3-8b" in svg and f"{DEVICES} ×" in svg


def test_a_comparison_is_a_chart_when_asked_for_one(store_client: StoreClient) -> None:
    a = store_client.create_run()
    b = store_client.create_run(hardware={"accelerator": "h100-sxm", "device_count": 128})
    store_client.add(a["id"], [measurement(s, 400_000.0) for s in (1, 2, 3)])
    store_client.add(b["id"], [measurement(s, 700_000.0) for s in (1, 2, 3)])
    body = {"run_ids": [a["id"], b["id"]]}
    svg = store_client.client.post(
        "/v1/runs/compare", json=body, headers={**store_client.reader, "Accept": "image/svg+xml"}
    )
    assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml")
    assert a["id"] in svg.text and b["id"] in svg.text
    png = store_client.client.post(
        "/v1/runs/compare", json=body, headers={**store_client.reader, "Accept": "image/png"}
    )
    assert png.status_code == 200 and png.content.startswith(b"\x89PNG")


# --------------------------------------------------------------------------------------------------
# Compare


def test_runs_compare_side_by_side_with_their_differences_named(store_client: StoreClient) -> None:
    a = store_client.create_run(price_per_device_hour=2.5, token_budget_tokens=10**12)
    b = store_client.create_run(
        hardware={"accelerator": "h100-sxm", "device_count": 128},
        parallelism={"tp": 4},
        price_per_device_hour=2.5,
    )
    store_client.add(a["id"], [measurement(s, 400_000.0) for s in (1, 2, 3)])
    store_client.add(b["id"], [measurement(s, 700_000.0) for s in (1, 2, 3)])
    response = store_client.client.post(
        "/v1/runs/compare", json={"run_ids": [a["id"], b["id"]]}, headers=store_client.reader
    )
    assert response.status_code == 200
    answer = response.json()
    first, second = answer["runs"]
    assert first["run_id"] == a["id"]
    assert set(answer["differing_fields"]) == {"device_count", "parallelism.tp"}  # dp is 32 in both
    assert answer["same_fields"]["model_name"] == "llama3-8b"
    # Median MFU is read from a 0.001-wide histogram; the rates follow from it.
    assert first["median_mfu"] == pytest.approx(expected_mfu(400_000.0), abs=0.001)
    rate = first["median_tokens_per_second_per_device"]
    assert rate == pytest.approx(400_000.0 / DEVICES, rel=0.003)
    assert first["median_tflops_per_device"] == pytest.approx(first["median_mfu"] * 989.4)
    assert first["latest_tokens_per_second_per_device"] == pytest.approx(400_000.0 / DEVICES)
    # 1e9 tokens at `rate` per device take 1e9 / (64 × rate) s on 64 devices at $2.5 per device-hour.
    assert first["cost_per_billion_tokens"] == pytest.approx(1e9 / (DEVICES * rate) / 3600 * DEVICES * 2.5)
    assert first["seconds_for_budget_at_median"] == pytest.approx(10**12 / (DEVICES * rate))
    assert second["token_budget_tokens"] is None and second["seconds_to_budget"] is None
    assert answer["best_median_mfu_run_id"] == a["id"]


@pytest.mark.parametrize("count", [1, 21])
def test_compare_needs_two_to_twenty_runs(store_client: StoreClient, count: int) -> None:
    ids = [f"run_{i:020x}" for i in range(count)]
    response = store_client.client.post(
        "/v1/runs/compare", json={"run_ids": ids}, headers=store_client.reader
    )
    assert response.status_code == 422


def test_compare_refuses_a_repeated_id(store_client: StoreClient) -> None:
    run = store_client.create_run()
    response = store_client.client.post(
        "/v1/runs/compare", json={"run_ids": [run["id"], run["id"]]}, headers=store_client.reader
    )
    assert response.status_code == 422


# --------------------------------------------------------------------------------------------------
# Tenants and scopes


def test_another_tenants_run_is_not_found_on_every_endpoint(store_client: StoreClient) -> None:
    theirs = store_client.create_run(store_client.other)
    store_client.add(theirs["id"], measurement(1), headers=store_client.other)
    mine = store_client.create_run()
    run_url = f"/v1/runs/{theirs['id']}"
    client, me = store_client.client, store_client.writer
    answers = {
        "get_run": client.get(run_url, headers=me),
        "update_run": client.patch(run_url, json={"status": "failed"}, headers=me),
        "add_measurements": client.post(f"{run_url}/measurements", json=measurement(2), headers=me),
        "list_measurements": client.get(f"{run_url}/measurements", headers=me),
        "get_run_efficiency": client.get(f"{run_url}/efficiency", headers=me),
        "get_run_efficiency_svg": client.get(
            f"{run_url}/efficiency", headers={**me, "Accept": "image/svg+xml"}
        ),
        "compare_runs": client.post(
            "/v1/runs/compare", json={"run_ids": [mine["id"], theirs["id"]]}, headers=me
        ),
        "get_fleet_mfu_stats": client.get("/v1/stats/mfu", params={"run_id": theirs["id"]}, headers=me),
        "delete_run": client.delete(run_url, headers=me),
    }
    for operation, response in answers.items():
        assert response.status_code == 404, operation
        assert response.headers["content-type"] == PROBLEM, operation
        assert theirs["id"] in response.json()["detail"], operation
    assert answers["compare_runs"].json()["missing_run_ids"] == [theirs["id"]]
    assert theirs["id"] not in _ids(store_client)
    # Untouched for its owner.
    owner_view = client.get(run_url, headers=store_client.other).json()
    assert owner_view["status"] == "running"
    assert owner_view["summary"]["measurement_count"] == 1


def test_an_unknown_run_id_is_not_found(store_client: StoreClient) -> None:
    response = store_client.client.get("/v1/runs/run_00000000000000000000", headers=store_client.reader)
    assert response.status_code == 404


def _every_operation(run_id: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    return [
        ("POST", "/v1/runs", run_body()),
        ("GET", "/v1/runs", None),
        ("GET", f"/v1/runs/{run_id}", None),
        ("PATCH", f"/v1/runs/{run_id}", {"add_tags": ["x"]}),
        ("POST", f"/v1/runs/{run_id}/measurements", measurement(99)),
        ("GET", f"/v1/runs/{run_id}/measurements", None),
        ("GET", f"/v1/runs/{run_id}/efficiency", None),
        ("POST", "/v1/runs/compare", {"run_ids": [run_id, run_id + "x"]}),
        ("GET", "/v1/stats/mfu", None),
        ("DELETE", f"/v1/runs/{run_id}", None),
    ]


WRITES = {"POST /v1/runs", "PATCH", "POST measurements", "DELETE"}


def test_without_a_key_every_store_operation_is_401(store_client: StoreClient) -> None:
    run = store_client.create_run()
    for method, url, body in _every_operation(run["id"]):
        response = store_client.client.request(method, url, json=body)
        assert response.status_code == 401, (method, url)
        assert response.headers["www-authenticate"].startswith("Bearer")
        bad = store_client.client.request(method, url, json=body, headers={"X-API-Key": "teff_nope_nope"})
        assert bad.status_code == 401, (method, url)


def test_a_read_key_reads_but_cannot_write(store_client: StoreClient) -> None:
    run = store_client.create_run()
    store_client.add(run["id"], measurement(1))
    writes = [
        ("POST", "/v1/runs"),
        ("PATCH", "/v1/runs/"),
        ("POST", "/measurements"),
        ("DELETE", "/v1/runs/"),
    ]
    for method, url, body in _every_operation(run["id"]):
        response = store_client.client.request(method, url, json=body, headers=store_client.reader)
        is_write = any(method == m and (part in url) for m, part in writes) and not url.endswith("/compare")
        if is_write:
            assert response.status_code == 403, (method, url)
            assert "write" in response.json()["detail"]
        else:
            assert response.status_code in (200, 404), (method, url, response.text)
    assert store_client.client.get(f"/v1/runs/{run['id']}", headers=store_client.reader).status_code == 200


def test_a_bearer_token_works_like_the_api_key_header(store_client: StoreClient) -> None:
    key = store_client.key("team-a", "read")
    response = store_client.client.get("/v1/runs", headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 200


def test_a_revoked_key_is_refused_on_its_next_request(store_client: StoreClient) -> None:
    key = store_client.key("team-a", "read,write")
    headers = {"X-API-Key": key}
    run = store_client.create_run(headers)
    assert store_client.client.get(f"/v1/runs/{run['id']}", headers=headers).status_code == 200
    with UnitOfWork(store_client.engine, write=True) as uow:
        assert keys.revoke_key(uow.connection, prefix=key.split("_")[1])
        uow.commit()
    assert store_client.client.get(f"/v1/runs/{run['id']}", headers=headers).status_code == 401
    assert (
        store_client.client.post(
            f"/v1/runs/{run['id']}/measurements", json=measurement(1), headers=headers
        ).status_code
        == 401
    )


def test_a_revoked_key_reads_nothing_more_on_any_read_endpoint(store_client: StoreClient) -> None:
    # Read endpoints take the principal from the process's cache once a key was seen, and check the key
    # again inside their read transaction: each of them must refuse the key once it is revoked.
    key = store_client.key("team-a", "read,write")
    headers = {"X-API-Key": key}
    first = store_client.create_run(headers)["id"]
    second = store_client.create_run(headers)["id"]
    reads = [
        ("GET", "/v1/runs", None),
        ("GET", f"/v1/runs/{first}", None),
        ("GET", f"/v1/runs/{first}/measurements", None),
        ("GET", f"/v1/runs/{first}/efficiency", None),
        ("POST", "/v1/runs/compare", {"run_ids": [first, second]}),
        ("GET", "/v1/stats/mfu", None),
    ]
    for method, url, body in reads:
        response = store_client.client.request(method, url, json=body, headers=headers)
        assert response.status_code == 200, (url, response.text)
    with UnitOfWork(store_client.engine, write=True) as uow:
        assert keys.revoke_key(uow.connection, prefix=key.split("_")[1])
        uow.commit()
    for method, url, body in reads:
        response = store_client.client.request(method, url, json=body, headers=headers)
        assert response.status_code == 401, (url, response.text)
        assert response.headers["content-type"].startswith("application/problem+json")


def test_an_admin_key_may_write(store_client: StoreClient) -> None:
    admin = store_client.headers("team-a", "admin")
    assert store_client.client.post("/v1/runs", json=run_body(), headers=admin).status_code == 201


def test_the_summary_answered_by_an_ingest_reads_times_in_utc_as_the_stored_one(
    store_client: StoreClient,
) -> None:
    run = store_client.create_run()
    item = measurement(7)
    item["time"] = (
        (T0 + timedelta(seconds=7)).astimezone(timezone(-timedelta(hours=7, minutes=30))).isoformat()
    )
    answered = store_client.add(run["id"], [item])["summary"]
    stored = store_client.client.get(f"/v1/runs/{run['id']}", headers=store_client.reader).json()["summary"]
    assert answered["first_measured_at"] == answered["latest_measured_at"] == "2026-12-02T10:00:07Z"
    assert {key: stored[key] for key in answered} == answered


def test_a_long_runs_buckets_grow_with_one_measurement_requests_as_with_large_ones(
    store_client: StoreClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small requests to a long run add to its stored buckets (on PostgreSQL in the event loop's
    batches): the buckets end exactly those of
    every measurement."""
    monkeypatch.setattr(fleet, "EXACT_SERIES_MAX", 50)
    run = store_client.create_run()
    store_client.add(run["id"], _long_run_items(range(0, 60)))  # outgrows the exact series: built
    for step in range(60, 700, 7):  # one at a time: added to, widened twice on the way
        assert store_client.add(run["id"], _long_run_items(range(step, step + 1)))["stored"] == 1
    with UnitOfWork(store_client.engine, write=False) as uow:
        record = runs_store.get_run(uow.connection, tenant="team-a", run_id=run["id"])
        assert record is not None
        width, stored = series_store.run_series(uow.connection, run_pk=record.pk)
        rows = measurements_store.measurement_points(uow.connection, run_pk=record.pk)
    assert width == fleet.series_width(0, rows[-1].step) > fleet.series_width(0, 59)
    expected = fleet.series_bins(
        ((row.step, row.measured_at, row.mfu, row.tokens_per_second) for row in rows), width=width
    )
    assert len(stored) == len(expected)
    for got, want in zip(stored, expected, strict=True):
        assert got.mfu_sum == pytest.approx(want.mfu_sum, rel=1e-12)
        assert got.tokens_per_second_sum == pytest.approx(want.tokens_per_second_sum, rel=1e-12)
        assert dataclasses.replace(got, mfu_sum=0.0, tokens_per_second_sum=0.0) == dataclasses.replace(
            want, mfu_sum=0.0, tokens_per_second_sum=0.0
        )


def test_a_run_stored_with_the_old_hardware_count_reads_as_device_count() -> None:
    # Runs created before the rename stored hardware as sent, with count.
    from service.api.schemas.common import HardwareRead

    stored = {"accelerator": "h100-sxm", "count": 64}
    assert HardwareRead.model_validate(stored).model_dump(exclude_none=True) == {
        "accelerator": "h100-sxm",
        "device_count": 64,
    }
