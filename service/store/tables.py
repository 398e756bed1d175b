"""The tables (SQLAlchemy Core). Every change here comes with an Alembic revision in migrations/."""

from __future__ import annotations

from sqlalchemy import Column, Index, Integer, MetaData, String, Table

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
