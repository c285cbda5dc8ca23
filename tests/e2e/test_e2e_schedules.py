"""Deployment schedules end to end: ``wf-rpc-server --enable-scheduler`` and ``wf worker``.

Contract 004, "Failure and restart": the server's admission service starts
scheduled runs on its own (one-shot schedules a second or two ahead, so no
test waits for a cron minute), their activity nodes run on worker processes
of :mod:`runs_app`, and the tests SIGKILL or SIGTERM the server mid-run,
restart it on the same store and port, and check what ``inspect_run``,
``list_runs`` and ``list_schedule_occurrences`` say. Activities coordinate
with the test through files in a temporary directory bound as a schedule
input; every wait polls a condition under a deadline.

The server is started here rather than by :meth:`_servers.Processes.server`
because the scheduler is enabled by the command-line flag (the config file
only tunes it: a short poll interval, drain grace and lease), so these tests
also prove the flag turns the service on.
"""

from __future__ import annotations

import json
import math
import queue
import signal
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from _servers import (
    STOP_TIMEOUT_S,
    Admin,
    Processes,
    ServerProcess,
    WorkerProcess,
    processes,
    wait_until,
)

from wf.client.app import App, SyncApp
from wf.errors import Draining

APP = "tests.e2e.runs_app:worker"
UP_S = 30.0
"""Bound for processes to start and register."""
WORK_S = 30.0
"""Bound for a run (or one of its nodes, or an admission) to get somewhere."""
LEAD_S = 1.5
"""How far ahead of now a one-shot instant is set (at least; rounded up to a second)."""
DRAIN_GRACE_S = 15.0
"""The drain grace of the graceful-stop test: long enough that the activity, released
right after the drain is seen, finishes well within it on a loaded machine."""
FINAL = frozenset({"completed", "failed", "exhausted", "cancelled"})


def server_config(*, drain_grace_s: float = 5.0) -> dict[str, Any]:
    """The config file: scheduler tuning only (the flag enables it), as in test_e2e_runs
    a lease (2 s) that expires before its dead worker misses heartbeats (6 x 0.5 s)."""
    return {
        "server": {
            "store": {"durability": "process"},
            "scheduler": {"poll_interval_s": 0.2, "drain_grace_s": drain_grace_s},
        },
        "dispatch": {"lease_ttl_s": 2.0, "heartbeat_misses_max": 6},
    }


INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"workdir": {"type": "string"}},
    "required": ["workdir"],
}
GATED_PLAN: dict[str, Any] = {
    # One non-idempotent node ``step`` that blocks until ``<workdir>/release`` exists
    # and logs each execution of its body to ``<workdir>/step.runs``.
    "input_schema": INPUT_SCHEMA,
    "nodes": [
        {
            "kind": "activity",
            "id": "step",
            "activity_type": "runs.gated",
            "args": {"workdir": {"$input": "workdir"}, "node": "step"},
            "idempotent": False,
        }
    ],
    "output": {"node": {"$node": "step", "path": "node"}},
}
ASK_PLAN: dict[str, Any] = {
    # Interrupted as soon as it begins; completes when answered (no worker involved).
    "nodes": [{"kind": "interrupt", "id": "ask", "prompt": "Publish?"}],
    "output": {"answer": {"$node": "ask"}},
}
ASK_THEN_WORK_PLAN: dict[str, Any] = {
    # Interrupted first; once answered, an activity on a worker uses the answer.
    "nodes": [
        {
            "kind": "interrupt",
            "id": "ask",
            "prompt": "Which tag?",
            "input_schema": {
                "type": "object",
                "properties": {"tag": {"type": "string"}},
                "required": ["tag"],
            },
        },
        {
            "kind": "activity",
            "id": "work",
            "activity_type": "runs.source",
            "needs": ["ask"],
            "args": {"tag": {"$node": "ask", "path": "tag"}},
            "idempotent": True,
        },
    ],
    "output": {"tag": {"$node": "work", "path": "tag"}},
}


def instant_ahead() -> datetime:
    """A whole-second UTC instant at least ``LEAD_S`` from now (exact ISO round trip)."""
    return datetime.fromtimestamp(math.ceil(time.time() + LEAD_S), tz=UTC)


