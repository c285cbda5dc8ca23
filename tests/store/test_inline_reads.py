"""SQLite's inline id lookups: small ``existing_activity_ids`` calls answered on the
event-loop thread (no thread hop) must still see every commit, fall back to the
read thread for big batches or other threads, and fail like the thread path."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

import wf.store.sqlite as sqlite_module
from wf.errors import StoreUnavailable
from wf.scheduler.model import Activity
from wf.scheduler.outputs import ActivitySubmitted
from wf.store import codec
from wf.store.sqlite import INLINE_LOOKUP_IDS_MAX, SQLiteStore

T0 = 1_767_225_600.0


def submitted(aid: str, seq: int) -> ActivitySubmitted:
    return ActivitySubmitted(
        at=T0, activity=Activity(activity_id=aid, activity_type="t", seq=seq, submitted_at=T0)
    )


def _forbid_threads(store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make the thread path fail loudly; returns a list that counts its uses."""
    used: list[int] = []

    async def no_thread(fn: Any) -> Any:
        used.append(1)
        raise AssertionError("a small lookup took the thread path")

    monkeypatch.setattr(store, "_reading", no_thread)
    return used


def test_inline_lookups_see_each_commit_immediately(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        store = SQLiteStore(tmp_path / "s")
        await store.open()
        try:
            _forbid_threads(store, monkeypatch)
            assert await store.existing_activity_ids(["a0"]) == set()
            # Each commit is visible to the very next lookup: no lookup keeps a
            # read transaction (and so an old snapshot) open.
            for i in range(20):
                await store.append([submitted(f"a{i}", i + 1)])
                assert await store.existing_activity_ids([f"a{i}", f"a{i + 1}"]) == {f"a{i}"}
            ids = [f"a{i}" for i in range(INLINE_LOOKUP_IDS_MAX)]
            assert await store.existing_activity_ids([*ids, "a3", "a3"]) == {
                f"a{i}" for i in range(20)
            }
        finally:
            await store.close()

    asyncio.run(main())


def test_inline_lookup_sees_a_commit_by_another_connection(tmp_path: Path) -> None:
    async def main() -> None:
        store = SQLiteStore(tmp_path / "s")
        await store.open()
        try:
            assert await store.existing_activity_ids(["x"]) == set()
            # The same row committed behind the store's back (another process, say).
            spec = codec.encode(submitted("x", 1).activity)
            other = sqlite3.connect(store.db_path, isolation_level=None)
            try:
                other.execute(
                    "INSERT INTO activities (seq, activity_id, spec, state, submitted_at, "
                    "updated_at) VALUES (1, 'x', ?, 'queued', ?, ?)",
                    (spec, T0, T0),
                )
            finally:
                other.close()
            assert await store.existing_activity_ids(["x"]) == {"x"}
        finally:
            await store.close()

    asyncio.run(main())


def test_large_batches_take_the_read_thread_and_still_answer(tmp_path: Path) -> None:
    async def main() -> None:
        store = SQLiteStore(tmp_path / "s")
        await store.open()
        try:
            n = sqlite_module.ID_CHUNK_MAX + INLINE_LOOKUP_IDS_MAX
            await store.append([submitted(f"b{i}", i + 1) for i in range(n)])
            calls: list[int] = []
            original = store._reading

            async def counting(fn: Any) -> Any:
                calls.append(1)
                return await original(fn)

            store._reading = counting  # type: ignore[method-assign]
            asked = [f"b{i}" for i in range(n + 10)]
            assert await store.existing_activity_ids(asked) == {f"b{i}" for i in range(n)}
            assert calls == [1]
            exactly = [f"b{i}" for i in range(INLINE_LOOKUP_IDS_MAX)]
            assert await store.existing_activity_ids(exactly) == set(exactly)
            assert calls == [1]  # at the limit: still inline
            above = [f"b{i}" for i in range(INLINE_LOOKUP_IDS_MAX + 1)]
            assert await store.existing_activity_ids(above) == set(above)
            assert calls == [1, 1]
        finally:
            await store.close()

    asyncio.run(main())


def test_a_lookup_from_another_thread_takes_the_read_thread(tmp_path: Path) -> None:
    """The inline connection belongs to the thread that opened the store; a caller on
    another thread (its own event loop) must not touch it."""
    store = SQLiteStore(tmp_path / "s")

    async def setup() -> None:
        await store.open()
        await store.append([submitted("t1", 1)])

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(setup())
        answers: list[set[str]] = []
        errors: list[BaseException] = []

        def other_thread() -> None:
            try:
                answers.append(asyncio.run(store.existing_activity_ids(["t1", "t2"])))
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        assert errors == []
        assert answers == [{"t1"}]
        assert loop.run_until_complete(store.existing_activity_ids(["t1"])) == {"t1"}
    finally:
        loop.run_until_complete(store.close())
        loop.close()


def test_a_locked_inline_lookup_retries_on_the_read_thread(tmp_path: Path) -> None:
    """The inline connection never waits for a lock (it would stall the loop); a
    lookup that meets one is answered by the read thread instead."""

    async def main() -> None:
        store = SQLiteStore(tmp_path / "s")
        await store.open()
        try:
            await store.append([submitted("l1", 1)])

            class Busy:
                def execute(self, *args: Any) -> Any:
                    raise sqlite3.OperationalError("database is locked")

                def close(self) -> None:
                    pass

            real = store._inline
            store._inline = Busy()  # type: ignore[assignment]
            try:
                assert await store.existing_activity_ids(["l1", "l2"]) == {"l1"}
            finally:
                store._inline = real
        finally:
            await store.close()

    asyncio.run(main())


def test_a_closed_store_raises_store_unavailable_inline_and_in_bulk(tmp_path: Path) -> None:
    async def main() -> None:
        store = SQLiteStore(tmp_path / "s")
        with pytest.raises(StoreUnavailable, match="not open"):
            await store.existing_activity_ids(["never-opened"])
        await store.open()
        await store.append([submitted("c1", 1)])
        assert await store.existing_activity_ids(["c1"]) == {"c1"}
        await store.close()
        assert store._inline is None
        many = [f"c{i}" for i in range(INLINE_LOOKUP_IDS_MAX * 3)]
        for asked in (["c1"], many):
            with pytest.raises(StoreUnavailable, match="not open"):
                await store.existing_activity_ids(asked)
        with pytest.raises(StoreUnavailable):
            await store.open()  # a closed store stays closed

    asyncio.run(main())


def test_reads_still_work_while_the_write_fence_is_up(tmp_path: Path) -> None:
    """A failed commit fences appends, not reads: inline lookups go on answering."""

    async def main() -> None:
        store = SQLiteStore(tmp_path / "s")
        await store.open()
        try:
            await store.append([submitted("f1", 1)])
            with pytest.raises(StoreUnavailable):
                await store.append([submitted("f1", 2)])  # the id is taken: commit fails
            with pytest.raises(StoreUnavailable):
                await store.append([submitted("f2", 3)])  # fenced
            assert await store.existing_activity_ids(["f1", "f2"]) == {"f1"}
            await store.clear_write_fence()
            await store.append([submitted("f2", 3)])
            assert await store.existing_activity_ids(["f1", "f2"]) == {"f1", "f2"}
        finally:
            await store.close()

    asyncio.run(main())
