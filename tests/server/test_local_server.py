"""The local/static server runs in-process workers through the real protocol."""

from __future__ import annotations

import asyncio
from pathlib import Path

from wf.scheduler.model import ActivityState
from wf.server.local import build_local_static_workflow_server
from wf.server.rpc import ANONYMOUS_ADMIN
from wf.worker import activity


@activity(name="greet", idempotent=True)
def greet(name: str) -> str:
    return f"hello {name}"


def test_local_workers_run_activities_over_loopback_json_rpc(tmp_path: Path) -> None:
    async def main() -> None:
        local = build_local_static_workflow_server(tmp_path / "store", activities=[greet])
        async with local:
            assert local.url.startswith("http://127.0.0.1:")
            api = local.api.scheduler
            await api.submit_activities([greet.activity("g-1", args=["wf"])], ANONYMOUS_ADMIN)
            async with asyncio.timeout(20):
                while True:
                    view = await api.get_activity("g-1", ANONYMOUS_ADMIN)
                    if view.finished_state is ActivityState.COMPLETED:
                        break
                    await asyncio.sleep(0.02)
            history = (await api.activity_history("g-1", ANONYMOUS_ADMIN)).transitions
            leased = [t for t in history if t.to_state is ActivityState.LEASED]
            assert [t.worker_id for t in leased] == ["local-1"]
            # The worker registered through scheduler.workers.register like any other.
            workers = (await api.list_workers(ANONYMOUS_ADMIN)).workers
            assert [w.info.worker_id for w in workers] == ["local-1"]
            assert workers[0].info.activity_types == frozenset({"greet"})
            assert local.workers[0].counters.completed == 1
        assert (tmp_path / "store" / "scheduler.db").exists()

    asyncio.run(main())
