"""Schema migrations: run them (`teff db upgrade`) and check that a database is current.

The app never migrates on start (two replicas would race, and a bad migration should fail a
deploy step, not a serving pod); it refuses to serve on an out-of-date schema instead.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

import migrations

MIGRATIONS_DIR = Path(migrations.__file__).parent


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("file_template", "%%(year)d_%%(month).2d_%%(day).2d_%%(slug)s_%%(rev)s")
    # Alembic's ini parser treats % as interpolation.
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(url), revision)


@lru_cache(maxsize=1)
def head_revisions() -> tuple[str, ...]:
    script = ScriptDirectory(str(MIGRATIONS_DIR))
    return tuple(sorted(script.get_heads()))


def current_revisions(engine: Engine) -> tuple[str, ...]:
    with engine.connect() as connection:
        return tuple(sorted(MigrationContext.configure(connection).get_current_heads()))


class SchemaBehind(Exception):
    """The database is not at the code's migration head."""


def ensure_schema_current(engine: Engine) -> None:
    current = current_revisions(engine)
    heads = head_revisions()
    if current != heads:
        found = ", ".join(current) or "no schema (empty database)"
        raise SchemaBehind(
            f"database schema is at {found} but this version needs {', '.join(heads)}; "
            "run `teff db upgrade` (a separate deploy step) and start again"
        )
