"""The bad-input catalogue: every kind of hostile or careless body gets a problem+json, never a 500.

Decision on unknown fields: they are REJECTED (422 naming the field), so a misspelt field such as
`tokens_per_sec` can never silently change an answer. The one exception is `hf_config`, which is a
whole Hugging Face config.json and carries many keys the service does not need.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

PROBLEM = "application/problem+json"


def _mfu_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": {"preset": "llama3-8b"},
        "seq_len_tokens": 8192,
        "hardware": {"accelerator": "h100-sxm", "device_count": 8},
        "throughput": {"tokens_per_second_per_device": 6000},
    }
    body.update(overrides)
    return body


def _assert_problem(response: Any, status: int = 422) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    body = response.json()
    assert body["status"] == status and body["detail"]
    return body


@pytest.mark.parametrize(
    "overrides",
    [
        {"seq_len_tokens": 10**30},
        {"seq_len_tokens": 0},
        {"seq_len_tokens": -1},
        {"seq_len_tokens": 1.5},
        {"hardware": {"accelerator": "h100-sxm", "device_count": 10**40}},
        {"throughput": {"tokens_per_second": 1e-320}},
        {"throughput": {"tokens_per_second": 1e308}},
        {"model": {"dimensions": {"n_layers": 10**30, "d_model": 4096, "n_heads": 32, "vocab_size": 32000}}},
        {"model": {"dimensions": {"n_layers": 32, "d_model": 0, "n_heads": 32, "vocab_size": 32000}}},
        {"model": {"dimensions": {"n_layers": 32, "d_model": 4096, "n_heads": 31, "vocab_size": 32000}}},
        {"model": {"preset": "llama3-8b", "dimensions": {"n_layers": 1}}},
        {"model": {}},
        {"parameter_count": 1e30},
        {"precision": "int3"},
        {"model": {"preset": "ламa-8b 🦙"}},
        {"hardware": {"accelerator": "Н100 🚀", "device_count": 8}},
        {"convention": "'; DROP TABLE runs; --"},
    ],
)
def test_hostile_values_get_a_problem_never_a_500(client: TestClient, overrides: dict[str, Any]) -> None:
    _assert_problem(client.post("/v1/mfu", json=_mfu_body(**overrides)))


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_in_json_are_rejected(client: TestClient, literal: str) -> None:
    raw = (
        '{"model": {"preset": "llama3-8b"}, "seq_len_tokens": 8192, "hardware": {"accelerator": "h100-sxm", '
        '"count": 8}, "throughput": {"tokens_per_second": ' + literal + "}}"
    )
    _assert_problem(client.post("/v1/mfu", content=raw, headers={"Content-Type": "application/json"}))


def test_deeply_nested_json_is_a_problem(client: TestClient) -> None:
    depth = 100_000
    raw = '{"model": ' + "[" * depth + "]" * depth + "}"
    response = client.post("/v1/mfu", content=raw, headers={"Content-Type": "application/json"})
    _assert_problem(response)


def test_malformed_json_is_a_problem(client: TestClient) -> None:
    for raw in (b"{", b"\xff\xfe\x00", b"[1, 2", b'{"model": }'):
        _assert_problem(client.post("/v1/mfu", content=raw, headers={"Content-Type": "application/json"}))


def test_a_wrong_content_type_is_415(client: TestClient) -> None:
    response = client.post("/v1/mfu", content=b"<mfu/>", headers={"Content-Type": "application/xml"})
    _assert_problem(response, 415)


def test_a_missing_content_type_with_a_body_is_415(client: TestClient) -> None:
    response = client.post("/v1/mfu", content=b'{"a": 1}', headers={"Content-Type": ""})
    _assert_problem(response, 415)


def test_a_body_over_the_limit_is_413(client: TestClient) -> None:
    huge = b'{"items": [' + b"1," * (5 * 1024 * 1024) + b"1]}"
    _assert_problem(
        client.post("/v1/mfu/batch", content=huge, headers={"Content-Type": "application/json"}), 413
    )


def test_a_batch_over_the_limit_is_422(client: TestClient) -> None:
    body = _assert_problem(client.post("/v1/mfu/batch", json={"items": [_mfu_body()] * 1001}))
    assert "1000" in body["detail"]


def test_unknown_fields_are_rejected_and_named(client: TestClient) -> None:
    body = _assert_problem(client.post("/v1/mfu", json=_mfu_body(colour="blue")))
    assert body["errors"][0]["field"] == "body.colour"


def test_non_ascii_text_in_names_is_echoed_safely(client: TestClient) -> None:
    body = client.post(
        "/v1/mfu",
        json=_mfu_body(
            model={
                "dimensions": {
                    "name": "模型-Ω",
                    "n_layers": 2,
                    "d_model": 256,
                    "n_heads": 4,
                    "vocab_size": 1000,
                }
            }
        ),
    )
    assert body.status_code == 200, body.text


def test_a_json_array_instead_of_an_object_is_a_problem(client: TestClient) -> None:
    _assert_problem(client.post("/v1/mfu", json=[1, 2, 3]))


def test_a_parameter_count_too_large_for_a_float_is_422_naming_it(client: TestClient) -> None:
    # 1e308 parameters overflow 6·N to infinity: a 422 naming the field, not a 500.
    body = {"model": {"preset": "llama3-8b"}, "seq_len_tokens": 2048, "parameter_count": 1e308}
    response = client.post("/v1/flops", json=body)
    assert response.status_code == 422, response.text
    assert "parameter_count" in response.text


def test_a_ramp_shorter_than_one_batch_takes_one_step_not_a_500(client: TestClient) -> None:
    body = {
        "model": {"preset": "llama3-8b"},
        "tokens_seen": 1e9,
        "global_batch_tokens": 68_719_476_736,
        "ramp": {"token_budget_tokens": 1},
    }
    response = client.post("/v1/advice/batch", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["ramp"]["total_steps"] == 1
