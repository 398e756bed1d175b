"""A run's ``parallelism`` is the performance endpoints' ``layout``: the same knobs, so a run's layout
posts to /v1/predictions/step and /v1/memory as it is; the names runs had before still read."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update

from service.store.tables import runs
from service.store.uow import UnitOfWork
from tests.api.conftest import StoreClient, run_body

PROBLEM = "application/problem+json"


def test_a_runs_layout_posts_back_as_the_layout_of_a_prediction_and_reads_the_same(
    store_client: StoreClient,
) -> None:
    given = {"tp": 2, "pp": 2, "virtual_stages": 2, "micro_batch_sequences": 1,
             "distributed_optimizer": True, "recompute": "selective"}  # fmt: skip
    run = store_client.create_run(parallelism=given)
    layout = run["parallelism"]
    assert layout["dp"] == 64 // 4 and layout["zero_stage"] == 1 and layout["fp32_grad_accumulation"] is True
    assert layout["sequence_parallel"] is True  # on with tp > 1, as the predictions assume
    prediction = store_client.client.post(
        "/v1/predictions/step",
        json={
            "model": {"preset": "llama3-8b"},
            "seq_len_tokens": run["seq_len_tokens"],
            "cluster": {"accelerator": "h100-sxm", "device_count": run["device_count"]},
            "layout": layout,
            "global_batch_sequences": run["global_batch_sequences"],
        },
    )
    assert prediction.status_code == 200, prediction.text
    assert prediction.json()["layout"] == layout
    memory = store_client.client.post(
        "/v1/memory",
        json={"model": {"preset": "llama3-8b"}, "seq_len_tokens": run["seq_len_tokens"], "layout": layout},
    )
    assert memory.status_code == 200, memory.text


def test_the_old_names_are_read_and_answered_in_todays(store_client: StoreClient) -> None:
    run = store_client.create_run(
        parallelism={"tp": 2, "pp": 2, "virtual_pipeline_stages": 2, "fsdp": True, "micro_batch_sequences": 1}
    )
    layout = run["parallelism"]
    assert "virtual_pipeline_stages" not in layout and "fsdp" not in layout
    assert (layout["virtual_stages"], layout["zero_stage"]) == (2, 3)
    sharded_grads = store_client.create_run(parallelism={"fsdp": True, "zero_stage": 2})
    assert sharded_grads["parallelism"]["zero_stage"] == 2


def test_an_fsdp_name_and_a_layout_the_model_cannot_run_are_answered_as_elsewhere(
    store_client: StoreClient,
) -> None:
    run = store_client.create_run(parallelism={"zero_stage": "shard_grad_op"})
    assert run["parallelism"]["zero_stage"] == 2
    # Llama 3 8B has 32 layers: 64 pipeline stages cannot hold it; 8 experts need an MoE model.
    for parallelism, field in (({"pp": 64}, "body.parallelism.pp"), ({"ep": 2}, "body.parallelism.ep")):
        refused = store_client.client.post(
            "/v1/runs", json=run_body(parallelism=parallelism), headers=store_client.writer
        )
        assert refused.status_code == 422 and refused.headers["content-type"] == PROBLEM
        assert [e["field"] for e in refused.json()["errors"]] == [field], refused.text


def test_a_run_stored_with_the_old_names_reads_in_todays_and_compares(store_client: StoreClient) -> None:
    old = store_client.create_run(parallelism={"tp": 2})
    new = store_client.create_run(parallelism={"tp": 2, "zero_stage": 3, "sequence_parallel": False})
    # The row as POST /v1/runs stored it before 2026-12: eleven knobs, the old names.
    old_layout: dict[str, Any] = {"tp": 2, "pp": 1, "dp": 32, "cp": 1, "ep": 1, "micro_batch_sequences": None,
                                  "virtual_pipeline_stages": None, "sequence_parallel": False, "zero_stage": 0,
                                  "fsdp": True, "recompute": "none"}  # fmt: skip
    with UnitOfWork(store_client.engine, write=True) as uow:
        spec = uow.connection.execute(select(runs.c.spec).where(runs.c.id == old["id"])).scalar_one()
        uow.connection.execute(
            update(runs).where(runs.c.id == old["id"]).values(spec={**spec, "parallelism": old_layout})
        )
        uow.commit()
    read = store_client.client.get(f"/v1/runs/{old['id']}", headers=store_client.reader)
    assert read.status_code == 200, read.text
    assert read.json()["parallelism"] == new["parallelism"]  # fsdp → ZeRO-3, the rest at their defaults
    compared = store_client.client.post(
        "/v1/runs/compare", json={"run_ids": [old["id"], new["id"]]}, headers=store_client.reader
    )
    assert compared.status_code == 200, compared.text
    assert compared.json()["same_fields"]["parallelism.zero_stage"] == 3
    assert not any(name.startswith("parallelism.") for name in compared.json()["differing_fields"])
    efficiency = store_client.client.get(f"/v1/runs/{old['id']}/efficiency", headers=store_client.reader)
    assert efficiency.status_code == 200, efficiency.text
