"""The worker app of the failover tests: ``wf worker --app tests.ha.ledger_app:worker``.

``ha.ledger`` is *not* idempotent: wf must never run it twice. Every
execution appends one JSON line (activity id, attempt, token, worker, pid,
wall time) to the ledger file named by ``$WF_HA_LEDGER`` with a single
``write`` on an ``O_APPEND`` descriptor, so lines from several worker
processes never interleave and "executed twice" is two lines with one id.
Then it sleeps ``seconds`` (so some executions straddle a fault) and returns.

``ha.parked`` is an activity type no worker serves: the benchmark parks its
live activities there. The server URL below is a placeholder: the harness
passes ``--server`` for every node.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any, Final

from wf.worker import Worker, activity, activity_info

LEDGER_ENV: Final = "WF_HA_LEDGER"
LEDGER_TYPE: Final = "ha.ledger"
PARKED_TYPE: Final = "ha.parked"


def append_line(path: str, entry: dict[str, Any]) -> None:
    """One ``write`` of one line on an ``O_APPEND`` descriptor (atomic for small lines)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(entry, separators=(",", ":")) + "\n").encode())
    finally:
        os.close(fd)


@activity(name=LEDGER_TYPE, idempotent=False)
async def ledger(seconds: float = 0.0) -> dict[str, Any]:
    """Record this execution in the ledger, then take ``seconds``."""
    info = activity_info()
    append_line(
        os.environ[LEDGER_ENV],
        {
            "activity_id": info.activity_id,
            "attempt": info.attempt,
            "token": info.token,
            "worker": info.worker_id,
            "pid": os.getpid(),
            "t": time.time(),
        },
    )
    if seconds > 0:
        await asyncio.sleep(seconds)
    return {"worker": info.worker_id, "attempt": info.attempt}


worker = Worker(
    "http://127.0.0.1:8765",
    [ledger],
    max_concurrency=8,
    heartbeat_interval_s=0.5,
    poll_wait_s=2.0,
)
