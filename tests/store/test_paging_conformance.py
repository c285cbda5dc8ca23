"""Keyset page reads, against every backend (``store_factory``: sqlite, postgres).

Each listing the server pages (schedules, artifacts, deployments, an
activity's history) is walked page by page, resuming after the last key of
each page, and must give every stored row exactly once, in the order of the
backend's own unpaged read; filters run in the statement; bad page arguments
are refused as ``invalid_argument`` (never a store error, on PostgreSQL
neither); and on SQLite every page query reads through an index, with no
sort of the whole table (the structural reason a page costs ``limit`` rows).
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import pytest
from _store_backends import Backend

from wf.errors import InvalidArgument
from wf.scheduler import commands as cmd
from wf.scheduler.config import SchedulerConfig
from wf.scheduler.dispatcher import SchedulerCore
from wf.scheduler.model import Activity, RetryPolicy, WorkerInfo
from wf.scheduler.outputs import LeaseGranted
from wf.store import pages
from wf.store.protocol import ArtifactRow, DeploymentRow, ScheduleRow, Store
from wf.store.query import sql_of

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
R = TypeVar("R")
K = TypeVar("K")


def run(main: Callable[[], Coroutine[Any, Any, R]]) -> R:
    return asyncio.run(main())


async def opened(backend: Backend) -> Store:
    store = backend.make()
    await store.open()
    return store


async def walk(read: Callable[[K | None, int], Awaitable[list[R]]], key: Callable[[R], K],
               limit: int) -> list[R]:  # fmt: skip
    """Every row, page by page: each page resumes after the previous page's last key."""
    found: list[R] = []
    after: K | None = None
    for _ in range(10_000):
        page = await read(after, limit)
        assert len(page) <= limit
        found.extend(page)
        if len(page) < limit:
            return found
        after = key(page[-1])
    raise AssertionError("the walk did not end")


def schedule_row(schedule_id: str, tenant: str, status: str = "active") -> ScheduleRow:
    return ScheduleRow(
        schedule_id=schedule_id,
        tenant=tenant,
        deployment_id="hello.default",
        status=status,
        body=b"{}",
        revision=1,
        created_at=T0,
        updated_at=T0,
    )


def artifact_row(artifact_id: str, version: int) -> ArtifactRow:
    plan = f'{{"id":"{artifact_id}","v":{version}}}'.encode()
    return ArtifactRow(
        artifact_id=artifact_id,
        version=version,
        plan=plan,
        content_hash="sha256:" + hashlib.sha256(plan).hexdigest(),
        created_at=T0,
    )


async def seed_schedules(store: Store) -> None:
    """37 schedules of three tenants, every fifth one deleted (ids not in tenant order)."""
    for i in range(37):
        row = schedule_row(f"s{i:03d}", tenant=("t1", "t2", "t3")[i % 3])
        await store.put_schedule(row, expected_revision=0)
        if i % 5 == 0:
            deleted = ScheduleRow(**{**_fields(row), "status": "deleted", "revision": 2})
            await store.put_schedule(deleted, expected_revision=1)


def _fields(row: ScheduleRow) -> dict[str, Any]:
    return {f: getattr(row, f) for f in row.__struct_fields__}


@pytest.mark.parametrize("limit", [1, 4, 100])
def test_schedule_pages_walk_every_schedule_once_in_order(
    store_factory: Backend, limit: int
) -> None:
    async def main() -> None:
        store = await opened(store_factory)
        try:
            await seed_schedules(store)
            for include_deleted in (False, True):
                everything = await store.list_schedules(include_deleted=include_deleted)

                async def read(after: str | None, n: int, deleted: bool = include_deleted) -> Any:
                    return await store.schedules_page(
                        after=after or "", limit=n, include_deleted=deleted
                    )

                walked = await walk(read, lambda r: r.schedule_id, limit)
                assert walked == everything
                assert len(walked) == (37 if include_deleted else 37 - 8)
            # The tenant filter runs in the statement: only t1 and t3, still in order.
            only = {"t1", "t3"}

            async def scoped(after: str | None, n: int) -> Any:
                return await store.schedules_page(after=after or "", limit=n, tenants=sorted(only))

            walked = await walk(scoped, lambda r: r.schedule_id, limit)
            assert walked == [r for r in await store.list_schedules() if r.tenant in only]
            assert await store.schedules_page(tenants=[]) == []
        finally:
            await store.close()

    run(main)


def test_artifact_and_deployment_pages_walk_every_row_once_in_order(
    store_factory: Backend,
) -> None:
    async def main() -> None:
        store = await opened(store_factory)
        try:
            for artifact_id in ("beta", "alpha", "gamma"):
                for version in (3, 1, 2, 10):
                    await store.put_artifact(artifact_row(artifact_id, version))
            for i in (5, 1, 9, 3, 7, 2):
                row = DeploymentRow(
                    deployment_id=f"hello.d{i}", body=b"{}", revision=1, updated_at=T0
                )
                await store.put_deployment(row, expected_revision=0)
            for limit in (1, 3, 5):

                async def every(after: tuple[str, int] | None, n: int) -> Any:
                    return await store.artifacts_page(after=after, limit=n)

                walked = await walk(every, lambda r: (r.artifact_id, r.version), limit)
                assert walked == await store.list_artifacts()
                assert [(r.artifact_id, r.version) for r in walked][:5] == [
                    ("alpha", 1), ("alpha", 2), ("alpha", 3), ("alpha", 10), ("beta", 1),
                ]  # fmt: skip

                async def one(after: tuple[str, int] | None, n: int) -> Any:
                    return await store.artifacts_page(after=after, artifact_id="beta", limit=n)

                walked = await walk(one, lambda r: (r.artifact_id, r.version), limit)
                assert walked == await store.list_artifacts("beta")

                async def deployments(after: str | None, n: int) -> Any:
                    return await store.deployments_page(after=after or "", limit=n)

                walked = await walk(deployments, lambda r: r.deployment_id, limit)
                assert walked == await store.list_deployments()
                assert len(walked) == 6
        finally:
            await store.close()

    run(main)


