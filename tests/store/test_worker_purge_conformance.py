"""Departed workers purged after their retention, on every backend (issue 13 item 11).

A real :class:`SchedulerCore` with a short ``departed_worker_retention_s`` on a
virtual timeline (each command's ``now``); every outcome is appended to the
store before going on, and recovery is the real one
(:func:`wf.store.loader.build_snapshot` then :func:`wf.scheduler.recovery.recover`).
The store must delete exactly the rows the core forgot, keep the departure
instant across a restart, and never bring a purged worker back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from _store_backends import Backend

from wf.scheduler import commands as cmd
from wf.scheduler.config import SchedulerConfig
from wf.scheduler.dispatcher import SchedulerCore
from wf.scheduler.model import Activity, WorkerInfo, WorkerStatus
from wf.scheduler.outputs import Outcome, WorkerRemoved
from wf.scheduler.recovery import durable_digest, recover
from wf.store.loader import build_snapshot
from wf.store.protocol import Store

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
RETENTION_S = 600.0
CONFIG = SchedulerConfig(lease_ttl_s=30.0, departed_worker_retention_s=RETENTION_S)
R = TypeVar("R")


def run(main: Callable[[], Awaitable[R]]) -> R:
    async def wrapper() -> R:
        return await main()

    return asyncio.run(wrapper())


class Node:
    """A core whose every outcome is durable before the next command (persist first)."""

    def __init__(self, store: Store, core: SchedulerCore | None = None) -> None:
        self.store = store
        self.core = core or SchedulerCore(CONFIG)
        self.now = T0

    async def do(self, command_type: type[Any], **kw: Any) -> Outcome:
        out = self.core.handle(command_type(now=self.now, **kw))
        await self.store.append(out.records)
        return out

    async def register(self, worker_id: str) -> None:
        info = WorkerInfo(worker_id=worker_id, max_concurrency=2, heartbeat_interval_s=3600.0)
        await self.do(cmd.RegisterWorker, info=info)


async def recovered(store: Store, now: float) -> Node:
    """A node recovered from the store at ``now``; the recovery tick's records committed."""
    stored = await store.load()
    snap, diagnostics = build_snapshot(stored, CONFIG, now)
    assert diagnostics == []
    core, outcome = recover(snap, now)
    await store.append(outcome.records)
    node = Node(store, core)
    node.now = now
    return node


async def stored_workers(store: Store) -> dict[str, WorkerStatus]:
    return {w.info.worker_id: w.status for w in (await store.load()).workers}


def test_the_store_deletes_exactly_the_workers_the_core_forgot(store_factory: Backend) -> None:
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            node = Node(store)
            for wid in ("gone", "lost", "live"):
                await node.register(wid)
            await node.do(cmd.Submit, activities=(Activity(activity_id="a1", activity_type="t"),))
            await node.do(cmd.Poll, worker_id="lost", max_items=1)
            node.now += 10
            await node.do(cmd.ShutdownWorker, worker_id="gone")
            await node.do(cmd.WorkersLost, worker_ids=("lost",))  # a1 is requeued
            assert await stored_workers(store) == {
                "gone": WorkerStatus.GONE,
                "lost": WorkerStatus.FAILED,
                "live": WorkerStatus.ACTIVE,
            }
            node.now += RETENTION_S
            await node.do(cmd.Heartbeat, worker_id="live")
            out = await node.do(cmd.Tick)
            assert [r.worker_id for r in out.records if isinstance(r, WorkerRemoved)] == [
                "gone",
                "lost",
            ]
            assert await stored_workers(store) == {"live": WorkerStatus.ACTIVE}
            # The store restores the live core exactly, and finds nothing wrong.
            again = await recovered(store, node.now)
            assert durable_digest(again.core) == durable_digest(node.core)
            assert await store.check() == []
        finally:
            await store.close()

    run(main)


def test_retention_counts_from_the_departure_across_a_restart(store_factory: Backend) -> None:
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            node = Node(store)
            await node.register("w1")
            node.now = T0 + 100
            await node.do(cmd.ShutdownWorker, worker_id="w1")
            # Restart half-way through the retention: the departure instant survives.
            again = await recovered(store, T0 + 100 + RETENTION_S / 2)
            worker = again.core.registry.workers["w1"]
            assert (worker.status, worker.departed_at) == (WorkerStatus.GONE, T0 + 100)
            again.now = T0 + 100 + RETENTION_S - 0.5
            assert (await again.do(cmd.Tick)).records == []
            again.now = T0 + 100 + RETENTION_S
            out = await again.do(cmd.Tick)
            assert out.records == [WorkerRemoved(at=again.now, worker_id="w1")]
            assert await stored_workers(store) == {}
        finally:
            await store.close()

    run(main)


def test_a_restart_after_the_retention_purges_at_recovery_and_never_resurrects(
    store_factory: Backend,
) -> None:
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            node = Node(store)
            await node.register("w1")
            await node.register("w2")
            await node.do(cmd.ShutdownWorker, worker_id="w1")
            # Down for longer than the retention: the recovery tick forgets w1.
            again = await recovered(store, T0 + RETENTION_S + 1)
            assert "w1" not in again.core.registry.workers
            assert await stored_workers(store) == {"w2": WorkerStatus.ACTIVE}
            # And a second recovery does not bring it back.
            third = await recovered(store, T0 + RETENTION_S + 2)
            assert set(third.core.registry.workers) == {"w2"}
            assert await stored_workers(store) == {"w2": WorkerStatus.ACTIVE}
        finally:
            await store.close()

    run(main)


def test_a_purged_worker_registers_afresh_and_survives_a_restart(store_factory: Backend) -> None:
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            node = Node(store)
            await node.register("w1")
            first_seq = node.core.registry.workers["w1"].seq
            await node.do(cmd.ShutdownWorker, worker_id="w1")
            node.now += RETENTION_S
            await node.do(cmd.Tick)
            assert await stored_workers(store) == {}
            node.now += 1
            await node.register("w1")
            again = await recovered(store, node.now)
            worker = again.core.registry.workers["w1"]
            assert worker.status is WorkerStatus.ACTIVE
            assert worker.seq > first_seq
            assert worker.registered_at == node.now
            assert durable_digest(again.core) == durable_digest(node.core)
        finally:
            await store.close()

    run(main)


def test_removal_and_registration_in_one_batch_apply_in_order(store_factory: Backend) -> None:
    # Group commit may put a purge and the same id's new registration in one append.
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            node = Node(store)
            await node.register("w1")
            await node.do(cmd.ShutdownWorker, worker_id="w1")
            node.now += RETENTION_S
            tick = node.core.handle(cmd.Tick(now=node.now))
            info = WorkerInfo(worker_id="w1", max_concurrency=3, heartbeat_interval_s=3600.0)
            back = node.core.handle(cmd.RegisterWorker(now=node.now, info=info))
            await store.append([*tick.records, *back.records])
            stored = (await store.load()).workers
            assert [(w.info.worker_id, w.status, w.info.max_concurrency) for w in stored] == [
                ("w1", WorkerStatus.ACTIVE, 3)
            ]
        finally:
            await store.close()

    run(main)