def oneshot(at: datetime) -> dict[str, Any]:
    return {"kind": "oneshot", "at": at.isoformat()}


class ScheduleCluster:
    """One scheduling server on a temporary SQLite store, its workers, and clients."""

    def __init__(self, ps: Processes, tmp: Path) -> None:
        self.ps = ps
        self.store_root = tmp / "store"
        self.workdir = tmp / "work"
        self.workdir.mkdir()
        self.config = server_config()
        self.server: ServerProcess | None = None
        self.events: queue.Queue[str] = queue.Queue()
        """The current server's stdout lines after ``listening``."""
        self.workers: dict[str, WorkerProcess] = {}
        self._app: SyncApp | None = None
        self._admin: Admin | None = None

    # -------------------------------------------------------------- processes

    def start_server(self, config: dict[str, Any] | None = None) -> None:
        """``wf-rpc-server --enable-scheduler`` (same port on a restart); waits for
        its ``listening`` line, as :meth:`_servers.Processes.server` does."""
        if config is not None:
            self.config = config
        port = 0 if self.server is None else self.server.port
        self.events = queue.Queue()
        self.server = self.ps.server(
            self.store_root,
            "--enable-scheduler",
            port=port,
            config=self.config,
            lines=self.events,
        )
        self._app = App.sync(self.server.url)
        self._admin = Admin(self.server.url)

    def kill_server(self) -> None:
        """SIGKILL the server; its clients go with it (a restart makes new ones)."""
        assert self.server is not None
        self.server.kill()
        self._close_clients()

    def launch_worker(self, worker_id: str) -> None:
        """Start a worker without waiting for it to register."""
        assert self.server is not None
        self.workers[worker_id] = self.ps.worker(self.server.url, worker_id, app=APP)

    def start_workers(self, *worker_ids: str) -> None:
        for wid in worker_ids:
            self.launch_worker(wid)
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

    # ------------------------------------------------------------- schedules

    def deploy(self, artifact_id: str, plan: dict[str, Any]) -> str:
        self.app.create_artifact_from_plan(artifact_id, 1, plan)
        deployment = self.app.save_deployment({"artifact_id": artifact_id, "artifact_version": 1})
        deployment_id: str = deployment.deployment_id
        return deployment_id

    def schedule_once(
        self, schedule_id: str, deployment_id: str, *, workdir: bool = False
    ) -> datetime:
        """A one-shot schedule (overlap ``skip``) due shortly; returns its instant."""
        at = instant_ahead()
        self.app.create_schedule(
            schedule_id,
            deployment_id,
            oneshot(at),
            inputs={"workdir": str(self.workdir)} if workdir else None,
        )
        return at

    def runs_of(self, schedule_id: str) -> list[dict[str, Any]]:
        page = self.app.list_runs(schedule_id=schedule_id)
        assert page["next_cursor"] is None
        runs: list[dict[str, Any]] = page["runs"]
        return runs

    def occurrences(self, schedule_id: str) -> list[dict[str, Any]]:
        page = self.app.list_schedule_occurrences(schedule_id, limit=100)
        assert page["next_cursor"] is None
        rows: list[dict[str, Any]] = page["occurrences"]
        return rows

    def wait_admitted(self, schedule_id: str, status: str) -> str:
        """Wait until the schedule's only run reaches ``status``; returns its id."""
        seen: list[list[dict[str, Any]]] = []

        def reached() -> bool:
            seen.append(self.runs_of(schedule_id))
            return len(seen[-1]) == 1 and seen[-1][0]["status"] == status

        wait_until(reached, f"a {status} run of schedule {schedule_id}", WORK_S)
        run_id: str = seen[-1][0]["run_id"]
        return run_id

    def wait_occurrences(self, schedule_id: str, count: int) -> list[dict[str, Any]]:
        seen: list[list[dict[str, Any]]] = []

        def recorded() -> bool:
            seen.append(self.occurrences(schedule_id))
            return len(seen[-1]) >= count

        wait_until(recorded, f"{count} occurrence(s) of {schedule_id}", WORK_S)
        return seen[-1]

    # ------------------------------------------------------------------ runs

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

    def wait_step_executing(self, run_id: str) -> None:
        """Wait until ``step`` has started on a worker and its body is running."""

        def executing() -> bool:
            view = self.inspect(run_id)
            entries = [e for e in view["trace"] if e["node"] == "step"]
            attempts = entries[0].get("attempts", []) if entries else []
            return bool(attempts) and attempts[-1].get("started_at") is not None

        wait_until(executing, f"step of {run_id} executing", WORK_S)
        wait_until(lambda: len(self.executions()) == 1, "step body running", WORK_S)

    def executions(self) -> list[dict[str, Any]]:
        """One line per time the ``step`` body ran (written by runs_app.gated)."""
        path = self.workdir / "step.runs"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def release(self) -> None:
        (self.workdir / "release").touch()

    def metric(self, name: str) -> float | None:
        """One unlabelled sample of the server's ``/metrics`` (``None``: not exposed)."""
        assert self.server is not None
        with urllib.request.urlopen(f"{self.server.url}/metrics", timeout=5.0) as answer:
            text = answer.read().decode()
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None


