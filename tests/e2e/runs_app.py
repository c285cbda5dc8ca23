"""The worker app of the workflow-run end-to-end tests (``tests/e2e/test_e2e_runs.py``).

``wf worker --app tests.e2e.runs_app:worker``. Each worker process runs one
activity at a time (``max_concurrency=1``), so two nodes that must overlap can
only do so on two different workers. Activities coordinate with the test
through files in a directory the run passes as an input; every wait is
bounded. Whether a node may be rerun after its worker died is the plan's
``idempotent``, not this module's: the scheduler reads it from the submitted
activity. The server URL is a placeholder: the tests pass ``--server``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from wf.worker import Worker, activity, activity_info

POLL_S = 0.01
"""How often a blocked activity looks for the file it waits for."""
WAIT_MAX_S = 30.0
"""Bound of every wait: an activity that waits longer fails instead of hanging."""


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + WAIT_MAX_S
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {WAIT_MAX_S} s")
        time.sleep(POLL_S)


def _ran_on() -> dict[str, Any]:
    info = activity_info()
    return {"worker": info.worker_id, "attempt": info.attempt}


@activity(name="runs.source")
async def source(tag: str) -> dict[str, Any]:
    """The first node: hands ``tag`` downstream."""
    return {"tag": tag, **_ran_on()}


@activity(name="runs.rendezvous")
def rendezvous(workdir: str, me: str, other: str, upstream: dict[str, Any]) -> dict[str, Any]:
    """Write ``<workdir>/<me>.started``, then wait until ``<workdir>/<other>.started`` exists.

    Two such nodes complete only if they run at the same time.
    """
    root = Path(workdir)
    (root / f"{me}.started").touch()
    _wait_for(root / f"{other}.started")
    return {"node": me, "tag": upstream["tag"], **_ran_on()}


@activity(name="runs.join")
async def join(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The last node: what its upstream nodes produced, in order."""
    return {"nodes": [p["node"] for p in parts], "tags": [p["tag"] for p in parts]}


@activity(name="runs.gated")
def gated(workdir: str, node: str) -> dict[str, Any]:
    """Append a line per execution to ``<workdir>/<node>.runs``; wait for ``<workdir>/release``."""
    root = Path(workdir)
    with (root / f"{node}.runs").open("a") as log:
        log.write(json.dumps(_ran_on()) + "\n")
    _wait_for(root / "release")
    return {"node": node, **_ran_on()}


worker = Worker(
    "http://127.0.0.1:8765",
    [source, rendezvous, join, gated],
    max_concurrency=1,
    heartbeat_interval_s=0.5,
    poll_wait_s=2.0,
)
