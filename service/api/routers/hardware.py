"""The accelerator catalog: dense peaks per precision, memory, bandwidth, power."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(tags=["hardware"])
