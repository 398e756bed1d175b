"""Model presets: well-known architectures and their parameter counts."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(tags=["models"])
