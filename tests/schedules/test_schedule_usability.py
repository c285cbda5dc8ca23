"""Issue 17, "Schedule behaviour users tripped on": revisions, finished one-shots,
linked manual triggers, per-schedule misfire allowances, DST, blocked schedules
(``5-0`` day-of-week ranges: ``test_cron_sunday_range.py``).

Every service test runs on both stores (SQLite, and PostgreSQL in a schema of
its own): a local server without in-process workers and a
:class:`~wf.schedules.service.ScheduleService` started with
``background=False`` on a :class:`~wf.testing.clock.VirtualClock`, so
admission happens only when a test calls ``tick(now)``. Runs of the one plan
stop at an interrupt node at once (no worker needed).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
from test_service import (
    Node,
    store_backend,  # noqa: F401 (autouse: every test on both stores)
)
from test_service import node as service_node

from wf.cli.schedules_cmd import _schedule_text, _schedules_table
from wf.errors import InvalidArgument
from wf.schedules import SchedulerServiceConfig
from wf.testing.clock import VirtualClock

MONDAY = datetime(2026, 1, 5, tzinfo=UTC)
HOURLY: dict[str, Any] = {"kind": "cron", "expression": "0 * * * *", "timezone": "UTC"}
BERLIN_0230: dict[str, Any] = {
    "kind": "cron",
    "expression": "30 2 * * *",
    "timezone": "Europe/Berlin",
}
ASK_PLAN: dict[str, Any] = {
    "nodes": [{"kind": "interrupt", "id": "ask", "prompt": "Go?"}],
    "output": {"answer": {"$node": "ask"}},
}


def at(start: datetime, hours: float = 0, seconds: float = 5) -> float:
    return (start + timedelta(hours=hours, seconds=seconds)).timestamp()


@asynccontextmanager
async def node(
    root: Path, start: datetime, config: SchedulerServiceConfig | None = None
) -> AsyncIterator[Node]:
    """:func:`test_service.node` on a clock at ``start``, with the ``ask`` deployment."""
    async with service_node(root, VirtualClock(start), config) as n:
        await n.server.api.create_artifact_from_plan("ask", 1, ASK_PLAN)
        await n.server.api.save_deployment({"artifact_id": "ask", "artifact_version": 1})
        yield n


async def create(n: Node, schedule_id: str, **options: Any) -> dict[str, Any]:
    options.setdefault("deployment_id", "ask.default")
    options.setdefault("trigger", HOURLY)
    return await n.schedules.create_schedule(schedule_id=schedule_id, **options)


def run(coro: Any) -> None:
    asyncio.run(coro)


# --------------------------------------------------------------- revisions


def test_admissions_leave_the_revision_alone_so_get_then_update_does_not_race(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        async with node(tmp_path, MONDAY + timedelta(seconds=30)) as n:
            created = await create(n, "report", overlap="parallel", max_active_runs=5)
            read = await n.schedules.get_schedule(schedule_id="report")
            assert read["revision"] == created["revision"] == 1
            assert "fence" not in read  # the store's write fence stays internal
            for hour in (1, 2, 3):
                assert await n.tick(at(MONDAY, hour)) == 1
            # Three admissions wrote the schedule three times ...
            row = await n.service.api.store.get_schedule("report")
            assert row is not None
            assert row.revision == 4
            after = await n.schedules.get_schedule(schedule_id="report")
            assert after["revision"] == 1
            assert after["watermark"] > read["watermark"]
            # ... and the revision read before them is still the one to edit at.
            updated = await n.schedules.update_schedule(
                schedule_id="report", expected_revision=read["revision"], note="edited"
            )
            assert updated["revision"] == 2
            # Operator changes move it: pause, resume and delete are edits too.
            assert (await n.schedules.pause_schedule(schedule_id="report"))["revision"] == 3
            assert (await n.schedules.resume_schedule(schedule_id="report"))["revision"] == 4
            assert await n.tick(at(MONDAY, 4)) == 1
            got = await n.schedules.get_schedule(schedule_id="report")
            assert got["revision"] == 4
            # The admission after the edits used the schedule as edited.
            assert got["note"] == "edited"

    run(main())


# --------------------------------------------------------- finished one-shots


def test_a_one_shot_is_finished_once_it_fired_and_list_get_and_filters_say_so(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        start = MONDAY + timedelta(seconds=30)
        async with node(tmp_path, start) as n:
            once_at = (MONDAY + timedelta(hours=1)).isoformat()
            await create(n, "once", trigger={"kind": "oneshot", "at": once_at})
            await create(n, "hourly")
            before = await n.schedules.get_schedule(schedule_id="once")
            assert (before["status"], before["next_instant"]) == ("active", once_at)
            assert await n.tick(at(MONDAY, 1)) == 2  # both fire at 01:00
            got = await n.schedules.get_schedule(schedule_id="once")
            assert got["status"] == "finished"
            assert got["next_instant"] is None
            assert got["finished_at"] == at(MONDAY, 1)
            assert got["revision"] == 1  # finishing is the scheduler's, not an edit
            assert await n.statuses("once") == [(once_at, "interrupted")]
            listed = (await n.schedules.list_schedules())["schedules"]
            assert {v["schedule_id"]: v["status"] for v in listed} == {
                "hourly": "active",
                "once": "finished",
            }
            finished = await n.schedules.list_schedules(status="finished")
            assert [v["schedule_id"] for v in finished["schedules"]] == ["once"]
            assert finished["next_cursor"] is None
            active = await n.schedules.list_schedules(status="active")
            assert [v["schedule_id"] for v in active["schedules"]] == ["hourly"]
            with pytest.raises(InvalidArgument) as bad:
                await n.schedules.list_schedules(status="done")
            assert bad.value.details["field"] == "status"
            # Nothing more is admitted, and the CLI's table shows the state.
            assert await n.tick(at(MONDAY, 2)) == 1  # hourly only
            assert "finished" in _schedules_table(listed)
            assert "FINISHED" in _schedule_text(got)
            # A new trigger makes it active again.
            again_at = (MONDAY + timedelta(hours=5)).isoformat()
            edited = await n.schedules.update_schedule(
                schedule_id="once",
                expected_revision=1,
                trigger={"kind": "oneshot", "at": again_at},
            )
            assert (edited["status"], edited["next_instant"]) == ("active", again_at)
            await n.tick(at(MONDAY, 5))
            # Dealt with (skipped: its first run still waits at the interrupt), so
            # finished again.
            assert (await n.statuses("once"))[-1] == (again_at, "skipped-overlap")
            assert (await n.schedules.get_schedule(schedule_id="once"))["status"] == "finished"

    run(main())


def test_a_one_shot_that_was_skipped_as_a_misfire_is_finished_too(tmp_path: Path) -> None:
    async def main() -> None:
        async with node(tmp_path, MONDAY + timedelta(seconds=30)) as n:
            once_at = (MONDAY + timedelta(hours=1)).isoformat()
            await create(n, "once", trigger={"kind": "oneshot", "at": once_at})
            assert await n.tick(at(MONDAY, 1, seconds=600)) == 1  # ten minutes late
            assert await n.statuses("once") == [(once_at, "skipped-misfire")]
            assert (await n.schedules.get_schedule(schedule_id="once"))["status"] == "finished"

    run(main())


def test_a_filtered_list_pages_through_every_match(tmp_path: Path) -> None:
    async def main() -> None:
        async with node(tmp_path, MONDAY + timedelta(seconds=30)) as n:
            for i in range(7):
                await create(n, f"s{i}")
            for i in (1, 2, 4, 6):
                await n.schedules.pause_schedule(schedule_id=f"s{i}", reason=f"note {i}")
            seen: list[str] = []
            cursor = None
            while True:
                page = await n.schedules.list_schedules(status="paused", limit=2, cursor=cursor)
                assert len(page["schedules"]) <= 2
                seen += [v["schedule_id"] for v in page["schedules"]]
                cursor = page["next_cursor"]
                if cursor is None:
                    break
            assert seen == ["s1", "s2", "s4", "s6"]
            # The pause note is in the list table (docs/schedules.md says it is).
            table = _schedules_table((await n.schedules.list_schedules())["schedules"])
            assert "REASON" in table.splitlines()[0]
            assert "note 4" in table

    run(main())


# ------------------------------------------------------------ manual triggers


def test_a_triggered_run_is_linked_to_its_schedule_but_never_an_occurrence(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        async with node(tmp_path, MONDAY + timedelta(seconds=30)) as n:
            await create(n, "report")  # overlap="skip"
            manual = await n.schedules.trigger_schedule(schedule_id="report")
            assert manual["status"] == "interrupted"  # unfinished, yet it blocks nothing
            assert manual["trigger"] == {
                "kind": "manual",
                "schedule_id": "report",
                "occurrence": None,
            }
            assert await n.statuses("report") == []
            assert await n.tick(at(MONDAY, 1)) == 1
            [(_, status)] = await n.statuses("report")
            assert status == "interrupted"  # admitted: the manual run did not count
            runs = (await n.server.api.list_runs(schedule_id="report"))["runs"]
            assert [(r["run_id"], r["trigger"]["kind"]) for r in runs] == [
                (manual["run_id"], "manual"),
                ("run-000002", "schedule"),
            ]
            assert n.service.unfinished_runs("report") == 1  # the scheduled one only
            # A restart rebuilds overlap from the store: still only the scheduled run.
            await n.restart_service()
            assert n.service.unfinished_runs("report") == 1

    run(main())


# ------------------------------------------------- per-schedule misfire allowance


def test_a_schedule_s_own_misfire_allowance_overrides_the_server_s(tmp_path: Path) -> None:
    async def main() -> None:
        config = SchedulerServiceConfig(misfire_lateness_s=60.0)
        async with node(tmp_path, MONDAY + timedelta(seconds=30), config) as n:
            await create(n, "default")
            await create(n, "patient", misfire_lateness_s=900)
            strict = await create(n, "strict", misfire_lateness_s=1)
            assert strict["misfire_lateness_s"] == 1.0
            # 01:00 ticked 5 s late: within 60 s and 900 s, past 1 s.
            await n.tick(at(MONDAY, 1, seconds=5))
            assert (await n.statuses("default"))[0][1] == "interrupted"
            assert (await n.statuses("patient"))[0][1] == "interrupted"
            assert (await n.statuses("strict"))[0][1] == "skipped-misfire"
            # 02:00 ticked ten minutes late: only the patient one still admits it
            # (overlap=skip would skip it: each schedule's first run is unfinished,
            # so the patient one is allowed to run in parallel).
            await n.schedules.update_schedule(
                schedule_id="patient", expected_revision=1, overlap="parallel", max_active_runs=3
            )
            await n.tick(at(MONDAY, 2, seconds=600))
            assert (await n.statuses("default"))[-1][1] == "skipped-misfire"
            assert (await n.statuses("patient"))[-1][1] == "interrupted"
            detail = await n.schedules.list_schedule_occurrences(schedule_id="strict")
            assert "allowance is 1 s" in detail["occurrences"][-1]["detail"]
            # An update changes it; the table shows it.
            got = await n.schedules.update_schedule(
                schedule_id="strict", expected_revision=1, misfire_lateness_s=3600
            )
            assert got["misfire_lateness_s"] == 3600.0
            assert "allowance 3600 s" in _schedule_text(got)
            default = await n.schedules.get_schedule(schedule_id="default")
            assert "allowance server default" in _schedule_text(default)

    run(main())


@pytest.mark.parametrize("bad", [-1, 7 * 24 * 3600 + 1, float("nan"), True, "60"])
def test_a_misfire_allowance_out_of_bounds_is_refused(tmp_path: Path, bad: Any) -> None:
    async def main() -> None:
        async with node(tmp_path, MONDAY + timedelta(seconds=30)) as n:
            with pytest.raises(InvalidArgument) as raised:
                await create(n, "bad", misfire_lateness_s=bad)
            assert raised.value.details["field"] == "misfire_lateness_s"
            await create(n, "good")
            with pytest.raises(InvalidArgument):
                await n.schedules.update_schedule(
                    schedule_id="good", expected_revision=1, misfire_lateness_s=bad
                )
            assert (await n.schedules.get_schedule(schedule_id="good"))["revision"] == 1

    run(main())


# ----------------------------------------------------------------------- DST


def test_a_0230_berlin_daily_schedule_fires_twice_on_the_autumn_fold(tmp_path: Path) -> None:
    """2026-10-25: 03:00 CEST falls back to 02:00 CET, so 02:30 happens twice."""

    async def main() -> None:
        start = datetime(2026, 10, 24, 12, tzinfo=UTC)
        async with node(tmp_path, start) as n:
            await create(n, "nightly", trigger=BERLIN_0230, overlap="parallel", max_active_runs=5)
            preview = await n.schedules.preview_schedule(schedule_id="nightly", count=3)
            assert [(p["instant"], p["local"]) for p in preview] == [
                ("2026-10-25T00:30:00+00:00", "2026-10-25T02:30:00+02:00"),
                ("2026-10-25T01:30:00+00:00", "2026-10-25T02:30:00+01:00"),
                ("2026-10-26T01:30:00+00:00", "2026-10-26T02:30:00+01:00"),
            ]
            for instant in preview:
                await n.tick(instant["instant_s"] + 5)
            assert await n.statuses("nightly") == [
                ("2026-10-25T00:30:00+00:00", "interrupted"),
                ("2026-10-25T01:30:00+00:00", "interrupted"),
                ("2026-10-26T01:30:00+00:00", "interrupted"),
            ]

    run(main())


def test_a_0230_berlin_daily_schedule_fires_at_0300_in_the_spring_gap(tmp_path: Path) -> None:
    """2026-03-29: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist that day."""

    async def main() -> None:
        start = datetime(2026, 3, 28, 12, tzinfo=UTC)
        async with node(tmp_path, start) as n:
            await create(n, "nightly", trigger=BERLIN_0230, overlap="parallel", max_active_runs=5)
            preview = await n.schedules.preview_schedule(schedule_id="nightly", count=2)
            assert [(p["instant"], p["local"]) for p in preview] == [
                ("2026-03-29T01:00:00+00:00", "2026-03-29T03:00:00+02:00"),
                ("2026-03-30T00:30:00+00:00", "2026-03-30T02:30:00+02:00"),
            ]
            for instant in preview:
                await n.tick(instant["instant_s"] + 5)
            assert await n.statuses("nightly") == [
                ("2026-03-29T01:00:00+00:00", "interrupted"),
                ("2026-03-30T00:30:00+00:00", "interrupted"),
            ]

    run(main())


# ------------------------------------------------------------------- blocked


def test_a_schedule_blocked_by_a_corrupt_run_says_why_in_get_and_list(tmp_path: Path) -> None:
    async def main() -> None:
        async with node(tmp_path, MONDAY + timedelta(seconds=30)) as n:
            await create(n, "report")
            await create(n, "other")
            assert await n.tick(at(MONDAY, 1)) == 2
            [(_, _)] = await n.statuses("report")
            store = n.service.api.store
            runs = (await n.server.api.list_runs(schedule_id="report"))["runs"]
            row = await store.get_run(runs[0]["run_id"])
            assert row is not None
            await store.update_run(
                msgspec.structs.replace(row, body=b"{not json", revision=row.revision + 1),
                expected_revision=row.revision,
            )
            await n.restart_service()
            assert set(n.service.blocked) == {"report"}
            got = await n.schedules.get_schedule(schedule_id="report")
            assert got["status"] == "blocked"
            assert got["next_instant"] is None
            assert runs[0]["run_id"] in got["blocked"]
            listed = {
                v["schedule_id"]: v for v in (await n.schedules.list_schedules())["schedules"]
            }
            assert listed["report"]["status"] == "blocked"
            assert listed["report"]["blocked"] == got["blocked"]
            assert listed["other"]["status"] == "active"
            blocked = await n.schedules.list_schedules(status="blocked")
            assert [v["schedule_id"] for v in blocked["schedules"]] == ["report"]
            # Nothing is admitted for it; the CLI shows the reason.
            assert await n.tick(at(MONDAY, 2)) == 1  # "other" only (skipped-overlap)
            assert len(await n.statuses("report")) == 1
            assert got["blocked"] in _schedules_table(list(listed.values()))
            assert "BLOCKED" in _schedule_text(got)

    run(main())
