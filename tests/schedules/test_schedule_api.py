"""The schedule administration surface (``server.api.schedules``), on SQLite and PostgreSQL.

Each test starts a local server built with ``schedules=True`` on one store
backend and a virtual clock, without in-process workers: the plans here are
made of interrupt nodes, so a run never needs a worker and nothing depends on
real time. No admission service runs: this file is about the definitions
(create, get, list, update, pause, resume, delete, preview, trigger) and what
a refused call leaves behind (nothing).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from _local_servers import ServerFactory, server_factory
from wf.errors import (
    AlreadyExists,
    Conflict,
    InvalidArgument,
    InvalidCronExpression,
    InvalidTimezone,
    NaiveDatetime,
    NotFound,
    WfError,
)
from wf.server.local import LocalSchedules, LocalStaticServer
from wf.testing.clock import VirtualClock

START = datetime(2026, 3, 27, 12, 0, 0, tzinfo=UTC)
"""The virtual clock's start: a Friday, two days before Europe's spring DST change."""
HOUR = timedelta(hours=1)

GREETING_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"greeting": {"type": "string"}},
    "required": ["greeting"],
    "additionalProperties": False,
}
GREET_PLAN: dict[str, Any] = {
    "input_schema": GREETING_SCHEMA,
    "nodes": [{"kind": "interrupt", "id": "ask", "prompt": "Send {greeting}?"}],
    "output": {"answer": {"$node": "ask"}},
}
"""A run of it is interrupted as soon as it begins (no worker involved)."""

HOURLY: dict[str, Any] = {"kind": "cron", "expression": "0 * * * *", "timezone": "UTC"}


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(START)


@pytest.fixture(params=["sqlite", "postgres"])
def make_server(
    request: pytest.FixtureRequest, tmp_path: Path, clock: VirtualClock
) -> ServerFactory:
    """Builds (unstarted) local servers on this test's store and virtual clock."""
    return server_factory(request, tmp_path, schedules=True, clock=clock)


@asynccontextmanager
async def deployed(make_server: ServerFactory) -> AsyncIterator[LocalStaticServer]:
    """A started server with ``greet.default`` (default greeting "hello") and
    ``greet.bare`` (no default: a schedule must supply the greeting)."""
    async with make_server() as server:
        await server.api.create_artifact_from_plan("greet", 1, GREET_PLAN)
        await server.api.save_deployment(
            {"artifact_id": "greet", "artifact_version": 1, "default_inputs": {"greeting": "hello"}}
        )
        await server.api.save_deployment(
            {"artifact_id": "greet", "artifact_version": 1, "name": "bare"}
        )
        yield server


async def create(
    schedules: LocalSchedules, schedule_id: str = "hourly", **options: Any
) -> dict[str, Any]:
    options.setdefault("deployment_id", "greet.default")
    options.setdefault("trigger", HOURLY)
    return await schedules.create_schedule(schedule_id=schedule_id, **options)


def iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat()


# -------------------------------------------------------------------- create


def test_create_returns_the_full_definition(make_server: ServerFactory) -> None:
    async def main() -> None:
        async with deployed(make_server) as server:
            schedules = server.api.schedules
            created = await create(
                schedules,
                trigger={
                    "kind": "cron",
                    "expression": "30 9 * * mon-fri",
                    "timezone": "Asia/Tokyo",
                },
                inputs={"greeting": "ohayo"},
                misfire="latest",
                overlap="parallel",
                max_active_runs=2,
                max_steps=5,
                note="weekday mornings",
            )
            now = START.timestamp()
            assert created["schedule_id"] == "hourly"
            assert created["deployment_id"] == "greet.default"
            assert created["tenant"] == "default"
            assert created["trigger"] == {
                "kind": "cron",
                "expression": "30 9 * * mon-fri",
                "timezone": "Asia/Tokyo",
            }
            assert created["inputs"] == {"greeting": "ohayo"}
            assert (created["misfire"], created["overlap"], created["max_active_runs"]) == (
                "latest",
                "parallel",
                2,
            )
            assert created["max_steps"] == 5
            assert created["note"] == "weekday mornings"
            assert created["revision"] == 1
            assert created["status"] == "active"
            assert created["created_at"] == created["updated_at"] == now
            assert created["watermark"] == now  # creation never backfills
            assert created["candidate"] is None
            assert (created["skipped_overlap"], created["skipped_misfire"]) == (0, 0)
            # Fri 2026-03-27 12:00Z is 21:00 in Tokyo: next is Mon 09:30 JST = 00:30Z.
            assert created["next_instant"] == iso(datetime(2026, 3, 30, 0, 30, tzinfo=UTC))
            assert await schedules.get_schedule(schedule_id="hourly") == created
            assert (await schedules.list_schedules())["schedules"] == [created]

    asyncio.run(main())


