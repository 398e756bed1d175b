"""POST /v1/predictions/step through the app (and the predicted-MFU form of /v1/estimates/training):
the breakdown adds up, the MFU gap is an exact decomposition, MFU under the default palm convention
matches /v1/flops and the catalog peak, the seed's effects (MFU falls as the cluster grows, BF16 beats
FP32), a layout that does not fit still answers, charts by Accept, and problems naming the field."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import pytest
from fastapi.testclient import TestClient

PATH = "/v1/predictions/step"
SVG_NS = "{http://www.w3.org/2000/svg}"


def request(**overrides: Any) -> dict[str, Any]:
    """Llama 3 70B on 1024 H100s: tp 8, pp 4 (v 5), dp 32, 512 sequences of 8192 tokens."""
    body: dict[str, Any] = {
        "model": {"preset": "llama3-70b"},
        "seq_len_tokens": 8192,
        "cluster": {"accelerator": "h100-sxm", "device_count": 1024},
        "layout": {"tp": 8, "pp": 4, "virtual_stages": 5, "dp": 32, "distributed_optimizer": True},
        "global_batch_sequences": 512,
    }
    body.update(overrides)
    return {key: value for key, value in body.items() if value is not None}


def predict(client: TestClient, **overrides: Any) -> dict[str, Any]:
    response = client.post(PATH, json=request(**overrides))
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def small_on_a100(devices: int, **layout: Any) -> dict[str, Any]:
    """GPT-3 1.3B on A100s with 200 Gb/s HDR (25e9 bytes/s per GPU), data parallel only."""
    return {
        "model": {"preset": "gpt3-1.3b"},
        "seq_len_tokens": 2048,
        "cluster": {"accelerator": "a100-sxm4-80gb", "device_count": devices,
                    "inter_node_bandwidth_bytes_per_second": 25e9},
        "layout": {"dp": devices, **layout},
    }  # fmt: skip


# --------------------------------------------------------------------------------------------------
# The answer's arithmetic


def test_the_breakdown_sums_to_the_step_time(client: TestClient) -> None:
    body = predict(client)
    seconds = [item["seconds"] for item in body["breakdown"]]
    assert sum(seconds) == pytest.approx(body["step_time_seconds"], rel=1e-9)
    assert sum(item["fraction_of_step"] for item in body["breakdown"]) == pytest.approx(1.0)
    assert all(s >= 0 for s in seconds)
    names = [item["component"] for item in body["breakdown"]]
    assert names[0] == "ideal_matmul" and "pipeline_bubble" in names and "exposed_data_parallel_comm" in names
    assert len(names) == 12 and all(item["description"] for item in body["breakdown"])


def test_the_mfu_gap_decomposes_one_minus_the_useful_mfu(client: TestClient) -> None:
    body = predict(client)
    gap = body["mfu_gap"]
    costs = [cost["mfu_cost"] for cost in gap["costs"]]
    assert gap["useful_mfu"] + sum(costs) == pytest.approx(1.0)
    assert gap["total_cost"] == pytest.approx(sum(costs))
    assert costs == sorted(costs, reverse=True) and all(c > 0 for c in costs)
    assert gap["mfu"] == pytest.approx(gap["useful_mfu"] + gap["convention_difference"])
    ideal = next(item for item in body["breakdown"] if item["component"] == "ideal_matmul")
    assert gap["useful_mfu"] == pytest.approx(ideal["seconds"] / body["step_time_seconds"])
    # the reading names the costliest component
    largest = gap["costs"][0]["component"].replace("_", " ")
    assert body["reading"].startswith(f"Largest loss: {largest}")


def test_under_the_causal_convention_mfu_is_the_useful_share_of_the_step(client: TestClient) -> None:
    body = predict(client, convention="megatron_causal")
    assert body["mfu"] == pytest.approx(body["mfu_gap"]["useful_mfu"], rel=1e-6)
    assert body["mfu_gap"]["convention_difference"] == pytest.approx(0.0, abs=1e-9)


def test_mfu_defaults_to_the_palm_convention_of_v1_flops_and_the_catalog_peak(client: TestClient) -> None:
    body = predict(client)
    assert body["convention"] == "palm"
    flops = client.post("/v1/flops", json={"model": {"preset": "llama3-70b"}, "seq_len_tokens": 8192}).json()
    tokens_per_step = 512 * 8192
    expected = (
        flops["training_flops_per_token"] * tokens_per_step / (body["step_time_seconds"] * 1024 * 989.4e12)
    )
    assert body["mfu"] == pytest.approx(expected, rel=1e-9)
    assert body["achieved_tflops_per_device"] == pytest.approx(body["mfu"] * 989.4)
    assert body["tokens_per_second"] == pytest.approx(tokens_per_step / body["step_time_seconds"])
    assert body["tokens_per_second_per_device"] == pytest.approx(body["tokens_per_second"] / 1024)
    assert body["global_batch_tokens"] == tokens_per_step
    assert body["micro_batches_per_step"] == 16 and body["bubble_fraction"] == pytest.approx(3 / (5 * 16))
    assert 0 < body["mfu"] < 1 and body["hfu"] == pytest.approx(body["mfu"])  # no recomputation


def test_the_answer_echoes_the_cluster_and_states_the_network_default(client: TestClient) -> None:
    body = predict(client)
    cluster = body["cluster"]
    assert cluster["inter_node_bandwidth_bytes_per_second"] == 50e9
    assert cluster["nodes"] == 128 and cluster["devices_per_node"] == 8
    assert cluster["peak_tflops_per_device"] == 989.4
    assert any("400 Gb/s NDR" in note for note in body["assumptions"])
    assert body["layout"]["sequence_parallel"] is True and body["layout"]["zero_stage"] == 1
    assert body["calibration"]["source"] == "default (uncalibrated)"
    assert body["memory"]["fits"] is True and body["fits"] is True and body["warnings"] == []


def test_tokens_or_sequences_give_the_same_step(client: TestClient) -> None:
    by_sequences = predict(client)
    by_tokens = predict(client, global_batch_sequences=None, global_batch_tokens=512 * 8192)
    assert by_tokens["step_time_seconds"] == by_sequences["step_time_seconds"]


# --------------------------------------------------------------------------------------------------
# The effects the model must show


def test_mfu_falls_as_the_cluster_grows_at_fixed_work_per_device(client: TestClient) -> None:
    mfus = []
    for devices in (8, 64, 512):
        body = client.post(
            PATH,
            json={**small_on_a100(devices, micro_batch_sequences=4, overlap_dp_comm=False),
                  "global_batch_sequences": 4 * devices},
        ).json()  # fmt: skip
        mfus.append(body["mfu"])
    assert mfus[0] > mfus[1] > mfus[2]


def test_bf16_beats_fp32(client: TestClient) -> None:
    def answer(precision: str) -> dict[str, Any]:
        response = client.post(PATH, json={**small_on_a100(8, micro_batch_sequences=2),
                                           "global_batch_sequences": 64, "precision": precision})  # fmt: skip
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    bf16, fp32 = answer("bf16"), answer("fp32")
    assert bf16["tokens_per_second"] > 5 * fp32["tokens_per_second"]
    assert bf16["memory"]["total_bytes"] < fp32["memory"]["total_bytes"]


def test_pipeline_interleaving_shrinks_the_bubble(client: TestClient) -> None:
    plain = predict(client, layout={"tp": 8, "pp": 4, "dp": 32, "distributed_optimizer": True})
    interleaved = predict(client)

    def bubble(body: dict[str, Any]) -> float:
        return float(next(i["seconds"] for i in body["breakdown"] if i["component"] == "pipeline_bubble"))

    assert bubble(interleaved) < bubble(plain)
    assert plain["bubble_fraction"] == pytest.approx(3 / 16)


def test_calibration_overrides_change_the_prediction_and_are_echoed(client: TestClient) -> None:
    default = predict(client)
    faster = predict(client, calibration={"matmul_efficiency_scale": 1.2})
    assert faster["step_time_seconds"] < default["step_time_seconds"]
    assert faster["calibration"] == {"matmul_efficiency_scale": 1.2, "overlap_fraction": None,
                                     "source": "request override"}  # fmt: skip
    zero3: dict[str, Any] = {"layout": {"tp": 8, "dp": 128, "zero_stage": 3}, "global_batch_sequences": 1024}
    hidden = predict(client, calibration={"overlap_fraction": 1.0}, **zero3)
    exposed = predict(client, calibration={"overlap_fraction": 0.0}, **zero3)

    def dp_comm(body: dict[str, Any]) -> float:
        return float(
            next(i["seconds"] for i in body["breakdown"] if i["component"] == "exposed_data_parallel_comm")
        )

    assert dp_comm(exposed) > dp_comm(hidden)


def test_a_layout_that_does_not_fit_is_predicted_with_a_warning(client: TestClient) -> None:
    body = predict(client, cluster={"accelerator": "h100-sxm", "device_count": 8}, layout={"dp": 8},
                   global_batch_sequences=8)  # fmt: skip
    assert body["fits"] is False and body["memory"]["fits"] is False
    assert body["memory"]["max_micro_batch_sequences"] == 0
    assert body["step_time_seconds"] > 0
    assert "does not fit" in body["warnings"][0]


# --------------------------------------------------------------------------------------------------
# Charts


def test_the_breakdown_as_an_svg_stacked_bar(client: TestClient) -> None:
    json_body = predict(client)
    response = client.post(PATH, json=request(), headers={"Accept": "image/svg+xml"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("image/svg+xml")
    assert response.headers["vary"] == "Accept"
    root = ET.fromstring(response.text)
    assert root.tag == f"{SVG_NS}svg"
    texts = ["".join(t.itertext()) for t in root.iter(f"{SVG_NS}text")]
    nonzero = [item["component"].replace("_", " ") for item in json_body["breakdown"] if item["seconds"] > 0]
    legend = [text for text in texts if any(text.startswith(f"{name}: ") for name in nonzero)]
    assert len(legend) == len(nonzero)  # one legend entry, with its seconds and share, per segment drawn
    assert legend[0].startswith("ideal matmul") and any(t.startswith("pipeline bubble") for t in legend)
    assert "Llama 3 70B" in (root.findtext(f"{SVG_NS}title") or "")


def test_the_breakdown_as_a_png(client: TestClient) -> None:
    response = client.post(PATH, json=request(), headers={"Accept": "image/png"})
    assert response.status_code == 200
    assert response.headers["content-type"] == "image/png"
    assert response.content[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_unsupported_accept_is_406(client: TestClient) -> None:
    response = client.post(PATH, json=request(), headers={"Accept": "text/csv"})
    assert response.status_code == 406
    assert response.headers["content-type"] == "application/problem+json"
    assert "image/svg+xml" in response.json()["detail"]


# --------------------------------------------------------------------------------------------------
# Problems


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"layout": {"tp": 8, "pp": 4, "dp": 16}}, "body.layout.dp"),  # 512 devices for a 1024 cluster
        (
            {"layout": {"tp": 3, "dp": 1}, "cluster": {"accelerator": "h100-sxm", "device_count": 3}},
            "body.layout.tp",
        ),
        ({"layout": {"tp": 8, "pp": 128, "dp": 1}}, "body.layout.pp"),  # more stages than the 80 layers
        ({"layout": {"tp": 8, "pp": 4, "dp": 32, "micro_batch_sequences": 3}}, "body.global_batch_sequences"),
        (
            {
                "global_batch_sequences": None,
                "global_batch_tokens": 32 * 8192 * 3,
                "layout": {"tp": 8, "pp": 4, "dp": 32, "micro_batch_sequences": 2},
            },
            "body.global_batch_tokens",
        ),
        ({"global_batch_sequences": 32 * 6}, "body.layout.virtual_stages"),  # 6 micro-batches, pp 4
        ({"global_batch_sequences": None, "global_batch_tokens": 1000}, "body.global_batch_tokens"),
        ({"global_batch_tokens": 8192}, "body"),
        ({"global_batch_sequences": None}, "body"),
        (
            {"precision": "fp8", "cluster": {"accelerator": "a100-sxm4-80gb", "device_count": 1024}},
            "body.precision",
        ),
        (
            {
                "cluster": {
                    "accelerator": "h100-sxm",
                    "device_count": 1024,
                    "inter_node_bandwidth_bytes_per_second": 0,
                }
            },
            "body.cluster.inter_node_bandwidth_bytes_per_second",
        ),
        ({"cluster": {"accelerator": "b2000", "device_count": 1024}}, "body.cluster.accelerator"),
        ({"cluster": {"device_count": 1024}}, "body.cluster"),
        ({"calibration": {"matmul_efficiency_scale": 5}}, "body.calibration.matmul_efficiency_scale"),
        ({"convention": "chinchilla"}, "body.convention"),
        # 80 layers: 40 + 40 on the end stages leave none for the 2 middle ones
        (
            {"layout": {"tp": 8, "pp": 4, "dp": 32, "first_stage_layers": 40, "last_stage_layers": 40}},
            "body.layout.first_stage_layers",
        ),
        ({"layout": {"tp": 8, "dp": 128, "last_stage_layers": 10}}, "body.layout.last_stage_layers"),
        (
            {"layout": {"tp": 8, "pp": 4, "dp": 32, "zero_stage": 3, "shard_group_size": 24}},
            "body.layout.shard_group_size",
        ),
        (
            {"layout": {"tp": 8, "pp": 4, "dp": 32, "recompute": "full", "recompute_every_k_layers": 0}},
            "body.layout.recompute_every_k_layers",
        ),
        ({"layout": {"tp": 8, "pp": 4, "dp": 32, "selective_policy": "all"}}, "body.layout.selective_policy"),
    ],
)
def test_bad_inputs_are_422_problems_naming_the_field(
    client: TestClient, change: dict[str, Any], field: str
) -> None:
    response = client.post(PATH, json=request(**change))
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    fields = [error["field"] for error in response.json()["errors"]]
    assert any(f == field or f.startswith((field + ".", field + "[")) for f in fields), fields


def test_a_layout_that_does_not_multiply_to_the_cluster_says_what_it_multiplies_to(
    client: TestClient,
) -> None:
    response = client.post(PATH, json=request(layout={"tp": 8, "pp": 4, "dp": 16}))
    assert "512" in response.json()["detail"] and "1024" in response.json()["detail"]


# --------------------------------------------------------------------------------------------------
# Uneven pipelines, hybrid sharding, checkpoint policies; the stated uncertainty (issue 16)


def llama3_405b(**layout: Any) -> dict[str, Any]:
    """Llama 3 405B's published layout (Dubey et al. 2024 §3.3, Table 4: tp 8, pp 16, 8192 tokens),
    on 2048 H100s (dp 16) with 2048 sequences per step."""
    return {
        "model": {"preset": "llama3.1-405b"},
        "seq_len_tokens": 8192,
        "cluster": {"accelerator": "h100-sxm", "device_count": 2048},
        "global_batch_sequences": 2048,
        "layout": {"tp": 8, "pp": 16, "dp": 16, "distributed_optimizer": True, "recompute": "full", **layout},
    }


def test_llama_3_405b_on_16_stages_is_predicted_as_an_uneven_pipeline(client: TestClient) -> None:
    from service.domain.performance import REGIME_MAE_MFU_POINTS

    response = client.post(PATH, json=llama3_405b())
    assert response.status_code == 200, response.text  # was "pp does not divide n_layers"
    body = response.json()
    assert 0 < body["mfu"] < 1
    assert "uneven-pp" in body["regimes"] and "hopper" in body["regimes"]
    assert body["uncertainty_mfu_points"] == pytest.approx(
        max(REGIME_MAE_MFU_POINTS[r] for r in body["regimes"])
    )
    # the default split is 7 layers on each end stage, 8 on the 14 middle ones: pinning it changes nothing
    pinned = client.post(PATH, json=llama3_405b(first_stage_layers=7, last_stage_layers=7)).json()
    assert pinned["step_time_seconds"] == pytest.approx(body["step_time_seconds"], rel=1e-12)
    # interleaving with stages that do not divide evenly (7 = the fewest layers on a stage)
    interleaved = client.post(PATH, json=llama3_405b(virtual_stages=7))
    assert interleaved.status_code == 200, interleaved.text
    assert interleaved.json()["bubble_fraction"] < body["bubble_fraction"]


def test_an_explicit_split_that_loads_the_embedding_stage_is_slower(client: TestClient) -> None:
    """9 layers on the first stage (which also embeds) and 7 on the last: the first stage is the
    slowest and sets the pace, so the step is no faster than the default 7/8/7 split."""
    default = client.post(PATH, json=llama3_405b()).json()
    heavy = client.post(PATH, json=llama3_405b(first_stage_layers=9, last_stage_layers=7))
    assert heavy.status_code == 200, heavy.text
    answer = heavy.json()
    assert answer["layout"]["first_stage_layers"] == 9
    assert answer["step_time_seconds"] > default["step_time_seconds"]


def test_hybrid_sharding_and_keeping_gathered_weights_are_predicted(client: TestClient) -> None:
    """ZeRO-3 on 64 A100s over 25 GB/s links: sharding within the 8-GPU node (HSDP) holds 8 times the
    model states of sharding over all 64; keeping the gathered layer for backward (reshard_after_forward
    false) drops the backward all-gather, so less data-parallel traffic."""

    def step(**layout: Any) -> dict[str, Any]:
        response = client.post(PATH, json={**small_on_a100(64, zero_stage=3, **layout),
                                           "global_batch_sequences": 512})  # fmt: skip
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer

    fsdp = step()
    hsdp = step(shard_group_size=8)
    kept = step(reshard_after_forward=False)
    assert hsdp["layout"]["shard_group_size"] == 8 and kept["layout"]["reshard_after_forward"] is False
    assert hsdp["memory"]["model_states_bytes"] > fsdp["memory"]["model_states_bytes"]
    assert kept["data_parallel_comm_seconds"] < fsdp["data_parallel_comm_seconds"]
    assert "fsdp-zero3" in fsdp["regimes"]


def test_every_request_example_in_the_openapi_answers_200(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    examples = spec["components"]["schemas"]["StepPredictionRequest"]["examples"]
    assert len(examples) >= 2
    for example in examples:
        response = client.post(PATH, json=example)
        assert response.status_code == 200, (example, response.text)


# --------------------------------------------------------------------------------------------------
# /v1/estimates/training at a predicted MFU


def estimate(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": {"preset": "llama3-70b"},
        "seq_len_tokens": 8192,
        "hardware": {"accelerator": "h100-sxm", "device_count": 1024},
        "token_budget_tokens": 15e12,
        "predict": {
            "layout": {"tp": 8, "pp": 4, "virtual_stages": 5, "dp": 32, "distributed_optimizer": True},
            "global_batch_sequences": 512,
        },
    }
    body.update(overrides)
    return {key: value for key, value in body.items() if value is not None}


def test_an_estimate_at_the_mfu_predicted_for_a_layout(client: TestClient) -> None:
    response = client.post("/v1/estimates/training", json=estimate())
    assert response.status_code == 200, response.text
    body = response.json()
    step = predict(client)
    assert body["mfu_source"] == "predicted"
    assert body["prediction"]["layout_source"] == "given"
    assert body["prediction"]["mfu"] == pytest.approx(step["mfu"])
    assert body["at_given_mfu"]["mfu"] == pytest.approx(step["mfu"])
    # the job takes its tokens at the predicted rate
    assert body["at_given_mfu"]["wall_clock_seconds"] == pytest.approx(
        15e12 / step["tokens_per_second"], rel=1e-9
    )
    assert body["summary"].startswith("MFU predicted:")


def test_an_estimate_without_a_layout_uses_the_planners_best(client: TestClient) -> None:
    job = estimate(predict={"global_batch_sequences": 2048})
    body = client.post("/v1/estimates/training", json=job).json()
    plan = client.post(
        "/v1/plans/parallelism",
        json={"model": {"preset": "llama3-70b"}, "seq_len_tokens": 8192,
              "cluster": {"accelerator": "h100-sxm", "device_count": 1024}, "global_batch_sequences": 2048},
    ).json()  # fmt: skip
    assert body["prediction"]["layout_source"] == "planner_best"
    assert body["prediction"]["layout"] == plan["candidates"][0]["layout"]
    assert body["at_given_mfu"]["mfu"] == pytest.approx(plan["candidates"][0]["mfu"])


def test_an_estimate_takes_the_global_batch_from_global_batch_tokens(client: TestClient) -> None:
    job = estimate(token_budget_tokens=None, total_steps=1000, global_batch_tokens=512 * 8192,
                   predict={"layout": {"tp": 8, "pp": 4, "virtual_stages": 5, "dp": 32}})  # fmt: skip
    body = client.post("/v1/estimates/training", json=job).json()
    assert body["prediction"]["global_batch_sequences"] == 512
    assert body["at_given_mfu"]["wall_clock_seconds"] == pytest.approx(
        1000 * body["prediction"]["step_time_seconds"]
    )


def test_a_given_mfu_is_still_answered_as_given(client: TestClient) -> None:
    body = client.post("/v1/estimates/training", json=estimate(predict=None, mfu=0.4)).json()
    assert body["mfu_source"] == "given" and body["prediction"] is None


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"mfu": 0.4}, "body"),  # both
        ({"predict": None}, "body"),  # neither
        ({"model": None, "seq_len_tokens": None, "total_training_flops": 1e24}, "body.predict"),
        ({"predict": {"layout": {"tp": 8, "dp": 64}}}, "body.predict.global_batch_sequences"),
        (
            {"predict": {"layout": {"tp": 8, "dp": 64}, "global_batch_tokens": 1000}},
            "body.predict.global_batch_tokens",
        ),
        (
            {"predict": {"layout": {"tp": 8, "dp": 64}, "global_batch_sequences": 512}},
            "body.predict.layout.dp",
        ),
        (
            {"predict": {"layout": {"tp": 8, "dp": 128, "zero_stage": 9}, "global_batch_sequences": 512}},
            "body.predict.layout.zero_stage",
        ),
        (
            {"predict": {"layout": {"tp": 8, "dp": 128}, "constraints": {}, "global_batch_sequences": 512}},
            "body.predict.constraints",
        ),
        ({"predict": {"global_batch_sequences": 512, "constraints": {"tp_values": [3]}}}, "body.predict"),
    ],
)
def test_bad_predicted_estimates_are_422_problems_naming_the_field(
    client: TestClient, change: dict[str, Any], field: str
) -> None:
    job = estimate()
    job.update(change)
    job = {key: value for key, value in job.items() if value is not None}
    response = client.post("/v1/estimates/training", json=job)
    assert response.status_code == 422, response.text
    fields = [error["field"] for error in response.json()["errors"]]
    assert any(f == field or f.startswith((field + ".", field + "[")) for f in fields), fields


def test_every_training_estimate_example_answers_200(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    examples = spec["components"]["schemas"]["TrainingEstimateRequest"]["examples"]
    assert any("predict" in example for example in examples)
    for example in examples:
        response = client.post("/v1/estimates/training", json=example)
        assert response.status_code == 200, (example, response.text)
