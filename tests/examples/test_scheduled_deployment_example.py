"""004's examples (deployment scheduling), run for real.

The EXECUTABLE example runs as written in 004 on the real clock: a local
server with schedules, the ``scheduled_hello`` plan of docs/workflows.md, a
one-shot half a second ahead, the admission service, and a bounded wait on
the occurrence listing until the run completes. Run it with
``uv run pytest -q tests/examples/test_scheduled_deployment_example.py``.

The ILLUSTRATIVE example (not executable as printed: "longer horizons") is
played on a virtual clock: an hourly report (``misfire="latest"``,
``overlap="parallel"``, ``max_active_runs=2``) through a week with a service
outage on Wednesday, a maintenance pause from Friday to Monday, and a
rejected bad edit, asserting the occurrence statuses over the week.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from wf.errors import Conflict, InvalidArgument
from wf.schedules import SchedulerServiceConfig, ScheduleService, build_scheduler_service
from wf.server.local import LocalStaticServer, build_local_static_workflow_server
from wf.testing.clock import VirtualClock

SCHEDULED_HELLO: dict[str, Any] = {
    "input_schema": {
        "type": "object",
        "properties": {"greeting": {"type": "string"}},
        "required": ["greeting"],
    },
    "nodes": [
        {
            "kind": "activity",
            "id": "hello",
            "activity_type": "format_text",
            "args": {
                "template": "{greeting} on a schedule",
                "greeting": {"$input": "greeting"},
            },
            "idempotent": True,
        }
    ],
    "output": {"result": {"$node": "hello", "path": "text"}},
}
"""The plan of docs/workflows.md ("The plan format")."""

COMPLETION_TIMEOUT_S = 30.0
"""Safety net for the real-time example (it normally takes well under a second)."""
POLL_S = 0.05


async def wait_for_final_occurrence(server: LocalStaticServer, schedule_id: str) -> dict[str, Any]:
    """Poll the occurrence listing until the schedule's occurrence reaches a final status."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + COMPLETION_TIMEOUT_S
    page: dict[str, Any] = {}
    while loop.time() < deadline:
        page = await server.api.schedules.list_schedule_occurrences(schedule_id=schedule_id)
        final = [
            o
            for o in page["occurrences"]
            if o["status"] in {"completed", "failed", "exhausted", "cancelled"}
        ]
        if final:
            return final[0]
        await asyncio.sleep(POLL_S)
    pytest.fail(f"no final occurrence within {COMPLETION_TIMEOUT_S} s; last page: {page!r}")


def test_executable_example(tmp_path: Path) -> None:
    async def main() -> None:
        root = tmp_path / ".wf_store"
        server = build_local_static_workflow_server(root, schedules=True)
        async with server:
            await server.api.create_artifact_from_plan(
                artifact_id="scheduled_hello", version=1, plan=SCHEDULED_HELLO
            )
            await server.api.save_deployment(
                {
                    "artifact_id": "scheduled_hello",
                    "artifact_version": 1,
                    "name": "default",
                    "default_inputs": {"greeting": "hello"},
                    "tenant": "default",
                    "priority": 2,
                    "policy": None,
                    "max_steps": 10,
                    "run_deadline_s": 600.0,
                }
            )
            due = datetime.now(UTC) + timedelta(seconds=0.5)
            created = await server.api.schedules.create_schedule(
                schedule_id="hello-once",
                deployment_id="scheduled_hello.default",
                trigger={"kind": "oneshot", "at": due.isoformat()},
            )
            assert created["revision"] == 1
            service = build_scheduler_service(
                server, SchedulerServiceConfig(enabled=True, poll_interval_s=0.1)
            )
            await service.start()
            try:
                occurrence = await wait_for_final_occurrence(server, "hello-once")
                run_id = occurrence["run_id"]
                inspected = await server.api.inspect_run(run_id=run_id)
                assert inspected["status"] == "completed", inspected
                assert inspected["output"] == {"result": "hello on a schedule"}
                assert inspected["output"]["result"] == "hello on a schedule"
                assert inspected["trigger"]["kind"] == "schedule"
                assert inspected["trigger"]["schedule_id"] == "hello-once"
                assert inspected["trigger"]["occurrence"] == pytest.approx(due.timestamp())
                assert inspected["inputs"] == {"greeting": "hello"}
                assert inspected["max_steps"] == 10
                # Admitted at (never before) the instant.
                assert inspected["created_at"] >= due.timestamp()
                page = await server.api.schedules.list_schedule_occurrences(
                    schedule_id="hello-once"
                )
                [row] = page["occurrences"]
                assert page["next_cursor"] is None
                assert (row["status"], row["run_id"]) == ("completed", run_id)
                assert row["instant_s"] == pytest.approx(due.timestamp())
                # A one-shot fires once: nothing is left to do.
                got = await server.api.schedules.get_schedule(schedule_id="hello-once")
                assert got["next_instant"] is None
            finally:
                await service.stop()
            assert service.state == "stopped"

    asyncio.run(main())


