"""FLOPs per token under a named convention, broken down by component."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(tags=["flops"])
