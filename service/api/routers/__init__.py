"""Per-resource routers, mounted under /v1 by the app factory."""

from __future__ import annotations

from fastapi import APIRouter

ROUTERS: list[APIRouter] = []

TAGS: list[dict[str, str]] = [
    {"name": "operations", "description": "Health, readiness, metrics and problem types."},
]