def test_create_defaults(make_server: ServerFactory) -> None:
    async def main() -> None:
        async with deployed(make_server) as server:
            created = await create(
                server.api.schedules, trigger={"kind": "cron", "expression": "0 0 * * 7"}
            )
            assert created["trigger"]["timezone"] == "UTC"
            assert (created["overlap"], created["misfire"]) == ("skip", "skip")
            assert created["max_active_runs"] is None
            assert created["max_steps"] is None
            assert created["inputs"] == {}
            # Day-of-week 7 is Sunday: Sun 2026-03-29 00:00Z.
            assert created["next_instant"] == iso(datetime(2026, 3, 29, tzinfo=UTC))

    asyncio.run(main())


PAST = iso(START - timedelta(minutes=1))
FUTURE = iso(START + HOUR)
BAD_CREATES: list[tuple[str, dict[str, Any], type[WfError]]] = [
    ("id-upper", {"schedule_id": "Hourly"}, InvalidArgument),
    ("id-space", {"schedule_id": "my schedule"}, InvalidArgument),
    ("id-empty", {"schedule_id": ""}, InvalidArgument),
    ("id-leading-dash", {"schedule_id": "-x"}, InvalidArgument),
    ("id-too-long", {"schedule_id": "x" * 129}, InvalidArgument),
    (
        "cron-range",
        {"trigger": {"kind": "cron", "expression": "61 * * * *"}},
        InvalidCronExpression,
    ),
    ("cron-fields", {"trigger": {"kind": "cron", "expression": "* * * *"}}, InvalidCronExpression),
    ("cron-nickname", {"trigger": {"kind": "cron", "expression": "@daily"}}, InvalidCronExpression),
    (
        "zone",
        {"trigger": {"kind": "cron", "expression": "0 * * * *", "timezone": "Mars/Olympus"}},
        InvalidTimezone,
    ),
    ("naive", {"trigger": {"kind": "oneshot", "at": "2026-04-01T09:00:00"}}, NaiveDatetime),
    ("past", {"trigger": {"kind": "oneshot", "at": PAST}}, InvalidArgument),
    ("now", {"trigger": {"kind": "oneshot", "at": iso(START)}}, InvalidArgument),
    ("oneshot-garbage", {"trigger": {"kind": "oneshot", "at": "tomorrow"}}, InvalidArgument),
    ("trigger-kind", {"trigger": {"kind": "interval", "seconds": 5}}, InvalidArgument),
    ("deployment", {"deployment_id": "greet.nope"}, NotFound),
    ("parallel-no-max", {"overlap": "parallel"}, InvalidArgument),
    ("parallel-zero", {"overlap": "parallel", "max_active_runs": 0}, InvalidArgument),
    ("parallel-huge", {"overlap": "parallel", "max_active_runs": 10**18}, InvalidArgument),
    ("parallel-str", {"overlap": "parallel", "max_active_runs": "2"}, InvalidArgument),
    ("skip-with-max", {"max_active_runs": 2}, InvalidArgument),
    ("overlap-name", {"overlap": "queue"}, InvalidArgument),
    ("misfire-name", {"misfire": "all"}, InvalidArgument),
    ("max-steps", {"max_steps": 0}, InvalidArgument),
    ("inputs-type", {"inputs": {"greeting": 5}}, InvalidArgument),
    ("inputs-extra", {"inputs": {"greeting": "hi", "shout": True}}, InvalidArgument),
    ("inputs-missing", {"deployment_id": "greet.bare"}, InvalidArgument),
    ("inputs-not-object", {"inputs": ["hi"]}, InvalidArgument),
]


