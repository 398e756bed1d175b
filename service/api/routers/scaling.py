"""Compute-optimal model size and tokens for a budget."""

from __future__ import annotations

from fastapi import APIRouter

from service.api.json_body import StrictJsonRoute
from service.api.problems import INVALID_INPUT, ProblemError
from service.api.resolve import resolve_accelerator, with_field_prefix
from service.api.schemas.scaling import (
    MIN_TRAINING_FLOPS,
    ComputeBudgetRead,
    ComputeOptimalRead,
    ComputeOptimalRequest,
    ComputeOptimalResultRead,
    ConstantsKind,
    FitName,
    IsoFlopCurveRead,
    IsoFlopPointRead,
    LossFitRead,
    MfuScenarioRead,
)
from service.domain import hardware, scaling

router = APIRouter(tags=["compute-optimal"], route_class=StrictJsonRoute)

#: MFUs a hardware budget is also answered at (the seed's point: 30% → 60% doubles the compute).
OTHER_MFUS = (0.3, 0.4, 0.5, 0.6)
SECONDS_PER_HOUR = 3600.0
CONVENTION = (
    "Training compute C ≈ 6·N·D FLOPs; N counts all parameters, as Chinchilla does (deepseek: N ≈ M/6 "
    "from its non-embedding FLOPs per token M); loss in nats per token; hardware peaks are dense."
)
#: Domain rule names → the request's ``fit`` vocabulary.
_RULE_NAMES = {"chinchilla_rounded": "chinchilla", "20_tokens_per_param": "twenty_tokens_per_param"}
_CONSTANTS: dict[str, ConstantsKind] = {
    "chinchilla_rounded": "rounded",
    "chinchilla_unrounded": "unrounded",
    "epoch": "refit",
}
#: Fits that carry their own loss constants.
_OWN_FIT = {
    "chinchilla": scaling.CHINCHILLA_ROUNDED,
    "chinchilla_unrounded": scaling.CHINCHILLA_UNROUNDED,
    "epoch": scaling.EPOCH_REFIT,
}


def _optimal(fit: FitName, compute_flops: float, loss_fit: scaling.LossFit) -> scaling.ComputeOptimal:
    if fit == "consensus":
        return scaling.consensus_optimal(compute_flops)
    if fit in _OWN_FIT:
        return scaling.compute_optimal(_OWN_FIT[fit], compute_flops)
    if fit == "chinchilla_approach1":
        return scaling.table3_approach1(compute_flops, loss_fit)
    if fit == "twenty_tokens_per_param":
        return scaling.twenty_tokens_per_param(compute_flops, loss_fit)
    return scaling.deepseek_optimal(compute_flops)


def _loss_fit_of(rule: str, loss_fit: scaling.LossFit) -> scaling.LossFit | None:
    if rule in scaling.FITS:
        return scaling.FITS[rule]
    if rule == "consensus":
        return scaling.EPOCH_REFIT
    return None if rule == "deepseek" else loss_fit


def _result(r: scaling.ComputeOptimal, loss_fit: scaling.LossFit) -> ComputeOptimalResultRead:
    used = _loss_fit_of(r.rule, loss_fit)
    return ComputeOptimalResultRead(
        rule=_RULE_NAMES.get(r.rule, r.rule),
        source=r.source,
        parameter_count=r.params,
        tokens=r.tokens,
        tokens_per_parameter=r.tokens_per_param,
        predicted_loss=r.predicted_loss,
        loss_fit=used.name if used is not None else None,
        note=r.note,
    )


def _fit_read(fit: scaling.LossFit) -> LossFitRead:
    return LossFitRead(
        name=fit.name,
        constants=_CONSTANTS[fit.name],
        irreducible_loss=fit.irreducible_loss,
        a_coeff=fit.a_coeff,
        b_coeff=fit.b_coeff,
        alpha=fit.alpha,
        beta=fit.beta,
        source=fit.source,
    )


