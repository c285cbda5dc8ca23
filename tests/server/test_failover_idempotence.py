"""Nothing lost, nothing twice (issue 15), at the scheduler API and on a real node.

A client that did not hear the answer (a failover, a lost connection) submits
again; a worker that reconnects registers again listing what it holds; a server
comes back after its leases' expiry passed. Each test drives a real
:class:`~wf.server.scheduler_api.SchedulerAPI` on a real
:class:`~wf.node.SchedulerNode` over SQLite and PostgreSQL (virtual clock), and
the submissions also over the wire (``scheduler.activities.submit`` on a real
``WfServer``), which must answer exactly as the Python API does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import msgspec
import pytest

from wf.client.app import App
from wf.errors import AlreadyExists
from wf.node import SchedulerNode
from wf.scheduler.config import SchedulerConfig
from wf.scheduler.model import Activity, ActivityState, RetryPolicy, WorkerInfo
from wf.scheduler.recovery import durable_digest, restore
from wf.scheduler.timer import RelativeDelay
from wf.server.app import WfServer
from wf.server.config import ServerConfig, ServerSection, StoreConfig
from wf.server.rpc import ANONYMOUS_ADMIN
from wf.server.scheduler_api import SchedulerAPI
from wf.store.loader import build_snapshot
from wf.store.postgres import PostgresStore
from wf.store.protocol import Store
from wf.store.sqlite import SQLiteStore
from wf.testing.clock import VirtualClock
from wf.wire.scheduler_methods import HeldLease

R = TypeVar("R")
S = ActivityState
TTL_S = 30.0
CONFIG = SchedulerConfig(lease_ttl_s=TTL_S)
ADMIN = ANONYMOUS_ADMIN
WORKER = WorkerInfo(worker_id="w1", max_concurrency=8, heartbeat_interval_s=3600.0)

StoreMaker = Callable[[], Store]


@pytest.fixture(params=["sqlite", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreMaker]:
    """Makes stores over one test-private location (every call: the same data)."""
    if request.param == "sqlite":
        yield lambda: SQLiteStore(tmp_path / "store")
        return
    dsn: str = request.getfixturevalue("pg_dsn")
    schema: str = request.getfixturevalue("pg_schema")
    yield lambda: PostgresStore(dsn, schema=schema)


def run(main: Callable[[], Awaitable[R]]) -> R:
    async def wrapper() -> R:
        return await main()

    return asyncio.run(wrapper())


async def started(make_store: StoreMaker, clock: VirtualClock) -> SchedulerAPI:
    node = SchedulerNode(make_store(), CONFIG, clock=clock)
    await node.start(background=False)
    return SchedulerAPI(node)


def act(activity_id: str, **fields: object) -> Activity:
    fields.setdefault("activity_type", "t")
    return Activity(activity_id=activity_id, **fields)  # type: ignore[arg-type]


async def stored_rows(api: SchedulerAPI) -> tuple[int, dict[str, int]]:
    """The store's activity count and each activity's transition count."""
    state = await api.node.store.load()
    ids = [a.activity_id for a in state.activities] + [i for i, _ in state.finished]
    return len(ids), {i: len(await api.node.store.history(i)) for i in ids}


# --------------------------------------------------- idempotent submissions


def test_a_retried_submission_answers_its_ids_and_stores_nothing(make_store: StoreMaker) -> None:
    async def main() -> None:
        api = await started(make_store, VirtualClock())
        try:
            batch = [act("a", payload=b'{"x":1}', priority=1), act("b", idempotent=True)]
            assert await api.submit_activities(batch, ADMIN) == ["a", "b"]
            before = await stored_rows(api)
            seq = api.node.core.seq
            again = [act("a", payload=b'{"x":1}', priority=1), act("b", idempotent=True)]
            assert await api.submit_activities(again, ADMIN) == ["a", "b"]
            assert await stored_rows(api) == before
            assert api.node.core.seq == seq
        finally:
            await api.node.stop()

    run(main)


def test_a_retried_submission_of_a_finished_activity_answers_its_id(
    make_store: StoreMaker,
) -> None:
    async def main() -> None:
        clock = VirtualClock()
        api = await started(make_store, clock)
        await api.register_worker(WORKER, ADMIN)
        await api.submit_activities([act("done")], ADMIN)
        (grant,) = (await api.poll("w1", 1, 0.0, ADMIN)).leases
        await api.start_activity("done", grant.lease.token, ADMIN)
        await api.complete_activity("done", grant.lease.token, b"1", ADMIN)
        await api.node.stop()
        # Another server now (a failover): the finished activity is only in the store.
        again = await started(make_store, clock)
        try:
            assert await again.submit_activities([act("done")], ADMIN) == ["done"]
            history = await again.node.store.history("done")
            assert history[-1].to_state is S.COMPLETED
            with pytest.raises(AlreadyExists) as refused:
                await again.submit_activities([act("done", payload=b"2")], ADMIN)
            assert refused.value.details["activity_ids"] == ["done"]
        finally:
            await again.node.stop()

    run(main)


@pytest.mark.parametrize(
    "changed",
    [
        {"payload": b'{"x":2}'},
        {"activity_type": "other"},
        {"tenant": "t2"},
        {"priority": 0},
        {"idempotent": True},
        {"retry": RetryPolicy(max_attempts=5)},
        {"not_before": 1.0},
        {"capabilities": frozenset({"gpu"})},
    ],
)
def test_a_used_id_with_other_content_is_already_exists_and_changes_nothing(
    tmp_path: Path, changed: dict[str, object]
) -> None:
    async def main() -> None:
        api = await started(lambda: SQLiteStore(tmp_path / "s"), VirtualClock())
        try:
            await api.submit_activities([act("a", payload=b'{"x":1}')], ADMIN)
            before = await stored_rows(api)
            fields: dict[str, object] = {"payload": b'{"x":1}', **changed}
            with pytest.raises(AlreadyExists) as refused:
                await api.submit_activities([act("a", **fields), act("new")], ADMIN)
            assert refused.value.details["activity_ids"] == ["a"]
            assert await stored_rows(api) == before
        finally:
            await api.node.stop()

    run(main)


def test_a_delayed_activity_retried_with_its_delay_is_the_same_submission(tmp_path: Path) -> None:
    async def main() -> None:
        clock = VirtualClock()
        api = await started(lambda: SQLiteStore(tmp_path / "s"), clock)
        try:
            await api.submit_activities([act("d", delay=RelativeDelay(seconds=60))], ADMIN)
            clock.advance(5)  # the retry resolves the delay to a later instant
            again = await api.submit_activities([act("d", delay=RelativeDelay(seconds=60))], ADMIN)
            assert again == ["d"]
            with pytest.raises(AlreadyExists):
                await api.submit_activities([act("d", delay=RelativeDelay(seconds=61))], ADMIN)
        finally:
            await api.node.stop()

    run(main)


def test_a_batch_mixing_a_retry_and_new_activities_submits_only_the_new_ones(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        api = await started(lambda: SQLiteStore(tmp_path / "s"), VirtualClock())
        try:
            await api.submit_activities([act("a")], ADMIN)
            assert await api.submit_activities([act("b"), act("a"), act("c")], ADMIN) == [
                "b",
                "a",
                "c",
            ]
            count, histories = await stored_rows(api)
            assert count == 3
            assert histories == {"a": 1, "b": 1, "c": 1}
        finally:
            await api.node.stop()

    run(main)


def test_a_batch_naming_one_id_twice_stays_refused_even_when_it_is_a_retry(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        api = await started(lambda: SQLiteStore(tmp_path / "s"), VirtualClock())
        try:
            with pytest.raises(AlreadyExists) as fresh:
                await api.submit_activities([act("x"), act("x")], ADMIN)
            assert fresh.value.details == {"activity_id": "x"}
            await api.submit_activities([act("a")], ADMIN)
            with pytest.raises(AlreadyExists) as retried:
                await api.submit_activities([act("a"), act("a")], ADMIN)
            assert retried.value.details == {"activity_id": "a"}
            assert (await stored_rows(api))[0] == 1
        finally:
            await api.node.stop()

    run(main)


def test_a_retry_racing_its_original_submits_once_and_both_answer(make_store: StoreMaker) -> None:
    async def main() -> None:
        api = await started(make_store, VirtualClock())
        try:
            batch = [act("r1"), act("r2")]
            answers = await asyncio.gather(
                api.submit_activities(batch, ADMIN),
                api.submit_activities([msgspec.structs.replace(a) for a in batch], ADMIN),
            )
            assert answers == [["r1", "r2"], ["r1", "r2"]]
            count, histories = await stored_rows(api)
            assert count == 2
            assert histories == {"r1": 1, "r2": 1}
        finally:
            await api.node.stop()

    run(main)


def test_the_wire_answers_a_retried_submission_as_the_python_api_does(tmp_path: Path) -> None:
    async def main() -> None:
        config = ServerConfig(
            server=ServerSection(
                port=0, store=StoreConfig(root=str(tmp_path / "s"), durability="process")
            )
        )
        server = WfServer(config)
        await server.start()
        try:
            async with App(f"http://127.0.0.1:{server.port}") as app:
                assert await app.submit_activities([act("w", payload=b"[1]")]) == ["w"]
                assert await app.submit_activities([act("w", payload=b"[1]")]) == ["w"]
                local = server.scheduler
                assert await local.submit_activities([act("w", payload=b"[1]")], ADMIN) == ["w"]
                with pytest.raises(AlreadyExists) as over_wire:
                    await app.submit_activities([act("w", payload=b"[2]")])
                with pytest.raises(AlreadyExists) as in_process:
                    await local.submit_activities([act("w", payload=b"[2]")], ADMIN)
                assert over_wire.value.message == in_process.value.message
                assert over_wire.value.details == in_process.value.details
        finally:
            await server.stop()

    run(main)


# ------------------------------------------------ leases across a failover


def test_a_lease_whose_expiry_passed_while_no_server_ran_survives_the_restart(
    make_store: StoreMaker,
) -> None:
    async def main() -> None:
        clock = VirtualClock()
        api = await started(make_store, clock)
        await api.register_worker(WORKER, ADMIN)
        await api.submit_activities([act("risky"), act("unstarted")], ADMIN)
        grants = {
            g.lease.activity_id: g.lease for g in (await api.poll("w1", 2, 0.0, ADMIN)).leases
        }
        await api.start_activity("risky", grants["risky"].token, ADMIN)
        await api.node.stop()

        clock.advance(TTL_S * 2)  # down for twice the lease TTL
        again = await started(make_store, clock)
        try:
            now = clock.now()
            core = again.node.core
            assert core.metrics.expired_leases == 0
            assert {aid: a.lease_expires_at for aid, a in core.activities.items()} == {
                "risky": now + TTL_S,
                "unstarted": now + TTL_S,
            }
            # The grace is in the store too: a core rebuilt from it is the same core.
            snap, _ = build_snapshot(await again.node.store.load(), CONFIG, now)
            assert durable_digest(restore(snap)) == durable_digest(core)
            # The worker lived: it finishes the non-idempotent work exactly once.
            await again.register_worker(
                WORKER,
                ADMIN,
                [
                    HeldLease(activity_id="risky", token=grants["risky"].token),
                    HeldLease(activity_id="unstarted", token=grants["unstarted"].token),
                ],
            )
            await again.complete_activity("risky", grants["risky"].token, b"1", ADMIN)
            history = await again.node.store.history("risky")
            assert [t.to_state for t in history] == [S.QUEUED, S.LEASED, S.EXECUTING, S.COMPLETED]
        finally:
            await again.node.stop()

    run(main)


def test_registering_with_held_requeues_what_the_worker_no_longer_holds_in_one_commit(
    make_store: StoreMaker,
) -> None:
    async def main() -> None:
        clock = VirtualClock()
        api = await started(make_store, clock)
        try:
            await api.register_worker(WORKER, ADMIN)
            await api.submit_activities([act("kept"), act("lost"), act("gone")], ADMIN)
            polled = await api.poll("w1", 3, 0.0, ADMIN)
            tokens = {g.lease.activity_id: g.lease.token for g in polled.leases}
            await api.start_activity("gone", tokens["gone"], ADMIN)
            clock.advance(TTL_S - 1)
            held = [HeldLease(activity_id="kept", token=tokens["kept"])]
            await api.register_worker(WORKER, ADMIN, held)
            core = api.node.core
            assert core.activities["kept"].lease_expires_at == clock.now() + TTL_S
            assert core.activities["lost"].state is S.QUEUED
            assert "gone" not in core.activities  # executing, not idempotent: failed closed
            lost = (await api.node.store.history("lost"))[-1]
            gone = (await api.node.store.history("gone"))[-1]
            assert (lost.to_state, lost.reason) == (S.QUEUED, "lease_abandoned")
            assert (gone.to_state, gone.reason) == (S.FAILED, "may_have_executed")
            # The worker hears of the revocations with its next poll.
            revoked = (await api.poll("w1", 1, 0.0, ADMIN)).revoked
            assert {r.activity_id for r in revoked} == {"lost", "gone"}
        finally:
            await api.node.stop()

    run(main)
