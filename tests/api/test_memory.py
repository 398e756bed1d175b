"""POST /v1/memory through the app: Korthikanti et al. 2022 Fig. 1, bytes per parameter under ZeRO and
Megatron's distributed optimizer (published formulas), micro-batch scaling, the fit verdict and the
largest micro-batch, and a problem naming the field for every bad layout."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

PATH = "/v1/memory"
GIB = 2**30


def korthikanti_gpt(h: int, a: int, n_layers: int) -> dict[str, Any]:
    """Korthikanti et al. 2022 Table 3 GPT models: V = 51200, learned positions, s = 2048, biases."""
    return {
        "dimensions": {
            "n_layers": n_layers, "d_model": h, "n_heads": a, "vocab_size": 51200, "ffn_kind": "plain",
            "position_embedding": "learned", "max_position_embeddings": 2048, "norm_kind": "layernorm",
            "norm_has_bias": True, "qkv_bias": True, "attn_out_bias": True, "mlp_bias": True,
            "tied_embeddings": True,
        }
    }  # fmt: skip


def post(client: TestClient, **body: Any) -> dict[str, Any]:
    response = client.post(PATH, json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


# Korthikanti Fig. 1, GiB per GPU: params + optimizer; activations without recompute → with sequence
# parallelism + selective recompute. Fig. 1 uses fp32 gradients (18 bytes/parameter), micro-batch 4 for
# 22B and 1 for 175B, interleaving v = 3 for 175B.
FIG1 = [
    # name, h, a, L, t, p, b, v, params+optimizer, activations none, activations seq+selective
    ("22B", 6144, 64, 48, 8, 1, 4, 1, 45.56, 59.25, 9.56),
    ("175B", 12288, 96, 96, 8, 8, 1, 3, 45.56, 66.84, 12.35),
]


@pytest.mark.parametrize(("name", "h", "a", "L", "t", "p", "b", "v", "states", "none", "selective"), FIG1)
def test_korthikanti_figure_1_is_reproduced_within_10_percent(
    client: TestClient,
    name: str,
    h: int,
    a: int,
    L: int,
    t: int,
    p: int,
    b: int,
    v: int,
    states: float,
    none: float,
    selective: float,
) -> None:
    layout = {"tp": t, "pp": p, "virtual_stages": v, "micro_batch_sequences": b, "flash_attention": False,
              "fp32_grad_accumulation": True}  # fmt: skip
    model = korthikanti_gpt(h, a, L)
    base = post(client, model=model, seq_len_tokens=2048, precision="fp16",
                layout={**layout, "sequence_parallel": False})  # fmt: skip
    selective_answer = post(client, model=model, seq_len_tokens=2048, precision="fp16",
                            layout={**layout, "sequence_parallel": True, "recompute": "selective"})  # fmt: skip
    assert base["model_states_bytes"] / GIB == pytest.approx(states, rel=0.10)
    assert base["activations_bytes"] / GIB == pytest.approx(none, rel=0.10)
    assert selective_answer["activations_bytes"] / GIB == pytest.approx(selective, rel=0.10)
    assert base["stage"] in ("only", "first")
    assert base["optimizer"]["total_bytes_per_parameter"] == 18  # 2 + 4 (fp32 grads) + 12


def test_mixed_precision_adam_is_16_bytes_per_parameter_and_says_so(client: TestClient) -> None:
    body = post(client, model={"preset": "llama3-8b"}, seq_len_tokens=4096)
    optimizer = body["optimizer"]
    assert (optimizer["requested"], optimizer["name"]) == ("adam", "adam_mixed")
    assert (
        optimizer["weight_bytes_per_parameter"],
        optimizer["gradient_bytes_per_parameter"],
        optimizer["optimizer_state_bytes_per_parameter"],
    ) == (2, 2, 12)
    assert body["model_state_bytes_per_parameter"] == pytest.approx(16)
    assert body["weights_bytes"] == pytest.approx(2 * body["parameters_on_device"])
    assert "ZeRO" in optimizer["source"]
    assert body["fits"] is None and body["accelerator"] is None  # no hardware, no verdict


@pytest.mark.parametrize(("optimizer", "total"), [("sgd_momentum", 12), ("adafactor", 8), ("adam_8bit", 10)])
def test_other_optimizers_echo_their_bytes_per_parameter(
    client: TestClient, optimizer: str, total: float
) -> None:
    body = post(client, model={"preset": "llama3-8b"}, seq_len_tokens=2048, optimizer=optimizer)
    assert body["optimizer"]["total_bytes_per_parameter"] == total
    assert body["model_state_bytes_per_parameter"] == pytest.approx(total)


def test_model_states_fall_with_each_zero_stage_as_the_zero_paper_says(client: TestClient) -> None:
    """ZeRO (Rajbhandari et al. 2020 §5): per parameter 2 + 2 + 12 → 2 + 2 + 12/d → 2 + 14/d → 16/d."""
    d = 8
    expected = {0: 16, 1: 4 + 12 / d, 2: 2 + 14 / d, 3: 16 / d}
    totals = []
    for stage, per_parameter in expected.items():
        body = post(client, model={"preset": "llama3-8b"}, seq_len_tokens=4096,
                    layout={"dp": d, "zero_stage": stage})  # fmt: skip
        assert body["model_state_bytes_per_parameter"] == pytest.approx(per_parameter)
        assert body["layout"]["zero_stage"] == stage
        totals.append(body["total_bytes"])
    assert totals == sorted(totals, reverse=True) and len(set(totals)) == 4


def test_fsdp_names_are_aliases_of_zero_stages(client: TestClient) -> None:
    request: dict[str, Any] = {"model": {"preset": "llama3-8b"}, "seq_len_tokens": 4096}
    for alias, stage in (("full_shard", 3), ("shard_grad_op", 2), ("no_shard", 0)):
        by_alias = post(client, **request, layout={"dp": 8, "zero_stage": alias})
        by_stage = post(client, **request, layout={"dp": 8, "zero_stage": stage})
        assert by_alias["layout"]["zero_stage"] == stage
        assert by_alias["total_bytes"] == by_stage["total_bytes"]
    assert any(
        "full_shard" in note
        for note in post(client, **request, layout={"dp": 8, "zero_stage": "full_shard"})["assumptions"]
    )


def test_distributed_optimizer_is_6_plus_12_over_d_bytes_per_parameter(client: TestClient) -> None:
    """Megatron-LM distributed optimizer docs: 6 + 12/d bytes per parameter (fp32 gradients)."""
    for d in (8, 64):
        body = post(client, model={"preset": "llama3-8b"}, seq_len_tokens=4096,
                    layout={"dp": d, "distributed_optimizer": True})  # fmt: skip
        assert body["model_state_bytes_per_parameter"] == pytest.approx(6 + 12 / d)
        assert body["layout"]["zero_stage"] == 1 and body["layout"]["fp32_grad_accumulation"] is True
        assert body["layout"]["distributed_optimizer"] is True


def test_activations_grow_linearly_with_the_micro_batch(client: TestClient) -> None:
    answers = [
        post(
            client,
            model={"preset": "llama3-8b"},
            seq_len_tokens=4096,
            layout={"tp": 2, "dp": 4, "micro_batch_sequences": b},
        )
        for b in (1, 2, 4)
    ]
    one = answers[0]["activations_bytes"]
    assert [a["activations_bytes"] for a in answers] == pytest.approx([one, 2 * one, 4 * one])
    totals = [a["total_bytes"] for a in answers]
    assert totals[0] < totals[1] < totals[2]
    assert answers[0]["layout"]["sequence_parallel"] is True  # the default with tp > 1


def test_recompute_and_tensor_parallelism_shrink_activations(client: TestClient) -> None:
    def activations(**layout: Any) -> float:
        body = post(client, model={"preset": "llama3-8b"}, seq_len_tokens=4096, layout={"dp": 8, **layout})
        return float(body["activations_bytes"])

    assert activations(recompute="full") < activations(recompute="selective") <= activations()
    assert activations(tp=2, dp=4) < activations()


def test_a_70b_model_on_one_h100_does_not_fit_and_no_micro_batch_would(client: TestClient) -> None:
    body = post(
        client, model={"preset": "llama3-70b"}, seq_len_tokens=4096, hardware={"accelerator": "h100-sxm"}
    )
    assert body["fits"] is False
    assert body["max_micro_batch_sequences"] == 0
    assert body["capacity_bytes"] == 80 * GIB
    assert body["headroom_bytes"] == pytest.approx(body["capacity_bytes"] - body["total_bytes"])
    assert body["headroom_bytes"] < 0
    assert body["warnings"] and "does not fit" in body["warnings"][0]
    assert "Does not fit" in body["reading"]


def test_a_too_big_micro_batch_reports_the_largest_that_fits(client: TestClient) -> None:
    def answer(b: int) -> dict[str, Any]:
        return post(client, model={"preset": "llama3-8b"}, seq_len_tokens=4096,
                    hardware={"accelerator": "NVIDIA H100 80GB HBM3"},
                    layout={"dp": 8, "zero_stage": 1, "micro_batch_sequences": b})  # fmt: skip

    too_big = answer(64)
    largest = too_big["max_micro_batch_sequences"]
    assert too_big["fits"] is False and 1 <= largest < 64
    assert f"a micro-batch of {largest} sequences fits" in too_big["warnings"][0]
    assert answer(largest)["fits"] is True
    assert answer(largest + 1)["fits"] is False
    assert answer(largest)["accelerator"]["id"] == "h100-sxm"


def test_total_is_the_sum_of_its_parts(client: TestClient) -> None:
    body = post(client, model={"preset": "mixtral-8x7b"}, seq_len_tokens=4096,
                layout={"tp": 2, "dp": 8, "ep": 8, "zero_stage": 3}, hardware={"accelerator": "h100-sxm"})  # fmt: skip
    parts = ("weights_bytes", "gradients_bytes", "optimizer_state_bytes", "activations_bytes", "buffers_bytes",
             "framework_overhead_bytes", "fragmentation_bytes")  # fmt: skip
    assert sum(body[p] for p in parts) == pytest.approx(body["total_bytes"])
    assert body["total_gib"] == pytest.approx(body["total_bytes"] / GIB)
    assert body["buffers_bytes"] > 0  # ZeRO-3 gathers layers


def test_a_custom_part_is_fitted_by_its_memory(client: TestClient) -> None:
    request: dict[str, Any] = {"model": {"preset": "llama3-8b"}, "seq_len_tokens": 4096,
                               "layout": {"dp": 8, "zero_stage": 3}}  # fmt: skip
    small = post(client, **request, hardware={"custom": {"name": "x", "peak_tflops": {"bf16": 100},
                                                           "memory_bytes": 4 * GIB}})  # fmt: skip
    large = post(client, **request, hardware={"custom": {"name": "x", "peak_tflops": {"bf16": 100},
                                                           "memory_bytes": 200 * GIB}})  # fmt: skip
    assert small["fits"] is False and large["fits"] is True
    assert small["total_bytes"] == large["total_bytes"]


def test_pipeline_first_stage_holds_fewer_micro_batches_when_the_batch_is_small(client: TestClient) -> None:
    request: dict[str, Any] = {"model": {"preset": "llama3-8b"}, "seq_len_tokens": 4096,
                               "layout": {"pp": 4, "dp": 2}}  # fmt: skip
    full = post(client, **request)
    few = post(client, **request, global_batch_sequences=4)  # 2 micro-batches per replica
    assert full["in_flight_micro_batches"] == 4 and few["in_flight_micro_batches"] == 2
    assert few["activations_bytes"] < full["activations_bytes"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"layout": {"tp": 0}}, "body.layout.tp"),
        ({"layout": {"zero_stage": 4}}, "body.layout.zero_stage"),
        ({"layout": {"sequence_parallel": True}}, "body.layout.sequence_parallel"),
        ({"layout": {"virtual_stages": 2}}, "body.layout.virtual_stages"),
        ({"layout": {"pp": 64}}, "body.layout.pp"),
        ({"layout": {"pp": 4, "virtual_stages": 9}}, "body.layout.virtual_stages"),  # 8 layers a stage
        ({"layout": {"cp": 3}}, "body.layout.cp"),
        ({"layout": {"dp": 3, "ep": 2}}, "body.layout.ep"),
        ({"layout": {"dp": 2, "ep": 2}}, "body.layout.ep"),  # a dense model has no experts
        (
            {"layout": {"dp": 8, "zero_stage": 3, "distributed_optimizer": True}},
            "body.layout.distributed_optimizer",
        ),
        ({"layout": {"zero_stage": "hybrid_shard"}}, "body.layout.zero_stage"),
        ({"optimizer": "lion"}, "body.optimizer"),
        ({"hardware": {"accelerator": "h1000"}}, "body.hardware.accelerator"),
        (
            {"hardware": {"custom": {"name": "x", "peak_tflops": {"bf16": 100}}}},
            "body.hardware.custom.memory_bytes",
        ),
        ({"seq_len_tokens": 0}, "body.seq_len_tokens"),
        ({"global_batch_sequences": 0}, "body.global_batch_sequences"),
        # uneven pipelines: pinned stages need pp > 1 and must leave a layer for every middle stage
        ({"layout": {"first_stage_layers": 4}}, "body.layout.first_stage_layers"),
        (
            {"layout": {"pp": 4, "first_stage_layers": 20, "last_stage_layers": 20}},
            "body.layout.first_stage_layers",
        ),
        (
            {"layout": {"pp": 2, "first_stage_layers": 10, "last_stage_layers": 10}},
            "body.layout.first_stage_layers",
        ),
        ({"layout": {"pp": 2, "first_stage_layers": 0}}, "body.layout.first_stage_layers"),
        (
            {"layout": {"recompute": "full", "recompute_every_k_layers": 0}},
            "body.layout.recompute_every_k_layers",
        ),
        ({"layout": {"recompute": "selective", "selective_policy": "some"}}, "body.layout.selective_policy"),
        ({"layout": {"dp": 12, "zero_stage": 3, "shard_group_size": 8}}, "body.layout.shard_group_size"),
        ({"layout": {"zero3_gather_unit": "tensor"}}, "body.layout.zero3_gather_unit"),
        ({"layout": {"attention_kernel": "flash9"}}, "body.layout.attention_kernel"),
        ({"layout": {"expert_load_imbalance": 0.5}}, "body.layout.expert_load_imbalance"),
    ],
)
def test_bad_inputs_are_422_problems_naming_the_field(
    client: TestClient, change: dict[str, Any], field: str
) -> None:
    request: dict[str, Any] = {
        "model": {"preset": "llama3-8b"},
        "seq_len_tokens": 4096,
    }  # cp = 3 does not divide it
    request.update(change)
    response = client.post(PATH, json=request)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    fields = [error["field"] for error in response.json()["errors"]]
    assert any(f.startswith(field) for f in fields), fields


# --------------------------------------------------------------------------------------------------
# Uneven pipelines, hybrid sharding, checkpoint policies (issue 16)


def test_pp_16_on_the_126_layers_of_llama_3_405b_is_accepted_with_the_fewer_layers_on_the_end_stages(
    client: TestClient,
) -> None:
    """Llama 3 405B (126 layers) ran on 16 pipeline stages (Dubey et al. 2024 §3.3): 126 = 2·7 + 14·8."""
    request: dict[str, Any] = {"model": {"preset": "llama3.1-405b"}, "seq_len_tokens": 8192,
                               "global_batch_sequences": 2048}  # fmt: skip
    layout = {"tp": 8, "pp": 16, "dp": 16, "distributed_optimizer": True}
    default = post(client, **request, layout=layout)
    assert default["layout"]["first_stage_layers"] is None
    pinned = post(client, **request, layout={**layout, "first_stage_layers": 7, "last_stage_layers": 7})
    assert pinned["layout"]["first_stage_layers"] == 7 and pinned["layout"]["last_stage_layers"] == 7
    assert pinned["total_bytes"] == pytest.approx(default["total_bytes"], rel=1e-12)
    # One more layer on the first stage (and one fewer on a middle one): its weights and in-flight
    # activations grow by one layer's worth, the worst stage's total with them.
    heavier = post(client, **request, layout={**layout, "first_stage_layers": 8, "last_stage_layers": 7})
    assert heavier["parameters_on_device"] > default["parameters_on_device"]
    assert heavier["total_bytes"] > default["total_bytes"]


def test_hybrid_sharding_keeps_one_shard_per_group(client: TestClient) -> None:
    """HSDP: ZeRO-3 over groups of 8 of the 64 ranks holds 16/8 bytes per parameter of model states
    instead of 16/64 (Rajbhandari et al. 2020 §5 with d = the group size)."""
    request: dict[str, Any] = {"model": {"preset": "llama3-8b"}, "seq_len_tokens": 4096}
    full = post(client, **request, layout={"dp": 64, "zero_stage": 3})
    hybrid = post(client, **request, layout={"dp": 64, "zero_stage": 3, "shard_group_size": 8})
    assert hybrid["layout"]["shard_group_size"] == 8 and full["layout"]["shard_group_size"] is None
    assert full["model_state_bytes_per_parameter"] == pytest.approx(16 / 64)
    assert hybrid["model_state_bytes_per_parameter"] == pytest.approx(16 / 8)


def test_checkpoint_policies_save_what_their_frameworks_say(client: TestClient) -> None:
    """With FlashAttention the s×s core is never stored, so Korthikanti's attention-core recompute saves
    nothing, while torchtitan's per-op policy (keep every other matmul output) does; checkpointing one
    layer in k keeps the other layers' activations, between full recompute and none."""

    def activations(**layout: Any) -> float:
        body = post(client, model={"preset": "llama3-8b"}, seq_len_tokens=4096, layout={"dp": 8, **layout})
        assert all(body["layout"][name] == value for name, value in layout.items())
        return float(body["activations_bytes"])

    none = activations()
    assert activations(recompute="selective", selective_policy="attention_core") == pytest.approx(none)
    assert activations(recompute="selective", selective_policy="per_op") < none
    every_layer = activations(recompute="full")
    every_second = activations(recompute="full", recompute_every_k_layers=2)
    assert every_layer < every_second < none


def test_every_request_example_in_the_openapi_answers_200(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    examples = spec["components"]["schemas"]["MemoryRequest"]["examples"]
    assert len(examples) >= 3
    for example in examples:
        response = client.post(PATH, json=example)
        assert response.status_code == 200, (example, response.text)
