"""The Store contract, run against every backend (``store_factory``: sqlite, postgres).

Every scenario drives a real :class:`SchedulerCore`, appends each outcome's
records to the store (persist before acknowledging), then rebuilds a core from
``store.load()`` through :func:`wf.store.loader.build_snapshot` and
:func:`wf.scheduler.recovery.restore` and requires the same durable digest as
the live core: the state after recovery equals the state at the last
acknowledged transition.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec
import pytest
from _store_backends import Backend

from wf.errors import (
    AlreadyExists,
    Conflict,
    CorruptRecord,
    InvalidArgument,
    NotFound,
    OwnershipConflict,
    StoreUnavailable,
)
from wf.scheduler import commands as cmd
from wf.scheduler.config import SchedulerConfig, StealingConfig
from wf.scheduler.dispatcher import SchedulerCore
from wf.scheduler.model import (
    Activity,
    ActivityState,
    Lease,
    Priority,
    RetryPolicy,
    WorkerInfo,
)
from wf.scheduler.outputs import (
    ActivitySubmitted,
    LeaseGranted,
    LeaseRenewed,
    Outcome,
    Record,
    Transition,
    WorkerUpserted,
)
from wf.scheduler.recovery import durable_digest, restore
from wf.store import codec
from wf.store.loader import build_snapshot
from wf.store.protocol import (
    RUN_LIVE_STATUSES,
    ArtifactRow,
    DeploymentRow,
    Diagnostic,
    OccurrenceRow,
    OwnerInfo,
    RunRow,
    ScheduleRow,
    Store,
    StoredState,
)

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
S = ActivityState
R = TypeVar("R")


def run(main: Callable[[], Awaitable[R]]) -> R:
    """Run one async test body on a fresh loop."""

    async def wrapper() -> R:
        return await main()

    return asyncio.run(wrapper())


def owner(pid: int | None = None, host: str | None = None) -> OwnerInfo:
    return OwnerInfo(
        host=host or socket.gethostname(),
        pid=os.getpid() if pid is None else pid,
        since="2026-01-01T00:00:00Z",
    )


def act(activity_id: str, **kw: Any) -> Activity:
    kw.setdefault("activity_type", "t")
    return Activity(activity_id=activity_id, **kw)


class Recorder:
    """A real core whose every outcome is appended to the store before going on."""

    def __init__(self, store: Store, config: SchedulerConfig | None = None) -> None:
        self.store = store
        self.config = config or SchedulerConfig()
        self.core = SchedulerCore(self.config)
        self.now = T0
        self.records: list[Record] = []

    async def do(self, command_type: type[Any], **kw: Any) -> Outcome:
        out = self.core.handle(command_type(now=self.now, **kw))
        await self.store.append(out.records)
        self.records.extend(out.records)
        return out

    async def register(self, worker_id: str, **kw: Any) -> Outcome:
        kw.setdefault("max_concurrency", 10)
        kw.setdefault("heartbeat_interval_s", 3600.0)
        return await self.do(cmd.RegisterWorker, info=WorkerInfo(worker_id=worker_id, **kw))

    async def submit(self, *activities: Activity) -> Outcome:
        return await self.do(cmd.Submit, activities=activities)

    async def lease(self, worker_id: str, n: int = 1) -> dict[str, Lease]:
        out = await self.do(cmd.Poll, worker_id=worker_id, max_items=n)
        await self.do(cmd.CancelPoll, worker_id=worker_id)
        return {d.lease.activity_id: d.lease for d in out.decisions if isinstance(d, LeaseGranted)}

    def transitions(self, activity_id: str) -> list[Transition]:
        return [
            r for r in self.records if isinstance(r, Transition) and r.activity_id == activity_id
        ]


async def restored(store: Store, config: SchedulerConfig, now: float) -> SchedulerCore:
    """The core recovery rebuilds from the store (no diagnostics allowed)."""
    stored = await store.load()
    snap, diagnostics = build_snapshot(stored, config, now)
    assert diagnostics == []
    return restore(snap)


async def assert_same_state(rec: Recorder) -> StoredState:
    """The store restores the recorder's core exactly (durable digest and finished list)."""
    stored = await rec.store.load()
    snap, diagnostics = build_snapshot(stored, rec.config, rec.now)
    assert diagnostics == []
    core = restore(snap)
    live = rec.core
    assert {a.activity_id: a for a in stored.activities}.keys() == live.activities.keys()
    for a in stored.activities:
        assert a == msgspec.structs.replace(live.activities[a.activity_id], queue_ticket=0)
    assert stored.finished == list(live.finished.items())
    assert (stored.seq, stored.token, stored.worker_seq) == (
        live.seq,
        live.leases.token,
        live.registry.seq,
    )
    assert durable_digest(core) == durable_digest(live)
    return stored


async def rich_history(rec: Recorder) -> None:
    """Every record kind and most lifecycle paths, on a real core."""
    await rec.register("w1", capabilities=frozenset({"gpu"}), labels={"locality": "eu"})
    await rec.register("w2", max_concurrency=1)
    await rec.submit(
        act("a1", payload=b"\x00\xffpayload", priority=Priority.HIGH, tenant="acme"),
        act("a2", capabilities=frozenset({"gpu"}), correlation_id="corr-2"),
        act("a3", retry=RetryPolicy(max_attempts=3, initial_backoff_s=5.0)),
        act("a4", idempotent=True, workflow_id="run-000001"),
        act("a5", not_before=T0 + 600.0),
        act("k1", ordering_key="key"),
        act("k2", ordering_key="key"),
        act("c1"),
    )
    leases = await rec.lease("w1", 4)
    assert set(leases) == {"a1", "a2", "a3", "a4"}
    rec.now += 1
    for lease in leases.values():
        await rec.do(cmd.StartActivity, activity_id=lease.activity_id, token=lease.token)
    rec.now += 1
    await rec.do(cmd.RenewLease, activity_id="a1", token=leases["a1"].token)
    await rec.do(cmd.Complete, activity_id="a1", token=leases["a1"].token, result=b"ok")
    await rec.do(
        cmd.Fail,
        activity_id="a3",
        token=leases["a3"].token,
        error_type="Boom",
        message="x",
        stack_trace='Traceback (most recent call last):\n  File "a3.py", line 1\nBoom: x \u2713',
    )
    await rec.do(cmd.Cancel, activity_id="c1")
    w2 = await rec.lease("w2", 1)
    assert len(w2) == 1
    await rec.do(cmd.WorkersLost, worker_ids=("w2",))
    rec.now += 120
    await rec.do(cmd.Tick)
    await rec.do(cmd.ShutdownWorker, worker_id="w1")
    await rec.register("w3", max_concurrency=5)
    await rec.lease("w3", 2)


