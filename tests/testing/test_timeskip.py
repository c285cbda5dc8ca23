"""The time skipper behaves exactly as production does, only faster (issue 19).

Every test runs the production code unchanged on a ``VirtualClock``: a local
server whose in-process workers run real activities over loopback (the way
docs/schedules.md's example runs), the run engine and the schedule service
with its own background loop. What they prove:

- time moves only when every component is idle: over a virtual week of a
  cron whose runs fan out, fan in and retry a failure, every repetition
  records exactly the expected occurrences and run traces, and no store write
  is ever in flight while the clock moves, even when writes are slow;
- ``max_concurrent_runs`` holds under the skipper as it does on a real server;
- stopping the service (or the server) with a run in flight drains on
  virtual time: it returns when the run ends, or at the drain grace.

``WF_TIMESKIP_REPEAT`` sets how many times the week is played (20 in CI; more
by hand).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from wf.activities import BUILTIN_ACTIVITIES
from wf.scheduler.cron import next_instants
from wf.schedules import SchedulerServiceConfig, build_scheduler_service
from wf.schedules.service import ScheduleService
from wf.server.local import LocalStaticServer, build_local_static_workflow_server
from wf.testing.clock import VirtualClock
from wf.testing.timeskip import TimeSkipper
from wf.worker import activity, activity_info

T = TypeVar("T")

REPEAT = int(os.environ.get("WF_TIMESKIP_REPEAT", "20"))
"""How many times the week is played."""
GUARD_S = 60.0
"""Real-time bound on one test's body: a skipper that hangs fails instead of hanging."""
RETRY_S = 5.0
"""The retried node's backoff (no jitter, so its instants are exact)."""
START = datetime(2026, 1, 5, 0, 0, 30, tzinfo=UTC)  # a Monday
CRON = "0 */3 * * *"
WEEK_END = START + timedelta(days=7)


@activity(name="flaky", idempotent=True)
def flaky(text: str) -> dict[str, str]:
    """Fails its first attempt, then succeeds: a retried failure."""
    if activity_info().attempt == 1:
        raise RuntimeError("the first attempt fails")
    return {"text": text + "!"}


ACTIVITIES = [*BUILTIN_ACTIVITIES, flaky]

FAN_OUT: dict[str, Any] = {
    "nodes": [
        {"kind": "activity", "id": "a", "activity_type": "upper", "args": {"text": "x"}},
        {
            "kind": "activity",
            "id": "b",
            "activity_type": "flaky",
            "args": {"text": {"$node": "a", "path": "text"}},
            "needs": ["a"],
            "retry": {"max_attempts": 3, "initial_backoff_s": RETRY_S, "jitter_fraction": 0},
        },
        {"kind": "activity", "id": "c", "activity_type": "upper", "args": {"text": "y"}},
        {
            "kind": "activity",
            "id": "d",
            "activity_type": "join_texts",
            "args": {"texts": [{"$node": "b", "path": "text"}, {"$node": "c", "path": "text"}]},
            "needs": ["b", "c"],
        },
    ],
    "output": {"text": {"$node": "d", "path": "text"}},
}
"""``a`` and ``c`` start together; ``b`` (after ``a``) fails once and is retried
``RETRY_S`` later; ``d`` gathers ``b`` and ``c``."""


def waits(seconds: float) -> dict[str, Any]:
    """A plan whose run takes ``seconds`` of virtual time (a timer node)."""
    delay = {"kind": "relative", "seconds": seconds}
    return {"nodes": [{"kind": "timer", "id": "wait", "delay": delay}]}


def guarded(body: Awaitable[T]) -> T:
    """Run ``body``, failing (not hanging) past ``GUARD_S`` of real time."""
    return asyncio.run(asyncio.wait_for(body, GUARD_S))


