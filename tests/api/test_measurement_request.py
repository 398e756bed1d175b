"""Parsing a measurement body: the direct path (pydantic straight from the bytes) answers exactly what
the strict decoder followed by validation answers, on every body, or leaves the body to it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from service.api import json_body, measurement_request, problems
from service.api.handlers import validation_problem

MAX_ITEMS = 50
#: A list body of one item (the others are built from it).
_ITEM = b'[{"step": 1, "throughput": {"tokens_per_second": 1.0}}'


def _strict(body: bytes) -> list[dict[str, Any]]:
    """The reference: the service's strict decoder, then the same validation, nothing else."""
    many, one = measurement_request._adapters(MAX_ITEMS)
    decoded = json_body.loads(body)
    try:
        if isinstance(decoded, list):
            return list(many.validate_python(decoded))
        return [one.validate_python(decoded)]
    except ValidationError as exc:
        raise validation_problem(exc, root="body") from None


def _outcome(parse: Any, body: bytes) -> tuple[str, Any]:
    try:
        return "accepted", parse(body)
    except problems.ProblemError as exc:
        return "refused", (exc.kind.status, exc.detail, exc.extensions)


def _typed(value: Any) -> Any:
    """A parsed value with each number's type beside it: 2 and 2.0 are the same measurement, but the
    comparison should say so on purpose, not by Python's 2 == 2.0."""
    if isinstance(value, dict):
        return {key: _typed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_typed(item) for item in value]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    return float(value)


@contextmanager
def _pieces_of(piece_bytes: int | None) -> Iterator[None]:
    """Bodies validated in pieces of ``piece_bytes`` (1: cut at every ``},{``), or as the service does."""
    if piece_bytes is None:
        yield
        return
    with mock.patch.object(measurement_request, "PIECE_BYTES", piece_bytes):
        yield


def _assert_same_answer(body: bytes) -> None:
    direct = _outcome(lambda raw: measurement_request.parse_measurements(raw, max_items=MAX_ITEMS), body)
    strict = _outcome(_strict, body)
    assert direct[0] == strict[0], (body, direct, strict)
    if direct[0] == "accepted":
        assert _typed(direct[1]) == _typed(strict[1]), body
    else:
        assert direct == strict, body


_positive = st.one_of(
    st.floats(min_value=1e-300, max_value=1e300, allow_nan=False),
    st.integers(min_value=1, max_value=10**12),
    st.sampled_from([2.0, 110195.0, 0.1, 5e-324]),
)
_valid_times = st.sampled_from(
    [
        "2026-12-02T12:00:00Z",
        "2026-12-02t12:00:00.123456+05:30",
        "2026-12-02 12:00Z",
        "2026-12-02T12:00:00-08:00",
    ]
)
_rate_forms = st.sampled_from(["tokens_per_second", "tokens_per_second_per_device", "sequences_per_second"])


@st.composite
def _valid_items(draw: st.DrawFn) -> dict[str, Any]:
    item: dict[str, Any] = {"step": draw(st.integers(min_value=0, max_value=10**12))}
    if draw(st.booleans()):
        item["time"] = draw(st.one_of(_valid_times, st.none()))
    if draw(st.integers(0, 3)):
        item["throughput"] = {draw(_rate_forms): draw(_positive)}
    else:
        batch = draw(st.sampled_from(["global_batch_tokens", "global_batch_sequences"]))
        item["throughput"] = {"step_time_seconds": draw(_positive), batch: draw(st.integers(1, 10**12))}
    if draw(st.booleans()):
        item["loss"] = draw(st.one_of(_positive, st.just(0), st.none()))
    if draw(st.booleans()):
        item["memory_bytes"] = draw(st.one_of(st.integers(0, 10**15), st.none()))
    if not draw(st.integers(0, 5)):
        small = draw(st.integers(1, 10**6))
        item |= {
            "grad_norm_sq_small": draw(_positive),
            "grad_norm_sq_big": draw(_positive),
            "batch_small_tokens": small,
            "batch_big_tokens": draw(st.integers(1, 2 * 10**6)),
        }
    return item


