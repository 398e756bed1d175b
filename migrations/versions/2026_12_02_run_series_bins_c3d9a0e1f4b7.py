"""run series bins: a long run's MFU series in step buckets, kept on ingest

Revision ID: c3d9a0e1f4b7
Revises: b7e4c1a95d02
Create Date: 2026-12-02

No backfill: a run that already has more measurements than the exact-series limit gets its buckets
built from its measurements at its next ingest, and until then its efficiency groups its history as
before (service.api.services.runs reads the buckets only when they account for every measurement).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from service.store.types import UtcDateTime

revision: str = "c3d9a0e1f4b7"
down_revision: str | None = "b7e4c1a95d02"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "run_series_bins",
        sa.Column("run_pk", sa.Integer(), nullable=False),
        sa.Column("bucket", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("width_steps", sa.BigInteger(), nullable=False),
        sa.Column("n_measurements", sa.Integer(), nullable=False),
        sa.Column("mfu_sum", sa.Double(), nullable=False),
        sa.Column("mfu_min", sa.Double(), nullable=False),
        sa.Column("mfu_max", sa.Double(), nullable=False),
        sa.Column("tokens_per_second_sum", sa.Double(), nullable=False),
        sa.Column("first_measured_at", UtcDateTime(), nullable=False),
        sa.Column("last_measured_at", UtcDateTime(), nullable=False),
        sa.Column("last_step", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_pk"], ["runs.pk"], name=op.f("fk_run_series_bins_run_pk_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_pk", "bucket", name=op.f("pk_run_series_bins")),
        sqlite_with_rowid=False,
    )


def downgrade() -> None:
    op.drop_table("run_series_bins")
