"""One pass of the schedule service at a time (issue 19).

``tick()`` may be called by the service's own loop and by a caller driving it
(the time skipper) at once. Two dispatches at once would each see the slot the
other is filling: with ``max_concurrent_runs=1`` both waiting runs would start.
Here the test is the only driver (no background loop, the run engine's loop
stopped) and calls ``tick()`` twice concurrently.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

from wf.schedules import SchedulerServiceConfig, build_scheduler_service
from wf.server.local import build_local_static_workflow_server
from wf.testing.clock import VirtualClock

START = datetime(2026, 1, 5, 0, 0, 30, tzinfo=UTC)
HOUR = {"kind": "relative", "seconds": 3600}
HOUR_PLAN = {"nodes": [{"kind": "timer", "id": "wait", "delay": HOUR}]}


def test_concurrent_ticks_start_one_waiting_run_per_free_slot(tmp_path: Path) -> None:
    async def main() -> tuple[list[str], int]:
        clock = VirtualClock(START)
        server = build_local_static_workflow_server(
            tmp_path / "store", activities=[], schedules=True, clock=clock, durability="process"
        )
        await server.start()
        engine = server.server.engine
        await engine.stop()  # only the test applies the runs' timers (poll)
        await server.api.create_artifact_from_plan("hour", 1, HOUR_PLAN)
        await server.api.save_deployment({"artifact_id": "hour", "artifact_version": 1})
        for i in range(3):
            await server.api.schedules.create_schedule(
                schedule_id=f"once{i}",
                deployment_id="hour.default",
                trigger={"kind": "oneshot", "at": (START + timedelta(minutes=1 + i)).isoformat()},
            )
        config = SchedulerServiceConfig(enabled=True, max_concurrent_runs=1, drain_grace_s=0)
        service = build_scheduler_service(server, config, clock=clock)
        await service.start(background=False)
        for i in range(3):
            clock.advance_to(START + timedelta(minutes=1 + i))
            await service.tick()
        assert service.slots_in_use() == 1  # once0's run; once1's and once2's wait
        clock.advance_to(START + timedelta(hours=1, minutes=1))
        await engine.poll()  # once0's run ends: one slot is free
        await asyncio.gather(service.tick(), service.tick())
        statuses = []
        for i in range(3):
            page = await server.api.schedules.list_schedule_occurrences(schedule_id=f"once{i}")
            statuses.append(page["occurrences"][0]["status"])
        slots = service.slots_in_use()
        await server.stop()
        return statuses, slots

    statuses, slots = asyncio.run(main())
    assert statuses == ["completed", "running", "admitted"]
    assert slots == 1
