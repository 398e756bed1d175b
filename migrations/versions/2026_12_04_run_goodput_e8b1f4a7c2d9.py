"""runs.goodput: the goodput of the run's job, kept on event ingest for fleet statistics

Revision ID: e8b1f4a7c2d9
Revises: d5a2e8f1c6b3
Create Date: 2026-12-04

A nullable column, nothing to backfill here: a job's goodput is computed from its events the next
time any of its runs receives one (runs without events have none, as their goodput answer says).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "e8b1f4a7c2d9"
down_revision: str | None = "d5a2e8f1c6b3"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("goodput", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("goodput")
