from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect

from service.store import migrate
from service.store.engine import build_engine
from service.store.tables import metadata


def test_the_migrations_have_a_single_head() -> None:
    heads = ScriptDirectory(str(migrate.MIGRATIONS_DIR)).get_heads()
    assert len(heads) == 1, heads


def test_upgrade_to_head_then_down_to_base_then_up_again(empty_database_url: str) -> None:
    engine = build_engine(empty_database_url, pool_size=1)
    try:
        migrate.upgrade(empty_database_url)
        assert migrate.current_revisions(engine) == migrate.head_revisions()
        migrate.downgrade(empty_database_url, "base")
        assert migrate.current_revisions(engine) == ()
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
        migrate.upgrade(empty_database_url)
        migrate.ensure_schema_current(engine)
    finally:
        engine.dispose()


def test_the_tables_match_the_migrated_schema(database_url: str) -> None:
    engine = build_engine(database_url, pool_size=1)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            differences = compare_metadata(context, metadata)
        assert differences == []
    finally:
        engine.dispose()


def test_an_empty_database_is_reported_behind(empty_database_url: str) -> None:
    engine = build_engine(empty_database_url, pool_size=1)
    try:
        try:
            migrate.ensure_schema_current(engine)
        except migrate.SchemaBehind as exc:
            assert "teff db upgrade" in str(exc)
        else:
            raise AssertionError("an empty database must be reported as behind")
    finally:
        engine.dispose()
