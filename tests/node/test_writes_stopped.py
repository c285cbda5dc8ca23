"""A node whose store stops taking writes looks stopped, shows nothing it did not
store, and comes back by itself (issue 13, item 3), on every backend.

The failures are real refusals by the database itself, not a fake store: a
trigger installed from a side connection and dropped again. Only the backoff and
deadline tests, which need a store that fails exactly as long as they say, wrap
a real store. Time is
a :class:`~wf.testing.clock.VirtualClock` except in the run-engine test, whose
workers run in real time; every wait on a condition is bounded.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, cast

import aiohttp
import psycopg
import pytest
from _node_locations import Location
from psycopg import sql

from wf.activities import BUILTIN_ACTIVITIES
from wf.errors import NotFound, StoreUnavailable
from wf.node import RECOVERY_BACKOFF_INITIAL_S, SchedulerNode
from wf.scheduler import commands as cmd
from wf.scheduler.model import Activity, ActivityState, WorkerInfo
from wf.scheduler.outputs import LeaseGranted, Record
from wf.schedules import SchedulerServiceConfig, build_scheduler_service
from wf.server.app import WfServer
from wf.server.config import ServerConfig, ServerSection, StoreConfig
from wf.server.local import LocalStaticServer
from wf.server.rpc import ANONYMOUS_ADMIN
from wf.store.protocol import Store
from wf.testing.clock import VirtualClock

WAIT_MAX_S = 20.0
"""Bound on any wait for a condition (real time)."""
TRIGGER = "wf_test_refuse"


# ------------------------------------------------------------------- helpers


def store_config(location: Location, **kw: Any) -> StoreConfig:
    if location.dsn is not None:
        return StoreConfig(postgres_dsn=location.dsn, postgres_schema=location.schema, **kw)
    return StoreConfig(root=str(location.store_root), **kw)


def server_config(location: Location, **kw: Any) -> ServerConfig:
    return ServerConfig(
        server=ServerSection(host="127.0.0.1", port=0, store=store_config(location, **kw))
    )


async def refuse(
    location: Location, *, like: str, table: str = "activities", column: str = "activity_id"
) -> None:
    """Make the database refuse inserts into ``table`` whose ``column`` is LIKE ``like``."""
    if location.store_root is not None:
        with sqlite3.connect(location.store_root / "scheduler.db") as conn:
            conn.execute(
                f"CREATE TRIGGER {TRIGGER} BEFORE INSERT ON {table} "
                f"WHEN NEW.{column} LIKE '{like}' "
                "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
            )
        return
    assert location.dsn is not None
    schema = sql.Identifier(location.schema)
    async with await psycopg.AsyncConnection.connect(location.dsn, autocommit=True) as conn:
        await conn.execute(
            sql.SQL(
                "CREATE FUNCTION {}.wf_test_refuse() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$"
            ).format(schema)
        )
        await conn.execute(
            sql.SQL(
                "CREATE TRIGGER wf_test_refuse BEFORE INSERT ON {}.{} FOR EACH ROW "
                "WHEN (NEW.{} LIKE {}) EXECUTE FUNCTION {}.wf_test_refuse()"
            ).format(
                schema,
                sql.Identifier(table),
                sql.Identifier(column),
                sql.Literal(like),
                schema,
            )
        )


async def allow(location: Location) -> None:
    """Undo :func:`refuse`."""
    if location.store_root is not None:
        with sqlite3.connect(location.store_root / "scheduler.db") as conn:
            conn.execute(f"DROP TRIGGER {TRIGGER}")
        return
    assert location.dsn is not None
    async with await psycopg.AsyncConnection.connect(location.dsn, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("DROP FUNCTION {}.wf_test_refuse() CASCADE").format(
                sql.Identifier(location.schema)
            )
        )


async def until(predicate: Callable[[], bool], what: str) -> None:
    """Yield to the loop until ``predicate`` holds (bounded)."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + WAIT_MAX_S
    while not predicate():
        assert loop.time() < give_up, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def actions(caplog: pytest.LogCaptureFixture, action: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "action", None) == action]


