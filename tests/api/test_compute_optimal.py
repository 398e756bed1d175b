"""POST /v1/compute-optimal through the app, against reference/batch_and_scaling.md."""

from __future__ import annotations

import math
from typing import Any

import pytest
from fastapi.testclient import TestClient

PATH = "/v1/compute-optimal"
PROBLEM = "application/problem+json"
GOPHER_BUDGET = 5.76e23
H100_SXM_BF16_DENSE = 989.4e12


def chinchilla_optimum(
    c: float, e: float, a: float, b: float, alpha: float, beta: float
) -> tuple[float, float]:
    """Hoffmann et al. 2022 Eq. 4, computed here independently of the service."""
    g = (alpha * a / (beta * b)) ** (1 / (alpha + beta))
    n = g * (c / 6) ** (beta / (alpha + beta))
    d = (c / 6) ** (alpha / (alpha + beta)) / g
    return n, d


def rounded_loss(n: float, d: float) -> float:
    return 1.69 + 406.4 / n**0.34 + 410.7 / d**0.28


def optimal(client: TestClient, **body: Any) -> dict[str, Any]:
    response = client.post(PATH, json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def problem_field(response: Any) -> str:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    field: str = response.json()["errors"][0]["field"]
    return field


def test_the_default_is_the_consensus_of_the_consistent_fits_at_the_gopher_budget(client: TestClient) -> None:
    # Besiroglu et al. 2024: approach 1, their refit and 20 tokens/param agree on 67-72B and 18-21
    # tokens/param at 5.76e23; the rounded Approach 3 (32B, 93 tokens/param) is the outlier.
    answer = optimal(client, total_training_flops=GOPHER_BUDGET)
    result = answer["result"]
    assert answer["fit"] == "consensus" and result["rule"] == "consensus"
    assert 67e9 <= result["parameter_count"] <= 72e9
    assert 18 <= result["tokens_per_parameter"] <= 21
    assert 6 * result["parameter_count"] * result["tokens"] == pytest.approx(GOPHER_BUDGET)
    assert "epoch" in result["note"] and "chinchilla_approach1" in result["note"]


def test_chinchilla_rounded_at_the_gopher_budget_gives_32_billion_parameters(client: TestClient) -> None:
    answer = optimal(client, total_training_flops=GOPHER_BUDGET, fit="chinchilla")
    result = answer["result"]
    assert answer["fit"] == "chinchilla" and result["rule"] == "chinchilla"
    assert result["parameter_count"] == pytest.approx(32.2e9, rel=2e-3)
    n, d = chinchilla_optimum(GOPHER_BUDGET, 1.69, 406.4, 410.7, 0.34, 0.28)
    assert (result["parameter_count"], result["tokens"]) == pytest.approx((n, d), rel=1e-9)
    assert result["tokens_per_parameter"] == pytest.approx(d / n)
    assert result["predicted_loss"] == pytest.approx(rounded_loss(n, d), rel=1e-12)
    assert [c["constants"] for c in answer["constants"]] == ["rounded"]
    assert answer["constants"][0]["alpha"] == 0.34


def test_unrounded_constants_give_the_papers_40_billion(client: TestClient) -> None:
    answer = optimal(client, total_training_flops=GOPHER_BUDGET, fit="chinchilla_unrounded")
    assert answer["result"]["parameter_count"] == pytest.approx(40e9, rel=0.02)
    assert answer["constants"][0]["constants"] == "unrounded"
    assert answer["constants"][0]["alpha"] == 0.3392


def test_the_epoch_refit_reproduces_its_vector_at_1e21(client: TestClient) -> None:
    result = optimal(client, total_training_flops=1e21, fit="epoch")["result"]
    assert result["parameter_count"] == pytest.approx(2.778e9, rel=1e-3)
    assert result["tokens"] == pytest.approx(59.99e9, rel=1e-3)


def test_twenty_tokens_per_parameter_is_the_square_root_of_c_over_120(client: TestClient) -> None:
    result = optimal(client, total_training_flops=GOPHER_BUDGET, fit="twenty_tokens_per_param")["result"]
    assert result["parameter_count"] == pytest.approx(math.sqrt(GOPHER_BUDGET / 120))
    assert result["tokens_per_parameter"] == 20
    assert result["loss_fit"] == "chinchilla_rounded"


def test_deepseek_has_no_loss_fit_and_says_params_are_an_approximation(client: TestClient) -> None:
    result = optimal(client, total_training_flops=1e23, fit="deepseek")["result"]
    assert result["tokens"] == pytest.approx(5.8316 * 1e23**0.4757)
    assert result["parameter_count"] == pytest.approx(0.1715 * 1e23**0.5243 / 6)
    assert result["predicted_loss"] is None and result["loss_fit"] is None
    assert "approximation" in result["note"]


def test_all_fits_come_side_by_side_with_their_constants(client: TestClient) -> None:
    answer = optimal(client, total_training_flops=GOPHER_BUDGET, fit="all")
    rules = [r["rule"] for r in answer["results"]]
    assert rules == [
        "consensus",
        "chinchilla",
        "chinchilla_unrounded",
        "epoch",
        "chinchilla_approach1",
        "twenty_tokens_per_param",
        "deepseek",
    ]
    assert answer["result"] == answer["results"][0]
    assert {c["constants"] for c in answer["constants"]} == {"rounded", "unrounded", "refit"}
    # Table 3 (Approach 1) puts 67B at this budget.
    approach1 = answer["results"][4]
    assert approach1["parameter_count"] == pytest.approx(67e9, rel=0.05)


def test_the_iso_flop_curve_spends_the_budget_and_bottoms_out_at_the_optimum(client: TestClient) -> None:
    answer = optimal(client, total_training_flops=1e22, iso_flop_points=21, fit="chinchilla")
    curve = answer["iso_flop_curve"]
    points = curve["points"]
    assert len(points) == 21 and curve["loss_fit"] == "chinchilla_rounded"
    for p in points:
        assert 6 * p["parameter_count"] * p["tokens"] == pytest.approx(1e22)
        assert p["loss"] == pytest.approx(rounded_loss(p["parameter_count"], p["tokens"]))
    lowest = min(points, key=lambda p: p["loss"])
    assert lowest is points[10]
    assert lowest["parameter_count"] == pytest.approx(answer["result"]["parameter_count"])
    assert points[0]["parameter_count"] == pytest.approx(answer["result"]["parameter_count"] / 10)


def test_a_hardware_budget_is_devices_times_dense_peak_times_mfu_times_seconds(client: TestClient) -> None:
    answer = optimal(
        client,
        hardware={"accelerator": "h100-sxm", "device_count": 1024},
        wall_clock_hours=720,
        mfu=0.4,
        fit="chinchilla",
    )
    budget = answer["budget"]
    expected = 1024 * H100_SXM_BF16_DENSE * 0.4 * 720 * 3600
    assert budget["total_training_flops"] == pytest.approx(expected)
    assert budget["basis"] == "hardware" and budget["precision"] == "bf16"
    assert budget["peak_flops_per_device"] == pytest.approx(H100_SXM_BF16_DENSE)
    assert budget["device_hours"] == 1024 * 720
    n, _ = chinchilla_optimum(expected, 1.69, 406.4, 410.7, 0.34, 0.28)
    assert answer["result"]["parameter_count"] == pytest.approx(n)


def test_mfu_from_30_to_60_percent_doubles_the_compute(client: TestClient) -> None:
    answer = optimal(
        client, hardware={"accelerator": "h100-sxm", "device_count": 256}, wall_clock_hours=500, mfu=0.45
    )
    scenarios = {s["mfu"]: s for s in answer["at_other_mfus"]}
    assert sorted(scenarios) == [0.3, 0.4, 0.45, 0.5, 0.6]
    assert scenarios[0.6]["total_training_flops"] / scenarios[0.3]["total_training_flops"] == pytest.approx(
        2.0
    )
    assert scenarios[0.45]["compute_over_given"] == pytest.approx(1.0)
    sizes = [scenarios[m]["parameter_count"] for m in sorted(scenarios)]
    losses = [scenarios[m]["predicted_loss"] for m in sorted(scenarios)]
    assert sizes == sorted(sizes) and losses == sorted(losses, reverse=True)


def test_a_flops_budget_has_no_mfu_scenarios(client: TestClient) -> None:
    assert optimal(client, total_training_flops=1e22)["at_other_mfus"] is None


def test_a_custom_part_uses_its_own_peak(client: TestClient) -> None:
    answer = optimal(
        client,
        hardware={"custom": {"name": "my-npu", "peak_tflops": {"bf16": 400}}, "count": 8},
        wall_clock_hours=10,
        mfu=0.5,
    )
    assert answer["budget"]["total_training_flops"] == pytest.approx(8 * 400e12 * 0.5 * 10 * 3600)
    assert answer["budget"]["accelerator"] == "my-npu"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "body.total_training_flops"),
        (
            {"total_training_flops": 1e22, "hardware": {"accelerator": "h100-sxm", "device_count": 8}},
            "body.total_training_flops",
        ),
        ({"hardware": {"accelerator": "h100-sxm", "device_count": 8}, "wall_clock_hours": 10}, "body.mfu"),
        ({"hardware": {"accelerator": "h100-sxm", "device_count": 8}, "mfu": 0.4}, "body.wall_clock_hours"),
        ({"total_training_flops": 1e22, "mfu": 0.4}, "body.mfu"),
        (
            {"hardware": {"accelerator": "h100-sxm", "device_count": 8}, "wall_clock_hours": 10, "mfu": 1.5},
            "body.mfu",
        ),
        (
            {"hardware": {"accelerator": "h100-sxm", "device_count": 8}, "wall_clock_hours": 10, "mfu": 0},
            "body.mfu",
        ),
        ({"total_training_flops": -1}, "body.total_training_flops"),
        ({"total_training_flops": 1e22, "fit": "kaplan"}, "body.fit"),
        ({"total_training_flops": 1e22, "iso_flop_points": 2}, "body.iso_flop_points"),
        (
            {"hardware": {"accelerator": "h900-sxm", "device_count": 8}, "wall_clock_hours": 10, "mfu": 0.4},
            "body.hardware.accelerator",
        ),
        (
            {
                "hardware": {"accelerator": "a100-sxm4-80gb", "device_count": 8},
                "wall_clock_hours": 10,
                "mfu": 0.4,
                "precision": "fp8",
            },
            "body.precision",
        ),
    ],
)
def test_bad_budgets_answer_422_naming_the_field(
    client: TestClient, body: dict[str, Any], field: str
) -> None:
    assert problem_field(client.post(PATH, json=body)) == field


def test_an_unknown_accelerator_is_an_unknown_reference_with_close_matches(client: TestClient) -> None:
    body = {"hardware": {"accelerator": "h100-sxn", "device_count": 8}, "wall_clock_hours": 10, "mfu": 0.4}
    problem = client.post(PATH, json=body).json()
    assert problem["type"] == "/problems/unknown-reference"
    assert "h100-sxm" in problem.get("close_matches", [])


def test_a_precision_the_part_lacks_is_an_unsupported_precision_problem(client: TestClient) -> None:
    body = {
        "hardware": {"accelerator": "a100-sxm4-80gb", "device_count": 8},
        "wall_clock_hours": 10,
        "mfu": 0.4,
        "precision": "fp8",
    }
    assert client.post(PATH, json=body).json()["type"] == "/problems/unsupported-precision"


def test_every_request_example_in_the_openapi_answers_200(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    operation = spec["paths"][PATH]["post"]
    assert operation["operationId"] == "compute_optimal_size"
    ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    examples = spec["components"]["schemas"][ref.rsplit("/", 1)[1]]["examples"]
    assert len(examples) >= 3
    for example in examples:
        response = client.post(PATH, json=example)
        assert response.status_code == 200, (example, response.text)