# ---------------------------------------------------------------- round trips


def test_every_record_kind_round_trips(store_factory: Backend) -> None:
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            rec = Recorder(store)
            await rich_history(rec)
            kinds = {type(r) for r in rec.records}
            assert kinds == {
                ActivitySubmitted,
                Transition,
                LeaseRenewed,
                WorkerUpserted,
            }
            stored = await assert_same_state(rec)
            assert {w.info.worker_id for w in stored.workers} == {"w1", "w2", "w3"}
            assert stored.diagnostics == []
        finally:
            await store.close()

    run(main)


def test_lease_renewal_and_steal_round_trip(store_factory: Backend) -> None:
    config = SchedulerConfig(stealing=StealingConfig(enabled=True))

    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            rec = Recorder(store, config)
            await rec.register("busy", max_concurrency=5)
            await rec.submit(*(act(f"s{i}") for i in range(4)))
            leases = await rec.lease("busy", 4)
            rec.now += 10
            await rec.do(cmd.RenewLease, activity_id="s0", token=leases["s0"].token)
            await rec.register("idle", max_concurrency=2)
            rec.now += 1
            await rec.do(cmd.Poll, worker_id="idle", max_items=2)
            stolen = [t for t in rec.records if isinstance(t, Transition) and t.reason == "stolen"]
            assert stolen, "the scenario must exercise a steal"
            await assert_same_state(rec)
        finally:
            await store.close()

    run(main)


def test_appends_are_durable_and_ordered_across_reopen(store_factory: Backend) -> None:
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        rec = Recorder(store)
        await rich_history(rec)
        await store.close()
        reopened = store_factory.make()
        await reopened.open()
        try:
            rec.store = reopened
            await assert_same_state(rec)
            # And it keeps going where it stood.
            core = await restored(reopened, rec.config, rec.now)
            rec.core = core
            await rec.submit(act("after-reopen"))
            await assert_same_state(rec)
        finally:
            await reopened.close()

    run(main)


def test_history_is_complete_and_in_order(store_factory: Backend) -> None:
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            rec = Recorder(store)
            await rich_history(rec)
            ids = {r.activity_id for r in rec.records if isinstance(r, Transition)}
            assert len(ids) > 5
            for aid in sorted(ids):
                assert await store.history(aid) == rec.transitions(aid), aid
            assert await store.history("never-submitted") == []
            # Append-only: later records add to the history and never rewrite it.
            before = await store.history("a3")
            rec.now += 3600
            await rec.do(cmd.Tick)
            await rec.lease("w3", 5)
            after = await store.history("a3")
            assert after[: len(before)] == before
            assert after == rec.transitions("a3")
        finally:
            await store.close()

    run(main)


def test_results_round_trip_through_history(store_factory: Backend) -> None:
    big = bytes(range(256)) * 256  # 64 KiB, every byte value

    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            rec = Recorder(store)
            await rec.register("w1")
            await rec.submit(act("r1"), act("r2"), act("r3"))
            leases = await rec.lease("w1", 3)
            for lease in leases.values():
                await rec.do(cmd.StartActivity, activity_id=lease.activity_id, token=lease.token)
            await rec.do(cmd.Complete, activity_id="r1", token=leases["r1"].token, result=big)
            await rec.do(cmd.Complete, activity_id="r2", token=leases["r2"].token, result=b"")
            await rec.do(cmd.Fail, activity_id="r3", token=leases["r3"].token, retryable=False)
            for aid in ("r1", "r2", "r3"):
                assert await store.history(aid) == rec.transitions(aid), aid
            assert (await store.history("r1"))[-1].result == big
            assert (await store.history("r2"))[-1].result == b""  # empty, not missing
            assert all(t.result is None for t in (await store.history("r3")))
            assert all(t.result is None for t in (await store.history("r1"))[:-1])
            await assert_same_state(rec)
        finally:
            await store.close()
        reopened = store_factory.make()
        await reopened.open()
        try:
            completed = (await reopened.history("r1"))[-1]
            assert (completed.to_state, completed.result) == (S.COMPLETED, big)
        finally:
            await reopened.close()

    run(main)


def test_existing_activity_ids(store_factory: Backend) -> None:
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            rec = Recorder(store)
            await rec.register("w1")
            ids = [f"e{i:04d}" for i in range(1200)]
            for start in range(0, len(ids), 400):
                await rec.submit(*(act(i) for i in ids[start : start + 400]))
            await rec.do(cmd.Cancel, activity_id="e0007")  # finished ids still count
            asked = [*ids, "nope", "e9999", "e0007", "e0001"]
            assert await store.existing_activity_ids(asked) == set(ids)
            assert await store.existing_activity_ids([]) == set()
            assert await store.existing_activity_ids(["nope"]) == set()
        finally:
            await store.close()

    run(main)


# ---------------------------------------------------------------- atomicity


def test_a_duplicate_lease_fails_its_batch_and_stores_nothing(store_factory: Backend) -> None:
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            rec = Recorder(store)
            await rec.register("w1")
            await rec.submit(act("x1"))
            await rec.lease("w1")
            granted = next(t for t in rec.transitions("x1") if t.to_state is S.LEASED)
            history = await store.history("x1")
            innocent = ActivitySubmitted(
                at=rec.now, activity=act("innocent", seq=99, submitted_at=rec.now)
            )
            with pytest.raises(StoreUnavailable):
                await store.append([innocent, granted])
            assert await store.history("x1") == history
            assert await store.existing_activity_ids(["innocent"]) == set()
            stored = await store.load()
            assert stored.seq == rec.core.seq  # the failed batch raised no counter
            await assert_same_state(rec)
            # A failed commit fences the store: later appends are refused too,
            # until the owner (who reloads its state) lifts the fence.
            with pytest.raises(StoreUnavailable):
                await store.append([ActivitySubmitted(at=rec.now, activity=act("after", seq=98))])
            assert await store.existing_activity_ids(["after"]) == set()
            await store.clear_write_fence()
            await rec.submit(act("x2"))
            await assert_same_state(rec)
        finally:
            await store.close()

    run(main)


