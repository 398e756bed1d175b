"""Settings from the environment (12-factor), validated once at start.

Every variable is prefixed ``TEFF_``; the database URL is also read from the conventional
``DATABASE_URL``. A bad value stops the process with a message naming the variable
(see :func:`load_settings`).
"""

from __future__ import annotations

import os
import re
from functools import cached_property
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator
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
    data_dir: Path = Field(
        default_factory=lambda: default_data_dir(),
        description="where the default SQLite file lives: $XDG_DATA_HOME/teff (~/.local/share/teff), "
        "the same from any working directory; a relative value is taken from the working directory",
    )
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
    max_header_bytes: int = Field(
        default=64 * 1024,
        ge=4096,
        description="largest request line plus headers, counted as they arrive; larger answers 431",
    )
    large_body_bytes: int = Field(
        default=256 * 1024,
        ge=1,
        description="bodies over this size (by Content-Length; chunked bodies count as large) take one "
        "of max_concurrent_large_bodies slots before they are read",
    )
    max_concurrent_large_bodies: int = Field(
        default=4, ge=1, le=256, description="large bodies read and parsed at once, per process"
    )
    large_body_wait_seconds: float = Field(
        default=5.0, ge=0, le=60, description="how long a large body waits for a slot; then 503"
    )
    keep_alive_timeout_seconds: float = Field(
        default=5.0, gt=0, le=300, description="an idle keep-alive connection is closed after this"
    )
    header_read_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        le=300,
        description="a request's line and headers must arrive within this (from the connection or the "
        "previous response); otherwise 408 and the connection is closed",
    )
    body_read_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="a request's body must arrive within this after its headers; otherwise 408 and "
        "the connection is closed",
    )
    max_batch_items: int = Field(default=1000, ge=1, description="items per /v1/mfu/batch call")
    max_measurements_per_request: int = Field(default=10_000, ge=1)
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="comma-separated origins allowed by CORS; empty = CORS off"
    )
    cursor_secret: SecretStr | None = Field(
        default=None,
        description="key that signs page cursors (HMAC-SHA256); give every replica the same one. Unset: "
        "a key derived from the database URL, which replicas of one database share, but which anyone "
        "who knows the URL can derive too",
    )
    bootstrap_api_key: SecretStr | None = Field(
        default=None,
        description="a key (teff_<12 hex>_<secret>) that `teff db upgrade` stores if its prefix is new: the "
        "first key of a deploy, from a Secret, without a shell in a pod (deploy/README.md)",
    )
    bootstrap_tenant: str = Field(default="default", min_length=1, max_length=64)
    bootstrap_scopes: str = Field(default="read,write", description="comma-separated scopes of that key")
    require_api_key_for_estimates: bool = Field(
        default=False, description="when true, the stateless estimate endpoints also need an API key"
    )
    db_pool_size: int = Field(default=10, ge=1, le=200, description="PostgreSQL connections per process")
    db_busy_timeout_ms: int = Field(default=30_000, ge=0, description="SQLite busy timeout")
    db_statement_timeout_ms: int = Field(
        default=5_000,
        ge=100,
        le=600_000,
        description="PostgreSQL statement_timeout of the engine's sessions; a statement, ping or "
        "commit without an answer 1 s past it has its connection cut (see service.store.engine)",
    )
    db_connect_timeout_seconds: int = Field(
        default=3, ge=1, le=60, description="PostgreSQL: how long opening a connection may take"
    )
    db_pool_timeout_seconds: float = Field(
        default=5.0, gt=0, le=60, description="how long a request waits for a pooled connection"
    )
    request_deadline_seconds: float = Field(
        default=8.0,
        gt=0,
        le=300,
        description="a store request (runs, stats, key checks) without a response by then answers "
        "503 database-unavailable with Retry-After",
    )
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

    @field_validator("data_dir")
    @classmethod
    def _absolute_data_dir(cls, value: Path) -> Path:
        # Resolved once, when the settings are read: the server, `teff keys create` and `teff db
        # upgrade` run from one working directory then agree on the file.
        return value.expanduser().resolve()

    @cached_property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'teff.db'}"

    @property
    def is_sqlite(self) -> bool:
        return self.effective_database_url.startswith("sqlite")


def default_data_dir() -> Path:
    """``$XDG_DATA_HOME/teff``, or ``~/.local/share/teff`` (the XDG Base Directory default): one place
    whatever the working directory, so ``teff keys create`` run anywhere writes the keys the server
    reads (a relative ``data`` had made a new, empty database in each directory)."""
    xdg = os.environ.get("XDG_DATA_HOME", "").strip()
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share"
    return base / "teff"


_DATABASE_URL_NAMES = {"database_url", "teff_database_url"}


def _variable_name(location: str) -> str:
    # The location is the field's name, or the alias the value came in by (TEFF_DATABASE_URL).
    if location.lower() in _DATABASE_URL_NAMES:
        return "TEFF_DATABASE_URL (or DATABASE_URL)"
    if location.upper().startswith(ENV_PREFIX):
        return location.upper()
    return ENV_PREFIX + location.upper()


def redact_url(value: object) -> str:
    """A URL with its password replaced by ``***`` (``user:***@host``), for messages and logs."""
    text = str(value)
    return _URL_PASSWORD.sub(r"\1***@", text)


# scheme://user:password@ -> scheme://user:***@ (the password ends at the last "@" before the host).
_URL_PASSWORD = re.compile(r"(://[^:/?#@\s]*:)[^\s]*@")


def load_settings(**overrides: object) -> Settings:
    """Read the environment; on a bad value raise SettingsError naming each variable."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        lines = []
        for error in exc.errors():
            field = str(error["loc"][0]) if error["loc"] else "?"
            name = _variable_name(field)
            got = error.get("input")
            shown = redact_url(got) if name.startswith("TEFF_DATABASE_URL") else got
            lines.append(f"{name}: {error['msg']} (got {shown!r})")
        raise SettingsError("invalid setting: " + "; ".join(lines)) from None
