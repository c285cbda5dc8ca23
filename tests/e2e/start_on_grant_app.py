"""The worker app of ``test_e2e_start_on_grant``: one non-idempotent activity that
leaves a trace of every execution, and one declared idempotent.

``charge`` appends a line to ``marker`` (a file the test reads) the moment its
body begins, then holds for ``hold_s`` seconds: the file tells how many times
it ran, whatever happened to the worker. ``declared`` does the same but is
declared ``idempotent=True`` on the worker only, so submissions that leave
``idempotent`` unsaid inherit it (docs/server.md, "Declared defaults").
"""

from __future__ import annotations

import os
import time
from typing import Any

from wf.worker import Worker, activity, activity_info, is_cancelled


def _trace(marker: str) -> dict[str, Any]:
    info = activity_info()
    line = f"{info.worker_id} {info.attempt} {info.token}\n".encode()
    fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    return {"worker": info.worker_id, "attempt": info.attempt}


def _hold(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not is_cancelled():
        time.sleep(0.02)


@activity(name="e2e.charge")
def charge(marker: str, hold_s: float = 0.0) -> dict[str, Any]:
    """Not idempotent: must never run twice."""
    done = _trace(marker)
    _hold(hold_s)
    return done


@activity(name="e2e.declared", idempotent=True)
def declared(marker: str, hold_s: float = 0.0) -> dict[str, Any]:
    """Declared idempotent by the worker's code only."""
    done = _trace(marker)
    _hold(hold_s)
    return done


worker = Worker(
    "http://127.0.0.1:8765",
    [charge, declared],
    max_concurrency=1,
    heartbeat_interval_s=0.5,
    poll_wait_s=2.0,
)
