"""The fast recovery path keeps failing closed: SQLite's load has SQL prove a backlog
row's state and hands its spec over concatenated with its chunk's (one decode per
chunk, read on a helper thread), and restore skips per-activity ranking and heapify
for constant-rank lanes; none of that may let a corrupt row through or change the
dispatch order."""

from __future__ import annotations

import asyncio
import random
import sqlite3
from pathlib import Path
from typing import Any

import msgspec

from wf.scheduler import commands as cmd
from wf.scheduler.config import PolicyConfig, SchedulerConfig
from wf.scheduler.dispatcher import SchedulerCore
from wf.scheduler.model import Activity, ActivityState, Priority, WorkerInfo
from wf.scheduler.outputs import LeaseGranted
from wf.scheduler.recovery import durable_digest, restore, snapshot
from wf.store import codec, sqlite_load
from wf.store.loader import build_snapshot
from wf.store.sqlite import SQLiteStore

T0 = 1_767_225_600.0


async def _filled(root: Path, n: int) -> tuple[SQLiteStore, SchedulerCore]:
    """A store holding ``n`` activities (the first two leased) and its core."""
    store = SQLiteStore(root)
    await store.open()
    core = SchedulerCore()

    async def do(command: Any) -> None:
        await store.append(core.handle(command).records)

    await do(cmd.RegisterWorker(now=T0, info=WorkerInfo(worker_id="w", max_concurrency=2)))
    acts = tuple(Activity(activity_id=f"r{i}", activity_type="t") for i in range(n))
    await do(cmd.Submit(now=T0, activities=acts))
    await do(cmd.Poll(now=T0, worker_id="w", max_items=2))
    return store, core


def _raw(root: Path, statement: str, *params: Any) -> None:
    conn = sqlite3.connect(root / "scheduler.db", isolation_level=None)
    try:
        conn.execute(statement, params)
    finally:
        conn.close()


def test_every_kind_of_bad_live_row_fails_closed_with_its_reason(tmp_path: Path) -> None:
    async def main() -> None:
        store, core = await _filled(tmp_path, 8)
        other = msgspec.structs.replace(core.activities["r7"], activity_id="someone-else")
        _raw(
            tmp_path, "UPDATE activities SET spec = ? WHERE activity_id = 'r2'", codec.encode(other)
        )
        _raw(tmp_path, "UPDATE activities SET state = 'bogus' WHERE activity_id = 'r0'")  # leased
        _raw(tmp_path, "UPDATE activities SET not_before = 'later' WHERE activity_id = 'r3'")
        _raw(tmp_path, "UPDATE activities SET queued_at = x'00' WHERE activity_id = 'r4'")
        _raw(tmp_path, "UPDATE activities SET spec = 'text' WHERE activity_id = 'r5'")
        stored = await store.load()
        why = {d.activity_id: d.message for d in stored.diagnostics}
        assert set(why) == {"r0", "r2", "r3", "r4", "r5"}
        assert all(d.kind == "malformed_row" for d in stored.diagnostics)
        assert "spec blob names activity 'someone-else'" in why["r2"]
        assert "unknown state 'bogus'" in why["r0"]
        assert "not_before 'later'" in why["r3"]
        assert "bad queued_at b'\\x00'" in why["r4"]
        assert "not a blob" in why["r5"]
        assert [a.activity_id for a in stored.activities] == ["r1", "r6", "r7"]
        assert stored.activities[0].state is ActivityState.LEASED
        assert stored.activities[0].worker_id == "w"
        await store.close()

    asyncio.run(main())


