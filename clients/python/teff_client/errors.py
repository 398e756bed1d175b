"""The service's RFC 9457 problem+json answers as one exception tree.

Every 4xx/5xx the service sends is ``application/problem+json`` with a stable ``type``
(``/problems/<slug>``); :func:`problem_from_response` maps it to the subclass of its family, so a caller
catches ``NotFound`` or ``Conflict`` and reads ``detail`` (what to change) and ``errors`` (the
offending fields). A failure that never reached the service is :class:`ServiceUnreachable`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx


@dataclass(frozen=True)
class FieldError:
    """One offending field of a 422: ``field`` is the JSON path (``body.hardware.device_count``)."""

    field: str
    message: str
    code: str | None = None


class TeffError(Exception):
    """Base of every error this client raises."""


class ServiceUnreachable(TeffError):
    """No answer: connection refused or reset, DNS, or a timeout, after the retries ran out."""


class ProblemError(TeffError):
    """An RFC 9457 problem the service answered with."""

    def __init__(
        self,
        *,
        status: int,
        type: str = "about:blank",
        title: str = "",
        detail: str = "",
        instance: str | None = None,
        request_id: str | None = None,
        errors: list[FieldError] | None = None,
        close_matches: list[str] | None = None,
        body: dict[str, Any] | None = None,
        retry_after_seconds: float | None = None,
    ) -> None:
        self.status = status
        self.type = type
        self.title = title
        self.detail = detail
        self.instance = instance
        self.request_id = request_id
        self.errors = errors or []
        self.close_matches = close_matches or []
        self.body = body or {}
        self.retry_after_seconds = retry_after_seconds
        super().__init__(self._message())

    @property
    def slug(self) -> str:
        """The last part of ``type``: ``not-found``, ``validation-error``, ..."""
        return self.type.rsplit("/", 1)[-1]

    @property
    def fields(self) -> list[str]:
        """The offending fields' paths."""
        return [error.field for error in self.errors]

    def _message(self) -> str:
        text = f"{self.status} {self.title or self.slug}: {self.detail}".rstrip(": ")
        if self.errors:
            text += " [" + "; ".join(f"{error.field}: {error.message}" for error in self.errors) + "]"
        if self.close_matches:
            text += f" (close matches: {', '.join(self.close_matches)})"
        return text


class BadRequest(ProblemError):
    """4xx that is the caller's to fix (the family of the ones below)."""


class ValidationFailed(BadRequest):
    """422: a field is missing, malformed or out of range; ``errors`` names each."""


class UnknownReference(ValidationFailed):
    """422 ``unknown-reference``: a preset, accelerator or device name the catalog lacks."""


class ImplausibleResult(ValidationFailed):
    """422 ``implausible-result``: the inputs give an impossible answer (an MFU above 1)."""


class Unauthorized(BadRequest):
    """401: no API key, or an unknown or revoked one."""


class Forbidden(BadRequest):
    """403: the key lacks the scope."""


class NotFound(BadRequest):
    """404: no such run, preset, accelerator or path."""


class Conflict(BadRequest):
    """409: e.g. a second run with the same (cluster, scheduler_job_id, attempt); ``existing_run_id``."""

    @property
    def existing_run_id(self) -> str | None:
        value = self.body.get("existing_run_id")
        return str(value) if value is not None else None


class IdempotencyInFlight(Conflict):
    """409 ``idempotency-in-flight``: the first request with this key is still running."""


class PayloadTooLarge(BadRequest):
    """413: the body is over the server's limit (bytes, or measurements per request)."""


class NotAcceptable(BadRequest):
    """406 or 415: a media type the operation does not offer or take."""


class RateLimited(BadRequest):
    """429: too many requests; ``retry_after_seconds`` says when to come back."""


class ServerError(ProblemError):
    """5xx."""


class ServiceUnavailable(ServerError):
    """503: the database is unreachable or the server is shedding load; retried by default."""


_BY_SLUG: dict[str, type[ProblemError]] = {
    "unknown-reference": UnknownReference,
    "implausible-result": ImplausibleResult,
    "idempotency-in-flight": IdempotencyInFlight,
}
_BY_STATUS: dict[int, type[ProblemError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    406: NotAcceptable,
    409: Conflict,
    413: PayloadTooLarge,
    415: NotAcceptable,
    422: ValidationFailed,
    429: RateLimited,
    503: ServiceUnavailable,
}


def retry_after_seconds(response: httpx.Response) -> float | None:
    """``Retry-After`` as seconds (RFC 9110 §10.2.3: delay-seconds or an HTTP date)."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    import datetime as _dt

    return max(0.0, (when - _dt.datetime.now(_dt.UTC)).total_seconds())


def problem_from_response(response: httpx.Response) -> ProblemError:
    """The exception for an error answer; a body that is not problem+json still gives its status."""
    body: dict[str, Any] = {}
    try:
        parsed = response.json()
        if isinstance(parsed, dict):
            body = parsed
    except ValueError:
        pass
    status = int(body.get("status") or response.status_code)
    problem_type = str(body.get("type") or "about:blank")
    slug = problem_type.rsplit("/", 1)[-1]
    cls = _BY_SLUG.get(slug) or _BY_STATUS.get(response.status_code)
    if cls is None:
        cls = ServerError if response.status_code >= 500 else BadRequest
    errors = [
        FieldError(str(item.get("field", "")), str(item.get("message", "")), item.get("code"))
        for item in body.get("errors") or []
        if isinstance(item, dict)
    ]
    return cls(
        status=status,
        type=problem_type,
        title=str(body.get("title") or response.reason_phrase or ""),
        detail=str(body.get("detail") or (response.text[:500] if not body else "")),
        instance=body.get("instance"),
        request_id=body.get("request_id") or response.headers.get("x-request-id"),
        errors=errors,
        close_matches=[str(match) for match in body.get("close_matches") or []],
        body=body,
        retry_after_seconds=retry_after_seconds(response),
    )
