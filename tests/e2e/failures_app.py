"""The worker app of the failure-reporting end-to-end tests (``test_e2e_failures.py``).

``wf worker --app tests.e2e.failures_app:worker``. The server URL is a
placeholder: the tests pass ``--server``.
"""

from __future__ import annotations

from typing import Any

from wf.worker import Worker, activity, activity_info, heartbeat, last_heartbeat_details


def _deep_helper_that_raises(depth: int) -> None:
    if depth == 0:
        raise ValueError("the ledger does not balance")
    _deep_helper_that_raises(depth - 1)


@activity(name="failures.boom")
def boom(depth: int) -> dict[str, Any]:
    """Always fails, ``depth`` frames below itself (its trace names the helper)."""
    _deep_helper_that_raises(depth)
    return {}


@activity(name="failures.ok")
async def ok(value: int) -> dict[str, Any]:
    """Succeeds at once."""
    return {"value": value}


@activity(name="failures.resume")
def resume(items: int) -> dict[str, Any]:
    """Works through ``items``, heartbeating each one done; the first attempt fails
    after three, and a later one resumes from the last details it heartbeated."""
    start = (last_heartbeat_details() or {}).get("done", 0)
    info = activity_info()
    for i in range(start, items):
        heartbeat({"done": i + 1})
        if info.attempt == 1 and i + 1 == 3:
            raise RuntimeError("interrupted after 3 items")
    return {"resumed_from": start, "attempt": info.attempt}


worker = Worker(
    "http://127.0.0.1:8765",
    [boom, ok, resume],
    max_concurrency=2,
    heartbeat_interval_s=0.5,
    poll_wait_s=2.0,
)
