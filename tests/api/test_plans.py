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
        ({"constraints": {"selective_policies": ["some"]}}, "body.constraints.selective_policies"),
        ({"constraints": {"recompute_every_k_values": [0]}}, "body.constraints.recompute_every_k_values"),
        ({"constraints": {"shard_group_sizes": [0]}}, "body.constraints.shard_group_sizes"),
        (
            {"constraints": {"pp_values": [1], "first_stage_layers": 10}},
            "body.constraints.first_stage_layers",
        ),
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


# --------------------------------------------------------------------------------------------------
# Uneven pipelines, hybrid sharding, checkpoint policies (issue 16)

LLAMA3_405B = {
    "model": {"preset": "llama3.1-405b"},
    "seq_len_tokens": 8192,
    "cluster": {"accelerator": "h100-sxm", "device_count": 2048},
    "global_batch_sequences": 2048,
}


def test_llama_3_405b_pinned_to_its_published_tp_8_pp_16_is_planned(client: TestClient) -> None:
    """Dubey et al. 2024 §3.3: tp 8, pp 16 for 126 layers (was refused: pp does not divide n_layers)."""
    constraints = {"tp_values": [8], "pp_values": [16], "zero_stages": [1], "recompute_modes": ["full"],
                   "max_micro_batch_sequences": 1, "max_virtual_stages": 1, "max_results": 5}  # fmt: skip
    body = plan(client, **LLAMA3_405B, constraints=constraints)
    assert body["candidates"], body["infeasible"]
    for candidate in body["candidates"]:
        assert (candidate["layout"]["tp"], candidate["layout"]["pp"]) == (8, 16)
        assert "uneven-pp" in candidate["regimes"]
        assert candidate["uncertainty_mfu_points"] > 0
    # an explicit split is carried into every candidate
    pinned = plan(client, **LLAMA3_405B,
                  constraints={**constraints, "first_stage_layers": 6, "last_stage_layers": 6})  # fmt: skip
    assert pinned["candidates"]
    assert {
        (c["layout"]["first_stage_layers"], c["layout"]["last_stage_layers"]) for c in pinned["candidates"]
    } == {(6, 6)}


def test_the_planner_may_choose_hybrid_sharding_and_checkpoint_policies(client: TestClient) -> None:
    constraints = {"tp_values": [1], "pp_values": [1], "zero_stages": [3], "recompute_modes": ["selective", "full"],
                   "selective_policies": ["attention_core", "per_op"], "recompute_every_k_values": [1, 2],
                   "shard_group_sizes": [None, 8], "max_micro_batch_sequences": 2, "max_results": 200}  # fmt: skip
    body = plan(client, model={"preset": "llama3-8b"}, seq_len_tokens=4096, global_batch_sequences=256,
                cluster={"accelerator": "a100-sxm4-80gb", "device_count": 64,
                         "inter_node_bandwidth_bytes_per_second": 25e9},
                constraints=constraints)  # fmt: skip
    layouts = [c["layout"] for c in body["candidates"]]
    assert {lay["shard_group_size"] for lay in layouts} == {None, 8}
    assert {lay["selective_policy"] for lay in layouts if lay["recompute"] == "selective"} == {
        "attention_core",
        "per_op",
    }
    assert {lay["recompute_every_k_layers"] for lay in layouts if lay["recompute"] == "full"} == {1, 2}
    # every combination of the choices above (2 micro-batches x 2 groups x (2 policies + 2 intervals))
    assert body["evaluated_count"] == 2 * 2 * 4
    # the candidate's layout, posted back, predicts the same step
    best = body["candidates"][0]
    step = client.post(
        "/v1/predictions/step",
        json={"model": {"preset": "llama3-8b"}, "seq_len_tokens": 4096, "global_batch_sequences": 256,
              "cluster": {"accelerator": "a100-sxm4-80gb", "device_count": 64,
                          "inter_node_bandwidth_bytes_per_second": 25e9}, "layout": best["layout"]},
    )  # fmt: skip
    assert step.status_code == 200, step.text
    assert step.json()["step_time_seconds"] == pytest.approx(best["step_time_seconds"], rel=1e-12)
    assert step.json()["uncertainty_mfu_points"] == best["uncertainty_mfu_points"]


def test_every_request_example_in_the_openapi_answers_200(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    examples = spec["components"]["schemas"]["PlanRequest"]["examples"]
    assert len(examples) >= 2
    for example in examples:
        response = client.post(PATH, json=example)
        assert response.status_code == 200, (example, response.text)
