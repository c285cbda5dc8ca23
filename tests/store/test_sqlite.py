"""What only the SQLite backend has: layout, pragmas, the writer thread, chunked loads,
and durability of acknowledged appends across a SIGKILL."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import wf.store.sqlite as sqlite_module
import wf.store.sqlite_load as sqlite_load
from wf.errors import StoreUnavailable
from wf.scheduler import commands as cmd
from wf.scheduler.dispatcher import SchedulerCore
from wf.scheduler.model import Activity, ActivityState
from wf.scheduler.outputs import ActivitySubmitted, Transition
from wf.scheduler.recovery import durable_digest, restore
from wf.store.loader import build_snapshot
from wf.store.protocol import OwnerInfo
from wf.store.sqlite import SQLiteStore

T0 = 1_767_225_600.0
CHILD_TIMEOUT_S = 60
OWNER = OwnerInfo(host="h", pid=1, since="2026-01-01T00:00:00Z")


async def _until(condition: Any, timeout_s: float = 10.0) -> None:
    """Wait until ``condition()`` holds, checking often; fail after ``timeout_s``."""
    step_s = 0.005
    for _ in range(int(timeout_s / step_s)):
        if condition():
            return
        await asyncio.sleep(step_s)
    raise AssertionError(f"condition not met within {timeout_s} s")


def submitted(aid: str, seq: int) -> ActivitySubmitted:
    return ActivitySubmitted(
        at=T0, activity=Activity(activity_id=aid, activity_type="t", seq=seq, submitted_at=T0)
    )


def test_open_lays_out_the_store_root(tmp_path: Path) -> None:
    root = tmp_path / ".wf_store"

    async def main() -> None:
        store = SQLiteStore(root)
        await store.open()
        await store.acquire_ownership(OWNER)
        assert (root / "scheduler.db").is_file()
        # Schedules and runs are tables of scheduler.db: no folders beside it.
        assert sorted(p.name for p in root.iterdir() if p.is_dir()) == []
        assert json.loads((root / "scheduler.lock").read_text())["host"] == "h"
        assert store.holder() == OWNER
        await store.close()
        assert (root / "scheduler.lock").read_text() == ""

    asyncio.run(main())
    conn = sqlite3.connect(root / "scheduler.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


@pytest.mark.parametrize(("durability", "synchronous"), [("fsync", 2), ("process", 1)])
def test_durability_sets_synchronous(tmp_path: Path, durability: Any, synchronous: int) -> None:
    async def main() -> None:
        store = SQLiteStore(tmp_path, durability=durability)
        await store.open()
        assert store._write is not None
        assert store._write.execute("PRAGMA synchronous").fetchone()[0] == synchronous
        await store.close()

    asyncio.run(main())


def test_unknown_durability_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="durability"):
        SQLiteStore(tmp_path, durability="maybe")  # type: ignore[arg-type]


def test_calls_outside_open_and_close_are_refused(tmp_path: Path) -> None:
    async def main() -> None:
        store = SQLiteStore(tmp_path)
        with pytest.raises(StoreUnavailable):
            await store.append([submitted("a", 1)])
        with pytest.raises(StoreUnavailable):
            await store.load()
        await store.open()
        await store.append([submitted("a", 1)])
        await store.close()
        await store.close()  # idempotent
        with pytest.raises(StoreUnavailable):
            await store.append([submitted("b", 2)])
        with pytest.raises(StoreUnavailable):
            await store.history("a")

    asyncio.run(main())


def test_concurrent_appends_share_commits(tmp_path: Path) -> None:
    appends_n = 300

    async def main() -> None:
        store = SQLiteStore(tmp_path)
        await store.open()
        await asyncio.gather(*(store.append([submitted(f"g{i}", i + 1)]) for i in range(appends_n)))
        assert store.appends_committed == appends_n
        assert store.commits < appends_n
        assert len(await store.existing_activity_ids([f"g{i}" for i in range(appends_n)])) == (
            appends_n
        )
        await store.close()

    asyncio.run(main())


def test_batch_bound_splits_group_commits(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(sqlite_module, "BATCH_STEPS_MAX", 1)

    async def main() -> None:
        store = SQLiteStore(tmp_path)
        await store.open()
        await asyncio.gather(*(store.append([submitted(f"b{i}", i + 1)]) for i in range(20)))
        assert store.commits == store.appends_committed == 20
        await store.close()

    asyncio.run(main())


def test_a_failed_batch_fails_every_append_in_it(tmp_path: Path) -> None:
    """Appends sharing a transaction share its fate: a later append was computed from
    state that includes the earlier ones, so none of them is stored alone."""

    async def main() -> None:
        store = SQLiteStore(tmp_path)
        await store.open()
        await store.append([submitted("dup", 1)])
        blocker = sqlite3.connect(tmp_path / "scheduler.db", isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # the writer waits for this write lock
        first = asyncio.ensure_future(store.append([submitted("first", 2)]))
        await asyncio.sleep(0)  # append() queues `first` before its first suspension
        # Wait (bounded) until the writer took `first` and is blocked in BEGIN ...
        await _until(lambda: store._queue.qsize() == 0)
        assert not first.done()
        bad = asyncio.ensure_future(store.append([submitted("dup", 3)]))
        good = asyncio.ensure_future(store.append([submitted("good", 4)]))
        # ... and until both later appends wait behind it, so they share one batch.
        await _until(lambda: store._queue.qsize() == 2)
        blocker.execute("ROLLBACK")
        blocker.close()
        await first
        with pytest.raises(StoreUnavailable, match="nothing of it was stored"):
            await bad
        with pytest.raises(StoreUnavailable):
            await good
        assert await store.existing_activity_ids(["first", "good", "dup"]) == {"first", "dup"}
        assert (await store.load()).seq == 2
        await store.close()

    asyncio.run(main())


def test_chunked_load_matches_the_core(tmp_path: Path, monkeypatch: Any) -> None:
    """Tiny fetch and id chunks: every chunk boundary of the fast load path is crossed."""
    monkeypatch.setattr(sqlite_load, "FETCH_ROWS_MAX", 3)
    monkeypatch.setattr(sqlite_load, "LOAD_CHUNK_ROWS", 4)
    monkeypatch.setattr(sqlite_load, "ID_CHUNK_MAX", 2)
    monkeypatch.setattr(sqlite_module, "ID_CHUNK_MAX", 2)
    from wf.scheduler.model import WorkerInfo

    async def main() -> None:
        store = SQLiteStore(tmp_path)
        await store.open()
        core = SchedulerCore()
        now = T0

        async def do(command: Any) -> None:
            await store.append(core.handle(command).records)

        await do(cmd.RegisterWorker(now=now, info=WorkerInfo(worker_id="w", max_concurrency=9)))
        acts = tuple(Activity(activity_id=f"c{i}", activity_type="t") for i in range(17))
        await do(cmd.Submit(now=now, activities=acts))
        await do(cmd.Poll(now=now, worker_id="w", max_items=7))
        await do(cmd.CancelPoll(now=now, worker_id="w"))
        for aid, a in list(core.activities.items())[:7]:
            await do(cmd.StartActivity(now=now, activity_id=aid, token=a.token))
        await do(cmd.Fail(now=now, activity_id="c0", token=core.activities["c0"].token))
        bad = sqlite3.connect(tmp_path / "scheduler.db", isolation_level=None)
        bad.execute("UPDATE activities SET spec = x'c1' WHERE activity_id = 'c10'")
        bad.close()
        stored = await store.load()
        assert [d.activity_id for d in stored.diagnostics] == ["c10"]
        del core.activities["c10"]  # what the store blocked; the rest must match exactly
        snap, diagnostics = build_snapshot(stored, core.config, now)
        assert diagnostics == stored.diagnostics
        assert durable_digest(restore(snap)) == durable_digest(core)
        assert sum(a.state is ActivityState.EXECUTING for a in stored.activities) == 6
        await store.close()

    asyncio.run(main())


def test_acknowledged_appends_survive_sigkill(tmp_path: Path) -> None:
    """A child appends and prints each acknowledged id; killed mid-stream, every id it
    printed is in the store afterwards, and the store checks clean."""
    child_code = textwrap.dedent(
        f"""
        import asyncio
        from pathlib import Path
        from wf.scheduler.model import Activity
        from wf.scheduler.outputs import ActivitySubmitted, Transition
        from wf.scheduler.model import ActivityState as S
        from wf.store.sqlite import SQLiteStore

        async def main():
            store = SQLiteStore(Path({str(tmp_path)!r}))
            await store.open()
            i = 0
            while True:
                i += 1
                aid = f"k{{i}}"
                a = Activity(activity_id=aid, activity_type="t", seq=i, submitted_at=1.0)
                await store.append([
                    ActivitySubmitted(at=1.0, activity=a),
                    Transition(at=1.0, activity_id=aid, from_state=S.READY,
                               to_state=S.QUEUED, reason="submitted", attempt=0,
                               failures=0, infra_requeues=0, token=0),
                ])
                print(aid, flush=True)

        asyncio.run(main())
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", child_code], stdout=subprocess.PIPE, text=True, env=os.environ
    )
    acked: list[str] = []
    try:
        assert child.stdout is not None
        while len(acked) < 200:
            line = child.stdout.readline()
            assert line, "the child stopped early"
            acked.append(line.strip())
        child.send_signal(signal.SIGKILL)
        child.wait(CHILD_TIMEOUT_S)
        acked.extend(line.strip() for line in child.stdout.read().splitlines())
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(CHILD_TIMEOUT_S)
        if child.stdout is not None:
            child.stdout.close()

    async def main() -> None:
        store = SQLiteStore(tmp_path)
        await store.open()
        assert await store.existing_activity_ids(acked) == set(acked)
        stored = await store.load()
        assert {a.activity_id for a in stored.activities} >= set(acked)
        assert all(a.state is ActivityState.QUEUED for a in stored.activities)
        assert stored.seq == len(stored.activities)
        assert await store.check() == []
        for aid in acked[:3]:
            assert [t.to_state for t in await store.history(aid)] == [ActivityState.QUEUED]
            assert isinstance((await store.history(aid))[0], Transition)
        await store.close()

    asyncio.run(main())


