"""The bound on one run's stored document (``run_too_large``).

Unit tests drive the pure DAG decisions with a small bound: a result that would
take the running size past it fails its node (a map item's: the map node,
naming the item) and the run, keeps nothing of the result, withdraws what is
still in flight and takes a checkpoint that does not repeat the outputs.

The server tests run a real local server on SQLite and PostgreSQL with a small
configured bound: a fan-out whose gathered results outgrow it fails with the
code, the store checks clean, and a second server on the same store loads the
failed run. The last one trips the engine's backstop (an output mapping that
repeats a big output): the decision is dropped and the run as stored fails
closed. An interrupt answer the run cannot hold is refused before anything is
stored. Runs are polled with a deadline, never waited on for a fixed time.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec
import pytest

from _local_servers import ServerFactory, server_factory
from wf.activities import BUILTIN_ACTIVITIES
from wf.cli.store_cmd import ServerDecoders
from wf.errors import InvalidArgument
from wf.runtime import dag
from wf.runtime.plan import plan_from_builtins
from wf.runtime.runs import RUN_BYTES_MAX, NodeStatus, Run, RunStatus, run_from_row, run_row
from wf.scheduler.model import Priority
from wf.server.local import LocalStaticServer
from wf.worker import ActivityDefinition, activity

RUN_ID = "run-000009"
BOUND = 4_096
"""The small bound of the unit tests, in bytes."""


def make_run() -> Run:
    return Run(
        run_id=RUN_ID,
        deployment_id="demo.main",
        deployment_revision=1,
        artifact_id="demo",
        artifact_version=1,
        content_hash="sha256:00",
        tenant="default",
        priority=Priority.NORMAL,
        inputs={},
        created_at=0.0,
    )


def act(node_id: str, **kw: Any) -> dict[str, Any]:
    return {"kind": "activity", "id": node_id, "activity_type": f"do_{node_id}", **kw}


def completed(run: Run, plan: Any, key: str, output: Any, now: float) -> dag.Effects:
    """A completion as the engine applies it: with the result's size and the bound."""
    size = len(msgspec.json.encode(output))
    return dag.activity_completed(run, plan, key, output, now, output_bytes=size, bytes_max=BOUND)


def test_the_documented_bound_is_16_mib() -> None:
    assert RUN_BYTES_MAX == 16 * 1024 * 1024


def test_a_result_within_the_bound_is_kept_and_counted() -> None:
    plan = plan_from_builtins({"nodes": [act("a"), act("b", needs=["a"])]})
    run = make_run()
    dag.begin(run, plan, 1.0)
    run.size = 1_000
    effects = completed(run, plan, "a", "x" * 98, 2.0)
    assert run.nodes["a"].status is NodeStatus.COMPLETED
    assert run.size == 1_100  # the running size grew by the result, nothing encoded
    assert [a.activity_id for a in effects.submit] == [f"{RUN_ID}.b"]


def test_a_result_past_the_bound_fails_its_node_and_the_run() -> None:
    plan = plan_from_builtins({"nodes": [act("big"), act("slow")]})
    run = make_run()
    dag.begin(run, plan, 1.0)
    run.size = 1_000
    effects = completed(run, plan, "big", "x" * BOUND, 2.0)
    assert run.status is RunStatus.FAILED
    assert run.error is not None
    assert run.error.code == "run_too_large"
    assert run.error.node == "big"
    assert f"more than the {BOUND} allowed" in run.error.message
    node = run.nodes["big"]
    assert node.status is NodeStatus.FAILED
    assert node.output is None
    assert node.error is not None
    assert node.error.code == "run_too_large"
    # What is still in flight is withdrawn; the checkpoint repeats no output.
    assert effects.cancel == [f"{RUN_ID}.slow"]
    assert run.checkpoint is not None
    assert run.checkpoint.completed == {}


def test_without_a_bound_nothing_is_checked() -> None:
    plan = plan_from_builtins({"nodes": [act("big")]})
    run = make_run()
    dag.begin(run, plan, 1.0)
    dag.activity_completed(run, plan, "big", "x" * BOUND, 2.0, output_bytes=BOUND + 2)
    assert run.status is RunStatus.COMPLETED


