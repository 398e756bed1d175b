"""POST /v1/schedules/lr through the app, against the vectors of reference/schedules.md."""

from __future__ import annotations

import csv
import io
import math
import xml.etree.ElementTree as ET
from typing import Any

import pytest
from fastapi.testclient import TestClient

PATH = "/v1/schedules/lr"
PROBLEM = "application/problem+json"
SVG_NS = "{http://www.w3.org/2000/svg}"
P, W, T = 10.0, 2, 10


def post(client: TestClient, body: dict[str, Any], accept: str | None = None) -> Any:
    headers = {"Accept": accept} if accept else {}
    return client.post(PATH, json=body, headers=headers)


def lrs(client: TestClient, steps: list[int], **schedule: Any) -> list[float]:
    body = {"peak_lr": P, "warmup_steps": W, "total_steps": T, "steps": steps, **schedule}
    response = post(client, body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["answered"] == "steps"
    assert [p["step"] for p in answer["points"]] == steps
    return [p["lr"] for p in answer["points"]]


def assert_vector(got: list[float], expected: list[float], tol: float = 1e-6) -> None:
    assert len(got) == len(expected)
    for step, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert g == pytest.approx(e, rel=tol, abs=tol), f"step {step}: {g} != {e}"


def problem_field(response: Any) -> str:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    field: str = response.json()["errors"][0]["field"]
    return field


# ---- published vectors (P = 10, W = 2, T = 10) -------------------------------------------------


def test_transformers_cosine_matches_the_published_vector_and_rises_again_after_the_end(
    client: TestClient,
) -> None:
    expected = [0, 5, 10, 9.619398, 8.535534, 6.913417, 5, 3.086583, 1.464466, 0.380602, 0, 0.380602]
    assert_vector(lrs(client, list(range(12)), kind="cosine"), expected)


def test_cosine_with_a_floor_of_ten_percent_matches_the_published_vector(client: TestClient) -> None:
    expected = [0, 5, 10, 9.657458, 8.681981, 7.222075, 5.5, 3.777925, 2.318019, 1.342542, 1]
    assert_vector(lrs(client, list(range(11)), kind="cosine_with_min_lr", min_lr_ratio=0.1), expected)


def test_an_absolute_floor_gives_the_same_vector_as_the_ratio(client: TestClient) -> None:
    by_ratio = lrs(client, list(range(11)), kind="cosine_with_min_lr", min_lr_ratio=0.1)
    by_value = lrs(client, list(range(11)), kind="cosine_with_min_lr", min_lr=1.0)
    assert_vector(by_value, by_ratio, tol=1e-12)


def test_linear_decays_to_zero_at_the_end(client: TestClient) -> None:
    expected = [0, 5, 10, 8.75, 7.5, 6.25, 5, 3.75, 2.5, 1.25, 0]
    assert_vector(lrs(client, list(range(11)), kind="linear"), expected)


def test_constant_with_warmup_is_accepted_under_its_transformers_name(client: TestClient) -> None:
    got = lrs(client, list(range(10)), kind="constant_with_warmup", warmup_steps=4)
    assert_vector(got, [0, 2.5, 5, 7.5, 10, 10, 10, 10, 10, 10])


def test_polynomial_of_power_two_matches_the_published_vector(client: TestClient) -> None:
    expected = [0, 5, 10, 7.656, 5.625, 3.906, 2.5, 1.406, 0.625, 0.156]
    assert_vector(lrs(client, list(range(10)), kind="polynomial", power=2), expected, tol=1e-3)


def test_inverse_square_root_matches_the_published_vector(client: TestClient) -> None:
    expected = [0, 5, 10, 8.165, 7.071, 6.325, 5.774, 5.345, 5, 4.714]
    assert_vector(lrs(client, list(range(10)), kind="inverse_sqrt"), expected, tol=1e-3)


def test_wsd_with_linear_decay_matches_the_published_vector(client: TestClient) -> None:
    got = lrs(
        client,
        list(range(11)),
        kind="warmup_stable_decay",
        stable_steps=4,
        decay_steps=4,
        decay_shape="linear",
    )
    assert_vector(got, [0, 5, 10, 10, 10, 10, 10, 7.5, 5, 2.5, 0])


def test_wsd_with_one_minus_sqrt_decay_warms_up_from_the_floor(client: TestClient) -> None:
    got = lrs(
        client,
        list(range(11)),
        kind="wsd",
        stable_steps=4,
        decay_steps=4,
        decay_shape="1-sqrt",
        min_lr_ratio=0.1,
    )
    assert_vector(got, [1, 5.5, 10, 10, 10, 10, 10, 5.5, 3.636039, 2.205771, 1])


def test_wsd_derives_the_stable_phase_from_the_total(client: TestClient) -> None:
    body = {
        "kind": "warmup_stable_decay",
        "peak_lr": P,
        "warmup_steps": W,
        "total_steps": T,
        "decay_steps": 4,
    }
    answer = post(client, body).json()
    assert answer["summary"]["stable_steps"] == T - W - 4
    assert [(p["name"], p["start_step"], p["end_step"]) for p in answer["phases"]] == [
        ("warmup", 0, 2),
        ("stable", 2, 6),
        ("decay", 6, 10),
    ]


def test_optax_semantics_clamp_at_the_end_value_after_the_run(client: TestClient) -> None:
    got = lrs(client, [9, 10, 11, 50], kind="cosine_with_min_lr", min_lr_ratio=0.1, semantics="optax")
    assert_vector(got, [1.342542, 1, 1, 1])


def test_past_end_hold_stops_the_cosine_from_rising_again(client: TestClient) -> None:
    body = {
        "kind": "cosine",
        "peak_lr": P,
        "warmup_steps": W,
        "total_steps": T,
        "steps": [11],
        "past_end": "hold",
    }
    answer = post(client, body).json()
    assert answer["points"][0]["lr"] == pytest.approx(0.0, abs=1e-12)
    assert "holds" in answer["summary"]["past_end_note"]


def test_pytorch_cosine_is_periodic_past_the_end_and_starts_its_warmup_above_zero(client: TestClient) -> None:
    got = lrs(client, [0, 10, 11], kind="cosine", semantics="pytorch", warmup_start_ratio=0.1)
    assert got[0] == pytest.approx(1.0)
    assert got[2] > got[1]


def test_the_reference_cosine_with_floor_at_peak_3e_4_matches_to_nine_digits(client: TestClient) -> None:
    body = {
        "kind": "cosine_with_min_lr",
        "peak_lr": 3e-4,
        "warmup_steps": 100,
        "total_steps": 1000,
        "min_lr_ratio": 0.1,
        "steps": [101, 550, 999, 1000],
    }
    got = [p["lr"] for p in post(client, body).json()["points"]]
    assert_vector(got, [2.999991775e-4, 1.65e-4, 3.000082247e-5, 3e-5], tol=1e-12)
    assert got[0] == pytest.approx(2.999991775e-4, rel=1e-9)


def test_a_warmup_fraction_is_rounded_up_to_whole_steps(client: TestClient) -> None:
    body = {"kind": "cosine", "peak_lr": 1e-3, "total_steps": 999, "warmup_fraction": 0.05, "points": 10}
    answer = post(client, body).json()
    assert answer["summary"]["warmup_steps"] == math.ceil(999 * 0.05)


# ---- the summary ---------------------------------------------------------------------------------


def test_the_summary_sums_the_learning_rates_of_the_run(client: TestClient) -> None:
    cosine = {"kind": "cosine", "peak_lr": P, "warmup_steps": W, "total_steps": T, "points": 11}
    s = post(client, cosine).json()["summary"]
    # Σ of the published vector over steps 0..9
    assert s["lr_sum"] == pytest.approx(
        sum([0, 5, 10, 9.619398, 8.535534, 6.913417, 5, 3.086583, 1.464466, 0.380602]), rel=1e-6
    )
    assert s["mean_lr"] == pytest.approx(s["lr_sum"] / T)
    constant = {"kind": "constant", "peak_lr": P, "warmup_steps": 4, "total_steps": T}
    assert post(client, constant).json()["summary"]["lr_sum"] == pytest.approx(0 + 2.5 + 5 + 7.5 + 6 * 10)


def test_the_summary_names_peak_floor_phases_semantics_and_the_past_end_behaviour(client: TestClient) -> None:
    body = {
        "kind": "warmup_stable_decay",
        "peak_lr": 3e-4,
        "total_steps": 10_000,
        "warmup_steps": 500,
        "decay_fraction": 0.2,
        "min_lr": 3e-5,
    }
    answer = post(client, body).json()
    s = answer["summary"]
    assert (s["peak_lr"], s["floor_lr"], s["final_lr"]) == pytest.approx((3e-4, 3e-5, 3e-5))
    assert (s["warmup_steps"], s["stable_steps"], s["decay_steps"], s["total_steps"]) == (
        500,
        7500,
        2000,
        10_000,
    )
    assert s["semantics"] == answer["semantics"] == "transformers"
    assert "floor" in s["past_end_note"]
    assert "step 0" in answer["convention"]


# ---- sampling -------------------------------------------------------------------------------------


def test_a_sampled_run_always_holds_step_zero_the_phase_ends_and_the_last_step(client: TestClient) -> None:
    body = {
        "kind": "warmup_stable_decay",
        "peak_lr": 1e-3,
        "total_steps": 100_003,
        "warmup_steps": 1_237,
        "decay_steps": 20_011,
        "points": 7,
    }
    answer = post(client, body).json()
    steps = [p["step"] for p in answer["points"]]
    assert answer["answered"] == "sampled"
    assert steps == sorted(steps)
    for key in (0, 1_237, 100_003 - 20_011, 100_002, 100_003):
        assert key in steps
    by_step = {p["step"]: p["lr"] for p in answer["points"]}
    assert by_step[1_237] == pytest.approx(1e-3)


def test_sampling_every_k_steps_keeps_the_key_steps_too(client: TestClient) -> None:
    body = {"kind": "cosine", "peak_lr": 1e-3, "total_steps": 1_000, "warmup_steps": 33, "every": 100}
    steps = [p["step"] for p in post(client, body).json()["points"]]
    assert set(range(0, 1001, 100)) <= set(steps)
    assert {33, 999, 1000} <= set(steps)


def test_sampling_past_the_end_shows_the_past_end_policy(client: TestClient) -> None:
    body = {"kind": "linear", "peak_lr": 1.0, "total_steps": 100, "points": 5, "until_step": 200}
    points = post(client, body).json()["points"]
    assert points[-1]["step"] == 200
    assert points[-1]["lr"] == 0.0


def test_a_run_of_ten_million_steps_answers_with_a_closed_form_summary(client: TestClient) -> None:
    # Speed is a benchmark's job (benchmarks/run_all.py), not a timed test's: the 10^7-step answer
    # comes from closed forms, which the exact mean below checks.
    body = {
        "kind": "cosine_with_min_lr",
        "peak_lr": 3e-4,
        "total_steps": 10_000_000,
        "min_lr_ratio": 0.1,
        "points": 1_000,
    }
    response = post(client, body)
    assert response.status_code == 200
    # Without warmup the mean of a cosine from 1 to m is (1 + m)/2 of the peak.
    assert response.json()["summary"]["mean_lr"] == pytest.approx(3e-4 * 0.55, rel=1e-6)
    steps = {"kind": "cosine", "peak_lr": 3e-4, "total_steps": 10_000_000, "warmup_steps": 10_000}
    response = post(client, {**steps, "steps": list(range(0, 10_000_000, 1_000))})
    assert response.status_code == 200
    assert len(response.json()["points"]) == 10_000


# ---- representations -----------------------------------------------------------------------------


def test_csv_answers_step_and_lr_rows(client: TestClient) -> None:
    body = {"kind": "cosine", "peak_lr": P, "warmup_steps": W, "total_steps": T, "points": 11}
    response = post(client, body, accept="text/csv")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(response.text)))
    assert rows[0] == ["step", "lr"]
    values = {int(step): float(lr) for step, lr in rows[1:]}
    assert sorted(values) == list(range(11))
    assert values[3] == pytest.approx(9.619398, rel=1e-6)


