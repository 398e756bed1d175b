"""What the synchronous and asynchronous clients share: headers, query parameters, the retry decision."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from teff_client import __version__
from teff_client.errors import ProblemError
from teff_client.retry import RetryPolicy

JSON = "application/json"
PROBLEM_OR_JSON = "application/problem+json;q=0.9, application/json;q=0.8"
#: connect fast (a dead service should not hold a training job), read long (a plan can take seconds)
DEFAULT_TIMEOUT_SECONDS = 30.0


def base_headers(api_key: str | None, extra: Mapping[str, str] | None) -> dict[str, str]:
    headers = {"User-Agent": f"teff-client/{__version__}", "Accept": JSON}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    headers.update(extra or {})
    return headers


def clean_params(
    params: Mapping[str, Any] | None,
) -> list[tuple[str, str | int | float | bool | None]] | None:
    """Query parameters without the unset ones; a list value repeats its key (``tag=a&tag=b``)."""
    if not params:
        return None
    pairs: list[tuple[str, str | int | float | bool | None]] = []
    for key, value in params.items():
        if value is None:
            continue
        values = value if isinstance(value, Sequence) and not isinstance(value, str) else [value]
        for one in values:
            pairs.append((key, str(one).lower() if isinstance(one, bool) else str(one)))
    return pairs


def decide_retry(
    policy: RetryPolicy, attempt: int, problem: ProblemError | None, transport_error: Exception | None
) -> float | None:
    """Seconds to wait before the next try, or None to give up and raise."""
    if attempt >= policy.attempts:
        return None
    if transport_error is not None:
        return policy.backoff_seconds(attempt) if policy.retry_connection_errors else None
    assert problem is not None
    if problem.status not in policy.statuses:
        return None
    return policy.wait_seconds(attempt, problem.retry_after_seconds)
