"""POST /v1/flops and /v1/estimates/training, checked against formulas computed here."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient


def test_palm_flops_are_6n_plus_the_attention_term(client: TestClient) -> None:
    body = client.post("/v1/flops", json={"model": {"preset": "llama3-8b"}, "seq_len_tokens": 8192}).json()
    n = body["parameter_count_used"]
    assert n == body["total_parameters"] == 8_030_261_248
    assert body["training_flops_per_token"] == pytest.approx(6 * n + 12 * 32 * 32 * 128 * 8192, rel=1e-12)
    assert body["training_flops_per_sequence"] == pytest.approx(body["training_flops_per_token"] * 8192)
    parts = body["training_per_token"]
    assert parts["total_flops"] == pytest.approx(
        parts["attention_projections_flops"] + parts["attention_scores_flops"] + parts["mlp_flops"]
        + parts["logits_flops"] + parts["other_flops"]
    )  # fmt: skip


def test_the_causal_convention_halves_the_score_term(client: TestClient) -> None:
    request = {"model": {"preset": "llama3-8b"}, "seq_len_tokens": 8192}
    full = client.post("/v1/flops", json={**request, "convention": "megatron"}).json()
    causal = client.post("/v1/flops", json={**request, "convention": "megatron_causal"}).json()
    assert causal["forward_per_token"]["attention_scores_flops"] == pytest.approx(
        full["forward_per_token"]["attention_scores_flops"] / 2
    )
    assert causal["forward_per_token"]["mlp_flops"] == full["forward_per_token"]["mlp_flops"]


def test_full_recompute_adds_a_forward_pass_to_hardware_flops(client: TestClient) -> None:
    body = client.post(
        "/v1/flops", json={"model": {"preset": "gpt3-175b"}, "seq_len_tokens": 2048, "recompute": "full"}
    ).json()
    assert body["hardware_flops_per_token"] > body["training_flops_per_token"]
    assert body["recompute_flops_per_token"] <= body["forward_flops_per_token"]


def test_training_time_halves_from_30_to_60_percent_mfu(client: TestClient) -> None:
    body = client.post(
        "/v1/estimates/training",
        json={
            "total_training_flops": 3.15e23,  # GPT-3 175B's published training compute
            "hardware": {"accelerator": "a100-sxm4-80gb", "device_count": 1024},
            "mfu": 0.3,
            "price_per_device_hour": 2.0,
        },
    ).json()
    expected_seconds = 3.15e23 / (1024 * 312e12 * 0.3)
    assert body["at_given_mfu"]["wall_clock_seconds"] == pytest.approx(expected_seconds)
    assert body["at_given_mfu"]["device_hours"] == pytest.approx(expected_seconds * 1024 / 3600)
    assert body["at_given_mfu"]["cost"] == pytest.approx(expected_seconds * 1024 / 3600 * 2.0)
    assert body["at_given_mfu"]["energy_kwh_upper_bound"] == pytest.approx(
        1024 * 400 * expected_seconds / 3.6e6
    )
    at_60 = next(job for job in body["at_other_mfus"] if job["mfu"] == 0.6)
    assert at_60["wall_clock_seconds"] == pytest.approx(expected_seconds / 2)
    assert at_60["devices_to_match_wall_clock"] == 512
    assert "halves" in body["summary"]


def test_an_estimate_from_a_model_and_a_token_budget(client: TestClient) -> None:
    flops = client.post("/v1/flops", json={"model": {"preset": "llama3-70b"}, "seq_len_tokens": 8192}).json()
    body = client.post(
        "/v1/estimates/training",
        json={"model": {"preset": "llama3-70b"}, "seq_len_tokens": 8192,
              "hardware": {"accelerator": "h100-sxm", "device_count": 1024}, "total_steps": 1000, "global_batch_tokens": 16_777_216,
              "mfu": 0.4},
    ).json()  # fmt: skip
    assert body["total_training_flops"] == pytest.approx(
        flops["training_flops_per_token"] * 1000 * 16_777_216
    )


@pytest.mark.parametrize(
    "change",
    [
        {"mfu": 1.5},
        {"mfu": 0},
        {"token_budget_tokens": None, "total_training_flops": None},
        {"hardware": {"accelerator": "h100-sxm", "device_count": -1}},
    ],
)
def test_bad_estimate_inputs_are_422_problems(client: TestClient, change: dict[str, object]) -> None:
    request: dict[str, object] = {
        "model": {"preset": "llama3-8b"}, "seq_len_tokens": 8192,
        "hardware": {"accelerator": "h100-sxm", "device_count": 8}, "token_budget_tokens": 1e12, "mfu": 0.4,
    }  # fmt: skip
    request.update(change)
    request = {key: value for key, value in request.items() if value is not None}
    if "total_training_flops" in change:
        request.pop("model")
    response = client.post("/v1/estimates/training", json=request)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"


def test_an_estimate_beyond_a_floats_range_is_a_422_naming_mfu(client: TestClient) -> None:
    # The 20-minute contract fuzz's case (a 500 before): a custom part of 1 GFLOP/s, 93M devices (now 1,048,576, the bound on a device count), MFU 5e-324.
    request = {
        "convention": "6n", "precision": "fp8", "mfu": 5e-324, "total_training_flops": 860328.2330290584,
        "hardware": {"device_count": 1_048_576, "custom": {"name": "x", "peak_tflops": {"bf16": 0.001, "fp8": 0.001}}},
        "price_per_device_hour": 5e-324,
    }  # fmt: skip
    response = client.post("/v1/estimates/training", json=request)
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"] == "body.mfu"
