"""POST /v1/advice/lr and /v1/advice/batch through the app, against reference/batch_and_scaling.md."""

from __future__ import annotations

import itertools
import math
import xml.etree.ElementTree as ET
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.domain.models import count_parameters, get_preset

LR = "/v1/advice/lr"
BATCH = "/v1/advice/batch"
SCHEDULES = "/v1/schedules/lr"
PROBLEM = "application/problem+json"
SVG_NS = "{http://www.w3.org/2000/svg}"


def kaplan_bcrit(loss: float) -> float:
    """Kaplan et al. 2020 Eq. 5.3 with B* = 2e8 tokens, α_B = 0.21 (computed here, independently)."""
    return 2e8 / loss ** (1 / 0.21)


def chinchilla_loss(params: float, tokens: float) -> float:
    """Hoffmann et al. 2022 Eq. 10, rounded constants."""
    return 1.69 + 406.4 / params**0.34 + 410.7 / tokens**0.28


def rules(answer: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["rule"]: r for r in answer["rules"]}


def advise_lr(client: TestClient, **body: Any) -> dict[str, Any]:
    response = client.post(LR, json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def advise_batch(client: TestClient, **body: Any) -> dict[str, Any]:
    response = client.post(BATCH, json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def problem_field(response: Any) -> str:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    field: str = response.json()["errors"][0]["field"]
    return field


# ---- LR advice ------------------------------------------------------------------------------------


def test_gpt3_175b_gets_its_published_peak_lr_of_0_6e_4(client: TestClient) -> None:
    answer = advise_lr(client, parameter_count=175e9)
    gpt3 = rules(answer)["gpt3"]
    assert gpt3["peak_lr"] == pytest.approx(0.6e-4, rel=1e-9)
    assert gpt3["applicable"] and "Brown et al. 2020" in gpt3["source"]
    # Kaplan Eq. D.1 goes negative at this size: no value, not applicable, and it says so.
    kaplan = rules(answer)["kaplan"]
    assert kaplan["peak_lr"] is None and not kaplan["applicable"]
    # With no budget the two size rules count: GPT-3's row and the published large runs' power law.
    practice = rules(answer)["practice"]
    assert practice["applicable"]
    assert answer["recommended_peak_lr"] == pytest.approx(math.sqrt(0.6e-4 * practice["peak_lr"]))
    assert answer["peak_lr_low"] == pytest.approx(practice["peak_lr_low"])


@pytest.mark.parametrize(("params", "lr"), [(125e6, 6.0e-4), (1.3e9, 2.0e-4), (13e9, 1.0e-4)])
def test_gpt3_rule_reproduces_table_2_1(client: TestClient, params: float, lr: float) -> None:
    assert rules(advise_lr(client, parameter_count=params))["gpt3"]["peak_lr"] == pytest.approx(lr, rel=1e-9)


def test_kaplan_rule_is_eq_d1(client: TestClient) -> None:
    kaplan = rules(advise_lr(client, parameter_count=1e9))["kaplan"]
    assert kaplan["peak_lr"] == pytest.approx(0.003239 - 0.0001395 * math.log(1e9), rel=1e-12)
    assert kaplan["applicable"]


@pytest.mark.parametrize(("flops", "lr", "batch"), [(1e20, 9.86e-4, 1.017e6), (1e23, 4.158e-4, 9.743e6)])
def test_deepseek_rule_reproduces_its_published_vectors(
    client: TestClient, flops: float, lr: float, batch: float
) -> None:
    answer = advise_lr(client, total_training_flops=flops)
    assert rules(answer)["deepseek"]["peak_lr"] == pytest.approx(lr, rel=2e-3)
    assert answer["suggested_batch_tokens"] == pytest.approx(batch, rel=2e-3)
    assert "DeepSeek" in answer["suggested_batch_source"]
    # With only a budget the size is the 20-tokens-per-parameter optimum, and the answer says so.
    assert answer["parameter_count"] == pytest.approx(math.sqrt(flops / 120))
    assert "20 tokens" in answer["parameter_count_basis"]


def test_deepseek_7b_from_its_dimensions_predicts_its_published_lr(client: TestClient) -> None:
    model = {"dimensions": {"n_layers": 30, "d_model": 4096, "n_heads": 32, "vocab_size": 102_400}}
    answer = advise_lr(client, model=model, token_budget_tokens=2.0e12, seq_len_tokens=4096)
    deepseek = rules(answer)["deepseek"]
    assert deepseek["peak_lr"] == pytest.approx(4.25e-4, rel=3e-3)  # the paper used 4.2e-4
    m = 72 * 30 * 4096**2 + 12 * 30 * 4096 * 4096
    assert answer["total_training_flops"] == pytest.approx(m * 2.0e12)
    assert "M·D" in deepseek["note"]


def test_the_recommendation_is_the_geometric_mean_of_the_applicable_rules(client: TestClient) -> None:
    answer = advise_lr(client, parameter_count=1.3e9, token_budget_tokens=26e9)
    used = [r["peak_lr"] for r in answer["rules"] if r["applicable"]]
    assert len(used) == 3
    assert answer["recommended_peak_lr"] == pytest.approx(math.prod(used) ** (1 / 3))
    assert (answer["peak_lr_low"], answer["peak_lr_high"]) == pytest.approx((min(used), max(used)))


def test_warmup_stays_within_0_1_to_1_percent_of_the_steps_and_says_why(client: TestClient) -> None:
    answer = advise_lr(
        client, parameter_count=1.3e9, token_budget_tokens=300e9, global_batch_tokens=1_048_576
    )
    steps = math.ceil(300e9 / 1_048_576)
    assert answer["total_steps"] == steps
    warmup = answer["warmup"]
    # GPT-3: 375M warmup tokens at 1M tokens per step = 358 steps, inside [0.1%, 1%] of 286,103 steps.
    assert warmup["warmup_steps"] == math.ceil(375e6 / 1_048_576)
    assert 0.001 <= warmup["warmup_fraction"] <= 0.01
    assert "375M" in warmup["reason"]


def test_the_floor_is_ten_percent_unless_asked(client: TestClient) -> None:
    default = advise_lr(client, parameter_count=1e9)
    assert default["min_lr_ratio"] == 0.1
    assert default["min_lr"] == pytest.approx(0.1 * default["recommended_peak_lr"])
    assert "10%" in default["floor_reason"]
    asked = advise_lr(client, parameter_count=1e9, min_lr_ratio=0.0)
    assert asked["min_lr"] == 0.0 and "as asked" in asked["floor_reason"]


def test_the_schedule_request_posts_to_the_schedules_endpoint(client: TestClient) -> None:
    answer = advise_lr(client, model={"preset": "llama3-8b"}, token_budget_tokens=1e12, seq_len_tokens=8192)
    body = answer["schedule_request"]
    assert body is not None
    response = client.post(SCHEDULES, json=body)
    assert response.status_code == 200, response.text
    summary = response.json()["summary"]
    assert summary["peak_lr"] == pytest.approx(answer["recommended_peak_lr"])
    assert summary["floor_lr"] == pytest.approx(answer["min_lr"])
    assert summary["warmup_steps"] == answer["warmup"]["warmup_steps"]
    assert summary["total_steps"] == answer["total_steps"]


def test_without_a_batch_the_steps_come_from_the_suggested_batch(client: TestClient) -> None:
    answer = advise_lr(client, parameter_count=1.3e9, token_budget_tokens=26e9)
    assert answer["batch_tokens"] == pytest.approx(answer["suggested_batch_tokens"])
    assert "suggested" in answer["batch_tokens_basis"]
    assert answer["total_steps"] == math.ceil(26e9 / answer["suggested_batch_tokens"])


def test_without_a_step_count_there_is_no_schedule_request_and_the_note_says_what_to_add(
    client: TestClient,
) -> None:
    answer = advise_lr(client, parameter_count=7e9)
    assert answer["schedule_request"] is None and answer["total_steps"] is None
    assert answer["warmup"]["warmup_steps"] is None
    assert "total_steps" in answer["schedule_note"]


def test_a_moe_model_is_sized_by_its_active_parameters(client: TestClient) -> None:
    counts = count_parameters(get_preset("mixtral-8x7b").spec)
    answer = advise_lr(client, model={"preset": "mixtral-8x7b"})
    assert answer["parameter_count"] == counts.active_per_token < counts.total
    assert "MoE" in answer["parameter_count_basis"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "body.parameter_count"),
        ({"token_budget_tokens": 1e12}, "body.parameter_count"),
        ({"parameter_count": 1e9, "model": {"preset": "llama3-8b"}}, "body.parameter_count"),
        ({"parameter_count": 0}, "body.parameter_count"),
        ({"parameter_count": 1e9, "min_lr_ratio": 1.5}, "body.min_lr_ratio"),
        ({"parameter_count": 1e9, "total_steps": 0}, "body.total_steps"),
        ({"model": {"preset": "llama-99b"}}, "body.model.preset"),
        ({"model": {}}, "body.model"),
    ],
)
def test_bad_lr_advice_requests_answer_422_naming_the_field(
    client: TestClient, body: dict[str, Any], field: str
) -> None:
    assert problem_field(client.post(LR, json=body)) == field


