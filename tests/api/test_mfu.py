"""POST /v1/mfu and /v1/mfu/batch against the published MFU figures (reference/flops_and_mfu.md),
each expected value computed here from the paper's own formula."""

from __future__ import annotations

import math
from typing import Any

import pytest
from fastapi.testclient import TestClient

PROBLEM = "application/problem+json"


def _mfu(client: TestClient, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/mfu", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_the_seed_example_140_tflops_on_an_a100_is_about_45_percent(client: TestClient) -> None:
    # 6N convention with N = 1e9: exactly 6e9 FLOPs per token; 8 A100s at 140 TFLOP/s each.
    tokens_per_second = 8 * 140e12 / 6e9
    body = {
        "model": {"dimensions": {"n_layers": 24, "d_model": 2048, "n_heads": 16, "vocab_size": 50304}},
        "seq_len_tokens": 2048,
        "hardware": {"accelerator": "a100-sxm4-80gb", "device_count": 8},
        "throughput": {"tokens_per_second": tokens_per_second},
        "convention": "6n",
        "parameter_count": 1e9,
    }
    answer = _mfu(client, body)
    assert answer["achieved_tflops_per_device"] == pytest.approx(140.0)
    assert answer["peak_tflops_per_device"] == 312.0
    assert round(answer["mfu"], 3) == 0.449
    assert answer["band"] == "typical"


def test_palm_540b_reaches_46_2_percent_on_6144_tpu_v4(client: TestClient) -> None:
    answer = _mfu(
        client,
        {
            "model": {"preset": "palm-540b"},
            "seq_len_tokens": 2048,
            "hardware": {"accelerator": "tpu-v4", "device_count": 6144},
            "throughput": {"tokens_per_second": 238.3e3},
            "parameter_count": 540.35e9,
        },
    )
    expected = (6 * 540.35e9 + 12 * 118 * 48 * 256 * 2048) * 238.3e3 / (6144 * 275e12)
    assert answer["mfu"] == pytest.approx(expected, rel=1e-9)
    assert round(answer["mfu"], 3) == 0.462


MPT_7B_BENCHMARK = {
    # llm-foundry's benchmark MPT-7B: learned positions, biases, LayerNorm with bias (N = 6,658,859,008).
    "n_layers": 32, "d_model": 4096, "n_heads": 32, "vocab_size": 50368, "ffn_kind": "plain",
    "tied_embeddings": True, "position_embedding": "learned", "max_position_embeddings": 2048,
    "norm_kind": "layernorm", "norm_has_bias": True, "qkv_bias": True, "attn_out_bias": True, "mlp_bias": True,
}  # fmt: skip


def test_mpt_7b_on_8_h100_is_46_44_percent_under_the_mosaicml_form(client: TestClient) -> None:
    answer = _mfu(
        client,
        {
            "model": {"dimensions": MPT_7B_BENCHMARK},
            "seq_len_tokens": 2048,
            "hardware": {"accelerator": "h100-sxm", "device_count": 8},
            "throughput": {"tokens_per_second_per_device": 10_643},
            "embedding_policy": "all",
        },
    )
    n_all = 6_658_859_008
    expected = (6 * n_all + 12 * 32 * 4096 * 2048) * 10_643 / 989.4e12
    assert answer["mfu"] == pytest.approx(expected, rel=1e-9)
    assert round(answer["mfu"] * 100, 2) == 46.44


def test_mt_nlg_530b_is_30_2_percent_under_the_korthikanti_form(client: TestClient) -> None:
    layers, hidden, vocab, seq, batch = 105, 20480, 50272, 2048, 1920
    answer = _mfu(
        client,
        {
            "model": {
                "dimensions": {
                    "n_layers": layers, "d_model": hidden, "n_heads": 128, "vocab_size": vocab, "ffn_kind": "plain",
                }
            },
            "seq_len_tokens": seq,
            "hardware": {"accelerator": "a100-sxm4-80gb", "device_count": 2240},
            "throughput": {"step_time_seconds": 60.1, "global_batch_sequences": batch},
            "convention": "megatron",
        },
    )  # fmt: skip
    step_flops = (
        72 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (12 * layers * hidden))
    )
    expected = step_flops / 60.1 / (2240 * 312e12)
    assert answer["mfu"] == pytest.approx(expected, rel=1e-9)
    assert round(answer["mfu"], 3) == 0.302


