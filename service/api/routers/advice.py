"""Learning-rate and batch-size advice."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(tags=["advice"])
