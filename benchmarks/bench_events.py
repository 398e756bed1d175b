"""Run-event ingest (issue 21) beside measurement ingest, through the real server, in the same run.

    .venv/bin/python -m benchmarks.bench_events                       # SQLite
    .venv/bin/python -m benchmarks.bench_events --backend postgresql  # PostgreSQL at 127.0.0.1:5432
    .venv/bin/python -m benchmarks.bench_events --requests 20 --batch 1000

On a fresh migrated database (bench_store's ``fresh_database``) with the real server (`teff db upgrade`,
`teff serve`) and a key made by `teff keys create`, one client, in alternating rounds so drift on a
shared machine hits both:

1. Bulk: POST /v1/runs/{id}/events with ``--batch`` events per request (data stalls, checkpoint saves,
   new ids every request) into one run, ``--requests`` requests, beside POST /v1/runs/{id}/measurements
   with ``--batch`` measurements per request into another run. Prints events/s, measurements/s and
   their ratio, and the events/s of the first and the last requests; then the job_ended POST, which
   recomputes the job's stored goodput from all its events (the fleet statistics read it; only a
   POST that ends an attempt, or reaches an ended one, pays that).
2. Single: one event per request vs one measurement per request, ``--single`` each, p50 and p99.

The run store's targets (benchmarks/README.md, bench_store) are for measurements; an event is a
handful per checkpoint, so the target here is "event ingest not slower per item than measurement
ingest by more than 2×" (ratio ≥ 0.5) while the job holds up to ``--requests`` × ``--batch`` events.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from benchmarks import server as server_module
from benchmarks.bench_store import create_key, fresh_database

T0 = datetime(2026, 12, 1, tzinfo=UTC)
RUN = {
    "model": {"preset": "llama3-8b"},
    "hardware": {"accelerator": "h100-sxm", "count": 64},
    "precision": "bf16",
    "seq_len_tokens": 8192,
    "global_batch_tokens": 4_194_304,
    "parallelism": {"tp": 2, "pp": 1},
}


def _time(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


def event_batch(first: int, size: int) -> list[dict[str, Any]]:
    """``size`` events from index ``first``: a 0.5 s data stall each second, a save every 100th."""
    items: list[dict[str, Any]] = []
    for i in range(first, first + size):
        if i % 100 == 99:
            items.append(
                {"event_id": f"save-{i}", "kind": "checkpoint_save_end", "time": _time(i), "step": i}
            )
        else:
            items.append(
                {"event_id": f"stall-{i}", "kind": "data_stall", "time": _time(i), "duration_seconds": 0.5}
            )
    return items


def measurement_batch(first: int, size: int) -> list[dict[str, Any]]:
    return [
        {"step": i, "time": _time(i), "throughput": {"tokens_per_second": 2.0e5 + i % 7}}
        for i in range(first, first + size)
    ]


def _post(client: httpx.Client, path: str, body: Any) -> float:
    started = time.perf_counter()
    response = client.post(
        path, content=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    elapsed = time.perf_counter() - started
    assert response.status_code == 200, response.text
    return elapsed


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--requests", type=int, default=20, help="bulk requests of each kind")
    parser.add_argument("--batch", type=int, default=1000, help="items per bulk request")
    parser.add_argument("--single", type=int, default=300, help="single-item requests of each kind")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    with fresh_database(args.backend) as url:
        key = create_key(url, "bench")
        server = server_module.start(url)
        try:
            with httpx.Client(base_url=server.base_url, headers={"X-API-Key": key}, timeout=120) as client:
                runs = [client.post("/v1/runs", json=RUN).json()["id"] for _ in range(4)]
                events_run, measurements_run, single_events_run, single_measurements_run = runs
                _post(
                    client,
                    f"/v1/runs/{events_run}/events",
                    {"event_id": "start", "kind": "job_started", "time": _time(0)},
                )
                event_seconds: list[float] = []
                measurement_seconds: list[float] = []
                for r in range(args.requests):
                    first = 1 + r * args.batch
                    event_seconds.append(
                        _post(client, f"/v1/runs/{events_run}/events", event_batch(first, args.batch))
                    )
                    measurement_seconds.append(
                        _post(
                            client,
                            f"/v1/runs/{measurements_run}/measurements",
                            measurement_batch(first, args.batch),
                        )
                    )
                single_event: list[float] = []
                single_measurement: list[float] = []
                for i in range(1, args.single + 1):
                    single_event.append(
                        _post(client, f"/v1/runs/{single_events_run}/events", event_batch(i, 1)[0])
                    )
                    single_measurement.append(
                        _post(
                            client,
                            f"/v1/runs/{single_measurements_run}/measurements",
                            measurement_batch(i, 1)[0],
                        )
                    )
                end = {"event_id": "end", "kind": "job_ended", "time": _time(1 + args.requests * args.batch)}
                close_seconds = _post(client, f"/v1/runs/{events_run}/events", end)
                goodput = client.get(f"/v1/runs/{events_run}/goodput").json()
        finally:
            server.stop()

    batch = args.batch
    events_rate = batch * len(event_seconds) / sum(event_seconds)
    measurements_rate = batch * len(measurement_seconds) / sum(measurement_seconds)
    ratio = events_rate / measurements_rate
    figures = {
        "machine": server_module.machine_description(),
        "backend": args.backend,
        "batch": batch,
        "requests": args.requests,
        "events_per_second": events_rate,
        "measurements_per_second": measurements_rate,
        "events_vs_measurements": ratio,
        "events_per_second_first_request": batch / event_seconds[0],
        "events_per_second_last_request": batch / event_seconds[-1],
        "job_events_at_end": goodput["event_count"],
        "job_ended_post_ms": close_seconds * 1000,
        "single_event_p50_ms": statistics.median(single_event) * 1000,
        "single_event_p99_ms": _percentile(single_event, 0.99) * 1000,
        "single_measurement_p50_ms": statistics.median(single_measurement) * 1000,
        "single_measurement_p99_ms": _percentile(single_measurement, 0.99) * 1000,
    }
    print(f"machine: {figures['machine']}  backend: {args.backend}")
    print(
        f"bulk, {batch:,} per request × {args.requests}: events {events_rate:,.0f}/s, "
        f"measurements {measurements_rate:,.0f}/s -> events = {ratio:.2f}× measurements"
    )
    print(
        f"  events/s of the first request {figures['events_per_second_first_request']:,.0f}, of the last "
        f"{figures['events_per_second_last_request']:,.0f} (job holds {goodput['event_count']:,} events)"
    )
    print(
        f"  the job_ended POST (recomputes the job's stored goodput over its {goodput['event_count']:,} "
        f"events): {close_seconds * 1000:.0f} ms"
    )
    print(
        f"single item, {args.single} each: event p50 {figures['single_event_p50_ms']:.2f} ms p99 "
        f"{figures['single_event_p99_ms']:.2f} ms; measurement p50 {figures['single_measurement_p50_ms']:.2f} ms "
        f"p99 {figures['single_measurement_p99_ms']:.2f} ms"
    )
    print(f"target events ≥ 0.5× measurements per item: {'PASS' if ratio >= 0.5 else 'BELOW TARGET'}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
