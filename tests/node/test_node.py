"""The scheduler node in-process, on every backend: persist before acknowledging,
fail-stop, recovery (determinism, stale leases, fail closed), ownership, ticking.

Time is a :class:`~wf.testing.clock.VirtualClock` wherever it matters, and the
tick loop is driven through :meth:`SchedulerNode.tick` except in the tests of
the background loop itself.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar, cast

import msgspec
import pytest
from _node_locations import Location

from wf.errors import (
    Conflict,
    InvalidArgument,
    NotFound,
    OwnershipConflict,
    StaleLease,
    StoreUnavailable,
)
from wf.node import RecoveryReport, SchedulerNode
from wf.scheduler import commands as cmd
from wf.scheduler.config import SchedulerConfig
from wf.scheduler.model import (
    Activity,
    ActivityState,
    Priority,
    RetryPolicy,
    WorkerInfo,
    WorkerStatus,
)
from wf.scheduler.outputs import ActivityFailed, LeaseGranted, Outcome, Record
from wf.scheduler.recovery import durable_digest, restore
from wf.scheduler.timer import CalendarSchedule
from wf.store.loader import build_snapshot
from wf.store.protocol import OwnerInfo, Store
from wf.testing.clock import VirtualClock

S = ActivityState
R = TypeVar("R")
CONFIG = SchedulerConfig(lease_ttl_s=30.0)
LOOP_WAIT_MAX_S = 5.0
"""Longest a test waits (real time) for the background loop to act."""


def run(main: Callable[[], Awaitable[R]]) -> R:
    """Run one async test body on a fresh loop."""

    async def wrapper() -> R:
        return await main()

    return asyncio.run(wrapper())


def act(activity_id: str, **kw: Any) -> Activity:
    kw.setdefault("activity_type", "t")
    return Activity(activity_id=activity_id, **kw)


def worker(worker_id: str, **kw: Any) -> WorkerInfo:
    kw.setdefault("max_concurrency", 10)
    kw.setdefault("heartbeat_interval_s", 3600.0)
    return WorkerInfo(worker_id=worker_id, **kw)


class FaultyStore:
    """A real store whose ``append`` can be made to raise before anything reaches it,
    or to wait at a gate (to cancel a caller mid-commit)."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.fail_with: BaseException | None = None
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()

    async def append(self, records: Sequence[Record]) -> None:
        self.entered.set()
        if self.fail_with is not None:
            raise self.fail_with
        if self.gate is not None:
            await self.gate.wait()
        await self.inner.append(records)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def faulty(location: Location) -> tuple[FaultyStore, Store]:
    store = FaultyStore(location.make())
    return store, cast(Store, store)


async def stored_digest(store: Store, now: float) -> str:
    """The durable digest of a core rebuilt from what the store holds."""
    loaded = await store.load()
    snapshot, diagnostics = build_snapshot(loaded, CONFIG, now)
    assert diagnostics == []
    return durable_digest(restore(snapshot))


async def start(
    location: Location, clock: VirtualClock, store: Store | None = None, **kw: Any
) -> tuple[SchedulerNode, RecoveryReport]:
    """A node started over ``location`` (no background loop), and its recovery report."""
    node = SchedulerNode(store or location.make(), CONFIG, clock=clock, **kw)
    report = await node.start(background=False)
    assert report.diagnostics == []
    return node, report


async def started(
    location: Location, clock: VirtualClock, store: Store | None = None, **kw: Any
) -> SchedulerNode:
    return (await start(location, clock, store, **kw))[0]


def grants(outcome: Outcome) -> dict[str, int]:
    return {
        d.lease.activity_id: d.lease.token for d in outcome.decisions if type(d) is LeaseGranted
    }


async def lease(node: SchedulerNode, worker_id: str, n: int) -> dict[str, int]:
    out = await node.execute(lambda t: cmd.Poll(now=t, worker_id=worker_id, max_items=n))
    await node.execute(lambda t: cmd.CancelPoll(now=t, worker_id=worker_id))
    return grants(out)


# ------------------------------------------------------------ persist before ack


