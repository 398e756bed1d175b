"""Learning-rate schedules as numbers, CSV or charts."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(tags=["schedules"])