def test_counters_never_go_backwards(store_factory: Backend) -> None:
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            rec = Recorder(store)
            await rec.register("w1")
            await rec.register("w2")
            await rec.submit(act("c1"), act("c2"), act("c3"))
            await rec.lease("w1", 3)
            before = await store.load()
            assert (before.seq, before.token, before.worker_seq) == (3, 3, 2)
            w1 = rec.core.registry.workers["w1"]
            low = [
                WorkerUpserted(
                    at=rec.now,
                    info=w1.info,
                    seq=1,
                    status=w1.status,
                    registered_at=w1.registered_at,
                ),
                ActivitySubmitted(at=rec.now, activity=act("low", seq=-5, submitted_at=rec.now)),
            ]
            await store.append(low)
            after = await store.load()
            assert (after.seq, after.token, after.worker_seq) == (3, 3, 2)
        finally:
            await store.close()

    run(main)


def test_concurrent_appends_all_commit_in_per_task_order(store_factory: Backend) -> None:
    tasks_n = 40
    steps_n = 6

    def records(i: int) -> list[list[Record]]:
        aid = f"task{i}"
        token = 1000 + i
        base: dict[str, Any] = {"activity_id": aid, "attempt": 0, "failures": 0}
        base["infra_requeues"] = 0
        chain = [(S.READY, S.QUEUED), (S.QUEUED, S.LEASED), (S.LEASED, S.EXECUTING)]
        out: list[list[Record]] = [
            [ActivitySubmitted(at=T0, activity=act(aid, seq=i + 1, submitted_at=T0))]
        ]
        for k, (frm, to) in enumerate(chain):
            held = to in (S.LEASED, S.EXECUTING)
            out.append(
                [
                    Transition(
                        at=T0 + k,
                        from_state=frm,
                        to_state=to,
                        reason=f"step{k}",
                        token=token if held else 0,
                        worker_id="w" if held else None,
                        lease_expires_at=T0 + 30 if held else 0.0,
                        **base,
                    )
                ]
            )
        out.append([LeaseRenewed(at=T0 + 5, activity_id=aid, token=token, expires_at=T0 + 60)])
        out.append(
            [
                Transition(
                    at=T0 + 6,
                    from_state=S.EXECUTING,
                    to_state=S.COMPLETED,
                    reason="done",
                    token=token,
                    worker_id="w",
                    lease_expires_at=T0 + 60,
                    **base,
                )
            ]
        )
        assert len(out) == steps_n
        return out

    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            plans = {i: records(i) for i in range(tasks_n)}

            async def task(i: int) -> None:
                for batch in plans[i]:
                    await store.append(batch)
                    await asyncio.sleep(0)

            await asyncio.gather(*(task(i) for i in range(tasks_n)))
            for i in range(tasks_n):
                expected = [r for batch in plans[i] for r in batch if isinstance(r, Transition)]
                assert await store.history(f"task{i}") == expected
            stored = await store.load()
            assert stored.activities == []
            assert stored.seq == tasks_n
            assert stored.token == 1000 + tasks_n - 1
            assert sorted(aid for aid, _ in stored.finished) == sorted(
                f"task{i}" for i in range(tasks_n)
            )
        finally:
            await store.close()

    run(main)


# ---------------------------------------------------------------- ownership


def test_a_second_owner_is_refused_naming_the_holder(store_factory: Backend) -> None:
    async def main() -> None:
        first, second = store_factory.make(), store_factory.make()
        await first.open()
        await second.open()
        try:
            holder = owner(pid=4242, host="node-a")
            await first.acquire_ownership(holder)
            with pytest.raises(OwnershipConflict) as refused:
                await second.acquire_ownership(owner(host="node-b"))
            message = str(refused.value)
            assert "node-a" in message
            assert "4242" in message
            assert holder.since in message
            details = refused.value.details
            assert (details["host"], details["pid"], details["since"]) == (
                "node-a",
                4242,
                holder.since,
            )
            await first.release_ownership()
            await first.release_ownership()  # idempotent
            await second.acquire_ownership(owner(host="node-b"))
            with pytest.raises(OwnershipConflict, match="node-b"):
                await first.acquire_ownership(holder)
        finally:
            await second.close()
            await first.close()
        # close() released it.
        third = store_factory.make()
        await third.open()
        try:
            await third.acquire_ownership(owner())
        finally:
            await third.close()

    run(main)


# ---------------------------------------------------------------- migrations


def test_migrations_are_recorded_and_idempotent(store_factory: Backend) -> None:
    known = [(v, name) for v, name, _sql in codec.migrations(store_factory.name)]

    async def main() -> None:
        for _ in range(2):
            store = store_factory.make()
            await store.open()
            try:
                assert await store.schema_version() == known[-1][0]
            finally:
                await store.close()
        rows = store_factory.sql("SELECT version, name FROM schema_migrations ORDER BY version")
        assert [(int(v), n) for v, n in rows] == known

    run(main)


def test_a_newer_schema_is_refused(store_factory: Backend) -> None:
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        await store.close()
        store_factory.sql(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
            9999,
            "9999_from_the_future.sql",
            "2030-01-01T00:00:00Z",
        )
        newer = store_factory.make()
        with pytest.raises(CorruptRecord, match="9999"):
            await newer.open()
        await newer.close()

    run(main)


# ---------------------------------------------------------------- corruption


async def corrupt_setup(rec: Recorder) -> None:
    await rec.register("w1")
    await rec.register("w2")
    await rec.submit(*(act(f"ok{i}") for i in range(5)))
    await rec.submit(act("garbage"), act("badstate"))
    await rec.lease("w1", 2)  # ok0, ok1 leased by w1
    await rec.submit(act("orphaned"))
    leases = await rec.lease("w2", 1)
    assert set(leases) == {"ok2"}


def _ids(diagnostics: list[Diagnostic], kind: str) -> set[str | None]:
    return {d.activity_id for d in diagnostics if d.kind == kind}