def act(activity_id: str) -> Activity:
    return Activity(activity_id=activity_id, activity_type="t")


async def get_json(session: aiohttp.ClientSession, url: str) -> tuple[int, dict[str, Any]]:
    async with session.get(url) as response:
        return response.status, await response.json()


# --------------------------------------------------------------------- tests


def test_a_failed_commit_stops_writes_visibly_and_the_node_recovers_by_itself(
    location: Location, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="wf.node")

    async def main() -> None:
        clock = VirtualClock()
        server = WfServer(server_config(location), clock=clock)
        await server.start()
        api = server.scheduler
        base = f"http://127.0.0.1:{server.port}"
        try:
            async with aiohttp.ClientSession() as http:
                assert await get_json(http, f"{base}/readyz") == (
                    200,
                    {
                        "status": "ready",
                        "ready": True,
                        "reason": "ready",
                        "cause": None,
                        "stopped_for_s": None,
                        "recovery_attempts": 0,
                        "role": "active",
                        "node_id": server.cluster.node_id,
                        "epoch": server.cluster.epoch,
                    },
                )
                info = WorkerInfo(worker_id="w1", max_concurrency=4, heartbeat_interval_s=3600)
                await api.register_worker(info, ANONYMOUS_ADMIN)
                await refuse(location, like="doomed%")

                with pytest.raises(StoreUnavailable) as failed:
                    await api.submit_activities([act("doomed")], ANONYMOUS_ADMIN)
                # The core took it before the commit failed: that is what must not show.
                assert "doomed" in server.node.core.activities
                stopped = actions(caplog, "node.writes_stopped")
                assert len(stopped) == 1
                assert stopped[0].levelno == logging.ERROR
                assert "refused by the test" in stopped[0].getMessage()

                # Every later command and every read of the core is refused, typed,
                # and says the node recovers by itself (so a retry is worth it).
                for refused in (
                    api.submit_activities([act("other")], ANONYMOUS_ADMIN),
                    api.get_activity("doomed", ANONYMOUS_ADMIN),
                    api.list_workers(ANONYMOUS_ADMIN),
                    api.queue_stats(ANONYMOUS_ADMIN),
                ):
                    with pytest.raises(StoreUnavailable, match="recovering by itself") as later:
                        await refused
                    wire = later.value.to_dict()
                    assert wire["retryable"] is True
                    assert wire["details"]["cause"] == failed.value.code
                status, body = await get_json(http, f"{base}/readyz")
                assert (status, body["status"], body["reason"]) == (
                    503,
                    "unavailable",
                    "writes_stopped",
                )
                assert body["cause"] == "store_unavailable"
                assert "refused" not in str(body)  # codes only: no message leaves the log
                assert (await get_json(http, f"{base}/healthz"))[0] == 200
                assert len(actions(caplog, "node.writes_stopped")) == 1  # logged once

                # The store takes writes again; nobody calls restart().
                await allow(location)
                clock.advance(RECOVERY_BACKOFF_INITIAL_S)
                await until(lambda: not server.node.writes_stopped, "the node to reload")
                status, body = await get_json(http, f"{base}/readyz")
                assert (status, body["reason"]) == (200, "ready")
                assert len(actions(caplog, "node.writes_resumed")) == 1

                # Never stored, so never shown: the id is free; a new submission completes.
                with pytest.raises(NotFound):
                    await api.get_activity("doomed", ANONYMOUS_ADMIN)
                await api.submit_activities([act("fresh")], ANONYMOUS_ADMIN)
                polled = await api.poll("w1", 1, 0.0, ANONYMOUS_ADMIN)
                [grant] = cast(list[LeaseGranted], polled.leases)
                assert grant.lease.activity_id == "fresh"
                await api.start_activity("fresh", grant.lease.token, ANONYMOUS_ADMIN)
                await api.complete_activity("fresh", grant.lease.token, b'"ok"', ANONYMOUS_ADMIN)
                view = await api.get_activity("fresh", ANONYMOUS_ADMIN)
                assert view.finished_state is ActivityState.COMPLETED
                workers = (await api.list_workers(ANONYMOUS_ADMIN)).workers
                assert [w.info.worker_id for w in workers] == ["w1"]
        finally:
            await server.stop()

    asyncio.run(main())