class WriteWatch:
    """Wraps the store's writes: each may take ``latency_s`` of real time (a slow disk),
    and a write during which the virtual clock moved is recorded in ``straddled``."""

    def __init__(self, server: LocalStaticServer, clock: VirtualClock, latency_s: float) -> None:
        self.clock = clock
        self.latency_s = latency_s
        self.writes = 0
        self.straddled: list[tuple[str, float, float]] = []
        # Journal appends must reach the store in the order they were made (the core's
        # order); the delay is taken in turn, first come first served.
        self._journal_order = asyncio.Lock()
        store: Any = server.server.node.store
        for name in ("append", "insert_run", "update_run", "record_occurrences"):
            setattr(store, name, self._watched(name, getattr(store, name)))

    def _watched(self, name: str, write: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
        async def watched(*args: Any, **kwargs: Any) -> Any:
            before = self.clock.now()
            try:
                if name == "append":
                    async with self._journal_order:
                        await self._delay()
                        written = asyncio.ensure_future(write(*args, **kwargs))
                else:
                    await self._delay()
                    written = asyncio.ensure_future(write(*args, **kwargs))
                return await written
            finally:
                self.writes += 1
                if self.clock.now() != before:
                    self.straddled.append((name, before, self.clock.now()))

        return watched

    async def _delay(self) -> None:
        if self.latency_s:
            await asyncio.sleep(self.latency_s)


async def started(
    root: Path,
    plan: dict[str, Any],
    config: SchedulerServiceConfig,
    *,
    latency_s: float = 0.0,
    start: datetime = START,
) -> tuple[LocalStaticServer, ScheduleService, TimeSkipper, WriteWatch]:
    """A local server with two in-process workers, the plan deployed as ``p.default``,
    the schedule service running its own loop, and a skipper."""
    clock = VirtualClock(start)
    server = build_local_static_workflow_server(
        root, activities=ACTIVITIES, workers=2, schedules=True, clock=clock, durability="process"
    )
    watch = WriteWatch(server, clock, latency_s)
    await server.start()
    await server.api.create_artifact_from_plan("p", 1, plan)
    await server.api.save_deployment({"artifact_id": "p", "artifact_version": 1})
    service = build_scheduler_service(server, config, clock=clock)
    await service.start()
    return server, service, TimeSkipper(server, clock, service), watch


async def occurrences(server: LocalStaticServer, schedule_id: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = await server.api.schedules.list_schedule_occurrences(
            schedule_id=schedule_id, limit=100, cursor=cursor
        )
        found += page["occurrences"]
        cursor = page["next_cursor"]
        if cursor is None:
            return found


async def traced(server: LocalStaticServer, schedule_id: str) -> list[tuple[Any, ...]]:
    """Each occurrence with its run: status, virtual instants, output, node trace."""
    rows: list[tuple[Any, ...]] = []
    for o in await occurrences(server, schedule_id):
        run = await server.api.inspect_run(o["run_id"]) if o.get("run_id") else None
        rows.append(
            (o["instant_s"], o["status"])
            if run is None
            else (
                o["instant_s"],
                o["status"],
                run["created_at"],
                run["started_at"],
                run["finished_at"],
                run["output"],
                [
                    (
                        n["node"],
                        n["status"],
                        n["started_at"],
                        n["finished_at"],
                        [(t["attempt"], t["started_at"], t["outcome"]) for t in n["attempts"]],
                    )
                    for n in run["trace"]
                ],
            )
        )
    return rows


def expected_week(until: datetime = WEEK_END, waited: float = 0.0) -> list[tuple[Any, ...]]:
    """What production would record: every occurrence admitted at its instant, begun
    ``waited`` later (waiting for a slot) and completed ``RETRY_S`` after that, the
    retry and the gather at that instant."""
    rows: list[tuple[Any, ...]] = []
    for when in next_instants(CRON, "UTC", after=START, count=8 * 7):
        o = when.timestamp()
        if o > until.timestamp():
            break
        t = o + waited
        r = t + RETRY_S
        rows.append(
            (
                o,
                "completed",
                o,
                t,
                r,
                {"text": "X! Y"},
                [
                    ("a", "completed", t, t, [(1, t, "completed")]),
                    ("b", "completed", t, r, [(1, t, "failed, retried"), (2, r, "completed")]),
                    ("c", "completed", t, t, [(1, t, "completed")]),
                    ("d", "completed", r, r, [(1, r, "completed")]),
                ],
            )
        )
    return rows


# ------------------------------------------------------------------ the week


async def play_week(root: Path) -> tuple[list[tuple[Any, ...]], WriteWatch]:
    server, _, skipper, watch = await started(root, FAN_OUT, SchedulerServiceConfig(enabled=True))
    await server.api.schedules.create_schedule(
        schedule_id="every3h",
        deployment_id="p.default",
        trigger={"kind": "cron", "expression": CRON, "timezone": "UTC"},
    )
    await skipper.advance_to(WEEK_END)
    rows = await traced(server, "every3h")
    await server.stop()
    return rows, watch


def test_a_week_of_fan_out_runs_with_a_retried_failure_is_exactly_the_expected_one_every_time(
    tmp_path: Path,
) -> None:
    expected = expected_week()
    assert len(expected) == 56
    for rep in range(REPEAT):
        rows, watch = guarded(play_week(tmp_path / f"store-{rep}"))
        assert rows == expected, f"repetition {rep} differs"
        assert watch.straddled == [], f"repetition {rep}: writes in flight while time moved"


def test_with_slow_store_writes_a_shared_slot_day_is_exact_and_no_write_straddles_a_jump(
    tmp_path: Path,
) -> None:
    # Every write takes 5 ms of real time (a slow disk): the skipper must wait for
    # each, whichever task made it. Two schedules share one slot, so the second's
    # run waits and the service's own loop starts it when the first's run ends.
    day = START + timedelta(days=1)

    async def main() -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], WriteWatch]:
        config = SchedulerServiceConfig(enabled=True, max_concurrent_runs=1)
        server, _, skipper, watch = await started(
            tmp_path / "store", FAN_OUT, config, latency_s=0.005
        )
        for schedule_id in ("first", "second"):
            await server.api.schedules.create_schedule(
                schedule_id=schedule_id,
                deployment_id="p.default",
                trigger={"kind": "cron", "expression": CRON, "timezone": "UTC"},
            )
        await skipper.advance_to(day)
        first, second = await traced(server, "first"), await traced(server, "second")
        await server.stop()
        return first, second, watch

    first, second, watch = guarded(main())
    assert watch.writes > 200
    assert watch.straddled == []
    assert first == expected_week(day)
    assert second == expected_week(day, waited=RETRY_S)


