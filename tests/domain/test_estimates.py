"""Training estimates: time, device-hours, cost, energy at an MFU and beside other MFUs."""

from __future__ import annotations

import pytest

from service.domain.errors import InvalidInput
from service.domain.estimates import compute_time_seconds, devices_to_match, estimate_training
from service.domain.hardware import get_accelerator

H100 = get_accelerator("h100-sxm")


def test_doubling_mfu_halves_training_time() -> None:
    est = estimate_training(accelerator=H100, device_count=1024, precision="bf16", mfu=0.30,
                            total_training_flops=1e24)  # fmt: skip
    by_mfu = {job.mfu: job for job in est.at_other_mfus}
    assert by_mfu[0.30].wall_clock_seconds == pytest.approx(2 * by_mfu[0.60].wall_clock_seconds)


def test_llama3_8b_on_15t_tokens() -> None:
    # 6·N·D with N = 8.03e9, D = 15e12 tokens = 7.2e23 FLOPs; 1024 H100 at 40% MFU:
    # 7.227e23 / (1024 · 989.4e12 · 0.4) = 1.783e6 s ≈ 20.6 days.
    est = estimate_training(accelerator=H100, device_count=1024, precision="bf16", mfu=0.40,
                            model_flops_per_token=6 * 8.03e9, token_budget_tokens=15e12, price_per_device_hour=2.0)  # fmt: skip
    job = est.at_given_mfu
    assert est.total_training_flops == pytest.approx(7.227e23)
    assert job.wall_clock_seconds == pytest.approx(7.227e23 / (1024 * 989.4e12 * 0.4))
    assert job.device_hours == pytest.approx(job.wall_clock_seconds * 1024 / 3600)
    assert job.cost == pytest.approx(job.device_hours * 2.0)
    assert job.energy_kwh_upper_bound == pytest.approx(700 * 1024 * job.wall_clock_seconds / 3.6e6)


def test_steps_times_batch_tokens_is_a_token_budget() -> None:
    a = estimate_training(accelerator=H100, device_count=8, precision="bf16", mfu=0.4,
                          model_flops_per_token=1e9, total_steps=1000, global_batch_tokens=4_000_000)  # fmt: skip
    b = estimate_training(accelerator=H100, device_count=8, precision="bf16", mfu=0.4,
                          model_flops_per_token=1e9, token_budget_tokens=4e9)  # fmt: skip
    assert a.at_given_mfu.wall_clock_seconds == pytest.approx(b.at_given_mfu.wall_clock_seconds)


def test_an_mfu_gain_is_worth_devices() -> None:
    # 1000 devices at 30% match 500 at 60%: going to 60% frees half the cluster.
    assert devices_to_match(1000, 0.30, 0.60) == 500
    assert devices_to_match(1000, 0.60, 0.30) == 2000
    est = estimate_training(accelerator=H100, device_count=1000, precision="bf16", mfu=0.45,
                            total_training_flops=1e23)  # fmt: skip
    by_mfu = {job.mfu: job for job in est.at_other_mfus}
    assert by_mfu[0.30].devices_to_match_wall_clock == 1500


def test_step_time_formula_lives_in_one_function() -> None:
    assert compute_time_seconds(1e18, device_count=10, peak_flops_per_device=1e15, mfu=0.5) == pytest.approx(
        200
    )


def test_energy_is_absent_without_a_published_tdp() -> None:
    est = estimate_training(accelerator=get_accelerator("gh200"), device_count=8, precision="bf16", mfu=0.4,
                            total_training_flops=1e21)  # fmt: skip
    assert est.at_given_mfu.energy_kwh_upper_bound is None
    assert est.at_given_mfu.cost is None


@pytest.mark.parametrize("mfu", [0, 1.5, -0.1])
def test_mfu_must_be_a_fraction(mfu: float) -> None:
    with pytest.raises(InvalidInput) as err:
        estimate_training(
            accelerator=H100, device_count=8, precision="bf16", mfu=mfu, total_training_flops=1e21
        )
    assert err.value.field == "mfu"


def test_a_token_budget_is_required() -> None:
    with pytest.raises(InvalidInput) as err:
        estimate_training(
            accelerator=H100, device_count=8, precision="bf16", mfu=0.4, model_flops_per_token=1e9
        )
    assert err.value.field == "token_budget_tokens"


def test_total_flops_and_a_token_budget_together_are_ambiguous() -> None:
    with pytest.raises(InvalidInput):
        estimate_training(accelerator=H100, device_count=8, precision="bf16", mfu=0.4, total_training_flops=1e21,
                          model_flops_per_token=1e9, token_budget_tokens=1e9)  # fmt: skip


def test_an_mfu_too_small_for_a_float_to_hold_the_time_is_refused_naming_mfu() -> None:
    # The contract fuzz's case: 5e-324 (the smallest float) made the time infinite, answered as a 500.
    with pytest.raises(InvalidInput) as err:
        estimate_training(accelerator=H100, device_count=8, precision="bf16", mfu=5e-324,
                          total_training_flops=1e24)  # fmt: skip
    assert err.value.field == "mfu"
    assert "beyond a float's range" in err.value.message
