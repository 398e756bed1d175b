"""Learning-rate and batch-size advice."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from service import plots
from service.api.json_body import StrictJsonRoute
from service.api.negotiation import JSON, NEGOTIATED, PNG, SVG, media_response, negotiate, representations
from service.api.problems import INVALID_INPUT, ProblemError
from service.api.resolve import resolve_model, with_field_prefix
from service.api.schemas.advice import (
    BatchAdviceRead,
    BatchAdviceRequest,
    BatchRampRead,
    BatchRecommendationRead,
    CriticalBatchRead,
    GradientAccumulationRead,
    LrAdviceRead,
    LrAdviceRequest,
    LrRuleRead,
    NoiseScaleRead,
    RampPhaseRead,
    TradeoffRead,
    WarmupAdviceRead,
)
from service.api.schemas.common import ModelRef
from service.api.schemas.schedules import LrScheduleRequest
from service.domain import batch, lr_advice, models, scaling

router = APIRouter(tags=["advice"], route_class=StrictJsonRoute)

BATCH_OFFERED = (JSON, SVG, PNG)
BATCH_CONVENTION = (
    "Batch sizes in tokens unless a field says sequences; loss in nats per token. Regime of B against "
    "B_crit: below if B < B_crit/2, near if B_crit/2 ≤ B ≤ 2·B_crit, above if B > 2·B_crit. Steps and "
    "data trade off as S = S_min·(1 + B_crit/B), E = E_min·(1 + B/B_crit) (Kaplan et al. 2020 Eq. 5.4–5.5)."
)
#: Default first batch of a ramp: the final batch over 2^5 (five doublings).
RAMP_DEFAULT_DOUBLINGS = 5
#: Points of the critical-batch curve drawn beside a ramp.
RAMP_CHART_POINTS = 120


def _model_size(ref: ModelRef) -> tuple[models.ModelSpec, float, str]:
    """The spec, the size the rules use (active parameters per token) and how it was taken."""
    spec = resolve_model(ref)
    counts = models.count_parameters(spec)
    if counts.active_per_token == counts.total:
        basis = f"model {spec.name}: {counts.total:,} parameters (all active)"
    else:
        basis = (
            f"model {spec.name}: {counts.active_per_token:,} active parameters per token "
            f"of {counts.total:,} in all (MoE)"
        )
    return spec, float(counts.active_per_token), basis


# ---------------------------------------------------------------------------------------------
# LR advice


#: lr_advice.advise_lr's argument names → the request's fields (its errors name what to change).
_LR_ADVICE_FIELDS = {
    "params": "body.parameter_count",
    "compute_flops": "body.total_training_flops",
    "tokens": "body.token_budget_tokens",
    "batch_tokens": "body.global_batch_tokens",
    "floor_ratio": "body.min_lr_ratio",
}


@router.post(
    "/advice/lr",
    response_model=LrAdviceRead,
    summary="Peak LR, warmup and floor for a model size or a compute budget, with the rule each comes from",
)
async def advise_learning_rate(body: LrAdviceRequest) -> LrAdviceRead:
    """Each rule's peak LR (GPT-3 Table 2.1, Kaplan Eq. D.1, DeepSeek LLM Eq. 1, and at 69B–530B the
    power law through published large dense runs with its ±2σ spread) with its source and whether it
    applies at this size, the recommendation (geometric mean of the applicable rules) and range, warmup steps (GPT-3's 375M tokens, kept in 0.1%–1% of the steps), the floor (10% of the
    peak unless asked), and a ready body for `POST /v1/schedules/lr`.

    With `tokens` but no `batch_tokens` or `total_steps`, the step count uses the suggested
    batch (DeepSeek's B_opt), and the answer says so.
    """
    params: float | None = body.parameter_count
    params_basis = "parameter_count as given"
    n_layers: int | None = None
    d_model: int | None = None
    if body.model is not None:
        spec, params, params_basis = _model_size(body.model)
        n_layers, d_model = spec.n_layers, spec.d_model
    elif params is None:
        params_basis = "assumed compute-optimal (≈20 tokens per parameter): N = √(C/120)"
    arguments: dict[str, Any] = {
        "params": params,
        "compute_flops": body.total_training_flops,
        "tokens": body.token_budget_tokens,
        "n_layers": n_layers,
        "d_model": d_model,
        "seq_len": body.seq_len_tokens,
        "batch_tokens": body.global_batch_tokens,
        "total_steps": body.total_steps,
        "floor_ratio": body.min_lr_ratio,
    }
    advice = with_field_prefix("body", lambda: lr_advice.advise_lr(**arguments), fields=_LR_ADVICE_FIELDS)
    batch_basis: str | None = "global_batch_tokens as given" if body.global_batch_tokens is not None else None
    if (
        body.global_batch_tokens is None
        and body.total_steps is None
        and body.token_budget_tokens is not None
        and advice.batch_tokens_suggested is not None
    ):
        arguments["batch_tokens"] = advice.batch_tokens_suggested
        batch_basis = f"the suggested batch ({advice.batch_source}); give global_batch_tokens to use yours"
        advice = with_field_prefix("body", lambda: lr_advice.advise_lr(**arguments), fields=_LR_ADVICE_FIELDS)
    assert advice.params is not None

    schedule_request: LrScheduleRequest | None = None
    if advice.total_steps is not None:
        try:
            schedule_request = LrScheduleRequest.model_validate(advice.schedule)
            schedule_note = (
                "POST schedule_request to /v1/schedules/lr (add points or steps, or Accept: text/csv, "
                "image/svg+xml, image/png) to see the schedule."
            )
        except ValidationError as exc:
            schedule_note = (
                f"No schedule request: {advice.total_steps:,} steps at a peak LR of {advice.recommended_lr:.3g} "
                f"is outside what /v1/schedules/lr answers ({exc.errors()[0]['loc'][0]}); check token_budget_tokens "
                "and global_batch_tokens."
            )
    else:
        schedule_note = (
            "No step count: give total_steps, or token_budget_tokens (with global_batch_tokens, or the suggested "
            f"batch is used), for a ready schedule request. Warmup: {advice.warmup.warmup_fraction:.3%} "
            "of the steps."
        )
    default_floor = "min_lr_ratio" not in body.model_fields_set
    floor_reason = (
        "10% of the peak (default: GPT-3 decays to 10% of its peak, Chinchilla by 10×)"
        if default_floor
        else "as asked (min_lr_ratio)"
    )
    low, high = advice.lr_range
    return LrAdviceRead(
        recommended_peak_lr=advice.recommended_lr,
        recommendation_rule=advice.recommendation_rule,
        peak_lr_low=low,
        peak_lr_high=high,
        rules=[
            LrRuleRead(
                rule=r.rule,
                source=r.source,
                peak_lr=r.lr,
                peak_lr_low=None if r.band is None else r.band[0],
                peak_lr_high=None if r.band is None else r.band[1],
                applicable=r.applicable,
                extrapolated=r.extrapolated,
                note=r.note,
            )
            for r in advice.rules
        ],
        parameter_count=advice.params,
        parameter_count_basis=params_basis,
        total_training_flops=advice.compute_flops,
        warmup=WarmupAdviceRead(
            warmup_steps=advice.warmup.warmup_steps,
            warmup_fraction=advice.warmup.warmup_fraction,
            reason=advice.warmup.reason,
        ),
        min_lr_ratio=advice.floor_ratio,
        min_lr=advice.floor_lr,
        floor_reason=floor_reason,
        suggested_batch_tokens=advice.batch_tokens_suggested,
        suggested_batch_source=advice.batch_source,
        batch_tokens=arguments["batch_tokens"],
        batch_tokens_basis=batch_basis,
        total_steps=advice.total_steps,
        schedule_request=schedule_request,
        schedule_note=schedule_note,
    )


# ---------------------------------------------------------------------------------------------
# Batch advice


def _tradeoff_read(t: batch.Tradeoff) -> TradeoffRead:
    return TradeoffRead(
        batch_tokens=t.batch_tokens,
        critical_batch_tokens=t.critical_batch_tokens,
        batch_over_critical=t.batch_over_critical,
        regime=t.regime,
        steps_over_min=t.steps_over_min,
        data_over_min=t.data_over_min,
        doubling_steps_cut_fraction=t.doubling_steps_cut_fraction,
        doubling_extra_data_fraction=t.doubling_extra_data_fraction,
        summary=t.summary,
    )


_OBJECTIVE_RULES = {
    "balanced": "B = B_crit: twice the minimum steps and twice the minimum data (Kaplan et al. 2020 §5.1)",
    "fewest_steps": "the largest batch whose extra data E/E_min − 1 = B/B_crit stays within max_compute_overhead",
    "least_compute": "the smallest batch whose extra steps S/S_min − 1 = B_crit/B stay within max_steps_overhead",
}


def _ramp_chart(media: str, ramp: BatchRampRead, critical_at_tokens: Callable[[float], float]) -> bytes | str:
    """Batch and critical batch vs tokens, both axes logarithmic (the early doublings stay visible)."""
    total = ramp.tokens
    first = ramp.phases[0]
    x0 = min(total * 1e-4, first.end_tokens / 10)
    xs: list[float] = []
    ys: list[float] = []
    for phase in ramp.phases:
        xs += [max(phase.start_tokens, x0), phase.end_tokens]
        ys += [phase.batch_tokens, phase.batch_tokens]
    curve_x = [x0 * (total / x0) ** (i / (RAMP_CHART_POINTS - 1)) for i in range(RAMP_CHART_POINTS)]
    curve = [(x, critical_at_tokens(x)) for x in curve_x]
    # Very early the predicted loss is far above any real one; draw B_crit where it is on the chart's scale.
    curve = [(x, y) for x, y in curve if y >= first.batch_tokens / 4]
    last = ramp.phases[-1].batch_tokens
    title = (
        f"Batch ramp {plots.format_number(first.batch_tokens)} → {plots.format_number(last)} tokens "
        f"({ramp.steps_saved_fraction:.0%} fewer steps)"
    )
    series = [
        ("batch (ramp)", xs, ys),
        ("critical batch", [x for x, _ in curve], [y for _, y in curve]),
    ]
    x_label, y_label = "tokens trained (log scale)", "batch size, tokens (log scale)"
    if media == SVG:
        return plots.line_chart_svg(title, x_label, y_label, series, log_x=True, log_y=True)
    return plots.line_chart_png(title, x_label, y_label, series, log_x=True, log_y=True)


@router.post(
    "/advice/batch",
    response_model=BatchAdviceRead,
    responses=representations(SVG, PNG),
    openapi_extra=NEGOTIATED,
    summary="Critical batch size, regime, steps/compute trade-off, recommended batch, accumulation, ramp",
)
async def advise_batch_size(body: BatchAdviceRequest, request: Request) -> BatchAdviceRead | Response:
    """The critical batch B_crit for the current loss (given, or predicted from `model` + `tokens_seen`
    with a Chinchilla-form fit) under `critical_batch_model`, where the current batch sits (regime, S/S_min,
    E/E_min, what doubling it would do), a batch for `objective`, gradient-accumulation steps for it
    (with `micro_batch_sequences` and `seq_len_tokens`), and a doubling batch ramp over `ramp.token_budget_tokens`.

    `Accept: image/svg+xml` or `image/png` draws the ramp (batch and critical batch vs tokens); it needs
    `ramp` in the body (422 naming `ramp` otherwise). Any other non-JSON type: 406.
    """
    media = negotiate(request, BATCH_OFFERED)
    if media != JSON and body.ramp is None:
        message = "A chart of the batch ramp needs ramp (a token budget) in the body; add it or ask for JSON."
        raise ProblemError(
            INVALID_INPUT, message, errors=[{"field": "body.ramp", "message": message, "code": "missing"}]
        )
    fit = scaling.get_fit(body.loss_fit)
    params: float | None = None
    params_basis = ""
    if body.model is not None:
        _, params, params_basis = _model_size(body.model)

    loss: float | None = body.loss
    loss_source: str | None = "loss as given" if loss is not None else None
    if loss is None and params is not None and body.tokens_seen is not None:
        loss = batch.chinchilla_loss_predictor(fit, params)(body.tokens_seen)
        loss_source = (
            f"predicted by {fit.source} (L = E + A/N^α + B/D^β) after {body.tokens_seen:.4g} tokens; "
            f"{params_basis}"
        )
        if body.tokens_seen < fit.min_tokens_fitted:
            loss_source += (
                f"; taken at {fit.min_tokens_fitted:.3g} tokens, the fewest the fit was made on "
                "(it diverges as tokens → 0)"
            )

    noise: batch.NoiseScaleEstimate | None = None
    noise_read: NoiseScaleRead | None = None
    if body.gradient_noise is not None:
        readings = body.gradient_noise
        noise = with_field_prefix(
            "body.gradient_noise",
            lambda: batch.noise_scale(
                b_small=readings.batch_small_tokens,
                b_big=readings.batch_big_tokens,
                grad_norm_sq_small=readings.grad_norm_sq_small,
                grad_norm_sq_big=readings.grad_norm_sq_big,
                averaging=readings.averaging,
                ema_decay=readings.ema_decay,
            ),
        )
        noise_read = NoiseScaleRead(
            gradient_norm_sq=noise.gradient_norm_sq,
            trace_sigma=noise.trace_sigma,
            b_simple_tokens=noise.b_simple,
            averaging=noise.averaging,
        )

    def critical_at(model: batch.CriticalBatchModel, at_loss: float | None) -> batch.CriticalBatch:
        return batch.critical_batch(
            model,
            loss=at_loss,
            calibration_loss=body.calibration_loss,
            calibration_batch_tokens=body.calibration_batch_tokens,
            noise=noise,
        )

    critical = with_field_prefix("body", lambda: critical_at(body.critical_batch_model, loss))
    current = with_field_prefix(
        "body",
        lambda: batch.tradeoff(body.global_batch_tokens, critical.batch_tokens),
        fields={"batch_tokens": "body.global_batch_tokens"},
    )

    # Batches are what the layout runs in one optimizer step: whole micro-batches on every data-parallel
    # rank (micro_batch × DP × seq_len), or whole sequences per rank without a micro-batch; the
    # recommendation is rounded to that and rechecked against the request's caps.
    granularity: float | None = None
    granularity_basis = ""
    if body.seq_len_tokens is not None:
        micro_seqs = body.micro_batch_sequences or 1
        granularity = float(micro_seqs * body.seq_len_tokens * body.data_parallel_size)
        granularity_basis = (
            "micro_batch_sequences × seq_len_tokens × data_parallel_size"
            if body.micro_batch_sequences is not None
            else "seq_len_tokens × data_parallel_size"
        )
    chosen = with_field_prefix(
        "body",
        lambda: batch.recommend_batch(
            critical.batch_tokens,
            objective=body.objective,
            max_compute_overhead=body.max_compute_overhead,
            max_steps_overhead=body.max_steps_overhead,
            min_batch_tokens=granularity or 0.0,
            granularity_tokens=granularity,
        ),
    )
    recommended = chosen.batch_tokens
    rule = _OBJECTIVE_RULES[body.objective]
    if granularity is not None:
        rule += f"; {chosen.note} ({granularity_basis})"

    accumulation: GradientAccumulationRead | None = None
    if body.micro_batch_sequences is not None and body.seq_len_tokens is not None:
        micro, seq_len = body.micro_batch_sequences, body.seq_len_tokens
        acc = with_field_prefix(
            "body",
            lambda: batch.gradient_accumulation(
                recommended,
                micro_batch_sequences=micro,
                seq_len=seq_len,
                data_parallel_size=body.data_parallel_size,
            ),
        )
        accumulation = GradientAccumulationRead(
            target_batch_tokens=recommended,
            micro_batch_sequences=micro,
            seq_len_tokens=seq_len,
            data_parallel_size=body.data_parallel_size,
            accumulation_steps=acc.accumulation_steps,
            global_batch_sequences=acc.global_batch_sequences,
            global_batch_tokens=acc.global_batch_tokens,
            overshoot_fraction=acc.overshoot_fraction,
        )

    ramp_read: BatchRampRead | None = None
    critical_along_run: Callable[[float], float] | None = None
    if body.ramp is not None:
        assert params is not None  # the schema requires model with ramp
        plan = body.ramp
        loss_at_tokens = batch.chinchilla_loss_predictor(fit, params)
        loss_floor = fit.min_tokens_fitted
        if body.critical_batch_model == "noise_scale":
            assert loss is not None  # the schema requires loss or model + tokens_seen
            measured_loss, measured_batch = loss, critical.batch_tokens
            ramp_rule = (
                "B_crit ∝ 1/L through the measured noise scale at the current loss "
                f"({measured_batch:.4g} tokens at L = {measured_loss:.4g})"
            )

            def critical_at_loss(at_loss: float) -> float:
                return batch.inverse_loss_critical_batch_tokens(
                    at_loss, calibration_loss=measured_loss, calibration_batch_tokens=measured_batch
                )
        else:
            model_name = body.critical_batch_model
            ramp_rule = f"{critical.source} at the predicted loss"

            def critical_at_loss(at_loss: float) -> float:
                return critical_at(model_name, at_loss).batch_tokens

        step = granularity or 1.0
        max_batch = plan.max_batch_tokens or body.global_batch_tokens
        start = plan.start_batch_tokens or max(step, max_batch / 2**RAMP_DEFAULT_DOUBLINGS)
        planned = with_field_prefix(
            "body.ramp",
            lambda: batch.ramp(
                total_tokens=plan.token_budget_tokens,
                loss_at_tokens=loss_at_tokens,
                critical_batch_at_loss=critical_at_loss,
                start_batch_tokens=start,
                max_batch_tokens=max_batch,
                granularity_tokens=step,
                loss_valid_from_tokens=loss_floor,
            ),
        )
        ramp_read = BatchRampRead(
            phases=[
                RampPhaseRead(
                    start_tokens=p.start_tokens,
                    end_tokens=p.end_tokens,
                    batch_tokens=p.batch_tokens,
                    steps=p.steps,
                    loss_at_start=p.loss_at_start,
                    critical_batch_tokens_at_start=p.critical_batch_tokens_at_start,
                )
                for p in planned.phases
            ],
            tokens=planned.total_tokens,
            total_steps=planned.total_steps,
            constant_batch_tokens=planned.constant_batch_tokens,
            constant_batch_steps=planned.constant_batch_steps,
            steps_saved=planned.steps_saved,
            steps_saved_fraction=planned.steps_saved_fraction,
            comparison=planned.comparison,
            loss_evaluated_from_tokens=planned.loss_evaluated_from_tokens,
            data_efficiency=planned.data_efficiency,
            constant_batch_data_efficiency=planned.constant_batch_data_efficiency,
            granularity_tokens=step,
            critical_batch_rule=ramp_rule,
            loss_predictor=(
                f"{fit.source}; {params_basis}; fitted on {fit.min_tokens_fitted:.3g}–"
                f"{fit.max_tokens_fitted:.3g} tokens: before {loss_floor:.3g} tokens the loss is held at "
                "its value there (the fit diverges as tokens → 0)"
            ),
        )

        def critical_along_run(tokens: float) -> float:
            return critical_at_loss(loss_at_tokens(tokens))

    if media != JSON:
        assert ramp_read is not None and critical_along_run is not None
        if media == SVG:
            svg = _ramp_chart(SVG, ramp_read, critical_along_run)
            return media_response(svg, SVG, filename="batch_ramp.svg")
        png = await run_in_threadpool(_ramp_chart, PNG, ramp_read, critical_along_run)
        return media_response(png, PNG, filename="batch_ramp.png")

    return BatchAdviceRead(
        loss=loss,
        loss_source=loss_source,
        critical_batch=CriticalBatchRead(
            batch_tokens=critical.batch_tokens, model=critical.model, source=critical.source
        ),
        noise_scale=noise_read,
        tradeoff=_tradeoff_read(current),
        recommendation=BatchRecommendationRead(
            objective=body.objective,
            batch_tokens=recommended,
            rule=rule,
            granularity_tokens=granularity,
            meets_caps=chosen.meets_caps,
            tradeoff=_tradeoff_read(batch.tradeoff(recommended, critical.batch_tokens)),
        ),
        gradient_accumulation=accumulation,
        ramp=ramp_read,
        convention=BATCH_CONVENTION,
    )
