"""Trivial routes that benchmarks measure beside the real ones, through the same middleware and app
(mounted only with TEFF_BENCHMARK_ROUTES=true; not part of the published contract)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

router = APIRouter(include_in_schema=False)


@router.get("/bench/noop")
async def noop_get() -> dict[str, bool]:
    return {"ok": True}


@router.post("/bench/noop")
async def noop_post(body: dict[str, Any]) -> dict[str, int]:
    return {"fields": len(body)}


@router.post("/bench/noop-db")
def noop_post_db(request: Request, body: dict[str, Any]) -> dict[str, int]:
    """A trivial POST that, like a store write, runs in the threadpool and opens a write transaction."""
    from service.store.uow import UnitOfWork

    with UnitOfWork(request.app.state.engine, write=True) as uow:
        uow.commit()
    return {"fields": len(body)}