# ---- batch advice -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("loss", "tokens"), [(2, 7_371_465), (3, 1_069_114), (4, 271_693), (10, 3_460)])
def test_kaplan_critical_batch_reproduces_the_published_vectors(
    client: TestClient, loss: float, tokens: int
) -> None:
    answer = advise_batch(client, loss=loss, batch_tokens=524_288)
    critical = answer["critical_batch"]
    assert critical["batch_tokens"] == pytest.approx(tokens, abs=0.5)
    assert critical["model"] == "kaplan" and "Kaplan" in critical["source"]


def test_the_worked_example_at_loss_3_and_batch_2_to_the_19(client: TestClient) -> None:
    # S = 1e5 steps at B = 2^19, L = 3 → S_min = 32,903.7, C_min/C = 0.67096.
    tradeoff = advise_batch(client, loss=3, batch_tokens=2**19)["tradeoff"]
    assert 1e5 / tradeoff["steps_over_min"] == pytest.approx(32_903.7, rel=1e-5)
    assert 1 / tradeoff["data_over_min"] == pytest.approx(0.67096, rel=1e-4)
    assert tradeoff["regime"] == "below"
    # (S/S_min − 1)(E/E_min − 1) = 1
    assert (tradeoff["steps_over_min"] - 1) * (tradeoff["data_over_min"] - 1) == pytest.approx(1.0)


