"""The schedule service's ``/metrics`` families over real HTTP (``ScheduleCollector``).

A real :class:`~wf.server.app.WfServer` on loopback over a temporary store, on a
:class:`~wf.testing.clock.VirtualClock`, with an admission service started in
the foreground (``background=False``) and installed as ``server.schedule_service``,
which is where the collector looks at every scrape. Admission happens only when
the test calls ``tick(now)`` with an explicit instant, so each scrape sees exactly
what the test arranged: an admitted occurrence, a ``skipped-overlap`` and a
``skipped-misfire`` one, a running scheduled run in an execution slot, a blocked
schedule, and the drain.
"""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from _obs_server import Samples, by_label, config, scrape, value

from wf.schedules import ScheduleServiceConfig, build_scheduler_service
from wf.server.app import WfServer
from wf.server.config import ServerConfig, ServerSection
from wf.server.metrics import LATENESS_QUANTILES
from wf.server.rpc import ANONYMOUS_ADMIN
from wf.store.protocol import ScheduleRow
from wf.testing.clock import VirtualClock

MONDAY = datetime(2026, 1, 5, tzinfo=UTC)
CREATED = MONDAY + timedelta(seconds=30)
"""Where the clock starts: schedules are created at 00:00:30."""
LATE_S = 5.0
"""How late after an instant the on-time ticks come (within the 60 s allowance)."""
MISFIRE_LATE_S = 120.0
"""How late the misfiring tick comes (past the 60 s allowance)."""
SLOTS = 3
SETTLE_ROUNDS_MAX = 50

ASK_PLAN: dict[str, Any] = {
    "nodes": [{"kind": "interrupt", "id": "ask", "prompt": "Publish the report?"}],
    "output": {"answer": {"$node": "ask"}},
}
WAIT_PLAN: dict[str, Any] = {
    "nodes": [{"kind": "timer", "id": "wait", "delay": {"kind": "relative", "seconds": 86_400}}],
    "output": {"waited": {"$node": "wait"}},
}
HOURLY: dict[str, Any] = {"kind": "cron", "expression": "0 * * * *", "timezone": "UTC"}
FAMILIES = (
    "wf_schedule_occurrences_skipped_total",
    "wf_schedule_admitted_total",
    "wf_schedule_admission_lateness_seconds",
    "wf_schedule_admission_lateness_window_samples",
    "wf_schedule_execution_slots_in_use",
    "wf_schedule_execution_slots",
    "wf_schedule_blocked",
    "wf_schedule_service_draining",
)


def at(hours: float, seconds: float = LATE_S) -> float:
    """POSIX seconds of MONDAY + ``hours`` + ``seconds``."""
    return (MONDAY + timedelta(hours=hours, seconds=seconds)).timestamp()


def names(samples: Samples) -> set[str]:
    return {name for name, _ in samples}


def lateness(samples: Samples) -> dict[str, float]:
    return by_label(samples, "wf_schedule_admission_lateness_seconds", "quantile")


def with_scheduler(root: Path, **scheduler: Any) -> ServerConfig:
    base = config(root)
    section = ServerSection(
        port=0,
        store=base.server.store,
        scheduler=ScheduleServiceConfig(**scheduler),
    )
    return ServerConfig(server=section, dispatch=base.dispatch)


def corrupt_row(schedule_id: str, now: float) -> ScheduleRow:
    """A stored schedule whose body does not decode (the service blocks it)."""
    return ScheduleRow(
        schedule_id=schedule_id,
        tenant="",
        deployment_id="ask.default",
        status="active",
        body=b"{not json",
        revision=1,
        created_at=now,
        updated_at=now,
    )


