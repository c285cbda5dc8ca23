"""``workflow.runs.start`` with a request id: a retry never starts a second run (issue 15).

A client whose answer was lost (a failover, a dropped connection) calls again
with the same request id. Each test starts a real local server (no workers: the
plan's first node is an interrupt, so a started run waits) on SQLite and on
PostgreSQL and calls the runtime's Python API; one test calls over the wire.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from _local_servers import ServerFactory, server_factory
from wf.client.app import App
from wf.errors import AlreadyExists, InvalidArgument, NotFound
from wf.server.local import LocalStaticServer, build_local_static_workflow_server
from wf.server.rpc import ANONYMOUS_ADMIN, Caller

C = ANONYMOUS_ADMIN

ASK_PLAN: dict[str, Any] = {
    "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
    "nodes": [{"kind": "interrupt", "id": "ask", "prompt": "Go on?"}],
    "output": {"answer": {"$node": "ask"}},
}


@pytest.fixture(params=["sqlite", "postgres"])
def make_server(request: pytest.FixtureRequest, tmp_path: Path) -> ServerFactory:
    """Builds (unstarted) local servers on this test's store (each call: the same store)."""
    return server_factory(request, tmp_path)


async def deploy(server: LocalStaticServer, name: str = "default") -> str:
    await server.api.create_artifact_from_plan("ask", 1, ASK_PLAN)
    saved = await server.api.save_deployment(
        {"artifact_id": "ask", "artifact_version": 1, "name": name}
    )
    return saved.deployment_id


async def start(
    server: LocalStaticServer,
    deployment_id: str,
    inputs: dict[str, Any] | None = None,
    request_id: str | None = None,
    caller: Caller = C,
) -> dict[str, Any]:
    return await server.api.workflow.start_run(
        deployment_id, inputs, caller=caller, request_id=request_id
    )


async def run_ids(server: LocalStaticServer) -> list[str]:
    return [r["run_id"] for r in (await server.api.list_runs())["runs"]]


def test_a_retry_with_the_same_request_id_answers_the_same_run_and_starts_nothing(
    make_server: ServerFactory,
) -> None:
    async def main() -> None:
        async with make_server() as server:
            deployment = await deploy(server)
            first = await start(server, deployment, {"n": 1}, "req-1")
            again = await start(server, deployment, {"n": 1}, "req-1")
            assert again == first
            assert first["status"] == "interrupted"
            assert await run_ids(server) == [first["run_id"]]
            # Another request id is another run.
            other = await start(server, deployment, {"n": 1}, "req-2")
            assert await run_ids(server) == [first["run_id"], other["run_id"]]

    asyncio.run(main())


def test_a_retry_after_a_restart_answers_the_run_as_it_stands_now(
    make_server: ServerFactory,
) -> None:
    async def main() -> None:
        async with make_server() as server:
            deployment = await deploy(server)
            first = await start(server, deployment, None, "req-1")
            await server.api.cancel_run(first["run_id"], "done with it")
        async with make_server() as again:
            answer = await start(again, deployment, {}, "req-1")
            assert answer["run_id"] == first["run_id"]
            assert answer["status"] == "cancelled"
            assert await run_ids(again) == [first["run_id"]]

    asyncio.run(main())


def test_the_same_request_id_with_other_inputs_or_deployment_is_already_exists(
    make_server: ServerFactory,
) -> None:
    async def main() -> None:
        async with make_server() as server:
            deployment = await deploy(server)
            other_deployment = await deploy(server, "other")
            first = await start(server, deployment, {"n": 1}, "req-1")
            for refused in (
                start(server, deployment, {"n": 2}, "req-1"),
                start(server, other_deployment, {"n": 1}, "req-1"),
            ):
                with pytest.raises(AlreadyExists) as exc:
                    await refused
                assert exc.value.details == {"request_id": "req-1", "run_id": first["run_id"]}
            assert await run_ids(server) == [first["run_id"]]

    asyncio.run(main())


def test_concurrent_calls_with_one_request_id_start_one_run(make_server: ServerFactory) -> None:
    async def main() -> None:
        async with make_server() as server:
            deployment = await deploy(server)
            answers = await asyncio.gather(
                *(start(server, deployment, {"n": 1}, "req-1") for _ in range(4))
            )
            assert len({a["run_id"] for a in answers}) == 1
            assert await run_ids(server) == [answers[0]["run_id"]]

    asyncio.run(main())


def test_request_ids_are_unique_per_tenant(make_server: ServerFactory) -> None:
    async def main() -> None:
        async with make_server() as server:
            await server.api.create_artifact_from_plan("ask", 1, ASK_PLAN)
            first = await server.api.save_deployment(
                {"artifact_id": "ask", "artifact_version": 1, "tenant": "t1", "name": "t1_a"}
            )
            second = await server.api.save_deployment(
                {"artifact_id": "ask", "artifact_version": 1, "tenant": "t2", "name": "t2_a"}
            )
            one = await start(server, first.deployment_id, None, "same")
            two = await start(server, second.deployment_id, None, "same")
            assert one["run_id"] != two["run_id"]

    asyncio.run(main())


def test_a_bad_request_id_is_refused_before_anything_is_stored(tmp_path: Path) -> None:
    async def main() -> None:
        async with build_local_static_workflow_server(tmp_path / "s", activities=[]) as server:
            deployment = await deploy(server)
            for bad in ("", "a\x00b", "x" * 257):
                with pytest.raises(InvalidArgument) as exc:
                    await start(server, deployment, None, bad)
                assert exc.value.details["field"] == "request_id"
            with pytest.raises(NotFound):
                await start(server, "nope.default", None, "req")
            assert await run_ids(server) == []

    asyncio.run(main())


def test_the_wire_takes_the_request_id_and_answers_like_the_python_api(tmp_path: Path) -> None:
    async def main() -> None:
        async with build_local_static_workflow_server(tmp_path / "s", activities=[]) as server:
            deployment = await deploy(server)
            async with App(server.url) as app:
                first = await app._call(
                    "start_run", deployment_id=deployment, inputs={"n": 1}, request_id="w-1"
                )
                again = await app._call(
                    "start_run", deployment_id=deployment, inputs={"n": 1}, request_id="w-1"
                )
                local = await start(server, deployment, {"n": 1}, "w-1")
                assert again == first == local
                with pytest.raises(AlreadyExists) as over_wire:
                    await app._call(
                        "start_run", deployment_id=deployment, inputs={"n": 3}, request_id="w-1"
                    )
                with pytest.raises(AlreadyExists) as in_process:
                    await start(server, deployment, {"n": 3}, "w-1")
                assert over_wire.value.message == in_process.value.message
                assert over_wire.value.details == in_process.value.details
            assert await run_ids(server) == [first["run_id"]]

    asyncio.run(main())
