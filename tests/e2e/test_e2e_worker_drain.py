"""End to end: an operator drains a real ``wf worker`` process over JSON-RPC.

``scheduler.workers.shutdown`` (the console's "drain") for a worker that runs
one activity and holds others unstarted: the server requeues the unstarted
ones, the worker finishes the running one, does not register again, and its
process exits 0 saying it was drained by the server. A second worker then
runs the rest: every activity completes, each started exactly once.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _servers import Admin, Processes, ServerProcess, processes, wait_until
from sample_app import slow

SERVER_CONFIG: dict[str, Any] = {"server": {"store": {"durability": "process"}}}
UP_S = 20.0
"""Bound for processes to start and register."""
WORK_S = 30.0
"""Bound for submitted work to finish."""


@pytest.fixture
def ps(tmp_path: Path) -> Iterator[Processes]:
    with processes(tmp_path) as started:
        yield started


def starts(admin: Admin, activity_id: str) -> list[str]:
    """The worker of every start of the activity, in order."""
    return [r["worker_id"] for r in admin.history(activity_id) if r["to_state"] == "executing"]


def statuses(admin: Admin) -> dict[str, str]:
    return {
        w["info"]["worker_id"]: w["status"]
        for w in admin.call("scheduler.workers.list", {"limit": 100})["workers"]
    }


def test_a_worker_drained_over_json_rpc_finishes_its_work_and_exits(
    ps: Processes, tmp_path: Path
) -> None:
    server: ServerProcess = ps.server(tmp_path / "store", config=SERVER_CONFIG)
    admin = Admin(server.url)
    try:
        drained = ps.worker(server.url, "drained", "--max-concurrency", "1", "--prefetch", "2")
        wait_until(lambda: admin.active_workers() == {"drained"}, "the worker registered", UP_S)
        answer = admin.call(
            "scheduler.activities.submit",
            {"activities": [slow.activity(f"s-{i}", args=(2.0,)) for i in range(3)]},
        )
        ids: list[str] = answer["activity_ids"]
        wait_until(lambda: any(starts(admin, a) for a in ids), "one activity running", WORK_S)
        wait_until(
            lambda: "queued" not in admin.states(ids).values(), "every activity granted", WORK_S
        )
        admin.call("scheduler.workers.shutdown", {"worker_id": "drained"})

        assert drained.proc.wait(WORK_S) == 0
        assert drained.actions("worker.drained_by_server")
        (stopped,) = drained.actions("worker.stopped")
        assert stopped["drained_by_server"] is True
        assert len(drained.actions("worker.registered")) == 1  # never came back
        assert statuses(admin)["drained"] == "gone"
        # What it was running when drained it finished (the first, or the next one if
        # the first ended before the drain on a slow machine); the rest went back.
        finished_there = {line["activity_id"] for line in drained.actions("lease.completed")}
        assert 1 <= len(finished_there) < len(ids)

        ps.worker(server.url, "rest")

        def all_completed() -> bool:
            return set(admin.states(ids).values()) == {"completed"}

        wait_until(all_completed, "every activity completed", WORK_S)
        for aid in ids:
            expected = ["drained"] if aid in finished_there else ["rest"]
            assert starts(admin, aid) == expected, aid  # none lost, none run twice
    finally:
        admin.close()
