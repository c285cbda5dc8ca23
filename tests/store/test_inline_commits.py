"""SQLite's inline commits: a small append made while the writer thread is idle is
committed on the caller's thread, and never ahead of a write queued before it; with
``durability="fsync"`` only after an idle spell and while fsync-ed commits are quick."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from _appends import stored_order, submitted

from wf.store import codec
from wf.store import sqlite as sqlite_module
from wf.store.sqlite import (
    CHECKPOINT_EVERY_COMMITS,
    INLINE_COMMIT_STEPS_MAX,
    SQLiteStore,
    _Pending,
)


async def writer_settled(store: SQLiteStore, timeout_s: float = 10.0) -> None:
    """Wait until the writer thread has let go of the write connection after its last
    commit. It wakes an append's caller before it counts the append done and lets go,
    so on a busy machine the caller can resume first, and an append made then (rightly)
    takes the writer instead of committing inline: the inline path is only ever
    taken when nothing else holds the connection."""
    deadline = time.monotonic() + timeout_s
    while True:
        if store._enqueued == store._finished and store._writing.acquire(blocking=False):
            store._writing.release()
            return
        assert time.monotonic() < deadline, "the writer thread never went idle"
        await asyncio.sleep(0.001)


def test_an_idle_process_store_commits_a_small_append_inline(tmp_path: Path) -> None:
    async def main() -> None:
        store = SQLiteStore(tmp_path / "s", durability="process")
        await store.open()
        try:
            await store.append([submitted("a", 1)])
            assert (store.inline_commits, store.commits) == (1, 1)
            assert await store.existing_activity_ids(["a"]) == {"a"}
        finally:
            await store.close()
        # Committed, not just written somewhere: a fresh store over the folder sees it.
        again = SQLiteStore(tmp_path / "s", durability="process")
        await again.open()
        try:
            assert await stored_order(again) == ["a"]
        finally:
            await again.close()

    asyncio.run(main())


def test_fsync_durability_commits_inline_only_the_first_append_after_an_idle_spell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        store = SQLiteStore(tmp_path / "s", durability="fsync")
        await store.open()
        try:
            # No commit yet: the writer has been idle since the store opened.
            await store.append([submitted("a", 1)])
            assert (store.inline_commits, store.commits) == (1, 1)
            assert store.fsync_commit_s > 0.0  # the commit's duration went into the average
            # Right after a commit (however slow this machine, within the idle spell
            # set here): the next append is not light load, it takes the writer.
            monkeypatch.setattr(sqlite_module, "INLINE_FSYNC_IDLE_S", 3600.0)
            await store.append([submitted("b", 2)])
            assert (store.inline_commits, store.commits) == (1, 2)
            # After an idle spell again: inline.
            monkeypatch.setattr(sqlite_module, "INLINE_FSYNC_IDLE_S", 0.0)
            await writer_settled(store)
            await store.append([submitted("c", 3)])
            assert (store.inline_commits, store.commits) == (2, 3)
        finally:
            await store.close()
        again = SQLiteStore(tmp_path / "s", durability="fsync")
        await again.open()
        try:
            assert await stored_order(again) == ["a", "b", "c"]
        finally:
            await again.close()

    asyncio.run(main())


def test_a_slow_fsync_keeps_every_commit_on_the_writer_until_the_average_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        monkeypatch.setattr(sqlite_module, "INLINE_FSYNC_IDLE_S", 0.0)
        # Bounds far above any real commit, so the test does not depend on this disk.
        monkeypatch.setattr(sqlite_module, "INLINE_FSYNC_COMMIT_MAX_S", 10.0)
        store = SQLiteStore(tmp_path / "s", durability="fsync")
        await store.open()
        try:
            store.fsync_commit_s = 100.0  # as if commits had taken 100 s each
            await store.append([submitted("a", 1)])
            assert (store.inline_commits, store.commits) == (0, 1)
            # Each commit moves the average towards what commits take now.
            assert store.fsync_commit_s < 100.0
            for _ in range(100):  # 0.8^11 * 100 < 10: a dozen commits suffice
                if store.fsync_commit_s < 10.0:
                    break
                await store.append([submitted(f"x{store.commits}", store.commits + 1)])
                assert store.inline_commits == 0
            assert store.fsync_commit_s < 10.0
            await writer_settled(store)
            await store.append([submitted("fast", store.commits + 1)])
            assert store.inline_commits == 1
        finally:
            await store.close()

    asyncio.run(main())


def test_a_large_append_takes_the_writer(tmp_path: Path) -> None:
    async def main() -> None:
        store = SQLiteStore(tmp_path / "s", durability="process")
        await store.open()
        try:
            many = [submitted(f"a{i}", i + 1) for i in range(INLINE_COMMIT_STEPS_MAX + 1)]
            await store.append(many)
            assert (store.inline_commits, store.commits) == (0, 1)
            assert len(await stored_order(store)) == len(many)
        finally:
            await store.close()

    asyncio.run(main())


def test_an_append_never_overtakes_a_write_queued_before_it(tmp_path: Path) -> None:
    async def main() -> None:
        store = SQLiteStore(tmp_path / "s", durability="process")
        await store.open()
        try:
            # The writer is busy committing (it holds the lock): both appends queue,
            # and land in the order they were made.
            store._writing.acquire()
            try:
                first = asyncio.ensure_future(store.append([submitted("first", 1)]))
                await asyncio.sleep(0)
                second = asyncio.ensure_future(store.append([submitted("second", 2)]))
                await asyncio.sleep(0)
            finally:
                store._writing.release()
            await asyncio.gather(first, second)
            assert store.inline_commits == 0
            assert await stored_order(store) == ["first", "second"]
            # The lock is free but a queued write is not finished yet (the writer
            # took it and has not locked): the append must queue behind it.
            store._enqueued += 1
            try:
                loop = asyncio.get_running_loop()
                late = _Pending(
                    *codec.plan_writes([submitted("late", 3)]), loop.create_future(), loop
                )
                assert not store._commit_inline(late)
            finally:
                store._enqueued -= 1
            # With nothing queued, the next one goes inline again (once the writer
            # has let go of the lock: it resolves its batch just before).
            await asyncio.to_thread(store._writing.acquire)
            store._writing.release()
            await store.append([submitted("third", 3)])
            assert store.inline_commits == 1
            assert await stored_order(store) == ["first", "second", "third"]
        finally:
            await store.close()

    asyncio.run(main())


def test_checkpoints_run_on_the_writer_thread_and_keep_the_wal_short(tmp_path: Path) -> None:
    async def main() -> None:
        store = SQLiteStore(tmp_path / "s", durability="process")
        await store.open()
        try:
            assert store._write is not None
            # SQLite's own checkpoint would run inside whichever commit: it is off.
            assert store._write.execute("PRAGMA wal_autocheckpoint").fetchone() == (0,)
            appends = 5 * CHECKPOINT_EVERY_COMMITS
            for i in range(appends):
                await store.append([submitted(f"a{i}", i + 1)])
            # Inline, but for the appends that met the writer busy with a queued
            # checkpoint marker (they queue instead, in order). On a quiet machine
            # that is one or two per checkpoint interval; how many more queue while
            # a loaded machine has not yet scheduled the writer thread depends on
            # the OS scheduler, so only "most of them" is asserted here (the
            # inline path itself is covered by the tests above).
            assert store.inline_commits >= appends // 2
            for _ in range(500):  # the last one may still be running (bounded wait)
                if store.checkpoints >= 2:
                    break
                await asyncio.sleep(0.01)
            assert store.checkpoints >= 2
            # The WAL starts over after each one: it holds about one checkpoint
            # interval of commits (two where a commit overlapped a checkpoint and
            # the restart waited for the next), never all of them (each commit here
            # writes about four pages).
            wal = (tmp_path / "s" / "scheduler.db-wal").stat().st_size
            everything = appends * 4 * 4096
            assert wal < everything / 2
        finally:
            await store.close()

    asyncio.run(main())