def test_gathered_items_past_the_bound_fail_the_map_naming_the_item() -> None:
    plan = plan_from_builtins(
        {
            "nodes": [
                act("list"),
                {
                    "kind": "map",
                    "id": "each",
                    "activity_type": "fetch",
                    "needs": ["list"],
                    "items": {"$node": "list"},
                    "args": {"n": {"$item": ""}},
                },
            ]
        }
    )
    run = make_run()
    dag.begin(run, plan, 1.0)
    completed(run, plan, "list", list(range(5)), 2.0)
    chunk = "y" * (BOUND // 3)
    for index in range(2):
        completed(run, plan, f"each.{index}", chunk, 3.0)
    assert run.status is RunStatus.RUNNING
    effects = completed(run, plan, "each.2", chunk, 4.0)
    assert run.status is RunStatus.FAILED
    assert run.error is not None
    assert run.error.code == "run_too_large"
    assert run.error.node == "each"
    assert run.error.message.startswith("item 2: ")
    each = run.nodes["each"]
    assert each.status is NodeStatus.FAILED
    assert each.error is not None
    assert each.error.code == "run_too_large"
    items = each.items or []
    assert items[2].status is NodeStatus.FAILED
    assert items[2].output is None
    assert sorted(effects.cancel) == [f"{RUN_ID}.each.3", f"{RUN_ID}.each.4"]


def test_the_running_size_is_read_from_the_row_and_never_stored() -> None:
    run = make_run()
    run.size = 12_345
    row = run_row(run, seq=9, updated_at=1.0)
    assert b"size" not in row.body
    assert run_from_row(row).size == len(row.body)


# ------------------------------------------------------------ a real server

SERVER_BOUND = 64 * 1024
"""The configured bound of the server tests, in bytes."""


@activity(name="numbers", idempotent=True)
def numbers(count: int) -> list[int]:
    """``[0, 1, ..., count - 1]``."""
    return list(range(count))


@activity(name="blob", idempotent=True)
def blob(n: int, size: int) -> str:
    """A string of ``size`` characters (``n`` only tells the items apart)."""
    return str(n % 10) * size


ACTIVITIES: list[ActivityDefinition] = [*BUILTIN_ACTIVITIES, numbers, blob]


@pytest.fixture(params=["sqlite", "postgres"])
def make_server(request: pytest.FixtureRequest, tmp_path: Path) -> ServerFactory:
    """Builds (unstarted) local servers on this test's store (each call: the same store)."""
    return server_factory(request, tmp_path, ACTIVITIES)


def bounded(make_server: ServerFactory) -> LocalStaticServer:
    server = make_server()
    server.server.engine.run_bytes_max = SERVER_BOUND
    return server


def fan_plan(output: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "input_schema": {"type": "object", "required": ["count", "size"]},
        "nodes": [
            {"kind": "activity", "id": "list", "activity_type": "numbers",
             "args": {"count": {"$input": "count"}}, "idempotent": True},
            {"kind": "map", "id": "each", "activity_type": "blob", "needs": ["list"],
             "items": {"$node": "list"}, "concurrency": 2, "idempotent": True,
             "args": {"n": {"$item": ""}, "size": {"$input": "size"}}},
        ],
        "output": output or {"all": {"$node": "each"}},
    }  # fmt: skip


async def deploy(server: LocalStaticServer, artifact_id: str, plan: dict[str, Any]) -> str:
    await server.api.create_artifact_from_plan(artifact_id, 1, plan)
    saved = await server.api.save_deployment({"artifact_id": artifact_id, "artifact_version": 1})
    return saved.deployment_id


async def final(server: LocalStaticServer, run_id: str, timeout_s: float = 30) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        view = await server.api.inspect_run(run_id)
        if view["status"] in {"completed", "failed", "cancelled", "exhausted"}:
            return view
        if loop.time() >= deadline:
            pytest.fail(f"run {run_id} not final within {timeout_s}s; last view: {view!r}")
        await asyncio.sleep(0.02)


async def store_problems(server: LocalStaticServer) -> list[Any]:
    """What ``wf store check`` reports on the server's store."""
    return list(await server.server.node.store.check(ServerDecoders()))


def test_a_fan_out_outgrowing_the_bound_fails_and_a_restart_loads_it(
    make_server: ServerFactory,
) -> None:
    async def main() -> None:
        async with bounded(make_server) as server:
            deployment = await deploy(server, "fan", fan_plan())
            small = await server.api.start_run(deployment, {"count": 3, "size": 100})
            big = await server.api.start_run(deployment, {"count": 20, "size": 8_000})
            view = await final(server, big["run_id"])
            assert view["status"] == "failed"
            assert view["error"]["code"] == "run_too_large"
            assert view["error"]["node"] == "each"
            assert view["error"]["message"].startswith("item ")
            assert f"more than the {SERVER_BOUND} allowed" in view["error"]["message"]
            # inspect shows why on the node, and on the item that did not fit.
            each = {e["node"]: e for e in view["trace"]}["each"]
            assert each["status"] == "failed"
            assert each["error"]["code"] == "run_too_large"
            assert any(
                i["status"] == "failed" and i["error"]["code"] == "run_too_large"
                for i in each["items"]
            )
            # A run within the bound is not harmed.
            assert (await final(server, small["run_id"]))["status"] == "completed"
            assert await store_problems(server) == []
            row = await server.server.node.store.get_run(big["run_id"])
            assert row is not None
            assert len(row.body) <= SERVER_BOUND
        async with bounded(make_server) as again:
            reloaded = await again.api.inspect_run(big["run_id"])
            assert reloaded["status"] == "failed"
            assert reloaded["error"] == view["error"]
            assert again.server.engine.diagnostics == []
            assert await store_problems(again) == []

    asyncio.run(main())


def test_an_output_too_large_to_store_fails_the_run_as_stored(
    make_server: ServerFactory,
) -> None:
    async def main() -> None:
        # Each result fits, but the output mapping repeats them: the completing
        # write would outgrow the bound, so the run as stored fails closed.
        output = {f"copy{i}": {"$node": "each"} for i in range(4)}
        async with bounded(make_server) as server:
            deployment = await deploy(server, "fan", fan_plan(output))
            started = await server.api.start_run(deployment, {"count": 3, "size": 6_000})
            view = await final(server, started["run_id"])
            assert view["status"] == "failed"
            assert view["error"]["code"] == "run_too_large"
            assert "stored document would have been" in view["error"]["message"]
            assert view["output"] is None
            assert await store_problems(server) == []
            row = await server.server.node.store.get_run(started["run_id"])
            assert row is not None
            assert len(row.body) <= SERVER_BOUND
        async with bounded(make_server) as again:
            reloaded = await again.api.inspect_run(started["run_id"])
            assert reloaded["status"] == "failed"
            assert reloaded["error"]["code"] == "run_too_large"

    asyncio.run(main())


ASK_PLAN: dict[str, Any] = {
    "nodes": [
        {"kind": "interrupt", "id": "ask", "prompt": "Say something",
         "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}}},
    ],
    "output": {"said": {"$node": "ask", "path": "text"}},
}  # fmt: skip


def test_an_answer_the_run_cannot_hold_is_refused_and_the_run_keeps_waiting(
    make_server: ServerFactory,
) -> None:
    async def main() -> None:
        async with bounded(make_server) as server:
            deployment = await deploy(server, "ask", ASK_PLAN)
            run_id = (await server.api.start_run(deployment, {}))["run_id"]
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while (await server.api.inspect_run(run_id))["status"] != "interrupted":
                assert loop.time() < deadline, "the run never awaited its answer"
                await asyncio.sleep(0.02)
            with pytest.raises(InvalidArgument) as refused:
                await server.api.resume_run(run_id, {"text": "z" * SERVER_BOUND})
            assert refused.value.details["field"] == "answer"
            assert f"{SERVER_BOUND}-byte bound" in refused.value.message
            view = await server.api.inspect_run(run_id)
            assert view["status"] == "interrupted"
            assert view["resumes"] == []  # refused before anything was stored
            await server.api.resume_run(run_id, {"text": "short"})
            done = await final(server, run_id)
            assert done["status"] == "completed"
            assert done["output"] == {"said": "short"}

    asyncio.run(main())