#: One thing wrong (or only unusual) with an item: each is a field and what it becomes.
_MUTATIONS: list[tuple[str, Any]] = [
    ("step", 1200.0),  # an integer written with a fraction: the contract's integer
    ("step", -1),
    ("step", 10**13),
    ("step", "12"),
    ("step", True),
    ("time", "1700000000"),  # Unix seconds as text
    ("time", 1_700_000_000),
    ("time", "2026-12-02T12:00:00"),  # no offset
    ("time", "2026-12-02"),
    ("time", "0001-01-01T00:00:00+01:00"),  # before year 1 in UTC
    ("time", "9999-12-31T23:59:59-01:00"),  # after 9999 in UTC
    ("time", ":2026-12-02T12:00:00Z"),
    ("loss", -1.0),
    ("loss", 2),
    ("memory_bytes", 1.5),
    ("memory_bytes", 10**16),
    ("grad_norm_sq_small", 1.0),  # a noise reading without the others
    ("unknown", 1),
    ("throughput", {}),
    ("throughput", {"tokens_per_second": 1.0, "sequences_per_second": 2.0}),
    ("throughput", {"step_time_seconds": 1.0}),
    ("throughput", {"tokens_per_second": 1.0, "global_batch_tokens": 5}),
    ("throughput", {"tokens_per_second": 0.0}),
    ("throughput", {"tokens": 1.0}),
    ("throughput", {"tokens_per_second": None}),
    ("throughput", 5.0),
]


@st.composite
def _items(draw: st.DrawFn) -> dict[str, Any]:
    item = draw(_valid_items())
    if not draw(st.integers(0, 4)):
        field, value = draw(st.sampled_from(_MUTATIONS))
        item[field] = value
    return item


def _encode(items: list[dict[str, Any]] | dict[str, Any], style: str) -> bytes:
    if style == "compact":
        return orjson.dumps(items)
    if style == "spaced":
        return json.dumps(items).encode()
    return json.dumps(items, indent=2).encode()


def _with_repeated_key(body: bytes, key: str, value: str) -> bytes:
    """The body with ``key`` sent a second time in its first object that has it: ``"key": value`` put
    before the first one (the parsers keep the last, so the original value wins where it is kept)."""
    text = body.decode()
    position = text.find(f'"{key}"')
    if position < 0:
        return body
    return (text[:position] + f'"{key}" : {value}, ' + text[position:]).encode()


@settings(max_examples=400, deadline=None)
@given(
    items=st.lists(_items(), min_size=0, max_size=4),
    style=st.sampled_from(["compact", "spaced", "indented"]),
    repeat=st.sampled_from([None, "step", "time", "tokens_per_second_per_device", "loss"]),
    repeated_value=st.sampled_from(["1", "2.5", '"2026-12-02T12:00:00Z"', "null"]),
    escape=st.booleans(),
    piece_bytes=st.sampled_from([None, 1, 60]),
    alone=st.booleans(),
)
def test_the_direct_path_answers_as_the_strict_decoder_does(
    items: list[dict[str, Any]],
    style: str,
    repeat: str | None,
    repeated_value: str,
    escape: bool,
    piece_bytes: int | None,
    alone: bool,
) -> None:
    # ``alone``: the first item sent as one object, not in a list.
    body = _encode(items[0] if alone and items else items, style)
    if repeat is not None:
        body = _with_repeated_key(body, repeat, repeated_value)
    if escape:  # an escaped character in a key: the direct path must not count on quote marks alone
        body = body.replace(b'"step"', b'"st\\u0065p"', 1)
    with _pieces_of(piece_bytes):
        _assert_same_answer(body)


