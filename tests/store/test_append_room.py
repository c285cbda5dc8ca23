"""SQLite appends start at the call, without a task, and wait for room only while
``APPENDS_WAITING_MAX`` are unsettled: then in call order (``wf.store.sqlite``,
"Appends without a task")."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from _appends import stored_order, submitted, until

from wf.store import sqlite as sqlite_module
from wf.store.sqlite import SQLiteStore


def test_an_append_is_queued_before_the_call_returns(tmp_path: Path) -> None:
    async def main() -> None:
        store = SQLiteStore(tmp_path / "s", durability="fsync")
        await store.open()
        try:
            store.fsync_commit_s = 1.0  # keep it off the inline path
            before = store._enqueued
            pending = store.append([submitted("a", 1)])
            # No loop turn has passed: the writer has it already.
            assert store._enqueued == before + 1
            assert isinstance(pending, asyncio.Future)
            await pending
            assert await store.existing_activity_ids(["a"]) == {"a"}
        finally:
            await store.close()

    asyncio.run(main())


def test_appends_past_the_bound_wait_for_room_and_land_in_call_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_module, "APPENDS_WAITING_MAX", 2)

    async def main() -> None:
        store = SQLiteStore(tmp_path / "s", durability="fsync")
        await store.open()
        try:
            store.fsync_commit_s = 1.0
            before = store._enqueued
            store._writing.acquire()  # the writer cannot commit: nothing settles
            try:
                calls = [store.append([submitted(f"a{i}", i + 1)]) for i in range(5)]
                for _ in range(5):
                    await asyncio.sleep(0)
                assert store._enqueued == before + 2  # two started, three wait
                assert len(store._room_waiters) == 3
            finally:
                store._writing.release()
            await asyncio.wait_for(asyncio.gather(*calls), 10.0)
            assert await stored_order(store) == [f"a{i}" for i in range(5)]
            assert store._in_flight == 0
            assert not store._room_waiters
        finally:
            await store.close()

    asyncio.run(main())


def test_a_cancelled_waiter_is_not_stored_and_the_next_one_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_module, "APPENDS_WAITING_MAX", 1)

    async def main() -> None:
        store = SQLiteStore(tmp_path / "s", durability="fsync")
        await store.open()
        try:
            store.fsync_commit_s = 1.0
            store._writing.acquire()
            try:
                first = store.append([submitted("first", 1)])
                dropped = store.append([submitted("dropped", 2)])
                last = store.append([submitted("last", 3)])
                await until(lambda: len(store._room_waiters) == 2)
                assert isinstance(dropped, asyncio.Task)
                dropped.cancel()
                await asyncio.sleep(0)
            finally:
                store._writing.release()
            await asyncio.wait_for(asyncio.gather(first, last), 10.0)
            with pytest.raises(asyncio.CancelledError):
                await dropped
            assert await stored_order(store) == ["first", "last"]
        finally:
            await store.close()

    asyncio.run(main())