def test_hot_chunks_that_do_not_prove_their_rows_are_read_row_by_row(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Chunks of three rows: a backlog row whose spec is two maps, names another ``seq``,
    or is cut short spoils its chunk's one-call decode or its proof; that chunk is read
    row by row, which names the row, and every other activity loads as stored."""
    monkeypatch.setattr(sqlite_load, "LOAD_CHUNK_ROWS", 3)

    async def main() -> None:
        store, core = await _filled(tmp_path, 12)
        spec = {aid: codec.encode(a) for aid, a in core.activities.items()}
        _raw(
            tmp_path,
            "UPDATE activities SET spec = ? WHERE activity_id = 'r4'",
            spec["r4"] + spec["r5"],
        )
        moved = msgspec.structs.replace(core.activities["r7"], seq=core.activities["r6"].seq)
        _raw(
            tmp_path, "UPDATE activities SET spec = ? WHERE activity_id = 'r7'", codec.encode(moved)
        )
        _raw(
            tmp_path,
            "UPDATE activities SET spec = ? WHERE activity_id = 'r10'",
            spec["r10"][:-3],
        )
        stored = await store.load()
        why = {d.activity_id: d.message for d in stored.diagnostics}
        assert set(why) == {"r4", "r7", "r10"}
        assert "not a valid Activity" in why["r4"]
        assert "spec blob names seq" in why["r7"]
        assert "not a valid Activity" in why["r10"]
        kept = [f"r{i}" for i in range(12) if i not in (4, 7, 10)]
        assert [a.activity_id for a in stored.activities] == kept
        for aid in ("r4", "r7", "r10"):
            del core.activities[aid]
        snap, _ = build_snapshot(stored, core.config, T0)
        assert durable_digest(restore(snap)) == durable_digest(core)
        await store.close()

    asyncio.run(main())


def test_a_backlog_row_off_the_hot_path_keeps_its_own_columns(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Rows the SQL does not prove hot (requeued later than submitted, leased, delayed,
    a spec too large for a chunk) come back with their own columns, in ``seq`` place
    among the hot rows of their chunk."""
    monkeypatch.setattr(sqlite_load, "LOAD_CHUNK_ROWS", 4)

    async def main() -> None:
        store, core = await _filled(tmp_path, 10)
        _raw(tmp_path, "UPDATE activities SET queued_at = ? WHERE activity_id = 'r5'", T0 + 7.5)
        big = msgspec.structs.replace(
            core.activities["r8"], payload=b"x" * (sqlite_load.SPEC_BYTES_MAX + 1)
        )
        _raw(tmp_path, "UPDATE activities SET spec = ? WHERE activity_id = 'r8'", codec.encode(big))
        _raw(
            tmp_path,
            "UPDATE activities SET state = 'delayed', not_before = ? WHERE activity_id = 'r6'",
            T0 + 60.0,
        )
        stored = await store.load()
        assert stored.diagnostics == []
        by_id = {a.activity_id: a for a in stored.activities}
        assert [a.activity_id for a in stored.activities] == [f"r{i}" for i in range(10)]
        assert by_id["r5"].queued_at == T0 + 7.5
        assert by_id["r6"].state is ActivityState.DELAYED
        assert by_id["r6"].not_before == T0 + 60.0
        assert by_id["r0"].state is ActivityState.LEASED
        assert by_id["r0"].token
        assert by_id["r9"].state is ActivityState.QUEUED
        assert by_id["r9"].queued_at == T0
        assert by_id["r8"].payload == big.payload
        assert stored.by_id == by_id
        await store.close()

    asyncio.run(main())


def test_a_clean_load_restores_the_exact_core(tmp_path: Path) -> None:
    async def main() -> None:
        store, core = await _filled(tmp_path, 50)
        stored = await store.load()
        assert stored.diagnostics == []
        snap, diagnostics = build_snapshot(stored, core.config, T0)
        assert diagnostics == []
        assert durable_digest(restore(snap, adopt=True)) == durable_digest(core)
        await store.close()

    asyncio.run(main())


def _dispatch_order(core: SchedulerCore, n: int) -> list[str]:
    core.handle(cmd.RegisterWorker(now=T0, info=WorkerInfo(worker_id="drain", max_concurrency=n)))
    outcome = core.handle(cmd.Poll(now=T0, worker_id="drain", max_items=n))
    return [d.lease.activity_id for d in outcome.decisions if type(d) is LeaseGranted]


def _mixed_core(config: SchedulerConfig, n: int) -> SchedulerCore:
    core = SchedulerCore(config)
    rng = random.Random(7)
    acts = tuple(
        Activity(
            activity_id=f"m{i:03d}",
            activity_type="t",
            tenant=rng.choice(("a", "b")),
            priority=rng.choice(list(Priority)),
            deadline=rng.choice((None, T0 + rng.randrange(100))),
        )
        for i in range(n)
    )
    core.handle(cmd.Submit(now=T0, activities=acts))
    return core


def test_restore_keeps_the_dispatch_order_in_any_activity_order() -> None:
    """Constant-rank lanes skip heapify only when their entries come sorted; a snapshot
    listing activities out of order (or a ranking policy) still restores the order
    one-by-one pushes would give."""
    n = 120
    for policy in ("priority", "deadline_first"):
        config = SchedulerConfig(policies={"default": PolicyConfig(policy=policy)})
        original = _mixed_core(config, n)
        snap = snapshot(original)
        shuffled = list(snap.activities)
        random.Random(3).shuffle(shuffled)
        expected = _dispatch_order(_mixed_core(config, n), n)
        assert len(expected) == n
        for activities in (snap.activities, shuffled):
            restored = restore(msgspec.structs.replace(snap, activities=activities))
            assert _dispatch_order(restored, n) == expected, policy