@pytest.mark.parametrize(
    "error",
    [StoreUnavailable("disk full"), OSError(5, "I/O error")],
    ids=["store-unavailable", "os-error"],
)
def test_a_failed_append_is_never_acknowledged_and_the_node_fails_stop(
    location: Location, error: BaseException
) -> None:
    async def main() -> None:
        clock = VirtualClock()
        store, port = faulty(location)
        node = await started(location, clock, port)
        await node.execute(lambda t: cmd.RegisterWorker(now=t, info=worker("w1")))
        await node.execute(lambda t: cmd.Submit(now=t, activities=(act("a1"), act("a2"))))
        assert set(await lease(node, "w1", 1)) == {"a1"}
        clock.advance(1.0)
        store.fail_with = error
        with pytest.raises(StoreUnavailable):
            await node.execute(lambda t: cmd.Submit(now=t, activities=(act("b1"), act("b2"))))
        assert await store.existing_activity_ids(["b1", "b2"]) == set()
        # The core accepted them in memory: it is ahead of the store, hence fail-stop.
        assert "b1" in node.core.activities
        store.fail_with = None
        for refused in (
            lambda t: cmd.Heartbeat(now=t, worker_id="w1"),  # even one with no records
            lambda t: cmd.Submit(now=t, activities=(act("c1"),)),
            lambda t: cmd.Tick(now=t),
        ):
            with pytest.raises(StoreUnavailable, match="must restart"):
                await node.execute(refused)
        assert await store.existing_activity_ids(["b1", "b2", "c1"]) == set()

        report = await node.restart()
        assert report.diagnostics == []
        assert "b1" not in node.core.activities
        assert node.core.activities["a1"].state is S.LEASED
        assert durable_digest(node.core) == await stored_digest(port, clock.now())
        # Working again; the ids that were never stored are free.
        await node.execute(lambda t: cmd.Submit(now=t, activities=(act("b1"),)))
        assert await store.existing_activity_ids(["b1", "b2"]) == {"b1"}
        assert durable_digest(node.core) == await stored_digest(port, clock.now())
        await node.stop()

    run(main)


def test_a_cancelled_caller_neither_breaks_the_node_nor_loses_the_commit(
    location: Location,
) -> None:
    async def main() -> None:
        clock = VirtualClock()
        store, port = faulty(location)
        node = await started(location, clock, port)
        store.gate = asyncio.Event()
        caller = asyncio.create_task(
            node.execute(lambda t: cmd.Submit(now=t, activities=(act("a1"),)))
        )
        await store.entered.wait()
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        store.gate.set()
        # The commit goes on without its caller; the node keeps serving.
        out = await node.execute(lambda t: cmd.Submit(now=t, activities=(act("a2"),)))
        assert out.records
        assert await store.existing_activity_ids(["a1", "a2"]) == {"a1", "a2"}
        assert durable_digest(node.core) == await stored_digest(port, clock.now())
        await node.stop()

    run(main)


# ---------------------------------------------------------- recovery determinism


