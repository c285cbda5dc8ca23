"""A read of the core waits for the commits of what it would report."""

from __future__ import annotations

import asyncio
from pathlib import Path

from wf.node import SchedulerNode
from wf.scheduler import commands as cmd
from wf.scheduler.model import Activity
from wf.store.sqlite import SQLiteStore
from wf.testing.clock import VirtualClock


def test_durable_returns_only_once_every_handled_command_is_committed(tmp_path: Path) -> None:
    async def main() -> None:
        node = SchedulerNode(SQLiteStore(tmp_path / "store"), clock=VirtualClock())
        await node.start(background=False)
        try:
            submit = asyncio.ensure_future(
                node.execute(
                    lambda now: cmd.Submit(
                        now=now, activities=(Activity(activity_id="a", activity_type="t"),)
                    )
                )
            )
            await asyncio.sleep(0)  # the core has handled it; the commit is in flight
            assert "a" in node.core.activities
            await node.durable()
            assert await node.store.existing_activity_ids(["a"]) == {"a"}
            await submit
        finally:
            await node.stop()

    asyncio.run(main())
