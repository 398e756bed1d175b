"""``teff-client``: the service from a shell.

    teff-client mfu --model llama3.1-8b --seq-len 8192 --hardware "NVIDIA H100 80GB HBM3" --count 8 \\
        --tokens-per-second-per-device 5762 --embedding-policy exclude_input
    teff-client predict @request.json           # a StepPredictionRequest (JSON text or @file)
    teff-client plan @request.json              # a PlanRequest
    teff-client runs list [--status running] [--cluster C] [--limit 20]
    teff-client runs show RUN_ID
    teff-client runs compare RUN_ID RUN_ID [...]
    teff-client report --from-log train.log --run-id RUN_ID [--format megatron|torchtitan|nemo]
    teff-client report --from-log - --run @run.json      # create (or resume) the run, read stdin
    teff-client job begin --run @run.json        # a scheduler hook: this job's run id (Slurm ids)
    teff-client job end --run-id RUN_ID --exit-code 0

``--url`` / ``TEFF_URL`` (default http://127.0.0.1:8000) and ``--api-key`` / ``TEFF_API_KEY``.
``--json`` prints the service's answer as it came. Exit 0 on success, 1 on a service error (its
problem detail on stderr), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

from teff_client import Client, ProblemError, TeffError
from teff_client.logparse import PARSERS, parse_lines

REPORT_BATCH = 1000


def _body(text: str) -> Any:
    """JSON text, or @path to a JSON file, or @- for stdin."""
    if text.startswith("@"):
        source = sys.stdin.read() if text == "@-" else Path(text[1:]).read_text()
        return json.loads(source)
    return json.loads(text)


def _print(answer: Any, args: argparse.Namespace, summary: str) -> None:
    if args.json:
        print(json.dumps(answer, indent=2))
    else:
        print(summary)


def _percent(value: Any) -> str:
    return f"{value * 100:.1f}%" if isinstance(value, int | float) else "-"


def cmd_mfu(client: Client, args: argparse.Namespace) -> int:
    throughput: dict[str, Any] = {}
    if args.tokens_per_second is not None:
        throughput["tokens_per_second"] = args.tokens_per_second
    if args.tokens_per_second_per_device is not None:
        throughput["tokens_per_second_per_device"] = args.tokens_per_second_per_device
    if args.step_time_seconds is not None:
        throughput["step_time_seconds"] = args.step_time_seconds
        throughput["global_batch_tokens"] = args.global_batch_tokens
    body: dict[str, Any] = {
        "model": {"preset": args.model},
        "seq_len_tokens": args.seq_len,
        "hardware": {"accelerator": args.hardware, "device_count": args.count},
        "precision": args.precision,
        "throughput": throughput,
    }
    if args.embedding_policy:
        body["embedding_policy"] = args.embedding_policy
    answer = client.compute_mfu(body)
    _print(
        answer,
        args,
        f"MFU {_percent(answer['mfu'])}  HFU {_percent(answer['hfu'])}  "
        f"{answer['achieved_tflops_per_device']:.1f} TFLOP/s per device of {answer['peak_tflops_per_device']:g}  "
        f"({answer['band']}: {answer['reading']})",
    )
    return 0


def cmd_predict(client: Client, args: argparse.Namespace) -> int:
    answer = client.predict_step_time(_body(args.request))
    _print(
        answer,
        args,
        f"step {answer['step_time_seconds']:.3f} s  {answer['tokens_per_second']:,.0f} tokens/s  "
        f"MFU {_percent(answer['mfu'])}  fits: {answer['fits']}\n{answer['reading']}",
    )
    return 0


def cmd_plan(client: Client, args: argparse.Namespace) -> int:
    answer = client.plan_parallelism(_body(args.request))
    lines = [f"{answer['feasible_count']} feasible of {answer['evaluated_count']} layouts; best first:"]
    for candidate in answer["candidates"][: args.top]:
        layout = candidate["layout"]
        shape = " ".join(f"{key}={layout[key]}" for key in ("tp", "pp", "dp", "cp", "ep") if key in layout)
        lines.append(
            f"  {candidate['rank']:>3}. {shape:32} step {candidate['step_time_seconds']:.3f} s  "
            f"MFU {_percent(candidate['mfu'])}  {candidate['memory_per_device_gib']:.1f} GiB"
        )
    _print(answer, args, "\n".join(lines))
    return 0


def _run_line(run: dict[str, Any]) -> str:
    summary = run.get("summary") or {}
    return (
        f"{run['id']}  {run['status']:8}  {run['model_name'][:24]:24}  {run['accelerator_id']}×{run['device_count']}  "
        f"median MFU {_percent(summary.get('median_mfu'))}  steps {summary.get('latest_step')}"
    )


def cmd_runs(client: Client, args: argparse.Namespace) -> int:
    if args.runs_command == "list":
        page = client.list_runs(status=args.status, cluster=args.cluster, model=args.model, limit=args.limit)
        _print(page, args, "\n".join(_run_line(dict(run)) for run in page["items"]) or "no runs")
    elif args.runs_command == "show":
        run = client.get_run(args.run_id)
        efficiency = client.get_run_efficiency(args.run_id)
        distribution = efficiency.get("mfu") or {}
        _print(
            {"run": run, "efficiency": efficiency},
            args,
            _run_line(dict(run)) + f"\n  MFU p50 {_percent(distribution.get('median'))}  "
            f"measurements {efficiency['measurement_count']}  tokens {efficiency['tokens_so_far']:,}",
        )
    else:
        comparison = client.compare_runs({"run_ids": args.run_ids})
        lines = [
            f"{item['run_id']}  {item['model_name'][:24]:24}  {item['accelerator_id']}×{item['device_count']}  "
            f"median MFU {_percent(item['median_mfu'])}  {item['median_tflops_per_device'] or 0:.1f} TFLOP/s/device"
            for item in comparison["runs"]
        ]
        lines.append(f"differing: {', '.join(comparison['differing_fields']) or '-'}")
        lines.append(f"best median MFU: {comparison['best_median_mfu_run_id'] or '-'}")
        _print(comparison, args, "\n".join(lines))
    return 0


def _batches(measurements: Iterable[dict[str, Any]], size: int) -> Iterable[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    for measurement in measurements:
        batch.append(measurement)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def cmd_report(client: Client, args: argparse.Namespace, stdin: TextIO) -> int:
    if (args.run_id is None) == (args.run is None):
        print("teff-client report: give --run-id or --run (a run description)", file=sys.stderr)
        return 2
    run_id = args.run_id or client.create_or_resume_run(_body(args.run))["id"]
    parsed = stored = ignored = 0
    latest_mfu = None
    with contextlib.ExitStack() as stack:
        source: Iterable[str] = (
            stdin
            if args.from_log == "-"
            else stack.enter_context(Path(args.from_log).open(encoding="utf-8", errors="replace"))
        )
        for batch in _batches(parse_lines(source, args.format), args.batch_size):
            parsed += len(batch)
            answer = client.add_measurements(run_id, batch)
            stored += answer["stored"]
            ignored += len(answer["ignored_steps"])
            latest_mfu = answer["summary"]["latest_mfu"]
    if args.finish:
        client.finish_run(run_id, args.finish)
    summary = f"run {run_id}: {parsed} throughput lines, {stored} stored, {ignored} already stored; latest MFU {_percent(latest_mfu)}"
    _print(
        {"run_id": run_id, "parsed": parsed, "stored": stored, "ignored": ignored, "latest_mfu": latest_mfu},
        args,
        summary,
    )
    return 0 if parsed else 1


def cmd_job(client: Client, args: argparse.Namespace) -> int:
    """Scheduler hooks: ``job begin`` creates (or resumes) the run of this job from a description plus
    the scheduler's environment and prints its id; ``job end`` marks it by the job's exit code."""
    from teff_client.integrations._common import scheduler_facts

    if args.job_command == "begin":
        body = {**_body(args.run), **scheduler_facts()}
        for _ in range(100):
            run = client.create_or_resume_run(body)
            if run["status"] == "running":
                print(run["id"])
                return 0
            body["attempt"] = int(run.get("attempt") or 0) + 1  # that attempt ended: this is the next
        print("teff-client: no free attempt number for this job", file=sys.stderr)
        return 1
    status = "finished" if args.exit_code == 0 else "failed"
    if client.get_run(args.run_id)["status"] == "running":
        # The job did not mark itself (no integration, or it died without a word): the exit code is
        # the job's end on its goodput timeline. One id per run, so a repeated hook stores it once.
        client.add_events(args.run_id, _exit_event(args.run_id, args.exit_code))
    try:
        run = client.finish_run(args.run_id, status)
    except ProblemError as error:
        if error.status != 409:
            raise
        run = client.get_run(args.run_id)  # the job marked itself already: its word stands
    print(f"{run['id']} {run['status']}")
    return 0


def exit_reason(exit_code: int) -> str:
    """What a job step's exit code says: bash(1) EXIT STATUS gives 128+N for a command killed by
    signal N (137: SIGKILL, as the out-of-memory killer sends)."""
    if exit_code > 128:
        return f"exit code {exit_code} (killed by signal {exit_code - 128})"
    return f"exit code {exit_code}"


def _exit_event(run_id: str, exit_code: int) -> dict[str, Any]:
    import datetime as dt

    event: dict[str, Any] = {
        "event_id": f"job-end-{run_id}",
        "kind": "job_ended" if exit_code == 0 else "failure",
        "time": dt.datetime.now(dt.UTC).isoformat(),
    }
    if exit_code != 0:
        event["reason"] = exit_reason(exit_code)
    return event


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="teff-client", description="The training-efficiency service from a shell."
    )
    parser.add_argument("--url", default=os.environ.get("TEFF_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--api-key", default=os.environ.get("TEFF_API_KEY"))
    parser.add_argument("--json", action="store_true", help="print the service's answer as JSON")
    commands = parser.add_subparsers(dest="command", required=True)

    mfu = commands.add_parser("mfu", help="MFU from a measured throughput")
    mfu.add_argument("--model", required=True, help="preset id (GET /v1/models)")
    mfu.add_argument("--seq-len", type=int, required=True)
    mfu.add_argument("--hardware", required=True, help="catalog id or device name")
    mfu.add_argument("--count", type=int, required=True, help="devices in the job")
    mfu.add_argument("--precision", default="bf16")
    mfu.add_argument("--embedding-policy", choices=["all", "exclude_input", "exclude_all"])
    rate = mfu.add_mutually_exclusive_group(required=True)
    rate.add_argument("--tokens-per-second", type=float)
    rate.add_argument("--tokens-per-second-per-device", type=float)
    rate.add_argument("--step-time-seconds", type=float)
    mfu.add_argument("--global-batch-tokens", type=int, help="with --step-time-seconds")

    predict = commands.add_parser("predict", help="predicted step time and MFU (POST /v1/predictions/step)")
    predict.add_argument("request", help="a StepPredictionRequest: JSON text, @file or @-")
    plan = commands.add_parser("plan", help="parallel layouts ranked (POST /v1/plans/parallelism)")
    plan.add_argument("request", help="a PlanRequest: JSON text, @file or @-")
    plan.add_argument("--top", type=int, default=10)

    runs = commands.add_parser("runs", help="stored runs")
    runs_commands = runs.add_subparsers(dest="runs_command", required=True)
    runs_list = runs_commands.add_parser("list")
    runs_list.add_argument("--status", choices=["running", "finished", "failed"])
    runs_list.add_argument("--cluster")
    runs_list.add_argument("--model")
    runs_list.add_argument("--limit", type=int, default=20)
    runs_show = runs_commands.add_parser("show")
    runs_show.add_argument("run_id")
    runs_compare = runs_commands.add_parser("compare")
    runs_compare.add_argument("run_ids", nargs="+")

    report = commands.add_parser("report", help="report a training log's throughput lines")
    report.add_argument("--from-log", required=True, help="log file, or - for stdin")
    report.add_argument("--format", choices=["auto", *PARSERS], default="auto")
    report.add_argument("--run-id")
    report.add_argument("--run", help="a RunCreate body (JSON text or @file): created, or resumed")
    report.add_argument("--finish", choices=["finished", "failed"], help="then mark the run")
    report.add_argument("--batch-size", type=int, default=REPORT_BATCH)

    job = commands.add_parser("job", help="scheduler hooks (deploy/slurm)")
    job_commands = job.add_subparsers(dest="job_command", required=True)
    begin = job_commands.add_parser("begin", help="create or resume this job's run; print its id")
    begin.add_argument("--run", required=True, help="a RunCreate body (JSON text or @file)")
    end = job_commands.add_parser(
        "end", help="mark the run finished (exit code 0) or failed, the exit code its failure reason"
    )
    end.add_argument("--run-id", required=True)
    end.add_argument("--exit-code", type=int, required=True)
    return parser


def main(argv: Sequence[str] | None = None, stdin: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with Client(args.url, api_key=args.api_key) as client:
            if args.command == "mfu":
                return cmd_mfu(client, args)
            if args.command == "predict":
                return cmd_predict(client, args)
            if args.command == "plan":
                return cmd_plan(client, args)
            if args.command == "runs":
                return cmd_runs(client, args)
            if args.command == "job":
                return cmd_job(client, args)
            return cmd_report(client, args, stdin or sys.stdin)
    except ProblemError as error:
        print(f"teff-client: {error}", file=sys.stderr)
        return 1
    except TeffError as error:
        print(f"teff-client: {error}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as error:
        print(f"teff-client: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
