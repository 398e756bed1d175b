"""A measurement request, the HTTP side: the body validated straight from its JSON bytes (one object
or a list of up to ``max_measurements_per_request``; all or nothing: the first invalid item is a 422
naming it), handed to the app's ingest (:mod:`service.usecases.ingest`), its answer presented.

A list is first validated by pydantic straight from the bytes, in pieces of whole items, as
MeasurementFields (the contract's fields, types and bounds, checked in Rust), then MeasurementIn's
per-item rules over the list: several times faster than the strict decoder followed by validation
(benchmarks/bench_json_decoder.py). That parser keeps the last of a repeated key, so its answer is
used only when the body's strings are counted and every key is in the result; otherwise, and on any
error, the body goes the strict way (:func:`service.api.json_body.loads`, then MeasurementIn),
which decides alone what is accepted and what each error says (a test holds the two paths to the
same answers).

Bodies over ``INLINE_BODY_BYTES`` are parsed, and their rows computed, in the threadpool, so that a
10,000-item request never stalls the event loop.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from functools import lru_cache
from typing import Annotated, Any

from pydantic import AwareDatetime, Field, Strict, TypeAdapter, ValidationError
from starlette.concurrency import run_in_threadpool

from service.api import json_body
from service.api.handlers import validation_problem
from service.api.presenters.runs import run_summary
from service.api.schemas.measurements import MeasurementFields, MeasurementItem, MeasurementsAdded, rules_hold
from service.store.keys import Principal
from service.usecases.ingest import MeasurementIngest, gc_paused

#: Bodies above this (about 100 items, a millisecond of work) are parsed and computed in the threadpool.
INLINE_BODY_BYTES = 32 * 1024


@lru_cache(maxsize=8)
def _adapters(max_items: int) -> tuple[TypeAdapter[Any], TypeAdapter[Any]]:
    many: TypeAdapter[Any] = TypeAdapter(
        Annotated[list[MeasurementItem], Field(min_length=1, max_length=max_items)]
    )
    one: TypeAdapter[Any] = TypeAdapter(MeasurementItem)
    return many, one


@lru_cache(maxsize=8)
def _direct_adapter(max_items: int) -> TypeAdapter[Any]:
    return TypeAdapter(Annotated[list[MeasurementFields], Field(min_length=1, max_length=max_items)])


#: Bytes of a list body validated per pydantic call. One call holds the GIL throughout (a 10,000-item
#: body: tens of milliseconds), and the ingest writer, back from the database, cannot go on until it
#: ends; a piece of 16 KiB lasts a fraction of a millisecond, and pieces validate no slower than the
#: whole.
PIECE_BYTES = 16 * 1024


#: Between two items of a list: where a body is cut into pieces (compact or not, as encoders write it).
#: JSON's own whitespace only (not regex's \s, which has \v and \f): what a cut removes must be what
#: a list may hold between two items.
_BETWEEN_ITEMS = re.compile(rb"\},[ \t\n\r]*\{")


def _pieces(body: bytes) -> Iterator[bytes]:
    """A list body as lists of its items, cut between a ``}`` and the next ``{`` (a comma and any
    whitespace between them) past every PIECE_BYTES. Where each piece is a valid JSON list the body is
    too, and its items are the pieces' in order: a piece without its brackets is a comma-separated
    sequence of values, and the body is those sequences joined by the commas the cuts removed. A cut
    anywhere else (inside a string or an item) leaves a piece that is not valid JSON, and the strict
    decoder decides."""
    opening = len(body) - len(body.lstrip(b" \t\n\r"))  # JSON's whitespace, as for the cuts
    if body[opening : opening + 1] != b"[":  # not a list after all: whole, for the parser to refuse
        yield body
        return
    start = opening + 1
    while True:
        between = _BETWEEN_ITEMS.search(body, start + PIECE_BYTES)
        if between is None:
            yield b"[" + body[start:]
            return
        yield b"[" + body[start : between.start() + 1] + b"]"
        start = between.end() - 1


#: UtcDatetime's parsing without its checks (done on the list by _parsed_directly).
_TIMES: TypeAdapter[list[datetime]] = TypeAdapter(list[Annotated[AwareDatetime, Strict(False)]])


def _strings_in_body(body: bytes) -> int | None:
    """How many JSON strings ``body`` holds, keys included (half its quote marks), or None when it has
    a backslash: an escaped quote mark delimits nothing."""
    if b"\\" in body:
        return None
    return body.count(b'"') // 2


def _parsed_directly(body: bytes, max_items: int) -> list[dict[str, Any]] | None:
    """A list body validated straight from its bytes, or None where the strict decoder must decide.

    Sound without looking further: every key the items were sent is in the validated items (extra
    keys are refused), and each time they hold was a string of the body. Their keys and times add up
    to the body's strings only if no key was repeated (the parser keeps the last, so a repeat
    leaves a string of the body uncounted); any other string only makes the body's count larger."""
    strings = _strings_in_body(body)
    if strings is None:
        return None
    adapter = _direct_adapter(max_items)
    items: list[dict[str, Any]] = []
    try:
        for piece in _pieces(body):
            items.extend(adapter.validate_json(piece))
    except ValidationError:
        return None
    if len(items) > max_items:
        return None
    timed = [item for item in items if item.get("time") is not None]
    keys = sum(map(len, items)) + sum([len(item["throughput"]) for item in items])
    if strings != keys + len(timed) or not rules_hold(items):  # type: ignore[arg-type]
        return None
    try:
        times = _TIMES.validate_python([item["time"] for item in timed])
    except ValidationError:
        return None
    for item, time in zip(timed, times, strict=True):
        if not 1 < time.year < 9999:  # near the ends of the calendar: UtcDatetime's own check decides
            return None
        item["time"] = time
    return items


def parse_measurements(body: bytes, *, max_items: int) -> list[dict[str, Any]]:
    """One measurement object or a list of them, decoded by the service's one JSON decoder (duplicate
    keys refused: service.api.json_body) and validated as plain dicts (all or nothing)."""
    many, one = _adapters(max_items)
    opening = body.lstrip()[:1]
    if opening == b"[":
        direct = _parsed_directly(body, max_items)
        if direct is not None:
            return direct
    elif opening == b"{":  # one object: the same way, as a list of one (more would not be one object)
        direct = _parsed_directly(b"[" + body + b"]", max_items)
        if direct is not None and len(direct) == 1:
            return direct
    decoded = json_body.loads(body)
    try:
        parsed = (
            many.validate_python(decoded) if isinstance(decoded, list) else [one.validate_python(decoded)]
        )
    except ValidationError as exc:
        raise validation_problem(exc, root="body") from None
    return parsed


async def add_measurements(
    ingest: MeasurementIngest, *, principal: Principal, run_id: str, body: bytes, max_items: int
) -> MeasurementsAdded:
    inline = len(body) <= INLINE_BODY_BYTES
    if inline:
        items = parse_measurements(body, max_items=max_items)
    else:
        items = await run_in_threadpool(gc_paused, parse_measurements, body, max_items=max_items)
    job = await ingest.prepare(principal=principal, run_id=run_id, items=items, offload=not inline)
    # The job holds what is stored; the items (10,000 dicts in a bulk request) need not wait for the
    # writer with it, where every collection of the garbage collector would traverse them again.
    del items
    added = await ingest.store(job)
    return MeasurementsAdded(
        run_id=added.run.id,
        received=added.received,
        stored=added.stored,
        ignored_steps=added.ignored_steps,
        summary=run_summary(added.run),
    )
