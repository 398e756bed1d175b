"""uvicorn's httptools protocol with read deadlines and a header-size cap, enforced while reading.

uvicorn closes a keep-alive connection idle between requests (``timeout_keep_alive``), but nothing
else: a connection that never sends a byte, or trickles its headers or its body a byte at a time,
stays open for ever, and httptools buffers a header of any size before the app sees it (8 x 64 MiB
headers answered 200). Here, per connection:

* the request line and headers must arrive within ``header_read_timeout_seconds``, counted from the
  connection (its first request) or from the request's first byte (later ones: the idle time before
  it is the keep-alive timeout's);
* they may take ``max_header_bytes`` at most, counted as they arrive (431 once over);
* the body must arrive within ``body_read_timeout_seconds`` after the headers.

A deadline that passes answers 408 problem+json (when nothing was answered yet) and closes the
connection; the app, if it was waiting for the body, sees a disconnect. The settings are read from
the environment (``load_settings``) once per process: uvicorn makes its worker processes from the
class's name, so the class cannot carry them itself.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ClassVar

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from service.api.problems import HEADERS_TOO_LARGE, PROBLEM_CONTENT_TYPE, REQUEST_TIMEOUT, ProblemKind
from service.observability import LOGGER_NAME
from service.settings import Settings, load_settings

logger = logging.getLogger(LOGGER_NAME + ".http")


def _raw_problem(kind: ProblemKind, detail: str) -> bytes:
    body = orjson.dumps({"type": kind.type_uri, "title": kind.title, "status": kind.status, "detail": detail})
    head = (
        f"HTTP/1.1 {kind.status} {kind.title}\r\n"
        f"content-type: {PROBLEM_CONTENT_TYPE}\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class _Refused(Exception):
    """Raised from a parser callback to stop parsing a request that was answered and closed."""


class DeadlineHttpProtocol(HttpToolsProtocol):
    settings: ClassVar[Settings | None] = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        settings = type(self).settings
        if settings is None:
            settings = type(self).settings = load_settings()
        self._max_header_bytes = settings.max_header_bytes
        self._header_seconds = settings.header_read_timeout_seconds
        self._body_seconds = settings.body_read_timeout_seconds
        self._deadline: asyncio.TimerHandle | None = None
        self._in_headers = False
        self._header_bytes = 0
        self._refused = False

    # Deadlines -----------------------------------------------------------------------------------

    def _arm(self, seconds: float, phase: str) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expired, phase)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self, phase: str) -> None:
        self._deadline = None
        if self.transport is None or self.transport.is_closing():
            return
        seconds = self._header_seconds if phase == "headers" else self._body_seconds
        logger.info("closing a connection whose %s did not arrive within %g s", phase, seconds)
        # A response half sent (the previous request's, when pipelining): then only close.
        cycle = self.cycle
        if cycle is None or cycle.response_complete or not cycle.response_started:
            self.transport.write(
                _raw_problem(
                    REQUEST_TIMEOUT,
                    f"The request's {phase} did not arrive within {seconds:g} s; send the whole request "
                    "promptly.",
                )
            )
        self._refuse()

    def _refuse(self) -> None:
        self._refused = True
        self._disarm()
        self.transport.close()

    # Connection and parser callbacks -------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self._header_seconds, "headers")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        super().data_received(data)
        if self._in_headers and not self._refused:
            self._header_bytes += len(data)
            if self._header_bytes > self._max_header_bytes:
                self._too_large()

    def send_400_response(self, msg: str) -> None:
        if self._refused:  # our own callback stopped the parser; the answer is sent
            return
        super().send_400_response(msg)

    def _too_large(self) -> None:
        self.transport.write(
            _raw_problem(
                HEADERS_TOO_LARGE,
                f"The request line and headers exceed {self._max_header_bytes} bytes; send fewer or "
                "shorter headers.",
            )
        )
        self._refuse()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_headers = True
        self._header_bytes = 0
        if self._deadline is None:  # the connection's first request is already timed
            self._arm(self._header_seconds, "headers")

    def on_headers_complete(self) -> None:
        self._in_headers = False
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if size > self._max_header_bytes:
            self._too_large()
            raise _Refused
        self._arm(self._body_seconds, "body")
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()