@pytest.mark.parametrize(
    ("changes", "error"),
    [pytest.param(changes, error, id=name) for name, changes, error in BAD_CREATES],
)
def test_create_refuses_and_stores_nothing(
    make_server: ServerFactory, changes: dict[str, Any], error: type[WfError]
) -> None:
    async def main() -> None:
        async with deployed(make_server) as server:
            schedules = server.api.schedules
            options = {"schedule_id": "refused", **changes}
            schedule_id = options.pop("schedule_id")
            with pytest.raises(error) as raised:
                await create(schedules, schedule_id, **options)
            assert type(raised.value) is error, raised.value
            assert (await schedules.list_schedules(include_deleted=True))["schedules"] == []
            if schedule_id:
                with pytest.raises(NotFound):
                    await schedules.get_schedule(schedule_id=schedule_id)
            # The id was not consumed by the refusal.
            if "schedule_id" not in changes:
                assert (await create(schedules, "refused"))["revision"] == 1

    asyncio.run(main())


def test_create_with_schedule_inputs_completing_the_deployment_defaults(
    make_server: ServerFactory,
) -> None:
    async def main() -> None:
        async with deployed(make_server) as server:
            created = await create(
                server.api.schedules, deployment_id="greet.bare", inputs={"greeting": "hi"}
            )
            assert created["inputs"] == {"greeting": "hi"}

    asyncio.run(main())


def test_duplicate_id_is_already_exists_also_after_delete(make_server: ServerFactory) -> None:
    async def main() -> None:
        async with deployed(make_server) as server:
            schedules = server.api.schedules
            first = await create(schedules, note="first")
            with pytest.raises(AlreadyExists):
                await create(schedules, note="second")
            assert await schedules.get_schedule(schedule_id="hourly") == first
            await schedules.delete_schedule(schedule_id="hourly")
            with pytest.raises(AlreadyExists):
                await create(schedules, note="third")
            kept = await schedules.get_schedule(schedule_id="hourly")
            assert kept["status"] == "deleted"
            assert kept["note"] == "first"

    asyncio.run(main())


# ------------------------------------------------------------------ get/list


def test_get_and_list(make_server: ServerFactory) -> None:
    async def main() -> None:
        async with deployed(make_server) as server:
            schedules = server.api.schedules
            with pytest.raises(NotFound):
                await schedules.get_schedule(schedule_id="hourly")
            assert (await schedules.list_schedules())["schedules"] == []
            b = await create(
                schedules, "b-daily", trigger={"kind": "cron", "expression": "0 6 * * *"}
            )
            a = await create(schedules, "a-hourly")
            c = await create(schedules, "c-once", trigger={"kind": "oneshot", "at": FUTURE})
            assert [s["schedule_id"] for s in (await schedules.list_schedules())["schedules"]] == [
                "a-hourly",
                "b-daily",
                "c-once",
            ]
            deleted = await schedules.delete_schedule(schedule_id="b-daily")
            assert (await schedules.list_schedules())["schedules"] == [a, c]
            everything = await schedules.list_schedules(include_deleted=True)
            assert everything["schedules"] == [a, deleted, c]
            got = await schedules.get_schedule(schedule_id="b-daily")
            assert got == deleted
            assert got["status"] == "deleted"
            assert got["trigger"] == b["trigger"]
            assert c["next_instant"] == FUTURE

    asyncio.run(main())


# -------------------------------------------------------------------- update


