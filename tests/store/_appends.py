"""Helpers the SQLite append tests share: a submission record, a bounded wait, and
the order activities were stored in."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from wf.scheduler.model import Activity
from wf.scheduler.outputs import ActivitySubmitted
from wf.store.sqlite import SQLiteStore

T0 = 1_767_225_600.0


def submitted(aid: str, seq: int) -> ActivitySubmitted:
    return ActivitySubmitted(
        at=T0, activity=Activity(activity_id=aid, activity_type="t", seq=seq, submitted_at=T0)
    )


async def until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        await asyncio.sleep(0.001)


async def stored_order(store: SQLiteStore) -> list[str]:
    """Activity ids in the order of their ``seq``, as stored."""
    loaded = await store.load()
    return [a.activity_id for a in sorted(loaded.activities, key=lambda a: a.seq)]
