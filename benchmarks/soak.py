"""Soak: a bounded run at moderate load, watching errors and resident memory.

    .venv/bin/python -m benchmarks.soak [--minutes 10] [--connections 8] [--rate 400]

Starts the real server on a fresh SQLite database, creates an API key, then for the given minutes
sends a mix of stateless estimates and store traffic (run creation, measurement ingest, lists,
efficiency) at a bounded request rate, sampling the server's resident memory every 10 s. Prints the
error count and the RSS slope (least squares, MiB per minute) after a 1-minute warm-up. Bounded in
time and requests; loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks import server as server_module
from benchmarks.bench_mfu import MFU_REQUEST

RUN_REQUEST = {
    "model": {"preset": "llama3-8b"},
    "hardware": {"accelerator": "h100-sxm", "count": 64},
    "precision": "bf16",
    "seq_len_tokens": 8192,
    "global_batch_tokens": 4_194_304,
    "cluster": "soak",
    "tags": ["soak"],
}


def slope_per_minute(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) in value per minute."""
    if len(samples) < 2:
        return 0.0
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_v = sum(v for _, v in samples) / n
    numerator = sum((t - mean_t) * (v - mean_v) for t, v in samples)
    denominator = sum((t - mean_t) ** 2 for t, _ in samples)
    return numerator / denominator * 60 if denominator else 0.0


async def _traffic(
    base_url: str, key: str, deadline: float, rate: float, connections: int, counts: dict[str, int]
) -> None:
    headers = {"X-API-Key": key}
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=30, headers=headers) as client:
        created = await client.post("/v1/runs", json=RUN_REQUEST)
        run_id = created.json()["id"] if created.status_code == 201 else None
        step = 0
        interval = connections / rate

        async def one(worker: int) -> None:
            nonlocal step
            index = worker
            while time.monotonic() < deadline:
                started = time.monotonic()
                kind = index % 6
                index += 1
                try:
                    if kind == 0:
                        response = await client.post("/v1/mfu", json=MFU_REQUEST)
                    elif kind == 1:
                        response = await client.post(
                            "/v1/flops", json={"model": {"preset": "llama3-70b"}, "seq_len_tokens": 8192}
                        )
                    elif kind == 2 and run_id:
                        step += 1
                        response = await client.post(
                            f"/v1/runs/{run_id}/measurements",
                            json={
                                "step": step,
                                "throughput": {"tokens_per_second_per_device": 5000 + step % 500},
                            },
                        )
                    elif kind == 3 and run_id:
                        response = await client.get(f"/v1/runs/{run_id}/efficiency")
                    elif kind == 4:
                        response = await client.get("/v1/runs", params={"limit": 20})
                    else:
                        response = await client.get("/v1/hardware/h100-sxm")
                    bucket = "ok" if response.status_code < 400 else f"http_{response.status_code}"
                except httpx.HTTPError as exc:
                    bucket = f"transport_{type(exc).__name__}"
                counts[bucket] = counts.get(bucket, 0) + 1
                await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))

        await asyncio.gather(*(one(worker) for worker in range(connections)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument(
        "--rate", type=float, default=400.0, help="requests per second, all connections together"
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--tracemalloc",
        action="store_true",
        help="trace the server's Python heap too (benchmarks/memhook): its slope beside the RSS slope, "
        "and the source lines that grew most",
    )
    parser.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable for the server (repeatable), e.g. TEFF_DB_POOL_SIZE=2",
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as directory:
        url = f"sqlite:///{directory}/soak.db"
        server_module.migrate(url)
        env = server_module.server_env(url, 8000)
        key = subprocess.run(
            [sys.executable, "-m", "service", "keys", "create", "--tenant", "soak", "--scopes", "read,write"],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        extra: dict[str, str] = dict(item.split("=", 1) for item in args.server_env)
        trace_path = Path(directory) / "tracemalloc.jsonl"
        if args.tracemalloc:
            hook = str(Path(__file__).resolve().parent / "memhook")
            extra["PYTHONPATH"] = os.pathsep.join(filter(None, [hook, os.environ.get("PYTHONPATH", "")]))
            extra["TEFF_BENCH_TRACEMALLOC_OUT"] = str(trace_path)
        server = server_module.start(url, **extra)
        counts: dict[str, int] = {}
        samples: list[tuple[float, float]] = []
        started = time.monotonic()
        deadline = started + args.minutes * 60

        async def sample() -> None:
            while time.monotonic() < deadline:
                samples.append((time.monotonic() - started, server.resident_memory_bytes() / 2**20))
                await asyncio.sleep(10)

        async def both() -> None:
            await asyncio.gather(
                _traffic(server.base_url, key, deadline, args.rate, args.connections, counts), sample()
            )

        try:
            asyncio.run(both())
        finally:
            server.stop()
        traced = _read_traces(trace_path) if args.tracemalloc else []

    steady = [(t, v) for t, v in samples if t >= 60] or samples
    total = sum(counts.values())
    errors = total - counts.get("ok", 0)
    slope = slope_per_minute(steady)
    print(f"machine: {server_module.machine_description()}")
    print(
        f"soak: {args.minutes:g} min, {total} requests ({total / (args.minutes * 60):.0f}/s), errors {errors}: {counts}"
    )
    print(
        f"resident memory: start {samples[0][1]:.1f} MiB, end {samples[-1][1]:.1f} MiB, "
        f"slope after warm-up {slope:+.3f} MiB/min over {len(steady)} samples"
    )
    heap_slope = None
    if traced:
        heap = [(r["seconds"], r["traced_bytes"] / 2**20) for r in traced]
        heap_slope = slope_per_minute([(t, v) for t, v in heap if t >= 60] or heap)
        print(
            f"Python heap (tracemalloc): start {heap[0][1]:.1f} MiB, end {heap[-1][1]:.1f} MiB, "
            f"slope after warm-up {heap_slope:+.3f} MiB/min"
        )
        last_growth = next((r["top_growth"] for r in reversed(traced) if "top_growth" in r), [])
        for stat in last_growth[:8]:
            print(f"  {stat['size_diff'] / 1024:+9.1f} KiB {stat['count_diff']:+7d} blocks  {stat['where']}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "counts": counts,
                    "errors": errors,
                    "rss_samples_mib": samples,
                    "rss_slope_mib_per_minute": slope,
                    "python_heap": traced,
                    "python_heap_slope_mib_per_minute": heap_slope,
                },
                indent=2,
            )
        )


def _read_traces(path: Path) -> list[dict[str, Any]]:
    """The probe's lines (one file per server process; the busiest one is the worker that served)."""
    files = sorted(path.parent.glob(path.name + ".*"), key=lambda p: p.stat().st_size, reverse=True)
    if not files:
        return []
    return [json.loads(line) for line in files[0].read_text().splitlines() if line.strip()]


if __name__ == "__main__":
    main()