def test_check_reports_lifecycle_columns_moved_without_a_lease(tmp_path: Path) -> None:
    async def main() -> None:
        store = SQLiteStore(tmp_path)
        await store.open()
        core = SchedulerCore()
        acts = (Activity(activity_id="n1", activity_type="t"),)
        await store.append(core.handle(cmd.Submit(now=T0, activities=acts)).records)
        assert await store.check() == []
        raw = sqlite3.connect(tmp_path / "scheduler.db", isolation_level=None)
        raw.execute("UPDATE activities SET attempt = 2 WHERE activity_id = 'n1'")
        raw.close()
        found = await store.check()
        assert [(d.kind, d.activity_id) for d in found] == [("state_mismatch", "n1")]
        assert "never leased" in found[0].message
        await store.close()

    asyncio.run(main())


def test_mistyped_lifecycle_columns_fail_closed(tmp_path: Path) -> None:
    """SQLite columns are dynamically typed: a text attempt or queued_at blocks the row."""
    from wf.scheduler.model import WorkerInfo

    async def main() -> None:
        store = SQLiteStore(tmp_path)
        await store.open()
        core = SchedulerCore()
        await store.append(
            core.handle(cmd.RegisterWorker(now=T0, info=WorkerInfo(worker_id="w"))).records
        )
        acts = tuple(Activity(activity_id=f"m{i}", activity_type="t") for i in range(6))
        await store.append(core.handle(cmd.Submit(now=T0, activities=acts)).records)
        await store.append(core.handle(cmd.Poll(now=T0, worker_id="w", max_items=1)).records)
        raw = sqlite3.connect(tmp_path / "scheduler.db", isolation_level=None)
        raw.execute("UPDATE activities SET attempt = 'many' WHERE activity_id = 'm0'")
        raw.execute("UPDATE activities SET queued_at = 'soon' WHERE activity_id = 'm1'")
        raw.execute("UPDATE activities SET not_before = x'00' WHERE activity_id = 'm2'")
        raw.execute("UPDATE activities SET token = 'one' WHERE activity_id = 'm3'")
        raw.execute("UPDATE activities SET state = 'bogus' WHERE activity_id = 'm4'")
        raw.close()
        stored = await store.load()
        malformed = [d for d in stored.diagnostics if d.kind == "malformed_row"]
        by_id = {d.activity_id: d.message for d in malformed}
        assert sorted(by_id) == ["m0", "m1", "m2", "m3", "m4"]
        # A text token also sorts above every number, so the token counter is behind.
        assert {d.kind for d in stored.diagnostics} == {"malformed_row", "counter_behind"}
        assert "bad queued_at 'soon'" in by_id["m1"]
        assert "not_before b'\\x00'" in by_id["m2"]
        assert "bad token 'one'" in by_id["m3"]
        assert "unknown state 'bogus'" in by_id["m4"]
        assert [a.activity_id for a in stored.activities] == ["m5"]
        await store.close()

    asyncio.run(main())
