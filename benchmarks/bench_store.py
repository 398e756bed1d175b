"""The run store under load, through the real server, on SQLite and PostgreSQL (issue 5's targets).

    .venv/bin/python -m benchmarks.bench_store                      # both backends, 1M runs / 10M measurements
    .venv/bin/python -m benchmarks.bench_store --backend sqlite     # one backend
    .venv/bin/python -m benchmarks.bench_store --quick              # smoke run: 20k runs, short loads (~1-2 min)
    .venv/bin/python -m benchmarks.bench_store --runs 200000 --measurements-per-run 10

Per backend, on a fresh database (SQLite: a file in a temporary directory; PostgreSQL: a database
``teff_bench_<random>`` created through the ``postgres`` admin database and dropped afterwards), with the
real server (`teff db upgrade`, then `teff serve`, benchmark routes on) and keys made by `teff keys
create`:

1. Single-measurement ingest: POST /v1/runs/{id}/measurements, one item per request, every request a
   new step (64 runs in turn) at 16 connections, beside POST /bench/noop-db (a trivial POST that opens a
   write transaction) and POST /bench/noop (a trivial POST), in three rounds, on the empty database and
   again once it is loaded. Target ≥ 0.35× the trivial POST and p99 ≤ 50 ms, the median of the rounds' ratios (each
   round's trivial POST and ingest run back to back; noop-db reported beside them).
2. Bulk ingest: 10,000 measurements per request, several clients each on its own run. Target ≥ 100,000
   measurements/s on SQLite, ≥ 80,000 on PostgreSQL.
3. Query latency at scale: a bulk loader (below) fills the database to ``--small-runs`` (10k), then
   GET /v1/runs (default sort; two filtered + sorted variants), GET /v1/runs/{id}/efficiency and
   GET /v1/stats/mfu are timed one request at a time; then it loads up to ``--runs`` (1M) with
   ``--measurements-per-run`` (10) and times them again, in the same run. Targets: list p50 ≤ 20 ms,
   efficiency p50 ≤ 20 ms, stats p50 ≤ 200 ms, list p50 at 1M within 2× of the same at 10k.
4. Verification: a sample of loaded runs is re-created through the API, their measurements (read back
   through GET /v1/runs/{id}/measurements) re-posted through the real ingest path, and the summaries,
   per-measurement MFU and efficiency percentiles compared with the loaded ones; the per-run, tenant and
   fleet histograms are checked against the rows in SQL.

The bulk loader (``BulkLoader``) writes the store's own tables (``service.store.tables``) in one big
transaction per chunk of runs, and reuses the service's code for every value the ingest path computes:

* run rows: ``service.api.run_request.prepare_run`` on a ``RunCreate`` (parameter counts, size class,
  FLOPs per token, peak), once per configuration; per-run fields (start time, status, job id, tags,
  budget, price) are then set on a copy.
* measurement rows: ``service.usecases.ingest.measurement_values`` (the ingest path's own function:
  throughput form → tokens/s → MFU, HFU, TFLOP/s, tokens/s per device) on items shaped like the
  validated JSON; written with ``service.store.measurements.insert_measurements`` (multi-row INSERTs on SQLite,
  COPY on PostgreSQL: the ingest path's own writer).
* summaries: ``service.usecases.measurements.summary_after`` (the ingest path's own function) on the
  run with no measurements, given the histogram ``fleet.bin_counts`` makes of all its rows. Tenant and
  fleet histograms are added with the store's upsert (``service.store.upserts._upsert_add``: counter += n), the fleet one only for catalog
  accelerators (as ``move_run_in_histograms``).
* a long run's step buckets (more than ``fleet.EXACT_SERIES_MAX`` measurements): the store's
  ``rebuild_series``, as ingest builds them when a run outgrows the exact series.
* runs, tags and per-run histograms are written at the driver: executemany of the compiled INSERT on
  SQLite (times as the store binds them, ``service.store.measurements._sqlite_time``), COPY on PostgreSQL.

PostgreSQL: the loader runs ``VACUUM ANALYZE`` after each load (what autovacuum does after a bulk load
in a deployment; without statistics the planner guesses). SQLite: nothing (the service never runs
ANALYZE, so neither does the benchmark).

Bounds: every load loop stops at a request count and a duration; only loopback addresses are targeted.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import math
import random
import secrets
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson
from sqlalchemy import Connection, Table, case, create_engine, func, insert, select, text

from benchmarks import openapi_examples as examples
from benchmarks import server as server_module
from benchmarks.loadgen import LoadResult, run_load, run_stream_load
from service.api import run_request
from service.api.schemas.runs import RunCreate
from service.domain import fleet
from service.store import measurements as measurements_store
from service.store import records as records_store
from service.store import series as series_store
from service.store import upserts as upserts_store
from service.store.engine import build_engine
from service.store.tables import (
    NO_MFU,
    fleet_mfu_bins,
    measurements,
    run_mfu_bins,
    run_series_bins,
    run_tags,
    runs,
    tenant_mfu_bins,
)
from service.store.uow import UnitOfWork
from service.usecases.ingest import measurement_values
from service.usecases.measurements import summary_after

ADMIN_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"

# Targets (issue 5; the ingest ones as issue 15 set them for one writer per database).
TARGET_SINGLE_VS_NOOP = 0.35
TARGET_SINGLE_P99_MS = 50.0
TARGET_BULK_PER_SECOND = {"sqlite": 100_000, "postgresql": 80_000}
TARGET_LIST_P50_MS = 20.0
TARGET_EFFICIENCY_P50_MS = 20.0
TARGET_STATS_P50_MS = 200.0
TARGET_LIST_GROWTH = 2.0

#: Tenants of the loaded runs and their shares; queries are timed as the first (the largest).
TENANTS = (("acme", 0.50), ("globex", 0.25), ("initech", 0.15), ("umbrella", 0.10))
INGEST_TENANT = "bench-ingest"
VERIFY_TENANT = "bench-verify"

# ~10 catalog accelerators (bf16 everywhere; fp8 on a few), plus a caller-described part.
ACCELERATORS = (
    "a100-sxm4-80gb",
    "h100-sxm",
    "h100-pcie",
    "h200-sxm",
    "b200",
    "mi300x",
    "tpu-v5p",
    "gaudi3",
    "l40s",
    "trainium2",
)
FP8_ACCELERATORS = ("h100-sxm", "b200")
CUSTOM_HARDWARE = {"custom": {"name": "lab-chip", "peak_tflops": {"bf16": 500.0}}}
CUSTOM_SHARE = 0.01
# Models across all four size classes: (preset, device counts, tp, pp).
MODELS = (
    ("gpt3-125m", (8, 16), 1, 1),
    ("qwen2.5-0.5b", (8, 32), 1, 1),
    ("llama3-8b", (64, 256), 2, 1),
    ("mistral-7b", (32, 128), 2, 1),
    ("llama3-70b", (256, 1024), 8, 4),
    ("mixtral-8x7b", (128, 512), 4, 2),
    ("gpt3-175b", (512, 1024), 8, 8),
    ("llama3.1-405b", (2048, 8192), 8, 16),
)
TAG_CHOICES = (
    ("pretrain",),
    ("pretrain", "long-context"),
    ("finetune",),
    ("ablation", "sweep"),
    ("pretrain", "baseline"),
)
STEP_INTERVAL = 100  # steps between two reports of an ordinary run
LONG_STEP_INTERVAL = 10

NOW = datetime.now(UTC).replace(microsecond=0)


# --------------------------------------------------------------------------------------------------
# Databases


def sqlite_url(directory: str) -> str:
    return f"sqlite:///{directory}/bench_store.db"


def create_postgres_database() -> str:
    name = f"teff_bench_{secrets.token_hex(6)}"
    admin = create_engine(ADMIN_POSTGRES_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        admin.dispose()
    return ADMIN_POSTGRES_URL.rsplit("/", 1)[0] + f"/{name}"


def drop_postgres_database(url: str) -> None:
    name = url.rsplit("/", 1)[1]
    assert name.startswith("teff_bench_"), name
    admin = create_engine(ADMIN_POSTGRES_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


def postgres_available() -> bool:
    try:
        engine = create_engine(ADMIN_POSTGRES_URL, connect_args={"connect_timeout": 3})
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        engine.dispose()
        return True
    except Exception:
        return False


@contextlib.contextmanager
def fresh_database(backend: str) -> Iterator[str]:
    """A fresh, migrated database of the backend; removed afterwards."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="teff_bench_") as directory:
            url = sqlite_url(directory)
            server_module.migrate(url)
            yield url
        return
    url = create_postgres_database()
    try:
        server_module.migrate(url)
        yield url
    finally:
        drop_postgres_database(url)