class Driver:
    """A seeded random workload through a node, on a virtual clock."""

    WORKERS = ("w1", "w2", "w3")

    def __init__(self, node: SchedulerNode, clock: VirtualClock, seed: int) -> None:
        self.node = node
        self.clock = clock
        self.rng = random.Random(seed)
        self.ids = 0
        self.refused = 0

    def _held(self, state: ActivityState) -> list[Activity]:
        return sorted(
            (a for a in self.node.core.activities.values() if a.state is state),
            key=lambda a: a.seq,
        )

    def command(self) -> Callable[[float], cmd.Command] | None:
        rng = self.rng
        kind = rng.choices(
            [
                "register",
                "heartbeat",
                "submit",
                "poll",
                "start",
                "complete",
                "fail",
                "renew",
                "cancel",
                "shutdown",
                "lost",
                "calendar",
                "tick",
            ],
            weights=[4, 6, 20, 14, 10, 9, 5, 5, 3, 1, 1, 1, 10],
        )[0]
        wid = rng.choice(self.WORKERS)
        if kind == "register":
            info = worker(wid, max_concurrency=rng.randint(1, 4), heartbeat_interval_s=5.0)
            return lambda t: cmd.RegisterWorker(now=t, info=info)
        if kind == "heartbeat":
            return lambda t: cmd.Heartbeat(now=t, worker_id=wid)
        if kind == "submit":
            batch = tuple(self._activity() for _ in range(rng.randint(1, 4)))
            return lambda t: cmd.Submit(now=t, activities=batch)
        if kind == "poll":
            n = rng.randint(1, 3)
            return lambda t: cmd.Poll(now=t, worker_id=wid, max_items=n)
        if kind == "tick":
            self.clock.advance(rng.choice([0.0, 0.5, 2.0, 7.0, 31.0]))
            return lambda t: cmd.Tick(now=t)
        if kind == "shutdown":
            return lambda t: cmd.ShutdownWorker(now=t, worker_id=wid)
        if kind == "lost":
            return lambda t: cmd.WorkersLost(now=t, worker_ids=(wid,))
        if kind == "calendar":
            # Dormant until the next minute: a cron expression the core resolves.
            every_minute = CalendarSchedule(cron="* * * * *")
            spec = msgspec.structs.replace(self._activity(), not_before=None, delay=every_minute)
            return lambda t: cmd.Submit(now=t, activities=(spec,))
        if kind == "cancel":
            live = sorted(self.node.core.activities.values(), key=lambda a: a.seq)
            if not live:
                return None
            aid = rng.choice(live).activity_id
            return lambda t: cmd.Cancel(now=t, activity_id=aid)
        state = (
            S.LEASED if kind == "start" or (kind == "renew" and rng.random() < 0.5) else S.EXECUTING
        )
        held = self._held(state)
        if not held:
            return None
        a = rng.choice(held)
        aid, token = a.activity_id, a.token
        if kind == "start":
            return lambda t: cmd.StartActivity(now=t, activity_id=aid, token=token)
        if kind == "complete":
            return lambda t: cmd.Complete(now=t, activity_id=aid, token=token)
        if kind == "fail":
            retryable = rng.random() < 0.7
            return lambda t: cmd.Fail(now=t, activity_id=aid, token=token, retryable=retryable)
        return lambda t: cmd.RenewLease(now=t, activity_id=aid, token=token)

    def _activity(self) -> Activity:
        rng = self.rng
        self.ids += 1
        return act(
            f"a{self.ids}",
            idempotent=rng.random() < 0.5,
            priority=rng.choice(list(Priority)),
            ordering_key=rng.choice([None, None, None, "k1", "k2"]),
            not_before=self.clock.now() + 5.0 if rng.random() < 0.15 else None,
            retry=RetryPolicy(max_attempts=rng.randint(1, 3), initial_backoff_s=1.0),
            tenant=rng.choice(["t1", "t2"]),
        )

    async def step(self) -> None:
        make = self.command()
        if make is None:
            return
        try:
            out = await self.node.execute(make)
        except (Conflict, NotFound, InvalidArgument):
            self.refused += 1
            return
        for wid in {d.lease.worker_id for d in out.decisions if type(d) is LeaseGranted}:
            if self.rng.random() < 0.5:
                await self.node.execute(lambda t, wid=wid: cmd.CancelPoll(now=t, worker_id=wid))


STEPS = 250
CHECKPOINTS = 5


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_recovery_rebuilds_the_state_of_the_last_acknowledged_command(
    location: Location, seed: int
) -> None:
    async def main() -> None:
        clock = VirtualClock()
        node = await started(location, clock)
        driver = Driver(node, clock, seed)
        checkpoints = set(random.Random(seed).sample(range(STEPS), CHECKPOINTS))
        for step in range(STEPS):
            await driver.step()
            if step in checkpoints:
                assert durable_digest(node.core) == await stored_digest(node.store, clock.now())
        assert driver.refused < STEPS // 2
        last_acknowledged = durable_digest(node.core)
        live = len(node.core.activities)
        await node.stop()

        clock.advance(1.0)
        again, report = await start(location, clock, digest_on_recovery=True)
        assert report.digest == last_acknowledged
        assert len(again.core.activities) <= live
        await again.stop()

    run(main)


