"""The closed set of problem types the service answers with (RFC 9457, application/problem+json).

Each kind has a stable slug (its ``type`` URI is ``/problems/<slug>``, served as documentation by
the app), an HTTP status and a title. Clients branch on ``type``; ``detail`` is for people and says
what to change. Error tree::

    ProblemError                      raised by routes and dependencies; carries a ProblemKind
    service.domain.errors.DomainError mapped by kind: InvalidInput → invalid-input (422), ...
    RequestValidationError            → validation-error (422) with one entry per field
    HTTPException (Starlette)         → not-found / method-not-allowed / ... by status
    sqlalchemy OperationalError       → database-unavailable (503, Retry-After); disk full → storage-full
    anything else                     → internal-error (500, request id, no traceback)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from starlette.exceptions import HTTPException
from starlette.responses import Response

PROBLEM_CONTENT_TYPE = "application/problem+json"
PROBLEM_BASE = "/problems/"


@dataclass(frozen=True, slots=True)
class ProblemKind:
    slug: str
    status: int
    title: str
    description: str

    @property
    def type_uri(self) -> str:
        return PROBLEM_BASE + self.slug


VALIDATION_ERROR = ProblemKind(
    "validation-error",
    422,
    "Request is not valid",
    "The body, query or path does not match the schema. `errors` lists each field and what it needs.",
)
INVALID_INPUT = ProblemKind(
    "invalid-input",
    422,
    "Input cannot be answered",
    "The request is well-formed but a value is out of range or inconsistent with another.",
)
IMPLAUSIBLE_RESULT = ProblemKind(
    "implausible-result",
    422,
    "Inputs give an impossible result",
    "For example an MFU above 1: usually a sparse peak, a throughput in the wrong unit or a wrong "
    "device count. `detail` names the likely cause.",
)
UNSUPPORTED_PRECISION = ProblemKind(
    "unsupported-precision",
    422,
    "Accelerator has no dense peak at this precision",
    "Choose a precision the part supports (see GET /v1/hardware/{id}) or give a custom peak.",
)
UNKNOWN_REFERENCE = ProblemKind(
    "unknown-reference",
    422,
    "A named preset or accelerator is unknown",
    "A model preset or accelerator named in the body does not exist; `close_matches` lists candidates.",
)
NOT_FOUND = ProblemKind("not-found", 404, "Not found", "No resource at this path for this caller.")
METHOD_NOT_ALLOWED = ProblemKind(
    "method-not-allowed", 405, "Method not allowed", "The path exists but not with this method."
)
NOT_ACCEPTABLE = ProblemKind(
    "not-acceptable",
    406,
    "No acceptable representation",
    "The Accept header asks for a media type this operation cannot produce.",
)
CONFLICT = ProblemKind("conflict", 409, "Conflict", "The request conflicts with the current state.")
IDEMPOTENCY_IN_FLIGHT = ProblemKind(
    "idempotency-in-flight",
    409,
    "A request with this Idempotency-Key is still being processed",
    "Retry after a moment; the first request's answer will be returned.",
)
IDEMPOTENCY_MISMATCH = ProblemKind(
    "idempotency-key-reused",
    422,
    "Idempotency-Key reused with a different body",
    "Each Idempotency-Key names one request; use a new key for a different body.",
)
PAYLOAD_TOO_LARGE = ProblemKind(
    "payload-too-large", 413, "Request body too large", "Send a smaller body or split the batch."
)
HEADERS_TOO_LARGE = ProblemKind(
    "headers-too-large",
    431,
    "Request headers too large",
    "The request line and headers together exceed the server's limit (TEFF_MAX_HEADER_BYTES); send fewer "
    "or shorter headers.",
)
REQUEST_TIMEOUT = ProblemKind(
    "request-timeout",
    408,
    "Request not received in time",
    "The headers or the body did not arrive within the server's read deadline; the connection is "
    "closed. Send the whole request promptly.",
)
SERVER_BUSY = ProblemKind(
    "server-busy",
    503,
    "Too many large bodies at once",
    "The server reads a bounded number of large bodies at a time; retry after the Retry-After seconds "
    "or send smaller batches.",
)
UNSUPPORTED_MEDIA_TYPE = ProblemKind(
    "unsupported-media-type", 415, "Unsupported media type", "Send the body as application/json."
)
UNAUTHORIZED = ProblemKind(
    "unauthorized",
    401,
    "API key missing or not valid",
    "Send a valid key as `X-API-Key: <key>` or `Authorization: Bearer <key>`.",
)
FORBIDDEN = ProblemKind(
    "forbidden", 403, "API key lacks the scope", "Use a key with the scope this operation needs."
)
DATABASE_UNAVAILABLE = ProblemKind(
    "database-unavailable",
    503,
    "Database unavailable",
    "The store cannot be reached; retry after the Retry-After seconds. Stateless endpoints still answer.",
)
STORAGE_FULL = ProblemKind(
    "storage-full",
    503,
    "Database disk full",
    "The database's disk is full, so nothing of this request was stored (reads still answer). Retry "
    "after the Retry-After seconds; an operator has to free space or grow the volume.",
)
INTERNAL_ERROR = ProblemKind(
    "internal-error",
    500,
    "Internal error",
    "Unexpected failure; quote the request_id when reporting it.",
)

ALL_KINDS: tuple[ProblemKind, ...] = (
    VALIDATION_ERROR,
    INVALID_INPUT,
    IMPLAUSIBLE_RESULT,
    UNSUPPORTED_PRECISION,
    UNKNOWN_REFERENCE,
    NOT_FOUND,
    METHOD_NOT_ALLOWED,
    NOT_ACCEPTABLE,
    CONFLICT,
    IDEMPOTENCY_IN_FLIGHT,
    IDEMPOTENCY_MISMATCH,
    PAYLOAD_TOO_LARGE,
    HEADERS_TOO_LARGE,
    REQUEST_TIMEOUT,
    SERVER_BUSY,
    UNSUPPORTED_MEDIA_TYPE,
    UNAUTHORIZED,
    FORBIDDEN,
    DATABASE_UNAVAILABLE,
    STORAGE_FULL,
    INTERNAL_ERROR,
)
KINDS_BY_SLUG = {kind.slug: kind for kind in ALL_KINDS}
KIND_BY_STATUS = {
    404: NOT_FOUND,
    405: METHOD_NOT_ALLOWED,
    406: NOT_ACCEPTABLE,
    409: CONFLICT,
    413: PAYLOAD_TOO_LARGE,
    415: UNSUPPORTED_MEDIA_TYPE,
    401: UNAUTHORIZED,
    403: FORBIDDEN,
    503: DATABASE_UNAVAILABLE,
}


class ProblemError(Exception):
    """Raise from a route or dependency to answer with a problem document."""

    def __init__(
        self,
        kind: ProblemKind,
        detail: str,
        *,
        headers: dict[str, str] | None = None,
        **extensions: Any,
    ) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail
        self.headers = headers or {}
        self.extensions = extensions


class BodyProblem(HTTPException):
    """A ProblemError raised while FastAPI reads a body: FastAPI turns any other exception there into
    a bare 400, but lets an HTTPException through; service.api.handlers answers it with ``problem``."""

    def __init__(self, problem: ProblemError) -> None:
        super().__init__(problem.kind.status, problem.detail)
        self.problem = problem


UNAUTHORIZED_HEADERS = {"WWW-Authenticate": 'Bearer realm="teff"'}


def invalid_api_key() -> ProblemError:
    """401 for a key that is unknown, malformed or revoked (one answer for all three)."""
    return ProblemError(
        UNAUTHORIZED, "The API key is not valid or has been revoked.", headers=dict(UNAUTHORIZED_HEADERS)
    )


def problem_body(
    kind: ProblemKind, detail: str, *, instance: str | None, request_id: str | None, **extensions: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": kind.type_uri,
        "title": kind.title,
        "status": kind.status,
        "detail": detail,
    }
    if instance is not None:
        body["instance"] = instance
    if request_id is not None:
        body["request_id"] = request_id
    body.update({key: value for key, value in extensions.items() if value is not None})
    return body


def problem_response(
    kind: ProblemKind,
    detail: str,
    *,
    instance: str | None = None,
    request_id: str | None = None,
    headers: dict[str, str] | None = None,
    **extensions: Any,
) -> Response:
    body = problem_body(kind, detail, instance=instance, request_id=request_id, **extensions)
    return Response(
        orjson.dumps(body), status_code=kind.status, media_type=PROBLEM_CONTENT_TYPE, headers=headers
    )