def test_at_the_critical_batch_doubling_cuts_a_quarter_of_the_steps_for_half_more_data(
    client: TestClient,
) -> None:
    answer = advise_batch(
        client,
        loss=3.0,
        batch_tokens=1_000_000,
        critical_batch_model="inverse_loss",
        calibration_loss=3.0,
        calibration_batch_tokens=1_000_000,
    )
    tradeoff = answer["tradeoff"]
    assert (tradeoff["steps_over_min"], tradeoff["data_over_min"]) == pytest.approx((2.0, 2.0))
    assert tradeoff["regime"] == "near"
    assert tradeoff["doubling_steps_cut_fraction"] == pytest.approx(0.25)
    assert tradeoff["doubling_extra_data_fraction"] == pytest.approx(0.5)
    assert "cut steps by 25.0%" in tradeoff["summary"] and "50.0% more data" in tradeoff["summary"]


@pytest.mark.parametrize(("batch", "regime"), [(100_000, "below"), (1_000_000, "near"), (5_000_000, "above")])
def test_the_regime_follows_the_ratio_to_the_critical_batch(
    client: TestClient, batch: int, regime: str
) -> None:
    answer = advise_batch(client, loss=3, batch_tokens=batch)
    assert answer["tradeoff"]["regime"] == regime


