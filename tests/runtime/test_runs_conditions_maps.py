"""Condition and map nodes through a real local server, on SQLite and PostgreSQL,
including a server restart in the middle of a branch and of a fan-out (issue 19).

Each test starts a local server (the JSON-RPC server plus in-process workers
over loopback). A restart test stops the server while an activity of the
branch (or an item of the fan-out) is executing: the activity waits on a gate
that the test opens only once the worker is draining, so the run is caught
mid-way, then a second server on the same store finishes it. Every execution
is recorded with the phase it ran in: nothing that completed before the
restart runs again, and what was left runs once after it. Nothing waits a
fixed time: runs are polled with a deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from _local_servers import ServerFactory, server_factory
from wf.activities import BUILTIN_ACTIVITIES
from wf.errors import InvalidArgument
from wf.runtime.artifacts import artifact_row
from wf.runtime.plan import decode_canonical
from wf.server.local import LocalStaticServer
from wf.worker import ActivityDefinition, activity
from wf.worker.activity import activity_info

View = dict[str, Any]

POLL_INTERVAL_S = 0.02
GATE_TIMEOUT_S = 20.0
"""Safety net for a gated activity (the test opens the gate itself)."""

EXECUTIONS: list[tuple[str, str]] = []
"""``(phase, activity_id)`` of every execution, in order."""
STATE: dict[str, Any] = {}
"""The phase (``one`` before the restart, ``two`` after) and the gate of this test."""


@pytest.fixture(autouse=True)
def _fresh_state() -> Iterator[None]:
    EXECUTIONS.clear()
    STATE.clear()
    STATE["phase"] = "one"
    yield
    EXECUTIONS.clear()
    STATE.clear()


@activity(name="tally")
async def tally(value: Any, gated: bool = False) -> dict[str, Any]:
    """Records its execution; a ``gated`` one waits for the gate before the restart."""
    EXECUTIONS.append((STATE["phase"], activity_info().activity_id))
    if gated and STATE["phase"] == "one":
        async with asyncio.timeout(GATE_TIMEOUT_S):
            await STATE["gate"].wait()
    return {"value": value}


@activity(name="measure", idempotent=True)
def measure(size: int) -> dict[str, int]:
    """``{"size": size}``."""
    EXECUTIONS.append((STATE["phase"], activity_info().activity_id))
    return {"size": size}


@activity(name="listing", idempotent=True)
def listing(count: int) -> dict[str, list[dict[str, int]]]:
    """``count`` items ``{"n": i}``."""
    return {"items": [{"n": i} for i in range(count)]}


@activity(name="refuse_three", idempotent=True)
def refuse_three(n: int) -> int:
    """Fails for item 3, doubles the others."""
    if n == 3:
        raise ValueError("three is refused")
    return n * 2


ACTIVITIES: list[ActivityDefinition] = [*BUILTIN_ACTIVITIES, tally, measure, listing, refuse_three]


@pytest.fixture(params=["sqlite", "postgres"])
def make_server(request: pytest.FixtureRequest, tmp_path: Path) -> ServerFactory:
    """Builds (unstarted) local servers on this test's store (each call: the same store)."""
    return server_factory(request, tmp_path, ACTIVITIES)


async def deploy(server: LocalStaticServer, artifact_id: str, plan: dict[str, Any]) -> str:
    await server.api.create_artifact_from_plan(artifact_id, 1, plan)
    saved = await server.api.save_deployment({"artifact_id": artifact_id, "artifact_version": 1})
    return saved.deployment_id


async def poll(
    get: Callable[[], Awaitable[View]],
    done: Callable[[View], bool],
    what: str,
    timeout_s: float = 30,
) -> View:
    """Poll ``get`` until ``done`` holds; fail with the last view when the deadline passes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        view = await get()
        if done(view):
            return view
        if loop.time() >= deadline:
            pytest.fail(f"{what} not reached within {timeout_s}s; last view: {view!r}")
        await asyncio.sleep(POLL_INTERVAL_S)


def final(server: LocalStaticServer, run_id: str) -> Awaitable[View]:
    return poll(
        lambda: server.api.inspect_run(run_id),
        lambda v: v["status"] in {"completed", "failed", "cancelled", "exhausted"},
        f"run {run_id} final",
    )


def trace_of(view: View) -> dict[str, View]:
    return {e["node"]: e for e in view["trace"]}


def executing(activity_id: str) -> Callable[[], bool]:
    return lambda: (STATE["phase"], activity_id) in EXECUTIONS


async def restart_while_executing(
    make_server: ServerFactory, server: LocalStaticServer, activity_id: str
) -> LocalStaticServer:
    """Stop ``server`` while the gated ``activity_id`` executes: open the gate only once
    the worker is draining (it takes no new work), so the run stops mid-way; then
    start a second server on the same store, in phase ``two``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + GATE_TIMEOUT_S
    while (STATE["phase"], activity_id) not in EXECUTIONS:
        assert loop.time() < deadline, f"{activity_id} never started: {EXECUTIONS}"
        await asyncio.sleep(POLL_INTERVAL_S)
    stopping = asyncio.create_task(server.stop())
    # The worker's own drain flag: the gate opens only after the shutdown began.
    while not server.workers[0]._draining:
        assert loop.time() < deadline, "the worker never started draining"
        await asyncio.sleep(POLL_INTERVAL_S / 4)
    STATE["gate"].set()
    await stopping
    STATE["phase"] = "two"
    again = make_server()
    await again.start()
    return again