def test_csv_rounds_the_lr_to_six_significant_digits_where_json_keeps_full_precision(
    client: TestClient,
) -> None:
    # 3e-4 over 7 warmup steps: 3e-4 * 1/7 and friends are float noise in repr (4.285714285714286e-05).
    body = {"kind": "cosine", "peak_lr": 3e-4, "warmup_steps": 7, "total_steps": 1_000, "points": 50}
    rows = list(csv.reader(io.StringIO(post(client, body, accept="text/csv").text)))[1:]
    exact = {p["step"]: p["lr"] for p in post(client, body).json()["points"]}
    digits = [len(lr.split("e")[0].replace(".", "").replace("-", "").lstrip("0")) for _, lr in rows]
    assert max(digits) <= 6
    assert any(len(repr(lr)) > 12 for lr in exact.values())  # the JSON answer does carry the noise
    for step, lr in rows:
        assert float(lr) == pytest.approx(exact[int(step)], rel=5e-6)


def _wsd() -> dict[str, Any]:
    return {
        "kind": "warmup_stable_decay",
        "peak_lr": 3e-4,
        "total_steps": 100_000,
        "warmup_steps": 5_000,
        "decay_fraction": 0.2,
        "decay_shape": "1-sqrt",
        "min_lr_ratio": 0.1,
        "points": 400,
    }


