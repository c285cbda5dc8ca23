"""``workflow.schedules.trigger`` with a request id: a retry never starts a second run.

A manual trigger records no occurrence; its request id maps to the run the
trigger admitted, so a retried trigger (its answer lost, the server failed
over) answers that run. Local servers with schedules on SQLite and
PostgreSQL, on a virtual clock; no workers (the plan waits at an interrupt).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from _local_servers import ServerFactory, server_factory
from wf.client.app import App
from wf.errors import AlreadyExists, Conflict
from wf.server.local import LocalStaticServer, build_local_static_workflow_server
from wf.server.rpc import ANONYMOUS_ADMIN
from wf.testing.clock import VirtualClock

START = datetime(2026, 3, 27, 12, 0, 0, tzinfo=UTC)
HOURLY: dict[str, Any] = {"kind": "cron", "expression": "0 * * * *", "timezone": "UTC"}
PLAN: dict[str, Any] = {
    "nodes": [{"kind": "interrupt", "id": "ask", "prompt": "Go on?"}],
    "output": {"answer": {"$node": "ask"}},
}


@pytest.fixture(params=["sqlite", "postgres"])
def make_server(request: pytest.FixtureRequest, tmp_path: Path) -> ServerFactory:
    clock = VirtualClock(START.timestamp())
    return server_factory(request, tmp_path, schedules=True, clock=clock)


@asynccontextmanager
async def with_schedules(make_server: ServerFactory) -> AsyncIterator[LocalStaticServer]:
    """A started server with schedules ``a`` and ``b`` of deployment ``ask.default``."""
    async with make_server() as server:
        await server.api.create_artifact_from_plan("ask", 1, PLAN)
        await server.api.save_deployment({"artifact_id": "ask", "artifact_version": 1})
        for schedule_id in ("a", "b"):
            await server.api.schedules.create_schedule(
                schedule_id=schedule_id, deployment_id="ask.default", trigger=HOURLY
            )
        yield server


async def trigger(server: LocalStaticServer, schedule_id: str, request_id: str) -> dict[str, Any]:
    api = server.api.schedules_api
    assert api is not None
    return await api.trigger_schedule(schedule_id, caller=ANONYMOUS_ADMIN, request_id=request_id)


async def run_ids(server: LocalStaticServer) -> list[str]:
    return [r["run_id"] for r in (await server.api.list_runs())["runs"]]


def test_a_retried_trigger_answers_the_run_it_admitted_and_starts_nothing(
    make_server: ServerFactory,
) -> None:
    async def main() -> None:
        async with with_schedules(make_server) as server:
            first = await trigger(server, "a", "t-1")
            again = await trigger(server, "a", "t-1")
            assert again == first
            assert first["triggered_from"] == "a"
            assert await run_ids(server) == [first["run_id"]]
            listed = await server.api.schedules.list_schedule_occurrences("a")
            assert listed["occurrences"] == []  # a manual trigger is no occurrence

    asyncio.run(main())


def test_a_retried_trigger_answers_its_run_even_once_the_schedule_is_deleted(
    make_server: ServerFactory,
) -> None:
    async def main() -> None:
        async with with_schedules(make_server) as server:
            first = await trigger(server, "a", "t-1")
            await server.api.schedules.delete_schedule("a")
            again = await trigger(server, "a", "t-1")
            assert again["run_id"] == first["run_id"]
            with pytest.raises(Conflict):  # a new request on a deleted schedule
                await trigger(server, "a", "t-2")

    asyncio.run(main())


def test_the_same_request_id_on_another_schedule_or_for_a_start_is_already_exists(
    make_server: ServerFactory,
) -> None:
    async def main() -> None:
        async with with_schedules(make_server) as server:
            first = await trigger(server, "a", "t-1")
            with pytest.raises(AlreadyExists) as other_schedule:
                await trigger(server, "b", "t-1")
            assert other_schedule.value.details == {"request_id": "t-1", "run_id": first["run_id"]}
            with pytest.raises(AlreadyExists):
                await server.api.workflow.start_run(
                    "ask.default", None, caller=ANONYMOUS_ADMIN, request_id="t-1"
                )
            assert await run_ids(server) == [first["run_id"]]

    asyncio.run(main())


def test_concurrent_triggers_with_one_request_id_admit_one_run(make_server: ServerFactory) -> None:
    async def main() -> None:
        async with with_schedules(make_server) as server:
            answers = await asyncio.gather(*(trigger(server, "a", "t-1") for _ in range(4)))
            assert len({a["run_id"] for a in answers}) == 1
            assert await run_ids(server) == [answers[0]["run_id"]]

    asyncio.run(main())


def test_the_wire_trigger_takes_the_request_id(tmp_path: Path) -> None:
    async def main() -> None:
        clock = VirtualClock(START.timestamp())
        server = build_local_static_workflow_server(
            tmp_path / "s", activities=[], schedules=True, clock=clock
        )
        async with server:
            await server.api.create_artifact_from_plan("ask", 1, PLAN)
            await server.api.save_deployment({"artifact_id": "ask", "artifact_version": 1})
            await server.api.schedules.create_schedule(
                schedule_id="a", deployment_id="ask.default", trigger=HOURLY
            )
            async with App(server.url) as app:
                first = await app._call("trigger_schedule", schedule_id="a", request_id="w")
                again = await app._call("trigger_schedule", schedule_id="a", request_id="w")
            assert again == first
            assert await run_ids(server) == [first["run_id"]]

    asyncio.run(main())