def test_corrupt_rows_fail_closed_and_the_rest_loads(store_factory: Backend) -> None:
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            rec = Recorder(store)
            await corrupt_setup(rec)
            assert await store.check() == []
            store_factory.sql(
                "UPDATE activities SET spec = ? WHERE activity_id = ?",
                b"\xc1not msgpack",
                "garbage",
            )
            store_factory.sql(
                "UPDATE activities SET state = ? WHERE activity_id = ?", "bogus", "badstate"
            )
            store_factory.sql("DELETE FROM workers WHERE worker_id = ?", "w2")

            stored = await store.load()
            malformed = [d for d in stored.diagnostics if d.kind == "malformed_row"]
            assert {d.activity_id for d in malformed} == {"garbage", "badstate"}
            assert all(d.table == "activities" and d.key == d.activity_id for d in malformed)
            loaded = {a.activity_id for a in stored.activities}
            assert loaded.isdisjoint({"garbage", "badstate"})
            snap, diagnostics = build_snapshot(stored, rec.config, rec.now)
            blocked = [d for d in diagnostics if d.kind == "unknown_worker"]
            assert [(d.activity_id, d.key) for d in blocked] == [("ok2", "ok2")]
            core = restore(snap)  # everything else still loads and restores
            assert set(core.activities) == {"ok0", "ok1", "ok3", "ok4", "orphaned"}
            assert core.activities["ok0"].state is S.LEASED
            assert core.registry.workers["w1"].leases.keys() == {"ok0", "ok1"}

            found = await store.check()
            assert {"garbage", "badstate"} <= _ids(found, "malformed_row")
            assert _ids(found, "unknown_worker") == {"ok2"}
            assert "badstate" in _ids(found, "state_mismatch")
            for d in found:
                assert d.key
                assert d.table
                assert d.message
        finally:
            await store.close()

    run(main)


def test_check_reports_orphan_transitions_and_counters_behind(store_factory: Backend) -> None:
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            rec = Recorder(store)
            await rec.register("w1")
            await rec.submit(act("o1"), act("o2"))
            await rec.lease("w1", 2)
            store_factory.sql("DELETE FROM activities WHERE activity_id = ?", "o2")
            store_factory.sql("UPDATE counters SET value = 0 WHERE name = ?", "token")
            found = await store.check()
            orphans = [d for d in found if d.kind == "unknown_activity"]
            assert orphans
            assert {d.activity_id for d in orphans} == {"o2"}
            assert all(d.table == "transitions" for d in orphans)
            behind = [d for d in found if d.kind == "counter_behind"]
            assert [d.key for d in behind] == ["token"]
        finally:
            await store.close()

    run(main)


# ---------------------------------------------------------- runtime catalog


def _artifact_row(artifact_id: str, version: int, plan: bytes, at: float = T0) -> ArtifactRow:
    import hashlib

    return ArtifactRow(
        artifact_id=artifact_id,
        version=version,
        plan=plan,
        content_hash="sha256:" + hashlib.sha256(plan).hexdigest(),
        created_at=at,
    )


def test_artifacts_are_immutable_and_idempotent_by_content(store_factory: Backend) -> None:
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            first = _artifact_row("hello", 1, b'{"nodes":[1]}')
            assert await store.put_artifact(first) == first
            # The same content again: nothing changes, the original row comes back.
            again = await store.put_artifact(_artifact_row("hello", 1, b'{"nodes":[1]}', T0 + 5))
            assert again == first
            with pytest.raises(AlreadyExists) as refused:
                await store.put_artifact(_artifact_row("hello", 1, b'{"nodes":[2]}', T0 + 9))
            assert refused.value.details["content_hash"] == first.content_hash
            assert await store.get_artifact("hello", 1) == first
            second = _artifact_row("hello", 2, b'{"nodes":[2]}', T0 + 10)
            other = _artifact_row("bye", 7, b'{"nodes":[3]}', T0 + 11)
            await store.put_artifact(second)
            await store.put_artifact(other)
            assert await store.get_artifact("hello") == second  # latest
            assert await store.get_artifact("hello", 3) is None
            assert await store.get_artifact("missing") is None
            assert await store.list_artifacts("hello") == [first, second]
            assert await store.list_artifacts() == [other, first, second]
        finally:
            await store.close()
        # Durable across reopen.
        reopened = store_factory.make()
        await reopened.open()
        try:
            assert await reopened.get_artifact("hello", 1) == first
        finally:
            await reopened.close()

    run(main)


def test_concurrent_creates_of_one_version_have_one_winner(store_factory: Backend) -> None:
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            rows_ = [_artifact_row("race", 1, f'{{"n":{i}}}'.encode()) for i in range(8)]
            results = await asyncio.gather(
                *(store.put_artifact(r) for r in rows_), return_exceptions=True
            )
            winners = [r for r in results if isinstance(r, ArtifactRow)]
            assert len(winners) == 1
            assert all(isinstance(r, AlreadyExists) for r in results if r not in winners)
            assert await store.list_artifacts("race") == winners
        finally:
            await store.close()

    run(main)


def _deployment_row(revision: int, body: bytes = b"{}") -> DeploymentRow:
    return DeploymentRow(
        deployment_id="hello.default", body=body, revision=revision, updated_at=T0 + revision
    )


def test_deployments_use_optimistic_revisions(store_factory: Backend) -> None:
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            assert await store.get_deployment("hello.default") is None
            with pytest.raises(Conflict) as missing:
                await store.put_deployment(_deployment_row(2), expected_revision=1)
            assert missing.value.details["current_revision"] == 0
            await store.put_deployment(_deployment_row(1, b"one"), expected_revision=0)
            with pytest.raises(Conflict) as taken:
                await store.put_deployment(_deployment_row(1, b"dup"), expected_revision=0)
            assert taken.value.details["current_revision"] == 1
            await store.put_deployment(_deployment_row(2, b"two"), expected_revision=1)
            with pytest.raises(Conflict) as stale:
                await store.put_deployment(_deployment_row(2, b"late"), expected_revision=1)
            assert stale.value.details["current_revision"] == 2
            with pytest.raises(InvalidArgument):
                await store.put_deployment(_deployment_row(5), expected_revision=2)
            assert await store.get_deployment("hello.default") == _deployment_row(2, b"two")
            other = DeploymentRow(deployment_id="a.b", body=b"x", revision=1, updated_at=T0)
            await store.put_deployment(other, expected_revision=0)
            assert await store.list_deployments() == [other, _deployment_row(2, b"two")]
            # Racing saves from the same base: exactly one wins.
            results = await asyncio.gather(
                *(
                    store.put_deployment(_deployment_row(3, b"r%d" % i), expected_revision=2)
                    for i in range(6)
                ),
                return_exceptions=True,
            )
            assert sum(r is None for r in results) == 1
            assert all(isinstance(r, Conflict) for r in results if r is not None)
        finally:
            await store.close()

    run(main)


