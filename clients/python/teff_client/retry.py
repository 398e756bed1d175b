"""When to try a request again, and how long to wait first.

Exponential backoff with full jitter (each wait drawn uniformly from zero up to the capped exponential
delay: AWS Architecture Blog, "Exponential Backoff And Jitter", 2015), so that many training jobs that
lost the service at the same moment do not come back in lockstep. A ``Retry-After`` from the service
(RFC 9110 §10.2.3; it sends one with every 503) is honoured as the wait instead.

Every operation of the contract is safe to send twice: estimates are pure, a run creation carries an
``Idempotency-Key``, a repeated measurement step is ignored, a repeated final status is a no-op. So
connection failures are retried for every method, not only the idempotent ones.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

#: 429 Too Many Requests and 503 Service Unavailable (RFC 9110 §15.6.4) invite a retry; 502 and 504
#: come from a proxy or load balancer in front of a restarting replica.
RETRY_STATUSES = frozenset({429, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` counts every try (1 = never retry)."""

    attempts: int = 5
    backoff_base_seconds: float = 0.5
    backoff_max_seconds: float = 30.0
    #: a Retry-After longer than this is not waited for: the error is raised
    max_retry_after_seconds: float = 120.0
    statuses: frozenset[int] = RETRY_STATUSES
    retry_connection_errors: bool = True
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def backoff_seconds(self, retry_number: int) -> float:
        """Wait before retry number ``retry_number`` (1 for the first retry): full jitter."""
        ceiling = min(self.backoff_max_seconds, self.backoff_base_seconds * 2 ** (retry_number - 1))
        return self.rng.uniform(0.0, ceiling)

    def wait_seconds(self, retry_number: int, retry_after_seconds: float | None) -> float | None:
        """How long to wait, or None when the server asked for longer than we are willing to wait."""
        if retry_after_seconds is not None:
            if retry_after_seconds > self.max_retry_after_seconds:
                return None
            # A little jitter on top, so that clients told the same Retry-After spread out.
            return retry_after_seconds + self.rng.uniform(0.0, min(1.0, retry_after_seconds * 0.1))
        return self.backoff_seconds(retry_number)


NO_RETRY = RetryPolicy(attempts=1)
