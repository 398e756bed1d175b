"""Run economics: tokens so far, time to the token budget and when it is reached, throughput, time
and cost of tokens at an MFU. Pure functions; the API and the use cases call them, never re-derive them.

Tokens so far
    ``latest step × global batch tokens``: a step is a completed optimizer step (Hugging Face
    Trainer's ``global_step``, Megatron's iteration), so step N means N batches consumed. This needs no
    history and is not fooled by restarts (integrating tokens/s over wall-clock would count the hours a
    job was down). A batch ramp (smaller batches early) makes it an over-estimate.
Time to budget
    ``(budget − tokens so far) ÷ the latest tokens/s``. The instant it is reached is the latest
    measurement's time plus that; past 9999-12-31 (the last instant a timestamp can name: ISO 8601's
    four-digit year, Python's ``datetime.max``, PostgreSQL's and JSON Schema's ``date-time``) there is
    no date to give, so the answer is no date and says the budget lies beyond year 9999 (a 1e16-token
    budget at 30,000 tokens/s is ~10,563 years away).
Time and cost at an MFU
    The time formula of :func:`service.domain.estimates.compute_time_seconds` (FLOPs ÷ devices × peak ×
    MFU) over the tokens' model FLOPs; cost = device-hours × price per device-hour.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from service.domain.errors import InvalidInput
from service.domain.estimates import SECONDS_PER_HOUR, compute_time_seconds

BILLION = 1e9
#: The last instant a timestamp answered by this service can name (see the module docstring).
LAST_INSTANT = datetime.max.replace(tzinfo=UTC)


def tokens_so_far(*, latest_step: int | None, global_batch_tokens: int) -> int:
    """Tokens consumed by a run whose latest completed optimizer step is ``latest_step``
    (module docstring: step × global batch)."""
    if latest_step is None:
        return 0
    return max(latest_step, 0) * global_batch_tokens


def budget_fraction_done(*, tokens_done: float, token_budget: float | None) -> float | None:
    """Share of the token budget consumed, capped at 1; None without a budget."""
    if token_budget is None or token_budget <= 0:
        return None
    return min(tokens_done / token_budget, 1.0)


def seconds_to_budget(*, token_budget: float, tokens_done: float, tokens_per_second: float) -> float:
    """Seconds until ``token_budget`` tokens at ``tokens_per_second`` (0 once it is reached; +inf
    when the rate is too small for the quotient to be a float)."""
    if not tokens_per_second > 0:
        raise InvalidInput("tokens_per_second must be positive.", field="tokens_per_second")
    return max(token_budget - tokens_done, 0.0) / tokens_per_second


def later_by(at: datetime, seconds: float) -> datetime | None:
    """``at`` plus ``seconds``, or None when that lies past :data:`LAST_INSTANT` (or is not finite)."""
    aware = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    room = LAST_INSTANT - aware
    # compared as seconds first: timedelta itself overflows past 999,999,999 days
    if not math.isfinite(seconds) or seconds > room.total_seconds() + 1.0:
        return None
    delta = timedelta(seconds=seconds)
    return aware + delta if delta <= room else None


@dataclass(frozen=True, slots=True)
class BudgetOutlook:
    """When a run reaches its token budget at its latest throughput."""

    seconds_to_budget: float | None
    reached_at: datetime | None
    reached_after_year_9999: bool


NO_OUTLOOK = BudgetOutlook(None, None, False)


def budget_outlook(
    *,
    token_budget: float | None,
    tokens_done: float,
    tokens_per_second: float | None,
    measured_at: datetime | None,
) -> BudgetOutlook:
    """Seconds to the budget and the instant it is reached (module docstring). No budget or no
    positive throughput: nothing. A time too long for a float, or an instant past year 9999: the
    seconds where finite, no instant, and ``reached_after_year_9999``."""
    if token_budget is None or tokens_per_second is None or not tokens_per_second > 0:
        return NO_OUTLOOK
    seconds = seconds_to_budget(
        token_budget=token_budget, tokens_done=tokens_done, tokens_per_second=tokens_per_second
    )
    finite = seconds if math.isfinite(seconds) else None
    if measured_at is None:
        return BudgetOutlook(finite, None, finite is None)
    reached = later_by(measured_at, seconds)
    return BudgetOutlook(finite, reached, reached is None)


def seconds_for_tokens(
    tokens: float,
    *,
    model_flops_per_token: float,
    device_count: int,
    peak_flops_per_device: float,
    mfu: float,
) -> float:
    """Wall-clock seconds for ``tokens`` at ``mfu`` (module docstring)."""
    return compute_time_seconds(
        tokens * model_flops_per_token,
        device_count=device_count,
        peak_flops_per_device=peak_flops_per_device,
        mfu=mfu,
    )


def seconds_per_billion_tokens(
    *, model_flops_per_token: float, device_count: int, peak_flops_per_device: float, mfu: float
) -> float:
    """Wall-clock seconds for 10^9 tokens at ``mfu``."""
    return seconds_for_tokens(
        BILLION,
        model_flops_per_token=model_flops_per_token,
        device_count=device_count,
        peak_flops_per_device=peak_flops_per_device,
        mfu=mfu,
    )


def tokens_per_second_at(*, seconds_per_billion: float) -> float:
    """Global tokens/s of a job that takes ``seconds_per_billion`` seconds per 10^9 tokens."""
    return BILLION / seconds_per_billion


def cost_per_billion_tokens(
    *, seconds_per_billion: float, device_count: int, price_per_device_hour: float
) -> float:
    """Price of 10^9 tokens: device-hours they take × price per device-hour."""
    return seconds_per_billion / SECONDS_PER_HOUR * device_count * price_per_device_hour