# --------------------------------------------------------------------- recovery


def test_recovery_expires_stale_leases_requeues_with_counters_and_fails_closed(
    location: Location,
) -> None:
    async def main() -> None:
        clock = VirtualClock()
        node = await started(location, clock)
        await node.execute(lambda t: cmd.RegisterWorker(now=t, info=worker("w1")))
        await node.execute(
            lambda t: cmd.Submit(
                now=t,
                activities=(
                    act("idem", idempotent=True),
                    act("risky"),
                    act("unstarted"),
                    act("waiting"),
                ),
            )
        )
        tokens = await lease(node, "w1", 3)
        assert set(tokens) == {"idem", "risky", "unstarted"}
        for aid in ("idem", "risky"):
            await node.execute(
                lambda t, aid=aid: cmd.StartActivity(now=t, activity_id=aid, token=tokens[aid])
            )
        before = {aid: msgspec.structs.replace(a) for aid, a in node.core.activities.items()}
        await node.stop()

        clock.advance(CONFIG.lease_ttl_s * 2)  # every lease lapsed while no scheduler ran
        heard: list[Outcome] = []
        again = SchedulerNode(location.make(), CONFIG, clock=clock)
        again.listeners.append(heard.append)
        report = await again.start(background=False)
        assert report.diagnostics == []
        assert (report.activities, report.leases, report.workers) == (4, 3, 1)
        # Recovery never blames a worker for the time nobody served: every held lease
        # gets a fresh grace of one TTL (issue 15, docs/ha.md).
        assert (report.expired_leases, report.requeued) == (0, 0)
        recovered_at = clock.now()
        for aid in ("idem", "risky", "unstarted"):
            assert again.core.activities[aid].lease_expires_at == recovered_at + CONFIG.lease_ttl_s
        # The worker did not come back: one TTL later its leases lapse as before.
        clock.advance(CONFIG.lease_ttl_s + 0.001)
        await again.tick()
        assert (again.core.metrics.expired_leases, again.core.metrics.requeued) == (3, 2)
        core = again.core
        for aid in ("idem", "unstarted"):
            a, old = core.activities[aid], before[aid]
            assert a.state is S.QUEUED
            assert a.worker_id is None
            assert (a.attempt, a.failures) == (old.attempt, old.failures)
            assert a.infra_requeues == old.infra_requeues + 1
        assert core.activities["idem"].attempt == 1
        assert core.activities["waiting"].state is S.QUEUED
        assert "risky" not in core.activities
        failed = [d for o in heard for d in o.decisions if type(d) is ActivityFailed]
        assert [(d.activity_id, d.reason, d.may_have_executed) for d in failed] == [
            ("risky", "may_have_executed", True)
        ]
        last = {aid: (await again.store.history(aid))[-1] for aid in ("idem", "risky", "unstarted")}
        assert (last["idem"].from_state, last["idem"].to_state) == (S.EXECUTING, S.QUEUED)
        assert (last["idem"].reason, last["idem"].attempt) == ("lease_expired", 1)
        assert (last["unstarted"].from_state, last["unstarted"].to_state) == (S.LEASED, S.QUEUED)
        assert (last["risky"].to_state, last["risky"].reason) == (S.FAILED, "may_have_executed")

        # Dispatch resumes: fresh tokens, counters kept, the old tokens are fenced.
        renewed = await lease(again, "w1", 3)
        assert set(renewed) == {"idem", "unstarted", "waiting"}
        assert min(renewed.values()) > max(tokens.values())
        with pytest.raises(StaleLease):
            await again.execute(
                lambda t: cmd.Complete(now=t, activity_id="risky", token=tokens["risky"])
            )
        with pytest.raises(Conflict):
            await again.execute(
                lambda t: cmd.StartActivity(now=t, activity_id="idem", token=tokens["idem"])
            )
        assert durable_digest(core) == await stored_digest(again.store, clock.now())
        await again.stop()

    run(main)


