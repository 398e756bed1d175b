"""Exception → problem+json mapping, installed on the app by the factory."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from sqlalchemy.exc import DBAPIError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from service.api import problems as p
from service.api.schemas.fields import NO_NUL_PATTERN, NUL_MESSAGE, RUN_ID_PATTERN
from service.domain import errors as domain_errors
from service.domain.run import FinalStatusLocked
from service.observability import LOGGER_NAME, request_id_var
from service.usecases.errors import (
    IdempotencyInFlight,
    IdempotencyKeyReused,
    JobAttemptExists,
    KeyRevoked,
    RunNotFound,
    RunsNotFound,
)

logger = logging.getLogger(LOGGER_NAME + ".errors")
RETRY_AFTER_SECONDS = "5"
#: Freeing disk space is an operator's job, not a blip: clients back off longer.
DISK_FULL_RETRY_AFTER_SECONDS = "30"
#: SQLite's SQLITE_FULL result code; PostgreSQL's SQLSTATE disk_full.
_SQLITE_FULL = 13
_POSTGRES_DISK_FULL = "53100"


def _respond(request: Request, kind: p.ProblemKind, detail: str, **extensions: Any) -> Response:
    return p.problem_response(
        kind, detail, instance=request.url.path, request_id=request_id_var.get(), **extensions
    )


_METHOD_ORDER = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"]
_HTTP_METHODS = frozenset(_METHOD_ORDER)
#: Patterns whose mismatch means a NUL character (the shared text types of service.api.schemas.fields).
_NUL_PATTERNS = frozenset({NO_NUL_PATTERN, RUN_ID_PATTERN})
#: Validation errors listed in one answer at most (the detail counts them all).
MAX_REPORTED_ERRORS = 20


#: Tags of a body that is one item or a list of them, chosen by its shape (pydantic's tagged union puts the
#: tag into an error's location): ``Tag(SHAPE_TAG_PREFIX + "batch")``.
SHAPE_TAG_PREFIX = "shape:"


def field_path(loc: Sequence[Any], *, root: str = "") -> str:
    """A validation error's location as the one path syntax of every answer: names joined by dots,
    list positions in brackets (``body.tags[1]``, ``body[3].throughput``, ``body.items[2].model``)."""
    path = root
    for part in loc:
        if isinstance(part, str) and part.startswith(SHAPE_TAG_PREFIX):
            continue  # which shape of a one-or-many body was read: not a place in the request
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path or "body"


def _message(error: Mapping[str, Any]) -> str:
    if (
        error.get("type") == "string_pattern_mismatch"
        and (error.get("ctx") or {}).get("pattern") in _NUL_PATTERNS
    ):
        return NUL_MESSAGE
    # pydantic prefixes messages of custom validators with "Value error, ".
    return str(error.get("msg", "invalid value")).removeprefix("Value error, ")


def validation_errors(errors: Sequence[Mapping[str, Any]], *, root: str = "") -> list[dict[str, Any]]:
    """pydantic's errors as the ``errors`` member of a problem (at most MAX_REPORTED_ERRORS)."""
    return [
        {
            "field": field_path(error.get("loc", ()), root=root),
            "message": _message(error),
            "code": error.get("type"),
        }
        for error in errors[:MAX_REPORTED_ERRORS]
    ]


def validation_detail(errors: Sequence[Mapping[str, Any]], *, total: int) -> str:
    """The ``detail`` of a validation problem: the first error, and how many more there are."""
    first = errors[0] if errors else {"field": "body", "message": "invalid"}
    detail = f"{first['field']}: {first['message']}"
    if total > 1:
        detail += f" (and {total - 1} more in `errors`)"
    return detail


def validation_problem(exc: ValidationError, *, root: str = "") -> p.ProblemError:
    """A 422 for a body validated outside FastAPI's own request validation."""
    errors = validation_errors(exc.errors(include_url=False), root=root)
    return p.ProblemError(
        p.VALIDATION_ERROR, validation_detail(errors, total=exc.error_count()), errors=errors
    )


NOT_JSON_DETAIL = "body: not valid JSON (send UTF-8 encoded JSON; NaN and Infinity are not JSON numbers)."


def not_json_problem() -> p.ProblemError:
    """A 422 for a body that is not JSON at all."""
    return p.ProblemError(
        p.VALIDATION_ERROR,
        NOT_JSON_DETAIL,
        errors=[{"field": "body", "message": "not valid JSON", "code": "json_invalid"}],
    )


