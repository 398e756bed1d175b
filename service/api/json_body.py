"""The one JSON decoder of request bodies: the standard library's, refusing duplicate keys.

RFC 8259 leaves an object with a repeated name to the implementation; Python, orjson and pydantic
keep the last value, so ``{"step": 1, "step": 2}`` was stored as step 2 while a client (or a proxy
that inspected the first) believed step 1. Every body here is decoded by :func:`loads`: FastAPI's
bodies through :class:`StrictJsonRoute` (the ``route_class`` of every router), the raw bodies of the
measurement and batch endpoints directly. A repeated key is a 422 validation-error naming it; so
are NaN and Infinity, which the standard decoder would otherwise accept.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from service.api import problems
from service.api.handlers import not_json_problem

DUPLICATE_KEY_MESSAGE = "an object repeats a key"


class DuplicateKeyError(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(key)
            seen.add(key)
    return obj


def duplicate_key_problem(key: str, *, field: str = "body") -> problems.ProblemError:
    message = f"{DUPLICATE_KEY_MESSAGE}: {key!r} appears twice; send each key once"
    return problems.ProblemError(
        problems.VALIDATION_ERROR,
        f"{field}: {message}.",
        errors=[{"field": field, "message": message, "code": "json_duplicate_key"}],
    )


class _NonFinite:
    """Where the decoder met NaN, Infinity or -Infinity: kept in place so the problem can name the
    field it stands in (``body.peak_lr``), not just "the body"."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


def _path_of_non_finite(value: Any, path: str) -> tuple[str, str] | None:
    if isinstance(value, _NonFinite):
        return path, value.name
    if isinstance(value, dict):
        for key, item in value.items():
            found = _path_of_non_finite(item, f"{path}.{key}")
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _path_of_non_finite(item, f"{path}[{index}]")
            if found is not None:
                return found
    return None


def non_finite_problem(field: str, name: str) -> problems.ProblemError:
    message = f"{name} is not a JSON number; send a finite number"
    return problems.ProblemError(
        problems.VALIDATION_ERROR,
        f"{field}: {message}.",
        errors=[{"field": field, "message": message, "code": "json_non_finite_number"}],
    )


def _number(text: str) -> float | int:
    """A JSON number with a fraction or exponent. JSON Schema's ``integer`` is any number with a zero
    fraction (``110195.0`` is an integer to the contract), so such a number is decoded as an int and
    the strict models take it where the contract says integer (and as a number everywhere else)."""
    value = float(text)
    return int(value) if value.is_integer() else value


def loads(body: bytes | str) -> Any:
    """The JSON value of a body, or a ProblemError (422 validation-error) that says what is wrong:
    not JSON, a repeated key, NaN or Infinity (not JSON numbers, which Python's decoder would take),
    an integer of more digits than Python converts."""
    constants: list[str] = []

    def non_finite(name: str) -> _NonFinite:
        constants.append(name)
        return _NonFinite(name)

    try:
        value = json.loads(
            body, object_pairs_hook=_unique_keys, parse_constant=non_finite, parse_float=_number
        )
    except DuplicateKeyError as exc:
        raise duplicate_key_problem(exc.key) from None
    except (ValueError, RecursionError):  # json.JSONDecodeError, int digit limit
        raise not_json_problem() from None
    if constants:  # rare: only then is the decoded value walked, to name the field
        found = _path_of_non_finite(value, "body")
        field, name = found if found is not None else ("body", constants[0])
        raise non_finite_problem(field, name)
    return value


class StrictJsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            try:
                self._json = loads(await self.body())
            except problems.ProblemError as exc:
                raise problems.BodyProblem(exc) from None
        return self._json


class StrictJsonRoute(APIRoute):
    """An APIRoute whose handler decodes JSON bodies with :func:`loads` (FastAPI's documented way to
    change the request class)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict_json_handler(request: Request) -> Response:
            return await handler(StrictJsonRequest(request.scope, request.receive))

        return strict_json_handler
