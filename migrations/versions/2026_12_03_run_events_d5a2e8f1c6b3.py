"""run events: job phases (start-up, checkpoints, evaluations, stalls, failures) for goodput

Revision ID: d5a2e8f1c6b3
Revises: c3d9a0e1f4b7
Create Date: 2026-12-03

A new table, nothing to backfill: runs recorded before it have no events, and their goodput answer
says so.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from service.store.types import UtcDateTime

revision: str = "d5a2e8f1c6b3"
down_revision: str | None = "c3d9a0e1f4b7"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "run_events",
        sa.Column("pk", sa.Integer(), nullable=False),
        sa.Column("run_pk", sa.Integer(), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("event_id", sa.String(length=100), nullable=False),
        sa.Column("kind", sa.String(length=40), nullable=False),
        sa.Column("at", UtcDateTime(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.Column("step", sa.BigInteger(), nullable=True),
        sa.Column("duration_seconds", sa.Double(), nullable=True),
        sa.Column("reason", sa.String(length=500), nullable=True),
        sa.Column("received_at", UtcDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_pk"], ["runs.pk"], name=op.f("fk_run_events_run_pk_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("pk", name=op.f("pk_run_events")),
        sa.UniqueConstraint("run_pk", "event_id", name=op.f("uq_run_events_run_pk_event_id")),
    )
    op.create_index("ix_run_events_run_pk_at", "run_events", ["run_pk", "at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_run_events_run_pk_at", table_name="run_events")
    op.drop_table("run_events")
