"""Content negotiation for answers that can also be a picture or a table.

``negotiate(request, offered)`` picks the first offered media type the ``Accept`` header allows
(q-values honoured; JSON when no Accept is sent) or raises a 406 problem listing what is offered.
``representations(...)`` documents the alternatives in the OpenAPI.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from service.api.problems import NOT_ACCEPTABLE, ProblemError

JSON = "application/json"
SVG = "image/svg+xml"
PNG = "image/png"
CSV = "text/csv"

_DESCRIPTIONS = {
    SVG: "a chart (SVG)",
    PNG: "a chart (PNG)",
    CSV: "the data as CSV with a header row",
}


def _parse_accept(header: str) -> list[tuple[str, float]]:
    ranges: list[tuple[str, float]] = []
    for part in header.split(","):
        pieces = [piece.strip() for piece in part.split(";")]
        media = pieces[0].lower()
        if not media:
            continue
        quality = 1.0
        for parameter in pieces[1:]:
            if parameter.startswith("q="):
                try:
                    quality = float(parameter[2:])
                except ValueError:
                    quality = 0.0
        ranges.append((media, quality))
    return ranges


def _matches(media_range: str, media_type: str) -> bool:
    if media_range in ("*/*", media_type):
        return True
    return media_range.endswith("/*") and media_type.startswith(media_range[:-1])


def negotiate(request: Request, offered: tuple[str, ...]) -> str:
    header = request.headers.get("accept", "").strip()
    if not header:
        return offered[0]
    ranges = _parse_accept(header)
    best: tuple[float, int, str] | None = None
    for index, media_type in enumerate(offered):
        quality = max((q for media_range, q in ranges if _matches(media_range, media_type)), default=0.0)
        # Exact matches beat wildcards at equal quality by preferring the earlier offered type only
        # when the client did not name one explicitly.
        explicit = any(media_range == media_type for media_range, _ in ranges)
        if quality > 0:
            key = (quality + (0.001 if explicit else 0.0), -index, media_type)
            if best is None or key > best:
                best = key
    if best is None:
        raise ProblemError(
            NOT_ACCEPTABLE,
            f"Accept: {header!r} allows none of what this operation produces: {', '.join(offered)}.",
        )
    return best[2]


def representations(*media_types: str) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entry documenting the non-JSON answers of a 200."""
    content: dict[str, Any] = {}
    for media_type in media_types:
        schema: dict[str, Any] = {"type": "string"}
        if media_type == PNG:
            schema["format"] = "binary"
        content[media_type] = {"schema": schema}
    return {
        200: {
            "content": content,
            "description": "JSON, or " + ", ".join(_DESCRIPTIONS[m] for m in media_types),
        }
    }


def media_response(body: bytes | str, media_type: str, *, filename: str | None = None) -> Response:
    headers = {"Vary": "Accept"}
    if filename:
        headers["Content-Disposition"] = f'inline; filename="{filename}"'
    return Response(body, media_type=media_type, headers=headers)


NEGOTIATED = {"x-problems": ["406"]}
