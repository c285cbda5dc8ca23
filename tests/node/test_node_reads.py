"""The node's read port answers from committed state only, and owns the id rule once.

A gated store holds a commit in flight (or fails it) while the test reads: the
core has decided, the store has not yet taken it. Time is a virtual clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import msgspec
import pytest

from wf.errors import AlreadyExists, StoreUnavailable
from wf.node import SchedulerNode
from wf.node_reads import ActivityFacts
from wf.runtime import dag
from wf.runtime.engine import RunEngine
from wf.runtime.plan import Plan
from wf.runtime.runs import Run
from wf.scheduler import commands as cmd
from wf.scheduler.model import Activity, ActivityState, Priority, WorkerInfo
from wf.scheduler.outputs import ActivitySubmitted, LeaseGranted, Record
from wf.server.rpc import ANONYMOUS_ADMIN
from wf.server.scheduler_api import SchedulerAPI
from wf.store.protocol import Store
from wf.store.sqlite import SQLiteStore
from wf.testing.clock import VirtualClock

WAIT_S = 0.05
"""How long (real time) a test lets a read run to see that it is still waiting."""


class GatedStore:
    """A real store whose appends wait at a gate while it is closed, and then fail
    instead of writing while ``fail`` is set."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail = False

    async def append(self, records: Sequence[Record]) -> None:
        await self.gate.wait()
        if self.fail:
            raise OSError(28, "No space left on device")
        await self.inner.append(records)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def act(activity_id: str, **kw: Any) -> Activity:
    kw.setdefault("activity_type", "t")
    return Activity(activity_id=activity_id, **kw)


async def started(tmp_path: Path) -> tuple[SchedulerNode, GatedStore]:
    store = GatedStore(SQLiteStore(tmp_path / "store"))
    node = SchedulerNode(cast(Store, store), clock=VirtualClock())
    await node.start(background=False)
    return node, store


async def submit(node: SchedulerNode, *activities: Activity) -> None:
    await node.execute(lambda now: cmd.Submit(now=now, activities=activities))


async def finish(node: SchedulerNode, activity_id: str) -> None:
    """Run ``activity_id`` to completion on a worker of its own."""
    info = WorkerInfo(worker_id=f"w-{activity_id}", max_concurrency=1)
    await node.execute(lambda now: cmd.RegisterWorker(now=now, info=info))
    outcome = await node.execute(
        lambda now: cmd.Poll(now=now, worker_id=info.worker_id, max_items=1)
    )
    (token,) = [d.lease.token for d in outcome.decisions if type(d) is LeaseGranted]
    await node.execute(lambda now: cmd.StartActivity(now=now, activity_id=activity_id, token=token))
    await node.execute(
        lambda now: cmd.Complete(now=now, activity_id=activity_id, token=token, result=b"")
    )


