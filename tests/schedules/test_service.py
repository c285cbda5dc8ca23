"""The admission service on a virtual clock: occurrences, overlap, pause, delete, capacity.

Every test runs on both stores (SQLite, and PostgreSQL in a schema of its own)
a local server (no in-process workers) and a
:class:`~wf.schedules.service.ScheduleService` on one
:class:`~wf.testing.clock.VirtualClock`, the service started with
``background=False``: time moves only when a test moves it, and admission
happens only when the test calls ``tick(now)``. The plans need no worker: an
interrupt node (the run stays ``interrupted``, holding its schedule's overlap
slot until ``resume_run``) or a timer node (the run stays ``running``, holding
an execution slot, until the test advances the clock past it and polls the
run engine, whose background loop is stopped so that only the test drives it).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from wf.errors import Draining, Overloaded
from wf.schedules import SchedulerServiceConfig, ScheduleService, build_scheduler_service
from wf.schedules.service import ARM_LEAD_S, ARM_MARGIN_S
from wf.server.config import ServerConfig, ServerSection, StoreConfig
from wf.server.local import LocalStaticServer, build_local_static_workflow_server
from wf.testing.clock import VirtualClock

MONDAY = datetime(2026, 1, 5, tzinfo=UTC)
"""Hour 0 of every timeline here (a Monday, UTC)."""
CREATED = MONDAY + timedelta(seconds=30)
"""Where the clock starts: schedules are created at 00:00:30."""
TICK_LATE_S = 5
"""How late after an instant the tests tick (well within the 60 s misfire allowance)."""
WAIT_S = 3 * 3600
"""How long a run of the timer plan stays ``running``."""
SETTLE_ROUNDS_MAX = 50
"""Bound on event-loop yields while waiting for the service to change state."""

ASK_PLAN: dict[str, Any] = {
    "nodes": [{"kind": "interrupt", "id": "ask", "prompt": "Publish the report?"}],
    "output": {"answer": {"$node": "ask"}},
}
WAIT_PLAN: dict[str, Any] = {
    "nodes": [{"kind": "timer", "id": "wait", "delay": {"kind": "relative", "seconds": WAIT_S}}],
    "output": {"waited": {"$node": "wait"}},
}
HOURLY: dict[str, Any] = {"kind": "cron", "expression": "0 * * * *", "timezone": "UTC"}
HALF_PAST: dict[str, Any] = {"kind": "cron", "expression": "30 * * * *", "timezone": "UTC"}
ANSWER: dict[str, Any] = {"approved": True}


def at(hours: float, seconds: float = TICK_LATE_S) -> float:
    """POSIX seconds of MONDAY + ``hours`` + ``seconds``."""
    return (MONDAY + timedelta(hours=hours, seconds=seconds)).timestamp()


def iso(hours: float) -> str:
    """The ISO form of the instant at MONDAY + ``hours``."""
    return (MONDAY + timedelta(hours=hours)).isoformat()


@dataclass
class Node:
    """A started local server and its admission service on one clock."""

    server: LocalStaticServer
    service: ScheduleService
    clock: VirtualClock

    @property
    def schedules(self) -> Any:
        return self.server.api.schedules

    async def tick(self, t: float) -> int:
        """Move the clock to ``t``, let the run engine apply what fell due, then admit."""
        self.clock.advance_to(t)
        await self.server.server.engine.poll()
        return await self.service.tick(t)

    async def occurrences(self, schedule_id: str, **page: Any) -> list[dict[str, Any]]:
        result = await self.schedules.list_schedule_occurrences(schedule_id=schedule_id, **page)
        rows: list[dict[str, Any]] = result["occurrences"]
        return rows

    async def statuses(self, schedule_id: str) -> list[tuple[str, str]]:
        """``(instant, status)`` of every occurrence, pending row included."""
        return [(o["instant"], o["status"]) for o in await self.occurrences(schedule_id)]

    async def run_status(self, run_id: str) -> str:
        status: str = (await self.server.api.inspect_run(run_id))["status"]
        return status

    async def restart_service(self) -> None:
        """Stop the admission service and start a new one over the same server."""
        await stop_service(self.service, self.clock)
        self.service = build_scheduler_service(self.server, self.service.config, clock=self.clock)
        await self.service.start(background=False)


@asynccontextmanager
async def node(
    root: Path, clock: VirtualClock, config: SchedulerServiceConfig | None = None
) -> AsyncIterator[Node]:
    """A server (SQLite at ``root``, or this test's PostgreSQL schema) and a foreground
    service, stopped on exit."""
    server = _build(root, clock)
    await server.start()
    # The test drives the run engine with poll() after moving the clock; its
    # background loop would apply the same timers concurrently (a race with tick).
    await server.server.engine.stop()
    service = build_scheduler_service(server, config or SchedulerServiceConfig(), clock=clock)
    await service.start(background=False)
    n = Node(server, service, clock)
    try:
        yield n
    finally:
        await stop_service(n.service, clock)
        await server.stop()


_POSTGRES: dict[str, str] = {}
"""``dsn`` and ``schema`` while a PostgreSQL-backed test runs (set by ``store_backend``)."""


def _build(root: Path, clock: VirtualClock) -> LocalStaticServer:
    if not _POSTGRES:
        return build_local_static_workflow_server(root, activities=[], schedules=True, clock=clock)
    store = StoreConfig(postgres_dsn=_POSTGRES["dsn"], postgres_schema=_POSTGRES["schema"])
    config = ServerConfig(server=ServerSection(host="127.0.0.1", port=0, store=store))
    return LocalStaticServer(config, [], workers=0, max_concurrency=1, schedules=True, clock=clock)


@pytest.fixture(autouse=True, params=["sqlite", "postgres"])
def store_backend(request: pytest.FixtureRequest) -> Any:
    """Runs every test here on SQLite and on PostgreSQL (one schema per test, so a
    restart within a test finds the same store)."""
    if request.param == "postgres":
        _POSTGRES["dsn"] = request.getfixturevalue("pg_dsn")
        _POSTGRES["schema"] = request.getfixturevalue("pg_schema")
    yield request.param
    _POSTGRES.clear()


async def stop_service(service: ScheduleService, clock: VirtualClock) -> None:
    """Stop ``service``; if scheduled runs still run, let the drain grace pass on the
    virtual clock (the drain waits in clock time, and only the test moves the clock)."""
    stopping = asyncio.ensure_future(service.stop())
    for _ in range(SETTLE_ROUNDS_MAX):
        if stopping.done():
            break
        await asyncio.sleep(0)
    else:
        assert service.state == "draining"
        clock.advance(service.config.drain_grace_s)
    await stopping


async def deploy(n: Node) -> None:
    """``ask.default`` (interrupt) and ``wait.default`` (3 h timer)."""
    for artifact_id, plan in (("ask", ASK_PLAN), ("wait", WAIT_PLAN)):
        await n.server.api.create_artifact_from_plan(artifact_id, 1, plan)
        await n.server.api.save_deployment({"artifact_id": artifact_id, "artifact_version": 1})


async def create(n: Node, schedule_id: str, **options: Any) -> dict[str, Any]:
    options.setdefault("deployment_id", "ask.default")
    options.setdefault("trigger", HOURLY)
    return await n.schedules.create_schedule(schedule_id=schedule_id, **options)


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(CREATED)


# ------------------------------------------------------------ occurrence listing


def test_occurrence_listing_statuses_and_pending_synthesis(
    tmp_path: Path, clock: VirtualClock
) -> None:
    async def main() -> None:
        async with node(tmp_path, clock) as n:
            await deploy(n)
            await create(n, "report", misfire="latest")
            assert await n.tick(at(0, 50)) == 0  # nothing due before 01:00
            assert await n.tick(at(1)) == 1
            [first] = await n.occurrences("report")
            assert (first["instant"], first["status"], first["run_id"]) == (
                iso(1),
                "interrupted",
                "run-000001",
            )
            # Three hours later with run-000001 still interrupted: 02:00 and 03:00
            # coalesce into 04:00, which is held.
            assert await n.tick(at(4)) == 2
            assert await n.statuses("report") == [
                (iso(4), "pending"),
                (iso(1), "interrupted"),
                (iso(2), "coalesced"),
                (iso(3), "coalesced"),
            ]
            got = await n.schedules.get_schedule(schedule_id="report")
            assert got["pending"] == iso(4)
            assert got["candidate"] == at(4, 0)
            # limit=1: only the pending row, and a cursor that starts at the first stored row.
            page = await n.schedules.list_schedule_occurrences(schedule_id="report", limit=1)
            assert [(o["instant"], o["status"]) for o in page["occurrences"]] == [
                (iso(4), "pending")
            ]
            seen: list[tuple[str, str]] = []
            cursor = page["next_cursor"]
            assert cursor is not None
            while cursor is not None:
                page = await n.schedules.list_schedule_occurrences(
                    schedule_id="report", limit=1, cursor=cursor
                )
                seen += [(o["instant"], o["status"]) for o in page["occurrences"]]
                cursor = page["next_cursor"]
            assert seen == [(iso(1), "interrupted"), (iso(2), "coalesced"), (iso(3), "coalesced")]
            # limit=2: the pending row plus the first stored one, then the rest.
            page = await n.schedules.list_schedule_occurrences(schedule_id="report", limit=2)
            assert [o["status"] for o in page["occurrences"]] == ["pending", "interrupted"]
            rest = await n.schedules.list_schedule_occurrences(
                schedule_id="report", limit=2, cursor=page["next_cursor"]
            )
            assert [o["instant"] for o in rest["occurrences"]] == [iso(2), iso(3)]
            assert rest["next_cursor"] is None
            # The run completes: its admitted row shows it, the held candidate goes at once.
            await n.server.api.resume_run("run-000001", ANSWER)
            assert await n.tick(at(4, 600)) == 1
            rows = await n.occurrences("report")
            assert [(o["instant"], o["status"], o.get("run_id")) for o in rows] == [
                (iso(1), "completed", "run-000001"),
                (iso(2), "coalesced", None),
                (iso(3), "coalesced", None),
                (iso(4), "interrupted", "run-000002"),
            ]
            run = await n.server.api.inspect_run("run-000002")
            assert run["trigger"] == {
                "kind": "schedule",
                "schedule_id": "report",
                "occurrence": at(4, 0),
            }
            assert "pending" not in await n.schedules.get_schedule(schedule_id="report")

    asyncio.run(main())


# ------------------------------------------------------------------------ overlap


def test_overlap_skip_an_interrupted_run_blocks_also_across_a_restart(
    tmp_path: Path, clock: VirtualClock
) -> None:
    async def main() -> None:
        async with node(tmp_path, clock) as n:
            await deploy(n)
            await create(n, "report")
            await n.tick(at(1))
            assert await n.run_status("run-000001") == "interrupted"
            await n.tick(at(2))
            assert n.service.unfinished_runs("report") == 1
        # A new server and service over the same store: the run still blocks.
        async with node(tmp_path, clock) as n:
            assert n.service.unfinished_runs("report") == 1
            await n.tick(at(3))
            assert await n.statuses("report") == [
                (iso(1), "interrupted"),
                (iso(2), "skipped-overlap"),
                (iso(3), "skipped-overlap"),
            ]
            resumed = await n.server.api.resume_run("run-000001", ANSWER)
            assert resumed["status"] == "completed"
            assert n.service.unfinished_runs("report") == 0
            await n.tick(at(4))
            assert await n.statuses("report") == [
                (iso(1), "completed"),
                (iso(2), "skipped-overlap"),
                (iso(3), "skipped-overlap"),
                (iso(4), "interrupted"),
            ]
            got = await n.schedules.get_schedule(schedule_id="report")
            assert (got["skipped_overlap"], got["skipped_misfire"]) == (2, 0)

    asyncio.run(main())


def test_manual_runs_and_other_schedules_never_count_for_overlap(
    tmp_path: Path, clock: VirtualClock
) -> None:
    async def main() -> None:
        async with node(tmp_path, clock) as n:
            await deploy(n)
            await create(n, "a")
            await create(n, "b")
            manual = await n.schedules.trigger_schedule(schedule_id="a")
            direct = await n.server.api.start_run("ask.default")
            assert {manual["status"], direct["status"]} == {"interrupted"}
            assert n.service.unfinished_runs("a") == 0
            await n.tick(at(1))
            # Both schedules admitted their own run next to the unfinished manual ones.
            assert await n.statuses("a") == [(iso(1), "interrupted")]
            assert await n.statuses("b") == [(iso(1), "interrupted")]
            await n.tick(at(2))
            # Each is blocked by its own run only.
            assert [s for _, s in await n.statuses("a")] == ["interrupted", "skipped-overlap"]
            assert [s for _, s in await n.statuses("b")] == ["interrupted", "skipped-overlap"]
            # Finishing a's run frees a, not b.
            [a_run] = [o["run_id"] for o in await n.occurrences("a") if "run_id" in o]
            await n.server.api.resume_run(a_run, ANSWER)
            await n.server.api.resume_run(manual["run_id"], ANSWER)
            await n.tick(at(3))
            assert [s for _, s in await n.statuses("a")][-1] == "interrupted"
            assert [s for _, s in await n.statuses("b")][-1] == "skipped-overlap"

    asyncio.run(main())


def test_lowering_max_active_runs_blocks_without_cancelling(
    tmp_path: Path, clock: VirtualClock
) -> None:
    async def main() -> None:
        async with node(tmp_path, clock) as n:
            await deploy(n)
            await create(n, "report", overlap="parallel", max_active_runs=2)
            await n.tick(at(1))
            await n.tick(at(2))
            clock.advance_to(at(2, 600))
            # Two admissions left the revision at 1: only edits move it.
            await n.schedules.update_schedule(
                schedule_id="report", expected_revision=1, max_active_runs=1
            )
            await n.tick(at(3))
            assert [s for _, s in await n.statuses("report")] == [
                "interrupted",
                "interrupted",
                "skipped-overlap",
            ]
            await n.server.api.resume_run("run-000001", ANSWER)
            await n.tick(at(4))  # one run still unfinished: the lowered limit holds
            assert (await n.statuses("report"))[-1] == (iso(4), "skipped-overlap")
            await n.server.api.resume_run("run-000002", ANSWER)
            await n.tick(at(5))
            assert (await n.statuses("report"))[-1] == (iso(5), "interrupted")

    asyncio.run(main())


def test_a_cancelled_or_failed_run_releases_overlap(tmp_path: Path, clock: VirtualClock) -> None:
    async def main() -> None:
        async with node(tmp_path, clock) as n:
            await deploy(n)
            # A report with a 10-minute deadline: its 3-hour timer never finishes.
            await n.server.api.create_artifact_from_plan("late", 1, WAIT_PLAN)
            await n.server.api.save_deployment(
                {"artifact_id": "late", "artifact_version": 1, "run_deadline_s": 600.0}
            )
            await create(n, "failing", deployment_id="late.default")
            await create(n, "cancelled")
            await n.tick(at(1))
            [failing] = await n.occurrences("failing")
            [cancelled] = await n.occurrences("cancelled")
            assert (failing["status"], cancelled["status"]) == ("running", "interrupted")
            await n.server.api.cancel_run(cancelled["run_id"], "not needed")
            await n.tick(at(1, TICK_LATE_S + 601))  # the deadline passes
            assert await n.run_status(failing["run_id"]) == "failed"
            await n.tick(at(2))
            assert [s for _, s in await n.statuses("failing")] == ["failed", "running"]
            assert [s for _, s in await n.statuses("cancelled")] == ["cancelled", "interrupted"]

    asyncio.run(main())


# -------------------------------------------------------------------------- pause


def test_pause_drops_the_candidate_and_resume_never_replays_the_span(
    tmp_path: Path, clock: VirtualClock
) -> None:
    async def main() -> None:
        async with node(tmp_path, clock) as n:
            await deploy(n)
            await create(n, "report", misfire="latest")
            await n.tick(at(1))
            await n.tick(at(2))
            assert (await n.statuses("report"))[0] == (iso(2), "pending")
            clock.advance_to(at(2, 600))
            paused = await n.schedules.pause_schedule(schedule_id="report", reason="maintenance")
            assert paused["candidate"] is None
            rows = await n.occurrences("report")
            assert [(o["instant"], o["status"]) for o in rows] == [
                (iso(1), "interrupted"),
                (iso(2), "superseded"),
            ]
            assert "pause" in rows[1]["detail"]
            # The blocking run finishes while paused: still nothing is admitted.
            await n.server.api.resume_run("run-000001", ANSWER)
            for hour in (3, 4, 5):
                assert await n.tick(at(hour)) == 0
            clock.advance_to(at(5, 20 * 60))
            resumed = await n.schedules.resume_schedule(schedule_id="report")
            assert resumed["next_instant"] == iso(6)
            assert await n.tick(at(5, 20 * 60 + 1)) == 0
            assert await n.tick(at(6)) == 1
            assert await n.statuses("report") == [
                (iso(1), "completed"),
                (iso(2), "superseded"),
                (iso(6), "interrupted"),
            ]

    asyncio.run(main())


@pytest.mark.parametrize("misfire", ["skip", "latest"])
def test_downtime_catch_up_never_resurrects_a_paused_span(
    tmp_path: Path, clock: VirtualClock, misfire: str
) -> None:
    async def main() -> None:
        async with node(tmp_path, clock) as n:
            await deploy(n)
            await create(n, "report", misfire=misfire)
            await n.tick(at(1))
            await n.server.api.resume_run("run-000001", ANSWER)
            clock.advance_to(at(1, 1800))
            await n.schedules.pause_schedule(schedule_id="report")
        # Down from 01:30 to 07:00:05; resumed at 04:30 while the service was down.
        clock.advance_to(at(4, 1800))
        async with node(tmp_path, clock) as n:
            await n.service.stop()  # the API works without the service
            await n.schedules.resume_schedule(schedule_id="report")
        clock.advance_to(at(7))
        async with node(tmp_path, clock) as n:
            await n.tick(at(7))
            missed = "skipped-misfire" if misfire == "skip" else "coalesced"
            assert await n.statuses("report") == [
                (iso(1), "completed"),
                (iso(5), missed),
                (iso(6), missed),
                (iso(7), "interrupted"),
            ]
            got = await n.schedules.get_schedule(schedule_id="report")
            assert got["skipped_misfire"] == (2 if misfire == "skip" else 0)

    asyncio.run(main())


def test_a_paused_schedule_stays_quiet_across_a_restart(
    tmp_path: Path, clock: VirtualClock
) -> None:
    async def main() -> None:
        async with node(tmp_path, clock) as n:
            await deploy(n)
            await create(n, "report", misfire="latest")
            await n.schedules.pause_schedule(schedule_id="report")
        clock.advance_to(at(9))
        async with node(tmp_path, clock) as n:
            assert await n.tick(at(9)) == 0
            clock.advance_to(at(9, 900))
            await n.schedules.resume_schedule(schedule_id="report")
            assert await n.tick(at(9, 901)) == 0
            await n.tick(at(10))
            assert await n.statuses("report") == [(iso(10), "interrupted")]

    asyncio.run(main())


# ------------------------------------------------------------------------- delete


def test_deletion_stops_admission_and_runs_and_history_survive(
    tmp_path: Path, clock: VirtualClock
) -> None:
    async def main() -> None:
        async with node(tmp_path, clock) as n:
            await deploy(n)
            await create(n, "report", overlap="parallel", max_active_runs=3)
            await n.tick(at(1))
            clock.advance_to(at(1, 1800))
            await n.schedules.delete_schedule(schedule_id="report")
            for hour in (2, 3):
                assert await n.tick(at(hour)) == 0
            assert await n.statuses("report") == [(iso(1), "interrupted")]
            run = await n.server.api.inspect_run("run-000001")
            assert run["trigger"]["schedule_id"] == "report"
            listed = await n.server.api.list_runs(schedule_id="report")
            assert [r["run_id"] for r in listed["runs"]] == ["run-000001"]
            # The active run continues and completes against the retained history.
            resumed = await n.server.api.resume_run("run-000001", ANSWER)
            assert resumed["status"] == "completed"
            assert await n.statuses("report") == [(iso(1), "completed")]
        clock.advance_to(at(5))
        async with node(tmp_path, clock) as n:
            assert await n.tick(at(5)) == 0
            assert await n.statuses("report") == [(iso(1), "completed")]
            got = await n.schedules.get_schedule(schedule_id="report")
            assert got["status"] == "deleted"

    asyncio.run(main())


# ----------------------------------------------------------------------- capacity


def test_admitted_runs_wait_for_a_slot_and_start_in_admission_order(
    tmp_path: Path, clock: VirtualClock
) -> None:
    async def main() -> None:
        config = SchedulerServiceConfig(max_concurrent_runs=1)
        async with node(tmp_path, clock, config) as n:
            await deploy(n)
            await create(
                n, "report", deployment_id="wait.default", overlap="parallel", max_active_runs=3
            )
            for hour in (1, 2, 3):
                await n.tick(at(hour))
            assert [await n.run_status(f"run-00000{i}") for i in (1, 2, 3)] == [
                "running",
                "admitted",
                "admitted",
            ]
            assert n.service.slots_in_use() == 1
            waiting = await n.server.api.inspect_run("run-000002")
            assert waiting["trace"] == []
            assert waiting["output"] is None
            assert waiting["checkpoint"] is None
            assert waiting["started_at"] is None
            assert await n.statuses("report") == [
                (iso(1), "running"),
                (iso(2), "admitted"),
                (iso(3), "admitted"),
            ]
            # Admitted (waiting) runs count for overlap: a fourth would exceed 3.
            await n.tick(at(4, TICK_LATE_S - 1))  # one second before run-000001 ends
            assert (await n.statuses("report"))[-1] == (iso(4), "skipped-overlap")
            await n.schedules.pause_schedule(schedule_id="report")
            # Manual runs bypass capacity.
            manual = await n.server.api.start_run("wait.default")
            assert manual["status"] == "running"
            assert n.service.slots_in_use() == 1
            # run-000001 began at 01:00:05; its timer ends at 04:00:05.
            await n.tick(at(4))
            assert [await n.run_status(f"run-00000{i}") for i in (1, 2, 3)] == [
                "completed",
                "running",
                "admitted",
            ]
            await n.tick(at(7))
            assert [await n.run_status(f"run-00000{i}") for i in (1, 2, 3)] == [
                "completed",
                "completed",
                "running",
            ]
            await n.tick(at(10))
            views = [await n.server.api.inspect_run(f"run-00000{i}") for i in (1, 2, 3)]
            assert [v["status"] for v in views] == ["completed"] * 3
            assert [v["started_at"] for v in views] == [at(1), at(4), at(7)]
            assert n.service.slots_in_use() == 0

    asyncio.run(main())


def test_admission_order_across_schedules_at_one_instant(
    tmp_path: Path, clock: VirtualClock
) -> None:
    async def main() -> None:
        config = SchedulerServiceConfig(max_concurrent_runs=1)
        async with node(tmp_path, clock, config) as n:
            await deploy(n)
            for name in ("c", "a", "b"):
                await create(n, name, deployment_id="wait.default")
            await n.tick(at(1))
            by_schedule = {}
            for name in ("a", "b", "c"):
                [row] = await n.occurrences(name)
                by_schedule[name] = row
            # Admitted in one pass, one of them started, the rest wait in admission order.
            admitted = sorted(by_schedule.values(), key=lambda o: o["run_id"])
            assert [o["status"] for o in admitted] == ["running", "admitted", "admitted"]
            for hours in (4, 7):
                await n.tick(at(hours))
            views = [await n.server.api.inspect_run(o["run_id"]) for o in admitted]
            assert [v["started_at"] for v in views] == [at(1), at(4), at(7)]

    asyncio.run(main())


async def settle(condition: Any) -> None:
    """Yield to the event loop until ``condition()`` holds (bounded)."""
    for _ in range(SETTLE_ROUNDS_MAX):
        if condition():
            return
        await asyncio.sleep(0)
    pytest.fail("the condition never held")


def test_a_scheduled_resume_is_refused_while_saturated_or_draining(
    tmp_path: Path, clock: VirtualClock
) -> None:
    async def main() -> None:
        config = SchedulerServiceConfig(max_concurrent_runs=1, drain_grace_s=600)
        async with node(tmp_path, clock, config) as n:
            await deploy(n)
            await create(n, "ask")
            await create(n, "wait", deployment_id="wait.default", trigger=HALF_PAST)
            await n.tick(at(1))  # run-000001 interrupted: it holds no slot
            await n.tick(at(1.5))  # run-000002 running: the only slot
            assert await n.run_status("run-000002") == "running"
            with pytest.raises(Overloaded) as raised:
                await n.server.api.resume_run("run-000001", ANSWER)
            assert raised.value.retry_after_s > 0
            untouched = await n.server.api.inspect_run("run-000001")
            assert untouched["status"] == "interrupted"
            assert untouched["resumes"] == []  # refused before any attempt was marked
            # Manual runs bypass capacity: start, trigger and resume.
            manual = await n.server.api.start_run("ask.default")
            resumed = await n.server.api.resume_run(manual["run_id"], ANSWER)
            assert resumed["status"] == "completed"
            triggered = await n.schedules.trigger_schedule(schedule_id="wait")
            assert triggered["status"] == "running"
            # Drain: admission stops, scheduled resumes are refused.
            stopping = asyncio.create_task(n.service.stop())
            await settle(lambda: n.service.state == "draining")
            with pytest.raises(Draining):
                await n.server.api.resume_run("run-000001", ANSWER)
            assert not stopping.done()  # run-000002 still runs; the grace holds the stop
            clock.advance(600)
            await stopping
            assert n.service.state == "stopped"
            assert (await n.server.api.inspect_run("run-000001"))["resumes"] == []
            # A new service sees the slot still taken by run-000002.
            service = build_scheduler_service(n.server, config, clock=clock)
            await service.start(background=False)
            n.service = service
            with pytest.raises(Overloaded):
                await n.server.api.resume_run("run-000001", ANSWER)
            await n.schedules.pause_schedule(schedule_id="wait")
            await n.tick(at(4.5))  # run-000002 (began 01:30:05) ends at 04:30:05
            assert await n.run_status("run-000002") == "completed"
            done = await n.server.api.resume_run("run-000001", ANSWER)
            assert done["status"] == "completed"

    asyncio.run(main())


# ----------------------------------------------------------------------- counters


def test_skip_counters_in_get_schedule(tmp_path: Path, clock: VirtualClock) -> None:
    async def main() -> None:
        async with node(tmp_path, clock) as n:
            await deploy(n)
            await create(n, "report")
            await n.tick(at(1))
            await n.tick(at(2))  # skipped-overlap: run-000001 is interrupted
            await n.tick(at(5, 30))  # 03:00, 04:00 too late; 05:00 on time but blocked
            assert await n.statuses("report") == [
                (iso(1), "interrupted"),
                (iso(2), "skipped-overlap"),
                (iso(3), "skipped-misfire"),
                (iso(4), "skipped-misfire"),
                (iso(5), "skipped-overlap"),
            ]
            got = await n.schedules.get_schedule(schedule_id="report")
            assert (got["skipped_overlap"], got["skipped_misfire"]) == (2, 2)
            assert n.service.skipped[("report", "overlap")] == 2
            assert n.service.skipped[("report", "misfire")] == 2
            # Per schedule: another schedule's counters stay at zero.
            await create(n, "other")
            other = await n.schedules.get_schedule(schedule_id="other")
            assert (other["skipped_overlap"], other["skipped_misfire"]) == (0, 0)

    asyncio.run(main())


# ----------------------------------------------------------------------- drain


def test_a_resume_still_running_at_the_drain_deadline_is_cancelled_keeping_its_mark(
    tmp_path: Path, clock: VirtualClock
) -> None:
    async def main() -> None:
        config = SchedulerServiceConfig(drain_grace_s=30)
        async with node(tmp_path, clock, config) as n:
            await deploy(n)
            await create(n, "ask")
            await n.tick(at(1))
            assert await n.run_status("run-000001") == "interrupted"
            # Hold the resume between its stored mark and the write of the answer.
            store = n.server.server.engine.store
            original = store.update_run
            writes: list[int] = []
            held = asyncio.Event()

            async def update_run(row: Any, *, expected_revision: int) -> None:
                writes.append(expected_revision)
                if len(writes) == 2:
                    held.set()
                    await asyncio.Event().wait()  # never: only the drain's cancel ends it
                await original(row, expected_revision=expected_revision)

            store.update_run = update_run  # type: ignore[method-assign]
            resume = asyncio.create_task(n.server.api.resume_run("run-000001", ANSWER))
            await held.wait()
            stopping = asyncio.create_task(n.service.stop())
            await settle(lambda: n.service.state == "draining")
            assert not stopping.done()  # the resume in progress holds the drain
            clock.advance(30)
            await stopping  # the deadline passed: the resume was cancelled and joined
            assert resume.cancelled()
            store.update_run = original  # type: ignore[method-assign]
        # The next start's recovery finds the mark without its answer: abandoned,
        # and the run is still interrupted and resumable.
        async with node(tmp_path, clock, config) as n:
            view = await n.server.api.inspect_run("run-000001")
            assert view["status"] == "interrupted"
            assert [m["state"] for m in view["resumes"]] == ["abandoned"]
            done = await n.server.api.resume_run("run-000001", ANSWER)
            assert done["status"] == "completed"
            assert [m["state"] for m in done["resumes"]] == ["abandoned", "applied"]

    asyncio.run(main())


# ------------------------------------------------------------ armed admissions
# The background loop prepares an admission ARM_LEAD_S before its instant
# (ScheduleService.arm); these tests call arm() where the loop would.


def armed_at(n: Node, hours: float) -> float:
    """Move the clock to ARM_LEAD_S before MONDAY + ``hours`` and return that instant."""
    instant = at(hours, 0)
    n.clock.advance_to(instant - ARM_LEAD_S)
    return instant


def test_an_armed_admission_commits_at_its_instant_as_prepared(
    tmp_path: Path, clock: VirtualClock
) -> None:
    async def main() -> None:
        async with node(tmp_path, clock) as n:
            await deploy(n)
            await create(n, "report")
            instant = armed_at(n, 1)
            assert await n.service.arm(clock.now() + ARM_LEAD_S) == 1
            # A second pass over the same instant prepares nothing new.
            assert await n.service.arm(clock.now() + ARM_LEAD_S) == 0
            assert await n.tick(instant + 0.004) == 1
            assert (n.service.armed_used, n.service.armed_discarded) == (1, 0)
            [occurrence] = await n.occurrences("report")
            assert (occurrence["instant"], occurrence["status"]) == (iso(1), "interrupted")
            run = await n.server.api.inspect_run(occurrence["run_id"])
            # Prepared 0.1 s early, created when committed.
            assert run["created_at"] == instant + 0.004
            assert run["trigger"]["occurrence"] == instant

    asyncio.run(main())


def test_a_deployment_saved_after_arming_is_the_one_the_run_pins(
    tmp_path: Path, clock: VirtualClock
) -> None:
    async def main() -> None:
        async with node(tmp_path, clock) as n:
            await deploy(n)
            await create(n, "report")
            instant = armed_at(n, 1)
            assert await n.service.arm(clock.now() + ARM_LEAD_S) == 1
            saved = await n.server.api.save_deployment(
                {"artifact_id": "ask", "artifact_version": 1, "priority": 1}
            )
            assert await n.tick(instant) == 1
            assert (n.service.armed_used, n.service.armed_discarded) == (0, 1)
            [occurrence] = await n.occurrences("report")
            run = await n.server.api.inspect_run(occurrence["run_id"])
            assert (run["deployment_revision"], run["priority"]) == (saved.revision, 1)

    asyncio.run(main())


def test_a_schedule_changed_after_arming_admits_as_changed(
    tmp_path: Path, clock: VirtualClock
) -> None:
    async def main() -> None:
        async with node(tmp_path, clock) as n:
            await deploy(n)
            await create(n, "paused")
            created = await create(n, "edited")
            instant = armed_at(n, 1)
            assert await n.service.arm(clock.now() + ARM_LEAD_S) == 2
            await n.schedules.pause_schedule(schedule_id="paused")
            await n.schedules.update_schedule(
                schedule_id="edited",
                expected_revision=created["revision"],
                inputs={"edited": True},
            )
            assert await n.tick(instant) == 1
            assert n.service.armed_used == 0
            assert await n.statuses("paused") == []
            [occurrence] = await n.occurrences("edited")
            run = await n.server.api.inspect_run(occurrence["run_id"])
            assert run["inputs"] == {"edited": True}

    asyncio.run(main())


def test_a_finished_run_after_arming_discards_the_preparation(
    tmp_path: Path, clock: VirtualClock
) -> None:
    async def main() -> None:
        async with node(tmp_path, clock) as n:
            await deploy(n)
            await create(n, "report", overlap="parallel", max_active_runs=2)
            await n.tick(at(1))
            [first] = await n.occurrences("report")
            instant = armed_at(n, 2)
            assert await n.service.arm(clock.now() + ARM_LEAD_S) == 1
            await n.server.api.resume_run(first["run_id"], ANSWER)
            assert await n.tick(instant) == 1
            # Decided again with the finished run gone: the same admission.
            assert (n.service.armed_used, n.service.armed_discarded) == (0, 1)
            assert await n.statuses("report") == [(iso(1), "completed"), (iso(2), "interrupted")]

    asyncio.run(main())


def test_arming_leaves_an_instant_it_is_too_close_to_for_the_instant_itself(
    tmp_path: Path, clock: VirtualClock
) -> None:
    async def main() -> None:
        async with node(tmp_path, clock) as n:
            await deploy(n)
            await create(n, "report")
            instant = at(1, 0)
            clock.advance_to(instant - ARM_MARGIN_S / 2)
            assert await n.service.arm(instant) == 0
            assert await n.tick(instant) == 1
            assert (n.service.armed_used, n.service.armed_discarded) == (0, 0)

    asyncio.run(main())
