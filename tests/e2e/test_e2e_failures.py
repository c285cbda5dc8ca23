"""Failures you can read, end to end: a real ``wf-rpc-server`` and a real ``wf worker``.

A failing activity's formatted stack trace travels with the failure, is kept
with each failed attempt, and shows in ``runs.inspect`` (each attempt, the
node's and the run's error), in ``wf runs inspect`` (an ERROR column, and the
``--attempts`` view) and in the worker's log (a warning naming type and message).
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _servers import BIN, REPO, Admin, Processes, ServerProcess, processes, wait_until
from prometheus_client.parser import text_string_to_metric_families

from wf.client.app import App, SyncApp

APP = "tests.e2e.failures_app:worker"
CONFIG: dict[str, Any] = {"server": {"store": {"durability": "process"}}}
UP_S = 20.0
WORK_S = 20.0
FINAL = frozenset({"completed", "failed", "cancelled"})


class Cluster:
    """One server on a temporary SQLite store, a worker, and a client."""

    def __init__(self, ps: Processes, tmp: Path) -> None:
        self.ps = ps
        self.server: ServerProcess = ps.server(tmp / "store", config=CONFIG)
        self.app: SyncApp = App.sync(self.server.url)
        self.admin = Admin(self.server.url)

    def start_worker(self, worker_id: str = "w1") -> Any:
        worker = self.ps.worker(self.server.url, worker_id, app=APP)
        wait_until(
            lambda: worker_id in self.admin.active_workers(), f"{worker_id} registered", UP_S
        )
        return worker

    def deploy(self, artifact_id: str, plan: dict[str, Any]) -> str:
        self.app.create_artifact_from_plan(artifact_id, 1, plan)
        deployment = self.app.save_deployment({"artifact_id": artifact_id, "artifact_version": 1})
        deployment_id: str = deployment.deployment_id
        return deployment_id

    def wait_final(self, run_id: str) -> dict[str, Any]:
        views: list[dict[str, Any]] = []

        def final() -> bool:
            views.append(self.app.inspect_run(run_id))
            return views[-1]["status"] in FINAL

        wait_until(final, f"run {run_id} finished", WORK_S)
        return views[-1]

    def wf(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN / "wf"), *argv, "--server", self.server.url],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=REPO,
            check=False,
        )

    def server_log(self, action: str) -> list[dict[str, Any]]:
        found = []
        for raw in self.server.log_path.read_text().splitlines():
            try:
                line = json.loads(raw)
            except json.JSONDecodeError:
                continue
            if isinstance(line, dict) and line.get("action") == action:
                found.append(line)
        return found

    def metrics(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        with urllib.request.urlopen(self.server.url + "/metrics", timeout=10) as response:
            text = response.read().decode()
        return {
            (s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    def close(self) -> None:
        self.app.close()
        self.admin.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with processes(tmp_path) as ps:
        c = Cluster(ps, tmp_path)
        try:
            yield c
        finally:
            c.close()


BOOM_PLAN: dict[str, Any] = {
    "nodes": [
        {
            "kind": "activity",
            "id": "post",
            "activity_type": "failures.boom",
            "args": {"depth": 3},
            "retry": {"max_attempts": 2, "initial_backoff_s": 0.0},
        }
    ],
    "output": {"result": {"$node": "post"}},
}


def test_failed_attempts_keep_their_stack_trace_in_inspect_cli_and_log(
    cluster: Cluster,
) -> None:
    worker = cluster.start_worker()
    deployment_id = cluster.deploy("boom", BOOM_PLAN)
    run_id = cluster.app.start_run(deployment_id, {})["run_id"]
    view = cluster.wait_final(run_id)

    assert view["status"] == "failed"
    (entry,) = view["trace"]
    attempts = entry["attempts"]
    assert [a["outcome"] for a in attempts] == [
        "failed, retried",
        "failed (retries_exhausted)",
    ]
    for attempt in attempts:
        trace = attempt["stack_trace"]
        assert trace.startswith("Traceback (most recent call last):")
        assert "_deep_helper_that_raises" in trace
        assert trace.rstrip().endswith("ValueError: the ledger does not balance")
        assert attempt["error"] == "ValueError: the ledger does not balance"
    # The node's and the run's error carry the last attempt's trace.
    assert entry["error"]["stack_trace"] == attempts[-1]["stack_trace"]
    assert view["error"]["stack_trace"] == attempts[-1]["stack_trace"]

    shown = cluster.wf("runs", "inspect", run_id)
    assert shown.returncode == 0, shown.stderr
    header = next(line for line in shown.stdout.splitlines() if line.startswith("NODE"))
    assert header.split()[-1] == "ERROR"
    assert "ValueError: the ledger does not balance" in shown.stdout
    assert "stack trace (node post, last attempt):" in shown.stdout
    assert "_deep_helper_that_raises" in shown.stdout

    listed = cluster.wf("runs", "inspect", run_id, "--attempts")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split()[:2] == ["NODE", "ATTEMPT"]
    assert [line.split()[:2] for line in lines[1:3]] == [["post", "1"], ["post", "2"]]
    assert "stack trace (node post, attempt 1):" in listed.stdout
    assert "stack trace (node post, attempt 2):" in listed.stdout

    as_json = cluster.wf("runs", "inspect", run_id, "--attempts", "--json")
    assert as_json.returncode == 0, as_json.stderr
    decoded = json.loads(as_json.stdout)
    assert decoded["trace"][0]["attempts"][0]["stack_trace"] == attempts[0]["stack_trace"]

    def warned() -> bool:
        return len(worker.actions("lease.failed")) == 2

    wait_until(warned, "two lease.failed lines in the worker's log", WORK_S)
    for line in worker.actions("lease.failed"):
        assert line["level"] == "warning"
        assert line["error_type"] == "ValueError"
        assert line["error_message"] == "the ledger does not balance"


OK_PLAN: dict[str, Any] = {
    "nodes": [
        {"kind": "activity", "id": "one", "activity_type": "failures.ok", "args": {"value": 1}}
    ],
    "output": {"result": {"$node": "one"}},
}


def test_every_server_logs_run_events_and_counts_runs_on_metrics(cluster: Cluster) -> None:
    cluster.start_worker()
    ok_deployment = cluster.deploy("ok", OK_PLAN)
    boom_deployment = cluster.deploy("boom", BOOM_PLAN)
    completed = cluster.app.start_run(ok_deployment, {})["run_id"]
    failed = cluster.app.start_run(boom_deployment, {})["run_id"]
    assert cluster.wait_final(completed)["status"] == "completed"
    assert cluster.wait_final(failed)["status"] == "failed"
    # Its first attempt fails and the retry waits a minute: the run is running until cancelled.
    slow_plan = {"nodes": [{**BOOM_PLAN["nodes"][0], "retry": {"initial_backoff_s": 60.0}}]}
    slow_deployment = cluster.deploy("slow", {**BOOM_PLAN, **slow_plan})
    pending = cluster.app.start_run(slow_deployment, {})["run_id"]
    cluster.app.cancel_run(pending, reason="enough")
    assert cluster.wait_final(pending)["status"] == "cancelled"

    def logged() -> bool:
        return len(cluster.server_log("run.admitted")) == 3 and (
            len(cluster.server_log("run.cancelled")) == 1
        )

    wait_until(logged, "the server's run lines", WORK_S)
    assert sorted(line["run_id"] for line in cluster.server_log("run.admitted")) == sorted(
        [completed, failed, pending]
    )
    assert [line["run_id"] for line in cluster.server_log("run.completed")] == [completed]
    (failed_line,) = cluster.server_log("run.failed")
    assert (failed_line["run_id"], failed_line["level"]) == (failed, "warning")
    assert failed_line["node"] == "post"
    assert [line["run_id"] for line in cluster.server_log("run.cancelled")] == [pending]

    samples = cluster.metrics()

    def runs(deployment: str, status: str) -> float:
        return samples[
            ("wf_runs_total", frozenset({"deployment": deployment, "status": status}.items()))
        ]

    assert runs(ok_deployment, "completed") == 1
    assert runs(boom_deployment, "failed") == 1
    assert runs(slow_deployment, "cancelled") == 1
    for status in ("completed", "failed", "cancelled"):
        labels = frozenset({"status": status}.items())
        assert samples[("wf_run_duration_seconds_count", labels)] == 1
    assert samples[("wf_run_duration_seconds_sum", frozenset({"status": "completed"}.items()))] > 0
    # The scheduling latency measures (it once summed to 0.0 over every dispatch).
    ok_type = frozenset({"activity_type": "failures.ok"}.items())
    assert samples[("wf_scheduling_latency_seconds_count", ok_type)] == 1
    assert samples[("wf_scheduling_latency_seconds_sum", ok_type)] > 0


RESUME_PLAN: dict[str, Any] = {
    "nodes": [
        {
            "kind": "activity",
            "id": "batch",
            "activity_type": "failures.resume",
            "args": {"items": 5},
            "retry": {"max_attempts": 2, "initial_backoff_s": 0.0},
        }
    ],
    "output": {"result": {"$node": "batch"}},
}


def test_the_next_attempt_resumes_from_the_last_heartbeat_details(cluster: Cluster) -> None:
    cluster.start_worker()
    deployment_id = cluster.deploy("resume", RESUME_PLAN)
    run_id = cluster.app.start_run(deployment_id, {})["run_id"]
    view = cluster.wait_final(run_id)

    assert view["status"] == "completed", view
    # The second attempt began where the first one's last details said it stopped.
    assert view["output"] == {"result": {"resumed_from": 3, "attempt": 2}}
    (entry,) = view["trace"]
    assert [a["outcome"] for a in entry["attempts"]] == ["failed, retried", "completed"]
    # The run view shows the latest details the server holds: the first attempt's (sent
    # before its failure); the second completed before any renewal carried its own.
    assert entry["heartbeat_details"] == {"done": 3}

    listed = cluster.wf("runs", "inspect", run_id, "--attempts")
    assert listed.returncode == 0, listed.stderr
    assert 'heartbeat details (node batch, latest): {"done": 3}' in listed.stdout


NOBODY_PLAN: dict[str, Any] = {
    "nodes": [{"kind": "activity", "id": "orphan", "activity_type": "failures.nobody"}],
    "output": {"result": {"$node": "orphan"}},
}


def test_a_type_no_worker_serves_is_warned_about_counted_and_shown(cluster: Cluster) -> None:
    cluster.start_worker()  # it serves failures.* but not failures.nobody
    deployment_id = cluster.deploy("nobody", NOBODY_PLAN)
    run_id = cluster.app.start_run(deployment_id, {})["run_id"]

    def warned() -> bool:
        return any(
            line.get("activity_type") == "failures.nobody"
            for line in cluster.server_log("activities.unserved")
        )

    wait_until(warned, "the server's activities.unserved warning", WORK_S)
    (line,) = [
        line
        for line in cluster.server_log("activities.unserved")
        if line.get("activity_type") == "failures.nobody"
    ]
    assert (line["level"], line["waiting"]) == ("warning", 1)

    samples = cluster.metrics()
    nobody = frozenset({"activity_type": "failures.nobody"}.items())
    assert samples[("wf_activities_unserved", nobody)] == 1

    view = cluster.app.inspect_run(run_id)
    assert view["status"] == "running"
    (entry,) = view["trace"]
    assert (entry["status"], entry["unserved"]) == ("submitted", True)
    shown = cluster.wf("runs", "inspect", run_id)
    assert shown.returncode == 0, shown.stderr
    assert "waiting: no registered worker takes this activity type" in shown.stdout


def test_a_schedule_to_start_timeout_fails_the_waiting_attempt(cluster: Cluster) -> None:
    cluster.start_worker()  # it serves failures.* but not failures.nobody
    plan = {
        "nodes": [
            {
                **NOBODY_PLAN["nodes"][0],
                "schedule_to_start_s": 1.0,
                "retry": {"max_attempts": 2, "initial_backoff_s": 0.0},
            }
        ],
        "output": NOBODY_PLAN["output"],
    }
    deployment_id = cluster.deploy("impatient", plan)
    run_id = cluster.app.start_run(deployment_id, {})["run_id"]
    view = cluster.wait_final(run_id)

    assert view["status"] == "failed"
    assert view["error"]["error_type"] == "ScheduleToStartTimeout"
    (entry,) = view["trace"]
    assert entry["attempts"] == []  # never leased: both attempts timed out in the queue
    history = cluster.admin.history(entry["activity_id"])
    timed_out = [(t["from_state"], t["to_state"], t["reason"]) for t in history[1:]]
    assert timed_out == [
        ("queued", "delayed", "schedule_to_start_timeout"),
        ("delayed", "queued", "timer"),
        ("queued", "failed", "retries_exhausted"),
    ]
    assert history[-1]["error"] == "ScheduleToStartTimeout: not started within 1 s of being queued"