async def _validation(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    raw = exc.errors()
    errors = validation_errors(raw)
    return _respond(request, p.VALIDATION_ERROR, validation_detail(errors, total=len(raw)), errors=errors)


_DOMAIN_KINDS: list[tuple[type[domain_errors.DomainError], p.ProblemKind]] = [
    (domain_errors.ImplausibleResult, p.IMPLAUSIBLE_RESULT),
    (domain_errors.UnsupportedPrecision, p.UNSUPPORTED_PRECISION),
    (domain_errors.InvalidInput, p.INVALID_INPUT),
    (domain_errors.NotFound, p.UNKNOWN_REFERENCE),
]


def domain_problem(exc: domain_errors.DomainError) -> tuple[p.ProblemKind, dict[str, Any]]:
    """The problem kind and extension members for a domain error (also used by batch items)."""
    kind = next((kind for cls, kind in _DOMAIN_KINDS if isinstance(exc, cls)), p.INVALID_INPUT)
    extensions: dict[str, Any] = {}
    if exc.field:
        extensions["errors"] = [{"field": exc.field, "message": exc.message, "code": exc.code}]
    if isinstance(exc, domain_errors.NotFound) and exc.close_matches:
        extensions["close_matches"] = list(exc.close_matches)
    return kind, extensions


async def _domain(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, domain_errors.DomainError)
    kind, extensions = domain_problem(exc)
    return _respond(request, kind, exc.message, **extensions)


async def _problem(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, p.ProblemError)
    response = _respond(request, exc.kind, exc.detail, **exc.extensions)
    response.headers.update(exc.headers)
    return response


def run_not_found_problem(exc: RunNotFound | RunsNotFound) -> p.ProblemError:
    """One answer for an unknown id and another tenant's run, whichever endpoint is asked."""
    if isinstance(exc, RunNotFound):
        return p.ProblemError(
            p.NOT_FOUND, f"No run {exc.run_id!r} for this API key's tenant.", run_id=exc.run_id
        )
    named = ", ".join(repr(run_id) for run_id in exc.run_ids)
    return p.ProblemError(
        p.NOT_FOUND, f"No run {named} for this API key's tenant.", missing_run_ids=exc.run_ids
    )


def _use_case_problem(request: Request, exc: Exception) -> p.ProblemError:
    """A use case's refusal (service.usecases.errors, and the run entity's FinalStatusLocked) as its problem."""
    if isinstance(exc, RunNotFound | RunsNotFound):
        return run_not_found_problem(exc)
    if isinstance(exc, FinalStatusLocked):
        return p.ProblemError(
            p.CONFLICT,
            f"Run {request.path_params.get('run_id')} is {exc.current}, a final status: it cannot become "
            f"{exc.requested}. Record a restart as a new run (next attempt).",
            current_status=exc.current,
        )
    if isinstance(exc, KeyRevoked):
        return p.invalid_api_key()
    if isinstance(exc, JobAttemptExists):
        return p.ProblemError(
            p.CONFLICT,
            f"Run {exc.existing_run_id} already records cluster {exc.cluster!r}, job {exc.scheduler_job_id!r}, "
            f"attempt {exc.attempt}; read it, or give the next attempt number for a restart.",
            existing_run_id=exc.existing_run_id,
        )
    if isinstance(exc, IdempotencyKeyReused):
        return p.ProblemError(
            p.IDEMPOTENCY_MISMATCH,
            "This Idempotency-Key was used with a different request body; use a new key for a "
            "different request (a key names one request for 24 hours).",
        )
    assert isinstance(exc, IdempotencyInFlight), exc
    return p.ProblemError(
        p.IDEMPOTENCY_IN_FLIGHT,
        "A request with this Idempotency-Key is still being processed; retry in a moment to get its answer.",
        headers={"Retry-After": "1"},
    )


async def _application(request: Request, exc: Exception) -> Response:
    return await _problem(request, _use_case_problem(request, exc))


async def _http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if isinstance(exc, p.BodyProblem):
        return await _problem(request, exc.problem)
    if exc.status_code == 400:
        # FastAPI answers 400 when a body is not decodable at all (bytes that are not UTF-8 JSON); the
        # contract has one answer for a body that cannot be read as its schema: validation-error.
        problem = not_json_problem()
        return _respond(request, problem.kind, problem.detail, **problem.extensions)
    kind = p.KIND_BY_STATUS.get(exc.status_code)
    if kind is None:
        kind = p.ProblemKind(f"http-{exc.status_code}", exc.status_code, str(exc.detail), str(exc.detail))
    detail = str(exc.detail) if exc.detail and exc.detail != kind.title else kind.description
    if exc.status_code == 404 and exc.detail == "Not Found":
        detail = f"No operation at {request.url.path}; see /docs for the paths this service answers."
    if exc.status_code == 405:
        detail = f"{request.method} is not allowed on {request.url.path}."
    response = _respond(request, kind, detail)
    if exc.headers:
        response.headers.update(exc.headers)
    if exc.status_code == 405:
        methods = allowed_methods(request.app, request.url.path, fallback=response.headers.get("allow", ""))
        response.headers["Allow"] = ", ".join(methods)
    return response


def _path_table(app: FastAPI) -> list[tuple[re.Pattern[str], bool, frozenset[str]]]:
    """(path regex, literal, methods) for every path of the app's contract, built once per app."""
    table: list[tuple[re.Pattern[str], bool, frozenset[str]]] | None = getattr(app.state, "allow_table", None)
    if table is None:
        table = []
        for template, operations in app.openapi().get("paths", {}).items():
            methods = frozenset(method.upper() for method in operations if method.upper() in _HTTP_METHODS)
            pattern = "^" + re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)) + "$"
            table.append((re.compile(pattern), "{" not in template, methods))
        app.state.allow_table = table
    return table


