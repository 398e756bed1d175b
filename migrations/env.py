"""Alembic environment: online migrations only, one transaction, one migrator at a time.

Two instances starting at once (two pods, two compose replicas) must not both migrate: PostgreSQL
takes a transaction-scoped advisory lock; SQLite takes its write lock up front (BEGIN IMMEDIATE).
The second migrator then finds the schema at head and does nothing.
"""

from __future__ import annotations

from alembic import context

from service.store.engine import WRITE_OPTION, build_engine
from service.store.tables import metadata

# An arbitrary constant naming "the teff schema migration" among advisory locks.
MIGRATION_LOCK_ID = 7_317_001

config = context.config


def run_migrations_online() -> None:
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no database URL given to Alembic (set sqlalchemy.url)")
    engine = build_engine(url, pool_size=1)
    try:
        with engine.connect().execution_options(**{WRITE_OPTION: True}) as connection:
            with connection.begin():
                if connection.dialect.name == "postgresql":
                    connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_ID})")
                context.configure(
                    connection=connection,
                    target_metadata=metadata,
                    render_as_batch=connection.dialect.name == "sqlite",
                    compare_type=True,
                )
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (SQL script) migrations are not supported; run `teff db upgrade`")
run_migrations_online()
