"""/v1/mfu against a trivial endpoint of the same app, through the real server (issue 3).

    .venv/bin/python -m benchmarks.bench_mfu [--connections 16] [--seconds 8]

Prints req/s and p50/p99 latency of POST /v1/mfu beside GET /healthz and POST /bench/noop measured in
the same run (the ratio is what counts on a shared, noisy machine), and the latency of a 1,000-item
POST /v1/mfu/batch. Targets: /v1/mfu at least 0.8× the trivial endpoint's req/s, p99 < 10 ms at 16
connections; the 1,000-item batch under 50 ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks import server as server_module
from benchmarks.loadgen import LoadResult, run_load

MFU_REQUEST = {
    "model": {"preset": "llama3-70b"},
    "seq_len_tokens": 8192,
    "hardware": {"accelerator": "NVIDIA H100 80GB HBM3", "count": 512},
    "precision": "bf16",
    "throughput": {"step_time_seconds": 8.0, "global_batch_sequences": 512},
}


def row(result: LoadResult, baseline: LoadResult | None = None) -> str:
    ratio = f"{result.requests_per_second / baseline.requests_per_second:5.2f}x" if baseline else "   -  "
    return (
        f"{result.name:<34} {result.connections:>5} {result.requests_per_second:>9.0f} {ratio:>8} "
        f"{result.p50_ms:>8.2f} {result.p99_ms:>8.2f} {result.errors:>6}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as directory:
        url = f"sqlite:///{directory}/bench.db"
        server_module.migrate(url)
        server = server_module.start(url)
        try:
            body = json.dumps(MFU_REQUEST).encode()
            assert (
                httpx.post(
                    server.base_url + "/v1/mfu", content=body, headers={"Content-Type": "application/json"}
                ).status_code
                == 200
            )
            load = dict(connections=args.connections, max_seconds=args.seconds, max_requests=200_000)
            # Interleave baseline and target twice so drift on a shared machine hits both.
            results: dict[str, list[LoadResult]] = {"healthz": [], "noop": [], "mfu": []}
            for _ in range(2):
                results["healthz"].append(
                    run_load("GET /healthz (trivial)", server.base_url, ("GET", "/healthz", None), **load)
                )
                results["noop"].append(
                    run_load(
                        "POST /bench/noop (trivial POST)",
                        server.base_url,
                        ("POST", "/bench/noop", body),
                        **load,
                    )
                )
                results["mfu"].append(
                    run_load("POST /v1/mfu", server.base_url, ("POST", "/v1/mfu", body), **load)
                )
            best = {key: max(values, key=lambda r: r.requests_per_second) for key, values in results.items()}

            batch_body = json.dumps({"items": [MFU_REQUEST] * 1000}).encode()
            timings = []
            with httpx.Client(base_url=server.base_url, timeout=30) as client:
                for _ in range(3):  # warm-up
                    client.post(
                        "/v1/mfu/batch", content=batch_body, headers={"Content-Type": "application/json"}
                    )
                for _ in range(20):
                    started = time.perf_counter()
                    response = client.post(
                        "/v1/mfu/batch", content=batch_body, headers={"Content-Type": "application/json"}
                    )
                    timings.append((time.perf_counter() - started) * 1000)
                    assert response.status_code == 200 and response.json()["succeeded"] == 1000
        finally:
            server.stop()

    print(f"machine: {server_module.machine_description()}")
    print(
        f"{'endpoint':<34} {'conns':>5} {'req/s':>9} {'vs base':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>6}"
    )
    print(row(best["healthz"]))
    print(row(best["noop"], best["healthz"]))
    print(row(best["mfu"], best["healthz"]))
    batch_p50 = statistics.median(timings)
    print(f"POST /v1/mfu/batch, 1,000 items: median {batch_p50:.1f} ms, max {max(timings):.1f} ms (20 calls)")
    ratio = best["mfu"].requests_per_second / best["healthz"].requests_per_second
    verdict = "PASS" if ratio >= 0.8 and best["mfu"].p99_ms < 10 and batch_p50 < 50 else "BELOW TARGET"
    print(
        f"/v1/mfu = {ratio:.2f}x trivial req/s, p99 {best['mfu'].p99_ms:.2f} ms; batch {batch_p50:.1f} ms -> {verdict}"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "machine": server_module.machine_description(),
                    "results": {key: vars(value) for key, value in best.items()},
                    "batch_1000_median_ms": batch_p50,
                    "mfu_vs_trivial_ratio": ratio,
                },
                indent=2,
                default=str,
            )
        )


if __name__ == "__main__":
    main()
