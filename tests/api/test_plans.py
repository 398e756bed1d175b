"""POST /v1/plans/parallelism through the app: Llama 3 70B on 1024 H100s answers within about a second
with ranked, feasible candidates and the reasons the rest were dropped; constraints are honoured; a
candidate's layout reproduces its prediction at /v1/predictions/step; problems name the field."""

from __future__ import annotations

import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

PATH = "/v1/plans/parallelism"


def plan_request(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": {"preset": "llama3-70b"},
        "seq_len_tokens": 8192,
        "cluster": {"accelerator": "h100-sxm", "device_count": 1024},
        "global_batch_sequences": 2048,
    }
    body.update(overrides)
    return body


def plan(client: TestClient, **overrides: Any) -> dict[str, Any]:
    response = client.post(PATH, json=plan_request(**overrides))
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_llama3_70b_on_1024_h100s_is_planned_with_its_speed_reported(client: TestClient) -> None:
    started = time.perf_counter()
    response = client.post(PATH, json=plan_request())
    wall = time.perf_counter() - started
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["elapsed_seconds"] <= wall
    assert body["candidates_per_second"] == pytest.approx(body["evaluated_count"] / body["elapsed_seconds"])

    candidates = body["candidates"]
    assert body["returned_count"] == len(candidates) == 20  # the default max_results
    assert [c["rank"] for c in candidates] == list(range(1, 21))
    rates = [c["tokens_per_second"] for c in candidates]
    assert rates == sorted(rates, reverse=True)
    for candidate in candidates:
        lay = candidate["layout"]
        assert lay["tp"] * lay["pp"] * lay["dp"] * lay["cp"] == 1024
        assert 64 % lay["tp"] == 0 and lay["tp"] <= 8  # divides the heads, stays in a node
        assert 80 % lay["pp"] == 0
        assert candidate["fits"] is True and candidate["headroom_bytes"] >= 0
        assert candidate["memory_per_device_gib"] == pytest.approx(
            candidate["memory_per_device_bytes"] / 2**30
        )
        assert 0 < candidate["mfu"] < 1
        assert candidate["tokens_per_second"] == pytest.approx(2048 * 8192 / candidate["step_time_seconds"])

    assert body["feasible_count"] >= 20
    assert body["feasible_count"] + sum(g["count"] for g in body["infeasible"]) == body["evaluated_count"]
    groups = {g["reason"]: g for g in body["infeasible"]}
    oom = groups["does not fit in device memory"]
    assert oom["count"] > 0 and 1 <= len(oom["examples"]) <= 3
    assert "tp exceeds devices per node" in groups
    assert body["convention"] == "palm"
    assert body["reading"].startswith(f"Fastest of {body['feasible_count']} feasible layouts")


def test_a_candidate_layout_posted_to_predictions_gives_the_same_step(client: TestClient) -> None:
    best = plan(client)["candidates"][0]
    response = client.post(
        "/v1/predictions/step",
        json={"model": {"preset": "llama3-70b"}, "seq_len_tokens": 8192, "global_batch_sequences": 2048,
              "cluster": {"accelerator": "h100-sxm", "device_count": 1024}, "layout": best["layout"]},
    )  # fmt: skip
    assert response.status_code == 200, response.text
    step = response.json()
    assert step["step_time_seconds"] == pytest.approx(best["step_time_seconds"], rel=1e-12)
    assert step["mfu"] == pytest.approx(best["mfu"], rel=1e-12)
    assert step["layout"] == best["layout"]
    largest = step["mfu_gap"]["costs"][0]
    assert best["largest_loss"] == largest["component"]
    assert best["largest_loss_fraction"] == pytest.approx(largest["mfu_cost"])


