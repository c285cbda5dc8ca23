"""A graceful shutdown keeps a grant committed as its start for the draining worker
(docs/architecture.md, "Start on grant"): the server returns unstarted leases to the
queue, but a started one is executing and must reach its worker, which runs it.

In-process server (temporary SQLite store), driven through ``SchedulerAPI``; the
worker's demand is put to the core directly so that the grants wait in the mailbox,
as they do when a long poll's answer is still on its way at shutdown.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from wf.scheduler import commands as cmd
from wf.scheduler.config import SchedulerConfig
from wf.scheduler.model import Activity, WorkerInfo
from wf.server.app import WfServer
from wf.server.config import ServerConfig, ServerSection, StoreConfig
from wf.server.rpc import ANONYMOUS_ADMIN


def test_shutdown_returns_unstarted_grants_and_delivers_started_ones(tmp_path: Path) -> None:
    async def main() -> None:
        config = ServerConfig(
            server=ServerSection(
                port=0, store=StoreConfig(root=str(tmp_path / "store"), durability="process")
            ),
            dispatch=SchedulerConfig(),
        )
        server = WfServer(config)
        await server.start()
        api = server.scheduler
        try:
            # SQLite: the server resolves the unset mode to start on grant for any activity.
            assert server.node.config.start_on_grant == "any"
            info = WorkerInfo(worker_id="w1", max_concurrency=2, heartbeat_interval_s=60.0)
            await api.register_worker(info, ANONYMOUS_ADMIN)
            # Demand for two, one of them started on receipt; nobody collects yet.
            await server.node.execute(
                lambda now: cmd.Poll(now=now, worker_id="w1", max_items=2, start=1)
            )
            await api.submit_activities(
                [Activity(activity_id=a, activity_type="t") for a in ("a", "b")], ANONYMOUS_ADMIN
            )
            returned = await api.shutdown_worker("w1", ANONYMOUS_ADMIN)
            assert returned == 1  # the unstarted grant went back to the queue
            answer = await api.poll("w1", 2, 0.0, ANONYMOUS_ADMIN)
            (started,) = answer.leases
            assert started.started
            # The revocation of the returned one is delivered too, never one of the started.
            assert started.lease.activity_id not in {r.activity_id for r in answer.revoked}
            states = {a: (await api.get_activity(a, ANONYMOUS_ADMIN)).activity for a in ("a", "b")}
            running = states[started.lease.activity_id]
            assert running is not None
            assert running.state.value == "executing"
            other = "b" if started.lease.activity_id == "a" else "a"
            back = states[other]
            assert back is not None
            assert back.state.value == "queued"
        finally:
            await server.stop()

    asyncio.run(main())
