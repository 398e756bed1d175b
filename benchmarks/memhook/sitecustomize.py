"""Benchmark-only memory probe for a server process (never part of the service).

``benchmarks/soak.py --tracemalloc`` puts this directory first on the server's PYTHONPATH, so Python
imports this module at start-up in the server (and in each uvicorn worker). With
``TEFF_BENCH_TRACEMALLOC_OUT`` set, it starts tracemalloc and, every 10 s, appends one JSON line to
that file: seconds since start, the Python heap traced now and at its peak, and (from the second
minute on) the 15 source lines whose traced memory grew most since the snapshot taken at 60 s.
tracemalloc sees only Python's allocator: a resident-memory rise that it does not show is native
(SQLite's page caches, the C allocator's arenas), not Python objects kept alive.
"""

from __future__ import annotations

import json
import os
import threading
import time
import tracemalloc

_OUT = os.environ.get("TEFF_BENCH_TRACEMALLOC_OUT")


def _probe(path: str) -> None:
    started = time.monotonic()
    baseline: tracemalloc.Snapshot | None = None
    while True:
        time.sleep(10)
        elapsed = time.monotonic() - started
        current, peak = tracemalloc.get_traced_memory()
        record: dict[str, object] = {
            "seconds": round(elapsed, 1),
            "traced_bytes": current,
            "peak_bytes": peak,
        }
        if baseline is None and elapsed >= 60:
            baseline = tracemalloc.take_snapshot()
        elif baseline is not None and int(elapsed) % 60 < 10:
            growth = tracemalloc.take_snapshot().compare_to(baseline, "lineno")[:15]
            record["top_growth"] = [
                {"where": str(stat.traceback[0]), "size_diff": stat.size_diff, "count_diff": stat.count_diff}
                for stat in growth
            ]
        with open(f"{path}.{os.getpid()}", "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")


if _OUT:
    tracemalloc.start(1)
    threading.Thread(target=_probe, args=(_OUT,), name="bench-tracemalloc", daemon=True).start()
