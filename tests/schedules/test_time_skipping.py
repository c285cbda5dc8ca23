"""A week of an hourly cron schedule on the virtual clock, through the production code.

The server, the run engine and the schedule service run unchanged on a
``VirtualClock``; ``TimeSkipper`` jumps from one due instant to the next. The
week holds a pause, a downtime (server and service stopped, then started again
on the same store) and the end of daylight saving time in Europe/Berlin.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from wf.scheduler.cron import next_instants
from wf.schedules import SchedulerServiceConfig, build_scheduler_service
from wf.server.local import build_local_static_workflow_server
from wf.testing.clock import VirtualClock
from wf.testing.timeskip import TimeSkipper

# A run takes ten virtual minutes (a timer node), so runs overlap nothing hourly.
PLAN = {
    "nodes": [
        {"kind": "timer", "id": "work", "delay": {"kind": "relative", "seconds": 600}},
    ],
    "output": {"fired": {"$node": "work", "path": "fired_at"}},
}
ZONE = "Europe/Berlin"
START = datetime(2026, 10, 20, 0, 0, 30, tzinfo=UTC)  # Tuesday; DST ends Sunday 25 Oct
# No drain grace: the downtime stops the service while a run's timer is armed, and
# the next start's recovery has to pick that run up.
CONFIG = SchedulerServiceConfig(enabled=True, misfire_lateness_s=60.0, drain_grace_s=0.0)


def at(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


async def _all_occurrences(server: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = await server.api.schedules.list_schedule_occurrences(
            schedule_id="hourly", limit=100, cursor=cursor
        )
        found += page["occurrences"]
        cursor = page["next_cursor"]
        if cursor is None:
            return found


async def _week(root: Path) -> tuple[list[dict[str, Any]], float, int]:
    clock = VirtualClock(START)

    def build() -> Any:
        return build_local_static_workflow_server(
            root, activities=[], schedules=True, clock=clock, durability="process"
        )

    server = build()
    await server.start()
    await server.api.create_artifact_from_plan("report", 1, PLAN)
    await server.api.save_deployment({"artifact_id": "report", "artifact_version": 1})
    await server.api.schedules.create_schedule(
        schedule_id="hourly",
        deployment_id="report.default",
        trigger={"kind": "cron", "expression": "0 * * * *", "timezone": ZONE},
    )
    service = build_scheduler_service(server, CONFIG, clock=clock)
    await service.start()
    skipper = TimeSkipper(server, clock, service)
    started = time.perf_counter()

    # Tuesday to Friday 18:00 UTC, then a pause over the weekend.
    await skipper.advance_to(at("2026-10-23T18:00:30+00:00"))
    await server.api.schedules.pause_schedule(schedule_id="hourly", reason="maintenance")
    await skipper.advance_to(at("2026-10-26T08:00:30+00:00"))  # Monday, DST over
    await server.api.schedules.resume_schedule(schedule_id="hourly")
    await skipper.advance_to(at("2026-10-26T12:00:30+00:00"))

    # Downtime: everything stops for three hours and a half, then starts again.
    await service.stop()
    await server.stop()
    clock.advance_to(at("2026-10-26T15:30:30+00:00"))
    server = build()
    await server.start()
    service = build_scheduler_service(server, CONFIG, clock=clock)
    await service.start()
    jumps = skipper.jumps
    skipper = TimeSkipper(server, clock, service)
    await skipper.advance_to(at("2026-10-27T00:00:30+00:00"))
    elapsed = time.perf_counter() - started
    jumps += skipper.jumps
    occurrences = await _all_occurrences(server)
    await service.stop()
    await server.stop()
    return occurrences, elapsed, jumps


def test_a_week_of_an_hourly_schedule_with_pause_downtime_and_dst(tmp_path: Path) -> None:
    occurrences, _elapsed, _ = asyncio.run(_week(tmp_path / "store"))
    instants = [o["instant_s"] for o in occurrences]
    assert instants == sorted(instants)
    statuses = Counter(o["status"] for o in occurrences)

    expected = [
        t.timestamp()
        for t in next_instants("0 * * * *", ZONE, after=START, count=24 * 8)
        if t.timestamp() <= at("2026-10-27T00:00:30+00:00")
    ]
    paused = (at("2026-10-23T18:00:30+00:00"), at("2026-10-26T08:00:30+00:00"))
    down = (at("2026-10-26T12:00:30+00:00"), at("2026-10-26T15:30:30+00:00"))
    in_pause = [t for t in expected if paused[0] < t <= paused[1]]
    in_downtime = [t for t in expected if down[0] < t <= down[1]]
    live = [t for t in expected if t not in in_pause and t not in in_downtime]

    # Paused times are consumed, never recorded, never replayed.
    assert not set(in_pause) & set(instants)
    # Downtime catch-up: each missed start is past the 60 s allowance (skip policy).
    recorded = {o["instant_s"]: o["status"] for o in occurrences}
    assert [recorded[t] for t in in_downtime] == ["skipped-misfire"] * len(in_downtime)
    # Everything else ran and completed, exactly once per instant (the run of the
    # 12:00 occurrence too: the downtime cut it mid-timer and recovery finished it);
    # the last one, admitted at 00:00, is still within its ten minutes.
    assert [recorded[t] for t in live[:-1]] == ["completed"] * (len(live) - 1)
    assert recorded[live[-1]] == "running"
    assert statuses["completed"] == len(live) - 1
    assert len(instants) == len(set(instants)) == len(live) + len(in_downtime)


def test_the_week_skips_time_instead_of_waiting_for_it(tmp_path: Path) -> None:
    # Not a speed benchmark: a run that waited for real time would take the week;
    # one generous bound tells skipping from waiting on any machine.
    _, elapsed, jumps = asyncio.run(_week(tmp_path / "store"))
    assert jumps > 100
    assert elapsed < 60.0
