"""Durable workflow runs end to end: a real ``wf-rpc-server`` and real ``wf worker`` processes.

Plans are published and deployed over JSON-RPC (``workflow.*`` through
:class:`~wf.client.app.SyncApp`), their activity nodes run on worker
processes of :mod:`runs_app` (one activity at a time each), and the tests
SIGKILL the server, the workers or both mid-run, restart the server on the
same store and port, and check through ``inspect_run`` what the run and its
per-node trace say. Activities coordinate with the test through files in a
temporary directory passed as a run input; every wait polls a condition under
a deadline.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _servers import Admin, Processes, ServerProcess, WorkerProcess, processes, wait_until

from wf.client.app import App, SyncApp

LEASE_TTL_S = 2.0
SERVER_CONFIG: dict[str, Any] = {
    "server": {"store": {"durability": "process"}},
    # As in test_e2e_workers: a lease expires (2 s) before its dead worker misses
    # heartbeats (6 x 0.5 s, the interval runs_app's workers declare).
    "dispatch": {"lease_ttl_s": LEASE_TTL_S, "heartbeat_misses_max": 6},
}
SURVIVING_LEASE_CONFIG: dict[str, Any] = {
    "server": {"store": {"durability": "process"}},
    # For the test where the worker outlives a server restart: the lease and the
    # worker's registration must outlast the downtime (server start-up plus the
    # worker's reconnection backoff), which a 2 s lease does not reliably do on a
    # loaded machine. Nothing in that test waits for an expiry, so this costs no time.
    "dispatch": {"lease_ttl_s": 30.0, "heartbeat_misses_max": 60},
}
APP = "tests.e2e.runs_app:worker"
UP_S = 20.0
"""Bound for processes to start and register."""
WORK_S = 20.0
"""Bound for a run (or one of its nodes) to get somewhere."""
FINAL = frozenset({"completed", "failed", "exhausted", "cancelled"})

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"workdir": {"type": "string"}, "tag": {"type": "string"}},
    "required": ["workdir"],
}


def rendezvous_node(me: str, other: str) -> dict[str, Any]:
    return {
        "kind": "activity",
        "id": me,
        "activity_type": "runs.rendezvous",
        "needs": ["a"],
        "args": {
            "workdir": {"$input": "workdir"},
            "me": me,
            "other": other,
            "upstream": {"$node": "a"},
        },
        "idempotent": True,
    }


FAN_OUT_PLAN: dict[str, Any] = {
    "input_schema": {**INPUT_SCHEMA, "required": ["workdir", "tag"]},
    "nodes": [
        {
            "kind": "activity",
            "id": "a",
            "activity_type": "runs.source",
            "args": {"tag": {"$input": "tag"}},
            "idempotent": True,
        },
        rendezvous_node("b", "c"),
        rendezvous_node("c", "b"),
        {
            "kind": "activity",
            "id": "d",
            "activity_type": "runs.join",
            "needs": ["b", "c"],
            "args": {"parts": [{"$node": "b"}, {"$node": "c"}]},
            "idempotent": True,
        },
    ],
    "output": {"result": {"$node": "d"}, "first": {"$node": "a", "path": "tag"}},
}


def gated_plan(*, idempotent: bool) -> dict[str, Any]:
    """One node ``step`` that blocks until ``<workdir>/release`` exists."""
    return {
        "input_schema": INPUT_SCHEMA,
        "nodes": [
            {
                "kind": "activity",
                "id": "step",
                "activity_type": "runs.gated",
                "args": {"workdir": {"$input": "workdir"}, "node": "step"},
                "idempotent": idempotent,
            }
        ],
        "output": {"node": {"$node": "step", "path": "node"}},
    }


class RunCluster:
    """One server on a temporary SQLite store, its workers, and clients for both APIs."""

    def __init__(self, ps: Processes, tmp: Path) -> None:
        self.ps = ps
        self.store_root = tmp / "store"
        self.workdir = tmp / "work"
        self.workdir.mkdir()
        self.config = SERVER_CONFIG
        self.server: ServerProcess | None = None
        self.workers: dict[str, WorkerProcess] = {}
        self._app: SyncApp | None = None
        self._admin: Admin | None = None

    # -------------------------------------------------------------- processes

    def start_server(self, config: dict[str, Any] | None = None) -> None:
        if config is not None:
            self.config = config
        port = 0 if self.server is None else self.server.port
        self.server = self.ps.server(self.store_root, port=port, config=self.config)
        self._app = App.sync(self.server.url)
        self._admin = Admin(self.server.url)

    def kill_server(self) -> None:
        """SIGKILL the server; its clients go with it (a restart makes new ones)."""
        assert self.server is not None
        self.server.kill()
        self._close_clients()

    def start_workers(self, *worker_ids: str) -> None:
        assert self.server is not None
        for wid in worker_ids:
            self.workers[wid] = self.ps.worker(self.server.url, wid, app=APP)
        wait_until(
            lambda: set(worker_ids) <= self.admin.active_workers(),
            f"workers {worker_ids} registered",
            UP_S,
        )

    def _close_clients(self) -> None:
        app, self._app = self._app, None
        admin, self._admin = self._admin, None
        if app is not None:
            app.close()
        if admin is not None:
            admin.close()

    def close(self) -> None:
        self._close_clients()

    @property
    def app(self) -> SyncApp:
        assert self._app is not None, "no server running"
        return self._app

    @property
    def admin(self) -> Admin:
        assert self._admin is not None, "no server running"
        return self._admin

    # ------------------------------------------------------------------ runs

    def deploy(self, artifact_id: str, plan: dict[str, Any]) -> str:
        self.app.create_artifact_from_plan(artifact_id, 1, plan)
        deployment = self.app.save_deployment({"artifact_id": artifact_id, "artifact_version": 1})
        deployment_id: str = deployment.deployment_id
        return deployment_id

    def start_run(self, deployment_id: str, **inputs: Any) -> str:
        view = self.app.start_run(deployment_id, {"workdir": str(self.workdir), **inputs})
        assert view["status"] == "running", view
        run_id: str = view["run_id"]
        return run_id

    def inspect(self, run_id: str) -> dict[str, Any]:
        view: dict[str, Any] = self.app.inspect_run(run_id)
        return view

    def wait_final(self, run_id: str) -> dict[str, Any]:
        views: list[dict[str, Any]] = []

        def final() -> bool:
            views.append(self.inspect(run_id))
            return views[-1]["status"] in FINAL

        wait_until(final, f"run {run_id} finished", WORK_S)
        return views[-1]

    def wait_executing(self, run_id: str, node: str) -> dict[str, Any]:
        """Wait until the node's current attempt has started on a worker; returns it."""
        started: list[dict[str, Any]] = []

        def executing() -> bool:
            tried = attempts_of(self.inspect(run_id), node)
            if tried and tried[-1].get("started_at") is not None:
                started.append(tried[-1])
                return True
            return False

        wait_until(executing, f"node {node} of {run_id} executing", WORK_S)
        return started[-1]

    def executions(self, node: str) -> list[dict[str, Any]]:
        """One line per time the node's activity body ran (written by runs_app.gated)."""
        path = self.workdir / f"{node}.runs"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def release(self) -> None:
        (self.workdir / "release").touch()