def test_catalog_writes_do_not_disturb_appends(store_factory: Backend) -> None:
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            sub = act("c1", seq=1)
            record = ActivitySubmitted(activity=sub, at=T0)
            await asyncio.gather(
                store.append([record]),
                store.put_artifact(_artifact_row("mix", 1, b"{}")),
                store.put_deployment(_deployment_row(1), expected_revision=0),
            )
            assert await store.existing_activity_ids(["c1"]) == {"c1"}
            assert await store.get_artifact("mix", 1) is not None
        finally:
            await store.close()

    run(main)


# ------------------------------------------------------------------------ runs


def _run_row(**kw: Any) -> RunRow:
    """A run as the runtime hands it to ``insert_run`` (seq, run_id are assigned)."""
    fields: dict[str, Any] = {
        "run_id": "",
        "seq": 0,
        "deployment_id": "hello.default",
        "tenant": "acme",
        "status": "admitted",
        "schedule_id": None,
        "body": b"{}",
        "revision": 1,
        "created_at": T0,
        "updated_at": T0,
    }
    fields.update(kw)
    return RunRow(**fields)


def _next(row: RunRow, **kw: Any) -> RunRow:
    """The run's next revision with ``kw`` changed."""
    return msgspec.structs.replace(row, revision=row.revision + 1, **kw)


def test_insert_run_numbers_runs_and_never_reuses_a_number(store_factory: Backend) -> None:
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            first = await store.insert_run(
                _run_row(run_id="ignored", seq=77, revision=9, body=b'{"n":1}')
            )
            assert first == _run_row(run_id="run-000001", seq=1, revision=1, body=b'{"n":1}')
            second = await store.insert_run(_run_row(schedule_id="nightly", tenant="globex"))
            assert (second.run_id, second.seq, second.revision) == ("run-000002", 2, 1)
            assert await store.get_run("run-000001") == first
            assert await store.get_run("run-000002") == second
            assert await store.get_run("run-000003") is None
            assert await store.check() == []
        finally:
            await store.close()
        # A deleted run's number is not handed out again: numbers come from the
        # counter, not from the rows.
        store_factory.sql("DELETE FROM runs WHERE run_id = ?", "run-000002")
        reopened = store_factory.make()
        await reopened.open()
        try:
            assert await reopened.get_run("run-000001") == first
            third = await reopened.insert_run(_run_row())
            assert (third.run_id, third.seq) == ("run-000003", 3)
            # Past six digits the id just grows.
            store_factory.sql("UPDATE counters SET value = ? WHERE name = ?", 999_999, "run_seq")
            big = await reopened.insert_run(_run_row())
            assert (big.run_id, big.seq) == ("run-1000000", 1_000_000)
            assert [r.seq for r in await reopened.list_runs()] == [1, 3, 1_000_000]
        finally:
            await reopened.close()

    run(main)


def test_concurrent_insert_runs_get_distinct_consecutive_numbers(store_factory: Backend) -> None:
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            inserted = await asyncio.gather(
                *(store.insert_run(_run_row(body=b"%d" % i)) for i in range(20))
            )
            assert sorted(r.seq for r in inserted) == list(range(1, 21))
            assert len({r.run_id for r in inserted}) == 20
            stored = await store.list_runs(limit=100)
            assert sorted(stored, key=lambda r: r.seq) == sorted(inserted, key=lambda r: r.seq)
            assert (await store.insert_run(_run_row())).seq == 21
        finally:
            await store.close()

    run(main)


def test_update_run_uses_optimistic_revisions(store_factory: Backend) -> None:
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            base = await store.insert_run(_run_row(schedule_id="nightly"))
            running = _next(base, status="running", body=b"r2", updated_at=T0 + 5)
            await store.update_run(running, expected_revision=1)
            assert await store.get_run(base.run_id) == running

            # Stale: refused with the current revision, and nothing changed.
            with pytest.raises(Conflict) as stale:
                await store.update_run(_next(base, status="failed"), expected_revision=1)
            assert stale.value.details["current_revision"] == 2
            assert await store.get_run(base.run_id) == running

            # Unknown run.
            ghost = _next(base, run_id="run-999999")
            with pytest.raises(NotFound):
                await store.update_run(ghost, expected_revision=1)
            assert await store.get_run("run-999999") is None

            # Revisions that do not follow are a caller bug.
            with pytest.raises(InvalidArgument):
                await store.update_run(
                    msgspec.structs.replace(running, revision=5), expected_revision=2
                )
            with pytest.raises(InvalidArgument):
                await store.update_run(
                    msgspec.structs.replace(running, revision=1), expected_revision=0
                )
            assert await store.get_run(base.run_id) == running

            # Only status, body, revision and updated_at change.
            moved = _next(
                running,
                status="completed",
                body=b"r3",
                updated_at=T0 + 9,
                tenant="other",
                deployment_id="other.dep",
                schedule_id=None,
                created_at=T0 + 1,
                seq=42,
            )
            await store.update_run(moved, expected_revision=2)
            assert await store.get_run(base.run_id) == _next(
                running, status="completed", body=b"r3", updated_at=T0 + 9
            )

            # Racing updates from the same base: exactly one wins.
            results = await asyncio.gather(
                *(
                    store.update_run(_next(moved, body=b"race%d" % i), expected_revision=3)
                    for i in range(6)
                ),
                return_exceptions=True,
            )
            assert sum(r is None for r in results) == 1
            assert all(isinstance(r, Conflict) for r in results if r is not None)
            stored = await store.get_run(base.run_id)
            assert stored is not None
            assert stored.revision == 4
        finally:
            await store.close()

    run(main)


async def _seed_runs(store: Store) -> list[RunRow]:
    """Nine runs over two deployments, two schedules, three tenants, several statuses."""
    specs = [
        ("a.x", "t1", "admitted", None),
        ("a.x", "t2", "running", "s1"),
        ("b.y", "t1", "completed", "s1"),
        ("a.x", "t3", "failed", None),
        ("b.y", "t2", "interrupted", "s2"),
        ("a.x", "t1", "running", "s1"),
        ("b.y", "t3", "cancelled", None),
        ("a.x", "t2", "completed", "s2"),
        ("b.y", "t1", "admitted", "s1"),
    ]
    inserted = []
    for i, (deployment_id, tenant, status, schedule_id) in enumerate(specs):
        inserted.append(
            await store.insert_run(
                _run_row(
                    deployment_id=deployment_id,
                    tenant=tenant,
                    status=status,
                    schedule_id=schedule_id,
                    body=b'{"i":%d}' % i,
                    created_at=T0 + i,
                    updated_at=T0 + i,
                )
            )
        )
    return inserted