def test_update_changes_only_the_given_fields(
    make_server: ServerFactory, clock: VirtualClock
) -> None:
    async def main() -> None:
        async with deployed(make_server) as server:
            schedules = server.api.schedules
            created = await create(schedules, max_steps=5, note="v1", inputs={"greeting": "hi"})
            clock.advance(600)
            updated = await schedules.update_schedule(
                schedule_id="hourly", expected_revision=1, note="v2"
            )
            assert updated["note"] == "v2"
            assert updated["revision"] == 2
            assert updated["updated_at"] == START.timestamp() + 600
            assert updated["watermark"] == START.timestamp() + 600  # affects only the future
            unchanged = {"revision", "note", "updated_at", "watermark"}
            assert {k: v for k, v in updated.items() if k not in unchanged} == {
                k: v for k, v in created.items() if k not in unchanged
            }
            # None means unpatched, field by field: nothing changes, not even the revision.
            same = await schedules.update_schedule(
                schedule_id="hourly",
                expected_revision=2,
                deployment_id=None,
                trigger=None,
                inputs=None,
                overlap=None,
                max_active_runs=None,
                misfire=None,
                max_steps=None,
                note=None,
            )
            assert same == updated
            assert await schedules.get_schedule(schedule_id="hourly") == updated
            # A set max_steps cannot be cleared back to unset (004 limitation).
            assert same["max_steps"] == 5
            # Real changes, one call.
            changed = await schedules.update_schedule(
                schedule_id="hourly",
                expected_revision=2,
                trigger={"kind": "cron", "expression": "15 8 * * *", "timezone": "Europe/Berlin"},
                overlap="parallel",
                max_active_runs=3,
                misfire="latest",
                deployment_id="greet.bare",
                inputs={"greeting": "moin"},
                max_steps=7,
            )
            assert changed["revision"] == 3
            assert changed["trigger"]["timezone"] == "Europe/Berlin"
            assert (changed["overlap"], changed["max_active_runs"], changed["misfire"]) == (
                "parallel",
                3,
                "latest",
            )
            assert changed["deployment_id"] == "greet.bare"
            assert changed["inputs"] == {"greeting": "moin"}
            assert changed["max_steps"] == 7
            # Sat 2026-03-28 08:15 CET = 07:15Z.
            assert changed["next_instant"] == iso(datetime(2026, 3, 28, 7, 15, tzinfo=UTC))
            # Back to overlap=skip drops the parallel limit with it.
            back = await schedules.update_schedule(
                schedule_id="hourly", expected_revision=3, overlap="skip"
            )
            assert (back["overlap"], back["max_active_runs"]) == ("skip", None)
            assert await schedules.get_schedule(schedule_id="hourly") == back

    asyncio.run(main())


def test_update_requires_expected_revision_and_refuses_a_stale_one(
    make_server: ServerFactory,
) -> None:
    async def main() -> None:
        async with deployed(make_server) as server:
            schedules = server.api.schedules
            await create(schedules)
            await schedules.update_schedule(schedule_id="hourly", expected_revision=1, note="x")
            before = await schedules.get_schedule(schedule_id="hourly")
            with pytest.raises(TypeError):
                await schedules.update_schedule(schedule_id="hourly", note="y")  # type: ignore[call-arg]
            for stale in (0, 1, 3):
                with pytest.raises(Conflict) as raised:
                    await schedules.update_schedule(
                        schedule_id="hourly", expected_revision=stale, note="y"
                    )
                assert raised.value.details["current_revision"] == 2
            assert await schedules.get_schedule(schedule_id="hourly") == before
            with pytest.raises(NotFound):
                await schedules.update_schedule(schedule_id="nope", expected_revision=1, note="y")

    asyncio.run(main())