def node_entry(view: dict[str, Any], node: str) -> dict[str, Any]:
    entries: list[dict[str, Any]] = [e for e in view["trace"] if e["node"] == node]
    assert len(entries) == 1, view["trace"]
    return entries[0]


def attempts_of(view: dict[str, Any], node: str) -> list[dict[str, Any]]:
    found = [e for e in view["trace"] if e["node"] == node]
    if not found:
        return []
    attempts: list[dict[str, Any]] = found[0].get("attempts", [])
    return attempts


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RunCluster]:
    with processes(tmp_path) as ps:
        c = RunCluster(ps, tmp_path)
        try:
            yield c
        finally:
            c.close()


def test_fan_out_nodes_run_in_parallel_on_two_workers(cluster: RunCluster) -> None:
    cluster.start_server()
    cluster.start_workers("w1", "w2")
    deployment_id = cluster.deploy("fan_out", FAN_OUT_PLAN)
    run_id = cluster.start_run(deployment_id, tag="t-1")

    view = cluster.wait_final(run_id)

    assert view["status"] == "completed", view
    assert view["error"] is None
    assert view["output"] == {
        "result": {"nodes": ["b", "c"], "tags": ["t-1", "t-1"]},
        "first": "t-1",
    }
    assert [e["node"] for e in view["trace"]] == ["a", "b", "c", "d"]
    assert {e["status"] for e in view["trace"]} == {"completed"}
    for node in "abcd":
        entry = node_entry(view, node)
        assert entry["activity_id"] == f"{run_id}.{node}"
        (attempt,) = entry["attempts"]
        assert attempt["outcome"] == "completed"
        assert attempt["worker_id"] in {"w1", "w2"}
    # b and c only complete if both ran at once; one slot per worker makes that
    # two workers, and the trace says which.
    b_worker = attempts_of(view, "b")[0]["worker_id"]
    c_worker = attempts_of(view, "c")[0]["worker_id"]
    assert {b_worker, c_worker} == {"w1", "w2"}
    assert node_entry(view, "b")["output"]["worker"] == b_worker
    assert node_entry(view, "c")["output"]["worker"] == c_worker
    # d started only after both of its upstream nodes finished.
    d_started = attempts_of(view, "d")[0]["started_at"]
    assert d_started >= max(attempts_of(view, n)[0]["finished_at"] for n in "bc")
    listed = cluster.app.list_runs(deployment_id=deployment_id)
    assert [(r["run_id"], r["status"]) for r in listed["runs"]] == [(run_id, "completed")]


