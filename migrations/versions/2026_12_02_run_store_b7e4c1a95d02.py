"""run store: runs, tags, measurements, per-run and fleet MFU histograms, idempotency keys

Revision ID: b7e4c1a95d02
Revises: 0001
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from service.store.types import UtcDateTime

revision: str = "b7e4c1a95d02"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("pk", sa.Integer(), nullable=False),
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("started_at", UtcDateTime(), nullable=False),
        sa.Column("finished_at", UtcDateTime(), nullable=True),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("model_name", sa.String(200), nullable=False),
        sa.Column("parameters_total", sa.BigInteger(), nullable=False),
        sa.Column("parameters_active", sa.BigInteger(), nullable=False),
        sa.Column("parameters_non_embedding", sa.BigInteger(), nullable=False),
        sa.Column("size_class", sa.String(16), nullable=False),
        sa.Column("accelerator", sa.String(100), nullable=False),
        sa.Column("accelerator_name", sa.String(200), nullable=False),
        sa.Column("device_count", sa.Integer(), nullable=False),
        sa.Column("precision", sa.String(8), nullable=False),
        sa.Column("seq_len_tokens", sa.Integer(), nullable=False),
        sa.Column("global_batch_tokens", sa.BigInteger(), nullable=False),
        sa.Column("convention", sa.String(20), nullable=False),
        sa.Column("recompute", sa.String(10), nullable=False),
        sa.Column("model_flops_per_token", sa.Double(), nullable=False),
        sa.Column("hardware_flops_per_token", sa.Double(), nullable=False),
        sa.Column("peak_tflops_per_device", sa.Double(), nullable=False),
        sa.Column("framework", sa.String(100), nullable=True),
        sa.Column("cluster", sa.String(200), nullable=True),
        sa.Column("scheduler_job_id", sa.String(200), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.Column("token_budget_tokens", sa.BigInteger(), nullable=True),
        sa.Column("price_per_device_hour", sa.Double(), nullable=True),
        sa.Column("measurement_count", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("first_measured_at", UtcDateTime(), nullable=True),
        sa.Column("latest_step", sa.BigInteger(), nullable=True),
        sa.Column("latest_measured_at", UtcDateTime(), nullable=True),
        sa.Column("latest_mfu", sa.Double(), nullable=True),
        sa.Column("latest_tokens_per_second", sa.Double(), nullable=True),
        sa.Column("median_mfu", sa.Double(), nullable=False, server_default="-1.0"),
        sa.Column("fleet_bin", sa.Integer(), nullable=True),
        sa.CheckConstraint("status IN ('running', 'finished', 'failed')", name=op.f("ck_runs_status")),
        sa.PrimaryKeyConstraint("pk", name=op.f("pk_runs")),
        sa.UniqueConstraint("id", name=op.f("uq_runs_id")),
        sa.UniqueConstraint(
            "tenant",
            "cluster",
            "scheduler_job_id",
            "attempt",
            name=op.f("uq_runs_tenant_cluster_scheduler_job_id_attempt"),
        ),
    )
    op.create_index("ix_runs_tenant_started_at", "runs", ["tenant", "started_at", "pk"])
    op.create_index("ix_runs_tenant_median_mfu", "runs", ["tenant", "median_mfu", "pk"])
    op.create_index("ix_runs_tenant_accelerator", "runs", ["tenant", "accelerator", "started_at"])
    op.create_index("ix_runs_tenant_model_name", "runs", ["tenant", "model_name", "started_at"])
    op.create_index("ix_runs_tenant_parameters_total", "runs", ["tenant", "parameters_total"])
    op.create_index("ix_runs_tenant_status", "runs", ["tenant", "status", "started_at"])

    op.create_table(
        "run_tags",
        sa.Column("run_pk", sa.Integer(), nullable=False),
        sa.Column("tag", sa.String(100), nullable=False),
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_pk"], ["runs.pk"], name=op.f("fk_run_tags_run_pk_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_pk", "tag", name=op.f("pk_run_tags")),
    )
    op.create_index("ix_run_tags_tenant_tag", "run_tags", ["tenant", "tag", "run_pk"])

    op.create_table(
        "measurements",
        sa.Column("run_pk", sa.Integer(), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("measured_at", UtcDateTime(), nullable=False),
        sa.Column("throughput_form", sa.String(32), nullable=False),
        sa.Column("throughput_value", sa.Double(), nullable=False),
        sa.Column("global_batch_tokens", sa.BigInteger(), nullable=True),
        sa.Column("global_batch_sequences", sa.BigInteger(), nullable=True),
        sa.Column("tokens_per_second", sa.Double(), nullable=False),
        sa.Column("tokens_per_second_per_device", sa.Double(), nullable=False),
        sa.Column("mfu", sa.Double(), nullable=False),
        sa.Column("hfu", sa.Double(), nullable=False),
        sa.Column("achieved_tflops_per_device", sa.Double(), nullable=False),
        sa.Column("loss", sa.Double(), nullable=True),
        sa.Column("memory_bytes", sa.BigInteger(), nullable=True),
        sa.Column("grad_norm_sq_small", sa.Double(), nullable=True),
        sa.Column("grad_norm_sq_big", sa.Double(), nullable=True),
        sa.Column("batch_small_tokens", sa.BigInteger(), nullable=True),
        sa.Column("batch_big_tokens", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_pk"], ["runs.pk"], name=op.f("fk_measurements_run_pk_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_pk", "step", name=op.f("pk_measurements")),
        sqlite_with_rowid=False,
    )

    op.create_table(
        "run_mfu_bins",
        sa.Column("run_pk", sa.Integer(), nullable=False),
        sa.Column("mfu_bin", sa.Integer(), nullable=False),
        sa.Column("n_measurements", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_pk"], ["runs.pk"], name=op.f("fk_run_mfu_bins_run_pk_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_pk", "mfu_bin", name=op.f("pk_run_mfu_bins")),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "tenant_mfu_bins",
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("accelerator", sa.String(100), nullable=False),
        sa.Column("size_class", sa.String(16), nullable=False),
        sa.Column("mfu_bin", sa.Integer(), nullable=False),
        sa.Column("n_runs", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint(
            "tenant", "accelerator", "size_class", "mfu_bin", name=op.f("pk_tenant_mfu_bins")
        ),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "fleet_mfu_bins",
        sa.Column("accelerator", sa.String(100), nullable=False),
        sa.Column("size_class", sa.String(16), nullable=False),
        sa.Column("mfu_bin", sa.Integer(), nullable=False),
        sa.Column("n_runs", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("accelerator", "size_class", "mfu_bin", name=op.f("pk_fleet_mfu_bins")),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "idempotency_keys",
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("key", sa.String(200), nullable=False),
        sa.Column("operation", sa.String(64), nullable=False),
        sa.Column("request_hash", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("response_status", sa.Integer(), nullable=True),
        sa.Column("response_body", sa.Text(), nullable=True),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("claimed_at", UtcDateTime(), nullable=False),
        sa.CheckConstraint("state IN ('in_flight', 'done')", name=op.f("ck_idempotency_keys_state")),
        sa.PrimaryKeyConstraint("tenant", "key", name=op.f("pk_idempotency_keys")),
    )
    op.create_index("ix_idempotency_keys_created_at", "idempotency_keys", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_idempotency_keys_created_at", table_name="idempotency_keys")
    op.drop_table("idempotency_keys")
    op.drop_table("fleet_mfu_bins")
    op.drop_table("tenant_mfu_bins")
    op.drop_table("run_mfu_bins")
    op.drop_table("measurements")
    op.drop_index("ix_run_tags_tenant_tag", table_name="run_tags")
    op.drop_table("run_tags")
    for name in (
        "ix_runs_tenant_status",
        "ix_runs_tenant_parameters_total",
        "ix_runs_tenant_model_name",
        "ix_runs_tenant_accelerator",
        "ix_runs_tenant_median_mfu",
        "ix_runs_tenant_started_at",
    ):
        op.drop_index(name, table_name="runs")
    op.drop_table("runs")
