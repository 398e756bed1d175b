"""Issue 17: the contract and the validators say the same thing.

JSON values must have the type the schema gives (a string is not a number, 0 is not a boolean, a
number is not a date-time), an integral number is an integer as JSON Schema reads it, and the
cross-field rules the validators enforce are in the published schema, checked here with a JSON Schema
validator independent of pydantic (jsonschema, Draft 2020-12, over openapi.yaml's components)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from fastapi.testclient import TestClient

ROOT = Path(__file__).resolve().parents[2]
PREDICT = "/v1/predictions/step"
STEP_BODY: dict[str, Any] = {
    "model": {"preset": "llama3-8b"},
    "seq_len_tokens": 4096,
    "global_batch_sequences": 256,
    "cluster": {"accelerator": "h100-sxm", "device_count": 64},
    "layout": {"tp": 1, "pp": 1, "dp": 64, "micro_batch_sequences": 2},
}


def _fields(response: Any) -> list[str]:
    assert response.status_code == 422, response.text
    return [error["field"] for error in response.json()["errors"]]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"dropout": 0}, "body.dropout"),  # was read as False
        ({"dropout": "yes"}, "body.dropout"),
        ({"seq_len_tokens": "4096"}, "body.seq_len_tokens"),  # was read as 4096
        ({"seq_len_tokens": True}, "body.seq_len_tokens"),
        ({"seq_len_tokens": 4096.5}, "body.seq_len_tokens"),
    ],
)
def test_a_value_of_another_json_type_is_refused_naming_the_field(
    client: TestClient, change: dict[str, Any], field: str
) -> None:
    assert field in _fields(client.post(PREDICT, json={**STEP_BODY, **change}))


def test_an_integral_number_is_an_integer_as_json_schema_says(client: TestClient) -> None:
    exact = client.post(PREDICT, json=STEP_BODY)
    integral = client.post(
        PREDICT, content=_json(STEP_BODY).replace(b'"seq_len_tokens": 4096', b'"seq_len_tokens": 4096.0'),
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    assert exact.status_code == integral.status_code == 200, integral.text
    assert integral.json()["step_time_seconds"] == exact.json()["step_time_seconds"]


def test_a_number_is_not_a_date_time_in_a_query(store_client: Any) -> None:
    response = store_client.client.get(
        "/v1/runs", params={"started_before": "123"}, headers=store_client.reader
    )
    assert response.status_code == 422, response.text  # was read as 1970-01-01T00:02:03Z
    assert "ISO 8601" in response.text


def test_a_subnormal_custom_peak_is_refused_not_a_500(client: TestClient) -> None:
    body = {
        **STEP_BODY,
        "cluster": {"device_count": 8, "custom": {"name": "x", "peak_tflops": {"bf16": 5e-324}}},
    }
    assert "body.cluster.custom.peak_tflops.bf16" in _fields(client.post(PREDICT, json=body))


def _json(value: Any) -> bytes:
    return json.dumps(value).encode()


def _validator(component: str) -> jsonschema.Draft202012Validator:
    document = yaml.safe_load((ROOT / "openapi.yaml").read_text())
    # The component with the document's components beside it, so its $refs resolve in place.
    schema = {**document["components"]["schemas"][component], "components": document["components"]}
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize(
    ("component", "body"),
    [
        # exactly one batch size
        ("StepPredictionRequest", {k: v for k, v in STEP_BODY.items() if k != "global_batch_sequences"}),
        ("StepPredictionRequest", {**STEP_BODY, "global_batch_tokens": 4096 * 256}),
        ("StepPredictionRequest", {**STEP_BODY, "global_batch_sequences": None}),
        # exactly one way to name a model
        ("StepPredictionRequest", {**STEP_BODY, "model": {"preset": "llama3-8b", "hf_config": {}}}),
        # stage layer counts need pipeline parallelism
        ("StepPredictionRequest", {**STEP_BODY, "layout": {**STEP_BODY["layout"], "first_stage_layers": 3}}),
        # exactly one throughput form
        ("MfuRequest", {"model": {"preset": "llama3-8b"}, "seq_len_tokens": 4096,
                        "hardware": {"accelerator": "h100-sxm", "device_count": 8},
                        "throughput": {"tokens_per_second": 1e5, "sequences_per_second": 3.0}}),
        ("MfuRequest", {"model": {"preset": "llama3-8b"}, "seq_len_tokens": 4096,
                        "hardware": {"accelerator": "h100-sxm", "device_count": 8},
                        "throughput": {"step_time_seconds": 2.0}}),
    ],
)  # fmt: skip
def test_the_published_schema_states_the_cross_field_rules(
    client: TestClient, component: str, body: dict[str, Any]
) -> None:
    """Each body breaks one cross-field rule: the published schema refuses it (an independent JSON
    Schema validator) and so does the service."""
    assert not _validator(component).is_valid(body)
    path = PREDICT if component == "StepPredictionRequest" else "/v1/mfu"
    assert client.post(path, json=body).status_code == 422


def test_the_published_schema_accepts_a_body_that_keeps_every_rule(client: TestClient) -> None:
    assert _validator("StepPredictionRequest").is_valid(STEP_BODY)
    assert client.post(PREDICT, json=STEP_BODY).status_code == 200
