"""Predicted step time, throughput and MFU with the gap to peak broken down."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(tags=["predictions"])
