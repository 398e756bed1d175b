"""Every operation of the contract through teff_client against a real server process: the contract's
own request examples go in, and each answer carries the fields the contract says it must."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from teff_client import AsyncClient, Client, errors

from tests.clients.conftest import KeyedServer

CONTRACT = yaml.safe_load((Path(__file__).resolve().parents[2] / "openapi.yaml").read_text())
SCHEMAS = CONTRACT["components"]["schemas"]

# The stateless estimate endpoints, by client method: their request schema's first example goes in.
STATELESS = {
    "compute_flops": "FlopsRequest",
    "compute_mfu": "MfuRequest",
    "compute_mfu_batch": "MfuBatchRequest",
    "estimate_training": "TrainingEstimateRequest",
    "estimate_memory": "MemoryRequest",
    "predict_step_time": "StepPredictionRequest",
    "plan_parallelism": "PlanRequest",
    "compute_lr_schedule": "LrScheduleRequest",
    "advise_learning_rate": "LrAdviceRequest",
    "advise_batch_size": "BatchAdviceRequest",
    "compute_optimal_size": "ComputeOptimalRequest",
}


def response_schema(operation_id: str) -> dict[str, Any]:
    for methods in CONTRACT["paths"].values():
        for operation in methods.values():
            if isinstance(operation, dict) and operation.get("operationId") == operation_id:
                for status in ("200", "201"):
                    if status in operation["responses"]:
                        ref = operation["responses"][status]["content"]["application/json"]["schema"]["$ref"]
                        return SCHEMAS[ref.rsplit("/", 1)[1]]
    raise KeyError(operation_id)


def assert_shape(operation_id: str, answer: Any) -> None:
    required = set(response_schema(operation_id).get("required", []))
    assert isinstance(answer, dict)
    assert required <= set(answer), (operation_id, sorted(required - set(answer)))


@pytest.fixture(scope="module")
def client(keyed_server: KeyedServer) -> Iterator[Client]:
    with Client(keyed_server.base_url, api_key=keyed_server.api_key, timeout=60) as client:
        yield client


@pytest.mark.parametrize("method", sorted(STATELESS))
def test_each_estimate_answers_its_contract_example(client: Client, method: str) -> None:
    example = SCHEMAS[STATELESS[method]]["examples"][0]
    answer = getattr(client, method)(example)
    assert_shape({"compute_optimal_size": "compute_optimal_size"}.get(method, method), answer)


def test_catalog_and_operations(client: Client) -> None:
    assert client.get_health()["status"] == "ok"
    assert client.get_readiness()
    assert "teff_http_requests_total" in client.get_metrics()
    presets = client.list_model_presets()
    assert_shape("list_model_presets", presets)
    preset_id = presets["items"][0]["id"]
    assert client.get_model_preset(preset_id)["id"] == preset_id
    looked_up = client.list_accelerators(device_name="NVIDIA H100 80GB HBM3")
    assert [item["id"] for item in looked_up["items"]] == ["h100-sxm"]
    assert client.get_accelerator("h100-sxm")["peak_tflops"]["bf16"] == pytest.approx(989.4, rel=1e-3)
    assert client.get_problem_type("not-found")
    assert client.predict_step_time_chart(SCHEMAS["StepPredictionRequest"]["examples"][0]).startswith(b"<")
    assert client.compute_lr_schedule_as(SCHEMAS["LrScheduleRequest"]["examples"][0]).count(b"\n") > 2


def test_mfu_reproduces_torchtitans_published_figure(client: Client) -> None:
    # torchtitan's Llama 3.1 8B on 8×H100: 5,762 tokens/s per GPU, published MFU 33.7% (README).
    answer = client.compute_mfu(
        {
            "model": {"preset": "llama3.1-8b"},
            "seq_len_tokens": 8192,
            "hardware": {"accelerator": "NVIDIA H100 80GB HBM3", "device_count": 8},
            "throughput": {"tokens_per_second_per_device": 5762},
            "embedding_policy": "exclude_input",
        }
    )
    assert answer["mfu"] == pytest.approx(0.337, abs=0.001)


def test_problems_arrive_as_exceptions_naming_what_to_change(
    client: Client, keyed_server: KeyedServer
) -> None:
    with pytest.raises(errors.ValidationFailed) as invalid:
        client.compute_mfu(
            {
                "model": {"preset": "llama3.1-8b"},
                "seq_len_tokens": 0,
                "hardware": {"accelerator": "h100-sxm", "device_count": 8},
                "throughput": {"tokens_per_second": 1000},
            }
        )
    assert any("seq_len_tokens" in field for field in invalid.value.fields)
    with pytest.raises(errors.UnknownReference) as unknown:
        client.compute_mfu(
            {
                "model": {"preset": "llama3.1-8b"},
                "seq_len_tokens": 8192,
                "hardware": {"accelerator": "NVIDIA H100 80GB HBM4", "device_count": 8},
                "throughput": {"tokens_per_second": 1000},
            }
        )
    assert unknown.value.close_matches, unknown.value.body
    with pytest.raises(errors.NotFound):
        client.get_run("run_does_not_exist")
    with (
        pytest.raises(errors.Unauthorized),
        Client(keyed_server.base_url, api_key="teff_nope_nope") as stranger,
    ):
        stranger.list_runs()


def run_body(job_id: str) -> dict[str, Any]:
    body = dict(SCHEMAS["RunCreate"]["examples"][0])
    body.update({"cluster": "client-tests", "scheduler_job_id": job_id, "attempt": 0})
    return body


def test_a_run_through_its_life(client: Client) -> None:
    created = client.create_run(run_body("life-1"), idempotency_key="life-1-key")
    assert_shape("create_run", created)
    replayed = client.create_run(run_body("life-1"), idempotency_key="life-1-key")
    assert replayed["id"] == created["id"], "the same key answers the first run again"
    with pytest.raises(errors.Conflict) as conflict:
        client.create_run(run_body("life-1"))
    assert conflict.value.existing_run_id == created["id"]
    assert client.create_or_resume_run(run_body("life-1"))["id"] == created["id"]

    run_id = created["id"]
    tokens = created["global_batch_tokens"]
    added = client.add_measurements(
        run_id,
        [
            {"step": step, "throughput": {"step_time_seconds": 10.0, "global_batch_tokens": tokens}}
            for step in (1, 2, 3)
        ],
    )
    assert (added["stored"], added["ignored_steps"]) == (3, [])
    again = client.add_measurements(
        run_id, [{"step": 3, "throughput": {"step_time_seconds": 5.0, "global_batch_tokens": tokens}}]
    )
    assert (again["stored"], again["ignored_steps"]) == (0, [3])
    stored = list(client.iter_measurements(run_id, page_size=2))
    assert [item["step"] for item in stored] == [1, 2, 3]
    # MFU = tokens/s × FLOPs per token / (peak × devices), from the run's own facts.
    expected = (
        tokens
        / 10.0
        * created["model_flops_per_token"]
        / (created["peak_tflops_per_device"] * 1e12 * created["device_count"])
    )
    assert stored[2]["mfu"] == pytest.approx(expected, rel=1e-6)

    assert_shape("get_run_efficiency", client.get_run_efficiency(run_id))
    assert client.get_run(run_id)["summary"]["measurement_count"] == 3
    assert run_id in [run["id"] for run in client.iter_runs(cluster="client-tests", limit=1)]
    other = client.create_run(run_body("life-2"))
    comparison = client.compare_runs({"run_ids": [run_id, other["id"]]})
    assert_shape("compare_runs", comparison)
    assert_shape("get_fleet_mfu_stats", client.get_fleet_mfu_stats(run_id=run_id))
    assert client.finish_run(run_id)["status"] == "finished"
    assert client.finish_run(run_id)["status"] == "finished", "a repeated final status is a no-op"
    with pytest.raises(errors.Conflict):
        client.finish_run(run_id, "failed")
    assert "baseline" in client.update_run(run_id, {"add_tags": ["baseline"]})["tags"]
    client.delete_run(other["id"])
    with pytest.raises(errors.NotFound):
        client.get_run(other["id"])


def test_the_async_client_against_the_server(keyed_server: KeyedServer) -> None:
    async def scenario() -> tuple[str, list[int], float]:
        async with AsyncClient(keyed_server.base_url, api_key=keyed_server.api_key) as client:
            run = await client.create_run(run_body("async-1"))
            await client.add_measurements(run["id"], [{"step": 5, "throughput": {"tokens_per_second": 1e6}}])
            steps = [item["step"] async for item in client.iter_measurements(run["id"])]
            mfu = (await client.compute_mfu(SCHEMAS["MfuRequest"]["examples"][0]))["mfu"]
            return run["id"], steps, mfu

    run_id, steps, mfu = asyncio.run(scenario())
    assert run_id
    assert steps == [5] and 0 < mfu < 1
