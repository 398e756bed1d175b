"""The one mapping from the API's layout knobs to the domain layout, and the names a run's layout had
before it took the performance endpoints' (stored rows and old clients)."""

from __future__ import annotations

import pytest

from service.domain.errors import InvalidInput
from service.domain.parallel_layout import (
    layout_from_knobs,
    layout_knobs,
    stored_layout_knobs,
    with_current_names,
)


@pytest.mark.parametrize(
    ("name", "stage"),
    # torch.distributed.fsdp.ShardingStrategy: NO_SHARD is DDP, SHARD_GRAD_OP shards gradients and
    # optimizer state (ZeRO-2), FULL_SHARD also the parameters (ZeRO-3).
    [("no_shard", 0), ("shard_grad_op", 2), ("full_shard", 3)],
)
def test_an_fsdp_sharding_name_is_its_zero_stage(name: str, stage: int) -> None:
    assert layout_from_knobs({"dp": 8, "zero_stage": name}).zero_stage == stage


def test_the_distributed_optimizer_is_zero_1_with_fp32_gradients_unless_they_are_said_to_be_16_bit() -> None:
    layout = layout_from_knobs({"dp": 8, "distributed_optimizer": True})
    assert (layout.zero_stage, layout.fp32_grad_accumulation) == (1, True)
    assert layout_knobs(layout)["distributed_optimizer"] is True
    bf16_grads = layout_from_knobs({"dp": 8, "distributed_optimizer": True, "fp32_grad_accumulation": False})
    assert (bf16_grads.zero_stage, bf16_grads.fp32_grad_accumulation) == (1, False)
    assert layout_knobs(bf16_grads)["distributed_optimizer"] is False


def test_sequence_parallel_is_on_with_tensor_parallelism_unless_said_otherwise() -> None:
    assert layout_from_knobs({"tp": 8}).sequence_parallel is True
    assert layout_from_knobs({"tp": 1}).sequence_parallel is False
    assert layout_from_knobs({"tp": 8, "sequence_parallel": False}).sequence_parallel is False
    with pytest.raises(InvalidInput) as raised:
        layout_from_knobs({"tp": 1, "sequence_parallel": True})
    assert raised.value.field == "sequence_parallel"


def test_the_knobs_of_a_layout_map_back_to_the_same_layout() -> None:
    layout = layout_from_knobs(
        {"tp": 4, "pp": 4, "virtual_stages": 2, "dp": 8, "zero_stage": "full_shard", "recompute": "selective",
         "selective_policy": "per_op", "shard_group_size": 4, "first_stage_layers": 3}
    )  # fmt: skip
    assert layout_from_knobs(layout_knobs(layout)) == layout


def test_the_old_run_names_read_as_todays() -> None:
    assert with_current_names({"pp": 4, "virtual_pipeline_stages": 3}) == {"pp": 4, "virtual_stages": 3}
    assert with_current_names({"pp": 1, "virtual_pipeline_stages": None}) == {"pp": 1}
    # fsdp: true was FULL_SHARD where no stage was given; a stage given stood (fsdp with stage 2 is
    # SHARD_GRAD_OP).
    assert with_current_names({"fsdp": True, "zero_stage": 0}) == {"zero_stage": 3}
    assert with_current_names({"fsdp": True}) == {"zero_stage": 3}
    assert with_current_names({"fsdp": True, "zero_stage": 2}) == {"zero_stage": 2}
    assert with_current_names({"fsdp": False, "zero_stage": 1}) == {"zero_stage": 1}


def test_a_row_stored_with_the_old_eleven_knobs_reads_with_every_knob() -> None:
    old_row = {"tp": 2, "pp": 2, "dp": 16, "cp": 1, "ep": 1, "micro_batch_sequences": None,
               "virtual_pipeline_stages": 4, "sequence_parallel": False, "zero_stage": 0, "fsdp": True,
               "recompute": "full"}  # fmt: skip
    knobs = stored_layout_knobs(old_row)
    assert "virtual_pipeline_stages" not in knobs and "fsdp" not in knobs
    assert (knobs["virtual_stages"], knobs["zero_stage"], knobs["sequence_parallel"]) == (4, 3, False)
    assert knobs["micro_batch_sequences"] is None
    # What the old rows did not record reads as the domain's defaults.
    assert (knobs["flash_attention"], knobs["overlap_dp_comm"], knobs["distributed_optimizer"]) == (
        True,
        True,
        False,
    )
    assert knobs["recompute_every_k_layers"] == 1 and knobs["shard_group_size"] is None
    assert stored_layout_knobs({"tp": 1})["micro_batch_sequences"] is None
    layout = layout_from_knobs({**knobs, "micro_batch_sequences": 1})
    assert (layout.virtual_stages, layout.zero_stage, layout.recompute) == (4, 3, "full")