def once_each(ids: Collection[str]) -> None:
    ran = [aid for _, aid in EXECUTIONS]
    assert sorted(ran) == sorted(ids), EXECUTIONS


# ------------------------------------------------------------------- plans

BRANCH_PLAN: dict[str, Any] = {
    "input_schema": {
        "type": "object",
        "properties": {"size": {"type": "integer"}, "limit": {"type": "integer", "default": 100}},
        "required": ["size"],
    },
    "nodes": [
        {
            "kind": "activity",
            "id": "measure",
            "activity_type": "measure",
            "args": {"size": {"$input": "size"}},
            "idempotent": True,
        },
        {
            "kind": "condition",
            "id": "big",
            "needs": ["measure"],
            "when": {
                "op": "gt",
                "args": [{"$node": "measure", "path": "size"}, {"$input": "limit"}],
            },
        },
        {
            "kind": "condition",
            "id": "small",
            "needs": ["measure"],
            "when": {
                "op": "le",
                "args": [{"$node": "measure", "path": "size"}, {"$input": "limit"}],
            },
        },
        {
            "kind": "activity",
            "id": "shrink",
            "activity_type": "tally",
            "needs": ["big"],
            "args": {"value": "shrunk", "gated": True},
        },
        {
            "kind": "activity",
            "id": "archive",
            "activity_type": "tally",
            "needs": ["shrink"],
            "args": {"value": {"$node": "shrink", "path": "value"}},
        },
        {
            "kind": "activity",
            "id": "keep",
            "activity_type": "tally",
            "needs": ["small"],
            "args": {"value": "kept"},
        },
        {
            "kind": "activity",
            "id": "report",
            "activity_type": "tally",
            "needs": ["archive", "keep"],
            "skip_when": "all_skipped",
            "args": {"value": [{"$node": "archive", "path": "value"}, {"$node": "keep"}]},
        },
    ],
    "output": {"report": {"$node": "report", "path": "value"}, "big": {"$node": "big"}},
}


def map_plan(count_input: bool = True, **node: Any) -> dict[str, Any]:
    return {
        "input_schema": {
            "type": "object",
            "properties": {"count": {"type": "integer"}},
            "required": ["count"],
        },
        "nodes": [
            {
                "kind": "activity",
                "id": "list",
                "activity_type": "listing",
                "args": {"count": {"$input": "count"}},
                "idempotent": True,
            },
            {
                "kind": "map",
                "id": "each",
                "needs": ["list"],
                "activity_type": "tally",
                "items": {"$node": "list", "path": "items"},
                "args": {"value": {"$item": "n"}, "gated": True},
                **node,
            },
        ],
        "output": {"values": {"$node": "each"}},
    }


# ------------------------------------------------------------------- tests


def test_a_branch_not_taken_is_skipped_and_shown_so(make_server: ServerFactory) -> None:
    async def main() -> None:
        STATE["phase"] = "two"  # nothing is gated
        async with make_server() as server:
            deployment = await deploy(server, "branchy", BRANCH_PLAN)
            started = await server.api.start_run(deployment, {"size": 5})
            view = await final(server, started["run_id"])
            assert view["status"] == "completed", view
            # The plan's default for limit was applied and recorded with the run.
            assert view["inputs"] == {"size": 5, "limit": 100}
            trace = trace_of(view)
            assert {n: e["status"] for n, e in trace.items()} == {
                "measure": "completed",
                "big": "completed",
                "small": "completed",
                "shrink": "skipped",
                "archive": "skipped",
                "keep": "completed",
                "report": "completed",
            }
            assert (trace["big"]["kind"], trace["big"]["output"]) == ("condition", False)
            assert "activity_id" not in trace["shrink"]
            assert view["output"] == {"report": [None, {"value": "kept"}], "big": False}
            assert view["steps_used"] == 5  # skipped nodes cost no step

    asyncio.run(main())


