"""Page cursors: opaque to clients, signed by the server, checked before anything in them is used.

A cursor is ``base64url(JSON payload) . base64url(HMAC-SHA256(key, payload)[:16])``. A cursor that
was not issued by a server with the same key (hand-made, edited, truncated) is a 422 naming
``query.cursor``; its payload is never read. The services still check every value in a genuine one
(types and ranges), so that even a leaked key cannot reach the database with a value it cannot hold.

The key: ``TEFF_CURSOR_SECRET`` when set; otherwise derived from the database URL, so that every
replica serving one database accepts the others' cursors without configuration (a key made per
process would refuse a cursor whenever a load balancer sends the next page to another replica).
Anyone who knows the URL could then sign a cursor; set the secret where that matters. A cursor only
positions a listing within the caller's own tenant (the tenant comes from the API key), so a forged
one can at worst skip rows the caller may read anyway.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from datetime import UTC, datetime
from typing import Any

from fastapi import Request

from service.api.schemas.fields import is_stored_int
from service.domain.errors import InvalidInput
from service.settings import Settings
from service.store import records as records_store
from service.store import run_filters as run_filters_store
from service.store import runs as runs_store

#: Bytes of the HMAC kept in a cursor: 128 bits, beyond guessing, and a short query parameter.
SIGNATURE_BYTES = 16
_KEY_CONTEXT = b"teff-cursor-v1\x00"
FOREIGN_CURSOR = "cursor is not one this service issued; pass next_cursor from the previous page unchanged."


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode((text + "=" * (-len(text) % 4)).encode("ascii"))


class CursorCodec:
    """Signs and checks the cursors of one service (one key)."""

    __slots__ = ("_key",)

    def __init__(self, secret: bytes) -> None:
        self._key = hashlib.sha256(_KEY_CONTEXT + secret).digest()

    @classmethod
    def for_settings(cls, settings: Settings) -> CursorCodec:
        secret = settings.cursor_secret
        if secret is not None:
            return cls(secret.get_secret_value().encode())
        return cls(b"database:" + settings.effective_database_url.encode())

    def _signature(self, payload: bytes) -> bytes:
        return hmac.new(self._key, payload, hashlib.sha256).digest()[:SIGNATURE_BYTES]

    def encode(self, payload: dict[str, Any]) -> str:
        # stdlib json: a cursor is small, and orjson refuses integers past 64 bits
        body = json.dumps(payload, separators=(",", ":")).encode()
        return f"{_b64encode(body)}.{_b64encode(self._signature(body))}"

    def decode(self, cursor: str, field: str = "query.cursor") -> dict[str, Any]:
        """The payload of a cursor this codec signed; InvalidInput (422) for anything else."""
        body_text, dot, signature_text = cursor.partition(".")
        try:
            if not dot or not cursor.isascii():
                raise ValueError
            body = _b64decode(body_text)
            if not hmac.compare_digest(_b64decode(signature_text), self._signature(body)):
                raise ValueError
            payload = json.loads(body)
        except (ValueError, binascii.Error):
            raise InvalidInput(FOREIGN_CURSOR, field=field) from None
        if not isinstance(payload, dict):
            raise InvalidInput(FOREIGN_CURSOR, field=field)
        return payload

    def decode_step(self, cursor: str, *, scope: str, field: str = "query.cursor") -> int:
        """The step a measurement cursor issued for ``scope`` (run and step range) resumes after."""
        payload = self.decode(cursor, field)
        if payload.get("f") != scope or not is_stored_int(payload.get("k")):
            raise InvalidInput(
                "this cursor belongs to another run or step range; pass next_cursor unchanged.", field=field
            )
        step: int = payload["k"]
        return step


# Run listings: a cursor holds the last run's (sort value, pk) and the listing's fingerprint (its
# filters and sort), so that a cursor is never applied to another listing.


def _run_position(payload: dict[str, Any], sort: str) -> tuple[Any, int]:
    """The (sort value, pk) a signed cursor holds, each checked against what the column can hold."""
    damaged = InvalidInput("cursor is damaged; pass next_cursor unchanged.", field="query.cursor")
    value: Any = payload.get("v")
    pk: Any = payload.get("k")
    if not is_stored_int(pk) or pk < 1:
        raise damaged
    if sort == "started_at":
        if not isinstance(value, str):
            raise damaged
        try:
            moment = datetime.fromisoformat(value)
            if moment.tzinfo is None:
                raise ValueError
            moment.astimezone(UTC)
        except (ValueError, OverflowError):
            raise damaged from None
        return moment, pk
    if isinstance(value, bool) or not isinstance(value, int | float) or not runs_store.NO_MFU <= value <= 1:
        raise damaged
    return float(value), pk


def _filters_hash(filters: run_filters_store.RunFilters, sort: str, order: str) -> str:
    text = repr((filters, sort, order)).encode()
    return hashlib.sha256(text).hexdigest()[:16]


def decode_run_position(
    cursors: CursorCodec, cursor: str, *, filters: run_filters_store.RunFilters, sort: str, order: str
) -> tuple[Any, int]:
    """Where a run-listing cursor resumes: the (sort value, pk) of the last run of its page."""
    payload = cursors.decode(cursor)
    if payload.get("f") != _filters_hash(filters, sort, order):
        raise InvalidInput(
            "this cursor belongs to a listing with other filters or another sort; start again "
            "without a cursor, or keep the filters and sort of the first page.",
            field="query.cursor",
        )
    return _run_position(payload, sort)


def run_cursor(
    cursors: CursorCodec,
    last: records_store.RunRecord,
    *,
    filters: run_filters_store.RunFilters,
    sort: str,
    order: str,
) -> str:
    """The cursor of the page after the one ending with ``last``."""
    value = (
        last.started_at.isoformat()
        if sort == "started_at"
        else (last.median_mfu if last.median_mfu is not None else runs_store.NO_MFU)
    )
    return cursors.encode({"v": value, "k": last.pk, "f": _filters_hash(filters, sort, order)})


async def cursor_codec(request: Request) -> CursorCodec:
    """The app's codec (a dependency; made by service.app.create_app)."""
    codec: CursorCodec = request.app.state.cursor_codec
    return codec
