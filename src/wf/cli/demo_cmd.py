"""``wf demo``: an hour of the real server, on a virtual clock, in a store folder of its own.

Theory of operation
-------------------
The demo starts the production server machinery (:func:`build_local_static_workflow_server`:
scheduler node, run engine, deployment schedules, two in-process workers over
loopback) on a :class:`~wf.testing.clock.VirtualClock`, and
:class:`~wf.testing.timeskip.TimeSkipper` moves that clock from one due instant
to the next, so the hour takes a second or two. Through the server's own Python
API, as the local administrator, it installs four small workflows and a
deployment schedule, then starts runs:

- ``report``: deployment schedule ``quarter-hour-report`` (``*/15 * * * *``,
  Europe/Berlin), one run every quarter hour: the one cron engine (004);
- ``resize``: six runs the two workers share;
- ``cleanup``: a timer node that waits ten minutes, then formats a line;
- ``sync``: a flaky activity that fails its first attempt and is retried ten
  (virtual) seconds later;
- ``checkout``: a non-idempotent ``charge_card``. While it executes, the
  demo reports its worker's host lost (``WorkersLost``, as infrastructure
  monitoring would): the core fails the activity closed with
  ``may_have_executed`` instead of charging twice (idempotent work the worker
  held would be requeued), and the run fails with that code.

Every decision is the real core's, committed to the store before anyone acts
on it; the demo prints them as a timeline and a JSON summary. The store is
``.wf_demo`` by default (never the server's ``.wf_store``), or a temporary
folder with ``--in-memory``. Run it again on the same folder and it goes on
where the store stands, one more virtual hour: the schedule is paused when a
demo ends and resumed when the next begins, so the hours in between are never
replayed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from wf.activities import BUILTIN_ACTIVITIES
from wf.errors import NotFound, WfError
from wf.runtime.runs import Run, RunStatus
from wf.scheduler import commands as cmd
from wf.scheduler.model import ActivityState
from wf.scheduler.outputs import (
    ActivityFailed,
    LeaseGranted,
    Outcome,
    RetryScheduled,
    Transition,
    WorkerFailed,
)
from wf.schedules import SchedulerServiceConfig, build_scheduler_service
from wf.server.local import LocalStaticServer, build_local_static_workflow_server
from wf.testing.clock import VirtualClock
from wf.testing.timeskip import TimeSkipper
from wf.worker import activity
from wf.worker.activity import activity_info

STORE_ROOT_DEFAULT: Final = ".wf_demo"
"""The demo's own store folder (never the server's ``.wf_store``)."""
SCHEDULE_ID: Final = "quarter-hour-report"
SCHEDULE_ZONE: Final = "Europe/Berlin"
QUARTER_HOUR_S: Final = 900
DEMO_HOUR_S: Final = 3599
"""Virtual seconds one demo plays: just short of the next hour's first report."""
RESIZE_RUNS: Final = 6
CHARGE_NODE: Final = ".charge"
"""How the id of a checkout run's ``charge_card`` activity ends (``<run id>.charge``)."""
CHARGE_S: Final = 0.2
"""Real seconds ``charge_card`` takes: long enough for the host loss to land first."""

_RESULT: Final = {"text": {"$node": "out", "path": "text"}}
PLANS: Final[dict[str, dict[str, Any]]] = {
    "report": {
        "nodes": [
            {
                "kind": "activity",
                "id": "out",
                "activity_type": "format_text",
                "args": {"template": "quarter-hour report"},
                "idempotent": True,
            }
        ],
        "output": _RESULT,
    },
    "resize": {
        "input_schema": {
            "type": "object",
            "properties": {"image": {"type": "string"}},
            "required": ["image"],
        },
        "nodes": [
            {
                "kind": "activity",
                "id": "out",
                "activity_type": "upper",
                "args": {"text": {"$input": "image"}},
                "idempotent": True,
            }
        ],
        "output": _RESULT,
    },
    "cleanup": {
        "nodes": [
            {"kind": "timer", "id": "wait", "delay": {"kind": "relative", "seconds": 600}},
            {
                "kind": "activity",
                "id": "out",
                "activity_type": "format_text",
                "needs": ["wait"],
                "args": {"template": "cleaned up"},
                "idempotent": True,
            },
        ],
        "output": _RESULT,
    },
    "sync": {
        "nodes": [
            {
                "kind": "activity",
                "id": "out",
                "activity_type": "flaky_sync",
                "retry": {"max_attempts": 3, "initial_backoff_s": 10, "jitter_fraction": 0},
                "idempotent": True,
            }
        ],
        "output": _RESULT,
    },
    "checkout": {
        "nodes": [{"kind": "activity", "id": "charge", "activity_type": "charge_card"}],
        "output": {"receipt": {"$node": "charge"}},
    },
}
"""The demo's workflows (artifact id -> plan), each deployed as ``<id>.default``."""


