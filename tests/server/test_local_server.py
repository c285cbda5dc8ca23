"""The local/static server runs in-process workers through the real protocol."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from pathlib import Path

import pytest

from wf.errors import Conflict
from wf.runtime.api import WorkflowAPI
from wf.scheduler.model import ActivityState
from wf.schedules.api import ScheduleAPI
from wf.server.local import build_local_static_workflow_server
from wf.server.rpc import ANONYMOUS_ADMIN
from wf.wire import schedule_methods, workflow_methods
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
            # The worker counts a completion once it reads the server's answer, which
            # may come after the server already shows the activity COMPLETED: wait for it.
            counters = local.workers[0].counters
            async with asyncio.timeout(20):
                while counters.completed == 0:  # noqa: ASYNC110 - a plain counter sets no event
                    await asyncio.sleep(0.02)
            assert counters.completed == 1
            assert counters.acknowledged == [("g-1", leased[0].token)]
        assert (tmp_path / "store" / "scheduler.db").exists()

    asyncio.run(main())


def _without_caller(method: Callable[..., object]) -> list[tuple[str, object, object]]:
    return [
        (p.name, p.default, p.kind is inspect.Parameter.KEYWORD_ONLY)
        for p in inspect.signature(method).parameters.values()
        if p.name not in ("self", "caller")
    ]


def test_the_local_api_has_every_workflow_and_schedule_method_with_its_python_signature(
    tmp_path: Path,
) -> None:
    local = build_local_static_workflow_server(tmp_path / "store", schedules=True)
    api, schedules = local.api, local.api.schedules
    for spec, facade, python_api in [
        *((s, api, WorkflowAPI) for s in workflow_methods.METHODS),
        *((s, schedules, ScheduleAPI) for s in schedule_methods.METHODS),
    ]:
        method = getattr(facade, spec.python_name)
        twin = getattr(python_api, spec.python_name)
        assert method.__name__ == spec.python_name
        assert _without_caller(method) == _without_caller(twin), spec.python_name


def test_local_api_calls_take_no_caller_and_refuse_one(tmp_path: Path) -> None:
    plan = {"nodes": [{"kind": "activity", "id": "hi", "activity_type": "greet"}]}

    async def main() -> None:
        local = build_local_static_workflow_server(
            tmp_path / "store", activities=[], schedules=True
        )
        async with local:
            api = local.api
            created = await api.create_artifact_from_plan("hello", 1, plan)
            assert await api.get_artifact(artifact_id="hello") == created
            saved = await api.save_deployment({"artifact_id": "hello", "artifact_version": 1})
            assert (await api.list_deployments()).deployments == [saved]
            made = await api.schedules.create_schedule(
                schedule_id="s",
                deployment_id=saved.deployment_id,
                trigger={"kind": "cron", "expression": "0 9 * * *", "timezone": "UTC"},
            )
            assert await api.schedules.get_schedule(schedule_id="s") == made
            with pytest.raises(TypeError):
                await api.get_deployment(saved.deployment_id, caller=ANONYMOUS_ADMIN)  # type: ignore[call-arg]

    asyncio.run(main())


def test_schedules_of_a_local_server_built_without_them_raise_conflict(tmp_path: Path) -> None:
    local = build_local_static_workflow_server(tmp_path / "store")
    with pytest.raises(Conflict, match="schedules=True"):
        _ = local.api.schedules
