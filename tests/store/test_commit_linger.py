"""SQLite's writer lingers for one more append, with ``durability="fsync"``, only while
its commits carry several appends each; appends that come one at a time are never
delayed (``wf.store.sqlite``, "Lingering")."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from _appends import submitted, until

from wf.store import sqlite as sqlite_module
from wf.store.sqlite import SQLiteStore


async def on_the_writer(store: SQLiteStore) -> None:
    """Appends go to the writer thread from here on: slow fsyncs keep them off the
    inline path (its rule: only while fsync-ed commits are quick)."""
    store.fsync_commit_s = 1.0


def test_a_writer_whose_commits_carry_several_appends_waits_for_the_next_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_module, "COMMIT_LINGER_S", 30.0)

    async def main() -> None:
        store = SQLiteStore(tmp_path / "s", durability="fsync")
        await store.open()
        try:
            await on_the_writer(store)
            store.batch_average = 2.0
            before = store.commits
            first = asyncio.ensure_future(store.append([submitted("a", 1)]))
            await until(lambda: store._enqueued == 1 and store._queue.qsize() == 0)
            # Taken, and lingering: nothing commits until the next append comes.
            await asyncio.sleep(0)
            assert not first.done()
            assert store.commits == before
            await store.append([submitted("b", 2)])
            await first
            assert store.commits == before + 1
            assert await store.existing_activity_ids(["a", "b"]) == {"a", "b"}
        finally:
            await store.close()

    asyncio.run(main())


def test_appends_that_come_one_at_a_time_are_not_delayed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With one append per commit on average the writer commits what it took at once,
    however long a linger would be."""
    monkeypatch.setattr(sqlite_module, "COMMIT_LINGER_S", 30.0)

    async def main() -> None:
        store = SQLiteStore(tmp_path / "s", durability="fsync")
        await store.open()
        try:
            await on_the_writer(store)
            assert store.batch_average < sqlite_module.LINGER_BATCH_AVERAGE_MIN
            for i in range(3):
                await asyncio.wait_for(store.append([submitted(f"a{i}", i + 1)]), 10.0)
            assert store.commits == 3
            assert store.inline_commits == 0
        finally:
            await store.close()

    asyncio.run(main())


def test_process_durability_never_lingers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_module, "COMMIT_LINGER_S", 30.0)

    async def main() -> None:
        store = SQLiteStore(tmp_path / "s", durability="process")
        await store.open()
        try:
            store.batch_average = 5.0
            # Held, so that the append cannot commit inline and takes the writer.
            store._writing.acquire()
            pending = asyncio.ensure_future(store.append([submitted("a", 1)]))
            await until(lambda: store._enqueued == 1)
            store._writing.release()
            await asyncio.wait_for(pending, 10.0)
            assert store.inline_commits == 0
            assert store.commits == 1
        finally:
            await store.close()

    asyncio.run(main())


def test_a_writer_that_took_several_appends_at_once_commits_them_without_lingering(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The linger waits for a second append only: appends the loop queued together
    (the reports of one worker batch) commit as soon as the writer has taken them."""
    monkeypatch.setattr(sqlite_module, "COMMIT_LINGER_S", 30.0)

    async def main() -> None:
        store = SQLiteStore(tmp_path / "s", durability="fsync")
        await store.open()
        try:
            await on_the_writer(store)
            store.batch_average = 4.0
            before = store.commits
            # Held, so that both queue up before the writer takes the first.
            store._writing.acquire()
            both = [
                asyncio.ensure_future(store.append([submitted("a", 1)])),
                asyncio.ensure_future(store.append([submitted("b", 2)])),
            ]
            await until(lambda: store._enqueued == 2)
            store._writing.release()
            await asyncio.wait_for(asyncio.gather(*both), 10.0)
            assert store.commits == before + 1
            assert await store.existing_activity_ids(["a", "b"]) == {"a", "b"}
        finally:
            await store.close()

    asyncio.run(main())