def test_reads_wait_for_a_commit_in_flight_and_facts_appear_only_once_it_lands(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        node, store = await started(tmp_path)
        reads = node.reads
        try:
            store.gate.clear()
            pending = asyncio.ensure_future(submit(node, act("a", tenant="t1", correlation_id="c")))
            await asyncio.sleep(0)
            assert "a" in node.core.activities  # decided, not committed
            assert reads.facts("a") is None
            assert reads.tenant_of("a") is None
            assert reads.correlation_id("a") == ""
            read = asyncio.ensure_future(reads.activity("a"))
            workers = asyncio.ensure_future(reads.workers(after=0, limit=10))
            queue = asyncio.ensure_future(reads.queue())
            await asyncio.sleep(WAIT_S)
            assert not read.done()
            assert not workers.done()
            assert not queue.done()
            store.gate.set()
            answer = await read
            assert answer is not None
            assert answer.activity is not None
            assert answer.activity.activity_id == "a"
            # A copy: the core may change its own object before the answer is sent.
            assert answer.activity is not node.core.activities["a"]
            assert (await queue).depth == 1
            assert await workers == []
            await pending
            assert reads.facts("a") == ActivityFacts("t1", "t", "", "c")
        finally:
            await node.stop()

    asyncio.run(main())


def test_nothing_of_a_failed_commit_is_ever_read(tmp_path: Path) -> None:
    async def main() -> None:
        node, store = await started(tmp_path)
        reads = node.reads
        try:
            await submit(node, act("kept"))
            info = WorkerInfo(worker_id="w", max_concurrency=1, labels={"owner": "me"})
            store.gate.clear()
            store.fail = True
            lost = asyncio.ensure_future(submit(node, act("lost", tenant="t1")))
            registered = asyncio.ensure_future(
                node.execute(lambda now: cmd.RegisterWorker(now=now, info=info))
            )
            await asyncio.sleep(0)
            read = asyncio.ensure_future(reads.activity("lost"))
            store.gate.set()
            for refused in (lost, registered, read):
                with pytest.raises(StoreUnavailable):
                    await refused
            assert node.writes_stopped
            assert reads.facts("lost") is None
            with pytest.raises(StoreUnavailable):
                await reads.workers(after=0, limit=10)
            with pytest.raises(StoreUnavailable):
                await reads.queue()
            # Ownership checks refuse rather than answer from the failed registration.
            with pytest.raises(StoreUnavailable):
                reads.worker_labels("w")
            with pytest.raises(StoreUnavailable):
                reads.lease_holder("kept")

            store.fail = False
            await node.restart()
            assert await reads.activity("lost") is None
            assert reads.worker_labels("w") is None
            assert await reads.ids_in_use(["lost", "kept"]) == {"kept"}
            assert reads.facts("kept") is not None  # rebuilt from the reloaded core
        finally:
            await node.stop()

    asyncio.run(main())


def test_facts_of_a_finished_activity_are_remembered_across_a_reload(tmp_path: Path) -> None:
    async def main() -> None:
        node, _store = await started(tmp_path)
        reads = node.reads
        try:
            await submit(node, act("done", tenant="t2", workflow_id="run", correlation_id="c2"))
            await finish(node, "done")
            assert "done" not in node.core.activities
            facts = ActivityFacts("t2", "t", "run", "c2")
            assert reads.facts("done") == facts
            await node.restart()
            assert reads.facts("done") == facts
            answer = await reads.activity("done")
            assert answer is not None
            assert answer.finished_state is ActivityState.COMPLETED
        finally:
            await node.stop()

    asyncio.run(main())


def test_the_id_rule_is_one_answer_for_the_api_and_the_run_engine(tmp_path: Path) -> None:
    """Live, finished-and-remembered and only-stored ids are in use; a fresh one is not.
    The scheduler API refuses exactly those, the run engine skips exactly those."""

    async def main() -> None:
        node, store = await started(tmp_path)
        api = SchedulerAPI(node)
        engine = RunEngine(cast(Any, store), node, node.clock)
        try:
            prefixes = ("x", "run-000001")
            for activity_id in [f"{p}.{kind}" for p in prefixes for kind in ("done", "old")]:
                await submit(node, act(activity_id))
                await finish(node, activity_id)
            await submit(node, *[act(f"{p}.live") for p in prefixes])
            # Beyond the core's bounded memory of finished ids: only the store knows.
            del node.core.finished["x.old"], node.core.finished["run-000001.old"]
            kinds = ("live", "done", "old", "new")

            used = await node.reads.ids_in_use([f"x.{k}" for k in kinds])
            assert used == {"x.live", "x.done", "x.old"}
            for kind in kinds[:3]:
                # Other content under a used id is refused (the same content would be a
                # retry, answered with the id: issue 15).
                other = msgspec.structs.replace(act(f"x.{kind}"), activity_type="other")
                with pytest.raises(AlreadyExists):
                    await api.submit_activities([other], ANONYMOUS_ADMIN)
            assert await api.submit_activities([act("x.new")], ANONYMOUS_ADMIN) == ["x.new"]

            run = Run(
                run_id="run-000001",
                deployment_id="d",
                deployment_revision=1,
                artifact_id="art",
                artifact_version=1,
                content_hash="h",
                tenant="default",
                priority=Priority.NORMAL,
                inputs={},
                created_at=0.0,
            )
            submitted: list[str] = []
            node.listeners.append(
                lambda o: submitted.extend(
                    r.activity.activity_id for r in o.records if type(r) is ActivitySubmitted
                )
            )
            effects = dag.Effects(submit=[act(f"run-000001.{k}") for k in kinds])
            # A used id handed to the core would be refused (AlreadyExists) and fail
            # the run, which needs a real plan: the engine must not hand it over.
            await engine._carry_out(run, cast(Plan, None), effects)
            assert submitted == ["run-000001.new"]
        finally:
            await node.stop()

    asyncio.run(main())