# ------------------------------------------------------------ the illustrative week

MONDAY = datetime(2026, 1, 5, tzinfo=UTC)
"""Monday of the week; schedules are created at 00:00:30."""
TICK_S = 1800
"""The test looks at the service every half hour ..."""
TICK_LATE_S = 5
"""... five seconds past the half hour."""
REPORT_S = 9000
"""A report takes two and a half hours, so hourly reports overlap."""
MAX_ACTIVE = 2
OUTAGE = (MONDAY + timedelta(days=2, hours=10, minutes=30), MONDAY + timedelta(days=2, hours=14))
"""Wednesday 10:30 to 14:00: the schedule service is down."""
PAUSED_AT = MONDAY + timedelta(days=4, hours=17, minutes=10)
"""Friday 17:10: paused for maintenance."""
RESUMED_AT = MONDAY + timedelta(days=7, hours=8, minutes=20)
"""The next Monday 08:20: resumed."""
END = MONDAY + timedelta(days=7, hours=12)
"""The next Monday 12:00."""

REPORT_PLAN: dict[str, Any] = {
    "nodes": [
        {"kind": "timer", "id": "compile", "delay": {"kind": "relative", "seconds": REPORT_S}}
    ],
    "output": {"compiled": {"$node": "compile"}},
}
"""A stand-in for the report: a timer, so the run needs no worker and no real time."""


