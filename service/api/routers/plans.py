"""Parallel layouts that fit, ranked by predicted throughput."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(tags=["plans"])