def test_leases_that_outlive_a_restart_stay_with_their_worker(location: Location) -> None:
    async def main() -> None:
        clock = VirtualClock()
        node = await started(location, clock)
        await node.execute(lambda t: cmd.RegisterWorker(now=t, info=worker("w1")))
        await node.execute(lambda t: cmd.Submit(now=t, activities=(act("a1"), act("a2"))))
        tokens = await lease(node, "w1", 2)
        await node.execute(lambda t: cmd.StartActivity(now=t, activity_id="a1", token=tokens["a1"]))
        await node.stop()

        clock.advance(CONFIG.lease_ttl_s / 3)
        again = await started(location, clock)
        assert again.core.metrics.expired_leases == 0
        done = await again.execute(
            lambda t: cmd.Complete(now=t, activity_id="a1", token=tokens["a1"])
        )
        assert done.records
        await again.execute(
            lambda t: cmd.StartActivity(now=t, activity_id="a2", token=tokens["a2"])
        )
        # Its expiry was kept: it can still be renewed before it lapses.
        clock.advance(CONFIG.lease_ttl_s / 2)
        await again.execute(lambda t: cmd.RenewLease(now=t, activity_id="a2", token=tokens["a2"]))
        history = await again.store.history("a1")
        assert [t.to_state for t in history][-1] is S.COMPLETED
        await again.stop()

    run(main)


def test_recovery_declares_silent_workers_lost_after_their_grace_period(
    location: Location,
) -> None:
    async def main() -> None:
        clock = VirtualClock()
        node = await started(location, clock)
        info = worker("w1", heartbeat_interval_s=5.0)
        await node.execute(lambda t: cmd.RegisterWorker(now=t, info=info))
        await node.execute(lambda t: cmd.Submit(now=t, activities=(act("a1", idempotent=True),)))
        tokens = await lease(node, "w1", 1)
        await node.stop()

        clock.advance(3600.0)  # far past the heartbeat deadline, but the scheduler was down
        again = await started(location, clock)
        assert again.core.registry.workers["w1"].status is WorkerStatus.ACTIVE
        grace_s = info.heartbeat_interval_s * CONFIG.heartbeat_misses_max
        clock.advance(grace_s + 1.0)
        await again.tick()
        assert again.core.registry.workers["w1"].status is WorkerStatus.FAILED
        a1 = again.core.activities["a1"]
        assert a1.state is S.QUEUED
        assert a1.token == tokens["a1"]
        assert durable_digest(again.core) == await stored_digest(again.store, clock.now())
        await again.stop()

    run(main)


# -------------------------------------------------------------------- ownership


def test_a_second_node_on_the_same_store_is_refused_naming_the_holder(
    location: Location,
) -> None:
    async def main() -> None:
        clock = VirtualClock()
        holder = OwnerInfo(host="host-a", pid=4242, since="2026-01-01T00:00:00+00:00")
        first = await started(location, clock, owner=holder)
        second = SchedulerNode(
            location.make(),
            CONFIG,
            clock=clock,
            owner=OwnerInfo(host="host-b", pid=7, since="2026-01-01T00:00:01+00:00"),
        )
        with pytest.raises(OwnershipConflict) as caught:
            await second.start(background=False)
        assert "host host-a, pid 4242" in caught.value.message
        assert (caught.value.details["host"], caught.value.details["pid"]) == ("host-a", 4242)
        # The refused node touched nothing; the owner keeps working.
        await first.execute(lambda t: cmd.Submit(now=t, activities=(act("a1"),)))
        assert await first.store.existing_activity_ids(["a1"]) == {"a1"}
        await first.stop()

        third = await started(location, clock)
        assert "a1" in third.core.activities
        await third.stop()

    run(main)


# ------------------------------------------------------------------------ ticks