def test_constraints_are_honoured(client: TestClient) -> None:
    body = plan(
        client,
        constraints={"tp_values": [8], "recompute_modes": ["selective"], "zero_stages": [1],
                     "max_virtual_stages": 1, "max_micro_batch_sequences": 2, "max_results": 5},
    )  # fmt: skip
    assert 1 <= body["returned_count"] <= 5
    for candidate in body["candidates"]:
        lay = candidate["layout"]
        assert lay["tp"] == 8 and lay["recompute"] == "selective" and lay["zero_stage"] == 1
        assert lay["virtual_stages"] == 1 and lay["micro_batch_sequences"] <= 2


def test_a_small_model_is_planned_data_parallel(client: TestClient) -> None:
    body = plan(client, model={"preset": "gpt3-350m"}, seq_len_tokens=2048,
                cluster={"accelerator": "a100-sxm4-80gb", "device_count": 8}, global_batch_sequences=64)  # fmt: skip
    best = body["candidates"][0]["layout"]
    assert (best["tp"], best["pp"], best["dp"]) == (1, 1, 8)


def test_tokens_and_sequences_plan_the_same(client: TestClient) -> None:
    request: dict[str, Any] = {"model": {"preset": "llama3-8b"}, "seq_len_tokens": 4096,
                               "cluster": {"accelerator": "h100-sxm", "device_count": 16}}  # fmt: skip
    by_tokens = client.post(PATH, json={**request, "global_batch_tokens": 64 * 4096}).json()
    by_sequences = client.post(PATH, json={**request, "global_batch_sequences": 64}).json()
    assert by_tokens["candidates"][0]["layout"] == by_sequences["candidates"][0]["layout"]
    assert by_tokens["global_batch_sequences"] == 64


def test_when_nothing_fits_the_answer_says_why(client: TestClient) -> None:
    body = plan(client, cluster={"accelerator": "l4", "device_count": 1}, global_batch_sequences=1)
    assert body["candidates"] == [] and body["feasible_count"] == 0
    assert "does not fit in device memory" in {group["reason"] for group in body["infeasible"]}
    assert body["reading"].startswith("No layout")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"constraints": {"max_results": 201}}, "body.constraints.max_results"),
        ({"constraints": {"recompute_modes": ["sometimes"]}}, "body.constraints.recompute_modes"),
        ({"constraints": {"zero_stages": [4]}}, "body.constraints.zero_stages"),
        (
            {"constraints": {"min_micro_batch_sequences": 4, "max_micro_batch_sequences": 2}},
            "body.constraints.max_micro_batch_sequences",
        ),
        ({"constraints": {"recompute_modes": []}}, "body.constraints.recompute_modes"),
        ({"global_batch_sequences": None, "global_batch_tokens": 5000}, "body.global_batch_tokens"),
        ({"cluster": {"accelerator": "h100-sxm", "device_count": 0}}, "body.cluster.device_count"),
        (
            {
                "cluster": {
                    "accelerator": "h100-sxm",
                    "device_count": 16,
                    "custom": {"name": "x", "peak_tflops": {"bf16": 1}},
                }
            },
            "body.cluster",
        ),
        ({"precision": "fp64", "cluster": {"accelerator": "l4", "device_count": 8}}, "body.precision"),
        # a search this wide is refused before it starts
        (
            {
                "model": {"preset": "llama3-8b"},
                "seq_len_tokens": 16,
                "global_batch_sequences": 14_414_400,
                "cluster": {"accelerator": "h100-sxm", "device_count": 16},
                "constraints": {"tp_within_node": False},
            },
            "body.constraints",
        ),
    ],
)
def test_bad_inputs_are_422_problems_naming_the_field(
    client: TestClient, change: dict[str, Any], field: str
) -> None:
    body = {key: value for key, value in plan_request(**change).items() if value is not None}
    response = client.post(PATH, json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    fields = [error["field"] for error in response.json()["errors"]]
    assert any(f == field or f.startswith((field + ".", field + "[")) for f in fields), fields


def test_every_request_example_in_the_openapi_answers_200(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    examples = spec["components"]["schemas"]["PlanRequest"]["examples"]
    assert len(examples) >= 2
    for example in examples:
        response = client.post(PATH, json=example)
        assert response.status_code == 200, (example, response.text)
