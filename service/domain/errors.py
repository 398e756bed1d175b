"""Errors the domain raises when an input cannot be answered.

Every error carries a stable ``code`` (a slug; the API turns it into the problem ``type`` URI), the
``field`` it concerns (a dotted path into the request, or ``None``) and a message that says what to
change. The API layer maps each class to an HTTP status; the domain knows nothing of HTTP.

Hierarchy::

    DomainError
    ├── InvalidInput            a value is out of range or inconsistent with another       (422)
    │   ├── ImplausibleResult   the inputs give an impossible answer (MFU > 1, ...)        (422)
    │   └── UnsupportedPrecision  the accelerator has no dense peak at that precision      (422)
    └── NotFound                a named thing (preset, accelerator id or name) is unknown  (404 on a
                                path, 422 inside a body; carries close matches)
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import TypeVar

T = TypeVar("T")


class DomainError(Exception):
    code = "domain-error"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class InvalidInput(DomainError):
    code = "invalid-input"


class ImplausibleResult(InvalidInput):
    code = "implausible-result"


class UnsupportedPrecision(InvalidInput):
    code = "unsupported-precision"


class NotFound(DomainError):
    code = "not-found"

    def __init__(
        self, message: str, *, field: str | None = None, close_matches: tuple[str, ...] = ()
    ) -> None:
        super().__init__(message, field=field)
        self.close_matches = close_matches


def with_field_prefix(
    prefix: str, action: Callable[[], T], *, exact: bool = False, fields: Mapping[str, str] | None = None
) -> T:
    """Run ``action``; a domain error is raised again naming the request path of its field: ``fields``
    maps bare names to full paths, any other field goes under ``prefix`` (unless it already starts
    with it), and ``exact`` (or a field of None) names ``prefix`` itself: the whole sub-object at
    ``prefix`` is the one value at fault. The one place a domain error's field is re-rooted; the
    domain's error is left as raised (a copy names the path)."""
    try:
        return action()
    except DomainError as exc:
        name = exc.field
        if exact or name is None:
            path = prefix
        elif fields and name in fields:
            path = fields[name]
        elif name.startswith(prefix):
            path = name
        else:
            path = f"{prefix}.{name}"
        if path == name:
            raise
        rooted = copy.copy(exc)
        rooted.field = path
        raise rooted from exc
