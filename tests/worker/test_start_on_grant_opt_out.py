"""``Worker(start_report_delay_s=None)``: the exact start handshake, for every activity.

Such a worker polls with ``start=0``, so no grant is committed as its start: a plain
(non-idempotent) activity begins only after its ``scheduler.leases.start`` was
acknowledged, and a grant whose answer is lost would be requeued, not failed
(docs/architecture.md, "Start on grant"). The default worker, beside it, starts the
same activity on its grant.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from wf.client.rpc_client import RpcClient
from wf.scheduler.config import SchedulerConfig
from wf.server.app import WfServer
from wf.server.config import ServerConfig, ServerSection, StoreConfig
from wf.worker import Worker, activity

WAIT_S = 10.0


@activity(name="plain")
async def plain() -> None:
    """Not idempotent."""


async def run_one(server: WfServer, admin: RpcClient, aid: str, **kw: Any) -> Worker:
    worker = Worker(
        f"http://127.0.0.1:{server.port}",
        [plain],
        worker_id=f"w-{aid}",
        heartbeat_interval_s=0.5,
        poll_wait_s=0.5,
        **kw,
    )
    task = asyncio.create_task(worker.run())
    try:
        await admin.call("scheduler.activities.submit", {"activities": [plain.activity(aid)]})
        deadline = time.monotonic() + WAIT_S
        while worker.counters.completed < 1:
            assert time.monotonic() < deadline, f"{aid} not completed"
            await asyncio.sleep(0.02)
    finally:
        await worker.shutdown()
        await task
    return worker


def test_without_start_report_delay_every_start_is_explicit(tmp_path: Path) -> None:
    async def main() -> None:
        config = ServerConfig(
            server=ServerSection(
                port=0, store=StoreConfig(root=str(tmp_path / "store"), durability="process")
            ),
            dispatch=SchedulerConfig(),
        )
        server = WfServer(config)
        await server.start()
        admin = RpcClient(f"http://127.0.0.1:{server.port}")
        try:
            exact = await run_one(server, admin, "exact", start_report_delay_s=None)
            assert (exact.counters.started_on_grant, exact.counters.started) == (0, 1)
            fast = await run_one(server, admin, "fast")
            assert fast.counters.started_on_grant == 1
            page = await admin.call(
                "scheduler.activities.history", {"activity_id": "exact", "limit": 10}
            )
            rows = page["transitions"]
            granted = next(r for r in rows if r["to_state"] == "leased")
            started = next(r for r in rows if r["to_state"] == "executing")
            # Two commits: the start was reported after the grant's answer arrived.
            assert started["at"] > granted["at"]
        finally:
            await admin.close()
            await server.stop()

    asyncio.run(main())
