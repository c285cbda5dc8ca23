"""The worker app the end-to-end tests run: ``wf worker --app tests.e2e.sample_app:worker``.

Both activities are idempotent, so work a killed worker abandoned is simply
requeued. The server URL here is a placeholder: the tests pass ``--server``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from wf.worker import Worker, activity, activity_info, heartbeat, is_cancelled


@activity(name="e2e.echo", idempotent=True)
async def echo(value: Any, delay_s: float = 0.0) -> dict[str, Any]:
    """Return ``value`` after ``delay_s``, with the worker that ran it."""
    await asyncio.sleep(delay_s)
    return {"value": value, "worker": activity_info().worker_id}


@activity(name="e2e.slow", idempotent=True)
def slow(seconds: float) -> dict[str, Any]:
    """Sync work in small steps, heartbeating and honouring cancellation."""
    deadline = time.monotonic() + seconds
    step = 0
    while time.monotonic() < deadline and not is_cancelled():
        time.sleep(0.02)
        step += 1
        heartbeat({"step": step})
    info = activity_info()
    return {"worker": info.worker_id, "attempt": info.attempt}


worker = Worker(
    "http://127.0.0.1:8765",
    [echo, slow],
    max_concurrency=4,
    heartbeat_interval_s=0.5,
    poll_wait_s=2.0,
)