def test_tick_fires_delayed_activities_when_due(location: Location) -> None:
    async def main() -> None:
        clock = VirtualClock()
        node = await started(location, clock)
        await node.execute(lambda t: cmd.RegisterWorker(now=t, info=worker("w1")))
        due = clock.now() + 10.0
        await node.execute(lambda t: cmd.Submit(now=t, activities=(act("d1", not_before=due),)))
        await node.execute(lambda t: cmd.Poll(now=t, worker_id="w1", max_items=1))
        # A timer fires early_grant_s ahead: the grant carries the instant itself.
        assert node.core.next_wake_at(clock.now()) == due - node.core.config.early_grant_s
        clock.advance(9.0)
        assert grants(await node.tick()) == {}
        assert node.core.activities["d1"].state is S.DELAYED
        clock.advance(1.0)
        assert set(grants(await node.tick())) == {"d1"}
        states = [(t.from_state, t.to_state) for t in await node.store.history("d1")]
        assert states[-2:] == [(S.DELAYED, S.QUEUED), (S.QUEUED, S.LEASED)]
        await node.stop()

    run(main)


async def _wait_for(predicate: Callable[[], Awaitable[bool]]) -> None:
    loop = asyncio.get_running_loop()
    give_up = loop.time() + LOOP_WAIT_MAX_S
    while not await predicate():
        assert loop.time() < give_up, "the background loop did not act in time"
        await asyncio.sleep(0.01)


def test_the_background_loop_ticks_when_the_core_asks_and_survives_a_restart(
    location: Location,
) -> None:
    async def main() -> None:
        clock = VirtualClock()
        store, port = faulty(location)
        node = SchedulerNode(port, CONFIG, clock=clock)
        await node.start(background=True)
        await node.execute(lambda t: cmd.RegisterWorker(now=t, info=worker("w1")))

        async def poke() -> bool:
            """A command without records: it only wakes the loop (False once refused)."""
            try:
                await node.execute(lambda t: cmd.Heartbeat(now=t, worker_id="w1"))
            except StoreUnavailable:
                return False
            return True

        async def state_of(aid: str) -> ActivityState:
            return (await node.store.history(aid))[-1].to_state

        async def fired(aid: str) -> bool:
            await poke()
            return await state_of(aid) is S.QUEUED

        due = clock.now() + 10.0
        await node.execute(lambda t: cmd.Submit(now=t, activities=(act("d1", not_before=due),)))
        clock.advance(10.0)
        await _wait_for(lambda: fired("d1"))

        # The loop's own tick fails to commit: the node stops, and so does the loop.
        due = clock.now() + 5.0
        await node.execute(lambda t: cmd.Submit(now=t, activities=(act("x", not_before=due),)))
        store.fail_with = StoreUnavailable("gone")
        clock.advance(5.0)
        await _wait_for(lambda: _not(poke()))
        store.fail_with = None
        # restart() brings both back: the core reloaded, the loop ticking again.
        await node.restart()
        assert node.core.activities["x"].state is S.QUEUED  # the recovery tick fired it
        due = clock.now() + 5.0
        await node.execute(lambda t: cmd.Submit(now=t, activities=(act("d2", not_before=due),)))
        clock.advance(5.0)
        await _wait_for(lambda: fired("d2"))
        await node.stop()

    run(main)


async def _not(value: Awaitable[bool]) -> bool:
    return not await value


def test_stop_returns_right_after_a_command_woke_the_loop(location: Location) -> None:
    async def main() -> None:
        clock = VirtualClock()
        node = SchedulerNode(location.make(), CONFIG, clock=clock)
        await node.start(background=True)
        await node.execute(lambda t: cmd.RegisterWorker(now=t, info=worker("w1")))
        for _ in range(3):
            await asyncio.sleep(0)  # the loop is now waiting for its next wake-up
        # No records, so no await: the wake-up and the stop land in one loop turn.
        await node.execute(lambda t: cmd.Heartbeat(now=t, worker_id="w1"))
        stopping = asyncio.create_task(node.stop())
        done, _ = await asyncio.wait({stopping}, timeout=LOOP_WAIT_MAX_S)
        if not done:  # the loop swallowed its cancellation; cancel again to clean up
            assert node._loop_task is None
            for task in asyncio.all_tasks():
                if task.get_name() == "wf-scheduler-ticks":
                    task.cancel()
            await stopping
        assert done, "stop() hung: the tick loop ignored its cancellation"

    run(main)
