"""Schemathesis over the published contract (openapi.yaml): every operation, bounded examples, a fixed
seed. No answer may be a 5xx, use an undocumented status or content type, or break its schema.

The store operations are called with a valid API key of a fresh tenant, so they are exercised past
authentication. A longer run: TEFF_FUZZ_EXAMPLES=500 .venv/bin/python -m pytest tests/api/test_fuzz_openapi.py
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from service.app import create_app
from service.store import keys, migrate
from service.store.engine import build_engine
from service.store.uow import UnitOfWork
from tests.conftest import make_settings

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = int(os.environ.get("TEFF_FUZZ_EXAMPLES", "12"))


def _fuzz_app() -> tuple[FastAPI, str]:
    """An app on a fresh migrated SQLite file, with one API key (built at collection: schemathesis
    parametrizes from the schema at import time)."""
    directory = Path(tempfile.mkdtemp(prefix="teff-fuzz-"))
    url = f"sqlite:///{directory / 'teff.db'}"
    migrate.upgrade(url)
    engine = build_engine(url)
    with UnitOfWork(engine, write=True) as uow:
        key = keys.create_key(uow.connection, tenant="fuzz", scopes=frozenset({"read", "write"}))
        uow.commit()
    return create_app(make_settings(url), engine=engine), key


APP, API_KEY = _fuzz_app()
schema = schemathesis.openapi.from_path(ROOT / "openapi.yaml")
schema.app = APP


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_no_operation_answers_5xx_or_breaks_its_contract(case: schemathesis.Case) -> None:
    case.call_and_validate(
        headers={"X-API-Key": API_KEY},
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
        ],
    )
