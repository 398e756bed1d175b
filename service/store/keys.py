"""API keys: created and revoked from the CLI, stored only as SHA-256 hashes.

A key reads ``teff_<prefix>_<secret>``. The prefix (random, not secret) finds the row; the hash of
the whole key is compared in constant time. Keys carry 256 bits of randomness, so a plain SHA-256
(no slow KDF) is enough: there is nothing to brute-force.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Connection, bindparam, insert, select, update

from service.store.tables import api_keys

KEY_PREFIX = "teff"
SCOPES = ("read", "write", "admin")


@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    id: int
    prefix: str
    tenant: str
    name: str
    scopes: frozenset[str]
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the tenant and the scopes of the key used."""

    key_id: int
    tenant: str
    scopes: frozenset[str]


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def parse_scopes(text: str) -> frozenset[str]:
    scopes = frozenset(part.strip() for part in text.split(",") if part.strip())
    unknown = scopes - set(SCOPES)
    if not scopes or unknown:
        raise ValueError(f"scopes must be a comma-separated subset of {', '.join(SCOPES)}; got {text!r}")
    return scopes


def create_key(connection: Connection, *, tenant: str, scopes: frozenset[str], name: str = "") -> str:
    """Store a new key's hash and return the key itself (shown once, never stored)."""
    if not tenant or len(tenant) > 64:
        raise ValueError("tenant must be 1–64 characters")
    prefix = secrets.token_hex(6)
    key = f"{KEY_PREFIX}_{prefix}_{secrets.token_urlsafe(32)}"
    connection.execute(
        insert(api_keys).values(
            prefix=prefix,
            key_hash=_hash(key),
            tenant=tenant,
            name=name,
            scopes=",".join(sorted(scopes)),
            created_at=datetime.now(UTC),
        )
    )
    return key


def key_prefix(key: str) -> str | None:
    """The prefix of a well-formed key (``teff_<12 hex>_<secret>``), or None."""
    parts = key.split("_", 2)
    if len(parts) != 3 or parts[0] != KEY_PREFIX or len(parts[1]) != 12 or len(parts[2]) < 32:
        return None
    if any(c not in "0123456789abcdef" for c in parts[1]):
        return None
    return parts[1]


def import_key(
    connection: Connection, key: str, *, tenant: str, scopes: frozenset[str], name: str = "bootstrap"
) -> bool:
    """Store a key made elsewhere (a deploy's bootstrap Secret) unless its prefix is already known.

    True when it was stored. A key whose prefix exists, revoked or not, is left alone: a bootstrap
    key an operator revoked is never brought back by the next deploy. The key itself is never stored.
    """
    prefix = key_prefix(key)
    if prefix is None:
        raise ValueError(
            f"a bootstrap key must read {KEY_PREFIX}_<12 hex digits>_<at least 32 characters>; make one with "
            "`python3 -c \"import secrets; print(f'teff_{secrets.token_hex(6)}_{secrets.token_urlsafe(32)}')\"`"
        )
    if not tenant or len(tenant) > 64:
        raise ValueError("tenant must be 1–64 characters")
    known = connection.execute(select(api_keys.c.id).where(api_keys.c.prefix == prefix)).first()
    if known is not None:
        return False
    connection.execute(
        insert(api_keys).values(
            prefix=prefix,
            key_hash=_hash(key),
            tenant=tenant,
            name=name,
            scopes=",".join(sorted(scopes)),
            created_at=datetime.now(UTC),
        )
    )
    return True


def list_keys(connection: Connection, *, tenant: str | None = None) -> list[ApiKeyRecord]:
    query = select(api_keys).order_by(api_keys.c.id)
    if tenant is not None:
        query = query.where(api_keys.c.tenant == tenant)
    return [
        ApiKeyRecord(
            id=row.id,
            prefix=row.prefix,
            tenant=row.tenant,
            name=row.name,
            scopes=frozenset(row.scopes.split(",")),
            created_at=row.created_at,
            revoked_at=row.revoked_at,
        )
        for row in connection.execute(query)
    ]


def revoke_key(connection: Connection, *, prefix: str) -> bool:
    result = connection.execute(
        update(api_keys)
        .where(api_keys.c.prefix == prefix, api_keys.c.revoked_at.is_(None))
        .values(revoked_at=datetime.now(UTC))
    )
    return bool(result.rowcount)


def authenticate(connection: Connection, key: str) -> Principal | None:
    """The principal for a presented key, or None when it is unknown, malformed or revoked."""
    parts = key.split("_", 2)
    if len(parts) != 3 or parts[0] != KEY_PREFIX or len(key) > 200:
        return None
    row = connection.execute(
        select(
            api_keys.c.id, api_keys.c.key_hash, api_keys.c.tenant, api_keys.c.scopes, api_keys.c.revoked_at
        ).where(api_keys.c.prefix == parts[1])
    ).first()
    # Hash and compare even when no row matched, so timing does not tell which prefixes exist.
    stored = row.key_hash if row is not None else "0" * 64
    matches = hmac.compare_digest(_hash(key), stored)
    if row is None or not matches or row.revoked_at is not None:
        return None
    return Principal(key_id=row.id, tenant=row.tenant, scopes=frozenset(row.scopes.split(",")))


def key_digest(key: str) -> str:
    """The stored form of a key (what a principal cache may be keyed by: never the key itself)."""
    return _hash(key)


def active_key_ids(connection: Connection, key_ids: Iterable[int]) -> set[int]:
    """Which of these keys exist and are not revoked (read inside a write transaction, it is the
    revocation check of a write whose principal was authenticated earlier)."""
    ids = sorted(set(key_ids))
    if not ids:
        return set()
    return set(connection.execute(_ACTIVE_KEYS, {"ids": ids}).scalars())


# Built once (it runs in every ingest transaction).
_ACTIVE_KEYS = select(api_keys.c.id).where(
    api_keys.c.id.in_(bindparam("ids", expanding=True)), api_keys.c.revoked_at.is_(None)
)