BAD_UPDATES: list[tuple[str, dict[str, Any], type[WfError]]] = [
    ("cron", {"trigger": {"kind": "cron", "expression": "0 25 * * *"}}, InvalidCronExpression),
    (
        "zone",
        {"trigger": {"kind": "cron", "expression": "0 * * * *", "timezone": "Europe/Atlantis"}},
        InvalidTimezone,
    ),
    ("naive", {"trigger": {"kind": "oneshot", "at": "2026-04-01T09:00:00"}}, NaiveDatetime),
    ("parallel-zero", {"overlap": "parallel", "max_active_runs": 0}, InvalidArgument),
    ("parallel-huge", {"overlap": "parallel", "max_active_runs": 10**18}, InvalidArgument),
    ("parallel-str", {"overlap": "parallel", "max_active_runs": "2"}, InvalidArgument),
    ("parallel-no-max", {"overlap": "parallel"}, InvalidArgument),
    ("max-on-skip", {"max_active_runs": 2}, InvalidArgument),
    ("overlap-name", {"overlap": "queue"}, InvalidArgument),
    ("misfire-name", {"misfire": "every"}, InvalidArgument),
    ("max-steps", {"max_steps": 0}, InvalidArgument),
    ("inputs", {"inputs": {"greeting": 1}}, InvalidArgument),
    ("inputs-missing", {"deployment_id": "greet.bare"}, InvalidArgument),
    ("deployment", {"deployment_id": "greet.gone"}, NotFound),
    ("note", {"note": "x" * 10_000}, InvalidArgument),
]


@pytest.mark.parametrize(
    ("changes", "error"),
    [pytest.param(changes, error, id=name) for name, changes, error in BAD_UPDATES],
)
def test_a_refused_update_leaves_definition_and_revision_untouched(
    make_server: ServerFactory, changes: dict[str, Any], error: type[WfError]
) -> None:
    async def main() -> None:
        async with deployed(make_server) as server:
            schedules = server.api.schedules
            before = await create(schedules, misfire="latest", note="keep")
            with pytest.raises(error) as raised:
                await schedules.update_schedule(
                    schedule_id="hourly", expected_revision=1, **changes
                )
            assert type(raised.value) is error, raised.value
            assert await schedules.get_schedule(schedule_id="hourly") == before
            # The revision was not consumed: the next good edit is based on 1.
            good = await schedules.update_schedule(
                schedule_id="hourly", expected_revision=1, note="edited"
            )
            assert good["revision"] == 2

    asyncio.run(main())


@pytest.mark.parametrize(
    "trigger",
    [
        {"kind": "cron", "expression": "0 * * * *", "every": 2},
        {"kind": "cron", "expression": "0 9 * * *", "timezon": "Europe/Berlin"},
        {"kind": "oneshot", "at": FUTURE, "timezone": "UTC"},
    ],
    ids=["cron-extra", "cron-misspelt-timezone", "oneshot-extra"],
)
def test_create_refuses_unknown_trigger_fields(
    make_server: ServerFactory, trigger: dict[str, Any]
) -> None:
    async def main() -> None:
        async with deployed(make_server) as server:
            schedules = server.api.schedules
            with pytest.raises(InvalidArgument):
                await create(schedules, trigger=trigger)
            assert (await schedules.list_schedules(include_deleted=True))["schedules"] == []

    asyncio.run(main())


def test_update_to_a_past_one_shot_is_refused(make_server: ServerFactory) -> None:
    async def main() -> None:
        async with deployed(make_server) as server:
            schedules = server.api.schedules
            before = await create(schedules, trigger={"kind": "oneshot", "at": FUTURE})
            with pytest.raises(InvalidArgument):
                await schedules.update_schedule(
                    schedule_id="hourly",
                    expected_revision=1,
                    trigger={"kind": "oneshot", "at": PAST},
                )
            assert await schedules.get_schedule(schedule_id="hourly") == before

    asyncio.run(main())


# --------------------------------------------------------------- pause/resume


