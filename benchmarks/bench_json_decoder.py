"""What the strict JSON decoder (service.api.json_body.loads: duplicate keys, NaN/Infinity refused,
integral numbers as integers) costs on the bulk measurement path, against decoders measured in the
same run: the standard library's plain json.loads and orjson.loads (the fastest, which refuses NaN
but keeps the last of duplicate keys silently).

    .venv/bin/python -m benchmarks.bench_json_decoder [--items 10000] [--repeats 15]

Prints microseconds per measurement (median of the repeats) for each decoder, the strict decoder's
ratio to plain json.loads, and parse_measurements (what a bulk POST pays before the store: the direct
path, pydantic straight from the bytes) against the strict path it falls back to (the strict decoder,
then the same validation), both with the collector paused as the server runs them. The ingest target is >= 100,000 measurements/s on SQLite
(issue 15): 10 us per measurement for the whole request.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from service.api import json_body
from service.api.measurement_request import _adapters, parse_measurements
from service.usecases.ingest import gc_paused

T0 = datetime(2026, 12, 4, tzinfo=UTC)


def _body(items: int) -> bytes:
    measurements = [
        {
            "step": step,
            "time": (T0 + timedelta(seconds=step)).isoformat(),
            "throughput": {"tokens_per_second": 1.0e6 + step * 0.5},
            "loss": 2.5 - step * 1e-5,
        }
        for step in range(1, items + 1)
    ]
    return json.dumps(measurements).encode()


def _median_us_per_item(decode: Callable[[bytes], Any], body: bytes, items: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        decode(body)
        times.append(time.perf_counter() - start)
    return statistics.median(times) / items * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    body = _body(args.items)
    # Interleaved rounds so that a noisy neighbour slows every decoder alike.
    many, _ = _adapters(args.items)
    decoders: dict[str, Callable[[bytes], Any]] = {
        "orjson": orjson.loads,
        "json": json.loads,
        "strict": json_body.loads,
        "strict path": lambda raw: gc_paused(lambda: many.validate_python(json_body.loads(raw))),
        "parse_measurements": lambda raw: gc_paused(parse_measurements, raw, max_items=args.items),
    }
    results: dict[str, list[float]] = {name: [] for name in decoders}
    for _ in range(3):
        for name, decode in decoders.items():
            results[name].append(_median_us_per_item(decode, body, args.items, args.repeats))
    us = {name: statistics.median(values) for name, values in results.items()}
    print(f"{args.items:,} measurements, {len(body) / 1e6:.2f} MB; microseconds per measurement (median):")
    for name, value in us.items():
        print(f"  {name:<20} {value:7.2f} us")
    print(f"strict / json.loads:   {us['strict'] / us['json']:.2f}x")
    print(f"strict / orjson.loads: {us['strict'] / us['orjson']:.2f}x")
    print(f"parse_measurements / strict path: {us['parse_measurements'] / us['strict path']:.2f}x")
    print(
        f"parse_measurements alone caps a bulk POST at {1e6 / us['parse_measurements']:,.0f} measurements/s"
    )


if __name__ == "__main__":
    main()