def allowed_methods(app: FastAPI, path: str, *, fallback: str = "") -> list[str]:
    """Every method the path answers, for ``Allow`` (RFC 9110 §10.2.1). Starlette names the methods of
    the first route whose path matches, and GET and POST on one path are two routes: ``/v1/runs``
    listed only POST. A literal path (``/v1/runs/compare``) takes its own methods, not those of a
    template it also matches (``/v1/runs/{run_id}``), as OpenAPI matches paths; HEAD goes with GET."""
    matches = [(literal, methods) for regex, literal, methods in _path_table(app) if regex.match(path)]
    literal = [methods for is_literal, methods in matches if is_literal]
    chosen = literal or [methods for _, methods in matches]
    allowed = (
        set().union(*chosen) if chosen else {m.strip().upper() for m in fallback.split(",") if m.strip()}
    )
    if "GET" in allowed:
        allowed.add("HEAD")
    return sorted(allowed, key=_METHOD_ORDER.index)


def _disk_full(exc: DBAPIError) -> bool:
    """The database refused a write for lack of space ("database or disk is full", "could not extend
    file ... No space left on device")."""
    orig = exc.orig
    return (
        getattr(orig, "sqlite_errorcode", None) == _SQLITE_FULL
        or getattr(orig, "sqlstate", None) == _POSTGRES_DISK_FULL
    )


async def _database(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, DBAPIError)
    if _disk_full(exc):
        logger.error("database disk full: a write was refused and rolled back")
        response = _respond(
            request,
            p.STORAGE_FULL,
            "The database's disk is full: nothing of this request was stored. Retry after the "
            "Retry-After seconds (an operator has to free space); reads still answer.",
        )
        response.headers["Retry-After"] = DISK_FULL_RETRY_AFTER_SECONDS
        return response
    if isinstance(exc, OperationalError) or exc.connection_invalidated:
        logger.warning("database unavailable: %s", type(exc.orig).__name__ if exc.orig else exc)
        response = _respond(request, p.DATABASE_UNAVAILABLE, p.DATABASE_UNAVAILABLE.description)
        response.headers["Retry-After"] = RETRY_AFTER_SECONDS
        return response
    logger.exception("database error")
    return _respond(request, p.INTERNAL_ERROR, "The server failed to answer this request.")


def install_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(domain_errors.DomainError, _domain)
    app.add_exception_handler(p.ProblemError, _problem)
    refusals = (
        RunNotFound,
        RunsNotFound,
        FinalStatusLocked,
        JobAttemptExists,
        IdempotencyKeyReused,
        IdempotencyInFlight,
        KeyRevoked,
    )
    for refusal in refusals:
        app.add_exception_handler(refusal, _application)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(DBAPIError, _database)
