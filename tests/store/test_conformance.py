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
    CronRemoved,
    CronUpserted,
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
    ArtifactRow,
    DeploymentRow,
    Diagnostic,
    OwnerInfo,
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
        cmd.Fail, activity_id="a3", token=leases["a3"].token, error_type="Boom", message="x"
    )
    await rec.do(cmd.Cancel, activity_id="c1")
    w2 = await rec.lease("w2", 1)
    assert len(w2) == 1
    await rec.do(cmd.WorkersLost, worker_ids=("w2",))
    await rec.do(
        cmd.RegisterCron, cron_id="every-minute", expression="* * * * *", template=act("tpl")
    )
    await rec.do(cmd.RegisterCron, cron_id="gone", expression="0 0 * * *", template=act("tpl2"))
    await rec.do(cmd.RemoveCron, cron_id="gone")
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
                CronUpserted,
                CronRemoved,
            }
            stored = await assert_same_state(rec)
            assert [c.cron_id for c in stored.crons] == ["every-minute"]
            assert stored.crons[0].template == act("tpl")
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
