"""Memory per device for a model, layout and micro-batch."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(tags=["memory"])