def test_admissions_skips_slots_blocked_and_drain_are_scraped(tmp_path: Path) -> None:
    async def main() -> None:
        clock = VirtualClock(CREATED)
        server = WfServer(with_scheduler(tmp_path), schedules=True, clock=clock)
        assert server.schedule_service is None  # not enabled: built by the test below
        assert server.schedules is not None
        await server.start()
        url = f"http://127.0.0.1:{server.port}"
        try:
            assert not names(await scrape(url)) & set(FAMILIES)  # no service, no families
            for artifact_id, plan in (("ask", ASK_PLAN), ("wait", WAIT_PLAN)):
                await server.workflow.create_artifact_from_plan(
                    artifact_id, 1, plan, caller=ANONYMOUS_ADMIN
                )
                await server.workflow.save_deployment(
                    {"artifact_id": artifact_id, "artifact_version": 1}, caller=ANONYMOUS_ADMIN
                )
            await server.schedules.store.put_schedule(
                corrupt_row("broken", clock.now()), expected_revision=0
            )
            service = build_scheduler_service(
                server, ScheduleServiceConfig(max_concurrent_runs=SLOTS), clock=clock
            )
            await service.start(background=False)
            server.schedule_service = service

            fresh = await scrape(url)
            assert value(fresh, "wf_schedule_admitted_total") == 0
            assert by_label(fresh, "wf_schedule_occurrences_skipped_total", "reason") == {}
            assert value(fresh, "wf_schedule_execution_slots") == SLOTS
            assert value(fresh, "wf_schedule_execution_slots_in_use") == 0
            assert value(fresh, "wf_schedule_blocked") == 1  # "broken" does not decode
            assert value(fresh, "wf_schedule_service_draining") == 0
            assert value(fresh, "wf_schedule_admission_lateness_window_samples") == 0
            quantiles = lateness(fresh)
            assert set(quantiles) == {repr(float(q)) for q in LATENESS_QUANTILES}
            assert all(math.isnan(v) for v in quantiles.values())
            assert "wf_schedule_admission_lateness_seconds_count" not in names(fresh)

            await server.schedules.create_schedule(
                "report", "ask.default", HOURLY, caller=ANONYMOUS_ADMIN
            )
            await server.schedules.create_schedule(
                "nightly",
                "wait.default",
                {"kind": "oneshot", "at": (MONDAY + timedelta(hours=1)).isoformat()},
                caller=ANONYMOUS_ADMIN,
            )
            # 01:00:05: both admitted 5 s late; "report"'s run waits for input
            # (interrupted, no slot), "nightly"'s waits on a day-long timer (running).
            clock.advance_to(at(1))
            assert await service.tick(at(1)) == 2
            # 02:00:05: "report"'s interrupted run blocks 02:00 (overlap=skip).
            clock.advance_to(at(2))
            assert await service.tick(at(2)) == 1
            # 03:02:00: 03:00 is 120 s late, past the 60 s allowance.
            clock.advance_to(at(3, MISFIRE_LATE_S))
            assert await service.tick(at(3, MISFIRE_LATE_S)) == 1

            busy = await scrape(url)
            assert value(busy, "wf_schedule_admitted_total") == 2
            skipped = {
                (dict(labels)["schedule"], dict(labels)["reason"]): v
                for (name, labels), v in busy.items()
                if name == "wf_schedule_occurrences_skipped_total"
            }
            assert skipped == {("report", "overlap"): 1, ("report", "misfire"): 1}
            assert value(busy, "wf_schedule_execution_slots_in_use") == 1
            assert value(busy, "wf_schedule_execution_slots") == SLOTS
            assert value(busy, "wf_schedule_blocked") == 1
            assert value(busy, "wf_schedule_admission_lateness_window_samples") == 2
            assert set(lateness(busy).values()) == {LATE_S}

            # Shutdown: the running scheduled run holds the drain for its grace.
            stopping = asyncio.ensure_future(service.stop())
            for _ in range(SETTLE_ROUNDS_MAX):
                await asyncio.sleep(0)
            assert service.state == "draining"
            draining = await scrape(url)
            assert value(draining, "wf_schedule_service_draining") == 1
            clock.advance(service.config.drain_grace_s)
            await stopping
            stopped = await scrape(url)
            assert value(stopped, "wf_schedule_service_draining") == 0
            assert value(stopped, "wf_schedule_admitted_total") == 2  # counters survive a stop
        finally:
            await server.stop()

    asyncio.run(main())


def test_an_enabled_server_exposes_its_own_service(tmp_path: Path) -> None:
    async def main() -> None:
        server = WfServer(with_scheduler(tmp_path, enabled=True, max_concurrent_runs=SLOTS))
        await server.start()
        try:
            assert server.schedule_service is not None
            assert server.schedule_service.state == "running"
            samples = await scrape(f"http://127.0.0.1:{server.port}")
            # Every family but the skip counter, which has no samples before a skip.
            assert set(FAMILIES) - names(samples) == {"wf_schedule_occurrences_skipped_total"}
            assert value(samples, "wf_schedule_admitted_total") == 0
            assert value(samples, "wf_schedule_execution_slots") == SLOTS
            assert value(samples, "wf_schedule_execution_slots_in_use") == 0
            assert value(samples, "wf_schedule_blocked") == 0
            assert value(samples, "wf_schedule_service_draining") == 0
            assert len(lateness(samples)) == len(LATENESS_QUANTILES)
        finally:
            await server.stop()

    asyncio.run(main())
