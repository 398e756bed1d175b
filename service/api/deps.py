"""Typed dependencies: settings, units of work, and the caller's principal (with scope checks)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param
from sqlalchemy import Engine
from starlette.concurrency import run_in_threadpool

from service.api.problems import FORBIDDEN, UNAUTHORIZED, UNAUTHORIZED_HEADERS, ProblemError, invalid_api_key
from service.settings import Settings
from service.store import keys
from service.store.uow import UnitOfWork
from service.usecases.ingest import MeasurementIngest


async def get_settings(request: Request) -> Settings:
    # async: FastAPI runs a plain-def dependency in the threadpool, a hop per request for a lookup.
    settings: Settings = request.app.state.settings
    return settings


@asynccontextmanager
async def _admitted(request: Request) -> AsyncIterator[Engine]:
    engine: Engine = request.app.state.engine
    admission: asyncio.Semaphore | None = getattr(request.app.state, "database_admission", None)
    if admission is None:
        yield engine
        return
    async with admission:
        yield engine


async def get_engine(request: Request) -> AsyncIterator[Engine]:
    """The engine, once the request is admitted (app.state.database_admission bounds the requests
    that hold connections, so none waits for a connection while holding a thread another needs)."""
    async with _admitted(request) as engine:
        yield engine


def write_uow(engine: Annotated[Engine, Depends(get_engine)]) -> Iterator[UnitOfWork]:
    with UnitOfWork(engine, write=True) as uow:
        yield uow


def measurement_ingest(request: Request) -> MeasurementIngest:
    """The app's ingest pipeline, made on first use by the factory the app put in its state (its
    writer starts then, and the lifespan closes it at shutdown)."""
    state = request.app.state
    ingest: MeasurementIngest | None = getattr(state, "measurement_ingest", None)
    if ingest is None:
        ingest = state.measurement_ingest = state.make_measurement_ingest()
    return ingest


SettingsDep = Annotated[Settings, Depends(get_settings)]
WriteUow = Annotated[UnitOfWork, Depends(write_uow)]


#: The security schemes of every keyed operation (declared once; the OpenAPI document names them).
API_KEY_HEADER = APIKeyHeader(name="X-API-Key", auto_error=False, scheme_name="ApiKey")
BEARER = HTTPBearer(auto_error=False, scheme_name="Bearer")


def _presented_key(x_api_key: str | None, bearer: str | None) -> str:
    """The key sent as ``X-API-Key`` or ``Authorization: Bearer``; 401 when neither carries one."""
    if x_api_key and x_api_key.strip():
        return x_api_key.strip()
    if bearer and bearer.strip():
        return bearer.strip()
    raise ProblemError(
        UNAUTHORIZED,
        "No API key: send `X-API-Key: <key>` or `Authorization: Bearer <key>` "
        "(create one with `teff keys create --tenant T --scopes read,write`).",
        headers=dict(UNAUTHORIZED_HEADERS),
    )


def _check_scope(principal: keys.Principal, scope: str) -> keys.Principal:
    if scope not in principal.scopes and "admin" not in principal.scopes:
        raise ProblemError(
            FORBIDDEN,
            f"This operation needs the `{scope}` scope; the key has {', '.join(sorted(principal.scopes))}.",
        )
    return principal


def _authenticate(engine: Engine, key: str) -> keys.Principal | None:
    with UnitOfWork(engine, write=False) as uow:
        return keys.authenticate(uow.connection, key)


def require_scope(scope: str) -> Callable[..., keys.Principal]:
    """A dependency that authenticates the caller and checks one scope (admin implies all)."""

    def dependency(
        engine: Annotated[Engine, Depends(get_engine)],
        x_api_key: Annotated[str | None, Security(API_KEY_HEADER)] = None,
        bearer: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)] = None,
    ) -> keys.Principal:
        principal = _authenticate(engine, _presented_key(x_api_key, bearer.credentials if bearer else None))
        if principal is None:
            raise invalid_api_key()
        return _check_scope(principal, scope)

    dependency.__name__ = f"require_{scope}_scope"
    return dependency


class PrincipalCache:
    """Principals of keys this process has authenticated, by the key's SHA-256 (never the key).

    For operations that re-check the key inside their own transaction (``keys.active_key_ids``: the
    write transaction of measurement ingest, the read transaction of :class:`ReadAccess`), so a
    revoked key is still refused at once and reads or writes nothing; the cache only saves the
    separate authentication (its own connection, a hash and a lookup) each request would cost. Keys never
    change tenant or scopes after creation, so a cached principal is either right or revoked.
    Bounded: when full it starts again empty.
    """

    def __init__(self, max_entries: int = 4096) -> None:
        self._max_entries = max_entries
        self._by_digest: dict[str, keys.Principal] = {}

    def get(self, digest: str) -> keys.Principal | None:
        return self._by_digest.get(digest)

    def put(self, digest: str, principal: keys.Principal) -> None:
        if len(self._by_digest) >= self._max_entries:
            self._by_digest.clear()
        self._by_digest[digest] = principal

    def forget(self, key_id: int) -> None:
        # Called from request threads too: list() copies the items without running Python code.
        for digest, principal in list(self._by_digest.items()):
            if principal.key_id == key_id:
                self._by_digest.pop(digest, None)


async def principal_rechecked_on_write(request: Request, scope: str) -> keys.Principal:
    """The caller's principal, from the app's :class:`PrincipalCache` when the key was seen before
    (on the event loop, no database read), then the scope check.

    Only for operations that re-check the key in their write transaction (``keys.active_key_ids``) and
    call ``PrincipalCache.forget`` when it was revoked: measurement ingest, the hot path, which calls
    this directly rather than through FastAPI's dependency solving (which costs more than the rest of
    a one-item request) and declares its security in ``openapi_extra``.
    Reads the headers as ``API_KEY_HEADER`` and ``BEARER`` do.
    """
    headers = request.headers
    scheme, credentials = get_authorization_scheme_param(headers.get("authorization"))
    bearer = credentials if scheme.lower() == "bearer" else None
    return await _cached_principal(request, _presented_key(headers.get("x-api-key"), bearer), scope)


async def _cached_principal(request: Request, key: str, scope: str) -> keys.Principal:
    cache: PrincipalCache = request.app.state.principal_cache
    digest = keys.key_digest(key)
    principal = cache.get(digest)
    if principal is None:
        async with _admitted(request) as engine:
            principal = await run_in_threadpool(_authenticate, engine, key)
        if principal is None:
            raise invalid_api_key()
        cache.put(digest, principal)
    return _check_scope(principal, scope)


#: The OpenAPI security requirement of every keyed operation (what ``API_KEY_HEADER`` and ``BEARER``
#: declare), for operations that authenticate without FastAPI's dependencies.
SECURITY_REQUIREMENT: list[dict[str, list[str]]] = [{"ApiKey": []}, {"Bearer": []}]


@dataclass(frozen=True, slots=True)
class ReadAccess:
    """A read request's principal and engine. The endpoint opens the read transaction itself, in its
    own thread (:meth:`unit_of_work`), and the key is checked again there: one threadpool hop and
    one connection per request, where a principal dependency and a unit-of-work dependency took
    four hops and two connections."""

    principal: keys.Principal
    engine: Engine
    on_revoked_key: Callable[[int], None]

    @contextmanager
    def unit_of_work(self) -> Iterator[UnitOfWork]:
        """A read transaction in which the key is known to be active (a key revoked since this
        process cached its principal is a 401 here)."""
        with UnitOfWork(self.engine, write=False) as uow:
            if not keys.active_key_ids(uow.connection, [self.principal.key_id]):
                self.on_revoked_key(self.principal.key_id)
                raise invalid_api_key()
            yield uow


async def read_access(
    request: Request,
    x_api_key: Annotated[str | None, Security(API_KEY_HEADER)] = None,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)] = None,
) -> AsyncIterator[ReadAccess]:
    """The caller's principal with the ``read`` scope (from the principal cache when the key was
    seen before: the endpoint's transaction checks it again), once the request is admitted."""
    key = _presented_key(x_api_key, bearer.credentials if bearer else None)
    principal = await _cached_principal(request, key, "read")
    cache: PrincipalCache = request.app.state.principal_cache
    async with _admitted(request) as engine:
        yield ReadAccess(principal, engine, cache.forget)


Reader = Annotated[ReadAccess, Depends(read_access)]
WritePrincipal = Annotated[keys.Principal, Depends(require_scope("write"))]
