"""One pure-ASGI middleware for what every request needs: a request id, the body and header limits,
the content-type check, the API key of keyed bodies checked before the body is read, a bound on
large bodies read at once, the deadline of store requests, the access log line, Prometheus metrics,
and a problem+json 500 that never leaks a traceback. Pure ASGI (not BaseHTTPMiddleware) keeps the
per-request cost in microseconds.

Memory without a key: FastAPI reads and parses a whole body before it solves the dependencies that
check the key, so an unauthenticated client could make the process hold its bodies (each 7 MB of
JSON costs 40-80 MB parsed). Here a keyed route's body is not read at all until its key is known
(401 otherwise: the body stays in the socket, the server reads at most its 64 KiB buffer of it), and
bodies over ``large_body_bytes`` are read ``max_concurrent_large_bodies`` at a time (503 server-busy
after ``large_body_wait_seconds``). The scope checks stay in service.api.deps.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from typing import Any
from urllib.parse import parse_qsl

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.problems import (
    DATABASE_UNAVAILABLE,
    HEADERS_TOO_LARGE,
    INTERNAL_ERROR,
    PAYLOAD_TOO_LARGE,
    SERVER_BUSY,
    UNAUTHORIZED,
    UNAUTHORIZED_HEADERS,
    UNSUPPORTED_MEDIA_TYPE,
    VALIDATION_ERROR,
    invalid_api_key,
    problem_response,
)
from service.api.schemas.fields import NUL_MESSAGE
from service.observability import HTTP_LATENCY, HTTP_REQUESTS, LOGGER_NAME, request_id_var
from service.settings import Settings
from service.store import keys
from service.store.uow import UnitOfWork

_SAFE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_BODY_METHODS = {b"POST", b"PUT", b"PATCH"}
#: Paths whose operations all need an API key (service.api.routers.runs and .stats) ...
_KEYED_PREFIXES = ("/v1/runs", "/v1/stats")
#: ... and the paths whose answers come from the store (the request deadline's).
_STORE_PREFIXES = (*_KEYED_PREFIXES, "/readyz")
#: What a client waits before retrying a refused request (seconds): a database outage, a full house.
DATABASE_RETRY_AFTER_SECONDS = "5"
BUSY_RETRY_AFTER_SECONDS = "1"
NO_KEY_DETAIL = (
    "No API key: send `X-API-Key: <key>` or `Authorization: Bearer <key>` "
    "(create one with `teff keys create --tenant T --scopes read,write`)."
)
logger = logging.getLogger(LOGGER_NAME + ".http")


class _BodyTooLarge(Exception):
    pass


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


def _is_json(content_type: bytes | None) -> bool:
    if content_type is None:
        return False
    media = content_type.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))


def _presented_key(scope: Scope) -> str | None:
    """The key sent as ``X-API-Key`` or ``Authorization: Bearer`` (as service.api.deps reads them)."""
    x_api_key = _header(scope, b"x-api-key")
    if x_api_key is not None and x_api_key.strip():
        return x_api_key.strip().decode("latin-1")
    authorization = _header(scope, b"authorization")
    if authorization is not None:
        scheme, _, credentials = authorization.decode("latin-1").partition(" ")
        if scheme.lower() == "bearer" and credentials.strip():
            return credentials.strip()
    return None


def _authenticate(engine: Engine, key: str) -> keys.Principal | None:
    with UnitOfWork(engine, write=False) as uow:
        return keys.authenticate(uow.connection, key)


class RequestContextMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body_bytes: int,
        settings: Settings | None = None,
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        defaults = settings or Settings()
        self.max_header_bytes = defaults.max_header_bytes
        self.large_body_bytes = defaults.large_body_bytes
        self.max_concurrent_large_bodies = defaults.max_concurrent_large_bodies
        self.large_body_wait_seconds = defaults.large_body_wait_seconds
        self.request_deadline_seconds = defaults.request_deadline_seconds
        self.require_key_for_estimates = defaults.require_api_key_for_estimates
        # Made on first use, on the server's event loop.
        self._large_bodies: asyncio.Semaphore | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        inbound_id = _header(scope, b"x-request-id")
        request_id = (
            inbound_id.decode("ascii")
            if inbound_id and _SAFE_REQUEST_ID.match(inbound_id.decode("latin-1"))
            else uuid.uuid4().hex
        )
        token = request_id_var.set(request_id)
        state: dict[str, Any] = {"status": 500, "started": False}
        request_id_header = (b"x-request-id", request_id.encode("ascii"))

        async def send_direct(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
                state["started"] = True
                message["headers"] = [*message.get("headers", []), request_id_header]
            await send(message)

        async def send_wrapper(message: Message) -> None:
            if state.get("too_large") or state.get("abandoned"):
                # The app caught our exception and answered (FastAPI turns body errors into 400):
                # drop its answer, the 413 is sent once the app returns. Or the deadline answered.
                return
            await send_direct(message)

        async def answer(response_factory: Any) -> None:
            response = response_factory(instance=scope["path"], request_id=request_id)
            await response(scope, _empty_receive, send_direct)

        deadline: asyncio.TimerHandle | None = None
        large_body_slot: asyncio.Semaphore | None = None
        try:
            rejection = self._reject_early(scope)
            if rejection is not None:
                kind, detail = rejection
                await answer(lambda **kw: problem_response(kind, detail, **kw))
                return
            nul_field = _nul_in_path_or_query(scope)
            if nul_field is not None:
                await answer(
                    lambda **kw: problem_response(
                        VALIDATION_ERROR,
                        f"{nul_field}: {NUL_MESSAGE}",
                        errors=[
                            {"field": nul_field, "message": NUL_MESSAGE, "code": "string_pattern_mismatch"}
                        ],
                        **kw,
                    )
                )
                return
            path: str = scope["path"]
            if path.startswith(_STORE_PREFIXES):
                deadline = asyncio.get_running_loop().call_later(
                    self.request_deadline_seconds, self._on_deadline, state, answer
                )
            has_body = _has_body(scope)
            if (has_body and path.startswith(_KEYED_PREFIXES)) or (
                self.require_key_for_estimates
                and path.startswith("/v1/")
                and not path.startswith(_KEYED_PREFIXES)
                and scope["method"] != "OPTIONS"
            ):
                refusal = await self._check_key(scope, cached=path.startswith(_KEYED_PREFIXES))
                if state.get("abandoned"):
                    return
                if refusal is not None:
                    await answer(refusal)
                    return
            if has_body and self._is_large(scope):
                large_body_slot = await self._large_body_slot()
                if large_body_slot is None:
                    await answer(
                        lambda **kw: problem_response(
                            SERVER_BUSY,
                            f"{self.max_concurrent_large_bodies} large bodies are being read; retry after "
                            f"{BUSY_RETRY_AFTER_SECONDS} s, or send batches under {self.large_body_bytes} bytes.",
                            headers={"Retry-After": BUSY_RETRY_AFTER_SECONDS},
                            **kw,
                        )
                    )
                    return
            received = 0

            async def receive_wrapper() -> Message:
                nonlocal received
                message = await receive()
                if message["type"] == "http.request":
                    received += len(message.get("body", b""))
                    if received > self.max_body_bytes:
                        state["too_large"] = True
                        raise _BodyTooLarge
                return message

            await self.app(scope, receive_wrapper, send_wrapper)
            if state.get("too_large"):
                raise _BodyTooLarge
        except _BodyTooLarge:
            state["too_large"] = False
            if not state["started"]:
                await answer(lambda **kw: problem_response(PAYLOAD_TOO_LARGE, self._too_large(), **kw))
        except Exception:
            logger.exception("unhandled error", extra={"path": scope["path"]})
            if not state["started"]:
                await answer(
                    lambda **kw: problem_response(
                        INTERNAL_ERROR, "The server failed to answer this request.", **kw
                    )
                )
        finally:
            if deadline is not None:
                deadline.cancel()
            if large_body_slot is not None:
                large_body_slot.release()
            elapsed = time.perf_counter() - started
            route = scope.get("route")
            route_label = getattr(route, "path", "unmatched")
            method = scope["method"]
            status = state["status"]
            HTTP_REQUESTS.labels(route_label, method, str(status)).inc()
            HTTP_LATENCY.labels(route_label, method).observe(elapsed)
            logger.info(
                "%s %s %s",
                method,
                scope["path"],
                status,
                extra={"status": status, "duration_ms": round(elapsed * 1000, 3), "route": route_label},
            )
            request_id_var.reset(token)

    def _on_deadline(self, state: dict[str, Any], answer: Any) -> None:
        """The store request's deadline passed (a database that does not answer): answer 503 now, if
        nothing was sent yet, and drop what the request sends later (it goes on in the background
        until the database's own deadlines end it: service.store.engine)."""
        if state["started"]:
            return
        state["abandoned"] = True
        logger.warning("request deadline passed; answered 503")

        async def respond() -> None:
            await answer(
                lambda **kw: problem_response(
                    DATABASE_UNAVAILABLE,
                    f"The store did not answer within {self.request_deadline_seconds:g} s; retry after "
                    "the Retry-After seconds. Stateless endpoints still answer.",
                    headers={"Retry-After": DATABASE_RETRY_AFTER_SECONDS},
                    **kw,
                )
            )

        task = asyncio.ensure_future(respond())
        _background.add(task)
        task.add_done_callback(_background.discard)

    async def _check_key(self, scope: Scope, *, cached: bool) -> Any:
        """None when the request carries an active key, else a response factory (401, or 503 when
        the store cannot say). ``cached``: a key this process authenticated before passes without a
        lookup (the operation checks it again: service.api.deps); the estimate endpoints, which check
        nothing else, look it up every time, so that a revoked key is refused at once."""
        key = _presented_key(scope)
        if key is None:
            return lambda **kw: problem_response(
                UNAUTHORIZED, NO_KEY_DETAIL, headers=dict(UNAUTHORIZED_HEADERS), **kw
            )
        app_state = scope["app"].state
        cache = getattr(app_state, "principal_cache", None)
        digest = keys.key_digest(key)
        if cached and cache is not None and cache.get(digest) is not None:
            return None
        admission: asyncio.Semaphore | None = getattr(app_state, "database_admission", None)
        try:
            if admission is None:
                principal = await run_in_threadpool(_authenticate, app_state.engine, key)
            else:
                async with admission:
                    principal = await run_in_threadpool(_authenticate, app_state.engine, key)
        except DBAPIError as exc:
            logger.warning("database unavailable: %s", type(exc.orig).__name__ if exc.orig else exc)
            return lambda **kw: problem_response(
                DATABASE_UNAVAILABLE,
                DATABASE_UNAVAILABLE.description,
                headers={"Retry-After": DATABASE_RETRY_AFTER_SECONDS},
                **kw,
            )
        if principal is None:
            error = invalid_api_key()
            return lambda **kw: problem_response(error.kind, error.detail, headers=error.headers, **kw)
        if cached and cache is not None:
            cache.put(digest, principal)
        return None

    def _is_large(self, scope: Scope) -> bool:
        length = _header(scope, b"content-length")
        if length is None:
            return True  # chunked: its size is known only once read
        try:
            return int(length) > self.large_body_bytes
        except ValueError:
            return True

    async def _large_body_slot(self) -> asyncio.Semaphore | None:
        if self._large_bodies is None:
            self._large_bodies = asyncio.Semaphore(self.max_concurrent_large_bodies)
        slots = self._large_bodies
        try:
            await asyncio.wait_for(slots.acquire(), self.large_body_wait_seconds)
        except TimeoutError:
            return None
        return slots

    def _too_large(self) -> str:
        return f"The body exceeds the limit of {self.max_body_bytes} bytes; send less or split it."

    def _reject_early(self, scope: Scope) -> tuple[Any, str] | None:
        # The HTTP server enforces this while reading (service.http_protocol); checked here too for
        # servers that do not.
        header_bytes = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
        for name, value in scope["headers"]:
            header_bytes += len(name) + len(value) + 4
        if header_bytes > self.max_header_bytes:
            return (
                HEADERS_TOO_LARGE,
                f"The request line and headers take {header_bytes} bytes; the limit is "
                f"{self.max_header_bytes}. Send fewer or shorter headers.",
            )
        if scope["method"].encode() not in _BODY_METHODS:
            return None
        length_header = _header(scope, b"content-length")
        if length_header is not None:
            try:
                length = int(length_header)
            except ValueError:
                length = 0
            if length > self.max_body_bytes:
                return PAYLOAD_TOO_LARGE, self._too_large()
            if length == 0:
                return None
        elif _header(scope, b"transfer-encoding") is None:
            return None
        if not _is_json(_header(scope, b"content-type")):
            got = _header(scope, b"content-type")
            return (
                UNSUPPORTED_MEDIA_TYPE,
                f"Send the body as application/json (got {got.decode('latin-1') if got else 'no Content-Type'}).",
            )
        return None


def _nul_in_path_or_query(scope: Scope) -> str | None:
    """The path or query parameter that carries a NUL character (``%00``), if any: no text the service
    stores or compares may hold one (service.api.schemas.fields.Text), whatever the operation
    declares; a cheap byte test first, the name only for the rare request that has one."""
    if "\x00" in scope["path"]:
        return "path"
    query: bytes = scope.get("query_string") or b""
    if b"%00" not in query and b"\x00" not in query:
        return None
    for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
        if "\x00" in name or "\x00" in value:
            return f"query.{name.replace(chr(0), '')}"
    return None


def _has_body(scope: Scope) -> bool:
    if scope["method"].encode() not in _BODY_METHODS:
        return False
    length = _header(scope, b"content-length")
    if length is not None:
        return length.strip() not in (b"0", b"")
    return _header(scope, b"transfer-encoding") is not None


#: Deadline answers in flight (a reference, so that the event loop does not drop the task).
_background: set[asyncio.Task[None]] = set()


async def _empty_receive() -> Message:
    return {"type": "http.disconnect"}
