"""One pure-ASGI middleware for what every request needs: a request id, the body-size limit, the
content-type check, the access log line, Prometheus metrics, and a problem+json 500 that never
leaks a traceback. Pure ASGI (not BaseHTTPMiddleware) keeps the per-request cost in microseconds.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.problems import (
    INTERNAL_ERROR,
    PAYLOAD_TOO_LARGE,
    UNSUPPORTED_MEDIA_TYPE,
    problem_response,
)
from service.observability import HTTP_LATENCY, HTTP_REQUESTS, LOGGER_NAME, request_id_var

_SAFE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_BODY_METHODS = {b"POST", b"PUT", b"PATCH"}
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


class RequestContextMiddleware:
    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

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

        async def send_wrapper(message: Message) -> None:
            if state.get("too_large"):
                # The app caught our exception and answered (FastAPI turns body errors into 400);
                # drop its answer: the 413 is sent once the app returns.
                return
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
                state["started"] = True
                message["headers"] = [*message.get("headers", []), request_id_header]
            await send(message)

        async def answer(response_factory: Any) -> None:
            response = response_factory(instance=scope["path"], request_id=request_id)
            await response(scope, _empty_receive, send_wrapper)

        try:
            rejection = self._reject_early(scope)
            if rejection is not None:
                kind, detail = rejection
                await answer(lambda **kw: problem_response(kind, detail, **kw))
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

    def _too_large(self) -> str:
        return f"The body exceeds the limit of {self.max_body_bytes} bytes; send less or split it."

    def _reject_early(self, scope: Scope) -> tuple[Any, str] | None:
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


async def _empty_receive() -> Message:
    return {"type": "http.disconnect"}
