"""Settings from the environment (12-factor), validated once at start.

Every variable is prefixed ``TEFF_``; the database URL is also read from the conventional
``DATABASE_URL``. A bad value stops the process with a message naming the variable
(see :func:`load_settings`).
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

ENV_PREFIX = "TEFF_"


class SettingsError(Exception):
    """A setting has a bad value; the message names the environment variable."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    database_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("TEFF_DATABASE_URL", "DATABASE_URL"),
        description="SQLAlchemy URL; default: a SQLite file in the data directory. "
        "PostgreSQL: postgresql+psycopg://user:password@host:5432/db",
    )
    data_dir: Path = Field(default=Path("data"), description="where the default SQLite file lives")
    host: str = Field(default="127.0.0.1", description="address to listen on")
    port: int = Field(default=8000, ge=1, le=65535, description="port to listen on")
    workers: int = Field(default=1, ge=1, le=64, description="uvicorn worker processes")
    log_level: Literal["debug", "info", "warning", "error"] = Field(default="info")
    log_format: Literal["json", "text"] = Field(default="json")
    max_body_bytes: int = Field(
        default=8 * 1024 * 1024,
        ge=1024,
        description="largest request body accepted; larger answers 413",
    )
    max_batch_items: int = Field(default=1000, ge=1, description="items per /v1/mfu/batch call")
    max_measurements_per_request: int = Field(default=10_000, ge=1)
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="comma-separated origins allowed by CORS; empty = CORS off"
    )
    require_api_key_for_estimates: bool = Field(
        default=False, description="when true, the stateless estimate endpoints also need an API key"
    )
    db_pool_size: int = Field(default=10, ge=1, le=200, description="PostgreSQL connections per process")
    db_busy_timeout_ms: int = Field(default=30_000, ge=0, description="SQLite busy timeout")
    benchmark_routes: bool = Field(
        default=False,
        description="mount trivial GET/POST /bench/noop routes (baselines for benchmarks; not in the contract)",
    )
    check_schema_on_start: bool = Field(
        default=True, description="refuse to serve when the database schema is behind the code"
    )

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _split_origins(cls, value: object) -> object:
        if isinstance(value, str):
            return [origin.strip() for origin in value.split(",") if origin.strip()]
        return value

    @field_validator("database_url")
    @classmethod
    def _known_database(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if value.startswith("postgres://") or value.startswith("postgresql://"):
            # Plain postgresql:// would pick psycopg2; this service ships psycopg 3.
            value = "postgresql+psycopg://" + value.split("://", 1)[1]
        if not (value.startswith("sqlite") or value.startswith("postgresql+psycopg://")):
            raise ValueError("use sqlite:///path/to/file.db or postgresql+psycopg://user:pw@host:port/db")
        return value

    @cached_property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'teff.db').resolve()}"

    @property
    def is_sqlite(self) -> bool:
        return self.effective_database_url.startswith("sqlite")


def _variable_name(field_name: str) -> str:
    if field_name == "database_url":
        return "TEFF_DATABASE_URL (or DATABASE_URL)"
    return ENV_PREFIX + field_name.upper()


def load_settings(**overrides: object) -> Settings:
    """Read the environment; on a bad value raise SettingsError naming each variable."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        lines = []
        for error in exc.errors():
            field = str(error["loc"][0]) if error["loc"] else "?"
            lines.append(f"{_variable_name(field)}: {error['msg']} (got {error.get('input')!r})")
        raise SettingsError("invalid setting: " + "; ".join(lines)) from None
