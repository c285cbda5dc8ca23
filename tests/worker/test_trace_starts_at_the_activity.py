"""A failed activity's trace starts at the activity, and its type is said once (issue 17).

A real server and a real :class:`~wf.worker.Worker` over HTTP run a one-node
workflow whose activity raises from a helper, with a chained cause. The stored
trace (each attempt's, and the node's and run's error) holds the activity's own
frames and the cause's, none of the worker's executor (``wf/worker/``) or of the
stdlib thread pool and asyncio that ran it; the run's error names the type in
``error_type`` and not again at the start of its message.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from wf.client.app import App
from wf.server.app import WfServer
from wf.server.config import ServerConfig, ServerSection, StoreConfig
from wf.worker import Worker, activity

WAIT_S = 30.0


def _post_ledger() -> None:
    balances: dict[str, int] = {}
    try:
        balances["ledger"]
    except KeyError as missing:
        raise ValueError("the ledger does not balance") from missing


@activity(name="trace.sync")
def fails_sync() -> None:
    _post_ledger()


@activity(name="trace.async")
async def fails_async() -> None:
    await asyncio.sleep(0)
    _post_ledger()


def _plan(activity_type: str) -> dict[str, Any]:
    return {
        "nodes": [
            {
                "kind": "activity",
                "id": "post",
                "activity_type": activity_type,
                "retry": {"max_attempts": 1},
            }
        ],
        "output": {"result": {"$node": "post"}},
    }


async def _failed_run(tmp_path: Path, activity_type: str) -> dict[str, Any]:
    config = ServerConfig(
        server=ServerSection(port=0, store=StoreConfig(root=str(tmp_path), durability="process"))
    )
    server = WfServer(config)
    await server.start()
    url = f"http://127.0.0.1:{server.port}"
    worker = Worker(url, [fails_sync, fails_async], heartbeat_interval_s=0.2, poll_wait_s=0.5)
    serving = asyncio.create_task(worker.run())
    try:
        async with App(url) as app:
            await app.create_artifact_from_plan("ledger", 1, _plan(activity_type))
            await app.save_deployment({"artifact_id": "ledger", "artifact_version": 1})
            started = await app.start_run("ledger.default", {})
            view = await app.wait_for_run(started["run_id"], WAIT_S)
            return dict(view.to_builtins())
    finally:
        await worker.shutdown()
        await serving
        await server.stop()


@pytest.mark.parametrize("activity_type", ["trace.sync", "trace.async"])
def test_the_trace_starts_at_the_activity_and_keeps_its_cause(
    tmp_path: Path, activity_type: str
) -> None:
    view = asyncio.run(asyncio.wait_for(_failed_run(tmp_path, activity_type), WAIT_S * 2))
    assert view["status"] == "failed", view
    (entry,) = view["trace"]
    (attempt,) = entry["attempts"]
    trace: str = attempt["stack_trace"]
    machinery = (
        f"{os.sep}wf{os.sep}worker{os.sep}",
        f"concurrent{os.sep}futures",
        f"{os.sep}asyncio{os.sep}",
    )
    assert not any(place in trace for place in machinery), trace
    # Both exceptions of the chain, each from its first frame of the user's code on.
    cause, _, effect = trace.partition(
        "The above exception was the direct cause of the following exception:"
    )
    assert cause.startswith("Traceback (most recent call last):\n"), trace
    assert "in _post_ledger" in cause
    assert cause.rstrip().endswith("KeyError: 'ledger'")
    function = "fails_sync" if activity_type == "trace.sync" else "fails_async"
    first = effect.strip().split("\n")[1]  # the line after "Traceback (...):"
    assert first.startswith('  File "'), trace
    assert first.endswith(f"in {function}"), trace
    assert effect.rstrip().endswith("ValueError: the ledger does not balance")
    # The node's and the run's error carry that trace, and say the type once.
    assert entry["error"]["stack_trace"] == trace == view["error"]["stack_trace"]
    error = view["error"]
    assert error["error_type"] == "ValueError"
    assert error["message"] == "the ledger does not balance (retries_exhausted, attempt 1)"