@pytest.mark.parametrize(("tokens_per_gpu", "published"), [(5762, 0.337), (6667, 0.390)])
def test_torchtitan_llama_3_1_8b_mfu_at_peak_989(
    client: TestClient, tokens_per_gpu: int, published: float
) -> None:
    answer = _mfu(
        client,
        {
            "model": {"preset": "llama3.1-8b"},
            "seq_len_tokens": 8192,
            "hardware": {
                "custom": {"name": "H100 (torchtitan peak)", "peak_tflops": {"bf16": 989}},
                "count": 8,
            },
            "throughput": {"tokens_per_second_per_device": tokens_per_gpu},
            "embedding_policy": "exclude_input",
        },
    )
    assert round(answer["mfu"], 3) == published


def _llama_8b_request(throughput: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "model": {"preset": "llama3-8b"},
        "seq_len_tokens": 8192,
        "hardware": {"accelerator": "h100-sxm", "device_count": 64},
        "throughput": throughput,
        **extra,
    }


def test_the_four_throughput_forms_agree(client: TestClient) -> None:
    per_device = 6144.0  # 64 devices × 6144 = 48 sequences of 8192 per second: every form is exact
    global_rate = per_device * 64
    forms = [
        {"tokens_per_second": global_rate},
        {"tokens_per_second_per_device": per_device},
        {"sequences_per_second": global_rate / 8192},
        {"step_time_seconds": 2.0, "global_batch_tokens": int(global_rate * 2)},
        {"step_time_seconds": 2.0, "global_batch_sequences": int(global_rate * 2 / 8192)},
    ]
    values = [_mfu(client, _llama_8b_request(form))["mfu"] for form in forms]
    assert all(value == pytest.approx(values[0], rel=1e-3) for value in values)


def test_a_preset_its_dimensions_and_its_hf_config_give_the_same_mfu(client: TestClient) -> None:
    preset = client.get("/v1/models/llama3-8b").json()["dimensions"]
    hf_config = {
        "model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256, "tie_word_embeddings": False,
    }  # fmt: skip
    throughput = {"tokens_per_second_per_device": 6000}
    by_preset = _mfu(client, _llama_8b_request(throughput))["mfu"]
    by_dimensions = _mfu(client, {**_llama_8b_request(throughput), "model": {"dimensions": preset}})["mfu"]
    by_config = _mfu(client, {**_llama_8b_request(throughput), "model": {"hf_config": hf_config}})["mfu"]
    assert by_preset == pytest.approx(by_dimensions, rel=1e-12)
    assert by_preset == pytest.approx(by_config, rel=1e-12)


def test_a_framework_device_name_resolves_to_its_catalog_part(client: TestClient) -> None:
    answer = _mfu(client, {**_llama_8b_request({"tokens_per_second_per_device": 6000}),
                           "hardware": {"accelerator": "NVIDIA H100 80GB HBM3", "device_count": 64}})  # fmt: skip
    assert answer["accelerator"]["id"] == "h100-sxm"


def test_mfu_doubles_with_throughput_and_halves_with_devices(client: TestClient) -> None:
    base = _mfu(client, _llama_8b_request({"tokens_per_second": 300_000}))["mfu"]
    doubled = _mfu(client, _llama_8b_request({"tokens_per_second": 600_000}))["mfu"]
    more_devices = _mfu(
        client,
        {
            **_llama_8b_request({"tokens_per_second": 300_000}),
            "hardware": {"accelerator": "h100-sxm", "device_count": 128},
        },
    )["mfu"]
    assert doubled == pytest.approx(2 * base)
    assert more_devices == pytest.approx(base / 2)


def test_full_recomputation_raises_hfu_by_a_forward_pass_but_not_mfu(client: TestClient) -> None:
    plain = _mfu(client, _llama_8b_request({"tokens_per_second_per_device": 5000}))
    recomputed = _mfu(client, _llama_8b_request({"tokens_per_second_per_device": 5000}, recompute="full"))
    assert recomputed["mfu"] == pytest.approx(plain["mfu"])
    assert recomputed["mfu"] < recomputed["hfu"] < plain["mfu"] * 4 / 3 * 1.001


