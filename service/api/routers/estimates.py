"""Wall-clock, device-hours, cost and energy for a token budget."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(tags=["estimates"])
