"""GET /v1/models and /v1/hardware: presets with published sizes, the accelerator catalog, device names."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient


@pytest.mark.parametrize(
    ("preset", "published", "tolerance"),
    [
        ("llama3-8b", 8.03e9, 0.005),
        ("llama3-70b", 70.6e9, 0.005),
        ("llama3.1-405b", 405.9e9, 0.005),
        ("gpt3-175b", 175e9, 0.005),
        ("mixtral-8x7b", 46.7e9, 0.005),
    ],
)
def test_presets_match_their_published_parameter_counts(
    client: TestClient, preset: str, published: float, tolerance: float
) -> None:
    body = client.get(f"/v1/models/{preset}").json()
    assert body["total_parameters"] == pytest.approx(published, rel=tolerance)
    assert body["source"]


def test_mixtral_has_about_12_9b_active_parameters_per_token(client: TestClient) -> None:
    body = client.get("/v1/models/mixtral-8x7b").json()
    assert body["active_parameters_per_token"] == pytest.approx(12.9e9, rel=0.01)


def test_the_model_list_covers_the_well_known_families(client: TestClient) -> None:
    ids = {item["id"] for item in client.get("/v1/models").json()["items"]}
    for expected in ("gpt3-175b", "llama2-70b", "llama3.1-405b", "mistral-7b", "mixtral-8x7b", "qwen2.5-72b",
                     "gemma2-27b", "deepseek-v3", "gpt-neox-20b", "opt-175b", "bloom-176b", "mpt-7b", "palm-540b"):  # fmt: skip
        assert expected in ids


def test_an_unknown_preset_path_is_404_with_close_matches(client: TestClient) -> None:
    response = client.get("/v1/models/llama3-7b")
    assert response.status_code == 404
    assert "llama3-8b" in response.json()["close_matches"]


def test_the_catalog_lists_dense_peaks(client: TestClient) -> None:
    parts = {item["id"]: item for item in client.get("/v1/hardware").json()["items"]}
    assert parts["a100-sxm4-80gb"]["peak_tflops"]["bf16"] == 312
    assert parts["h100-sxm"]["peak_tflops"]["fp8"] == pytest.approx(1978.9)
    # torchtitan once shipped B200's sparse 4.5 PFLOP/s as dense; the dense BF16 figure is 2.25.
    assert parts["b200"]["peak_tflops"]["bf16"] == 2250
    assert parts["v100-sxm2-32gb"]["peak_tflops"]["bf16"] is None
    assert parts["h200-nvl"]["peak_tflops"]["bf16"] == pytest.approx(835.5)


@pytest.mark.parametrize(
    ("device_name", "part"),
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA GB200", "gb200"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA H200 NVL", "h200-nvl"),
        ("NVIDIA H200", "h200-sxm"),
        ("NVIDIA GH200 480GB", "gh200"),
        ("AMD Instinct MI250X/MI250", "mi250x-gcd"),
        ("TPU v5 lite", "tpu-v5e"),
        ("TPU v5", "tpu-v5p"),
    ],
)
def test_framework_device_names_resolve_without_substring_traps(
    client: TestClient, device_name: str, part: str
) -> None:
    body = client.get("/v1/hardware", params={"device_name": device_name}).json()
    assert [item["id"] for item in body["items"]] == [part]


def test_an_unknown_device_name_is_404_not_a_guess(client: TestClient) -> None:
    response = client.get("/v1/hardware", params={"device_name": "NVIDIA H900"})
    assert response.status_code == 404
    assert "custom" in response.json()["detail"].lower()


def test_one_accelerator_by_id(client: TestClient) -> None:
    body = client.get("/v1/hardware/mi300x").json()
    assert body["peak_tflops"]["bf16"] == pytest.approx(1307.4)
    assert body["sources"]
    assert client.get("/v1/hardware/h100").status_code == 404