def test_an_unbound_optional_input_is_refused_at_creation(make_server: ServerFactory) -> None:
    async def main() -> None:
        async with make_server() as server:
            plan = map_plan()
            plan["input_schema"] = {"type": "object", "properties": {"count": {}}}
            with pytest.raises(InvalidArgument) as info:
                await server.api.create_artifact_from_plan("unbound", 1, plan)
            assert info.value.details["node"] == "list"
            assert info.value.details["field"] == "args.count"
            listed = await server.api.list_artifacts()
            assert listed.artifacts == []

    asyncio.run(main())


def test_args_that_do_not_fit_a_local_activity_are_refused_at_creation(
    make_server: ServerFactory,
) -> None:
    async def main() -> None:
        async with make_server() as server:
            plan = map_plan()
            plan["nodes"][0]["args"] = {"cnt": {"$input": "count"}}
            with pytest.raises(InvalidArgument) as info:
                await server.api.create_artifact_from_plan("typo", 1, plan)
            assert info.value.details == {"node": "list", "field": "args.cnt"}
            assert "'listing' does not take" in info.value.message
            assert (await server.api.list_artifacts()).artifacts == []

    asyncio.run(main())


def test_a_restart_in_the_middle_of_a_branch_resumes_it(make_server: ServerFactory) -> None:
    async def main() -> None:
        STATE["gate"] = asyncio.Event()
        server = make_server()
        await server.start()
        deployment = await deploy(server, "branchy", BRANCH_PLAN)
        run_id = (await server.api.start_run(deployment, {"size": 500}))["run_id"]
        again = await restart_while_executing(make_server, server, f"{run_id}.shrink")
        try:
            view = await final(again, run_id)
        finally:
            await again.stop()
        assert view["status"] == "completed", view
        assert view["output"] == {"report": ["shrunk", None], "big": True}
        statuses = {n: e["status"] for n, e in trace_of(view).items()}
        assert (statuses["small"], statuses["keep"]) == ("completed", "skipped")
        # Every activity of the branch ran exactly once, across the restart.
        once_each([f"{run_id}.{n}" for n in ("measure", "shrink", "archive", "report")])
        assert ("one", f"{run_id}.shrink") in EXECUTIONS
        assert ("two", f"{run_id}.report") in EXECUTIONS

    asyncio.run(main())


def test_a_restart_in_the_middle_of_a_fan_out_runs_each_item_once(
    make_server: ServerFactory,
) -> None:
    async def main() -> None:
        STATE["gate"] = asyncio.Event()
        server = make_server()
        await server.start()
        deployment = await deploy(server, "fan", map_plan(concurrency=1))
        run_id = (await server.api.start_run(deployment, {"count": 5}))["run_id"]
        # Item 0 executes gated: the restart catches the fan-out with 4 items to go.
        mid = await poll(
            lambda: server.api.inspect_run(run_id),
            lambda v: executing(f"{run_id}.each.0")(),
            "item 0 executing",
        )
        items = trace_of(mid)["each"]["items"]
        assert [i["status"] for i in items] == ["submitted"] + ["pending"] * 4
        again = await restart_while_executing(make_server, server, f"{run_id}.each.0")
        try:
            view = await final(again, run_id)
        finally:
            await again.stop()
        assert view["status"] == "completed", view
        assert view["output"] == {"values": [{"value": n} for n in range(5)]}
        entry = trace_of(view)["each"]
        assert entry["kind"] == "map"
        assert [i["activity_id"] for i in entry["items"]] == [
            f"{run_id}.each.{n}" for n in range(5)
        ]
        assert all(i["status"] == "completed" for i in entry["items"])
        assert all(len(i["attempts"]) == 1 for i in entry["items"])
        # Not idempotent: no item ran twice, and the ones left ran after the restart.
        once_each([f"{run_id}.each.{n}" for n in range(5)])
        assert EXECUTIONS[0] == ("one", f"{run_id}.each.0")
        assert ("two", f"{run_id}.each.4") in EXECUTIONS

    asyncio.run(main())


def test_a_fan_out_over_too_many_items_fails_clearly(make_server: ServerFactory) -> None:
    async def main() -> None:
        STATE["phase"] = "two"
        async with make_server() as server:
            deployment = await deploy(server, "fan", map_plan(max_items=3))
            started = await server.api.start_run(deployment, {"count": 4})
            view = await final(server, started["run_id"])
            assert view["status"] == "failed"
            assert view["error"]["code"] == "too_many_items"
            assert view["error"]["node"] == "each"
            assert "4 items, more than its max_items 3" in view["error"]["message"]
            assert EXECUTIONS == []

    asyncio.run(main())