def test_inverse_loss_scales_the_calibration_point_by_one_over_the_loss(client: TestClient) -> None:
    answer = advise_batch(
        client,
        loss=2.0,
        batch_tokens=1_000_000,
        critical_batch_model="inverse_loss",
        calibration_loss=3.0,
        calibration_batch_tokens=1_000_000,
    )
    assert answer["critical_batch"]["batch_tokens"] == pytest.approx(1.5e6)


def test_minicpm_reproduces_its_optimal_batch_at_loss_2_5(client: TestClient) -> None:
    answer = advise_batch(client, loss=2.5, batch_tokens=1_000_000, critical_batch_model="minicpm")
    assert answer["critical_batch"]["batch_tokens"] == pytest.approx(3.98e6, rel=2e-3)


def test_the_noise_scale_reproduces_the_mccandlish_vector(client: TestClient) -> None:
    # |G|² = 1, tr Σ = 100, B_small = 32, B_big = 512 → |G_small|² = 4.125, |G_big|² = 1.1953125.
    readings = {
        "batch_small_tokens": 32,
        "batch_big_tokens": 512,
        "grad_norm_sq_small": [4.0, 4.25],  # a series, averaged before the ratio: 4.125
        "grad_norm_sq_big": 1.1953125,
    }
    answer = advise_batch(
        client, batch_tokens=1_000, critical_batch_model="noise_scale", gradient_noise=readings
    )
    noise = answer["noise_scale"]
    assert (noise["gradient_norm_sq"], noise["trace_sigma"]) == pytest.approx((1, 100))
    assert noise["b_simple_tokens"] == pytest.approx(100)
    assert answer["critical_batch"]["batch_tokens"] == pytest.approx(100)
    assert answer["tradeoff"]["regime"] == "above"
    assert answer["loss"] is None


def test_least_compute_picks_a_quarter_of_the_critical_batch(client: TestClient) -> None:
    # At B = B_crit/4: S/S_min = 5, E/E_min = 1.25.
    answer = advise_batch(client, loss=3, batch_tokens=2**20, objective="least_compute")
    rec = answer["recommendation"]
    assert rec["batch_tokens"] == pytest.approx(kaplan_bcrit(3) / 4)
    assert (rec["tradeoff"]["steps_over_min"], rec["tradeoff"]["data_over_min"]) == pytest.approx((5, 1.25))


def test_fewest_steps_stays_within_the_compute_overhead(client: TestClient) -> None:
    answer = advise_batch(
        client, loss=3, batch_tokens=2**20, objective="fewest_steps", max_compute_overhead=0.5
    )
    rec = answer["recommendation"]
    assert rec["batch_tokens"] == pytest.approx(0.5 * kaplan_bcrit(3))
    assert rec["tradeoff"]["data_over_min"] == pytest.approx(1.5)


def test_the_recommendation_is_whole_micro_steps_so_accumulation_is_exact(client: TestClient) -> None:
    answer = advise_batch(
        client,
        loss=3.0,
        batch_tokens=1_000_000,
        critical_batch_model="inverse_loss",
        calibration_loss=3.0,
        calibration_batch_tokens=4e6,
        seq_len_tokens=4096,
        micro_batch_sequences=2,
        data_parallel_size=64,
    )
    # One micro-step = 2 × 4096 × 64 = 524,288 tokens; B_crit = 4e6 = 7.63 micro-steps → nearest 8.
    assert answer["recommendation"]["batch_tokens"] == 8 * 524_288
    assert answer["recommendation"]["granularity_tokens"] == 524_288
    acc = answer["gradient_accumulation"]
    assert acc["accumulation_steps"] == 8
    assert acc["global_batch_sequences"] == 8 * 2 * 64
    assert acc["global_batch_tokens"] == 8 * 2 * 4096 * 64
    assert acc["overshoot_fraction"] == 0


def test_the_loss_is_predicted_from_the_model_and_tokens_seen(client: TestClient) -> None:
    params = count_parameters(get_preset("llama3-8b").spec).total
    answer = advise_batch(client, model={"preset": "llama3-8b"}, tokens_seen=200e9, batch_tokens=4_194_304)
    expected = chinchilla_loss(params, 200e9)
    assert answer["loss"] == pytest.approx(expected, rel=1e-12)
    assert "predicted" in answer["loss_source"]
    assert answer["critical_batch"]["batch_tokens"] == pytest.approx(kaplan_bcrit(expected))