def summary(occurrence: dict[str, Any]) -> tuple[str, str, str | None]:
    return occurrence["instant"], occurrence["status"], occurrence.get("run_id")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ScheduleCluster]:
    with processes(tmp_path) as ps:
        c = ScheduleCluster(ps, tmp_path)
        try:
            yield c
        finally:
            c.close()


def test_abandoned_scheduled_run_fails_closed_and_its_occurrence_is_not_readmitted(
    cluster: ScheduleCluster,
) -> None:
    """The server and the worker executing a scheduled run's non-idempotent node are
    SIGKILLed; after a restart the run is failed ``may_have_executed``, the occurrence
    shows ``failed``, and nothing is admitted again for that instant.

    That no re-admission happened is checked after a probe schedule, created after
    the restart and due after the first one's instant, has been admitted: the
    restarted admission service has by then looked at every schedule (it reconsiders
    them all when it starts) at a time past the abandoned occurrence's instant.
    """
    cluster.start_server()
    cluster.start_workers("w1")
    gated = cluster.deploy("gated", GATED_PLAN)
    at = cluster.schedule_once("nightly", gated, workdir=True)
    run_id = cluster.wait_admitted("nightly", "running")
    cluster.wait_step_executing(run_id)

    cluster.kill_server()
    cluster.workers["w1"].kill()
    cluster.start_server()
    cluster.start_workers("w2")
    cluster.release()  # a re-execution on w2 would now run to its end
    view = cluster.wait_final(run_id)

    assert view["status"] == "failed", view
    assert view["trigger"] == {
        "kind": "schedule",
        "schedule_id": "nightly",
        "occurrence": at.timestamp(),
    }
    error = view["error"]
    assert error["code"] == "may_have_executed"
    assert error["may_have_executed"] is True
    assert error["node"] == "step"
    assert "external effects may already have occurred" in error["message"]
    assert view["output"] is None

    probe_at = cluster.schedule_once("probe", cluster.deploy("ask", ASK_PLAN))
    cluster.wait_admitted("probe", "interrupted")
    assert probe_at > at

    assert [summary(o) for o in cluster.occurrences("nightly")] == [
        (at.isoformat(), "failed", run_id)
    ]
    assert [(r["run_id"], r["status"]) for r in cluster.runs_of("nightly")] == [(run_id, "failed")]
    schedule = cluster.app.get_schedule("nightly")
    assert schedule["next_instant"] is None  # the one-shot instant is consumed
    assert schedule["watermark"] >= at.timestamp()
    # The body ran once, on the worker that died; the fresh worker never got it.
    assert cluster.executions() == [{"worker": "w1", "attempt": 1}]
    history = cluster.admin.history(f"{run_id}.step")
    assert [r["worker_id"] for r in history if r["to_state"] == "executing"] == ["w1"]
    assert (history[-1]["to_state"], history[-1]["reason"]) == ("failed", "may_have_executed")


