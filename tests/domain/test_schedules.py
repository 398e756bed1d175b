"""LR schedules against the transformers / optax vectors in reference/schedules.md."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.domain.errors import InvalidInput
from service.domain.schedules import (
    ScheduleSpec,
    key_steps,
    lr_at,
    lr_sum,
    phases,
    round_stride,
    sample,
    summary,
)

P, W, T = 10.0, 2, 10


def spec(kind: str, **kw: object) -> ScheduleSpec:
    kw.setdefault("warmup_steps", W)
    kw.setdefault("total_steps", T)
    return ScheduleSpec(kind=kind, peak_lr=P, **kw)  # type: ignore[arg-type]


def values(s: ScheduleSpec, n: int) -> list[float]:
    return [lr_at(s, t) for t in range(n)]


def assert_vector(got: list[float], expected: list[float], rel: float = 1e-9, abs_: float = 1e-9) -> None:
    assert len(got) == len(expected)
    for t, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert g == pytest.approx(e, rel=rel, abs=abs_), f"step {t}: {g} != {e}"


# ---- published vectors (P = 10, W = 2, T = 10) -------------------------------------------------


def test_constant_with_warmup_ramps_over_four_steps_then_holds_the_peak() -> None:
    assert_vector(values(spec("constant", warmup_steps=4), 10), [0, 2.5, 5, 7.5, 10, 10, 10, 10, 10, 10])


def test_linear_decays_to_zero_at_the_last_step_and_clamps_after_it() -> None:
    assert_vector(values(spec("linear"), 12), [0, 5, 10, 8.75, 7.5, 6.25, 5, 3.75, 2.5, 1.25, 0, 0])


def test_cosine_matches_transformers_and_rises_again_after_the_end() -> None:
    expected = [0, 5, 10, 9.619398, 8.535534, 6.913417, 5, 3.086583, 1.464466, 0.380602, 0, 0.380602]
    assert_vector(values(spec("cosine"), 12), expected, rel=1e-6, abs_=1e-6)


def test_cosine_with_min_lr_decays_to_ten_percent_of_the_peak() -> None:
    expected = [0, 5, 10, 9.657458, 8.681981, 7.222075, 5.5, 3.777925, 2.318019, 1.342542, 1]
    assert_vector(values(spec("cosine_with_min_lr", min_lr_ratio=0.1), 11), expected, rel=1e-6, abs_=1e-6)


def test_cosine_warmup_with_min_lr_runs_one_step_earlier() -> None:
    s = spec("cosine_warmup_with_min_lr", min_lr_ratio=0.1)
    # warmup (t + 1)/W; decay progress (t − W + 1)/(T − W): the cosine_with_min_lr values one step early
    expected = [5, 10, 9.657458, 8.681981, 7.222075, 5.5, 3.777925, 2.318019, 1.342542, 1]
    assert_vector(values(s, 10), expected, rel=1e-6, abs_=1e-6)


def test_polynomial_of_power_two_matches_transformers() -> None:
    s = spec("polynomial", power=2.0, min_lr=1e-7)
    expected = [0, 5, 10, 7.656, 5.625, 3.906, 2.5, 1.406, 0.625, 0.156]
    assert_vector(values(s, 10), expected, rel=1e-3, abs_=1e-3)
    assert lr_at(s, 10) == pytest.approx(1e-7)
    assert lr_at(s, 50) == pytest.approx(1e-7)


def test_polynomial_defaults_to_transformers_lr_end_of_1e_7() -> None:
    assert lr_at(spec("polynomial"), T) == pytest.approx(1e-7, rel=1e-9)


def test_inverse_sqrt_uses_the_warmup_as_timescale_by_default() -> None:
    expected = [0, 5, 10, 8.165, 7.071, 6.325, 5.774, 5.345, 5, 4.714]
    assert_vector(values(spec("inverse_sqrt"), 10), expected, rel=1e-3, abs_=1e-3)


def test_wsd_with_linear_decay_matches_the_vector() -> None:
    s = spec("warmup_stable_decay", stable_steps=4, decay_steps=4, decay_shape="linear")
    assert_vector(values(s, 11), [0, 5, 10, 10, 10, 10, 10, 7.5, 5, 2.5, 0])


def test_wsd_with_one_minus_sqrt_decay_warms_up_from_the_floor() -> None:
    s = spec("warmup_stable_decay", stable_steps=4, decay_steps=4, decay_shape="1-sqrt", min_lr_ratio=0.1)
    # step 7: q = 1/4 → 1 − √q = 0.5 → 0.1 + 0.9·0.5 = 0.55 → 5.5
    expected = [1, 5.5, 10, 10, 10, 10, 10, 5.5, 3.636039, 2.205771, 1]
    assert_vector(values(s, 11), expected, rel=1e-6, abs_=1e-6)


def test_wsd_infers_the_stable_phase_from_the_total() -> None:
    s = spec("warmup_stable_decay", decay_steps=4, decay_shape="linear")
    assert s.resolved_stable_steps == 4
    s2 = spec("warmup_stable_decay", decay_fraction=0.4, decay_shape="linear")
    assert (s2.resolved_stable_steps, s2.resolved_decay_steps) == (4, 4)
    assert values(s2, 11) == values(s, 11)


def test_optax_warmup_cosine_decay_is_clamped_at_the_end_value() -> None:
    s = spec("cosine_with_min_lr", min_lr_ratio=0.1, semantics="optax")
    got = values(s, 12)
    assert_vector(got[:4], [0, 5, 10, 9.657458], rel=1e-6, abs_=1e-6)
    assert got[9] == pytest.approx(1.342542, rel=1e-6)
    assert got[10] == pytest.approx(1.0) and got[11] == pytest.approx(1.0)
    assert lr_at(s, 10**6) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("step", "expected"),
    [(101, 2.999991775e-4), (550, 1.65e-4), (999, 3.000082247e-5), (1000, 3e-5)],
)
def test_cosine_with_min_lr_at_3e_4_matches_the_published_steps(step: int, expected: float) -> None:
    s = ScheduleSpec(
        kind="cosine_with_min_lr", peak_lr=3e-4, total_steps=1000, warmup_steps=100, min_lr_ratio=0.1
    )
    assert lr_at(s, step) == pytest.approx(expected, rel=1e-9)


def test_peak_is_reached_exactly_at_the_end_of_warmup() -> None:
    s = spec("cosine", warmup_steps=4)
    assert lr_at(s, 3) == pytest.approx(P * 3 / 4)
    assert lr_at(s, 4) == P


# ---- options ---------------------------------------------------------------------------------


def test_a_warmup_ratio_is_rounded_up_as_transformers_does() -> None:
    assert spec("linear", warmup_steps=None, warmup_fraction=0.15).resolved_warmup_steps == 2
    assert spec("linear", warmup_steps=None, warmup_fraction=0.7).resolved_warmup_steps == 7


def test_warmup_can_start_above_zero() -> None:
    s = spec("cosine", warmup_steps=4, warmup_start_lr=2.0)
    assert values(s, 5) == pytest.approx([2.0, 4.0, 6.0, 8.0, 10.0])


def test_pytorch_semantics_refuses_a_warmup_from_zero_and_keeps_restarting() -> None:
    with pytest.raises(InvalidInput) as err:
        spec("cosine", semantics="pytorch")
    assert err.value.field == "warmup_start_lr"
    s = spec("cosine_with_restarts", cycles=2, semantics="pytorch", warmup_start_ratio=0.01)
    assert lr_at(s, 10) == pytest.approx(P)  # CosineAnnealingWarmRestarts starts a third cycle
    hf = spec("cosine_with_restarts", cycles=2)
    assert lr_at(hf, 10) == 0.0


def test_hold_past_end_keeps_the_final_value_instead_of_rebounding() -> None:
    s = spec("cosine", past_end="hold")
    assert lr_at(s, 11) == 0.0
    assert lr_at(s, 10**9) == 0.0
    assert "rises again" in summary(spec("cosine")).past_end


def test_floor_given_as_an_absolute_lr_equals_the_ratio_form() -> None:
    a = spec("cosine_with_min_lr", min_lr=1.0)
    b = spec("cosine_with_min_lr", min_lr_ratio=0.1)
    assert values(a, 11) == pytest.approx(values(b, 11))


def test_kind_aliases_of_transformers_are_accepted() -> None:
    assert spec("constant_with_warmup").kind == "constant"
    assert spec("wsd", decay_steps=3).kind == "warmup_stable_decay"


# ---- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"kind": "linear", "warmup_steps": 10}, "warmup_steps"),
        ({"kind": "linear", "warmup_steps": None, "warmup_fraction": 1.0}, "warmup_fraction"),
        ({"kind": "cosine_with_min_lr", "min_lr": 11.0}, "min_lr"),
        ({"kind": "cosine_with_min_lr"}, "min_lr_ratio"),
        ({"kind": "linear", "total_steps": 0}, "total_steps"),
        ({"kind": "linear", "peak_lr": 0.0}, "peak_lr"),
        ({"kind": "linear", "peak_lr": -1.0}, "peak_lr"),
        ({"kind": "warmup_stable_decay"}, "decay_steps"),
        ({"kind": "warmup_stable_decay", "stable_steps": 5, "decay_steps": 4}, "stable_steps"),
        ({"kind": "warmup_stable_decay", "decay_steps": 9}, "decay_steps"),
        ({"kind": "constant", "min_lr_ratio": 0.1}, "min_lr_ratio"),
        ({"kind": "cosine_wobble"}, "kind"),
        ({"kind": "cosine_warmup_with_min_lr", "min_lr_ratio": 0.1, "semantics": "optax"}, "semantics"),
    ],
)
def test_invalid_specs_name_the_field_to_change(kwargs: dict[str, object], field: str) -> None:
    kw: dict[str, object] = {"peak_lr": P, "total_steps": T, "warmup_steps": W}
    kw.update(kwargs)
    with pytest.raises(InvalidInput) as err:
        ScheduleSpec(**kw)  # type: ignore[arg-type]
    assert err.value.field == field
    assert err.value.message


# ---- sampling, phases, summary ---------------------------------------------------------------


def test_sample_always_contains_the_key_steps() -> None:
    s = ScheduleSpec(
        kind="warmup_stable_decay",
        peak_lr=1e-3,
        total_steps=10_000_000,
        warmup_steps=1234,
        decay_steps=777_777,
    )
    steps = [p.step for p in sample(s, points=7)]
    for k in (0, 1234, 10_000_000 - 777_777, 10_000_000 - 1, 10_000_000):
        assert k in steps
    assert steps == sorted(set(steps))
    assert len(steps) <= 7 + len(key_steps(s))


def test_sample_with_a_stride_covers_the_run() -> None:
    s = spec("linear")
    steps = [p.step for p in sample(s, every=3)]
    assert steps == [0, 2, 3, 6, 9, 10]


def test_sampling_ten_million_steps_returns_only_the_points_asked_for() -> None:
    s = ScheduleSpec(
        kind="cosine_with_min_lr", peak_lr=3e-4, total_steps=10**7, warmup_steps=10**4, min_lr_ratio=0.1
    )
    pts = sample(s, points=1000)
    assert 1000 <= len(pts) <= 1010  # the points asked for, plus the phase boundaries
    # Warmup ramps 0 -> peak (mean peak/2); the cosine from peak to 0.1·peak averages 0.55·peak.
    expected = 3e-4 * (10**4 * 0.5 + (10**7 - 10**4) * 0.55)
    assert summary(s).lr_sum == pytest.approx(expected, rel=1e-4)


def test_phases_of_a_wsd_run_are_warmup_stable_decay() -> None:
    s = spec("warmup_stable_decay", stable_steps=4, decay_steps=4)
    assert [(p.name, p.start_step, p.end_step) for p in phases(s)] == [
        ("warmup", 0, 2),
        ("stable", 2, 6),
        ("decay", 6, 10),
    ]


def test_summary_of_linear_sums_the_triangle_in_closed_form() -> None:
    got = summary(spec("linear"))
    # warmup 0 + 5, decay 10 + 8.75 + ... + 1.25 = 45
    assert got.lr_sum == pytest.approx(50.0)
    assert got.warmup_steps == 2 and got.total_steps == 10 and got.peak_lr == 10


def test_lr_sum_of_ten_million_steps_needs_no_loop() -> None:
    s = ScheduleSpec(
        kind="warmup_stable_decay",
        peak_lr=1.0,
        total_steps=10**7,
        warmup_steps=10**4,
        decay_fraction=0.1,
        decay_shape="1-sqrt",
        warmup_shape="1-sqrt",
        min_lr_ratio=0.1,
    )
    total = lr_sum(s)
    # ∫ (1 − √q) dq = ∫ (1 − √(1 − p)) dp = 1/3: sum ≈ W·(0.1 + 0.9/3) + S + D·(0.1 + 0.9/3)
    approx = 1e4 * (0.1 + 0.9 / 3) + (10**7 - 1e4 - 1e6) + 1e6 * (0.1 + 0.9 / 3)
    assert total == pytest.approx(approx, rel=1e-5)


@pytest.mark.parametrize(
    "kw",
    [
        {"kind": "inverse_sqrt", "warmup_steps": 300},
        {"kind": "polynomial", "warmup_steps": 300, "power": 1.7},
        {"kind": "warmup_stable_decay", "warmup_steps": 300, "decay_steps": 4000, "decay_shape": "1-sqrt"},
        {"kind": "cosine_with_restarts", "warmup_steps": 300, "cycles": 3},
    ],
)
def test_closed_form_sum_matches_brute_force_on_a_long_run(kw: dict[str, object]) -> None:
    s = ScheduleSpec(peak_lr=1.0, total_steps=20_011, **kw)  # type: ignore[arg-type]
    brute = math.fsum(lr_at(s, t) for t in range(s.total_steps))
    assert lr_sum(s) == pytest.approx(brute, rel=1e-10)


# ---- properties ------------------------------------------------------------------------------

KINDS = [
    "constant",
    "linear",
    "cosine",
    "cosine_with_min_lr",
    "cosine_warmup_with_min_lr",
    "cosine_with_restarts",
    "polynomial",
    "inverse_sqrt",
    "warmup_stable_decay",
]


@st.composite
def specs(draw: st.DrawFn) -> ScheduleSpec:
    kind = draw(st.sampled_from(KINDS))
    total = draw(st.integers(2, 300))
    warmup = draw(st.integers(0, total - 1))
    kw: dict[str, object] = {
        "kind": kind,
        "peak_lr": draw(st.floats(1e-6, 1.0)),
        "total_steps": total,
        "warmup_steps": warmup,
    }
    floors = {"linear", "cosine", "cosine_with_min_lr", "cosine_warmup_with_min_lr", "cosine_with_restarts"}
    if kind in floors or kind == "warmup_stable_decay":
        kw["min_lr_ratio"] = draw(st.floats(0.0, 0.5))
    if kind == "polynomial":
        kw["power"] = draw(st.floats(0.3, 4.0))
        kw["min_lr_ratio"] = draw(st.floats(0.0, 0.5))
    if kind == "cosine_with_restarts":
        kw["cycles"] = draw(st.integers(1, 5))
    if kind == "inverse_sqrt" and draw(st.booleans()):
        kw["timescale_steps"] = draw(st.floats(1.0, 1000.0))
    if kind == "warmup_stable_decay":
        kw["decay_steps"] = draw(st.integers(1, total - warmup))
        kw["decay_shape"] = draw(st.sampled_from(["linear", "cosine", "1-sqrt"]))
        kw["warmup_shape"] = draw(st.sampled_from(["linear", "cosine", "1-sqrt"]))
    if kind not in ("cosine_warmup_with_min_lr",) and warmup and draw(st.booleans()):
        kw["warmup_start_ratio"] = draw(st.floats(0.0, 0.5))
    return ScheduleSpec(**kw)  # type: ignore[arg-type]


def _lower_bound(s: ScheduleSpec) -> float:
    """min(floor, warmup start): the floor is the value at T for inverse_sqrt, the peak for constant."""
    if s.kind == "inverse_sqrt":
        floor = lr_at(s, s.total_steps)
    elif s.kind == "constant":
        floor = s.peak_lr
    else:
        floor = s.peak_lr * s.floor_ratio
    if not s.resolved_warmup_steps:
        return floor
    start = s.start_ratio if s.start_ratio is not None else 1 / s.resolved_warmup_steps
    return min(floor, s.peak_lr * start)


@settings(max_examples=300, deadline=None)
@given(specs())
def test_every_kind_stays_between_floor_and_peak_within_the_run(s: ScheduleSpec) -> None:
    lo, hi = _lower_bound(s), s.peak_lr
    w = s.resolved_warmup_steps
    start = s.peak_lr * (s.start_ratio or 0.0)
    for t in range(s.total_steps + 1):
        v = lr_at(s, t)
        assert lo * (1 - 1e-12) - 1e-15 <= v <= hi * (1 + 1e-12), (t, v)
        if t < w:
            assert v >= start * (1 - 1e-12)
        elif s.kind not in ("constant", "inverse_sqrt"):
            assert v >= s.peak_lr * s.floor_ratio * (1 - 1e-12) - 1e-18


@settings(max_examples=200, deadline=None)
@given(specs())
def test_continuous_kinds_move_by_at_most_their_largest_slope_per_step(s: ScheduleSpec) -> None:
    if s.kind == "cosine_with_restarts" and s.cycles > 1:
        return  # restarts jump back to the peak by design
    w = s.resolved_warmup_steps
    seg = {
        "warmup_stable_decay": min(n for n in (w, s.resolved_decay_steps) if n > 0)
        if w
        else s.resolved_decay_steps,
    }.get(s.kind, min(n for n in (w, s.total_steps - w) if n > 0) if w else s.total_steps - w)
    # Largest step of each shape over n steps (at an end of the phase): linear 1/n; cosine π/(2n);
    # 1-sqrt 1/√n; power k ≥ 1: k/n; power k < 1: (1/n)^k.
    slope = max(max(1.0, math.pi / 2, s.power, math.sqrt(seg)) / seg, (1 / seg) ** min(s.power, 1.0))
    if s.kind == "inverse_sqrt":
        slope = max(slope, 0.5 / s.resolved_timescale_steps)
    if s.kind == "cosine_warmup_with_min_lr":
        slope = max(slope, 2.0 / seg)
    vals = [lr_at(s, t) for t in range(s.total_steps + 1)]
    for t in range(1, len(vals)):
        # warmup → peak may jump by one warmup increment; WSD 1-sqrt shapes are steep at their ends
        assert abs(vals[t] - vals[t - 1]) <= s.peak_lr * (slope + 1e-9) + 1e-15, (t, vals[t - 1], vals[t])


@settings(max_examples=300, deadline=None)
@given(specs())
def test_lr_sum_equals_the_brute_force_sum(s: ScheduleSpec) -> None:
    brute = math.fsum(lr_at(s, t) for t in range(s.total_steps))
    assert lr_sum(s) == pytest.approx(brute, rel=1e-9, abs=1e-12 * s.peak_lr)


def test_sampled_steps_fall_on_a_round_stride_besides_the_key_steps() -> None:
    # Issue 20: 200 points over 100,000 steps read 0, 503, 1005, 1508 …; now 0, 500, 1000 …
    s = ScheduleSpec(kind="cosine", peak_lr=3e-4, total_steps=100_000, warmup_steps=777)
    steps = [p.step for p in sample(s, points=200)]
    off_stride = [t for t in steps if t % 500]
    assert set(off_stride) <= set(key_steps(s))
    assert 140 <= len(steps) - len(off_stride) <= 280  # 0.7-1.4 times the points asked


@pytest.mark.parametrize(
    ("stride", "rounded"),
    [(0.3, 1), (1.6, 2), (502.5, 500), (10_010, 10_000), (1.667e6, 2_000_000), (330, 250)],
)
def test_a_stride_rounds_to_the_nearest_1_2_2_5_or_5_times_a_power_of_ten(
    stride: float, rounded: int
) -> None:
    assert round_stride(stride) == rounded
