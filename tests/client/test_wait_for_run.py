"""``wait_for_run``: the same wait on the client (``App``, ``App.sync``) and on a local
server's ``server.api``, against a local server running the built-in activities."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from wf.client.app import STOPPED_RUN_STATUSES, App
from wf.errors import InvalidArgument
from wf.server.local import build_local_static_workflow_server

UPPER = {
    "input_schema": {"type": "object", "required": ["name"]},
    "nodes": [
        {
            "kind": "activity",
            "id": "shout",
            "activity_type": "upper",
            "args": {"text": {"$input": "name"}},
        }
    ],
    "output": {"shouted": {"$node": "shout", "path": "text"}},
}
STUCK = {"nodes": [{"kind": "activity", "id": "never", "activity_type": "nobody.serves.this"}]}


def test_wait_for_run_locally_and_over_the_wire(tmp_path: Path) -> None:
    async def main() -> None:
        server = build_local_static_workflow_server(tmp_path / "store", durability="process")
        async with server:
            api = server.api
            await api.create_artifact_from_plan("shout", 1, UPPER)
            await api.save_deployment({"artifact_id": "shout", "artifact_version": 1})
            await api.create_artifact_from_plan("stuck", 1, STUCK)
            await api.save_deployment({"artifact_id": "stuck", "artifact_version": 1})

            run = await api.start_run("shout.default", {"name": "ada"})
            view = await api.wait_for_run(run["run_id"], timeout=20)
            assert (view["status"], view["output"]) == ("completed", {"shouted": "ADA"})

            async with App(server.url) as app:
                run = await app.start_run("shout.default", {"name": "bob"})
                view = await app.wait_for_run(run["run_id"], 20)
                assert view == await app.inspect_run(run["run_id"])
                assert view["output"] == {"shouted": "BOB"}

                stuck = await app.start_run("stuck.default")
                began = time.monotonic()
                with pytest.raises(TimeoutError, match=r"still running after 0\.3 s"):
                    await app.wait_for_run(stuck["run_id"], 0.3)
                assert time.monotonic() - began < 5
                with pytest.raises(TimeoutError):
                    await api.wait_for_run(stuck["run_id"], timeout=0)
                with pytest.raises(InvalidArgument):
                    await app.wait_for_run(stuck["run_id"], -1)
                await app.cancel_run(stuck["run_id"])
                cancelled = await app.wait_for_run(stuck["run_id"])
                assert cancelled["status"] == "cancelled"

    asyncio.run(main())


def test_the_statuses_a_wait_returns_at() -> None:
    from wf.runtime.runs import FINAL_STATUSES, RunStatus

    assert {str(s) for s in FINAL_STATUSES} | {str(RunStatus.INTERRUPTED)} == STOPPED_RUN_STATUSES