def test_interrupted_scheduled_run_keeps_its_overlap_slot_across_a_server_sigkill(
    cluster: ScheduleCluster,
) -> None:
    """An interrupted run of an ``overlap="skip"`` schedule survives a server SIGKILL
    still resumable and still occupying the schedule's overlap slot.

    Overlap is per schedule, and a one-shot schedule fires once; rather than a cron
    ``* * * * *`` schedule (a minute per occurrence, several minutes per test), the
    same schedule is given a new one-shot instant a second ahead with
    ``update_schedule`` after the restart. An edit keeps the schedule (and its
    overlap slot) and affects only future admissions, so that instant is a fresh
    occurrence of the same schedule: it is ``skipped-overlap`` while the run
    recovered from the store stays interrupted, and once ``resume_run`` has
    completed the run, the next such instant is admitted as a new run.
    """
    cluster.start_server()
    deployment = cluster.deploy("ask_then_work", ASK_THEN_WORK_PLAN)
    first_at = cluster.schedule_once("approvals", deployment)
    run_id = cluster.wait_admitted("approvals", "interrupted")

    cluster.kill_server()
    cluster.start_server()
    cluster.launch_worker("w1")  # registers while the test goes on

    view = cluster.inspect(run_id)
    assert view["status"] == "interrupted", view
    assert [a["node"] for a in view["awaiting"]] == ["ask"]
    assert view["resumes"] == []
    assert [summary(o) for o in cluster.occurrences("approvals")] == [
        (first_at.isoformat(), "interrupted", run_id)
    ]

    # An occurrence due after the restart finds the slot taken.
    second_at = instant_ahead()
    revision = cluster.app.get_schedule("approvals")["revision"]
    cluster.app.update_schedule("approvals", revision, trigger=oneshot(second_at))
    rows = cluster.wait_occurrences("approvals", 2)
    assert [summary(o) for o in rows] == [
        (first_at.isoformat(), "interrupted", run_id),
        (second_at.isoformat(), "skipped-overlap", None),
    ]
    assert "overlap=skip" in rows[1]["detail"]
    assert cluster.app.get_schedule("approvals")["skipped_overlap"] == 1
    assert [r["run_id"] for r in cluster.runs_of("approvals")] == [run_id]

    # Resumed after the restart, the run completes (on the fresh worker) ...
    wait_until(lambda: "w1" in cluster.admin.active_workers(), "w1 registered", UP_S)
    resumed = cluster.app.resume_run(run_id, {"tag": "after-restart"})
    assert [(m["attempt"], m["state"]) for m in resumed["resumes"]] == [(1, "applied")]
    done = cluster.wait_final(run_id)
    assert done["status"] == "completed", done
    assert done["output"] == {"tag": "after-restart"}

    # ... which frees the slot: the next occurrence is admitted as a new run.
    third_at = instant_ahead()
    revision = cluster.app.get_schedule("approvals")["revision"]
    cluster.app.update_schedule("approvals", revision, trigger=oneshot(third_at))
    rows = cluster.wait_occurrences("approvals", 3)
    runs = cluster.runs_of("approvals")
    assert [r["run_id"] for r in runs][:1] == [run_id]
    assert len(runs) == 2, runs
    second_run = runs[1]["run_id"]
    assert [summary(o) for o in rows] == [
        (first_at.isoformat(), "completed", run_id),
        (second_at.isoformat(), "skipped-overlap", None),
        (third_at.isoformat(), rows[2]["status"], second_run),
    ]
    assert rows[2]["status"] in {"admitted", "running", "interrupted"}
    wait_until(
        lambda: cluster.inspect(second_run)["status"] == "interrupted",
        f"{second_run} interrupted",
        WORK_S,
    )


