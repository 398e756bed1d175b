"""The whole benchmark suite in one command, against the real server as deployed.

    .venv/bin/python -m benchmarks.run_all            # full: 1M runs per backend (≈ 40-60 min on 2 cores)
    .venv/bin/python -m benchmarks.run_all --quick    # smoke: 20k runs per backend, short loads (≈ 10 min)
    .venv/bin/python -m benchmarks.run_all --backend sqlite --workers 1

For each backend (SQLite, PostgreSQL) it runs ``bench_store`` (ingest targets, query latency at
``--store-runs`` runs, verification of the loaded summaries), then — on that loaded database — starts
the server (`teff serve`, as deployed) with 1 and with 2 uvicorn workers (``TEFF_WORKERS``) and, at 16
and at 64 connections, measures every endpoint below beside a trivial endpoint of the same app in the
same run (the trivial endpoints are measured before and after each connection level; the ratio uses
their mean):

* POST stateless estimates (bodies: every ``examples`` entry of the request schema in the app's own
  OpenAPI document, cycled) against POST /bench/noop;
* GET endpoints against GET /bench/noop;
* POST /v1/runs/{id}/measurements (one item, a new step each request) against POST /bench/noop
  (measured again as a baseline of its own).

It also measures, per configuration, the bulk ingest rate (10,000 measurements per request, 4
clients), the start-up time (process start to the first healthy /healthz) and the resident memory of
the server and its workers after the load; and the planner speed (``planner_speed.measure``, against
``predict_step`` in the same run). Prints ONE table and writes it with every figure to
``benchmarks/results/<YYYY-MM-DD>-<machine>.md`` and ``.json``.

Bounds: every load stops at a request count and a duration; loopback only (``loadgen``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import itertools
import re
import sys
from datetime import UTC, datetime
from typing import Any

import httpx
import orjson

from benchmarks import bench_store
from benchmarks import openapi_examples as examples
from benchmarks import server as server_module
from benchmarks.loadgen import LoadResult, run_load, run_stream_load

CONNECTIONS = (16, 64)
MFU_BATCH_ITEMS = 1000

#: (label, method, path template, kind): kind "post" is measured against POST /bench/noop, "get"
#: against GET /bench/noop, "ingest" against POST /bench/noop (measured again beside it).
ENDPOINTS: tuple[tuple[str, str, str, str], ...] = (
    ("POST /v1/mfu", "POST", "/v1/mfu", "post"),
    (f"POST /v1/mfu/batch ({MFU_BATCH_ITEMS:,} items)", "POST", "/v1/mfu/batch", "post"),
    ("POST /v1/flops", "POST", "/v1/flops", "post"),
    ("POST /v1/schedules/lr", "POST", "/v1/schedules/lr", "post"),
    ("POST /v1/advice/batch", "POST", "/v1/advice/batch", "post"),
    ("POST /v1/compute-optimal", "POST", "/v1/compute-optimal", "post"),
    ("POST /v1/memory", "POST", "/v1/memory", "post"),
    ("POST /v1/predictions/step", "POST", "/v1/predictions/step", "post"),
    ("POST /v1/plans/parallelism", "POST", "/v1/plans/parallelism", "post"),
    ("GET /v1/hardware", "GET", "/v1/hardware", "get"),
    ("GET /v1/runs", "GET", "/v1/runs", "get"),
    ("POST /v1/runs/{id}/measurements (1 item)", "POST", "/v1/runs/{run_id}/measurements", "ingest"),
    ("GET /v1/runs/{id}/efficiency", "GET", "/v1/runs/{run_id}/efficiency", "get"),
    ("GET /v1/stats/mfu", "GET", "/v1/stats/mfu", "get"),
)
BASELINES = {"post": "POST /bench/noop", "get": "GET /bench/noop", "ingest": "POST /bench/noop (for ingest)"}


@dataclasses.dataclass
class SuiteOptions:
    seconds: float = 5.0
    warmup_requests: int = 20
    workers: tuple[int, ...] = (1, 2)
    bulk_seconds: float = 10.0
    bulk_max_requests: int = 120


# --------------------------------------------------------------------------------------------------
# Request bodies from the OpenAPI examples


def stateless_requests() -> dict[str, list[tuple[str, str, bytes | None]]]:
    """For each POST estimate endpoint, every example of its request schema (encoded)."""
    requests: dict[str, list[tuple[str, str, bytes | None]]] = {}
    for label, method, path, kind in ENDPOINTS:
        if kind != "post":
            continue
        if path == "/v1/mfu/batch":
            pool = examples.body_examples("POST", "/v1/mfu")
            for batch in examples.body_examples("POST", "/v1/mfu/batch"):
                pool += batch["items"]
            items = list(itertools.islice(itertools.cycle(pool), MFU_BATCH_ITEMS))
            requests[label] = [(method, path, orjson.dumps({"items": items}))]
        else:
            requests[label] = [
                (method, path, orjson.dumps(body)) for body in examples.body_examples(method, path)
            ]
    return requests


def preflight(
    base_url: str, requests: dict[str, list[tuple[str, str, bytes | None]]], headers: dict[str, str]
) -> dict[str, list[str]]:
    """Send each request once; drop (and report) the ones the service does not answer 200."""
    rejected: dict[str, list[str]] = {}
    with httpx.Client(base_url=base_url, timeout=60) as client:
        for label, entries in requests.items():
            kept = []
            for method, path, body in entries:
                response = client.request(
                    method, path, content=body, headers={**headers, "Content-Type": "application/json"}
                )
                if response.status_code == 200:
                    kept.append((method, path, body))
                else:
                    rejected.setdefault(label, []).append(f"{response.status_code}: {response.text[:300]}")
            requests[label] = kept
    return rejected


# --------------------------------------------------------------------------------------------------
# One server configuration


def _load_dict(result: LoadResult) -> dict[str, Any]:
    return dataclasses.asdict(result)


def measure_configuration(
    ctx: bench_store.BackendContext, workers: int, options: SuiteOptions, store_options: bench_store.Options
) -> dict[str, Any]:
    """Start the server with ``workers`` and measure every endpoint at each connection count."""
    server = server_module.start(ctx.url, workers=workers)
    figures: dict[str, Any] = {"workers": workers, "startup_seconds": server.started_seconds}
    try:
        base = server.base_url
        acme = {"X-API-Key": ctx.keys["acme"]}
        ingest_headers = {"X-API-Key": ctx.keys["ingest"]}
        requests = stateless_requests()
        figures["rejected_examples"] = preflight(base, requests, {})
        noop_body = requests["POST /v1/mfu"][0][2] if requests.get("POST /v1/mfu") else b"{}"
        baseline_requests = {
            "post": ("POST", "/bench/noop", noop_body),
            "get": ("GET", "/bench/noop", None),
            "ingest": ("POST", "/bench/noop", noop_body),
        }
        ingest_request = bench_store.single_measurement_request(ctx.step_counter)
        efficiency: list[tuple[str, str, bytes | None]] = [
            ("GET", f"/v1/runs/{run_id}/efficiency", None) for run_id in ctx.sample_run_ids[:500]
        ]
        by_conns: dict[int, Any] = {}
        for conns in CONNECTIONS:
            load: dict[str, Any] = dict(
                connections=conns,
                max_seconds=options.seconds,
                max_requests=500_000,
                warmup_requests=options.warmup_requests,
            )

            def baselines(load: dict[str, Any] = load) -> dict[str, LoadResult]:
                return {
                    kind: run_load(BASELINES[kind], base, request, headers=acme, **load)
                    for kind, request in baseline_requests.items()
                }

            before = baselines()
            results: dict[str, LoadResult] = {}
            for label, method, path, kind in ENDPOINTS:
                if kind == "post":
                    if not requests.get(label):
                        continue
                    results[label] = run_load(label, base, requests[label], **load)
                elif kind == "ingest":
                    results[label] = run_stream_load(
                        label, base, ingest_request, headers=ingest_headers, **load
                    )
                elif path == "/v1/runs/{run_id}/efficiency":
                    results[label] = run_load(label, base, efficiency, headers=acme, **load)
                else:
                    results[label] = run_load(label, base, (method, path, None), headers=acme, **load)
            after = baselines()
            trivial = {
                kind: (before[kind].requests_per_second + after[kind].requests_per_second) / 2
                for kind in baseline_requests
            }
            by_conns[conns] = {
                "endpoints": {label: _load_dict(r) for label, r in results.items()},
                "baselines_before": {k: _load_dict(r) for k, r in before.items()},
                "baselines_after": {k: _load_dict(r) for k, r in after.items()},
                "trivial_requests_per_second": trivial,
                "ratios": {
                    label: r.requests_per_second / trivial[_kind(label)] if trivial[_kind(label)] else None
                    for label, r in results.items()
                },
            }
            print(f"  [{ctx.backend}, {workers} worker(s)] {conns} connections done", flush=True)
        figures["connections"] = by_conns
        bulk_options = dataclasses.replace(
            store_options, bulk_seconds=options.bulk_seconds, bulk_max_requests=options.bulk_max_requests
        )
        bulk, rate, stored = bench_store.bulk_benchmark(base, ctx.keys["ingest"], bulk_options)
        figures["bulk"] = {
            "load": _load_dict(bulk),
            "measurements_per_second": rate,
            "stored": stored,
            "clients": bulk_options.bulk_clients,
        }
        figures["rss_bytes_after_load"] = server.resident_memory_bytes()
    finally:
        server.stop()
    return figures


def _kind(label: str) -> str:
    for name, _method, _path, kind in ENDPOINTS:
        if name == label:
            return kind
    raise KeyError(label)


# --------------------------------------------------------------------------------------------------
# Planner speed (benchmarks/planner_speed.py), its printed detail kept


def planner_figures() -> dict[str, Any]:
    from benchmarks import planner_speed

    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        rate = planner_speed.measure(3)
    text = output.getvalue()
    baseline = re.search(r"predict_step ([\d,]+) calls/s; planner/baseline ratio ([\d.]+)", text)
    return {
        "candidates_per_second": rate,
        "target": planner_speed.TARGET_CANDIDATES_PER_SECOND,
        "predict_step_calls_per_second": float(baseline.group(1).replace(",", "")) if baseline else None,
        "ratio_to_predict_step": float(baseline.group(2)) if baseline else None,
        "detail": text.strip().splitlines(),
    }


# --------------------------------------------------------------------------------------------------
# The one table


def _cell(result: dict[str, Any]) -> str:
    return f"{result['requests_per_second']:,.0f} req/s · {result['p50_ms']:.1f}/{result['p99_ms']:.1f} ms"


def table_rows(report: dict[str, Any]) -> list[tuple[str, ...]]:
    """(config, measure, baseline, @16, ×@16, @64, ×@64, target/verdict) rows."""
    rows: list[tuple[str, ...]] = []
    for backend in report["backends"]:
        name = "SQLite" if backend["backend"] == "sqlite" else "PostgreSQL"
        for configuration in backend["configurations"]:
            config = f"{name} · {configuration['workers']}w"
            c16, c64 = (configuration["connections"][c] for c in CONNECTIONS)
            for kind in ("get", "post", "ingest"):
                rows.append(
                    (
                        config,
                        f"{BASELINES[kind]} (trivial)",
                        "",
                        f"{c16['trivial_requests_per_second'][kind]:,.0f} req/s (mean of 2)",
                        "1.00x",
                        f"{c64['trivial_requests_per_second'][kind]:,.0f} req/s (mean of 2)",
                        "1.00x",
                        "",
                    )
                )
            for label, *_ in ENDPOINTS:
                if label not in c16["endpoints"]:
                    rows.append((config, label, "", "example bodies rejected", "", "", "", ""))
                    continue
                a, b = c16["endpoints"][label], c64["endpoints"][label]
                bad = sum(n for s, n in a["status_counts"].items() if not 200 <= int(s) < 300) + sum(
                    n for s, n in b["status_counts"].items() if not 200 <= int(s) < 300
                )
                rows.append(
                    (
                        config,
                        label,
                        BASELINES[_kind(label)],
                        _cell(a),
                        f"{c16['ratios'][label]:.2f}x",
                        _cell(b),
                        f"{c64['ratios'][label]:.2f}x",
                        f"{bad} non-2xx" if bad else "",
                    )
                )
            bulk = configuration["bulk"]
            rows.append(
                (
                    config,
                    f"bulk ingest, 10,000/request, {bulk['clients']} clients",
                    "",
                    f"{bulk['measurements_per_second']:,.0f} measurements/s",
                    "",
                    "",
                    "",
                    "≥ 100,000/s (SQLite)",
                )
            )
            rows.append(
                (
                    config,
                    "start-up (process start → healthy /healthz) · RSS after load",
                    "",
                    f"{configuration['startup_seconds']:.2f} s · {configuration['rss_bytes_after_load'] / 2**20:,.0f} MiB",
                    "",
                    "",
                    "",
                    "",
                )
            )
        for check in backend["store"]["checks"]:
            rows.append(
                (
                    f"{name} · store",
                    check["name"].strip(),
                    check["baseline"],
                    check["value"],
                    check["ratio"],
                    "",
                    "",
                    " ".join(
                        v
                        for v in (check["target"], check["verdict"] if check["verdict"] != "info" else "")
                        if v
                    ),
                )
            )
    planner = report.get("planner")
    if planner:
        verdict = "PASS" if planner["candidates_per_second"] >= planner["target"] else "FAIL"
        rows.append(
            (
                "domain",
                "planner: layout candidates/s (cold, worst case)",
                f"predict_step {planner['predict_step_calls_per_second']:,.0f} calls/s",
                f"{planner['candidates_per_second']:,.0f} candidates/s",
                f"{planner['ratio_to_predict_step']:.2f}x",
                "",
                "",
                f"≥ {planner['target']:,} {verdict}",
            )
        )
    return rows


HEADER = ("config", "measure", "baseline", "@16 conns", "x@16", "@64 conns", "x@64", "target / note")


def format_table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(str(row[i])) for row in [HEADER, *rows]) for i in range(len(HEADER))]
    widths = [min(w, 64) for w in widths]
    lines = ["  ".join(h.ljust(w) for h, w in zip(HEADER, widths, strict=True)).rstrip()]
    lines.append("-" * (sum(widths) + 2 * (len(widths) - 1)))
    previous = None
    for row in rows:
        if previous is not None and row[0] != previous:
            lines.append("")
        previous = row[0]
        lines.append("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def markdown_table(rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for row in rows:
        lines.append("| " + " | ".join(str(v).replace("|", "\\|") for v in row) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="20k runs per backend, short loads")
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--workers", type=int, action="append", help="repeatable; default 1 and 2")
    parser.add_argument(
        "--store-runs", type=int, help="runs loaded per backend (default 1,000,000; quick 20,000)"
    )
    parser.add_argument(
        "--seconds", type=float, help="per endpoint and connection count (default 5; quick 1.5)"
    )
    parser.add_argument("--no-planner", action="store_true")
    parser.add_argument("--no-results", action="store_true", help="do not write benchmarks/results/")
    args = parser.parse_args(argv)

    store_overrides: dict[str, Any] = {}
    if args.store_runs is not None:
        store_overrides["runs"] = args.store_runs
    if args.quick:
        store_options = bench_store.Options.quick_mode(**store_overrides)
        options = SuiteOptions(seconds=1.5, warmup_requests=10, bulk_seconds=4.0, bulk_max_requests=40)
    else:
        store_options = bench_store.Options(**store_overrides)
        options = SuiteOptions()
    if args.seconds is not None:
        options.seconds = args.seconds
    if args.workers:
        options.workers = tuple(args.workers)
    started = datetime.now(UTC)
    machine = server_module.machine_description()
    print(f"machine: {machine}; load average {bench_store.conditions()['load_average']}", flush=True)

    report: dict[str, Any] = {
        "machine": machine,
        "code": bench_store.code_version(),
        "started": started.isoformat(timespec="seconds"),
        "command": "python -m benchmarks.run_all " + " ".join(argv if argv is not None else sys.argv[1:]),
        "suite_options": dataclasses.asdict(options),
        "conditions_before": bench_store.conditions(),
        "backends": [],
    }
    backends = ("sqlite", "postgresql") if args.backend == "both" else (args.backend,)
    for backend in backends:
        if backend == "postgresql" and not bench_store.postgres_available():
            print(f"PostgreSQL: skipped, no server at {bench_store.ADMIN_POSTGRES_URL}")
            report.setdefault("skipped", []).append("postgresql")
            continue

        def after(ctx: bench_store.BackendContext) -> list[dict[str, Any]]:
            return [measure_configuration(ctx, w, options, store_options) for w in options.workers]

        store_figures = bench_store.run_backend(backend, store_options, after=after)
        configurations = store_figures.pop("after")
        report["backends"].append(
            {"backend": backend, "store": store_figures, "configurations": configurations}
        )
    if not args.no_planner:
        print("planner speed", flush=True)
        report["planner"] = planner_figures()
    report["conditions_after"] = bench_store.conditions()
    report["finished"] = datetime.now(UTC).isoformat(timespec="seconds")

    rows = table_rows(report)
    print()
    print(format_table(rows))
    for backend in report["backends"]:
        for configuration in backend["configurations"]:
            for label, problems in configuration.get("rejected_examples", {}).items():
                print(
                    f"  {backend['backend']} {configuration['workers']}w: {label}: example rejected: {problems[0][:160]}"
                )
        for problem in (
            backend["store"]["verify_api"]["mismatches"][:10] + backend["store"]["verify_sql"]["problems"]
        ):
            print(f"  {backend['backend']}: verification mismatch: {problem}")

    if not args.no_results:
        stem = f"{started:%Y-%m-%d}-{bench_store.short_machine()}"
        if args.quick:
            stem += "-quick"
        conditions = (
            f"Load average before {report['conditions_before']['load_average']}, after "
            f"{report['conditions_after']['load_average']} (2-core machine shared with other work: compare "
            "ratios measured in the same run, not absolute figures)."
        )
        markdown = "\n".join(
            [
                f"# Benchmarks — {machine}",
                "",
                f"`{report['command']}` — code {report['code']}, {report['started']} to {report['finished']} (UTC).",
                "",
                conditions,
                "",
                "req/s · p50/p99 ms; `x@N` = the endpoint's req/s ÷ the trivial endpoint's (named in "
                "*baseline*) of the same app, at the same connection count, in the same run.",
                "",
                markdown_table(rows),
                "",
            ]
            + (
                ["## Planner detail", "", "```", *report["planner"]["detail"], "```", ""]
                if "planner" in report
                else []
            )
        )
        md, js = bench_store.write_results(stem, markdown, report)
        print(f"wrote {md} and {js}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