def test_svg_draws_the_schedule_with_its_phases_as_labelled_bands(client: TestClient) -> None:
    response = post(client, _wsd(), accept="image/svg+xml")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("image/svg+xml")
    assert response.headers["vary"] == "Accept"
    root = ET.fromstring(response.text)
    assert root.tag == f"{SVG_NS}svg"
    title = root.find(f"{SVG_NS}title")
    assert title is not None and title.text is not None
    assert "warmup_stable_decay" in title.text and "transformers" in title.text
    texts = {"".join(t.itertext()) for t in root.iter(f"{SVG_NS}text")}
    assert {"stable", "decay", "optimizer step", "learning rate"} <= texts  # phase names inside phases
    for phase in ("warmup", "stable", "decay"):  # and every phase in the legend with its steps
        assert any(text.startswith(f"{phase} (steps ") for text in texts), phase


def test_png_is_a_png_image(client: TestClient) -> None:
    response = post(client, _wsd(), accept="image/png")
    assert response.status_code == 200
    assert response.headers["content-type"] == "image/png"
    assert response.content[:8] == b"\x89PNG\r\n\x1a\n"


def test_json_is_the_default_and_quality_values_are_honoured(client: TestClient) -> None:
    body = {"kind": "cosine", "peak_lr": P, "warmup_steps": W, "total_steps": T}
    assert post(client, body).headers["content-type"].startswith("application/json")
    assert post(client, body, accept="*/*").headers["content-type"].startswith("application/json")
    picked = post(client, body, accept="image/svg+xml;q=0.5, text/csv")
    assert picked.headers["content-type"].startswith("text/csv")


