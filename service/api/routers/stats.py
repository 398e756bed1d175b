"""Fleet MFU statistics (API key)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(tags=["stats"])
