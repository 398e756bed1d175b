"""Slow and idle clients are cut off (issue 17, defect 6): before, idle, header-trickling and body-
trickling connections stayed open indefinitely (held 150 s).

A real server process with short deadlines (1 s to read headers, 1.5 s to read a body, 1 s idle
keep-alive) and raw sockets: each kind of connection must be closed within its deadline plus a
margin, with a 408 problem+json where nothing was answered yet.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import LiveServer, server_env, start_server, stop_server, teff

pytestmark = pytest.mark.slow

HEADER_SECONDS = 1.0
BODY_SECONDS = 1.5
KEEP_ALIVE_SECONDS = 1.0
#: Scheduling slack on a loaded 2-core machine.
MARGIN_SECONDS = 1.5


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    directory: Path = tmp_path_factory.mktemp("slow")
    url = f"sqlite:///{directory / 'teff.db'}"
    migrated = teff("db", "upgrade", env=server_env(url, 8000))
    assert migrated.returncode == 0, migrated.stderr
    live = start_server(
        url,
        directory / "server.log",
        TEFF_HEADER_READ_TIMEOUT_SECONDS=str(HEADER_SECONDS),
        TEFF_BODY_READ_TIMEOUT_SECONDS=str(BODY_SECONDS),
        TEFF_KEEP_ALIVE_TIMEOUT_SECONDS=str(KEEP_ALIVE_SECONDS),
    )
    yield live
    stop_server(live)


def _connect(server: LiveServer) -> socket.socket:
    host, port = server.base_url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def _trickle_until_closed(sock: socket.socket, pieces: list[bytes], interval: float) -> tuple[bytes, float]:
    """Send ``pieces`` one every ``interval`` s (cycling) until the server closes; what it answered and
    when it closed, in seconds from the first piece."""
    sock.settimeout(interval)
    started = time.monotonic()
    received = b""
    index = 0
    while time.monotonic() - started < 30:
        try:
            sock.sendall(pieces[index % len(pieces)])
        except OSError:
            break
        index += 1
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            break
        if not chunk:
            break
        received += chunk
    return received, time.monotonic() - started


def _wait_closed(sock: socket.socket) -> tuple[bytes, float]:
    started = time.monotonic()
    received = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return received, time.monotonic() - started
        received += chunk


def _read_response(sock: socket.socket) -> bytes:
    """One whole response (its headers and its Content-Length of body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, data
        body += chunk
    return head + b"\r\n\r\n" + body


def test_a_connection_that_sends_nothing_is_closed(server: LiveServer) -> None:
    with _connect(server) as sock:
        received, elapsed = _wait_closed(sock)
    print(f"\nidle before a request: closed after {elapsed:.2f} s")
    assert HEADER_SECONDS * 0.9 < elapsed < HEADER_SECONDS + MARGIN_SECONDS
    assert received.startswith(b"HTTP/1.1 408 "), received
    assert b"/problems/request-timeout" in received


def test_trickled_headers_are_cut_off(server: LiveServer) -> None:
    with _connect(server) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        received, elapsed = _trickle_until_closed(sock, [b"X-Slow: 1\r\n"], 0.1)
    print(f"\nheader trickle: closed after {elapsed:.2f} s")
    assert elapsed < HEADER_SECONDS + MARGIN_SECONDS
    assert received.startswith(b"HTTP/1.1 408 "), received


def test_a_trickled_body_is_cut_off(server: LiveServer) -> None:
    with _connect(server) as sock:
        sock.sendall(
            b"POST /v1/flops HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100000\r\n\r\n{"
        )
        received, elapsed = _trickle_until_closed(sock, [b" "], 0.1)
    print(f"\nbody trickle: closed after {elapsed:.2f} s")
    assert BODY_SECONDS * 0.9 < elapsed < BODY_SECONDS + MARGIN_SECONDS
    assert received.startswith(b"HTTP/1.1 408 "), received


def test_an_idle_keep_alive_connection_is_closed_and_prompt_requests_are_served(server: LiveServer) -> None:
    with _connect(server) as sock:
        for _ in range(3):  # one connection, several prompt requests, each answered
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = _read_response(sock)
            assert answer.startswith(b"HTTP/1.1 200 "), answer
            time.sleep(KEEP_ALIVE_SECONDS / 3)
        received, elapsed = _wait_closed(sock)
    print(f"\nidle keep-alive: closed after {elapsed:.2f} s")
    assert received == b""  # a clean close, nothing to answer
    assert elapsed < KEEP_ALIVE_SECONDS + MARGIN_SECONDS


def test_a_slow_but_steady_request_within_the_deadlines_is_served(server: LiveServer) -> None:
    body = b'{"model": {"preset": "llama3-8b"}, "seq_len_tokens": 8192}'
    with _connect(server) as sock:
        sock.sendall(b"POST /v1/flops HTTP/1.1\r\nHost: x\r\n")
        time.sleep(HEADER_SECONDS / 3)
        sock.sendall(b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
        sock.sendall(body[:10])
        time.sleep(BODY_SECONDS / 3)
        sock.sendall(body[10:])
        answer = _read_response(sock)
    assert answer.startswith(b"HTTP/1.1 200 "), answer