class SyncUnavailable(Exception):
    """The first attempt of ``flaky_sync`` always meets this."""


@activity(name="flaky_sync", idempotent=True)
def flaky_sync() -> dict[str, str]:
    """Fails its first attempt, succeeds on the next."""
    attempt = activity_info().attempt
    if attempt == 1:
        raise SyncUnavailable("the remote end did not answer")
    return {"text": f"synced on attempt {attempt}"}


@activity(name="charge_card")
async def charge_card() -> dict[str, str]:
    """Charges a card: an external effect that must not happen twice."""
    await asyncio.sleep(CHARGE_S)
    return {"text": "charged"}


DEMO_ACTIVITIES: Final = [*BUILTIN_ACTIVITIES, flaky_sync, charge_card]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``wf demo``."""
    parser = subparsers.add_parser(
        "demo",
        help="watch the real server run an hour of workflows on a virtual clock",
        description="Run an hour of workflows, a deployment schedule, a retry and a lost "
        "host on the real server machinery, in virtual time, in a store folder of its own.",
    )
    parser.add_argument(
        "--store-root",
        default=STORE_ROOT_DEFAULT,
        help=f"the demo's store folder (SQLite); each run adds an hour (default: "
        f"{STORE_ROOT_DEFAULT})",
    )
    parser.add_argument(
        "--in-memory",
        action="store_true",
        help="keep nothing: use a temporary store folder, removed at the end",
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON only")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Play the demo hour; print its timeline (unless ``--json``) and summary."""
    demo = _Demo()
    try:
        with _store_root(args) as root, _quiet_logs():
            summary = asyncio.run(demo.play(root))
    except WfError as exc:
        print(f"wf: error: {exc.message}", file=sys.stderr)
        return 2
    if not args.json:
        for at, text in demo.timeline:
            print(f"{datetime.fromtimestamp(at, UTC):%H:%M:%S}  {text}")
        print()
        print("The server made every decision above; only the clock was virtual.")
    if not args.in_memory:
        summary["store"] = {"root": str(Path(args.store_root).resolve())}
    print(json.dumps(summary, sort_keys=True))
    return 0


@contextlib.contextmanager
def _store_root(args: argparse.Namespace) -> Iterator[Path]:
    if args.in_memory:
        with tempfile.TemporaryDirectory(prefix="wf-demo-") as folder:
            yield Path(folder)
    else:
        yield Path(args.store_root)


@contextlib.contextmanager
def _quiet_logs() -> Iterator[None]:
    """Keep the server's and workers' log lines out of the demo's output: the lost host
    makes the workers log warnings that the timeline already tells."""
    logger = logging.getLogger("wf")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