def _ramp_body() -> dict[str, Any]:
    return {
        "model": {"preset": "llama3-8b"},
        "tokens_seen": 200e9,
        "global_batch_tokens": 4_194_304,
        "seq_len_tokens": 8192,
        "data_parallel_size": 64,
        "ramp": {"token_budget_tokens": 1e12},
    }


def test_the_batch_ramp_doubles_where_the_critical_batch_reaches_the_next_batch(client: TestClient) -> None:
    params = count_parameters(get_preset("llama3-8b").spec).total
    ramp = advise_batch(client, **_ramp_body())["ramp"]
    phases = ramp["phases"]
    batches = [p["batch_tokens"] for p in phases]
    # The start: 1/32 of the final one, but at least one sequence per data-parallel rank (524,288); it
    # doubles at once while B_crit at the fit's first token count (5e9) is already above the double.
    start = max(4_194_304 / 32, 8192 * 64)
    early = kaplan_bcrit(chinchilla_loss(params, 5e9))
    assert batches[0] == start * 2 ** math.floor(math.log2(early / start)) and batches[-1] == 4_194_304
    assert all(b2 == 2 * b1 for b1, b2 in itertools.pairwise(batches))
    assert phases[0]["start_tokens"] == 0 and phases[-1]["end_tokens"] == 1e12
    for before, after in itertools.pairwise(phases):
        assert after["start_tokens"] == before["end_tokens"]
    for phase in phases:
        assert phase["steps"] == math.ceil(
            round((phase["end_tokens"] - phase["start_tokens"]) / phase["batch_tokens"], 9)
        )
    for phase in phases[1:]:
        loss = chinchilla_loss(params, phase["start_tokens"])
        assert phase["loss_at_start"] == pytest.approx(loss, rel=1e-9)
        assert kaplan_bcrit(loss) == pytest.approx(phase["batch_tokens"], rel=1e-6)
    assert ramp["total_steps"] == sum(p["steps"] for p in phases)
    assert ramp["constant_batch_tokens"] == batches[-1]
    assert ramp["constant_batch_steps"] == math.ceil(1e12 / batches[-1])


def test_without_a_layout_the_ramp_starts_at_a_32nd_of_the_final_batch(client: TestClient) -> None:
    body = {
        "model": {"preset": "llama3-8b"},
        "loss": 2.5,
        "global_batch_tokens": 4_194_304,
        "ramp": {"token_budget_tokens": 1e12},
    }
    ramp = advise_batch(client, **body)["ramp"]
    # The start is 4,194,304 / 32; it doubles at once while B_crit at the fit's first 5e9 tokens is
    # above the double, so the first phase runs the last doubling of the start not above B_crit.
    params = count_parameters(get_preset("llama3-8b").spec).total
    early = kaplan_bcrit(chinchilla_loss(params, 5e9))
    start = 4_194_304 / 32
    assert ramp["phases"][0]["batch_tokens"] == start * 2 ** math.floor(math.log2(early / start))
    assert ramp["granularity_tokens"] == 1
    assert "Kaplan" in ramp["critical_batch_rule"] and "Hoffmann" in ramp["loss_predictor"]


def test_a_ramp_under_the_noise_scale_scales_the_measured_batch_with_one_over_the_loss(
    client: TestClient,
) -> None:
    readings = {
        "batch_small_tokens": 32,
        "batch_big_tokens": 512,
        "grad_norm_sq_small": 4.125,
        "grad_norm_sq_big": 1.1953125,
    }
    body = {
        "model": {"preset": "llama3-8b"},
        "loss": 2.5,
        "global_batch_tokens": 1024,
        "critical_batch_model": "noise_scale",
        "gradient_noise": readings,
        "ramp": {"token_budget_tokens": 1e9, "start_batch_tokens": 8},
    }
    ramp = advise_batch(client, **body)["ramp"]
    for phase in ramp["phases"][1:]:
        # B_crit = 100 tokens at L = 2.5, ∝ 1/L
        assert 100 * 2.5 / phase["loss_at_start"] == pytest.approx(phase["batch_tokens"], rel=1e-6)
    assert "1/L" in ramp["critical_batch_rule"]


