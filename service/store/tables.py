"""The tables (SQLAlchemy Core). Every change here comes with an Alembic revision in migrations/."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    Column,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from service.store.types import UtcDateTime

# Deterministic constraint names, so migrations can refer to them on every database
# (fastapi-best-practices; Alembic "naming conventions").
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", Integer, primary_key=True),
    # The non-secret part of the key: finds the row; the secret part is only ever compared as a hash.
    Column("prefix", String(16), nullable=False, unique=True),
    Column("key_hash", String(64), nullable=False),
    Column("tenant", String(64), nullable=False),
    Column("name", String(200), nullable=False, server_default=""),
    Column("scopes", String(100), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("revoked_at", UtcDateTime, nullable=True),
    Index("ix_api_keys_tenant", "tenant"),
)


# --------------------------------------------------------------------------------------------------
# Runs (issue 5). Every query is tenant-first; every index starts with the tenant.

#: ``runs.median_mfu`` of a run without measurements (the API shows null). A real value keeps the
#: column NOT NULL, so keyset pagination and its index order the same way on SQLite and PostgreSQL
#: (runs without measurements sort lowest).
NO_MFU = -1.0
RUN_STATUSES = ("running", "finished", "failed")

runs = Table(
    "runs",
    metadata,
    # Internal key (foreign keys, keyset tie-breaker); the public id is random so ids say nothing
    # about other tenants' volume.
    Column("pk", Integer, primary_key=True),
    Column("id", String(32), nullable=False, unique=True),
    Column("tenant", String(64), nullable=False),
    Column("status", String(16), nullable=False),
    Column("started_at", UtcDateTime, nullable=False),
    Column("finished_at", UtcDateTime, nullable=True),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    # The description as given (model, hardware and parallel layout as sent), for echoing back.
    Column("spec", JSON, nullable=False),
    Column("model_name", String(200), nullable=False),
    Column("parameters_total", BigInteger, nullable=False),
    Column("parameters_active", BigInteger, nullable=False),
    Column("parameters_non_embedding", BigInteger, nullable=False),
    Column("size_class", String(16), nullable=False),
    # Catalog id, or "custom" for a caller-described part (kept out of cross-tenant statistics).
    Column("accelerator", String(100), nullable=False),
    Column("accelerator_name", String(200), nullable=False),
    Column("device_count", Integer, nullable=False),
    Column("precision", String(8), nullable=False),
    Column("seq_len_tokens", Integer, nullable=False),
    Column("global_batch_tokens", BigInteger, nullable=False),
    Column("convention", String(20), nullable=False),
    Column("recompute", String(10), nullable=False),
    # Fixed at creation, so a measurement's MFU is its tokens/s times a per-run constant.
    Column("model_flops_per_token", Double, nullable=False),
    Column("hardware_flops_per_token", Double, nullable=False),
    Column("peak_tflops_per_device", Double, nullable=False),
    Column("framework", String(100), nullable=True),
    Column("cluster", String(200), nullable=True),
    Column("scheduler_job_id", String(200), nullable=True),
    Column("attempt", Integer, nullable=True),
    Column("token_budget_tokens", BigInteger, nullable=True),
    Column("price_per_device_hour", Double, nullable=True),
    # The summary, maintained on ingest so lists and statistics never read the history.
    Column("measurement_count", Integer, nullable=False, server_default="0"),
    Column("first_measured_at", UtcDateTime, nullable=True),
    Column("latest_step", BigInteger, nullable=True),
    Column("latest_measured_at", UtcDateTime, nullable=True),
    Column("latest_mfu", Double, nullable=True),
    Column("latest_tokens_per_second", Double, nullable=True),
    Column("median_mfu", Double, nullable=False, server_default=str(NO_MFU)),
    # The fleet-histogram bin this run's median is counted in (None: not counted yet).
    Column("fleet_bin", Integer, nullable=True),
    # The goodput of the run's job (every attempt), set when any of its runs receives events.
    Column("goodput", Double, nullable=True),
    CheckConstraint("status IN ('running', 'finished', 'failed')", name="status"),
    # A scheduler's job attempt is one run (NULLs never collide: runs without a job id are free).
    UniqueConstraint("tenant", "cluster", "scheduler_job_id", "attempt"),
    Index("ix_runs_tenant_started_at", "tenant", "started_at", "pk"),
    Index("ix_runs_tenant_median_mfu", "tenant", "median_mfu", "pk"),
    Index("ix_runs_tenant_accelerator", "tenant", "accelerator", "started_at"),
    Index("ix_runs_tenant_model_name", "tenant", "model_name", "started_at"),
    Index("ix_runs_tenant_parameters_total", "tenant", "parameters_total"),
    Index("ix_runs_tenant_status", "tenant", "status", "started_at"),
)

run_tags = Table(
    "run_tags",
    metadata,
    Column("run_pk", Integer, ForeignKey("runs.pk", ondelete="CASCADE"), primary_key=True),
    Column("tag", String(100), primary_key=True),
    Column("tenant", String(64), nullable=False),
    Index("ix_run_tags_tenant_tag", "tenant", "tag", "run_pk"),
)

# The history: one row per (run, step); first write wins. SQLite stores it clustered on the key.
measurements = Table(
    "measurements",
    metadata,
    Column("run_pk", Integer, ForeignKey("runs.pk", ondelete="CASCADE"), primary_key=True),
    Column("step", BigInteger, primary_key=True),
    Column("measured_at", UtcDateTime, nullable=False),
    # The throughput as sent: its form, its value and the batch a step time came with.
    Column("throughput_form", String(32), nullable=False),
    Column("throughput_value", Double, nullable=False),
    Column("global_batch_tokens", BigInteger, nullable=True),
    Column("global_batch_sequences", BigInteger, nullable=True),
    # Derived at ingest.
    Column("tokens_per_second", Double, nullable=False),
    Column("tokens_per_second_per_device", Double, nullable=False),
    Column("mfu", Double, nullable=False),
    Column("hfu", Double, nullable=False),
    Column("achieved_tflops_per_device", Double, nullable=False),
    Column("loss", Double, nullable=True),
    Column("memory_bytes", BigInteger, nullable=True),
    Column("grad_norm_sq_small", Double, nullable=True),
    Column("grad_norm_sq_big", Double, nullable=True),
    Column("batch_small_tokens", BigInteger, nullable=True),
    Column("batch_big_tokens", BigInteger, nullable=True),
    sqlite_with_rowid=False,
)

# Per-run MFU histogram (bins of service.domain.fleet.MFU_BIN_WIDTH): the run's median without
# reading its history.
run_mfu_bins = Table(
    "run_mfu_bins",
    metadata,
    Column("run_pk", Integer, ForeignKey("runs.pk", ondelete="CASCADE"), primary_key=True),
    Column("mfu_bin", Integer, primary_key=True, autoincrement=False),
    Column("n_measurements", Integer, nullable=False),
    sqlite_with_rowid=False,
)

# A long run's MFU series in step buckets (service.domain.fleet.SeriesBin; kept from the moment it
# has more than fleet.EXACT_SERIES_MAX measurements, in the ingest transaction): its efficiency reads
# at most fleet.SERIES_BUCKETS_MAX rows instead of its history. All of a run's rows share width_steps.
run_series_bins = Table(
    "run_series_bins",
    metadata,
    Column("run_pk", Integer, ForeignKey("runs.pk", ondelete="CASCADE"), primary_key=True),
    Column("bucket", BigInteger, primary_key=True, autoincrement=False),
    Column("width_steps", BigInteger, nullable=False),
    Column("n_measurements", Integer, nullable=False),
    Column("mfu_sum", Double, nullable=False),
    Column("mfu_min", Double, nullable=False),
    Column("mfu_max", Double, nullable=False),
    Column("tokens_per_second_sum", Double, nullable=False),
    Column("first_measured_at", UtcDateTime, nullable=False),
    Column("last_measured_at", UtcDateTime, nullable=False),
    Column("last_step", BigInteger, nullable=False),
    sqlite_with_rowid=False,
)

# Histograms of run median MFU: per tenant (the caller's own statistics) and across tenants (the
# fleet, a few thousand rows whatever the number of runs). Maintained in the ingest/delete transaction.
tenant_mfu_bins = Table(
    "tenant_mfu_bins",
    metadata,
    Column("tenant", String(64), primary_key=True),
    Column("accelerator", String(100), primary_key=True),
    Column("size_class", String(16), primary_key=True),
    Column("mfu_bin", Integer, primary_key=True, autoincrement=False),
    Column("n_runs", Integer, nullable=False),
    sqlite_with_rowid=False,
)

fleet_mfu_bins = Table(
    "fleet_mfu_bins",
    metadata,
    Column("accelerator", String(100), primary_key=True),
    Column("size_class", String(16), primary_key=True),
    Column("mfu_bin", Integer, primary_key=True, autoincrement=False),
    Column("n_runs", Integer, nullable=False),
    sqlite_with_rowid=False,
)

# Idempotency-Key records: a committed "in flight" claim, then the answer, in the database so that
# every replica sees them.
idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("tenant", String(64), primary_key=True),
    Column("key", String(200), primary_key=True),
    Column("operation", String(64), nullable=False),
    Column("request_hash", String(64), nullable=False),
    Column("state", String(16), nullable=False),
    Column("response_status", Integer, nullable=True),
    Column("response_body", Text, nullable=True),
    Column("created_at", UtcDateTime, nullable=False),
    Column("claimed_at", UtcDateTime, nullable=False),
    CheckConstraint("state IN ('in_flight', 'done')", name="state"),
    Index("ix_idempotency_keys_created_at", "created_at"),
)

# Run events (issue 21: goodput): job start/end, first step, checkpoint saves and restores,
# evaluations, stalls, hangs, failures and restarts. A (run, event id) is stored once, so a client's
# retried POST changes nothing. ``attempt``: the attempt the event names, when it differs from the
# run's own (runs that share a scheduler job id are the attempts of one job).
run_events = Table(
    "run_events",
    metadata,
    Column("pk", Integer, primary_key=True),
    Column("run_pk", Integer, ForeignKey("runs.pk", ondelete="CASCADE"), nullable=False),
    Column("tenant", String(64), nullable=False),
    Column("event_id", String(100), nullable=False),
    Column("kind", String(40), nullable=False),
    Column("at", UtcDateTime, nullable=False),
    Column("attempt", Integer, nullable=True),
    Column("step", BigInteger, nullable=True),
    Column("duration_seconds", Double, nullable=True),
    Column("reason", String(500), nullable=True),
    Column("received_at", UtcDateTime, nullable=False),
    UniqueConstraint("run_pk", "event_id"),
    Index("ix_run_events_run_pk_at", "run_pk", "at"),
)