class FlakyStore:
    """A real store that refuses every write (and the reload's) while ``down``."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.down = False
        self.loads = 0

    async def append(self, records: Sequence[Record]) -> None:
        if self.down:
            raise OSError(28, "No space left on device")
        await self.inner.append(records)

    async def acquire_ownership(self, owner: Any) -> None:
        if self.down:
            raise OSError(28, "No space left on device")
        await self.inner.acquire_ownership(owner)

    async def load(self, **kw: Any) -> Any:
        self.loads += 1
        return await self.inner.load(**kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def stop_writes(node: SchedulerNode, store: FlakyStore) -> None:
    store.down = True
    with pytest.raises(StoreUnavailable):
        await node.execute(lambda t: cmd.Submit(now=t, activities=(act("lost"),)))
    assert node.writes_stopped


def test_recovery_backs_off_exponentially_while_the_store_refuses(
    location: Location, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="wf.node")

    async def main() -> None:
        clock = VirtualClock()
        store = FlakyStore(location.make())
        node = SchedulerNode(
            cast(Store, store), clock=clock, recovery_deadline_s=60.0, recovery_backoff_max_s=1.0
        )
        await node.start(background=True)
        try:
            await stop_writes(node, store)

            def failures() -> int:
                return len(actions(caplog, "node.recovery_failed"))

            # Attempt n comes 0.1 * 2**(n-1) s after the one before, capped at 1 s.
            for n, pause in enumerate([0.1, 0.2, 0.4, 0.8, 1.0, 1.0], start=1):
                clock.advance(pause - 0.01)
                await asyncio.sleep(0.05)
                assert failures() == n - 1, f"attempt {n} came early"
                clock.advance(0.01 + 1e-6)
                await until(lambda: failures() >= n, f"attempt {n}")  # noqa: B023
                assert failures() == n
                assert node.readiness().recovery_attempts == n
                assert node.readiness().reason in ("writes_stopped", "recovering")
            store.down = False
            clock.advance(1.0)
            await until(lambda: not node.writes_stopped, "the reload")
            assert node.readiness().ready
            # Writes work again and, committed, reset the backoff for a next time.
            await node.execute(lambda t: cmd.Submit(now=t, activities=(act("after"),)))
            await stop_writes(node, store)
            clock.advance(RECOVERY_BACKOFF_INITIAL_S - 0.01)
            await asyncio.sleep(0.05)
            assert failures() == 6
            clock.advance(0.01 + 1e-6)
            await until(lambda: failures() == 7, "a prompt first attempt")
            assert not node.unrecoverable.is_set()
        finally:
            store.down = False
            await node.stop()

    asyncio.run(main())


def test_a_node_that_cannot_reload_by_the_deadline_gives_up(
    location: Location, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="wf.node")

    async def main() -> None:
        clock = VirtualClock()
        store = FlakyStore(location.make())
        node = SchedulerNode(
            cast(Store, store), clock=clock, recovery_deadline_s=5.0, recovery_backoff_max_s=1.0
        )
        await node.start(background=True)
        try:
            await stop_writes(node, store)
            for _ in range(8):  # 0.1 + 0.2 + 0.4 + 0.8 + 1 + 1 + 1 = 4.5 s: still trying
                clock.advance(0.5)
                await asyncio.sleep(0.02)
            assert not node.unrecoverable.is_set()
            clock.advance(1.0)
            await until(node.unrecoverable.is_set, "giving up")
            gave_up = actions(caplog, "node.recovery_gave_up")
            assert len(gave_up) == 1
            assert gave_up[0].levelno == logging.ERROR
            assert node.readiness().reason == "unrecoverable"
            assert node.writes_stopped
        finally:
            store.down = False
            await node.stop()

    asyncio.run(main())


TWO_STEPS: dict[str, Any] = {
    "nodes": [
        {"kind": "activity", "id": "first", "activity_type": "echo", "args": {"v": 1}},
        {
            "kind": "activity",
            "id": "second",
            "activity_type": "echo",
            "needs": ["first"],
            "args": {"v": {"$node": "first", "path": "v"}},
        },
    ],
    "output": {"result": {"$node": "second", "path": "v"}},
}


def test_the_run_engine_resumes_after_writes_resume(location: Location) -> None:
    async def main() -> None:
        config = server_config(location, recovery_backoff_max_s=0.2)
        local = LocalStaticServer(config, BUILTIN_ACTIVITIES, workers=1, max_concurrency=2)
        async with local:
            await local.api.create_artifact_from_plan("two", 1, TWO_STEPS)
            saved = await local.api.save_deployment({"artifact_id": "two", "artifact_version": 1})
            # The engine's own write fails: submitting the second node, as it applies
            # the first one's completion.
            await refuse(location, like="%.second")
            run = await local.api.start_run(saved.deployment_id, {})
            node = local.server.node
            await until(lambda: node.writes_stopped, "the second node's submission to fail")
            await asyncio.sleep(0.5)  # several reload-and-refuse rounds
            engine_task = local.server.engine._task
            assert engine_task is not None
            assert not engine_task.done()  # it waits for writes, it did not return
            await allow(location)

            async def status() -> str:
                view = await local.api.inspect_run(run["run_id"])
                return str(view["status"])

            loop = asyncio.get_running_loop()
            give_up = loop.time() + WAIT_MAX_S
            while (current := await status()) != "completed":
                assert loop.time() < give_up, f"the run stayed {current}"
                await asyncio.sleep(0.05)
            view = await local.api.inspect_run(run["run_id"])
            assert view["output"] == {"result": 1}

    asyncio.run(main())


ASK_PLAN: dict[str, Any] = {
    "nodes": [{"kind": "interrupt", "id": "ask", "prompt": "Go?"}],
    "output": {"answer": {"$node": "ask"}},
}


def test_a_schedule_whose_admission_failed_is_admitted_once_the_store_takes_writes(
    location: Location,
) -> None:
    async def main() -> None:
        clock = VirtualClock(1_767_571_200.0 + 30)  # Monday 2026-01-05 00:00:30 UTC
        config = server_config(location)
        local = LocalStaticServer(
            config, [], workers=0, max_concurrency=1, schedules=True, clock=clock
        )
        await local.start()
        await local.server.engine.stop()  # only the service matters here
        service = build_scheduler_service(local, SchedulerServiceConfig(), clock=clock)
        await service.start(background=False)
        try:
            await local.api.create_artifact_from_plan("ask", 1, ASK_PLAN)
            await local.api.save_deployment({"artifact_id": "ask", "artifact_version": 1})
            await local.api.schedules.create_schedule(
                schedule_id="hourly",
                deployment_id="ask.default",
                trigger={"kind": "cron", "expression": "0 * * * *", "timezone": "UTC"},
            )
            due = 1_767_571_200.0 + 3600 + 5  # 01:00:05
            await refuse(location, like="%", table="occurrences", column="schedule_id")
            clock.advance_to(due)
            with pytest.raises(StoreUnavailable):
                await service.tick(due)
            await allow(location)
            # The next pass admits the 01:00 occurrence: the failure did not drop it.
            assert await service.tick(due + 1) == 1
            page = await local.api.schedules.list_schedule_occurrences(schedule_id="hourly")
            [admitted] = [o for o in page["occurrences"] if o["status"] != "pending"]
            assert admitted["instant"].startswith("2026-01-05T01:00:00")
            assert admitted["run_id"]  # its run was admitted (and waits at its interrupt)
        finally:
            await service.stop()
            await local.stop()

    asyncio.run(main())