def test_a_failed_item_fails_the_fan_out_with_its_index(make_server: ServerFactory) -> None:
    async def main() -> None:
        plan = map_plan(activity_type="refuse_three", retry={"max_attempts": 1})
        plan["nodes"][1]["args"] = {"n": {"$item": "n"}}
        async with make_server() as server:
            deployment = await deploy(server, "fan", plan)
            started = await server.api.start_run(deployment, {"count": 3})
            view = await final(server, started["run_id"])
            assert view["status"] == "completed", view
            assert view["output"] == {"values": [0, 2, 4]}
            started = await server.api.start_run(deployment, {"count": 5})
            view = await final(server, started["run_id"])
            assert view["status"] == "failed"
            assert view["error"]["node"] == "each"
            assert view["error"]["message"].startswith("item 3: ")
            items = trace_of(view)["each"]["items"]
            assert items[3]["status"] == "failed"
            assert items[3]["attempts"][0]["outcome"].startswith("failed")
            # The failed item's stack trace is on its error, its node's and the run's.
            assert "three is refused" in items[3]["error"]["stack_trace"]
            assert view["error"]["stack_trace"] == items[3]["error"]["stack_trace"]
            assert trace_of(view)["each"]["error"]["stack_trace"] == view["error"]["stack_trace"]

    asyncio.run(main())


CHAIN_PLAN: dict[str, Any] = {
    "nodes": [
        {
            "kind": "activity",
            "id": "first",
            "activity_type": "tally",
            "args": {"value": 1, "gated": True},
        },
        {
            "kind": "activity",
            "id": "second",
            "activity_type": "tally",
            "needs": ["first"],
            "args": {"value": 2},
        },
    ],
    "output": {"second": {"$node": "second", "path": "value"}},
}


@pytest.mark.parametrize(
    ("plan", "inputs", "done_key", "expected"),
    [
        pytest.param(CHAIN_PLAN, None, "first", {"second": 2}, id="chain"),
        pytest.param(
            map_plan(concurrency=1),
            {"count": 3},
            "each.0",
            {"values": [{"value": n} for n in range(3)]},
            id="map",
        ),
    ],
)
def test_a_completion_only_in_history_at_restart_starts_the_next_once(
    make_server: ServerFactory,
    plan: dict[str, Any],
    inputs: dict[str, Any] | None,
    done_key: str,
    expected: dict[str, Any],
) -> None:
    """The engine stops following events, the gated activity then completes in the
    scheduler only; at the restart recovery finds the completion in history and
    starts what follows, exactly once (it is not mistaken for a lost submission)."""

    async def main() -> None:
        STATE["gate"] = asyncio.Event()
        server = make_server()
        await server.start()
        deployment = await deploy(server, "restart", plan)
        run_id = (await server.api.start_run(deployment, inputs))["run_id"]
        activity_id = f"{run_id}.{done_key}"
        await poll(
            lambda: server.api.inspect_run(run_id),
            lambda v: executing(activity_id)(),
            f"{activity_id} executing",
        )
        engine = server.server.engine
        await engine.stop()  # the completion below reaches the scheduler only
        STATE["gate"].set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + GATE_TIMEOUT_S
        while not [t for t in await engine.store.history(activity_id) if t.result is not None]:
            assert loop.time() < deadline, f"{activity_id} never completed"
            await asyncio.sleep(POLL_INTERVAL_S)
        await server.stop()
        STATE["phase"] = "two"
        async with make_server() as again:
            view = await final(again, run_id)
        assert view["status"] == "completed", view
        assert view["output"] == expected
        ran = [aid for _, aid in EXECUTIONS]
        assert len(ran) == len(set(ran)), EXECUTIONS

    asyncio.run(main())


def test_an_artifact_stored_before_the_strict_rules_still_runs(make_server: ServerFactory) -> None:
    """Creation refuses an optional input bound without a default; an artifact stored
    before that rule (written here straight to the store) still loads and runs."""

    async def main() -> None:
        STATE["phase"] = "two"
        legacy = {
            "input_schema": {"type": "object", "properties": {"v": {}}},
            "nodes": [
                {
                    "kind": "activity",
                    "id": "t",
                    "activity_type": "tally",
                    "args": {"value": {"$input": "v"}},
                }
            ],
            "output": {"v": {"$node": "t", "path": "value"}},
        }
        async with make_server() as server:
            with pytest.raises(InvalidArgument):
                await server.api.create_artifact_from_plan("legacy", 1, legacy)
            workflow = server.server.workflow
            plan = decode_canonical(msgspec.json.encode(legacy))
            await workflow.store.put_artifact(artifact_row("legacy", 1, plan, 0.0))
            saved = await server.api.save_deployment(
                {"artifact_id": "legacy", "artifact_version": 1}
            )
            given = await final(
                server, (await server.api.start_run(saved.deployment_id, {"v": 7}))["run_id"]
            )
            assert given["status"] == "completed", given
            assert given["output"] == {"v": 7}
            # Without the input it fails as it always did, cleanly and with the cause.
            lacking = await final(
                server, (await server.api.start_run(saved.deployment_id))["run_id"]
            )
            assert lacking["status"] == "failed"
            assert lacking["error"]["code"] == "binding_failed"

    asyncio.run(main())