def test_pause_and_resume_are_idempotent(make_server: ServerFactory, clock: VirtualClock) -> None:
    async def main() -> None:
        async with deployed(make_server) as server:
            schedules = server.api.schedules
            await create(schedules)
            clock.advance(60)
            paused = await schedules.pause_schedule(schedule_id="hourly", reason="maintenance")
            assert paused["status"] == "paused"
            assert paused["paused"] is True
            assert paused["pause_reason"] == "maintenance"
            assert paused["paused_at"] == START.timestamp() + 60
            assert paused["revision"] == 2
            assert paused["next_instant"] is None
            assert await schedules.get_schedule(schedule_id="hourly") == paused
            assert (await schedules.list_schedules())["schedules"] == [paused]
            again = await schedules.pause_schedule(schedule_id="hourly", reason="other")
            assert again == paused  # idempotent: nothing changes, not even the reason
            # Three and a half hours later: resume from the next future instant.
            clock.advance(3.5 * 3600)
            resumed = await schedules.resume_schedule(schedule_id="hourly")
            assert resumed["status"] == "active"
            assert (resumed["paused"], resumed["paused_at"], resumed["pause_reason"]) == (
                False,
                None,
                None,
            )
            assert resumed["revision"] == 3
            assert resumed["watermark"] == clock.now()  # the paused span is consumed
            assert resumed["next_instant"] == iso(START + 4 * HOUR)
            assert await schedules.resume_schedule(schedule_id="hourly") == resumed
            assert await schedules.get_schedule(schedule_id="hourly") == resumed

    asyncio.run(main())


def test_pause_without_reason_and_unknown_schedules(make_server: ServerFactory) -> None:
    async def main() -> None:
        async with deployed(make_server) as server:
            schedules = server.api.schedules
            await create(schedules)
            paused = await schedules.pause_schedule(schedule_id="hourly")
            assert paused["pause_reason"] is None
            assert paused["status"] == "paused"
            for call in (
                schedules.pause_schedule,
                schedules.resume_schedule,
                schedules.delete_schedule,
            ):
                with pytest.raises(NotFound):
                    await call(schedule_id="nope")
            await create(schedules, "other")
            with pytest.raises(InvalidArgument):
                await schedules.pause_schedule(schedule_id="other", reason="x" * 10_000)
            other = await schedules.get_schedule(schedule_id="other")
            assert (other["status"], other["revision"]) == ("active", 1)

    asyncio.run(main())


# -------------------------------------------------------------------- delete


def test_delete_is_soft_and_final(make_server: ServerFactory, clock: VirtualClock) -> None:
    async def main() -> None:
        async with deployed(make_server) as server:
            schedules = server.api.schedules
            await create(schedules)
            clock.advance(5)
            deleted = await schedules.delete_schedule(schedule_id="hourly")
            assert deleted["status"] == "deleted"
            assert deleted["deleted"] is True
            assert deleted["deleted_at"] == START.timestamp() + 5
            assert deleted["revision"] == 2
            assert deleted["next_instant"] is None
            assert await schedules.get_schedule(schedule_id="hourly") == deleted
            assert await schedules.delete_schedule(schedule_id="hourly") == deleted
            with pytest.raises(Conflict):
                await schedules.pause_schedule(schedule_id="hourly")
            with pytest.raises(Conflict):
                await schedules.resume_schedule(schedule_id="hourly")
            with pytest.raises(Conflict):
                await schedules.update_schedule(schedule_id="hourly", expected_revision=2, note="x")
            with pytest.raises(Conflict):
                await schedules.trigger_schedule(schedule_id="hourly")
            assert await schedules.get_schedule(schedule_id="hourly") == deleted
            page = await schedules.list_schedule_occurrences(schedule_id="hourly")
            assert page == {"occurrences": [], "next_cursor": None}

    asyncio.run(main())


def test_delete_a_paused_schedule(make_server: ServerFactory) -> None:
    async def main() -> None:
        async with deployed(make_server) as server:
            schedules = server.api.schedules
            await create(schedules)
            await schedules.pause_schedule(schedule_id="hourly", reason="r")
            deleted = await schedules.delete_schedule(schedule_id="hourly")
            assert deleted["status"] == "deleted"
            assert [s["schedule_id"] for s in (await schedules.list_schedules())["schedules"]] == []

    asyncio.run(main())


# ------------------------------------------------------------------- preview