def test_list_runs_pages_and_filters(store_factory: Backend) -> None:
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            runs = await _seed_runs(store)
            assert [r.seq for r in runs] == list(range(1, 10))
            assert await store.list_runs() == runs

            # Paging: after_seq is the last seq of the previous page.
            pages: list[list[RunRow]] = []
            after = 0
            while page := await store.list_runs(after_seq=after, limit=4):
                pages.append(page)
                after = page[-1].seq
            assert [[r.seq for r in p] for p in pages] == [[1, 2, 3, 4], [5, 6, 7, 8], [9]]
            assert await store.list_runs(limit=0) == []

            def seqs(found: list[RunRow]) -> list[int]:
                return [r.seq for r in found]

            assert seqs(await store.list_runs(deployment_id="a.x")) == [1, 2, 4, 6, 8]
            assert seqs(await store.list_runs(schedule_id="s1")) == [2, 3, 6, 9]
            assert seqs(await store.list_runs(statuses=["running", "admitted"])) == [1, 2, 6, 9]
            assert seqs(await store.list_runs(tenants=("t2", "t3"))) == [2, 4, 5, 7, 8]
            assert seqs(await store.list_runs(tenants=["t1"], statuses=["completed"])) == [3]
            assert seqs(
                await store.list_runs(
                    deployment_id="a.x", schedule_id="s1", statuses=["running"], tenants=["t1"]
                )
            ) == [6]
            # Filters and paging together.
            assert seqs(await store.list_runs(deployment_id="a.x", after_seq=2, limit=2)) == [4, 6]
            # An empty list matches nothing; unknown values match nothing.
            assert await store.list_runs(statuses=[]) == []
            assert await store.list_runs(tenants=[]) == []
            assert await store.list_runs(deployment_id="nope") == []
            # Values are bound parameters, never SQL.
            assert await store.list_runs(deployment_id="a.x' OR '1'='1") == []
            assert await store.list_runs(statuses=["x') OR ('1'='1"]) == []
            # A bare string is not a list of statuses.
            with pytest.raises(InvalidArgument):
                await store.list_runs(statuses="running")
            with pytest.raises(InvalidArgument):
                await store.list_runs(limit=-1)
        finally:
            await store.close()

    run(main)


def test_live_runs_are_the_unfinished_ones_in_seq_order(store_factory: Backend) -> None:
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            assert await store.live_runs() == []
            runs = await _seed_runs(store)
            live = await store.live_runs()
            assert live == [r for r in runs if r.status in RUN_LIVE_STATUSES]
            assert {r.status for r in live} == set(RUN_LIVE_STATUSES)
            assert [r.seq for r in live] == [1, 2, 5, 6, 9]
            # A run that finishes leaves the live set; one revived joins it in seq order.
            await store.update_run(_next(runs[1], status="completed"), expected_revision=1)
            await store.update_run(_next(runs[2], status="interrupted"), expected_revision=1)
            assert [r.seq for r in await store.live_runs()] == [1, 3, 5, 6, 9]
        finally:
            await store.close()

    run(main)


def test_check_reports_the_run_counter_behind(store_factory: Backend) -> None:
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            await store.insert_run(_run_row())
            await store.insert_run(_run_row())
            assert await store.check() == []
            store_factory.sql("UPDATE counters SET value = ? WHERE name = ?", 1, "run_seq")
            behind = [d for d in await store.check() if d.kind == "counter_behind"]
            assert [(d.key, d.table) for d in behind] == [("run_seq", "counters")]
        finally:
            await store.close()

    run(main)


# ------------------------------------------------------------------- schedules


def _schedule_row(schedule_id: str = "nightly", **kw: Any) -> ScheduleRow:
    """A schedule's first revision (``kw`` overrides any field)."""
    fields: dict[str, Any] = {
        "schedule_id": schedule_id,
        "tenant": "acme",
        "deployment_id": "hello.default",
        "status": "active",
        "body": b'{"cron":"0 * * * *"}',
        "revision": 1,
        "created_at": T0,
        "updated_at": T0,
    }
    fields.update(kw)
    return ScheduleRow(**fields)


def _snext(row: ScheduleRow, **kw: Any) -> ScheduleRow:
    """The schedule's next revision with ``kw`` changed."""
    kw.setdefault("updated_at", row.updated_at + 1)
    kw.setdefault("revision", row.revision + 1)
    return msgspec.structs.replace(row, **kw)


def _occ(at: float, status: str = "skipped-misfire", **kw: Any) -> OccurrenceRow:
    """An occurrence of ``nightly`` at ``T0 + at``."""
    kw.setdefault("schedule_id", "nightly")
    kw.setdefault("recorded_at", T0 + at + 0.5)
    return OccurrenceRow(instant=T0 + at, status=status, **kw)


def _run_seq(backend: Backend) -> int:
    return int(backend.sql("SELECT value FROM counters WHERE name = ?", "run_seq")[0][0])