# ------------------------------------------------------------------ capacity


def test_max_concurrent_runs_holds_under_the_skipper(tmp_path: Path) -> None:
    # One slot; three one-shot schedules a minute apart, each run an hour long: the
    # first runs, two wait, and each starts only when the one before has finished.
    async def main() -> tuple[list[str], int, list[tuple[str, float, float]]]:
        config = SchedulerServiceConfig(enabled=True, max_concurrent_runs=1)
        server, _, skipper, _ = await started(tmp_path / "store", waits(3600), config)
        running: set[str] = set()
        most = 0

        def count(run: Any) -> None:
            nonlocal most
            if run.status == "running":
                running.add(run.run_id)
            else:
                running.discard(run.run_id)
            most = max(most, len(running))

        server.server.engine.listeners.append(count)
        t0 = START.timestamp()
        for i in range(3):
            await server.api.schedules.create_schedule(
                schedule_id=f"once{i}",
                deployment_id="p.default",
                trigger={"kind": "oneshot", "at": (START + timedelta(minutes=1 + i)).isoformat()},
            )
        await skipper.advance_to(t0 + 3600 + 61)  # the first run has just finished
        statuses = [(await occurrences(server, f"once{i}"))[0]["status"] for i in range(3)]
        await skipper.advance_to(t0 + 4 * 3600)
        runs = []
        for i in range(3):
            [o] = await occurrences(server, f"once{i}")
            run = await server.api.inspect_run(o["run_id"])
            runs.append((run["status"], run["started_at"] - t0, run["finished_at"] - t0))
        await server.stop()
        return statuses, most, runs

    statuses, most, runs = guarded(main())
    assert statuses == ["completed", "running", "admitted"]
    assert most == 1
    # Each starts the instant the one before ends (admitted at 1, 2 and 3 minutes).
    assert runs == [
        ("completed", 60.0, 60.0 + 3600),
        ("completed", 60.0 + 3600, 60.0 + 7200),
        ("completed", 60.0 + 7200, 60.0 + 10800),
    ]


