"""Compute-optimal model size and tokens for a budget."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(tags=["compute-optimal"])