def test_schedules_create_get_list_and_use_optimistic_revisions(store_factory: Backend) -> None:
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            assert await store.get_schedule("a") is None
            assert await store.list_schedules(include_deleted=True) == []
            a = _schedule_row("a")
            b = _schedule_row("b", status="paused", tenant="globex", deployment_id="x.y")
            c = _schedule_row("c")
            for row in (c, a, b):
                await store.put_schedule(row, expected_revision=0)
            assert await store.get_schedule("a") == a
            deleted = _snext(c, status="deleted", body=b"{}")
            await store.put_schedule(deleted, expected_revision=1)
            assert await store.get_schedule("c") == deleted
            assert await store.list_schedules() == [a, b]
            assert await store.list_schedules(include_deleted=True) == [a, b, deleted]

            # Ids are never reused, deleted ones included; nothing changes.
            for taken in (_schedule_row("a", body=b"dup"), _schedule_row("c")):
                with pytest.raises(AlreadyExists):
                    await store.put_schedule(taken, expected_revision=0)
            assert await store.list_schedules(include_deleted=True) == [a, b, deleted]

            # Compare-and-set updates; a stale one changes nothing.
            a2 = _snext(a, status="paused", body=b"two")
            await store.put_schedule(a2, expected_revision=1)
            with pytest.raises(Conflict) as stale:
                await store.put_schedule(_snext(a, body=b"late"), expected_revision=1)
            assert stale.value.details["current_revision"] == 2
            assert await store.get_schedule("a") == a2

            # Unknown id.
            with pytest.raises(NotFound):
                await store.put_schedule(_snext(_schedule_row("ghost")), expected_revision=1)
            assert await store.get_schedule("ghost") is None

            # Revisions that do not follow and unknown statuses are caller bugs.
            with pytest.raises(InvalidArgument):
                await store.put_schedule(_schedule_row("d", revision=2), expected_revision=0)
            with pytest.raises(InvalidArgument):
                await store.put_schedule(_snext(a2, revision=9), expected_revision=2)
            with pytest.raises(InvalidArgument):
                await store.put_schedule(_schedule_row("d", status="sleeping"), expected_revision=0)
            assert await store.get_schedule("d") is None

            # Only status, body, revision and updated_at change.
            a3 = _snext(
                a2,
                status="active",
                body=b"three",
                tenant="other",
                deployment_id="o.p",
                created_at=T0 + 99,
            )
            await store.put_schedule(a3, expected_revision=2)
            assert await store.get_schedule("a") == _snext(
                a2, status="active", body=b"three", updated_at=a3.updated_at
            )

            # Racing updates from the same base: exactly one wins.
            results = await asyncio.gather(
                *(
                    store.put_schedule(_snext(b, body=b"race%d" % i), expected_revision=1)
                    for i in range(6)
                ),
                return_exceptions=True,
            )
            assert sum(r is None for r in results) == 1
            assert all(isinstance(r, Conflict) for r in results if r is not None)
            listed = await store.list_schedules(include_deleted=True)
        finally:
            await store.close()
        reopened = store_factory.make()
        await reopened.open()
        try:
            assert await reopened.list_schedules(include_deleted=True) == listed
            assert [s.revision for s in listed] == [3, 2, 2]
        finally:
            await reopened.close()

    run(main)


def test_record_occurrences_without_a_run(store_factory: Backend) -> None:
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            base = _schedule_row()
            await store.put_schedule(base, expected_revision=0)
            second = _snext(base, body=b'{"cursor":2}')
            skipped = [
                _occ(60, "skipped-misfire", detail="missed by 2h"),
                _occ(0, "skipped-overlap", detail="previous run still live"),
                _occ(120, "preflight-rejected", detail="deployment paused"),
            ]
            got = await store.record_occurrences(second, expected_revision=1, occurrences=skipped)
            assert got is None
            assert await store.get_schedule("nightly") == second
            # Oldest first, whatever the order they were recorded in.
            assert await store.list_occurrences("nightly") == sorted(
                skipped, key=lambda o: o.instant
            )
            assert await store.list_runs() == []
            assert _run_seq(store_factory) == 0
            # Nothing to record still moves the schedule.
            third = _snext(second)
            assert (
                await store.record_occurrences(third, expected_revision=2, occurrences=[]) is None
            )
            assert await store.get_schedule("nightly") == third
            assert await store.check() == []
        finally:
            await store.close()

    run(main)


def test_record_occurrences_admits_a_run_numbered_with_insert_run(store_factory: Backend) -> None:
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            schedule = _schedule_row()
            await store.put_schedule(schedule, expected_revision=0)
            manual = await store.insert_run(_run_row())
            admitted: list[RunRow] = []
            for i in range(3):
                schedule = _snext(schedule, body=b'{"cursor":%d}' % i)
                at = 3600.0 * i
                stored = await store.record_occurrences(
                    schedule,
                    expected_revision=schedule.revision - 1,
                    occurrences=[
                        _occ(at - 1800, "coalesced", detail="folded into the next"),
                        _occ(at, "admitted"),
                    ],
                    run=_run_row(run_id="ignored", seq=99, revision=7, created_at=T0 + at),
                )
                assert stored is not None
                admitted.append(stored)
                await store.insert_run(_run_row(body=b"manual%d" % i))
            # One counter for both paths: consecutive, unique numbers.
            assert [r.seq for r in admitted] == [2, 4, 6]
            assert [r.seq for r in await store.list_runs()] == list(range(1, 8))
            assert manual.schedule_id is None
            first = admitted[0]
            assert first == _run_row(
                run_id="run-000002", seq=2, revision=1, schedule_id="nightly", created_at=T0
            )
            assert await store.get_run("run-000002") == first
            assert await store.list_runs(schedule_id="nightly") == admitted
            occurrences = await store.list_occurrences("nightly")
            assert [(o.instant - T0, o.status, o.run_id) for o in occurrences] == [
                (-1800.0, "coalesced", None),
                (0.0, "admitted", "run-000002"),
                (1800.0, "coalesced", None),
                (3600.0, "admitted", "run-000004"),
                (5400.0, "coalesced", None),
                (7200.0, "admitted", "run-000006"),
            ]
            assert await store.get_schedule("nightly") == schedule
            assert await store.check() == []
        finally:
            await store.close()
        reopened = store_factory.make()
        await reopened.open()
        try:
            assert await reopened.get_schedule("nightly") == schedule
            assert await reopened.list_occurrences("nightly") == occurrences
            assert await reopened.get_run("run-000006") == admitted[2]
            assert (await reopened.insert_run(_run_row())).seq == 8
        finally:
            await reopened.close()

    run(main)


