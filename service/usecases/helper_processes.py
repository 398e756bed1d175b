"""Helper processes: one-worker process pools that use another core for CPU-bound work.

Each is spawned, not forked (forking a process that holds threads and database connections is not
safe), and watches its parent: a pool worker blocks on a pipe whose write end it holds itself, so it
never sees the parent go and would outlive a server ended by SIGKILL, or by SIGTERM (uvicorn re-raises
the signal after its graceful shutdown, and a process ended by a signal runs no exit handlers). The
worker leaves within a second of its parent.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor

#: How often a helper checks that its parent is still there.
PARENT_CHECK_SECONDS = 0.5


def helper_pool() -> ProcessPoolExecutor:
    """A one-worker pool whose worker exits when this process does."""
    return ProcessPoolExecutor(
        max_workers=1,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_leave_with_parent,
        initargs=(os.getpid(),),
    )


def _leave_with_parent(parent_pid: int) -> None:
    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_CHECK_SECONDS)
        os._exit(0)  # the parent is gone: nobody will read what this process would answer

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