def test_an_fp8_run_also_reports_mfu_against_the_bf16_peak(client: TestClient) -> None:
    answer = _mfu(client, _llama_8b_request({"tokens_per_second_per_device": 9000}, precision="fp8"))
    assert answer["peak_tflops_per_device"] == pytest.approx(1978.9)
    assert answer["mfu_vs_bf16_peak"] == pytest.approx(answer["mfu"] * 1978.9 / 989.4)


def _problem(response: Any, status: int, type_slug: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    body = response.json()
    assert body["type"] == f"/problems/{type_slug}"
    return body


def test_an_mfu_above_one_is_a_422_that_names_the_likely_cause(client: TestClient) -> None:
    # Global tokens/s reported as if per device: 64× too much.
    response = client.post("/v1/mfu", json=_llama_8b_request({"tokens_per_second_per_device": 6000 * 64}))
    body = _problem(response, 422, "implausible-result")
    assert "per device" in body["detail"] or "device" in body["detail"]


def test_an_unknown_accelerator_lists_close_matches_and_never_falls_back(client: TestClient) -> None:
    response = client.post(
        "/v1/mfu",
        json={
            **_llama_8b_request({"tokens_per_second": 1e5}),
            "hardware": {"accelerator": "h100-sxn", "device_count": 8},
        },
    )
    body = _problem(response, 422, "unknown-reference")
    assert "h100-sxm" in body["close_matches"]
    assert body["errors"][0]["field"] == "body.hardware.accelerator"


def test_bf16_on_a_v100_is_an_unsupported_precision(client: TestClient) -> None:
    response = client.post(
        "/v1/mfu",
        json={
            **_llama_8b_request({"tokens_per_second": 1e4}),
            "hardware": {"accelerator": "v100-sxm2-32gb", "device_count": 8},
        },
    )
    _problem(response, 422, "unsupported-precision")


def test_an_unknown_preset_lists_close_matches(client: TestClient) -> None:
    response = client.post(
        "/v1/mfu", json={**_llama_8b_request({"tokens_per_second": 1e5}), "model": {"preset": "lama3-8b"}}
    )
    body = _problem(response, 422, "unknown-reference")
    assert "llama3-8b" in body["close_matches"]


def test_an_unknown_hf_model_type_names_the_fields_to_give_instead(client: TestClient) -> None:
    response = client.post(
        "/v1/mfu",
        json={
            **_llama_8b_request({"tokens_per_second": 1e5}),
            "model": {"hf_config": {"model_type": "rwkv"}},
        },
    )
    body = _problem(response, 422, "invalid-input")
    assert "n_layers" in body["detail"] and "d_model" in body["detail"]


@pytest.mark.parametrize(
    ("throughput", "field"),
    [
        ({"tokens_per_second": 1e5, "tokens_per_second_per_device": 100}, "body.throughput"),
        ({}, "body.throughput"),
        ({"step_time_seconds": 2.0}, "body.throughput"),
        ({"tokens_per_second": -5}, "body.throughput.tokens_per_second"),
        ({"tokens_per_second": 0}, "body.throughput.tokens_per_second"),
    ],
)
def test_a_malformed_throughput_is_a_validation_problem_naming_the_field(
    client: TestClient, throughput: dict[str, Any], field: str
) -> None:
    body = _problem(client.post("/v1/mfu", json=_llama_8b_request(throughput)), 422, "validation-error")
    assert body["errors"][0]["field"] == field


def test_an_unknown_field_is_rejected_so_a_typo_never_changes_the_answer(client: TestClient) -> None:
    body = _problem(
        client.post("/v1/mfu", json=_llama_8b_request({"tokens_per_sec": 1e5})), 422, "validation-error"
    )
    assert any(error["field"] == "body.throughput.tokens_per_sec" for error in body["errors"])


def test_nan_and_infinity_are_refused(client: TestClient) -> None:
    for literal in ("NaN", "Infinity"):
        raw = (
            '{"model": {"preset": "llama3-8b"}, "seq_len_tokens": 8192, '
            '"hardware": {"accelerator": "h100-sxm", "device_count": 8}, "throughput": {"tokens_per_second": '
            + literal
            + "}}"
        )
        response = client.post("/v1/mfu", content=raw, headers={"Content-Type": "application/json"})
        assert response.status_code == 422, response.text
        assert response.headers["content-type"] == PROBLEM


def test_zero_devices_is_refused(client: TestClient) -> None:
    request = {
        **_llama_8b_request({"tokens_per_second": 1e5}),
        "hardware": {"accelerator": "h100-sxm", "device_count": 0},
    }
    body = _problem(client.post("/v1/mfu", json=request), 422, "validation-error")
    assert body["errors"][0]["field"] == "body.hardware.device_count"


def test_a_batch_keeps_order_and_fails_items_on_their_own(client: TestClient) -> None:
    good = _llama_8b_request({"tokens_per_second_per_device": 6000})
    impossible = _llama_8b_request({"tokens_per_second_per_device": 6000 * 64})
    malformed = {"model": {"preset": "llama3-8b"}}
    response = client.post("/v1/mfu/batch", json={"items": [good, impossible, malformed, good]})
    assert response.status_code == 200
    body = response.json()
    assert [item["index"] for item in body["items"]] == [0, 1, 2, 3]
    assert [item["ok"] for item in body["items"]] == [True, False, False, True]
    assert body["succeeded"] == 2 and body["failed"] == 2
    assert body["items"][1]["error"]["type"] == "/problems/implausible-result"
    assert body["items"][2]["error"]["type"] == "/problems/validation-error"
    assert all(error["field"].startswith("body.items[2].") for error in body["items"][2]["error"]["errors"])
    single = _mfu(client, good)
    assert body["items"][0]["result"] == single


def test_a_batch_of_1000_answers_and_1001_is_refused(client: TestClient) -> None:
    item = _llama_8b_request({"tokens_per_second_per_device": 6000})
    response = client.post("/v1/mfu/batch", json={"items": [item] * 1000})
    assert response.status_code == 200
    assert response.json()["succeeded"] == 1000
    too_many = client.post("/v1/mfu/batch", json={"items": [item] * 1001})
    body = _problem(too_many, 422, "validation-error")
    assert "1000" in body["detail"]


def test_a_batch_envelope_must_be_a_non_empty_list(client: TestClient) -> None:
    _problem(client.post("/v1/mfu/batch", json={"items": []}), 422, "validation-error")
    _problem(client.post("/v1/mfu/batch", json=[1, 2]), 422, "validation-error")
    _problem(
        client.post(
            "/v1/mfu/batch", content=b'{"items": [NaN]', headers={"Content-Type": "application/json"}
        ),
        422,
        "validation-error",
    )


def test_mfu_answers_are_finite_fractions(client: TestClient) -> None:
    answer = _mfu(client, _llama_8b_request({"tokens_per_second_per_device": 1}))
    assert 0 < answer["mfu"] <= answer["hfu"] <= 1 and math.isfinite(answer["mfu"])
    assert answer["band"] == "below_typical"


def test_the_old_name_count_is_still_read_and_means_device_count(client: TestClient) -> None:
    # hardware.count was renamed device_count (one name per concept: cluster.device_count, the runs'
    # device_count); requests written before keep working and get the same answer.
    base = {
        "model": {"preset": "llama3-8b"},
        "seq_len_tokens": 8192,
        "throughput": {"tokens_per_second_per_device": 9000.0},
    }
    new = client.post("/v1/mfu", json={**base, "hardware": {"accelerator": "h100-sxm", "device_count": 8}})
    old = client.post("/v1/mfu", json={**base, "hardware": {"accelerator": "h100-sxm", "count": 8}})
    assert new.status_code == old.status_code == 200
    assert old.json() == new.json()
    both = client.post(
        "/v1/mfu", json={**base, "hardware": {"accelerator": "h100-sxm", "device_count": 8, "count": 8}}
    )
    body = _problem(both, 422, "validation-error")
    assert body["errors"][0]["field"] == "body.hardware.count"
    assert "device_count" in body["errors"][0]["message"]
