"""The worker app of the console's browser tests: ``tests.console.console_app:worker``.

The server URL is a placeholder: the tests pass ``--server`` and ``--token``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from wf.worker import Worker, activity, is_cancelled

WAIT_MAX_S = 60.0
"""Bound of the gate's wait: it fails instead of hanging."""


@activity(name="console.echo", idempotent=True)
async def echo(value: Any) -> Any:
    """Return ``value``."""
    return value


@activity(name="console.boom")
async def boom(message: str) -> None:
    """Fail with ``message`` (the run view shows the error and its stack trace)."""
    raise RuntimeError(message)


@activity(name="console.gate", idempotent=True)
def gate(path: str) -> str:
    """Wait until ``path`` exists or the activity is cancelled (bounded)."""
    deadline = time.monotonic() + WAIT_MAX_S
    while not Path(path).exists() and not is_cancelled():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {WAIT_MAX_S} s")
        time.sleep(0.02)
    return "released"


worker = Worker(
    "http://127.0.0.1:8765",
    [echo, boom, gate],
    max_concurrency=4,
    heartbeat_interval_s=0.5,
    poll_wait_s=2.0,
)
