"""Typed dependencies: settings, units of work, and the caller's principal (with scope checks)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import Engine

from service.api.problems import FORBIDDEN, UNAUTHORIZED, ProblemError
from service.settings import Settings
from service.store import keys
from service.store.uow import UnitOfWork


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_engine(request: Request) -> AsyncIterator[Engine]:
    """The engine, once the request is admitted (app.state.database_admission bounds the requests
    that hold connections, so none waits for a connection while holding a thread another needs)."""
    engine: Engine = request.app.state.engine
    admission: asyncio.Semaphore | None = getattr(request.app.state, "database_admission", None)
    if admission is None:
        yield engine
        return
    async with admission:
        yield engine


def read_uow(engine: Annotated[Engine, Depends(get_engine)]) -> Iterator[UnitOfWork]:
    with UnitOfWork(engine, write=False) as uow:
        yield uow


def write_uow(engine: Annotated[Engine, Depends(get_engine)]) -> Iterator[UnitOfWork]:
    with UnitOfWork(engine, write=True) as uow:
        yield uow


SettingsDep = Annotated[Settings, Depends(get_settings)]
ReadUow = Annotated[UnitOfWork, Depends(read_uow)]
WriteUow = Annotated[UnitOfWork, Depends(write_uow)]

_UNAUTHORIZED_HEADERS = {"WWW-Authenticate": 'Bearer realm="teff"'}


_api_key_header = APIKeyHeader(name="X-API-Key", auto_error=False, scheme_name="ApiKey")
_bearer = HTTPBearer(auto_error=False, scheme_name="Bearer")


def _presented_key(x_api_key: str | None, bearer: HTTPAuthorizationCredentials | None) -> str | None:
    if x_api_key and x_api_key.strip():
        return x_api_key.strip()
    if bearer is not None and bearer.credentials.strip():
        return bearer.credentials.strip()
    return None


def require_scope(scope: str) -> Callable[..., keys.Principal]:
    """A dependency that authenticates the caller and checks one scope (admin implies all)."""

    def dependency(
        engine: Annotated[Engine, Depends(get_engine)],
        x_api_key: Annotated[str | None, Security(_api_key_header)] = None,
        bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)] = None,
    ) -> keys.Principal:
        key = _presented_key(x_api_key, bearer)
        if key is None:
            raise ProblemError(
                UNAUTHORIZED,
                "No API key: send `X-API-Key: <key>` or `Authorization: Bearer <key>` "
                "(create one with `teff keys create --tenant T --scopes read,write`).",
                headers=_UNAUTHORIZED_HEADERS,
            )
        with UnitOfWork(engine, write=False) as uow:
            principal = keys.authenticate(uow.connection, key)
        if principal is None:
            raise ProblemError(
                UNAUTHORIZED, "The API key is not valid or has been revoked.", headers=_UNAUTHORIZED_HEADERS
            )
        if scope not in principal.scopes and "admin" not in principal.scopes:
            raise ProblemError(
                FORBIDDEN,
                f"This operation needs the `{scope}` scope; the key has {', '.join(sorted(principal.scopes))}.",
            )
        return principal

    dependency.__name__ = f"require_{scope}_scope"
    return dependency


ReadPrincipal = Annotated[keys.Principal, Depends(require_scope("read"))]
WritePrincipal = Annotated[keys.Principal, Depends(require_scope("write"))]
