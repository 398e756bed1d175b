"""Model FLOPs Utilization from a measured throughput; batch form for schedulers."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(tags=["mfu"])