@pytest.mark.parametrize(
    "body",
    [
        b'[{"step": 1, "step": 2, "throughput": {"tokens_per_second": 1.0}}]',
        b'[{"step": 1, "step" : 2, "throughput": {"tokens_per_second": 1.0}}]',
        b'[{"step": 1, "throughput": {"tokens_per_second": 1.0, "tokens_per_second": 2.0}}]',
        b'[{"step": 1, "time": "2026-12-02T12:00:00Z", "time": "2026-12-03T12:00:00Z", '
        b'"throughput": {"tokens_per_second": 1.0}}]',
        b'[{"step": 1, "throughput": {"tokens_per_second": NaN}}]',
        b'[{"step": 1, "loss": Infinity, "throughput": {"tokens_per_second": 1.0}}]',
        b'[{"step": 1200.0, "throughput": {"tokens_per_second": 1.0}}]',
        b'[{"step": 1, "time": "1700000000", "throughput": {"tokens_per_second": 1.0}}]',
        b'[{"step": 1, "time": "0001-01-01T00:00:00+01:00", "throughput": {"tokens_per_second": 1.0}}]',
        b'[{"step": 1, "time": "9999-12-31T23:59:59-01:00", "throughput": {"tokens_per_second": 1.0}}]',
        b'[{"step": 1, "time": "0001-01-01T00:00:00-01:00", "throughput": {"tokens_per_second": 1.0}}]',
        b'[{"st\\u0065p": 1, "step": 2, "throughput": {"tokens_per_second": 1.0}}]',
        b'\xef\xbb\xbf[{"step": 1, "throughput": {"tokens_per_second": 1.0}}]',
        b'[{"step": 01, "throughput": {"tokens_per_second": 1.0}}]',
        b'[{"step": 1, "throughput": {"tokens_per_second": 1e400}}]',
        b"[]",
        # Cut into pieces at every "},{": where the cut is not between two items, a piece is not JSON.
        _ITEM + b"," + _ITEM[1:].replace(b'"step": 1', b'"step": 2') + b"]",
        b'[{"step": 1, "throughput": {"tokens_per_second": 1.0}, "x},{": 1},' + _ITEM[1:] + b"]",
        b'[{"step": 1, "throughput": {"tokens_per_second": 1.0}}},{"step": 2}]',
        b'[{"step": 1, "throughput": {"tokens_per_second": 1.0}},{"step": 2, "throughput": {}}',
        b'[{"step": 1, "throughput": {"tokens_per_second": 1.0}},{"step": 2}] x',
        b"\x0b"
        + _ITEM
        + b"]",  # \v and \f are not JSON whitespace, before a list or an object or between items
        b"\x0c " + _ITEM[1:],
        _ITEM + b",\x0b" + _ITEM[1:].replace(b'"step": 1', b'"step": 2') + b"]",
        _ITEM + b",\x0c" + _ITEM[1:].replace(b'"step": 1', b'"step": 2') + b"]",
        _ITEM + b", \t\r\n" + _ITEM[1:].replace(b'"step": 1', b'"step": 2') + b"]",
        b"[" + b",".join(_ITEM[1:].replace(b'"step": 1', f'"step": {n}'.encode()) for n in range(51)) + b"]",
        # One object, validated as a list of one: the brackets must not make two objects one body.
        _ITEM[1:],
        _ITEM[1:] + b"," + _ITEM[1:],
        _ITEM[1:] + b"]",
        _ITEM[1:] + b"],[" + _ITEM[1:],
        b'{"step": 1, "step": 2, "throughput": {"tokens_per_second": 1.0}}',
        b"{}",
    ],
)
@pytest.mark.parametrize("piece_bytes", [None, 1])
def test_bodies_only_the_strict_decoder_can_judge_get_its_answer(
    body: bytes, piece_bytes: int | None
) -> None:
    with _pieces_of(piece_bytes):
        _assert_same_answer(body)


@pytest.mark.parametrize("separator", [b",", b", ", b",\n  "])
def test_a_list_cut_into_pieces_takes_the_direct_path_whole(separator: bytes) -> None:
    items = [_ITEM[1:].replace(b'"step": 1', f'"step": {n}'.encode()) for n in range(50)]
    body = b"[" + separator.join(items) + b"]"
    with _pieces_of(1):
        assert len(list(measurement_request._pieces(body))) == 50  # cut between every two items
        direct = measurement_request._parsed_directly(body, MAX_ITEMS)
    assert direct is not None and [item["step"] for item in direct] == list(range(50))
    assert direct == _strict(body)


def test_one_object_takes_the_direct_path() -> None:
    with mock.patch.object(json_body, "loads", side_effect=AssertionError("the strict decoder ran")):
        (item,) = measurement_request.parse_measurements(_ITEM[1:], max_items=MAX_ITEMS)
    assert [item] == _strict(_ITEM[1:])


def test_a_plain_list_takes_the_direct_path_and_a_repeated_key_does_not() -> None:
    plain = b'[{"step": 1, "time": "2026-12-02T12:00:00Z", "throughput": {"tokens_per_second": 1.0}}]'
    assert measurement_request._parsed_directly(plain, MAX_ITEMS) == _strict(plain)
    repeated = (
        b'[{"step": 2, "step": 1, "time": "2026-12-02T12:00:00Z", "throughput": {"tokens_per_second": 1.0}}]'
    )
    assert measurement_request._parsed_directly(repeated, MAX_ITEMS) is None
    with pytest.raises(problems.ProblemError, match="'step' appears twice"):
        measurement_request.parse_measurements(repeated, max_items=MAX_ITEMS)