def test_the_ramp_draws_as_svg_and_png(client: TestClient) -> None:
    svg = client.post(BATCH, json=_ramp_body(), headers={"Accept": "image/svg+xml"})
    assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml")
    root = ET.fromstring(svg.text)
    assert root.tag == f"{SVG_NS}svg"
    texts = {"".join(t.itertext()) for t in root.iter(f"{SVG_NS}text")}
    assert {"batch (ramp)", "critical batch"} <= texts
    title = root.find(f"{SVG_NS}title")
    assert title is not None and title.text is not None and title.text.startswith("Batch ramp")
    png = client.post(BATCH, json=_ramp_body(), headers={"Accept": "image/png"})
    assert png.status_code == 200 and png.content[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_chart_without_a_ramp_is_a_422_naming_ramp(client: TestClient) -> None:
    response = client.post(
        BATCH, json={"loss": 3, "global_batch_tokens": 2**19}, headers={"Accept": "image/png"}
    )
    assert problem_field(response) == "body.ramp"
    assert "ramp" in response.json()["detail"]


def test_an_unsupported_accept_is_a_406(client: TestClient) -> None:
    response = client.post(
        BATCH, json={"loss": 3, "global_batch_tokens": 2**19}, headers={"Accept": "text/csv"}
    )
    assert response.status_code == 406
    assert response.json()["type"] == "/problems/not-acceptable"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"critical_batch_model": "inverse_loss"}, "body.calibration_loss"),
        ({"critical_batch_model": "inverse_loss", "calibration_loss": 3.0}, "body.calibration_batch_tokens"),
        ({"critical_batch_model": "noise_scale"}, "body.gradient_noise"),
        ({"loss": None}, "body.loss"),
        ({"loss": None, "model": {"preset": "llama3-8b"}}, "body.tokens_seen"),
        ({"tokens_seen": 1e9}, "body.model"),
        ({"ramp": {"token_budget_tokens": 1e12}}, "body.model"),
        ({"micro_batch_sequences": 4}, "body.seq_len_tokens"),
        ({"loss": -1.0}, "body.loss"),
        ({"global_batch_tokens": 0}, "body.global_batch_tokens"),
        ({"critical_batch_model": "linear"}, "body.critical_batch_model"),
        ({"objective": "fewest_steps", "max_compute_overhead": 0}, "body.max_compute_overhead"),
        (
            {
                "critical_batch_model": "noise_scale",
                "gradient_noise": {
                    "batch_small_tokens": 512,
                    "batch_big_tokens": 32,
                    "grad_norm_sq_small": 4,
                    "grad_norm_sq_big": 1,
                },
            },
            "body.gradient_noise.batch_big_tokens",
        ),
        (
            {
                "critical_batch_model": "noise_scale",
                "gradient_noise": {
                    "batch_small_tokens": 32,
                    "batch_big_tokens": 512,
                    "grad_norm_sq_small": [],
                    "grad_norm_sq_big": 1,
                },
            },
            "body.gradient_noise.grad_norm_sq_small",
        ),
        (
            {
                "model": {"preset": "llama3-8b"},
                "ramp": {"token_budget_tokens": 1e12, "start_batch_tokens": 2e6, "max_batch_tokens": 1e6},
            },
            "body.ramp.max_batch_tokens",
        ),
        ({"model": {"preset": "no-such-model"}, "tokens_seen": 1e9}, "body.model.preset"),
    ],
)
def test_bad_batch_requests_answer_422_naming_the_field(
    client: TestClient, change: dict[str, Any], field: str
) -> None:
    body = {"loss": 3.0, "global_batch_tokens": 1_048_576, **change}
    body = {key: value for key, value in body.items() if value is not None}
    assert problem_field(client.post(BATCH, json=body)) == field


