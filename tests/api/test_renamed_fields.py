"""One name per concept across every request (issue 20): an estimate's and the advice's ``tokens``,
``steps`` and ``batch_tokens`` became ``token_budget_tokens``, ``total_steps`` and
``global_batch_tokens``, the names a run uses; ``hardware.count`` became ``device_count``. Requests
written before keep working (the same answer), giving both names is a 422 naming the old one, and the
published schema says both (the old name deprecated, the pair exactly-one or not-both)."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from fastapi.testclient import TestClient

from service.api.schemas.advice import BatchAdviceRequest, BatchRampIn, LrAdviceRequest
from service.api.schemas.common import HardwareRef, RenamedFieldsModel
from service.api.schemas.efficiency import TrainingEstimateRequest

ESTIMATE = "/v1/estimates/training"
JOB = {
    "model": {"preset": "llama3-8b"},
    "seq_len_tokens": 8192,
    "hardware": {"accelerator": "h100-sxm", "device_count": 64},
    "mfu": 0.4,
}

# (path, the request in today's names, {old name: new name} to write it the old way)
CASES: list[tuple[str, dict[str, Any], dict[str, str]]] = [
    (ESTIMATE, {**JOB, "token_budget_tokens": 1e12}, {"token_budget_tokens": "tokens"}),
    (
        ESTIMATE,
        {**JOB, "total_steps": 1000, "global_batch_tokens": 4_194_304},
        {"total_steps": "steps", "global_batch_tokens": "batch_tokens"},
    ),
    (
        "/v1/advice/lr",
        {"parameter_count": 1.3e9, "token_budget_tokens": 26e9, "global_batch_tokens": 1_048_576},
        {"token_budget_tokens": "tokens", "global_batch_tokens": "batch_tokens"},
    ),
    (
        "/v1/advice/batch",
        {"loss": 3.0, "global_batch_tokens": 524_288},
        {"global_batch_tokens": "batch_tokens"},
    ),
]


def _written_the_old_way(body: dict[str, Any], old_by_new: dict[str, str]) -> dict[str, Any]:
    return {old_by_new.get(name, name): value for name, value in body.items()}


@pytest.mark.parametrize(("path", "body", "old_by_new"), CASES)
def test_the_old_names_get_the_same_answer_as_the_new(
    client: TestClient, path: str, body: dict[str, Any], old_by_new: dict[str, str]
) -> None:
    new = client.post(path, json=body)
    old = client.post(path, json=_written_the_old_way(body, old_by_new))
    assert new.status_code == 200, new.text
    assert old.status_code == 200, old.text
    assert old.json() == new.json()


@pytest.mark.parametrize(("path", "body", "old_by_new"), CASES)
def test_both_names_of_one_field_are_a_422_naming_the_old_one(
    client: TestClient, path: str, body: dict[str, Any], old_by_new: dict[str, str]
) -> None:
    new_name, old_name = next(iter(old_by_new.items()))
    response = client.post(path, json={**body, old_name: body[new_name]})
    assert response.status_code == 422, response.text
    error = response.json()["errors"][0]
    assert error["field"] == f"body.{old_name}"
    assert new_name in error["message"]


def test_a_batch_ramp_reads_its_old_tokens_too(client: TestClient) -> None:
    body: dict[str, Any] = {
        "model": {"preset": "llama3-8b"},
        "tokens_seen": 200e9,
        "global_batch_tokens": 4_194_304,
        "ramp": {"token_budget_tokens": 1e12},
    }
    new = client.post("/v1/advice/batch", json=body)
    old = client.post("/v1/advice/batch", json={**body, "ramp": {"tokens": 1e12}})
    assert new.status_code == old.status_code == 200, old.text
    assert old.json() == new.json()
    assert new.json()["ramp"]["tokens"] == 1e12


RENAMED_MODELS: list[type[RenamedFieldsModel]] = [
    HardwareRef,
    TrainingEstimateRequest,
    LrAdviceRequest,
    BatchAdviceRequest,
    BatchRampIn,
]


@pytest.mark.parametrize("model", RENAMED_MODELS, ids=lambda model: model.__name__)
def test_the_schema_marks_each_old_name_deprecated_and_refuses_both(model: type[RenamedFieldsModel]) -> None:
    schema = model.model_json_schema()
    properties = schema["properties"]
    assert model.renamed_fields
    for old, new in model.renamed_fields.items():
        assert properties[old].get("deprecated") is True, old
        assert f"old name of {new}" in properties[old]["description"]
        assert new not in schema.get("required", []), f"{new} must not be required: {old} may stand in"
        # Whatever else the model needs, a request giving both names breaks the schema's own rules.
        pair_rules = [jsonschema.Draft202012Validator(rule) for rule in schema["allOf"]]
        assert any(
            not rule.is_valid({old: 1, new: 1}) and rule.is_valid({new: 1}) and rule.is_valid({old: 1})
            for rule in pair_rules
        ), f"no rule in the schema refuses {old} with {new} and allows either alone"


def test_every_deprecated_request_field_is_a_renamed_one_the_model_reads() -> None:
    # A deprecated field that no renamed_fields entry folds would be accepted and then ignored.
    for model in RENAMED_MODELS:
        deprecated = {
            name
            for name, info in model.model_fields.items()
            if (info.json_schema_extra or {}).get("deprecated")
        }
        assert deprecated == set(model.renamed_fields), model.__name__