def test_preview_returns_the_next_instants_with_local_wall_time(
    make_server: ServerFactory,
) -> None:
    async def main() -> None:
        async with deployed(make_server) as server:
            schedules = server.api.schedules
            await create(
                schedules,
                "berlin",
                trigger={"kind": "cron", "expression": "0 9 * * *", "timezone": "Europe/Berlin"},
            )
            preview = await schedules.preview_schedule(schedule_id="berlin", count=3)
            # 09:00 wall time every day, across the spring change on Sun 2026-03-29.
            assert [p["local"] for p in preview] == [
                "2026-03-28T09:00:00+01:00",
                "2026-03-29T09:00:00+02:00",
                "2026-03-30T09:00:00+02:00",
            ]
            assert [p["instant"] for p in preview] == [
                iso(datetime(2026, 3, 28, 8, tzinfo=UTC)),
                iso(datetime(2026, 3, 29, 7, tzinfo=UTC)),
                iso(datetime(2026, 3, 30, 7, tzinfo=UTC)),
            ]
            assert all(p["timezone"] == "Europe/Berlin" for p in preview)
            assert [p["instant_s"] for p in preview] == sorted(p["instant_s"] for p in preview)
            assert len(await schedules.preview_schedule(schedule_id="berlin")) == 5
            for bad in (0, 101):
                with pytest.raises(InvalidArgument):
                    await schedules.preview_schedule(schedule_id="berlin", count=bad)
            await create(schedules, "once", trigger={"kind": "oneshot", "at": FUTURE})
            once = await schedules.preview_schedule(schedule_id="once", count=10)
            assert [p["instant"] for p in once] == [FUTURE]
            # A preview changes nothing.
            assert (await schedules.get_schedule(schedule_id="berlin"))["revision"] == 1

    asyncio.run(main())


# ------------------------------------------------------------------- trigger


def test_trigger_schedule_starts_a_manual_run_without_an_occurrence(
    make_server: ServerFactory,
) -> None:
    async def main() -> None:
        async with deployed(make_server) as server:
            schedules = server.api.schedules
            await create(schedules, max_steps=3, inputs={"greeting": "manual hello"})
            view = await schedules.trigger_schedule(schedule_id="hourly")
            # Linked to its schedule, but manual: never an occurrence.
            assert view["trigger"] == {
                "kind": "manual",
                "schedule_id": "hourly",
                "occurrence": None,
            }
            assert view["triggered_from"] == "hourly"
            assert view["status"] == "interrupted"
            assert view["inputs"] == {"greeting": "manual hello"}  # the schedule's bindings
            assert view["max_steps"] == 3  # and its budget
            page = await schedules.list_schedule_occurrences(schedule_id="hourly")
            assert page == {"occurrences": [], "next_cursor": None}
            listed = (await server.api.list_runs(schedule_id="hourly"))["runs"]
            assert [r["run_id"] for r in listed] == [view["run_id"]]
            inspected = await server.api.inspect_run(view["run_id"])
            assert inspected["trigger"]["kind"] == "manual"
            got = await schedules.get_schedule(schedule_id="hourly")
            assert got["revision"] == 1  # the schedule is untouched
            # A paused schedule can still be triggered by hand.
            await schedules.pause_schedule(schedule_id="hourly")
            again = await schedules.trigger_schedule(schedule_id="hourly")
            assert again["run_id"] != view["run_id"]
            with pytest.raises(NotFound):
                await schedules.trigger_schedule(schedule_id="nope")

    asyncio.run(main())


# --------------------------------------------------------------- occurrences


def test_occurrence_listing_arguments(make_server: ServerFactory) -> None:
    async def main() -> None:
        async with deployed(make_server) as server:
            schedules = server.api.schedules
            await create(schedules)
            for limit in (0, 101, -1):
                with pytest.raises(InvalidArgument):
                    await schedules.list_schedule_occurrences(schedule_id="hourly", limit=limit)
            for cursor in ("garbage", "cnVuOjE"):
                with pytest.raises(InvalidArgument):
                    await schedules.list_schedule_occurrences(schedule_id="hourly", cursor=cursor)
            with pytest.raises(NotFound):
                await schedules.list_schedule_occurrences(schedule_id="nope")
            for limit in (1, 100):
                page = await schedules.list_schedule_occurrences(schedule_id="hourly", limit=limit)
                assert page == {"occurrences": [], "next_cursor": None}

    asyncio.run(main())