def test_an_unsupported_accept_is_a_406_problem(client: TestClient) -> None:
    body = {"kind": "cosine", "peak_lr": P, "warmup_steps": W, "total_steps": T}
    response = post(client, body, accept="application/xml")
    assert response.status_code == 406
    assert response.headers["content-type"].startswith(PROBLEM)
    assert response.json()["type"] == "/problems/not-acceptable"
    assert "text/csv" in response.json()["detail"]


# ---- bad input: 422 naming the field ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"warmup_steps": 20}, "body.warmup_steps"),  # warmup longer than the run
        ({"warmup_steps": 10}, "body.warmup_steps"),  # warmup as long as the run: nothing left to decay
        ({"warmup_steps": None, "warmup_fraction": 1.0}, "body.warmup_fraction"),
        ({"kind": "cosine_with_min_lr", "min_lr": 20.0}, "body.min_lr"),  # floor above the peak
        ({"kind": "cosine_with_min_lr", "min_lr_ratio": 1.5}, "body.min_lr_ratio"),
        ({"kind": "cosine_with_min_lr"}, "body.min_lr_ratio"),  # a floor is needed
        ({"kind": "constant", "min_lr": 1.0}, "body.min_lr"),  # constant has no floor
        ({"kind": "warmup_stable_decay", "stable_steps": 5, "decay_steps": 4}, "body.stable_steps"),
        ({"kind": "warmup_stable_decay", "decay_steps": 9}, "body.decay_steps"),
        ({"kind": "warmup_stable_decay"}, "body.decay_steps"),  # no decay length
        ({"stable_steps": 3}, "body.stable_steps"),  # WSD-only field on a cosine
        ({"total_steps": 0}, "body.total_steps"),
        ({"total_steps": -5}, "body.total_steps"),
        ({"warmup_steps": -1}, "body.warmup_steps"),
        ({"peak_lr": 0}, "body.peak_lr"),
        ({"steps": [0, -1]}, "body.steps[1]"),
        ({"steps": [1], "points": 5}, "body.points"),
        ({"points": 5, "every": 2}, "body.every"),
        ({"points": 1}, "body.points"),
        ({"every": 1, "total_steps": 10_000_000, "warmup_steps": 0}, "body.every"),  # too many points
        ({"semantics": "pytorch"}, "body.warmup_start_lr"),  # LinearLR cannot start at 0
        ({"semantics": "keras"}, "body.semantics"),
        ({"kind": "exponential"}, "body.kind"),
        ({"unknown_field": 1}, "body.unknown_field"),
    ],
)
def test_bad_schedules_answer_422_naming_the_field(
    client: TestClient, change: dict[str, Any], field: str
) -> None:
    body = {"kind": "cosine", "peak_lr": P, "warmup_steps": W, "total_steps": T, **change}
    body = {key: value for key, value in body.items() if value is not None}
    assert problem_field(post(client, body)) == field