def kill_everything_mid_node(cluster: RunCluster, *, idempotent: bool) -> str:
    """Run the gated plan, SIGKILL the server and the worker executing ``step``,
    restart the server on the same store, start a fresh worker, release the node."""
    cluster.start_server()
    cluster.start_workers("w1")
    deployment_id = cluster.deploy("gated", gated_plan(idempotent=idempotent))
    run_id = cluster.start_run(deployment_id)
    first = cluster.wait_executing(run_id, "step")
    assert first["worker_id"] == "w1"
    wait_until(lambda: len(cluster.executions("step")) == 1, "step body running", WORK_S)

    cluster.kill_server()
    cluster.workers["w1"].kill()
    cluster.start_server()
    cluster.start_workers("w2")
    cluster.release()
    return run_id


def test_idempotent_node_reruns_after_server_and_worker_sigkill(cluster: RunCluster) -> None:
    run_id = kill_everything_mid_node(cluster, idempotent=True)

    view = cluster.wait_final(run_id)

    assert view["status"] == "completed", view
    assert view["output"] == {"node": "step"}
    first, second = attempts_of(view, "step")
    assert (first["worker_id"], first["attempt"]) == ("w1", 1)
    # The first attempt ended by its lease expiring (the trace's wording of the
    # outcome is presentation; the scheduler history row is the contract).
    assert first["outcome"].startswith("lease_expired")
    lost = [
        r
        for r in cluster.admin.history(f"{run_id}.step")
        if r["token"] == first["token"] and r["from_state"] == "executing"
    ]
    assert [(r["reason"], r["to_state"]) for r in lost] == [("lease_expired", "queued")]
    assert (second["worker_id"], second["attempt"], second["outcome"]) == ("w2", 2, "completed")
    assert second["started_at"] >= first["finished_at"]
    assert node_entry(view, "step")["output"] == {"node": "step", "worker": "w2", "attempt": 2}
    assert cluster.executions("step") == [
        {"worker": "w1", "attempt": 1},
        {"worker": "w2", "attempt": 2},
    ]


def test_non_idempotent_node_fails_closed_after_server_and_worker_sigkill(
    cluster: RunCluster,
) -> None:
    run_id = kill_everything_mid_node(cluster, idempotent=False)

    view = cluster.wait_final(run_id)

    assert view["status"] == "failed", view
    error = view["error"]
    assert error["code"] == "may_have_executed"
    assert error["may_have_executed"] is True
    assert error["node"] == "step"
    assert "external effects may already have occurred" in error["message"]
    assert view["output"] is None
    entry = node_entry(view, "step")
    assert entry["status"] == "failed"
    assert entry["error"] == error
    (attempt,) = entry["attempts"]
    assert (attempt["worker_id"], attempt["attempt"]) == ("w1", 1)
    assert attempt["outcome"] == "failed (may_have_executed)"
    assert cluster.admin.states([f"{run_id}.step"]) == {f"{run_id}.step": "failed"}
    # The body ran once, on the worker that died; the fresh worker never started it.
    assert cluster.executions("step") == [{"worker": "w1", "attempt": 1}]
    history = cluster.admin.history(f"{run_id}.step")
    assert [r["worker_id"] for r in history if r["to_state"] == "executing"] == ["w1"]
    assert (history[-1]["to_state"], history[-1]["reason"]) == ("failed", "may_have_executed")


def test_remote_worker_outlives_a_server_sigkill_and_delivers(cluster: RunCluster) -> None:
    cluster.start_server(SURVIVING_LEASE_CONFIG)
    cluster.start_workers("w1")
    worker = cluster.workers["w1"]
    deployment_id = cluster.deploy("gated", gated_plan(idempotent=False))
    run_id = cluster.start_run(deployment_id)
    cluster.wait_executing(run_id, "step")
    registrations = len(worker.actions("worker.registered"))

    cluster.kill_server()
    cluster.start_server()
    wait_until(
        lambda: len(worker.actions("worker.registered")) > registrations,
        "w1 re-registered with the new server",
        UP_S,
    )
    cluster.release()
    view = cluster.wait_final(run_id)

    assert view["status"] == "completed", view
    assert view["output"] == {"node": "step"}
    (attempt,) = attempts_of(view, "step")
    assert (attempt["worker_id"], attempt["attempt"], attempt["outcome"]) == ("w1", 1, "completed")
    assert cluster.executions("step") == [{"worker": "w1", "attempt": 1}]
    assert worker.proc.poll() is None
    (done,) = worker.actions("lease.completed")
    assert done["activity_id"] == f"{run_id}.step"
