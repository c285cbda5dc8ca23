"""Start on grant and declared defaults, end to end with real kills.

A real ``wf-rpc-server`` and real ``wf worker`` processes running
:mod:`start_on_grant_app`, whose activities append a line to a marker file
each time their body begins, so the file counts executions whatever happens
to the processes. A grant into an idle slot is committed as the activity's
start; these tests kill the worker inside the window between that commit and
the worker's receipt of the answer, and while the activity runs, and check
that a non-idempotent activity never runs twice and that its failure says
``may_have_executed`` (docs/architecture.md, "Start on grant"). An activity
declared idempotent only in the worker's code (``@activity(idempotent=True)``)
is requeued instead, although its submission never said so.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _servers import Admin, Processes, ServerProcess, processes, wait_until
from start_on_grant_app import charge

from wf.scheduler.model import Activity
from wf.worker.activity import encode_payload

APP = "tests.e2e.start_on_grant_app:worker"
LEASE_TTL_S = 2.0
SERVER_CONFIG: dict[str, Any] = {
    "server": {"store": {"durability": "process"}},
    "dispatch": {"lease_ttl_s": LEASE_TTL_S, "heartbeat_misses_max": 6},
}
UP_S = 20.0
WORK_S = 20.0
WINDOW_TRIES = 5
"""A SIGSTOP that lands between two long polls (a sub-millisecond gap) leaves no
open poll to grant to; the window test then lets the worker go on and tries again."""


class Setup:
    def __init__(self, ps: Processes, tmp: Path) -> None:
        self.ps = ps
        self.tmp = tmp
        self.server: ServerProcess = ps.server(tmp / "store", config=SERVER_CONFIG)
        self.admin = Admin(self.server.url)

    def worker(self, worker_id: str) -> Any:
        w = self.ps.worker(self.server.url, worker_id, app=APP)
        wait_until(lambda: worker_id in self.admin.active_workers(), worker_id, UP_S)
        return w

    def submit(self, activity: Activity) -> str:
        answer = self.admin.call("scheduler.activities.submit", {"activities": [activity]})
        (aid,) = answer["activity_ids"]
        return str(aid)

    def state(self, aid: str) -> str:
        return self.admin.states([aid])[aid]


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    with processes(tmp_path) as ps:
        s = Setup(ps, tmp_path)
        try:
            yield s
        finally:
            s.admin.close()


def executions(marker: Path) -> list[list[str]]:
    """One ``[worker_id, attempt, token]`` per execution that began."""
    if not marker.exists():
        return []
    return [line.split() for line in marker.read_text().splitlines()]


def reached(check: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def unsaid(aid: str, activity_type: str, *args: Any) -> Activity:
    """A submission that says nothing about idempotency or retries."""
    return Activity(activity_id=aid, activity_type=activity_type, payload=encode_payload(*args))


def test_a_healthy_non_idempotent_run_starts_on_its_grant(setup: Setup) -> None:
    setup.worker("w1")
    marker = setup.tmp / "healthy.marker"
    aid = setup.submit(charge.activity("healthy", args=(str(marker),)))
    wait_until(lambda: setup.state(aid) == "completed", "completed", WORK_S)
    rows = setup.admin.history(aid)
    granted = next(r for r in rows if r["to_state"] == "leased")
    started = next(r for r in rows if r["to_state"] == "executing")
    # One commit held both: the same instant, the same lease, no start round trip.
    assert (started["at"], started["token"]) == (granted["at"], granted["token"])
    assert started["reason"] == "started"
    assert executions(marker) == [["w1", "1", str(granted["token"])]]


def test_a_worker_killed_between_a_started_grant_and_its_receipt_never_runs_it(
    setup: Setup,
) -> None:
    w1 = setup.worker("w1")
    marker = setup.tmp / "window.marker"
    for attempt in range(WINDOW_TRIES):
        aid = f"window-{attempt}"
        # Frozen inside its long poll: the grant commits as the start and its answer
        # is written, but the worker never reads it.
        os.kill(w1.proc.pid, signal.SIGSTOP)
        setup.submit(charge.activity(aid, args=(str(marker),)))
        if reached(lambda aid=aid: setup.state(aid) == "executing", 3.0):
            break
        setup.admin.call("scheduler.activities.cancel", {"activity_id": aid})
        os.kill(w1.proc.pid, signal.SIGCONT)
        wait_until(lambda: "w1" in setup.admin.active_workers(), "w1 back", UP_S)
    else:
        pytest.fail(f"no open poll caught in {WINDOW_TRIES} tries")
    w1.kill()  # SIGKILL in the window: the answer with the started grant is never read
    setup.worker("w2")  # alive and idle: it would run a requeued activity at once
    wait_until(lambda: setup.state(aid) == "failed", "failed closed", WORK_S)
    rows = setup.admin.history(aid)
    last = rows[-1]
    assert (last["from_state"], last["to_state"], last["reason"]) == (
        "executing",
        "failed",
        "may_have_executed",
    )
    assert [r["worker_id"] for r in rows if r["to_state"] == "executing"] == ["w1"]
    # The disclosure is a "may": it did not in fact run, and nothing ran it since.
    assert executions(marker) == []


def test_a_non_idempotent_activity_whose_worker_dies_while_running_never_runs_again(
    setup: Setup,
) -> None:
    w1 = setup.worker("w1")
    marker = setup.tmp / "running.marker"
    aid = setup.submit(charge.activity("running", args=(str(marker), 60.0)))
    wait_until(lambda: len(executions(marker)) == 1, "charge running", WORK_S)
    setup.worker("w2")
    w1.kill()
    wait_until(lambda: setup.state(aid) == "failed", "failed closed", WORK_S)
    last = setup.admin.history(aid)[-1]
    assert (last["to_state"], last["reason"]) == ("failed", "may_have_executed")
    assert [row[0] for row in executions(marker)] == ["w1"]


def test_an_activity_declared_idempotent_by_its_worker_is_requeued_when_lost(
    setup: Setup,
) -> None:
    w1 = setup.worker("w1")
    marker = setup.tmp / "declared.marker"
    # The submission says nothing; only the worker's @activity(idempotent=True) does.
    aid = setup.submit(unsaid("declared", "e2e.declared", str(marker), 60.0))
    wait_until(lambda: len(executions(marker)) == 1, "declared running", WORK_S)
    w1.kill()
    # The lapsed lease of a type its holder declares idempotent: requeued, run again.
    w2 = setup.worker("w2")
    wait_until(lambda: len(executions(marker)) == 2, "declared rerun", WORK_S)
    assert [row[:2] for row in executions(marker)] == [["w1", "1"], ["w2", "2"]]
    lost = next(r for r in setup.admin.history(aid) if r["from_state"] == "executing")
    assert (lost["to_state"], lost["reason"]) == ("queued", "lease_expired")
    w2.kill()


def test_the_same_unsaid_submission_of_a_plain_activity_fails_closed(setup: Setup) -> None:
    w1 = setup.worker("w1")
    marker = setup.tmp / "plain.marker"
    aid = setup.submit(unsaid("plain", "e2e.charge", str(marker), 60.0))
    wait_until(lambda: len(executions(marker)) == 1, "plain running", WORK_S)
    w1.kill()
    setup.worker("w2")
    wait_until(lambda: setup.state(aid) == "failed", "failed closed", WORK_S)
    assert setup.admin.history(aid)[-1]["reason"] == "may_have_executed"
    assert len(executions(marker)) == 1
