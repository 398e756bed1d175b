"""A bounded HTTP/1.1 load generator for loopback benchmarks (asyncio, keep-alive, no dependencies).

Every run is bounded by a request count AND a duration, targets only loopback addresses, and stops by
itself. Requests are pre-encoded so the client spends as little CPU as possible per request (client
and server share the machine's cores: compare endpoints measured in the same run, not absolute
numbers across machines).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class LoadResult:
    name: str
    connections: int
    requests: int
    errors: int
    seconds: float
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    status_counts: dict[int, int]


def _ensure_loopback(host: str) -> None:
    address = ipaddress.ip_address(socket.gethostbyname(host))
    if not address.is_loopback:
        raise SystemExit(f"refusing to load {host}: benchmarks only target loopback addresses")


def encode_request(
    method: str, path: str, host: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", "Connection: keep-alive"]
    for key, value in (headers or {}).items():
        lines.append(f"{key}: {value}")
    if body is not None:
        lines.append("Content-Type: application/json")
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    chunked = False
    for line in head.split(b"\r\n")[1:]:
        lower = line.lower()
        if lower.startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
        elif lower.startswith(b"transfer-encoding:") and b"chunked" in lower:
            chunked = True
    if chunked:
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.strip(), 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    elif length:
        await reader.readexactly(length)
    return status


async def _worker(
    host: str,
    port: int,
    worker: int,
    next_payload: Callable[[int], bytes],
    deadline: float,
    budget: list[int],
    latencies: list[float],
    statuses: dict[int, int],
    errors: list[int],
    error_status: int,
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while budget[0] > 0 and time.perf_counter() < deadline:
            budget[0] -= 1
            payload = next_payload(worker)
            started = time.perf_counter()
            writer.write(payload)
            try:
                status = await _read_response(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                errors[0] += 1
                writer.close()
                reader, writer = await asyncio.open_connection(host, port)
                continue
            latencies.append(time.perf_counter() - started)
            statuses[status] = statuses.get(status, 0) + 1
            if status >= error_status:
                errors[0] += 1
    finally:
        writer.close()


def _load(
    name: str,
    base_url: str,
    payload_for: Callable[[str], Callable[[int], bytes]],
    *,
    connections: int,
    max_requests: int,
    max_seconds: float,
    warmup_requests: int,
    error_status: int,
) -> LoadResult:
    """Run the workers (a warm-up round first) and summarise. ``payload_for(host_port)`` gives the
    function that makes connection ``w``'s next encoded request."""
    host_port = base_url.split("://", 1)[1].rstrip("/")
    host, port_text = host_port.rsplit(":", 1)
    _ensure_loopback(host)
    port = int(port_text)
    next_payload = payload_for(host_port)

    async def run(conns: int, count: int) -> tuple[list[float], dict[int, int], int, float]:
        latencies: list[float] = []
        statuses: dict[int, int] = {}
        errors = [0]
        budget = [count]
        started = time.perf_counter()
        deadline = started + max_seconds
        await asyncio.gather(
            *(
                _worker(
                    host, port, w, next_payload, deadline, budget, latencies, statuses, errors, error_status
                )
                for w in range(conns)
            )
        )
        return latencies, statuses, errors[0], time.perf_counter() - started

    if warmup_requests:
        asyncio.run(run(min(connections, 4), warmup_requests))
    latencies, statuses, errors, seconds = asyncio.run(run(connections, max_requests))
    latencies.sort()
    count = len(latencies)
    p99_index = min(count - 1, int(count * 0.99)) if count else 0
    return LoadResult(
        name=name,
        connections=connections,
        requests=count,
        errors=errors,
        seconds=seconds,
        requests_per_second=count / seconds if seconds else 0.0,
        p50_ms=statistics.median(latencies) * 1000 if latencies else float("nan"),
        p99_ms=latencies[p99_index] * 1000 if latencies else float("nan"),
        status_counts=statuses,
    )


def run_load(
    name: str,
    base_url: str,
    requests: list[tuple[str, str, bytes | None]] | tuple[str, str, bytes | None],
    *,
    connections: int = 16,
    max_requests: int = 20_000,
    max_seconds: float = 10.0,
    warmup_requests: int = 200,
    headers: dict[str, str] | None = None,
) -> LoadResult:
    """Send ``requests`` (one (method, path, body) or a list cycled through, from the start on every
    connection) until the request budget or the time limit runs out; errors count 5xx and transport
    failures."""
    request_list = [requests] if isinstance(requests, tuple) else requests

    def payload_for(host_port: str) -> Callable[[int], bytes]:
        payloads = [
            encode_request(method, path, host_port, body, headers) for method, path, body in request_list
        ]
        sent: dict[int, int] = {}

        def next_payload(worker: int) -> bytes:
            index = sent.get(worker, 0)
            sent[worker] = index + 1
            return payloads[index % len(payloads)]

        return next_payload

    return _load(
        name, base_url, payload_for, connections=connections, max_requests=max_requests,
        max_seconds=max_seconds, warmup_requests=warmup_requests, error_status=500,
    )  # fmt: skip


def run_stream_load(
    name: str,
    base_url: str,
    request_for: Callable[[int], tuple[str, str, bytes | None]],
    *,
    connections: int = 16,
    max_requests: int = 20_000,
    max_seconds: float = 10.0,
    warmup_requests: int = 100,
    headers: dict[str, str] | None = None,
) -> LoadResult:
    """Like :func:`run_load`, but connection ``w`` sends ``request_for(w)`` each time (a new request
    every call: ingest never repeats a step). Errors count every status ≥ 400 and transport failures."""

    def payload_for(host_port: str) -> Callable[[int], bytes]:
        def next_payload(worker: int) -> bytes:
            method, path, body = request_for(worker)
            return encode_request(method, path, host_port, body, headers)

        return next_payload

    return _load(
        name, base_url, payload_for, connections=connections, max_requests=max_requests,
        max_seconds=max_seconds, warmup_requests=warmup_requests, error_status=400,
    )  # fmt: skip