class _Demo:
    """One demo hour on one store folder (see the module docstring)."""

    def __init__(self) -> None:
        self.timeline: list[tuple[float, str]] = []
        self.clock = VirtualClock(math.floor(time.time() / QUARTER_HOUR_S) * QUARTER_HOUR_S)
        self.run_status: dict[str, RunStatus] = {}
        self.finished: dict[str, Run] = {}
        self.host_lost = False
        self.workers_lost = 0
        self._server: LocalStaticServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def play(self, root: Path) -> dict[str, Any]:
        """Start the server on ``root``, play the hour, stop; returns the summary."""
        server = build_local_static_workflow_server(
            root, activities=DEMO_ACTIVITIES, workers=2, max_concurrency=2, schedules=True,
            clock=self.clock,
        )  # fmt: skip
        await server.start()
        try:
            return await self._hour(server)
        finally:
            await server.stop()

    async def _hour(self, server: LocalStaticServer) -> dict[str, Any]:
        self._server = server
        skipper = TimeSkipper(server, self.clock)
        await self._install(server, skipper)
        start = self.clock.now()
        service = build_scheduler_service(
            server, SchedulerServiceConfig(enabled=True), clock=self.clock
        )
        # No background loop: the skipper ticks the service itself, so that time never
        # moves while an occurrence's run is being started.
        await service.start(background=False)
        skipper = TimeSkipper(server, self.clock, service)
        server.server.node.listeners.append(self._on_outcome)
        server.server.engine.listeners.append(self._on_run)
        for i in range(1, RESIZE_RUNS + 1):
            await server.api.start_run("resize.default", {"image": f"photo-{i}.jpg"})
        for name in ("cleanup", "sync", "checkout"):
            await server.api.start_run(f"{name}.default")
        await skipper.advance_to(start + DEMO_HOUR_S)
        await server.api.schedules.pause_schedule(
            schedule_id=SCHEDULE_ID, reason="wf demo stopped; the next demo resumes it"
        )
        for task in self._tasks:
            await task
        return self._summary(start)

    async def _install(self, server: LocalStaticServer, skipper: TimeSkipper) -> None:
        """Create what a fresh store lacks; on a used one, move past its last demo."""
        api = server.api
        for artifact_id, plan in PLANS.items():
            try:
                await api.get_artifact(artifact_id, 1)
            except NotFound:
                await api.create_artifact_from_plan(artifact_id, 1, plan)
            try:
                await api.get_deployment(f"{artifact_id}.default")
            except NotFound:
                await api.save_deployment({"artifact_id": artifact_id, "artifact_version": 1})
        try:
            schedule = await api.schedules.get_schedule(schedule_id=SCHEDULE_ID)
        except NotFound:
            await api.schedules.create_schedule(
                schedule_id=SCHEDULE_ID,
                deployment_id="report.default",
                trigger={"kind": "cron", "expression": "*/15 * * * *", "timezone": SCHEDULE_ZONE},
                note="wf demo: one report every quarter hour",
            )
            return
        # Virtual time only moves forward: start after everything the last demo did.
        last = max(schedule.watermark, schedule.paused_at or 0.0)
        resume_at = math.ceil(last / QUARTER_HOUR_S) * QUARTER_HOUR_S
        if resume_at > self.clock.now():
            await skipper.advance_to(resume_at)
        await api.schedules.resume_schedule(schedule_id=SCHEDULE_ID)

    # ------------------------------------------------------------ listeners

    def _note(self, text: str, at: float | None = None) -> None:
        self.timeline.append((self.clock.now() if at is None else at, text))

    def _on_outcome(self, outcome: Outcome) -> None:
        """Node listener: the core's decisions, as timeline lines."""
        # Stamped with the command's instant: the clock may have moved on by the time
        # the commit returns and listeners hear of it.
        at = outcome.records[0].at if outcome.records else None
        for d in outcome.decisions:
            if type(d) is LeaseGranted:
                self._note(f"{d.lease.activity_id} leased to {d.lease.worker_id}", at)
            elif type(d) is RetryScheduled:
                due = datetime.fromtimestamp(d.not_before, UTC)
                self._note(f"{d.activity_id} failed; attempt {d.attempt} at {due:%H:%M:%S}", at)
            elif type(d) is ActivityFailed:
                self._note(f"{d.activity_id} failed for good ({d.reason})", at)
            elif type(d) is WorkerFailed:
                self.workers_lost += 1
                self._note(f"worker {d.worker_id} declared lost ({d.reason})", at)
        for r in outcome.records:
            if (
                type(r) is Transition
                and r.to_state is ActivityState.EXECUTING
                # The checkout's node: its run id is not known yet when the worker may
                # already start it (start_run has not returned).
                and r.activity_id.endswith(CHARGE_NODE)
                and r.worker_id is not None
                and not self.host_lost
            ):
                self.host_lost = True
                self._note(f"{r.activity_id} is charging the card on {r.worker_id}", at)
                # A listener must not call the node it listens to: the loss is its own task.
                task = asyncio.get_running_loop().create_task(self._lose_host(r.worker_id))
                self._tasks.add(task)

    async def _lose_host(self, worker_id: str) -> None:
        """What infrastructure monitoring would report: the worker's host is gone."""
        self._note(f"the host of {worker_id} stops answering")
        assert self._server is not None
        node = self._server.server.node
        await node.execute(lambda now: cmd.WorkersLost(now=now, worker_ids=(worker_id,)))

    def _on_run(self, run: Run) -> None:
        """Engine listener: a line when a run starts or reaches a final status."""
        before = self.run_status.get(run.run_id)
        if before is run.status:
            return
        self.run_status[run.run_id] = run.status
        if run.final:
            self.finished[run.run_id] = run
            error = f" ({run.error.code})" if run.error is not None else ""
            self._note(f"{run.run_id} [{run.deployment_id}] {run.status}{error}")
        elif before is None:
            schedule = run.trigger.schedule_id
            via = f" by schedule {schedule}" if schedule else ""
            self._note(f"{run.run_id} [{run.deployment_id}] started{via}")

    def _summary(self, start: float) -> dict[str, Any]:
        runs = self.finished.values()
        return {
            "virtual_start": datetime.fromtimestamp(start, UTC).isoformat(),
            "virtual_hours": 1,
            "runs": dict(sorted(Counter(str(r.status) for r in runs).items())),
            "scheduled_runs": sum(1 for r in runs if r.trigger.schedule_id == SCHEDULE_ID),
            "failed": {
                r.run_id: r.error.code
                for r in sorted(runs, key=lambda r: r.run_id)
                if r.error is not None
            },
            "workers_lost": self.workers_lost,
        }