def create_key(url: str, tenant: str, scopes: str = "read,write") -> str:
    """An API key made as an operator makes one: `python -m service keys create`."""
    env = server_module.server_env(url, 8000)
    result = subprocess.run(
        [sys.executable, "-m", "service", "keys", "create", "--tenant", tenant, "--scopes", scopes],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return result.stdout.strip().splitlines()[0].strip()


def non_2xx(result: LoadResult) -> int:
    return sum(n for status, n in result.status_counts.items() if not 200 <= status < 300)


# --------------------------------------------------------------------------------------------------
# Run configurations: what the service stores for a run description, computed once each.


@dataclasses.dataclass(frozen=True)
class RunConfig:
    index: int
    request: dict[str, Any]
    values: dict[str, Any]  # prepare_run's values (per-run fields replaced per run)
    spec_json: str
    template: records_store.RunRecord  # for measurement_values (pk patched per run afterwards)
    tokens_per_second_at_full_mfu: float  # global tokens/s at MFU 1
    global_batch_tokens: int
    device_count: int


def _request(
    model: str,
    count: int,
    tp: int,
    pp: int,
    accelerator: str | None,
    precision: str,
    recompute: str,
    seq_len: int,
) -> dict[str, Any]:
    hardware: dict[str, Any] = (
        {"accelerator": accelerator, "count": count} if accelerator else {**CUSTOM_HARDWARE, "count": count}
    )
    return {
        "model": {"preset": model},
        "hardware": hardware,
        "precision": precision,
        "seq_len_tokens": seq_len,
        "global_batch_sequences": max(64, count // 4) if seq_len >= 8192 else max(128, count // 2),
        "parallelism": {
            "tp": tp,
            "pp": pp,
            "micro_batch_sequences": 1,
            "zero_stage": 1,
            "sequence_parallel": tp > 1,
            "recompute": recompute,
        },
        "framework": "megatron-lm 0.9",
    }


def build_configs() -> list[RunConfig]:
    """Every (model, device count, accelerator, precision, recompute) the loaded runs use."""
    requests: list[dict[str, Any]] = []
    for model, counts, tp, pp in MODELS:
        for count in counts:
            for accelerator in (*ACCELERATORS, None):
                precisions = ["bf16"] + (["fp8"] if accelerator in FP8_ACCELERATORS else [])
                for precision in precisions:
                    for recompute in ("none", "full"):
                        seq_len = 8192 if model.startswith(("llama", "mistral")) else 4096
                        requests.append(
                            _request(model, count, tp, pp, accelerator, precision, recompute, seq_len)
                        )
    configs = []
    for index, request in enumerate(requests):
        prepared = run_request.prepare_run(RunCreate.model_validate(request), now=NOW)
        values: dict[str, Any] = dict(prepared.values)
        # A run record as the store reads it back (no measurements yet) for measurement_values.
        fields: dict[str, Any] = {name: values.get(name) for name in records_store._RUN_FIELDS}
        fields.update(pk=0, id="run_template", tenant="template", measurement_count=0, median_mfu=None)
        template = records_store.RunRecord(**fields)
        full_rate = (
            values["device_count"] * values["peak_tflops_per_device"] * 1e12 / values["model_flops_per_token"]
        )
        configs.append(
            RunConfig(
                index=index,
                request=request,
                values=values,
                spec_json=json.dumps(values["spec"]),
                template=template,
                tokens_per_second_at_full_mfu=full_rate,
                global_batch_tokens=values["global_batch_tokens"],
                device_count=values["device_count"],
            )
        )
    return configs


# --------------------------------------------------------------------------------------------------
# Writing rows at the driver: executemany (SQLite) / COPY (PostgreSQL)


class RowWriter:
    """Insert many rows of one table in the connection's transaction, as the store binds them."""

    def __init__(
        self,
        table: Table,
        columns: tuple[str, ...],
        times: tuple[str, ...] = (),
        json_columns: tuple[str, ...] = (),
    ) -> None:
        self.table = table
        self.columns = columns
        self.times = times
        self.json_columns = json_columns

    def write(self, connection: Connection, rows: list[tuple[Any, ...]]) -> None:
        """``rows``: tuples in ``self.columns`` order; times tz-aware datetimes, JSON columns already
        serialised text."""
        if not rows:
            return
        if connection.dialect.name == "postgresql":
            columns = ", ".join(self.columns)
            sql = f"COPY {self.table.name} ({columns}) FROM STDIN"
            dbapi_connection: Any = connection.connection.dbapi_connection
            with dbapi_connection.cursor() as cursor, cursor.copy(sql) as copy:
                for row in rows:
                    copy.write_row(row)
            return
        compiled = insert(self.table).compile(dialect=connection.dialect, column_keys=list(self.columns))
        sql = str(compiled)
        order = tuple(compiled.positiontup or ())
        assert set(order) == set(self.columns), (order, self.columns)
        positions = [self.columns.index(name) for name in order]
        time_positions = {i for i, name in enumerate(order) if name in self.times}
        to_text = measurements_store._sqlite_time
        parameters = []
        for row in rows:
            values = [row[p] for p in positions]
            for i in time_positions:
                if values[i] is not None:
                    values[i] = to_text(values[i])
            parameters.append(tuple(values))
        connection.exec_driver_sql(sql, parameters)


RUN_COLUMNS = tuple(column.name for column in runs.columns)
RUN_TIME_COLUMNS = tuple(
    column.name for column in runs.columns if column.type.__class__.__name__ == "UtcDateTime"
)
RUNS_WRITER = RowWriter(runs, RUN_COLUMNS, RUN_TIME_COLUMNS, ("spec",))
TAGS_WRITER = RowWriter(run_tags, ("run_pk", "tag", "tenant"))
RUN_BINS_WRITER = RowWriter(run_mfu_bins, ("run_pk", "mfu_bin", "n_measurements"))


# --------------------------------------------------------------------------------------------------
# The bulk loader


@dataclasses.dataclass
class LoadStats:
    runs: int = 0
    measurements: int = 0
    seconds: float = 0.0
    sample_run_ids: list[str] = dataclasses.field(default_factory=list)  # first tenant's, for queries
    long_run_ids: list[str] = dataclasses.field(default_factory=list)
    custom_run_ids: list[str] = dataclasses.field(default_factory=list)


class BulkLoader:
    """Loads synthetic runs and measurements into a migrated database (see the module docstring)."""

    def __init__(self, url: str, *, seed: int = 5, chunk_runs: int = 5000) -> None:
        self.url = url
        self.engine = build_engine(url, pool_size=1)
        self.random = random.Random(seed)
        self.configs = build_configs()
        self.catalog_configs = [
            c for c in self.configs if c.values["accelerator"] != records_store.CUSTOM_ACCELERATOR
        ]
        self.custom_configs = [
            c for c in self.configs if c.values["accelerator"] == records_store.CUSTOM_ACCELERATOR
        ]
        self.chunk_runs = chunk_runs
        self.tenant_names = [name for name, _ in TENANTS]
        self.tenant_cumulative = list(itertools.accumulate(share for _, share in TENANTS))

    def close(self) -> None:
        self.engine.dispose()

    def _tenant(self) -> str:
        x = self.random.random() * self.tenant_cumulative[-1]
        for name, bound in zip(self.tenant_names, self.tenant_cumulative, strict=True):
            if x < bound:
                return name
        return self.tenant_names[-1]

    def load(
        self,
        n_runs: int,
        measurements_per_run: int,
        *,
        long_runs: int = 0,
        long_run_measurements: int = 0,
        progress: bool = True,
    ) -> LoadStats:
        """Add ``n_runs`` ordinary runs with ``measurements_per_run`` each, plus ``long_runs`` runs of
        ``long_run_measurements`` (first tenant), in chunks of one transaction each."""
        stats = LoadStats()
        started = time.perf_counter()
        with self.engine.connect() as connection:
            next_pk = (connection.execute(select(func.max(runs.c.pk))).scalar() or 0) + 1
        plan: list[tuple[int, int]] = [(1, long_run_measurements)] * long_runs
        remaining = n_runs
        while remaining > 0:
            take = min(self.chunk_runs, remaining)
            plan.append((take, measurements_per_run))
            remaining -= take
        for count, per_run in plan:
            long = per_run == long_run_measurements and count == 1 and long_runs > 0
            with UnitOfWork(self.engine, write=True) as uow:
                if self.engine.dialect.name == "sqlite":
                    uow.connection.exec_driver_sql("PRAGMA cache_size=-1000000")
                added = self._chunk(uow.connection, next_pk, count, per_run, long=long, stats=stats)
                uow.commit()
            next_pk += count
            stats.runs += count
            stats.measurements += added
            if progress and (stats.runs % 100_000 < count or stats.runs == n_runs + long_runs):
                elapsed = time.perf_counter() - started
                print(
                    f"  loaded {stats.runs:,} runs, {stats.measurements:,} measurements in {elapsed:.0f} s "
                    f"({stats.measurements / elapsed:,.0f} measurements/s)",
                    flush=True,
                )
        self._after_load()
        stats.seconds = time.perf_counter() - started
        return stats

    def _after_load(self) -> None:
        with self.engine.connect() as connection:
            if self.engine.dialect.name == "postgresql":
                # Explicit pks were written: move the sequence past them (the API inserts next).
                connection.execute(
                    text("SELECT setval(pg_get_serial_sequence('runs', 'pk'), (SELECT max(pk) FROM runs))")
                )
                connection.commit()
                autocommit = connection.execution_options(isolation_level="AUTOCOMMIT")
                autocommit.exec_driver_sql("VACUUM ANALYZE")
            else:
                connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")

    def _chunk(
        self, connection: Connection, first_pk: int, count: int, per_run: int, *, long: bool, stats: LoadStats
    ) -> int:
        rnd = self.random
        run_rows: list[tuple[Any, ...]] = []
        tag_rows: list[tuple[Any, ...]] = []
        bin_rows: list[tuple[Any, ...]] = []
        tenant_deltas: Counter[tuple[str, str, str, int]] = Counter()
        fleet_deltas: Counter[tuple[str, str, int]] = Counter()
        # Items per configuration (measurement_values once per configuration and chunk).
        by_config: dict[int, tuple[list[dict[str, Any]], list[int]]] = defaultdict(lambda: ([], []))
        run_meta: list[tuple[int, str, str, RunConfig, datetime]] = []
        interval = LONG_STEP_INTERVAL if long else STEP_INTERVAL
        for offset in range(count):
            pk = first_pk + offset
            tenant = self.tenant_names[0] if long else self._tenant()
            custom = not long and rnd.random() < CUSTOM_SHARE
            config = rnd.choice(self.custom_configs if custom else self.catalog_configs)
            started_at = NOW - timedelta(seconds=rnd.uniform(3600 * 24, 3600 * 24 * 730))
            run_id = records_store.new_run_id()
            base_mfu = min(0.7, max(0.03, rnd.gauss(0.38, 0.1)))
            drift = rnd.uniform(-0.05, 0.05)
            rate_mean = base_mfu * config.tokens_per_second_at_full_mfu
            seconds_per_step = config.global_batch_tokens / rate_mean
            items, pks = by_config[config.index]
            for i in range(per_run):
                step = (i + 1) * interval
                mfu = base_mfu * (1 + drift * i / max(per_run, 1)) * (1 + rnd.gauss(0.0, 0.02))
                mfu = min(0.72, max(0.01, mfu))
                rate = mfu * config.tokens_per_second_at_full_mfu
                form = rnd.random()
                if form < 0.8:
                    throughput: dict[str, Any] = {"tokens_per_second": rate}
                elif form < 0.9:
                    throughput = {"tokens_per_second_per_device": rate / config.device_count}
                else:
                    throughput = {
                        "step_time_seconds": config.global_batch_tokens / rate,
                        "global_batch_tokens": config.global_batch_tokens,
                    }
                item: dict[str, Any] = {
                    "step": step,
                    "time": started_at + timedelta(seconds=step * seconds_per_step),
                    "throughput": throughput,
                    "loss": 2.0 + 8.0 / math.sqrt(1 + step / 100),
                }
                if i % 5 == 0:
                    item["memory_bytes"] = 60_000_000_000 + i
                items.append(item)
                pks.append(pk)
            run_meta.append((pk, run_id, tenant, config, started_at))
        measurement_batches: list[list[dict[str, Any]]] = []
        per_run_rows: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for config_index, (items, pks) in by_config.items():
            config = self.configs[config_index]
            rows = [
                dict(zip(measurements_store.MEASUREMENT_COLUMNS, values, strict=True))
                for values in measurement_values(config.template, items, now=NOW)
            ]
            for row, pk in zip(rows, pks, strict=True):
                row["run_pk"] = pk
                per_run_rows[pk].append(row)
            measurement_batches.append(rows)
        for pk, run_id, tenant, config, started_at in run_meta:
            rows = per_run_rows.get(pk, [])
            values = dict(config.values)
            summary = _summary(config.template, rows)
            status = rnd.choices(("finished", "failed", "running"), (0.85, 0.05, 0.10))[0]
            last_time = summary["values"]["latest_measured_at"] or started_at
            values.update(
                status=status,
                started_at=started_at,
                finished_at=last_time + timedelta(minutes=30) if status != "running" else None,
                created_at=started_at,
                updated_at=last_time,
                cluster=f"cluster-{pk % 7}",
                scheduler_job_id=f"job-{pk}",
                attempt=0,
                token_budget_tokens=(10**12 if pk % 3 == 0 else None),
                price_per_device_hour=(2.5 if pk % 2 == 0 else None),
                goodput=None,  # a job's goodput comes from its events; the loader writes none
            )
            values.update(summary["values"])
            values.update(pk=pk, id=run_id, tenant=tenant, spec=config.spec_json)
            run_rows.append(tuple(values[name] for name in RUN_COLUMNS))
            for tag in sorted(set(TAG_CHOICES[pk % len(TAG_CHOICES)])):
                tag_rows.append((pk, tag, tenant))
            for mfu_bin, n in sorted(summary["bins"].items()):
                bin_rows.append((pk, mfu_bin, n))
            fleet_bin = summary["values"]["fleet_bin"]
            if fleet_bin is not None:
                key = (config.values["accelerator"], config.values["size_class"])
                tenant_deltas[(tenant, *key, fleet_bin)] += 1
                if config.values["accelerator"] != records_store.CUSTOM_ACCELERATOR:
                    fleet_deltas[(*key, fleet_bin)] += 1
            if long:
                stats.long_run_ids.append(run_id)
            elif config.values["accelerator"] == records_store.CUSTOM_ACCELERATOR:
                if tenant == self.tenant_names[0] and len(stats.custom_run_ids) < 50:
                    stats.custom_run_ids.append(run_id)
            elif tenant == self.tenant_names[0] and len(stats.sample_run_ids) < 2000 and rnd.random() < 0.1:
                stats.sample_run_ids.append(run_id)
        # Parents before children (foreign keys are checked per statement on both databases).
        RUNS_WRITER.write(connection, run_rows)
        TAGS_WRITER.write(connection, tag_rows)
        measurement_total = 0
        for rows in measurement_batches:
            measurements_store.insert_measurements(connection, rows=rows)  # the ingest path's own writer
            measurement_total += len(rows)
        for pk, rows in per_run_rows.items():
            if len(rows) > fleet.EXACT_SERIES_MAX:  # the stored step buckets, as ingest builds them
                steps = [row["step"] for row in rows]
                width = fleet.series_width(min(steps), max(steps))
                series_store.rebuild_series(connection, run_pk=pk, width=width)
        RUN_BINS_WRITER.write(connection, bin_rows)
        upserts_store._upsert_add(
            connection,
            tenant_mfu_bins,
            [
                {"tenant": t, "accelerator": a, "size_class": s, "mfu_bin": b, "n_runs": n}
                for (t, a, s, b), n in sorted(tenant_deltas.items())
            ],
            keys=("tenant", "accelerator", "size_class", "mfu_bin"),
            counter="n_runs",
        )
        upserts_store._upsert_add(
            connection,
            fleet_mfu_bins,
            [
                {"accelerator": a, "size_class": s, "mfu_bin": b, "n_runs": n}
                for (a, s, b), n in sorted(fleet_deltas.items())
            ],
            keys=("accelerator", "size_class", "mfu_bin"),
            counter="n_runs",
        )
        return measurement_total


_SUMMARY_FIELDS = (
    "measurement_count",
    "first_measured_at",
    "latest_step",
    "latest_measured_at",
    "latest_mfu",
    "latest_tokens_per_second",
    "median_mfu",
    "fleet_bin",
)


def _summary(template: records_store.RunRecord, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The run summary as the ingest path keeps it, from all of a run's measurement rows at once:
    ``summary_after`` (the ingest path's own function) on a run with no measurements, given
    the histogram ``fleet.bin_counts`` makes of them."""
    bins = fleet.bin_counts(row["mfu"] for row in rows)
    after = summary_after(template, measurements_store.measurement_values(rows), bins, now=NOW)
    values = {name: getattr(after, name) for name in _SUMMARY_FIELDS}
    if values["median_mfu"] is None:
        values["median_mfu"] = NO_MFU  # the column's "none yet"
    return {"bins": bins, "values": values}


# --------------------------------------------------------------------------------------------------
# Through the API: ingest benchmarks, query latencies, verification


def _json_headers(key: str) -> dict[str, str]:
    return {"X-API-Key": key, "Content-Type": "application/json"}


def create_api_runs(base_url: str, key: str, count: int, label: str) -> list[str]:
    """``count`` runs through POST /v1/runs, from the OpenAPI example (job ids made unique)."""
    example = examples.schema_examples("RunCreate")[0]
    ids = []
    with httpx.Client(base_url=base_url, timeout=30) as client:
        for i in range(count):
            body = {**example, "scheduler_job_id": f"{label}-{i}-{secrets.token_hex(3)}", "tags": [label]}
            response = client.post("/v1/runs", json=body, headers={"X-API-Key": key})
            response.raise_for_status()
            ids.append(response.json()["id"])
    return ids


class StepCounter:
    """Unique (run, step) pairs across every load run of the process: request k goes to run k mod R."""

    def __init__(self, run_ids: list[str], first_step: int = 1) -> None:
        self.run_ids = run_ids
        self.counter = itertools.count()
        self.first_step = first_step

    def next(self) -> tuple[str, int]:
        k = next(self.counter)
        return self.run_ids[k % len(self.run_ids)], self.first_step + k // len(self.run_ids)


def single_measurement_request(counter: StepCounter) -> Callable[[int], tuple[str, str, bytes | None]]:
    """POST /v1/runs/{id}/measurements with the OpenAPI "one" example, step and time made new."""
    template = examples.operation_examples("POST", "/v1/runs/{run_id}/measurements")["one"]
    origin = datetime.fromisoformat(template["time"].replace("Z", "+00:00"))

    def request(_worker: int) -> tuple[str, str, bytes | None]:
        run_id, step = counter.next()
        body = {**template, "step": step, "time": (origin + timedelta(seconds=step)).isoformat()}
        return "POST", f"/v1/runs/{run_id}/measurements", orjson.dumps(body)

    return request


def bulk_bodies(clients: int, per_client: int, items: int) -> list[list[bytes]]:
    """Per client, ``per_client`` bodies of ``items`` measurements with increasing steps, built from
    the OpenAPI "batch" example (its items cycled)."""
    template = examples.operation_examples("POST", "/v1/runs/{run_id}/measurements")["batch"]
    origin = datetime.fromisoformat(template[0]["time"].replace("Z", "+00:00"))
    bodies: list[list[bytes]] = []
    for _ in range(clients):
        mine = []
        for j in range(per_client):
            batch = []
            for i in range(items):
                step = j * items + i + 1
                item = dict(template[i % len(template)])
                item["step"] = step
                item["time"] = (origin + timedelta(seconds=step)).isoformat()
                batch.append(item)
            mine.append(orjson.dumps(batch))
        bodies.append(mine)
    return bodies


@dataclasses.dataclass
class Options:
    runs: int = 1_000_000
    measurements_per_run: int = 10
    small_runs: int = 10_000
    long_runs: int = 10
    long_run_measurements: int = 20_000
    connections: int = 16
    seconds: float = 6.0
    rounds: int = 3
    bulk_clients: int = 4
    bulk_seconds: float = 15.0
    bulk_max_requests: int = 160
    query_requests: int = 300
    query_seconds: float = 10.0
    verify_runs: int = 12
    chunk_runs: int = 5000
    quick: bool = False

    @classmethod
    def quick_mode(cls, **overrides: Any) -> Options:
        values: dict[str, Any] = dict(
            runs=20_000,
            small_runs=2_000,
            long_runs=2,
            long_run_measurements=5_000,
            seconds=2.5,
            rounds=1,
            bulk_seconds=5.0,
            bulk_max_requests=40,
            query_requests=100,
            query_seconds=3.0,
            verify_runs=6,
            quick=True,
        )
        values.update(overrides)
        return cls(**values)


@dataclasses.dataclass
class Check:
    name: str
    value: str
    baseline: str = ""
    ratio: str = ""
    target: str = ""
    verdict: str = "info"


@dataclasses.dataclass
class BackendContext:
    """What a caller of run_backend gets while the loaded database still exists."""

    backend: str
    url: str
    keys: dict[str, str]
    ingest_run_ids: list[str]
    step_counter: StepCounter
    sample_run_ids: list[str]
    long_run_ids: list[str]


@dataclasses.dataclass
class IngestComparison:
    """Rounds of (POST /bench/noop-db, POST /bench/noop, single-item POST measurements), each load
    ``seconds`` long, the trivial POST and the ingest back to back in every round."""

    rounds: list[dict[str, LoadResult]]

    @property
    def ratios(self) -> list[float]:
        """Single-item ingest over the trivial POST, per round."""
        return [r["single"].requests_per_second / r["noop"].requests_per_second for r in self.rounds]

    @property
    def median_round(self) -> dict[str, LoadResult]:
        """The round of the median ratio (the lower middle one for an even count): on a shared machine
        the speed drifts over minutes, and a ratio of loads run seconds apart is what stays put; the
        median of the rounds' ratios is the least moved by one round's bad luck either way."""
        order = sorted(range(len(self.rounds)), key=lambda index: self.ratios[index])
        return self.rounds[order[(len(order) - 1) // 2]]

    @property
    def non_2xx(self) -> int:
        return sum(non_2xx(r["single"]) for r in self.rounds)

    def figures(self) -> dict[str, Any]:
        return {
            "rounds": [{k: dataclasses.asdict(v) for k, v in r.items()} for r in self.rounds],
            "ratios": self.ratios,
        }


def ingest_benchmarks(
    base_url: str,
    key: str,
    ingest_ids: list[str],
    counter: StepCounter,
    options: Options,
) -> IngestComparison:
    """Single-item POST measurements beside POST /bench/noop-db and /bench/noop, ``options.rounds``
    rounds."""
    conns = options.connections
    load: dict[str, Any] = dict(connections=conns, max_seconds=options.seconds, max_requests=200_000)
    headers = {"X-API-Key": key}
    noop_body = orjson.dumps(examples.operation_examples("POST", "/v1/runs/{run_id}/measurements")["one"])
    request = single_measurement_request(counter)
    rounds: list[dict[str, LoadResult]] = []
    for _ in range(options.rounds):
        noop_db = run_load(
            "POST /bench/noop-db", base_url, ("POST", "/bench/noop-db", noop_body), headers=headers, **load
        )
        noop = run_load(
            "POST /bench/noop", base_url, ("POST", "/bench/noop", noop_body), headers=headers, **load
        )
        single = run_stream_load("POST measurements (1 item)", base_url, request, headers=headers, **load)
        rounds.append({"noop": noop, "noop_db": noop_db, "single": single})
    return IngestComparison(rounds)


def bulk_benchmark(base_url: str, key: str, options: Options) -> tuple[LoadResult, float, int]:
    """Several clients, each posting 10,000-measurement batches to its own new run. Returns the load,
    measurements/s (stored, checked against the runs' summaries) and measurements stored."""
    clients = options.bulk_clients
    items = 10_000
    run_ids = create_api_runs(base_url, key, clients, "bulk")
    per_client = options.bulk_max_requests // clients + 2
    bodies = bulk_bodies(clients, per_client, items)
    position = [0] * clients

    def request(worker: int) -> tuple[str, str, bytes | None]:
        mine = bodies[worker]
        if position[worker] >= len(mine):  # a fast connection outran its share: one more batch
            step0 = len(mine) * items
            mine.append(
                orjson.dumps([{**item, "step": item["step"] + step0} for item in orjson.loads(mine[0])])
            )
        body = mine[position[worker]]
        position[worker] += 1
        return "POST", f"/v1/runs/{run_ids[worker]}/measurements", body

    result = run_stream_load(
        f"POST measurements ({items:,} items)",
        base_url,
        request,
        connections=clients,
        max_requests=options.bulk_max_requests,
        max_seconds=options.bulk_seconds,
        warmup_requests=clients,
        headers={"X-API-Key": key},
    )
    ok = result.status_counts.get(200, 0)
    stored = 0
    with httpx.Client(base_url=base_url, timeout=30, headers={"X-API-Key": key}) as client:
        for run_id in run_ids:
            stored += client.get(f"/v1/runs/{run_id}").json()["summary"]["measurement_count"]
    sent = (sum(position)) * items
    if stored != sent and result.errors == 0:
        print(f"  warning: bulk stored {stored:,} measurements but sent {sent:,}", flush=True)
    rate = ok * items / result.seconds if result.seconds else 0.0
    return result, rate, stored


ACCELERATOR_FILTERS = ACCELERATORS
MODEL_FILTERS = tuple(model for model, *_ in MODELS)


def query_benchmarks(
    base_url: str, key: str, sample_ids: list[str], long_ids: list[str], options: Options
) -> dict[str, LoadResult]:
    """Latency one request at a time (1 connection): list pages, efficiency, statistics, beside the
    trivial GET /bench/noop measured in the same breath."""
    load: dict[str, Any] = dict(
        connections=1,
        max_requests=options.query_requests,
        max_seconds=options.query_seconds,
        warmup_requests=20,
    )
    headers = {"X-API-Key": key}
    queries: dict[str, list[tuple[str, str, bytes | None]]] = {
        "noop": [("GET", "/bench/noop", None)],
        "list_default": [("GET", "/v1/runs", None)],
        "list_accelerator_by_mfu": [
            ("GET", f"/v1/runs?accelerator={a}&sort=median_mfu&order=desc", None) for a in ACCELERATOR_FILTERS
        ],
        "list_model_min_mfu_by_start": [
            ("GET", f"/v1/runs?model={m}&min_mfu=0.4&status=finished&sort=started_at&order=desc", None)
            for m in MODEL_FILTERS
        ],
        "efficiency": [("GET", f"/v1/runs/{run_id}/efficiency", None) for run_id in sample_ids[:500]],
        "efficiency_long": [("GET", f"/v1/runs/{run_id}/efficiency", None) for run_id in long_ids],
        "stats": [("GET", "/v1/stats/mfu", None)],
        "stats_rank": [("GET", f"/v1/stats/mfu?run_id={run_id}", None) for run_id in sample_ids[:200]],
    }
    names = {
        "noop": "GET /bench/noop (trivial)",
        "list_default": "GET /v1/runs (default sort)",
        "list_accelerator_by_mfu": "GET /v1/runs?accelerator=…&sort=median_mfu",
        "list_model_min_mfu_by_start": "GET /v1/runs?model=…&min_mfu&status",
        "efficiency": f"GET efficiency ({options.measurements_per_run} meas.)",
        "efficiency_long": f"GET efficiency ({options.long_run_measurements:,} meas.)",
        "stats": "GET /v1/stats/mfu",
        "stats_rank": "GET /v1/stats/mfu?run_id=…",
    }
    results = {}
    for name, requests in queries.items():
        if not requests:
            continue
        # Efficiency without a warm-up: its first requests per accelerator fit a calibration on the
        # request path (service.api.calibration, cached 60 s per process), and p99 should show it.
        warm = {"warmup_requests": 0} if name.startswith("efficiency") else {}
        results[name] = run_load(names[name], base_url, requests, headers=headers, **{**load, **warm})
    return results


def _close(a: float | None, b: float | None, rel: float = 1e-9) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


def _all_measurements(client: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 1000}
        if cursor:
            params["cursor"] = cursor
        page = client.get(f"/v1/runs/{run_id}/measurements", params=params)
        page.raise_for_status()
        body = page.json()
        items += body["items"]
        cursor = body["next_cursor"]
        if not cursor:
            return items


def verify_sample(base_url: str, reader_key: str, verify_key: str, run_ids: list[str]) -> dict[str, Any]:
    """Re-create each loaded run through POST /v1/runs (another tenant), re-post its measurements
    (as read back through the API) through the real ingest path, compare, delete the copy."""
    mismatches: list[str] = []
    checked_measurements = 0
    summary_fields = (
        "measurement_count",
        "first_measured_at",
        "latest_step",
        "latest_measured_at",
        "latest_mfu",
        "median_mfu",
        "latest_tokens_per_second",
        "tokens_so_far",
        "seconds_to_budget",
    )
    run_fields = (
        "model_name",
        "parameters",
        "size_class",
        "accelerator_id",
        "accelerator_name",
        "device_count",
        "model_flops_per_token",
        "hardware_flops_per_token",
        "peak_tflops_per_device",
        "global_batch_tokens",
    )
    with (
        httpx.Client(base_url=base_url, timeout=120, headers={"X-API-Key": reader_key}) as reader,
        httpx.Client(base_url=base_url, timeout=120, headers={"X-API-Key": verify_key}) as writer,
    ):
        for run_id in run_ids:
            loaded = reader.get(f"/v1/runs/{run_id}").json()
            items = _all_measurements(reader, run_id)
            body = {
                "model": loaded["model"],
                "hardware": loaded["hardware"],
                "precision": loaded["precision"],
                "seq_len_tokens": loaded["seq_len_tokens"],
                "global_batch_tokens": loaded["global_batch_tokens"],
                "parallelism": loaded["parallelism"],
                "convention": loaded["convention"],
                "started_at": loaded["started_at"],
                "token_budget_tokens": loaded["token_budget_tokens"],
                "tags": loaded["tags"],
            }
            body = {k: v for k, v in body.items() if v is not None}
            created = writer.post("/v1/runs", json=body)
            if created.status_code != 201:
                mismatches.append(f"{run_id}: re-create answered {created.status_code} {created.text[:200]}")
                continue
            copy_id = created.json()["id"]
            try:
                for name in run_fields:
                    if created.json()[name] != loaded[name] and not (
                        isinstance(loaded[name], float) and _close(created.json()[name], loaded[name])
                    ):
                        mismatches.append(
                            f"{run_id}: run field {name} {loaded[name]!r} != {created.json()[name]!r}"
                        )
                posted = []
                for item in items:
                    posted.append(
                        {
                            "step": item["step"],
                            "time": item["time"],
                            "throughput": {k: v for k, v in item["throughput"].items() if v is not None},
                            **{
                                k: item[k]
                                for k in (
                                    "loss",
                                    "memory_bytes",
                                    "grad_norm_sq_small",
                                    "grad_norm_sq_big",
                                    "batch_small_tokens",
                                    "batch_big_tokens",
                                )
                                if item.get(k) is not None
                            },
                        }
                    )
                for start in range(0, len(posted), 10_000):
                    response = writer.post(
                        f"/v1/runs/{copy_id}/measurements", json=posted[start : start + 10_000]
                    )
                    if response.status_code != 200:
                        mismatches.append(
                            f"{run_id}: ingest answered {response.status_code} {response.text[:200]}"
                        )
                copy = writer.get(f"/v1/runs/{copy_id}").json()
                for name in summary_fields:
                    a, b = loaded["summary"][name], copy["summary"][name]
                    same = _close(a, b) if isinstance(a, float) or isinstance(b, float) else a == b
                    if not same:
                        mismatches.append(f"{run_id}: summary.{name} loaded {a!r} != API {b!r}")
                copied_items = {item["step"]: item for item in _all_measurements(writer, copy_id)}
                for item in items:
                    other = copied_items.get(item["step"])
                    checked_measurements += 1
                    if other is None:
                        mismatches.append(f"{run_id}: step {item['step']} missing from the API copy")
                        continue
                    for name in (
                        "mfu",
                        "hfu",
                        "tokens_per_second",
                        "tokens_per_second_per_device",
                        "achieved_tflops_per_device",
                    ):
                        if not _close(item[name], other[name]):
                            mismatches.append(
                                f"{run_id}: step {item['step']} {name} {item[name]!r} != {other[name]!r}"
                            )
                    if item["time"] != other["time"]:
                        mismatches.append(
                            f"{run_id}: step {item['step']} time {item['time']} != {other['time']}"
                        )
                a_eff = reader.get(f"/v1/runs/{run_id}/efficiency").json()
                b_eff = writer.get(f"/v1/runs/{copy_id}/efficiency").json()
                for name in ("median", "p10", "p90", "latest", "latest_hfu"):
                    if not _close(a_eff["mfu"][name], b_eff["mfu"][name]):
                        mismatches.append(
                            f"{run_id}: efficiency mfu.{name} {a_eff['mfu'][name]} != {b_eff['mfu'][name]}"
                        )
                if (a_eff["trend"] is None) != (b_eff["trend"] is None) or (
                    a_eff["trend"] is not None
                    and not _close(a_eff["trend"]["quartile_change"], b_eff["trend"]["quartile_change"], 1e-6)
                ):
                    mismatches.append(f"{run_id}: efficiency trend differs")
            finally:
                writer.delete(f"/v1/runs/{copy_id}")
    return {"runs": len(run_ids), "measurements": checked_measurements, "mismatches": mismatches}


def verify_histograms(url: str) -> dict[str, Any]:
    """SQL checks over the whole database: measurement counts, per-run histograms and the tenant and
    fleet histograms against the runs' own fleet bins."""
    engine = build_engine(url, pool_size=1)
    problems: list[str] = []
    try:
        with engine.connect() as connection:
            n_measurements = connection.execute(select(func.count()).select_from(measurements)).scalar_one()
            n_summary = connection.execute(
                select(func.coalesce(func.sum(runs.c.measurement_count), 0))
            ).scalar_one()
            n_bins = connection.execute(
                select(func.coalesce(func.sum(run_mfu_bins.c.n_measurements), 0))
            ).scalar_one()
            n_runs = connection.execute(select(func.count()).select_from(runs)).scalar_one()
            if not n_measurements == n_summary == n_bins:
                problems.append(
                    f"measurements {n_measurements:,}, sum of run counts {n_summary:,}, sum of run bins {n_bins:,}"
                )
            r = runs.c
            s = run_series_bins.c
            series_counts = (
                select(s.run_pk, func.sum(s.n_measurements).label("n")).group_by(s.run_pk).subquery()
            )
            series_runs, series_wrong = connection.execute(
                select(
                    func.count(),
                    func.coalesce(func.sum(case((series_counts.c.n != r.measurement_count, 1), else_=0)), 0),
                ).select_from(series_counts.join(runs, runs.c.pk == series_counts.c.run_pk))
            ).one()
            long_runs = connection.execute(
                select(func.count()).where(r.measurement_count > fleet.EXACT_SERIES_MAX)
            ).scalar_one()
            if series_wrong or series_runs != long_runs:
                problems.append(
                    f"step buckets: {series_runs} runs have them ({series_wrong} not counting every "
                    f"measurement), {long_runs} runs have more than {fleet.EXACT_SERIES_MAX} measurements"
                )
            tenant_expected = Counter(
                {
                    tuple(row[:4]): row[4]
                    for row in connection.execute(
                        select(r.tenant, r.accelerator, r.size_class, r.fleet_bin, func.count())
                        .where(r.fleet_bin.is_not(None))
                        .group_by(r.tenant, r.accelerator, r.size_class, r.fleet_bin)
                    )
                }
            )
            t = tenant_mfu_bins.c
            tenant_stored = Counter(
                {
                    tuple(row[:4]): row[4]
                    for row in connection.execute(
                        select(t.tenant, t.accelerator, t.size_class, t.mfu_bin, t.n_runs).where(
                            t.n_runs != 0
                        )
                    )
                }
            )
            if tenant_expected != tenant_stored:
                problems.append(
                    f"tenant histogram differs from the runs in {len(set(tenant_expected.items()) ^ set(tenant_stored.items()))} cells"
                )
            fleet_expected = Counter(
                {
                    tuple(row[:3]): row[3]
                    for row in connection.execute(
                        select(r.accelerator, r.size_class, r.fleet_bin, func.count())
                        .where(r.fleet_bin.is_not(None), r.accelerator != records_store.CUSTOM_ACCELERATOR)
                        .group_by(r.accelerator, r.size_class, r.fleet_bin)
                    )
                }
            )
            f = fleet_mfu_bins.c
            fleet_stored = Counter(
                {
                    tuple(row[:3]): row[3]
                    for row in connection.execute(
                        select(f.accelerator, f.size_class, f.mfu_bin, f.n_runs).where(f.n_runs != 0)
                    )
                }
            )
            if fleet_expected != fleet_stored:
                problems.append(
                    f"fleet histogram differs from the runs in {len(set(fleet_expected.items()) ^ set(fleet_stored.items()))} cells"
                )
            fleet_groups = len({key[:2] for key in fleet_stored})
            fleet_cells = len(fleet_stored)
            size_classes = sorted({key[1] for key in fleet_stored})
            accelerators = len({key[0] for key in fleet_stored})
    finally:
        engine.dispose()
    return {
        "runs": n_runs,
        "measurements": n_measurements,
        "fleet_groups": fleet_groups,
        "fleet_cells": fleet_cells,
        "accelerators": accelerators,
        "size_classes": size_classes,
        "problems": problems,
    }


def database_size(url: str) -> int:
    if url.startswith("sqlite"):
        path = Path(url.split("///", 1)[1])
        return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return int(connection.execute(text("SELECT pg_database_size(current_database())")).scalar_one())
    finally:
        engine.dispose()


# --------------------------------------------------------------------------------------------------
# One backend, end to end


def _ms(value: float) -> str:
    return f"{value:.1f} ms" if value < 100 else f"{value:.0f} ms"


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def run_backend(
    backend: str, options: Options, after: Callable[[BackendContext], Any] | None = None
) -> dict[str, Any]:
    """Every store benchmark on a fresh database of ``backend``; ``after`` runs once the database is
    loaded (before it is dropped), with the server stopped. Returns the figures and the checks."""
    figures: dict[str, Any] = {"backend": backend, "options": dataclasses.asdict(options)}
    checks: list[Check] = []
    started_all = time.perf_counter()
    with fresh_database(backend) as url:
        keys = {
            "acme": create_key(url, TENANTS[0][0], "read"),
            "ingest": create_key(url, INGEST_TENANT),
            "verify": create_key(url, VERIFY_TENANT),
        }
        server = server_module.start(url)
        after_result = None
        try:
            figures["startup_seconds_empty"] = server.started_seconds
            base = server.base_url
            print(f"[{backend}] server up in {server.started_seconds:.2f} s; ingest benchmarks", flush=True)
            ingest_ids = create_api_runs(base, keys["ingest"], 64, "single")
            counter = StepCounter(ingest_ids)
            ingest = ingest_benchmarks(base, keys["ingest"], ingest_ids, counter, options)
            bulk, bulk_rate, bulk_stored = bulk_benchmark(base, keys["ingest"], options)
            figures["ingest_empty"] = ingest.figures()
            figures["bulk"] = {
                "load": dataclasses.asdict(bulk),
                "measurements_per_second": bulk_rate,
                "stored": bulk_stored,
                "clients": options.bulk_clients,
            }

            loader = BulkLoader(url, chunk_runs=options.chunk_runs)
            try:
                print(f"[{backend}] loading {options.small_runs:,} runs", flush=True)
                small = loader.load(
                    options.small_runs - options.long_runs,
                    options.measurements_per_run,
                    long_runs=options.long_runs,
                    long_run_measurements=options.long_run_measurements,
                )
                sample_ids = small.sample_run_ids
                queries_small = query_benchmarks(base, keys["acme"], sample_ids, small.long_run_ids, options)
                print(f"[{backend}] loading up to {options.runs:,} runs", flush=True)
                big = loader.load(options.runs - options.small_runs, options.measurements_per_run)
            finally:
                loader.close()
            # The same sample at both sizes (runs loaded first), plus some of the later ones.
            sample_big = sample_ids + big.sample_run_ids
            queries_big = query_benchmarks(base, keys["acme"], sample_big, small.long_run_ids, options)
            print(f"[{backend}] single-item ingest at {options.runs:,} runs", flush=True)
            ingest_big = ingest_benchmarks(base, keys["ingest"], ingest_ids, counter, options)
            figures["load"] = {
                "small": {"runs": small.runs, "measurements": small.measurements, "seconds": small.seconds},
                "big": {"runs": big.runs, "measurements": big.measurements, "seconds": big.seconds},
            }
            figures["queries_small"] = {k: dataclasses.asdict(v) for k, v in queries_small.items()}
            figures["queries_big"] = {k: dataclasses.asdict(v) for k, v in queries_big.items()}
            figures["ingest_big"] = ingest_big.figures()

            print(f"[{backend}] verifying", flush=True)
            verify_ids = (
                sample_ids[: max(1, options.verify_runs - 4)]
                + big.sample_run_ids[:2]
                + small.long_run_ids[:1]
                + small.custom_run_ids[:1]
                + big.custom_run_ids[:1]
            )
            started = time.perf_counter()
            figures["verify_api"] = verify_sample(base, keys["acme"], keys["verify"], verify_ids)
            figures["verify_sql"] = verify_histograms(url)
            figures["verify_seconds"] = time.perf_counter() - started
            figures["rss_bytes_after_load"] = server.resident_memory_bytes()
        finally:
            server.stop()
        figures["database_bytes"] = database_size(url)
        if after is not None:
            after_result = after(
                BackendContext(backend, url, keys, ingest_ids, counter, sample_big, small.long_run_ids)
            )
    figures["seconds"] = time.perf_counter() - started_all

    # ---- checks
    for comparison, label in ((ingest, "empty db"), (ingest_big, f"at {options.runs:,} runs loaded")):
        middle = comparison.median_round
        single, noop_db, noop = middle["single"], middle["noop_db"], middle["noop"]
        ratio = single.requests_per_second / noop.requests_per_second
        checks.append(
            Check(
                f"POST measurements, 1 item, {options.connections} conns ({label})",
                f"{single.requests_per_second:,.0f} req/s p50 {single.p50_ms:.1f} p99 {single.p99_ms:.1f} ms",
                f"noop {noop.requests_per_second:,.0f} req/s",
                f"{ratio:.2f}x",
                f"≥ {TARGET_SINGLE_VS_NOOP}x, p99 ≤ {TARGET_SINGLE_P99_MS:g} ms",
                _verdict(
                    ratio >= TARGET_SINGLE_VS_NOOP
                    and single.p99_ms <= TARGET_SINGLE_P99_MS
                    and comparison.non_2xx == 0
                ),
            )
        )
        checks.append(
            Check(
                f"  ratio in each of the {len(comparison.rounds)} rounds (the median's round above)",
                ", ".join(f"{value:.2f}x" for value in comparison.ratios),
            )
        )
        checks.append(
            Check(
                "  same round, against POST /bench/noop-db (opens an empty write transaction)",
                "",
                f"noop-db {noop_db.requests_per_second:,.0f} req/s",
                f"{single.requests_per_second / noop_db.requests_per_second:.2f}x",
            )
        )
    bulk_target = TARGET_BULK_PER_SECOND[backend]
    checks.append(
        Check(
            f"bulk ingest, 10,000/request, {options.bulk_clients} clients",
            f"{bulk_rate:,.0f} meas/s ({bulk.requests_per_second:.1f} req/s, p50 {_ms(bulk.p50_ms)})",
            "",
            "",
            f"≥ {bulk_target:,}/s",
            _verdict(bulk_rate >= bulk_target and bulk.errors == 0),
        )
    )
    load_rate_big = big.measurements / big.seconds if big.seconds else 0.0
    checks.append(
        Check(
            "bulk loader (direct, not HTTP)",
            f"{big.runs:,} runs + {big.measurements:,} meas. in {big.seconds:.0f} s ({load_rate_big:,.0f} meas/s)",
        )
    )
    base_small, base_big = queries_small["noop"], queries_big["noop"]
    small_label = f"{options.small_runs // 1000}k" if options.small_runs >= 1000 else str(options.small_runs)
    big_label = f"{options.runs / 1e6:g}M" if options.runs >= 1_000_000 else f"{options.runs // 1000}k"
    for key, target in (
        ("list_default", TARGET_LIST_P50_MS),
        ("list_accelerator_by_mfu", TARGET_LIST_P50_MS),
        ("list_model_min_mfu_by_start", TARGET_LIST_P50_MS),
        ("efficiency", TARGET_EFFICIENCY_P50_MS),
        ("efficiency_long", TARGET_EFFICIENCY_P50_MS),
        ("stats", TARGET_STATS_P50_MS),
        ("stats_rank", TARGET_STATS_P50_MS),
    ):
        if key not in queries_big:
            continue
        a, b = queries_small[key], queries_big[key]
        growth = b.p50_ms / a.p50_ms
        is_list = key.startswith("list")
        verdict_ok = b.p50_ms <= target and non_2xx(b) == 0 and (growth <= TARGET_LIST_GROWTH or not is_list)
        checks.append(
            Check(
                f"{b.name} p50 @{big_label}",
                f"{_ms(b.p50_ms)} (p99 {_ms(b.p99_ms)})",
                f"@{small_label}: {_ms(a.p50_ms)}",
                f"{growth:.2f}x",
                f"≤ {target:g} ms" + (f", ≤ {TARGET_LIST_GROWTH:g}x" if is_list else ""),
                _verdict(verdict_ok),
            )
        )
    checks.append(
        Check(
            "GET /bench/noop p50 (trivial, 1 conn)",
            f"{_ms(base_big.p50_ms)} @{big_label}",
            f"@{small_label}: {_ms(base_small.p50_ms)}",
        )
    )
    api, sql = figures["verify_api"], figures["verify_sql"]
    verified = not api["mismatches"] and not sql["problems"]
    checks.append(
        Check(
            "loaded summaries = API ingest of the same measurements",
            f"{api['runs']} runs, {api['measurements']:,} meas.; histograms over {sql['runs']:,} runs, "
            f"{sql['measurements']:,} meas.",
            "",
            "",
            "0 mismatches",
            _verdict(verified),
        )
    )
    checks.append(
        Check(
            "server start-up / RSS after load / database size",
            f"{figures['startup_seconds_empty']:.2f} s / {figures['rss_bytes_after_load'] / 2**20:.0f} MiB / "
            f"{figures['database_bytes'] / 2**30:.2f} GiB",
        )
    )
    figures["checks"] = [dataclasses.asdict(c) for c in checks]
    figures["after"] = after_result
    return figures


def format_checks(title: str, checks: list[dict[str, Any]]) -> str:
    widths = (62, 58, 26, 7, 18, 7)
    header = ("check", "measured", "baseline (same run)", "ratio", "target", "verdict")
    lines = [title, "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines.append("-" * (sum(widths) + 2 * (len(widths) - 1)))
    for c in checks:
        cells = (c["name"], c["value"], c["baseline"], c["ratio"], c["target"], c["verdict"])
        lines.append("  ".join(str(v).ljust(w) for v, w in zip(cells, widths, strict=True)).rstrip())
    return "\n".join(lines)


def markdown_checks(title: str, checks: list[dict[str, Any]]) -> str:
    lines = [
        f"### {title}",
        "",
        "| check | measured | baseline (same run) | ratio | target | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for c in checks:
        cells = (c["name"].strip(), c["value"], c["baseline"], c["ratio"], c["target"], c["verdict"])
        lines.append("| " + " | ".join(str(v).replace("|", "\\|") for v in cells) + " |")
    return "\n".join(lines)


def title_for(figures: dict[str, Any]) -> str:
    backend = "SQLite" if figures["backend"] == "sqlite" else "PostgreSQL"
    load = figures["load"]
    runs_total = load["small"]["runs"] + load["big"]["runs"]
    meas_total = load["small"]["measurements"] + load["big"]["measurements"]
    return (
        f"{backend}: {runs_total:,} runs / {meas_total:,} measurements loaded "
        f"(+ {figures['verify_sql']['measurements'] - meas_total:,} through the API); "
        f"{figures['seconds'] / 60:.1f} min"
    )


def short_machine() -> str:
    description = server_module.machine_description()
    cores, cpu = description.split(",")[0:2]
    slug = "-".join(part for part in cpu.lower().replace("(r)", "").replace("(tm)", "").split() if part)
    return f"{cores.split()[0]}c-{slug}"[:40]


def write_results(stem: str, markdown: str, payload: dict[str, Any]) -> tuple[Path, Path]:
    directory = Path(__file__).resolve().parent / "results"
    directory.mkdir(exist_ok=True)
    md, js = directory / f"{stem}.md", directory / f"{stem}.json"
    md.write_text(markdown)
    js.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    return md, js


def code_version() -> str:
    """The commit measured (``+dirty`` when service/ or migrations/ have uncommitted changes), read
    when a run starts."""

    def git(*args: str) -> str:
        result = subprocess.run(
            ["git", *args], cwd=server_module.ROOT, capture_output=True, text=True, check=False
        )
        return result.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + ("+dirty" if git("status", "--porcelain", "--", "service", "migrations") else "")


def conditions() -> dict[str, Any]:
    load1, load5, load15 = (float(v) for v in Path("/proc/loadavg").read_text().split()[:3])
    return {"load_average": [load1, load5, load15], "at": datetime.now(UTC).isoformat(timespec="seconds")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--quick", action="store_true", help="smoke run: 20k runs, short loads")
    parser.add_argument("--runs", type=int, help="runs loaded in all (default 1,000,000; quick 20,000)")
    parser.add_argument("--measurements-per-run", type=int, help="default 10")
    parser.add_argument(
        "--small-runs", type=int, help="the first measuring point (default 10,000; quick 2,000)"
    )
    parser.add_argument("--long-runs", type=int, help="runs with many measurements (default 10; quick 2)")
    parser.add_argument("--long-run-measurements", type=int, help="default 20,000; quick 5,000")
    parser.add_argument("--seconds", type=float, help="per throughput measurement (default 6; quick 2.5)")
    parser.add_argument("--connections", type=int, help="for the single-item ingest (default 16)")
    parser.add_argument("--bulk-clients", type=int, help="default 4")
    parser.add_argument("--no-results", action="store_true", help="do not write benchmarks/results/")
    args = parser.parse_args(argv)
    overrides = {
        name: getattr(args, name)
        for name in (
            "runs",
            "measurements_per_run",
            "small_runs",
            "long_runs",
            "long_run_measurements",
            "seconds",
            "connections",
            "bulk_clients",
        )
        if getattr(args, name) is not None
    }
    options = Options.quick_mode(**overrides) if args.quick else Options(**overrides)
    if options.small_runs >= options.runs:
        parser.error("--small-runs must be below --runs")
    backends = ("sqlite", "postgresql") if args.backend == "both" else (args.backend,)
    version = code_version()
    print(
        f"machine: {server_module.machine_description()}; load average {conditions()['load_average']}; "
        f"code {version}"
    )
    results = []
    for backend in backends:
        if backend == "postgresql" and not postgres_available():
            print(f"PostgreSQL: skipped, no server at {ADMIN_POSTGRES_URL}")
            continue
        figures = run_backend(backend, options)
        figures["conditions_after"] = conditions()
        results.append(figures)
        print()
        print(format_checks(title_for(figures), figures["checks"]))
        for problem in figures["verify_api"]["mismatches"][:10] + figures["verify_sql"]["problems"]:
            print(f"  mismatch: {problem}")
        print(flush=True)
    failed = any(c["verdict"] == "FAIL" for figures in results for c in figures["checks"])
    if results and not args.no_results:
        stem = f"{datetime.now(UTC):%Y-%m-%d}-{short_machine()}-store-{'-'.join(backends)}"
        if options.quick:
            stem += "-quick"
        # The commit in the name: a later run the same day on the same kind of machine adds a file.
        stem += "-" + version.replace("+", "-")
        markdown = [
            f"# bench_store — {server_module.machine_description()}",
            "",
            f"Command: `python -m benchmarks.bench_store {' '.join(argv or sys.argv[1:])}` — code {version}",
            "",
        ]
        for figures in results:
            markdown += [markdown_checks(title_for(figures), figures["checks"]), ""]
            markdown.append(f"Load average after: {figures['conditions_after']['load_average']}")
            markdown.append("")
        md, js = write_results(
            stem,
            "\n".join(markdown),
            {"machine": server_module.machine_description(), "code": version, "results": results},
        )
        print(f"wrote {md} and {js}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