# ------------------------------------------------------------------ stopping


def test_stopping_the_service_with_a_run_in_flight_drains_on_virtual_time(
    tmp_path: Path,
) -> None:
    # The default 30 s grace: a run that needs 10 more virtual seconds finishes
    # during the drain, and the drain ends when it does.
    async def main() -> tuple[float, str, str]:
        server, service, skipper, _ = await started(
            tmp_path / "store", waits(10), SchedulerServiceConfig(enabled=True)
        )
        assert service.config.drain_grace_s == 30.0
        due = START + timedelta(minutes=1)
        await server.api.schedules.create_schedule(
            schedule_id="once",
            deployment_id="p.default",
            trigger={"kind": "oneshot", "at": due.isoformat()},
        )
        await skipper.advance_to(due)
        [o] = await occurrences(server, "once")
        before = o["status"]
        await service.stop()
        stopped_at = skipper.clock.now() - due.timestamp()
        run = await server.api.inspect_run(o["run_id"])
        await server.stop()
        return stopped_at, before, run["status"]

    stopped_at, before, after = guarded(main())
    assert (before, after) == ("running", "completed")
    assert stopped_at == 10.0


def test_stopping_the_server_cuts_a_longer_run_at_the_drain_grace(tmp_path: Path) -> None:
    # As on a real clock: a run longer than the grace is left running (the next
    # start's recovery takes it over), and the stop returns at the grace.
    async def main() -> tuple[float, str]:
        server, service, skipper, _ = await started(
            tmp_path / "store", waits(600), SchedulerServiceConfig(enabled=True)
        )
        due = START + timedelta(minutes=1)
        await server.api.schedules.create_schedule(
            schedule_id="once",
            deployment_id="p.default",
            trigger={"kind": "oneshot", "at": due.isoformat()},
        )
        await skipper.advance_to(due)
        await server.stop()  # stops (drains) the service first
        return skipper.clock.now() - due.timestamp(), service.state

    stopped_at, state = guarded(main())
    assert (stopped_at, state) == (30.0, "stopped")


# ------------------------------------------------------------------ ties


def test_a_run_ending_at_its_schedules_next_instant_frees_its_place_first(
    tmp_path: Path,
) -> None:
    # Hourly, overlap "skip", and each run is a timer of exactly an hour: a run ends
    # at the instant the next occurrence is due. The skipper brings the run engine
    # up to each instant before the service decides it, whichever loop the clock
    # woke first, so no occurrence is ever skipped and the answer never varies.
    async def main() -> list[str]:
        server, _, skipper, _ = await started(
            tmp_path / "store", waits(3600), SchedulerServiceConfig(enabled=True)
        )
        await server.api.schedules.create_schedule(
            schedule_id="hourly",
            deployment_id="p.default",
            trigger={"kind": "cron", "expression": "0 * * * *", "timezone": "UTC"},
        )
        await skipper.advance_to(START + timedelta(days=2))
        statuses = [o["status"] for o in await occurrences(server, "hourly")]
        await server.stop()
        return statuses

    assert guarded(main()) == ["completed"] * 47 + ["running"]