def test_record_occurrences_is_all_or_nothing(store_factory: Backend) -> None:
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            base = _schedule_row()
            await store.put_schedule(base, expected_revision=0)
            second = _snext(base)
            ran = await store.record_occurrences(
                second, expected_revision=1, occurrences=[_occ(0, "admitted")], run=_run_row()
            )
            assert ran is not None
            assert ran.seq == 1
            before = (
                await store.get_schedule("nightly"),
                await store.list_occurrences("nightly"),
                await store.list_runs(),
                _run_seq(store_factory),
            )

            async def unchanged() -> None:
                after = (
                    await store.get_schedule("nightly"),
                    await store.list_occurrences("nightly"),
                    await store.list_runs(),
                    _run_seq(store_factory),
                )
                assert after == before

            third = _snext(second)
            # An instant recorded before (and the run that came with it): AlreadyExists.
            with pytest.raises(AlreadyExists) as dup:
                await store.record_occurrences(
                    third,
                    expected_revision=2,
                    occurrences=[_occ(60, "admitted"), _occ(0, "superseded")],
                    run=_run_row(),
                )
            assert dup.value.details["schedule_id"] == "nightly"
            await unchanged()
            # The same instant twice in one call.
            with pytest.raises(AlreadyExists):
                await store.record_occurrences(
                    third, expected_revision=2, occurrences=[_occ(60), _occ(60, "superseded")]
                )
            await unchanged()
            # A stale schedule revision.
            with pytest.raises(Conflict) as stale:
                await store.record_occurrences(
                    _snext(base),
                    expected_revision=1,
                    occurrences=[_occ(60, "admitted")],
                    run=_run_row(),
                )
            assert stale.value.details["current_revision"] == 2
            await unchanged()
            # An unknown schedule.
            with pytest.raises(NotFound):
                await store.record_occurrences(
                    _snext(_schedule_row("ghost")),
                    expected_revision=1,
                    occurrences=[_occ(60, "admitted", schedule_id="ghost")],
                    run=_run_row(),
                )
            await unchanged()
            # Caller bugs: refused before anything is written.
            bad_calls: list[tuple[list[OccurrenceRow], RunRow | None, int, ScheduleRow]] = [
                ([_occ(60, "coalesced")], _run_row(), 2, third),  # no admitted one
                ([_occ(60, "admitted"), _occ(120, "admitted")], _run_row(), 2, third),  # two
                ([], _run_row(), 2, third),
                ([_occ(60, "admitted")], None, 2, third),  # admitted without a run
                ([_occ(60, "admitted", run_id="run-000001")], _run_row(), 2, third),
                ([_occ(60, "ran-away")], None, 2, third),
                ([_occ(60, schedule_id="other")], None, 2, third),
                ([_occ(60, "admitted")], _run_row(schedule_id="other"), 2, third),
                ([_occ(float("nan"))], None, 2, third),
                ([_occ(60)], None, 2, _snext(third)),  # revision does not follow
                ([_occ(60)], None, 0, base),  # occurrences need an existing schedule
            ]
            for occurrences, run_row, expected, schedule in bad_calls:
                with pytest.raises(InvalidArgument):
                    await store.record_occurrences(
                        schedule,
                        expected_revision=expected,
                        occurrences=occurrences,
                        run=run_row,
                    )
            await unchanged()
            # After all that, the next one goes through with the next number.
            nxt = await store.record_occurrences(
                third, expected_revision=2, occurrences=[_occ(60, "admitted")], run=_run_row()
            )
            assert nxt is not None
            assert nxt.seq == 2
            assert await store.check() == []
        finally:
            await store.close()

    run(main)


def test_concurrent_record_occurrences_have_one_winner(store_factory: Backend) -> None:
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            base = _schedule_row()
            await store.put_schedule(base, expected_revision=0)
            results = await asyncio.gather(
                *(
                    store.record_occurrences(
                        _snext(base, body=b"%d" % i),
                        expected_revision=1,
                        occurrences=[_occ(60 * i, "admitted")],
                        run=_run_row(),
                    )
                    for i in range(6)
                ),
                return_exceptions=True,
            )
            won = [r for r in results if isinstance(r, RunRow)]
            assert len(won) == 1
            assert all(isinstance(r, Conflict) for r in results if not isinstance(r, RunRow))
            assert won[0].seq == 1
            assert [o.run_id for o in await store.list_occurrences("nightly")] == [won[0].run_id]
            assert (await store.insert_run(_run_row())).seq == 2
        finally:
            await store.close()

    run(main)


def test_list_occurrences_pages_oldest_first(store_factory: Backend) -> None:
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            schedule = _schedule_row()
            await store.put_schedule(schedule, expected_revision=0)
            other = _schedule_row("other")
            await store.put_schedule(other, expected_revision=0)
            await store.record_occurrences(
                _snext(other),
                expected_revision=1,
                occurrences=[_occ(30, schedule_id="other")],
            )
            recorded = [_occ(float(i * 10)) for i in (4, 0, 6, 1, 3, 5, 2)]
            await store.record_occurrences(
                _snext(schedule), expected_revision=1, occurrences=recorded
            )
            expected = sorted(recorded, key=lambda o: o.instant)
            assert await store.list_occurrences("nightly") == expected
            pages: list[list[OccurrenceRow]] = []
            after: float | None = None
            while page := await store.list_occurrences("nightly", after_instant=after, limit=3):
                pages.append(page)
                after = page[-1].instant
            assert [[o.instant - T0 for o in p] for p in pages] == [
                [0.0, 10.0, 20.0],
                [30.0, 40.0, 50.0],
                [60.0],
            ]
            middle = await store.list_occurrences("nightly", after_instant=T0 + 15, limit=2)
            assert middle == expected[2:4]
            assert await store.list_occurrences("nightly", limit=0) == []
            assert await store.list_occurrences("ghost") == []
            assert [o.schedule_id for o in await store.list_occurrences("other")] == ["other"]
            with pytest.raises(InvalidArgument):
                await store.list_occurrences("nightly", limit=-1)
        finally:
            await store.close()
        reopened = store_factory.make()
        await reopened.open()
        try:
            assert await reopened.list_occurrences("nightly") == expected
        finally:
            await reopened.close()

    run(main)


def test_the_database_enforces_occurrence_identity_and_run_links(store_factory: Backend) -> None:
    """``(schedule_id, instant)`` is the primary key and ``run_id`` references a run:
    neither rule depends on the store's code."""

    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            await store.put_schedule(_schedule_row(), expected_revision=0)
        finally:
            await store.close()

    run(main)
    insert = (
        "INSERT INTO occurrences (schedule_id, instant, status, run_id, detail, recorded_at) "
        "VALUES (?, ?, ?, ?, ?, ?)"
    )
    store_factory.sql(insert, "nightly", T0, "skipped-misfire", None, None, T0)
    with pytest.raises(Exception, match=r"(?i)unique|duplicate"):
        store_factory.sql(insert, "nightly", T0, "superseded", None, None, T0)
    # Only an admitted occurrence names a run.
    with pytest.raises(Exception, match=r"(?i)check"):
        store_factory.sql(insert, "nightly", T0 + 1, "coalesced", "run-000001", None, T0)
    if store_factory.name == "sqlite":
        # The store turns foreign keys on for its own connections (this raw one has
        # them off), so check the declaration.
        refs = store_factory.sql(
            'SELECT "table", "from", "to" FROM pragma_foreign_key_list(\'occurrences\')'
        )
        assert sorted(refs) == [
            ("runs", "run_id", "run_id"),
            ("schedules", "schedule_id", "schedule_id"),
        ]
    else:
        with pytest.raises(Exception, match=r"(?i)foreign key"):
            store_factory.sql(insert, "nightly", T0 + 2, "admitted", "run-000404", None, T0)
