"""End to end on loopback: a real ``wf-rpc-server`` and three real ``wf worker`` processes.

Each test starts its own server (temporary SQLite store, port 0, a 2-second
lease TTL so that a lost lease expires quickly) and three workers running
:mod:`sample_app`, then kills things with SIGKILL and checks, through the
server's JSON-RPC, what survived. Every wait polls a condition under a
deadline.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _servers import Admin, Processes, ServerProcess, WorkerProcess, processes, wait_until
from sample_app import echo, slow

LEASE_TTL_S = 2.0
SERVER_CONFIG: dict[str, Any] = {
    "server": {"store": {"durability": "process"}},
    # A lease expires (2 s) before its dead worker misses heartbeats (6 x 0.5 s).
    "dispatch": {"lease_ttl_s": LEASE_TTL_S, "heartbeat_misses_max": 6},
}
WORKER_IDS = ("w1", "w2", "w3")
UP_S = 20.0
"""Bound for processes to start and register."""
WORK_S = 20.0
"""Bound for submitted work to finish."""


class Cluster:
    def __init__(self, ps: Processes, store_root: Path) -> None:
        self.ps = ps
        self.store_root = store_root
        self.server: ServerProcess = ps.server(store_root, config=SERVER_CONFIG)
        self.workers: dict[str, WorkerProcess] = {
            wid: ps.worker(self.server.url, wid) for wid in WORKER_IDS
        }
        self.admin = Admin(self.server.url)
        wait_until(lambda: self.admin.active_workers() == set(WORKER_IDS), "three workers", UP_S)

    def submit(self, *activities: Any) -> list[str]:
        answer = self.admin.call("scheduler.activities.submit", {"activities": list(activities)})
        ids: list[str] = answer["activity_ids"]
        return ids

    def wait_completed(self, ids: list[str], timeout_s: float = WORK_S) -> None:
        def done() -> bool:
            return set(self.admin.states(ids).values()) == {"completed"}

        wait_until(done, f"{len(ids)} activities completed", timeout_s)

    def restart_server(self) -> None:
        """SIGKILL the server and start a new one on the same store and port."""
        port = self.server.port
        self.server.kill()
        self.server = self.ps.server(self.store_root, port=port, config=SERVER_CONFIG)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with processes(tmp_path) as ps:
        c = Cluster(ps, tmp_path / "store")
        try:
            yield c
        finally:
            c.admin.close()


def executed_by(c: Cluster, activity_id: str) -> list[str]:
    """Worker of every start of the activity, in order."""
    return [r["worker_id"] for r in c.admin.history(activity_id) if r["to_state"] == "executing"]


def test_activities_are_dispatched_across_all_workers(cluster: Cluster) -> None:
    ids = cluster.submit(*(echo.activity(f"e-{i}", args=(i, 0.2)) for i in range(24)))
    cluster.wait_completed(ids)
    ran_on = {wid for aid in ids for wid in executed_by(cluster, aid)}
    assert ran_on == set(WORKER_IDS)
    acknowledged = [
        line["activity_id"]
        for w in cluster.workers.values()
        for line in w.actions("lease.completed")
    ]
    assert sorted(acknowledged) == sorted(ids)
    # SIGTERM drains: the worker deregisters and exits cleanly.
    assert cluster.workers["w1"].stop() == 0
    assert cluster.workers["w1"].actions("worker.stopped")
    statuses = {
        w["info"]["worker_id"]: w["status"]
        for w in cluster.admin.call("scheduler.workers.list")["workers"]
    }
    assert statuses["w1"] == "gone"


def test_a_killed_workers_activity_completes_elsewhere_with_its_attempts(
    cluster: Cluster,
) -> None:
    (aid,) = cluster.submit(slow.activity("victim", args=(1.0,)))
    # The store's history, not the core's live state: a reader may see the core
    # executing a moment before the transition's commit lands.
    wait_until(lambda: bool(executed_by(cluster, aid)), "victim running", WORK_S)
    (first,) = executed_by(cluster, aid)
    cluster.workers[first].kill()
    cluster.wait_completed([aid])
    rows = cluster.admin.history(aid)
    starts = [r for r in rows if r["to_state"] == "executing"]
    assert [s["attempt"] for s in starts] == [1, 2]
    assert starts[0]["worker_id"] == first
    assert starts[1]["worker_id"] != first
    # The first loss is the lease expiring. The dead worker's last poll may still be
    # open on the server and attract the requeued activity again (never started) until
    # its missed heartbeats are noticed; the attempt count only moves on a real start.
    first_loss = next(r for r in rows if r["from_state"] == "executing")
    assert (first_loss["reason"], first_loss["to_state"], first_loss["infra_requeues"]) == (
        "lease_expired",
        "queued",
        1,
    )
    done = rows[-1]
    assert (done["to_state"], done["attempt"], done["failures"]) == ("completed", 2, 0)


def test_workers_reconnect_after_a_server_sigkill_and_nothing_acknowledged_is_lost(
    cluster: Cluster,
) -> None:
    before = cluster.submit(*(echo.activity(f"b-{i}", args=(i, 0.3)) for i in range(30)))

    def some_completed() -> bool:
        return list(cluster.admin.states(before).values()).count("completed") >= 6

    wait_until(some_completed, "the first completions", WORK_S)
    done_before = {wid: len(w.actions("lease.completed")) for wid, w in cluster.workers.items()}
    cluster.restart_server()
    after = cluster.submit(*(echo.activity(f"a-{i}", args=(i, 0.05)) for i in range(15)))
    cluster.wait_completed(before + after)

    acknowledged: dict[str, int] = {}
    for w in cluster.workers.values():
        # Back at work with the new server: a worker whose call met the outage
        # registers again; one whose retried call simply reached the new server
        # (which restored its registration) goes on completing leases.
        reregistered = len(w.actions("worker.registered")) >= 2
        worked_after = len(w.actions("lease.completed")) > done_before[w.worker_id]
        assert reregistered or worked_after, f"{w.worker_id} did nothing after the restart"
        for line in w.actions("lease.completed"):
            assert line["activity_id"] not in acknowledged, "one acknowledgement per activity"
            acknowledged[line["activity_id"]] = line["token"]
    assert set(acknowledged) <= set(before + after)
    assert len(acknowledged) >= len(before + after) - 3  # at most a few answers lost in the kill
    for aid, token in acknowledged.items():
        completed = [r for r in cluster.admin.history(aid) if r["to_state"] == "completed"]
        assert [r["token"] for r in completed] == [token], aid