class Week:
    """The server, its service and the clock; the run engine is driven by ``poll``."""

    def __init__(self, server: LocalStaticServer, clock: VirtualClock) -> None:
        self.server = server
        self.clock = clock
        self.schedules = server.api.schedules
        self.service: ScheduleService | None = None
        self.pending_seen: set[str] = set()
        self.max_unfinished = 0

    async def start_service(self) -> None:
        # No drain grace: the drain would wait on the virtual clock, which only the
        # test moves. Reports still running simply go on; the next start tracks them.
        config = SchedulerServiceConfig(enabled=True, drain_grace_s=0)
        self.service = build_scheduler_service(self.server, config, clock=self.clock)
        await self.service.start(background=False)

    async def stop_service(self) -> None:
        assert self.service is not None
        await self.service.stop()  # reports still run: only admission stops
        self.service = None

    async def tick(self, t: datetime) -> None:
        self.clock.advance_to(t)
        await self.server.server.engine.poll()
        if self.service is not None:
            await self.service.tick(t.timestamp())
        live = [
            run
            for status in ("admitted", "running", "interrupted")
            for run in (
                await self.server.api.list_runs(schedule_id="hourly-report", status=status)
            )["runs"]
        ]
        assert len(live) <= MAX_ACTIVE, live
        self.max_unfinished = max(self.max_unfinished, len(live))
        got = await self.schedules.get_schedule(schedule_id="hourly-report")
        if "pending" in got:
            self.pending_seen.add(got["pending"])

    async def run_until(self, end: datetime) -> None:
        t = self.clock.wall()
        t = t.replace(minute=30 if t.minute >= 30 else 0, second=TICK_LATE_S, microsecond=0)
        while (t := t + timedelta(seconds=TICK_S)) <= end + timedelta(seconds=TICK_LATE_S):
            await self.tick(t)

    async def occurrences(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        cursor = None
        for _ in range(100):
            page = await self.schedules.list_schedule_occurrences(
                schedule_id="hourly-report", limit=100, cursor=cursor
            )
            rows += page["occurrences"]
            cursor = page["next_cursor"]
            if cursor is None:
                return rows
        pytest.fail("occurrence paging did not end")


def hours_between(start: datetime, end: datetime) -> list[str]:
    """ISO instants of every whole hour in ``(start, end]``."""
    t = start.replace(minute=0, second=0, microsecond=0)
    found = []
    while (t := t + timedelta(hours=1)) <= end:
        if t > start:
            found.append(t.isoformat())
    return found


def test_illustrative_week_with_a_weekend_pause(tmp_path: Path) -> None:
    async def main() -> None:
        clock = VirtualClock(MONDAY + timedelta(seconds=30))
        server = build_local_static_workflow_server(
            tmp_path / "store", activities=[], schedules=True, clock=clock
        )
        async with server:
            await server.server.engine.stop()  # driven by poll() only (see Week)
            await server.api.create_artifact_from_plan("report", 1, REPORT_PLAN)
            await server.api.save_deployment({"artifact_id": "report", "artifact_version": 1})
            week = Week(server, clock)
            schedules = week.schedules
            # Monday: an hourly report, latest-wins catch-up, at most two at once.
            created = await schedules.create_schedule(
                schedule_id="hourly-report",
                deployment_id="report.default",
                trigger={"kind": "cron", "expression": "0 * * * *", "timezone": "UTC"},
                misfire="latest",
                overlap="parallel",
                max_active_runs=2,
            )
            assert created["revision"] == 1
            await week.start_service()
            # Monday to Wednesday morning, then an outage of the schedule service.
            await week.run_until(OUTAGE[0])
            await week.stop_service()
            await week.run_until(OUTAGE[1])
            await week.start_service()
            await week.run_until(PAUSED_AT - timedelta(minutes=10))
            # Friday: pause for maintenance.
            clock.advance_to(PAUSED_AT)
            before_pause = await schedules.get_schedule(schedule_id="hourly-report")
            held = before_pause.get("pending")
            paused = await schedules.pause_schedule(
                schedule_id="hourly-report", reason="weekend maintenance"
            )
            assert paused["status"] == "paused"
            assert paused["pause_reason"] == "weekend maintenance"
            # A bad edit is rejected without touching the running definition.
            with pytest.raises(InvalidArgument):
                await schedules.update_schedule(
                    schedule_id="hourly-report",
                    expected_revision=paused["revision"],
                    overlap="parallel",
                    max_active_runs=0,
                )
            with pytest.raises(Conflict) as stale:
                await schedules.update_schedule(
                    schedule_id="hourly-report", expected_revision=1, max_active_runs=3
                )
            assert stale.value.details["current_revision"] == paused["revision"]
            assert await schedules.get_schedule(schedule_id="hourly-report") == paused
            # The weekend passes: nothing is admitted, whatever runs finishes.
            await week.run_until(RESUMED_AT - timedelta(minutes=20))
            # Monday: resume from the next hour.
            clock.advance_to(RESUMED_AT)
            resumed = await schedules.resume_schedule(schedule_id="hourly-report")
            next_hour = (RESUMED_AT + timedelta(minutes=40)).isoformat()
            assert resumed["next_instant"] == next_hour
            assert resumed["max_active_runs"] == 2  # the rejected edits changed nothing
            await week.run_until(END)
            assert week.service is not None
            await week.stop_service()

            rows = await week.occurrences()
            by_instant = {r["instant"]: r for r in rows}
            assert len(by_instant) == len(rows), "one row per instant"
            statuses = {r["instant"]: r["status"] for r in rows}
            # Every hour from Monday 01:00 to Friday 17:00, then from Monday 09:00: the
            # paused weekend left no trace, and nothing before the creation either.
            expected = hours_between(MONDAY, PAUSED_AT) + hours_between(RESUMED_AT, END)
            assert sorted(statuses) == sorted(expected)
            # The outage: the three hours the service missed coalesced into 14:00.
            outage_hours = hours_between(OUTAGE[0], OUTAGE[1])
            coalesced = sorted(i for i, s in statuses.items() if s == "coalesced")
            assert coalesced == outage_hours[:-1]
            assert statuses[outage_hours[-1]] in {"completed", "superseded"}
            # Latest-wins never skips; a superseded instant was held as pending first,
            # or was the candidate the pause dropped.
            assert not any(s.startswith("skipped") for s in statuses.values())
            superseded = {i for i, s in statuses.items() if s == "superseded"}
            assert superseded <= week.pending_seen
            # At the pause, Friday 17:00 was held behind two running reports: dropped.
            assert held == (PAUSED_AT - timedelta(minutes=10)).isoformat()
            assert statuses[held] == "superseded"
            assert "pause" in by_instant[held]["detail"]
            # Runs: every admitted occurrence has its own run, never more than two
            # unfinished at once, and the overlap limit was actually reached.
            admitted = [r for r in rows if "run_id" in r]
            assert len({r["run_id"] for r in admitted}) == len(admitted)
            assert week.max_unfinished == MAX_ACTIVE
            assert superseded, "overlap held and replaced candidates during the week"
            # Monday after the resume: 09:00 is done, 10:00 and 11:00 run, 12:00 waits.
            monday = hours_between(RESUMED_AT, END)
            assert monday[0] == next_hour
            assert [statuses[i] for i in monday] == ["completed", "running", "running", "pending"]
            assert rows[0]["status"] == "pending"  # synthesized at the top of the first page
            final = {"completed", "superseded", "coalesced"}
            before_end = [i for i in statuses if i < (END - timedelta(hours=3)).isoformat()]
            assert {statuses[i] for i in before_end} <= final
            assert sum(s == "completed" for s in statuses.values()) >= 60

    asyncio.run(main())