@router.post(
    "/compute-optimal",
    response_model=ComputeOptimalRead,
    summary="Compute-optimal parameters and tokens for a budget (FLOPs, or devices × hours × MFU)",
)
async def compute_optimal_size(body: ComputeOptimalRequest) -> ComputeOptimalRead:
    """N_opt, D_opt, tokens per parameter and the predicted loss under a fit (Chinchilla rounded by
    default, or all fits side by side), the iso-FLOP curve (loss vs model size at the budget), and for a
    hardware budget the same at MFU 0.3–0.6: what the budget buys depends on the MFU you reach."""
    loss_fit = scaling.get_fit(body.loss_fit)
    hardware_budget: tuple[int, float, float] | None = None  # devices, dense peak FLOP/s, seconds
    if body.hardware is not None:
        assert body.wall_clock_hours is not None and body.mfu is not None  # the schema requires them
        accelerator = resolve_accelerator(body.hardware)
        precision, hours, given_mfu = body.precision, body.wall_clock_hours, body.mfu
        peak = with_field_prefix("body", lambda: hardware.peak_flops(accelerator, precision))
        devices = body.hardware.device_count
        seconds = hours * SECONDS_PER_HOUR
        hardware_budget = (devices, peak, seconds)
        compute = with_field_prefix(
            "body", lambda: scaling.practical_compute_flops(devices, peak, given_mfu, seconds)
        )
        if compute < MIN_TRAINING_FLOPS:
            message = (
                f"The hardware budget buys {compute:.3g} FLOPs, below the {MIN_TRAINING_FLOPS:.0e} this "
                "answers; check the peak, the device count and wall_clock_hours."
            )
            raise ProblemError(
                INVALID_INPUT, message, errors=[{"field": "body.hardware", "message": message}]
            )
        budget = ComputeBudgetRead(
            total_training_flops=compute,
            basis="hardware",
            formula="C = devices × dense peak FLOP/s × MFU × seconds",
            accelerator=accelerator.display_name if accelerator.is_custom else accelerator.id,
            device_count=devices,
            precision=precision,
            peak_flops_per_device=peak,
            mfu=given_mfu,
            wall_clock_hours=hours,
            device_hours=devices * hours,
        )
    else:
        assert body.total_training_flops is not None
        compute = body.total_training_flops
        budget = ComputeBudgetRead(
            total_training_flops=compute, basis="total_training_flops", formula="C as given"
        )

    headline: FitName = "consensus" if body.fit == "all" else body.fit
    if body.fit == "all":
        every = scaling.compute_optimal_all(compute, body.loss_fit)
        results = [_result(r, loss_fit) for r in every]
        result = results[0]
    else:
        result = _result(_optimal(headline, compute, loss_fit), loss_fit)
        results = [result]

    curve_fit = scaling.EPOCH_REFIT if headline == "consensus" else _OWN_FIT.get(headline, loss_fit)
    curve = scaling.iso_flop_curve(curve_fit, compute, points=body.iso_flop_points, span=body.iso_flop_span)
    used_names = {r.loss_fit for r in results if r.loss_fit is not None} | {curve_fit.name}
    constants = [_fit_read(f) for name, f in scaling.FITS.items() if name in used_names]

    scenarios: list[MfuScenarioRead] | None = None
    if hardware_budget is not None and body.mfu is not None:
        devices, peak, seconds = hardware_budget
        scenarios = []
        for mfu in sorted({*OTHER_MFUS, body.mfu}):
            c = scaling.practical_compute_flops(devices, peak, mfu, seconds)
            r = _optimal(headline, c, loss_fit)
            scenarios.append(
                MfuScenarioRead(
                    mfu=mfu,
                    total_training_flops=c,
                    compute_over_given=c / compute,
                    parameter_count=r.params,
                    tokens=r.tokens,
                    predicted_loss=r.predicted_loss,
                )
            )

    return ComputeOptimalRead(
        budget=budget,
        fit=body.fit,
        result=result,
        results=results,
        constants=constants,
        iso_flop_curve=IsoFlopCurveRead(
            loss_fit=curve_fit.name,
            total_training_flops=compute,
            points=[IsoFlopPointRead(parameter_count=p.params, tokens=p.tokens, loss=p.loss) for p in curve],
        ),
        at_other_mfus=scenarios,
        convention=CONVENTION,
    )