def test_readings_where_noise_swamps_the_difference_are_an_implausible_result(client: TestClient) -> None:
    readings = {
        "batch_small_tokens": 32,
        "batch_big_tokens": 512,
        "grad_norm_sq_small": 1.0,
        "grad_norm_sq_big": 1.5,
    }
    response = client.post(
        BATCH,
        json={"global_batch_tokens": 1e6, "critical_batch_model": "noise_scale", "gradient_noise": readings},
    )
    assert problem_field(response) == "body.gradient_noise.grad_norm_sq_big"
    assert response.json()["type"] == "/problems/implausible-result"


# ---- the contract ---------------------------------------------------------------------------------


def _examples(client: TestClient, path: str) -> list[dict[str, Any]]:
    spec = client.get("/openapi.json").json()
    ref = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    examples: list[dict[str, Any]] = spec["components"]["schemas"][ref.rsplit("/", 1)[1]]["examples"]
    return examples


@pytest.mark.parametrize("path", [LR, BATCH])
def test_every_request_example_in_the_openapi_answers_200(client: TestClient, path: str) -> None:
    examples = _examples(client, path)
    assert len(examples) >= 3
    for example in examples:
        response = client.post(path, json=example)
        assert response.status_code == 200, (example, response.text)


def test_the_operations_have_readable_ids_and_the_batch_charts_are_documented(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert paths[LR]["post"]["operationId"] == "advise_learning_rate"
    batch = paths[BATCH]["post"]
    assert batch["operationId"] == "advise_batch_size"
    assert {"image/svg+xml", "image/png"} <= set(batch["responses"]["200"]["content"])
    assert "406" in batch["responses"]


# ---- issue 19 / 17: the ramp's and the recommendation's traps ---------------------------------


def test_a_ramp_over_one_token_answers_instead_of_a_500(client: TestClient) -> None:
    body = {**_ramp_body(), "ramp": {"token_budget_tokens": 1}}
    response = client.post(BATCH, json=body)
    assert response.status_code in (200, 422), response.text
    if response.status_code == 422:
        assert problem_field(response) == "body.ramp.tokens"
    else:
        assert response.json()["ramp"]["total_steps"] == 1
    chart = client.post(BATCH, json=body, headers={"Accept": "image/svg+xml"})
    assert chart.status_code in (200, 422), chart.text


def test_the_ramp_s_saving_is_against_the_target_batch_and_named(client: TestClient) -> None:
    ramp = advise_batch(client, **_ramp_body())["ramp"]
    assert ramp["constant_batch_tokens"] == 4_194_304
    assert ramp["constant_batch_steps"] == math.ceil(1e12 / 4_194_304)
    assert ramp["steps_saved"] == ramp["constant_batch_steps"] - ramp["total_steps"] < 0
    assert "4,194,304" in ramp["comparison"]


def test_no_ramp_phase_shows_the_loss_fit_evaluated_at_zero_tokens(client: TestClient) -> None:
    params = count_parameters(get_preset("llama3-8b").spec).total
    ramp = advise_batch(client, **_ramp_body())["ramp"]
    first = ramp["phases"][0]
    assert ramp["loss_evaluated_from_tokens"] == 5e9
    assert first["loss_at_start"] == pytest.approx(chinchilla_loss(params, 5e9), rel=1e-12)
    assert first["critical_batch_tokens_at_start"] == pytest.approx(
        kaplan_bcrit(chinchilla_loss(params, 5e9))
    )


def test_fewest_steps_is_rounded_to_the_layout_and_still_meets_the_compute_cap(client: TestClient) -> None:
    # B_crit(3) = 1,069,114; cap 0.5 → at most 534,557 tokens. One micro-step of the layout is
    # 2 × 4096 × 16 = 131,072 tokens: the largest runnable batch under the cap is 4 × 131,072 = 524,288.
    answer = advise_batch(
        client,
        loss=3,
        batch_tokens=2**20,
        objective="fewest_steps",
        max_compute_overhead=0.5,
        seq_len_tokens=4096,
        micro_batch_sequences=2,
        data_parallel_size=16,
    )
    rec = answer["recommendation"]
    assert rec["batch_tokens"] == 524_288 and rec["granularity_tokens"] == 131_072
    assert rec["meets_caps"] is True
    assert rec["tradeoff"]["data_over_min"] - 1 <= 0.5
    acc = answer["gradient_accumulation"]
    assert acc["global_batch_tokens"] == 524_288 and acc["overshoot_fraction"] == 0
    assert acc["global_batch_tokens"] / kaplan_bcrit(3) <= 0.5


def test_a_cap_no_runnable_batch_meets_is_said_so(client: TestClient) -> None:
    # One micro-step is 8 × 8192 × 64 = 4,194,304 tokens > 0.5 × B_crit(3): no runnable batch meets it.
    answer = advise_batch(
        client,
        loss=3,
        batch_tokens=2**22,
        objective="fewest_steps",
        max_compute_overhead=0.5,
        seq_len_tokens=8192,
        micro_batch_sequences=8,
        data_parallel_size=64,
    )
    rec = answer["recommendation"]
    assert rec["batch_tokens"] == 4_194_304 and rec["meets_caps"] is False
    assert "max_compute_overhead" in rec["rule"]


def test_a_loss_predicted_before_the_fit_s_first_tokens_is_held_there_and_said_so(client: TestClient) -> None:
    params = count_parameters(get_preset("llama3-8b").spec).total
    answer = advise_batch(client, model={"preset": "llama3-8b"}, tokens_seen=1, batch_tokens=4_194_304)
    assert answer["loss"] == pytest.approx(chinchilla_loss(params, 5e9), rel=1e-12)  # not 412 nats
    assert "5e+09" in answer["loss_source"]


@pytest.mark.parametrize("cap", ["max_compute_overhead", "max_steps_overhead"])
def test_a_subnormal_overhead_cap_is_refused_naming_it_not_a_500(client: TestClient, cap: str) -> None:
    """The contract fuzz sent 5e-324: B_crit / cap overflowed to infinity and rounding it was a 500."""
    body = {"loss": 2.5, "global_batch_tokens": 1024, "objective": "least_compute", cap: 5e-324}
    response = client.post("/v1/advice/batch", json=body)
    assert problem_field(response) == f"body.{cap}"


def test_the_smallest_caps_on_a_tiny_model_are_answered(client: TestClient) -> None:
    body = {
        "model": {"dimensions": {"d_model": 2, "n_heads": 1, "n_layers": 1, "vocab_size": 1}},
        "loss_fit": "chinchilla_rounded",
        "tokens_seen": 1,
        "global_batch_tokens": 1,
        "seq_len_tokens": 1,
        "micro_batch_sequences": 1,
        "objective": "least_compute",
        "max_steps_overhead": 1e-6,
        "max_compute_overhead": 1e-6,
        "ramp": {"token_budget_tokens": 1},
    }
    response = client.post("/v1/advice/batch", json=body)
    assert response.status_code in (200, 422), response.text


def test_gradient_norms_near_the_float_limit_are_refused_naming_them_not_a_500(client: TestClient) -> None:
    """The contract fuzz sent squared norms of 6e307: the mean and B·|G|² overflowed (a 500)."""
    body = {
        "loss": 1.9,
        "global_batch_tokens": 1024,
        "critical_batch_model": "noise_scale",
        "gradient_noise": {
            "batch_small_tokens": 1024,
            "batch_big_tokens": 4096,
            "grad_norm_sq_small": [1.3e308, 1.0e308],
            "grad_norm_sq_big": [6.0e307, 5.3e307],
        },
    }
    assert problem_field(client.post("/v1/advice/batch", json=body)).startswith("body.gradient_noise")
    body["gradient_noise"]["grad_norm_sq_small"] = [1.0e307]
    body["gradient_noise"]["grad_norm_sq_big"] = [6.0e306]
    assert problem_field(client.post("/v1/advice/batch", json=body)).startswith("body.gradient_noise")