def test_sigterm_drains_a_scheduled_run_on_a_remote_worker_before_exiting(
    cluster: ScheduleCluster,
) -> None:
    """SIGTERM while a scheduled run's node executes on a live worker: the server keeps
    serving while it drains (the worker can deliver), refuses a scheduled resume for
    the duration, and exits 0 once the run has completed, within ``drain_grace_s``.

    The run's completion before the exit is shown by restarting the server on the same
    store with that worker killed: a run still running at exit could then only fail
    (its non-idempotent node abandoned), yet it is ``completed``.
    """
    cluster.start_server(server_config(drain_grace_s=DRAIN_GRACE_S))
    cluster.start_workers("w1")
    gated = cluster.deploy("gated", GATED_PLAN)
    asking = cluster.deploy("ask", ASK_PLAN)
    cluster.schedule_once("work", gated, workdir=True)
    cluster.schedule_once("asker", asking)
    run_id = cluster.wait_admitted("work", "running")
    asked = cluster.wait_admitted("asker", "interrupted")
    cluster.wait_step_executing(run_id)
    server = cluster.server
    assert server is not None
    assert cluster.metric("wf_schedule_service_draining") == 0.0

    server.proc.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    wait_until(lambda: cluster.metric("wf_schedule_service_draining") == 1.0, "draining", WORK_S)
    # Draining: the run is still running, and a scheduled resume is refused before it
    # marks anything (the interrupted run stays as it was).
    assert cluster.inspect(run_id)["status"] == "running"
    with pytest.raises(Draining):
        cluster.app.resume_run(asked, {"ok": True})
    ask_view = cluster.inspect(asked)
    assert (ask_view["status"], ask_view["resumes"]) == ("interrupted", [])
    assert server.proc.poll() is None

    cluster.release()
    code = server.proc.wait(STOP_TIMEOUT_S + DRAIN_GRACE_S)
    exited = time.monotonic()
    exited_at = time.time()
    cluster.close()

    assert code == 0, server.log_path.read_text()[-2000:]
    assert exited - signalled < DRAIN_GRACE_S
    assert "still running" not in server.log_path.read_text()
    # The stdout reader thread may still be passing the last line on.
    assert json.loads(cluster.events.get(timeout=STOP_TIMEOUT_S))["event"] == "stopped"

    cluster.workers["w1"].kill()
    cluster.start_server()
    view = cluster.inspect(run_id)
    assert view["status"] == "completed", view
    assert view["output"] == {"node": "step"}
    assert view["finished_at"] <= exited_at
    assert cluster.executions() == [{"worker": "w1", "attempt": 1}]
    (delivered,) = cluster.workers["w1"].actions("lease.completed")
    assert delivered["activity_id"] == f"{run_id}.step"
    assert [summary(o)[1:] for o in cluster.occurrences("work")] == [("completed", run_id)]
    # The resume refused during the drain left the other run resumable.
    cluster.app.resume_run(asked, {"ok": True})
    assert cluster.wait_final(asked)["output"] == {"answer": {"ok": True}}


def test_sigterm_past_the_drain_grace_leaves_the_run_to_the_next_recovery(
    cluster: ScheduleCluster,
) -> None:
    """A scheduled run whose node is still executing when ``drain_grace_s`` runs out
    does not hold the exit: the server exits 0 after the grace, warning that it left
    the run running, and the run keeps its stored state. With its worker gone, the
    next start's recovery abandons it truthfully (``may_have_executed``) without
    re-admitting its occurrence."""
    grace_s = 1.0
    cluster.start_server(server_config(drain_grace_s=grace_s))
    cluster.start_workers("w1")
    at = cluster.schedule_once("late", cluster.deploy("gated", GATED_PLAN), workdir=True)
    run_id = cluster.wait_admitted("late", "running")
    cluster.wait_step_executing(run_id)
    server = cluster.server
    assert server is not None

    signalled = time.monotonic()
    code = server.stop()
    exited = time.monotonic()
    cluster.close()

    assert code == 0, server.log_path.read_text()[-2000:]
    assert exited - signalled >= grace_s
    assert "1 scheduled run(s) still running" in server.log_path.read_text()

    cluster.workers["w1"].kill()
    cluster.start_server()
    cluster.release()
    view = cluster.wait_final(run_id)
    assert view["status"] == "failed", view
    assert view["error"]["code"] == "may_have_executed"
    assert "external effects may already have occurred" in view["error"]["message"]
    assert [summary(o) for o in cluster.occurrences("late")] == [(at.isoformat(), "failed", run_id)]
    assert [r["run_id"] for r in cluster.runs_of("late")] == [run_id]
    assert cluster.executions() == [{"worker": "w1", "attempt": 1}]