def test_a_nan_learning_rate_is_refused_naming_the_field(client: TestClient) -> None:
    response = client.post(
        PATH,
        content=b'{"kind": "cosine", "peak_lr": NaN, "total_steps": 10}',
        headers={"Content-Type": "application/json"},
    )
    assert problem_field(response) == "body.peak_lr"


def test_too_many_requested_steps_are_refused(client: TestClient) -> None:
    body = {"kind": "cosine", "peak_lr": P, "total_steps": 100_000, "steps": list(range(10_001))}
    assert problem_field(post(client, body)) == "body.steps"


def test_a_problem_says_what_to_change(client: TestClient) -> None:
    body = {"kind": "cosine", "peak_lr": P, "warmup_steps": 20, "total_steps": T}
    problem = post(client, body).json()
    assert problem["type"] == "/problems/invalid-input"
    assert "shorter" in problem["detail"]


# ---- the contract ---------------------------------------------------------------------------------


def _examples(client: TestClient) -> list[dict[str, Any]]:
    spec = client.get("/openapi.json").json()
    ref = spec["paths"][PATH]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    examples: list[dict[str, Any]] = spec["components"]["schemas"][ref.rsplit("/", 1)[1]]["examples"]
    return examples


def test_every_request_example_in_the_openapi_answers_200(client: TestClient) -> None:
    examples = _examples(client)
    assert len(examples) >= 3
    for example in examples:
        response = post(client, example)
        assert response.status_code == 200, (example, response.text)


def test_the_openapi_documents_the_csv_and_chart_answers_and_the_406(client: TestClient) -> None:
    operation = client.get("/openapi.json").json()["paths"][PATH]["post"]
    assert operation["operationId"] == "compute_lr_schedule"
    content = operation["responses"]["200"]["content"]
    assert {"application/json", "text/csv", "image/svg+xml", "image/png"} <= set(content)
    assert "406" in operation["responses"]