async def long_history(store: Store, attempts: int) -> None:
    """Activity ``long`` fails ``attempts - 1`` times and then completes, each step
    appended to the store (a history of ``3 * attempts`` transitions and more)."""
    core = SchedulerCore(SchedulerConfig())
    now = T0

    async def do(command: Any) -> Any:
        out = core.handle(command)
        await store.append(out.records)
        return out

    info = WorkerInfo(worker_id="w1", max_concurrency=1, heartbeat_interval_s=3600.0)
    await do(cmd.RegisterWorker(now=now, info=info))
    retry = RetryPolicy(max_attempts=attempts, initial_backoff_s=1.0, jitter_fraction=0.0)
    await do(cmd.Submit(now=now, activities=(Activity(activity_id="long", activity_type="t",
                                                      retry=retry),)))  # fmt: skip
    await do(cmd.Submit(now=now, activities=(Activity(activity_id="other", activity_type="t"),)))
    for attempt in range(attempts):
        now += 1000.0
        await do(cmd.Tick(now=now))
        out = await do(cmd.Poll(now=now, worker_id="w1", max_items=1))
        await do(cmd.CancelPoll(now=now, worker_id="w1"))
        (lease,) = [d.lease for d in out.decisions if isinstance(d, LeaseGranted)]
        if lease.activity_id == "other":
            await do(cmd.Complete(now=now, activity_id="other", token=lease.token, result=b"1"))
            continue
        await do(cmd.StartActivity(now=now, activity_id="long", token=lease.token))
        if attempt < attempts - 1:
            await do(cmd.Fail(now=now, activity_id="long", token=lease.token,
                              error_type="Boom", message="again"))  # fmt: skip
        else:
            await do(cmd.Complete(now=now, activity_id="long", token=lease.token, result=b"2"))


def test_history_pages_walk_every_transition_once_in_order(store_factory: Backend) -> None:
    async def main() -> None:
        store = await opened(store_factory)
        try:
            await long_history(store, attempts=8)
            history = await store.history("long")
            assert len(history) > 20
            for limit in (1, 7, 100):

                async def read(after: int | None, n: int) -> Any:
                    return await store.history_page("long", after=after or 0, limit=n)

                walked = await walk(read, lambda p: p[0], limit)
                assert [t for _, t in walked] == history
                positions = [p for p, _ in walked]
                assert positions == sorted(set(positions))  # strictly growing keys
            assert await store.history_page("never-submitted") == []
        finally:
            await store.close()

    run(main)


def test_bad_page_arguments_are_refused_as_invalid_argument(store_factory: Backend) -> None:
    """Refused before any query: PostgreSQL would fail a NUL in TEXT as a store error."""

    async def main() -> None:
        store = await opened(store_factory)
        try:
            await store.put_schedule(schedule_row("s1", "t1"), expected_revision=0)
            refused: list[Awaitable[Any]] = [
                store.schedules_page(limit=-1),
                store.schedules_page(limit=pages.STORE_PAGE_ROWS_MAX + 1),
                store.schedules_page(limit=True),
                store.schedules_page(after="a\x00b"),
                store.schedules_page(tenants=["t\x00"]),
                store.schedules_page(tenants="t1"),
                store.deployments_page(after="x\x00"),
                store.artifacts_page(after=("a", -1)),
                store.artifacts_page(after=("a", 2**63)),
                store.artifacts_page(after=("a", 1), artifact_id="b"),
                store.history_page("a\x00"),
                store.history_page("a", after=-5),
                store.history_page("a", limit=2**64),
            ]
            for call in refused:
                with pytest.raises(InvalidArgument):
                    await call
            # The store still answers normally afterwards.
            assert [r.schedule_id for r in await store.schedules_page(limit=0)] == []
            assert [r.schedule_id for r in await store.schedules_page()] == ["s1"]
        finally:
            await store.close()

    run(main)


def test_sqlite_page_queries_read_through_an_index_without_sorting(tmp_path: Any) -> None:
    """The structural half of "a page costs ``limit`` rows": each page statement seeks
    its start in an index and walks it in order (no ``TEMP B-TREE`` sort of every
    matching row, no full scan), whatever the filters."""
    from wf.store.sqlite import SQLiteStore

    async def create() -> None:
        store = SQLiteStore(tmp_path / "store")
        await store.open()
        await store.close()

    asyncio.run(create())
    queries = [
        pages.schedules_page(after="a", limit=5, include_deleted=False, tenants=["t1", "t2"]),
        pages.schedules_page(after="a", limit=5, include_deleted=True, tenants=None),
        pages.artifacts_page(after=("a", 1), artifact_id=None, limit=5),
        pages.artifacts_page(after=("a", 1), artifact_id="a", limit=5),
        pages.deployments_page(after="a", limit=5),
        pages.history_page(activity_id="a", after=3, limit=5),
    ]
    conn = sqlite3.connect(tmp_path / "store" / "scheduler.db")
    try:
        for query in queries:
            assert query is not None
            sql, params = sql_of(query, "sqlite"), query.params
            plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
            assert len(plan) == 1, (sql, plan)
            assert plan[0].startswith("SEARCH "), (sql, plan)
            assert ">" in plan[0], (sql, plan)  # it seeks the page's start in the index
            assert "TEMP B-TREE" not in " ".join(plan), (sql, plan)
    finally:
        conn.close()
