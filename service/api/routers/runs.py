"""Stored runs and their measurements (API key)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(tags=["runs"])
