"""Runs over the Python API (``server.api``), on SQLite and on PostgreSQL.

Every test starts a real local server (the JSON-RPC server plus in-process
workers reaching it over loopback) on one store backend and drives runs with
``start_run`` / ``inspect_run`` / ``list_runs`` / ``resume_run`` /
``cancel_run``. Nothing waits a fixed time: :func:`wait_for_status` polls
``inspect_run`` until the run reaches a status, with a generous deadline as a
safety net only. Activities that must overlap meet at an ``asyncio.Barrier``,
so a test can only pass if the scheduler really leased them at the same time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Iterator
from pathlib import Path
from typing import Any

import pytest

from wf.activities import BUILTIN_ACTIVITIES
from wf.errors import Conflict, InvalidArgument, NotFound
from wf.runtime.runs import Trigger
from wf.scheduler.config import SchedulerConfig
from wf.server.config import ServerConfig, ServerSection, StoreConfig
from wf.server.local import LocalStaticServer, build_local_static_workflow_server
from wf.server.rpc import ANONYMOUS_ADMIN
from wf.worker import ActivityDefinition, activity
from wf.worker.activity import activity_info

View = dict[str, Any]
ServerFactory = Callable[..., LocalStaticServer]

POLL_INTERVAL_S = 0.02
BARRIER_TIMEOUT_S = 10.0
"""How long a branch waits for its sibling before failing (a safety net, not a timing)."""


async def wait_for_status(
    get: Callable[[], Awaitable[View]], statuses: Collection[str], timeout_s: float = 20
) -> View:
    """Poll ``get`` (an ``inspect_run`` call) every 20 ms until the run's status is one
    of ``statuses``; fail with the last view seen if the deadline passes first."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        view = await get()
        if view["status"] in statuses:
            return view
        if loop.time() >= deadline:
            pytest.fail(
                f"run {view.get('run_id')} did not reach {sorted(statuses)} within "
                f"{timeout_s}s; last view: {view!r}"
            )
        await asyncio.sleep(POLL_INTERVAL_S)


# ------------------------------------------------------------ activities

BARRIERS: dict[str, asyncio.Barrier] = {}
"""The barrier of the running test (made in its own event loop)."""
ATTEMPTS: dict[str, int] = {}
"""Executions so far, by activity id (reset before every test)."""


class TransientProblem(Exception):
    """Raised by ``flaky`` until its budget of failures is spent."""


class PermanentProblem(Exception):
    """Listed in ``non_retryable_errors``: never retried."""


@activity(name="meet", idempotent=True)
async def meet(label: str) -> dict[str, str]:
    """Waits until its sibling branch runs too, then upper-cases ``label``."""
    async with asyncio.timeout(BARRIER_TIMEOUT_S):
        await BARRIERS["fan"].wait()
    return {"text": label.upper(), "worker": activity_info().worker_id}


@activity(name="flaky", idempotent=True)
def flaky(fails: int) -> dict[str, int]:
    """Fails its first ``fails`` executions, then succeeds."""
    activity_id = activity_info().activity_id
    ATTEMPTS[activity_id] = count = ATTEMPTS.get(activity_id, 0) + 1
    if count <= fails:
        raise TransientProblem(f"execution {count} of {activity_id} failed")
    return {"succeeded_on": count}


@activity(name="doomed", idempotent=True)
def doomed() -> None:
    """Always fails with an error its node declares non-retryable."""
    activity_id = activity_info().activity_id
    ATTEMPTS[activity_id] = ATTEMPTS.get(activity_id, 0) + 1
    raise PermanentProblem(f"{activity_id} cannot succeed")


@activity(name="stall_once", idempotent=True)
async def stall_once() -> dict[str, int]:
    """Hangs on its first execution (until cancelled), returns on the next."""
    activity_id = activity_info().activity_id
    ATTEMPTS[activity_id] = count = ATTEMPTS.get(activity_id, 0) + 1
    if count == 1:
        await asyncio.Event().wait()
    return {"succeeded_on": count}


TEST_ACTIVITIES: list[ActivityDefinition] = [
    *BUILTIN_ACTIVITIES,
    meet,
    flaky,
    doomed,
    stall_once,
]


@pytest.fixture(autouse=True)
def _fresh_counters() -> Iterator[None]:
    ATTEMPTS.clear()
    BARRIERS.clear()
    yield
    ATTEMPTS.clear()
    BARRIERS.clear()


# ----------------------------------------------------------------- plans

FAN_PLAN: dict[str, Any] = {
    "input_schema": {
        "type": "object",
        "properties": {"left": {"type": "string"}, "right": {"type": "string"}},
        "required": ["left", "right"],
        "additionalProperties": False,
    },
    "nodes": [
        {
            "kind": "activity",
            "id": "split",
            "activity_type": "echo",
            "args": {"left": {"$input": "left"}, "right": {"$input": "right"}},
            "idempotent": True,
        },
        {
            "kind": "activity",
            "id": "a",
            "activity_type": "meet",
            "needs": ["split"],
            "args": {"label": {"$node": "split", "path": "left"}},
            "retry": {"max_attempts": 1},
            "idempotent": True,
        },
        {
            "kind": "activity",
            "id": "b",
            "activity_type": "meet",
            "needs": ["split"],
            "args": {"label": {"$node": "split", "path": "right"}},
            "retry": {"max_attempts": 1},
            "idempotent": True,
        },
        {
            "kind": "activity",
            "id": "join",
            "activity_type": "join_texts",
            "needs": ["a", "b"],
            "args": {
                "texts": [{"$node": "a", "path": "text"}, {"$node": "b", "path": "text"}],
                "separator": "+",
            },
            "idempotent": True,
        },
    ],
    "output": {"joined": {"$node": "join", "path": "text"}},
}


def retry_plan(activity_type: str, retry: dict[str, Any], **args: Any) -> dict[str, Any]:
    return {
        "nodes": [
            {
                "kind": "activity",
                "id": "f",
                "activity_type": activity_type,
                "args": args,
                "retry": retry,
                "idempotent": True,
            }
        ],
        "output": {"result": {"$node": "f"}},
    }


FAST_RETRY: dict[str, Any] = {"initial_backoff_s": 0.01, "jitter_fraction": 0}

APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "note": {"type": "string"}},
    "required": ["approved", "note"],
    "additionalProperties": False,
}

REVIEW_PLAN: dict[str, Any] = {
    "input_schema": {
        "type": "object",
        "properties": {"title": {"type": "string"}},
        "required": ["title"],
    },
    "nodes": [
        {
            "kind": "activity",
            "id": "draft",
            "activity_type": "format_text",
            "args": {"template": "draft: {title}", "title": {"$input": "title"}},
            "idempotent": True,
        },
        {
            "kind": "interrupt",
            "id": "approve",
            "needs": ["draft"],
            "prompt": "Publish this draft?",
            "input_schema": APPROVAL_SCHEMA,
        },
        {
            "kind": "activity",
            "id": "publish",
            "activity_type": "format_text",
            "needs": ["approve"],
            "args": {
                "template": "{text} ({note})",
                "text": {"$node": "draft", "path": "text"},
                "note": {"$node": "approve", "path": "note"},
            },
            "idempotent": True,
        },
    ],
    "output": {
        "published": {"$node": "publish", "path": "text"},
        "approved": {"$node": "approve", "path": "approved"},
    },
}

ASK_PLAN: dict[str, Any] = {
    "nodes": [{"kind": "interrupt", "id": "ask", "prompt": "Go on?"}],
    "output": {"answer": {"$node": "ask"}},
}
"""A run of it is interrupted as soon as it begins (no worker involved)."""

CHAIN_PLAN: dict[str, Any] = {
    "nodes": [
        {
            "kind": "activity",
            "id": "first",
            "activity_type": "format_text",
            "args": {"template": "one"},
            "idempotent": True,
        },
        {
            "kind": "activity",
            "id": "second",
            "activity_type": "upper",
            "needs": ["first"],
            "args": {"text": {"$node": "first", "path": "text"}},
            "idempotent": True,
        },
    ],
    "output": {"result": {"$node": "second", "path": "text"}},
}

TIMER_DELAY_S = 0.2
TIMER_PLAN: dict[str, Any] = {
    "nodes": [
        {"kind": "timer", "id": "pause", "delay": {"kind": "relative", "seconds": TIMER_DELAY_S}}
    ],
    "output": {"timer": {"$node": "pause"}},
}


# --------------------------------------------------------------- servers


@pytest.fixture(params=["sqlite", "postgres"])
def make_server(request: pytest.FixtureRequest, tmp_path: Path) -> ServerFactory:
    """Builds (unstarted) local servers on this test's store; every call uses the same
    store, so a second server sees what the first one stored."""
    if request.param == "sqlite":
        root = tmp_path / "store"

        def sqlite_server(
            *,
            activities: list[ActivityDefinition] = TEST_ACTIVITIES,
            workers: int = 1,
            max_concurrency: int = 4,
            dispatch: SchedulerConfig | None = None,
        ) -> LocalStaticServer:
            return build_local_static_workflow_server(
                root,
                activities=activities,
                workers=workers,
                max_concurrency=max_concurrency,
                dispatch=dispatch,
            )

        return sqlite_server

    dsn: str = request.getfixturevalue("pg_dsn")
    schema: str = request.getfixturevalue("pg_schema")

    def postgres_server(
        *,
        activities: list[ActivityDefinition] = TEST_ACTIVITIES,
        workers: int = 1,
        max_concurrency: int = 4,
        dispatch: SchedulerConfig | None = None,
    ) -> LocalStaticServer:
        config = ServerConfig(
            server=ServerSection(
                host="127.0.0.1",
                port=0,
                store=StoreConfig(postgres_dsn=dsn, postgres_schema=schema),
            ),
            dispatch=dispatch or SchedulerConfig(),
        )
        return LocalStaticServer(
            config, activities, workers=workers, max_concurrency=max_concurrency
        )

    return postgres_server


async def deploy(
    server: LocalStaticServer, artifact_id: str, plan: dict[str, Any], **fields: Any
) -> str:
    """Create version 1 of ``artifact_id`` (idempotent) and save a deployment of it."""
    await server.api.create_artifact_from_plan(artifact_id, 1, plan)
    saved = await server.api.save_deployment(
        {"artifact_id": artifact_id, "artifact_version": 1, **fields}
    )
    return saved.deployment_id


def inspector(server: LocalStaticServer, run_id: str) -> Callable[[], Awaitable[View]]:
    return lambda: server.api.inspect_run(run_id)


def node_trace(view: View) -> dict[str, View]:
    return {entry["node"]: entry for entry in view["trace"]}


# ----------------------------------------------------------------- tests


def test_fan_out_fan_in_runs_branches_on_two_workers(make_server: ServerFactory) -> None:
    async def main() -> None:
        BARRIERS["fan"] = asyncio.Barrier(2)
        server = make_server(workers=2, max_concurrency=1)
        async with server:
            deployment = await deploy(server, "fan", FAN_PLAN)
            started = await server.api.start_run(deployment, {"left": "x", "right": "y"})
            assert started["run_id"] == "run-000001"
            assert started["status"] == "running"
            view = await wait_for_status(
                inspector(server, started["run_id"]), {"completed", "failed"}
            )
        assert view["status"] == "completed", view
        assert view["output"] == {"joined": "X+Y"}
        assert view["error"] is None
        assert view["inputs"] == {"left": "x", "right": "y"}
        assert view["steps_used"] == 4
        assert view["started_at"] <= view["finished_at"]
        trace = node_trace(view)
        assert [e["node"] for e in view["trace"]] == ["split", "a", "b", "join"]
        for entry in view["trace"]:
            assert entry["kind"] == "activity"
            assert entry["status"] == "completed"
            assert entry["activity_id"] == f"run-000001.{entry['node']}"
            assert entry["started_at"] <= entry["finished_at"]
            [attempt] = entry["attempts"]
            assert attempt["attempt"] == 1
            assert attempt["outcome"] == "completed"
            assert attempt["worker_id"] in {"local-1", "local-2"}
            assert entry["started_at"] <= attempt["leased_at"] <= attempt["started_at"]
            assert attempt["started_at"] <= attempt["finished_at"] <= entry["finished_at"]
        # The branches met at the barrier: each held one worker's only slot at once.
        branch_workers = {trace[n]["attempts"][0]["worker_id"] for n in ("a", "b")}
        assert branch_workers == {"local-1", "local-2"}
        assert {trace[n]["output"]["worker"] for n in ("a", "b")} == branch_workers
        # Fan-out after split, fan-in after both branches.
        assert trace["a"]["started_at"] >= trace["split"]["finished_at"]
        assert trace["b"]["started_at"] >= trace["split"]["finished_at"]
        assert trace["join"]["started_at"] >= max(
            trace["a"]["finished_at"], trace["b"]["finished_at"]
        )
        checkpoint = view["checkpoint"]
        assert checkpoint["status"] == "completed"
        assert checkpoint["completed"]["join"] == {"text": "X+Y"}
        assert checkpoint.get("awaiting", []) == []

    asyncio.run(main())


def test_retries_follow_the_node_retry_policy(make_server: ServerFactory) -> None:
    async def main() -> tuple[View, View, View]:
        async with make_server() as server:
            third_time = await deploy(
                server, "retry3", retry_plan("flaky", {**FAST_RETRY, "max_attempts": 3}, fails=2)
            )
            too_few = await deploy(
                server, "retry2", retry_plan("flaky", {**FAST_RETRY, "max_attempts": 2}, fails=2)
            )
            hopeless = await deploy(
                server,
                "hopeless",
                retry_plan(
                    "doomed",
                    {**FAST_RETRY, "max_attempts": 3, "non_retryable_errors": ["PermanentProblem"]},
                ),
            )
            views = []
            for deployment in (third_time, too_few, hopeless):
                started = await server.api.start_run(deployment)
                views.append(
                    await wait_for_status(
                        inspector(server, started["run_id"]), {"completed", "failed"}
                    )
                )
            return views[0], views[1], views[2]

    recovered, exhausted, permanent = asyncio.run(main())

    # max_attempts 3: two failures, then success on the third execution.
    assert recovered["status"] == "completed", recovered
    assert recovered["output"] == {"result": {"succeeded_on": 3}}
    [node] = recovered["trace"]
    assert node["status"] == "completed"
    assert node["activity_id"] == "run-000001.f"
    assert [a["attempt"] for a in node["attempts"]] == [1, 2, 3]
    assert [a["token"] for a in node["attempts"]] == sorted({a["token"] for a in node["attempts"]})
    for n, failed in enumerate(node["attempts"][:2], start=1):
        assert failed["outcome"] != "completed"
        assert failed["error"] == f"TransientProblem: execution {n} of run-000001.f failed"
        assert failed["leased_at"] <= failed["started_at"] <= failed["finished_at"]
    assert node["attempts"][2]["outcome"] == "completed"
    assert "error" not in node["attempts"][2]
    # Attempts are sequential: each one leased after the previous finished.
    for before, after in zip(node["attempts"], node["attempts"][1:], strict=False):
        assert after["leased_at"] >= before["finished_at"]
    assert ATTEMPTS["run-000001.f"] == 3

    # max_attempts 2: the second failure is final and fails the run with its cause.
    assert exhausted["status"] == "failed", exhausted
    assert exhausted["output"] is None
    error = exhausted["error"]
    assert error["code"] == "activity_failed"
    assert error["node"] == "f"
    assert error["error_type"] == "TransientProblem"
    assert "execution 2 of run-000002.f failed" in error["message"]
    [node] = exhausted["trace"]
    assert node["status"] == "failed"
    assert node["error"] == error
    assert [a["attempt"] for a in node["attempts"]] == [1, 2]
    assert all("TransientProblem" in a["error"] for a in node["attempts"])
    assert node["attempts"][-1]["outcome"].startswith("failed")
    assert exhausted["checkpoint"]["status"] == "failed"
    assert ATTEMPTS["run-000002.f"] == 2

    # A non-retryable error type fails at once, whatever the budget.
    assert permanent["status"] == "failed", permanent
    assert permanent["error"]["code"] == "activity_failed"
    assert permanent["error"]["node"] == "f"
    assert permanent["error"]["error_type"] == "PermanentProblem"
    [node] = permanent["trace"]
    [attempt] = node["attempts"]
    assert attempt["attempt"] == 1
    assert attempt["outcome"].startswith("failed")
    assert attempt["error"] == "PermanentProblem: run-000003.f cannot succeed"
    assert ATTEMPTS["run-000003.f"] == 1


def test_a_node_timeout_fails_the_attempt_that_outlives_it_and_the_retry_completes(
    make_server: ServerFactory,
) -> None:
    plan = retry_plan("stall_once", {**FAST_RETRY, "max_attempts": 2})
    plan["nodes"][0]["timeout_s"] = 0.3

    async def main() -> View:
        async with make_server() as server:
            deployment = await deploy(server, "stall", plan)
            started = await server.api.start_run(deployment)
            return await wait_for_status(
                inspector(server, started["run_id"]), {"completed", "failed"}
            )

    view = asyncio.run(main())
    assert view["status"] == "completed", view
    assert view["output"] == {"result": {"succeeded_on": 2}}
    [node] = view["trace"]
    first, second = node["attempts"]
    # The scheduler ends the attempt (the node's timeout is its start_to_close_s).
    assert first["error"] == "StartToCloseTimeout: not finished within 0.3 s of starting"
    assert first["finished_at"] - first["started_at"] >= 0.3
    assert second["outcome"] == "completed"
    assert ATTEMPTS["run-000001.f"] == 2


def test_interrupt_rejects_a_bad_answer_and_resumes_with_a_good_one(
    make_server: ServerFactory,
) -> None:
    async def main() -> None:
        async with make_server() as server:
            api = server.api
            deployment = await deploy(server, "review", REVIEW_PLAN)
            started = await api.start_run(deployment, {"title": "Runs"})
            run_id = started["run_id"]
            waiting = await wait_for_status(inspector(server, run_id), {"interrupted"})
            assert waiting["awaiting"] == [
                {
                    "node": "approve",
                    "prompt": "Publish this draft?",
                    "input_schema": APPROVAL_SCHEMA,
                }
            ]
            assert waiting["output"] is None
            checkpoint = waiting["checkpoint"]
            assert checkpoint["status"] == "interrupted"
            assert checkpoint["awaiting"] == ["approve"]
            assert checkpoint["completed"] == {"draft": {"text": "draft: Runs"}}
            assert waiting["resumes"] == []
            trace = node_trace(waiting)
            assert trace["approve"]["kind"] == "interrupt"
            assert trace["approve"]["status"] == "awaiting_input"
            assert "publish" not in trace

            # A bad answer: refused with details, the run stays interrupted, the attempt is kept.
            with pytest.raises(InvalidArgument) as refused:
                await api.resume_run(run_id, {"approved": "yes", "note": "x"})
            assert refused.value.details["field"] == "answer"
            assert refused.value.details["node"] == "approve"
            assert refused.value.details["problems"]
            after_refusal = await api.inspect_run(run_id)
            assert after_refusal["status"] == "interrupted"
            assert after_refusal["awaiting"] == waiting["awaiting"]
            [rejected] = after_refusal["resumes"]
            assert rejected["state"] == "rejected"
            assert (rejected["attempt"], rejected["node"]) == (1, "approve")
            assert rejected["finished_at"] is not None
            # Naming a node that awaits nothing is refused too (and marks nothing).
            with pytest.raises(InvalidArgument) as wrong_node:
                await api.resume_run(run_id, {"approved": True, "note": "x"}, "draft")
            assert wrong_node.value.details["awaiting"] == ["approve"]

            # The good answer resumes the run to completion.
            resumed = await api.resume_run(run_id, {"approved": True, "note": "ship it"}, "approve")
            assert resumed["status"] in {"running", "completed"}
            done = await wait_for_status(inspector(server, run_id), {"completed", "failed"})
            assert done["status"] == "completed", done
            assert done["output"] == {"published": "draft: Runs (ship it)", "approved": True}
            assert [(m["attempt"], m["state"]) for m in done["resumes"]] == [
                (1, "rejected"),
                (2, "applied"),
            ]
            assert done["awaiting"] == []
            trace = node_trace(done)
            assert trace["approve"]["status"] == "completed"
            assert trace["approve"]["output"] == {"approved": True, "note": "ship it"}
            assert trace["publish"]["status"] == "completed"
            assert done["checkpoint"]["status"] == "completed"

            with pytest.raises(Conflict):
                await api.resume_run(run_id, {"approved": False, "note": "late"})
            assert (await api.inspect_run(run_id))["resumes"] == done["resumes"]

    asyncio.run(main())


def test_max_steps_exhaustion(make_server: ServerFactory) -> None:
    async def main() -> View:
        async with make_server() as server:
            deployment = await deploy(server, "chain", CHAIN_PLAN, max_steps=1)
            started = await server.api.start_run(deployment)
            assert started["max_steps"] == 1
            return await wait_for_status(
                inspector(server, started["run_id"]), {"completed", "failed", "exhausted"}
            )

    view = asyncio.run(main())
    assert view["status"] == "exhausted", view
    assert view["error"]["code"] == "max_steps_exhausted"
    assert view["error"]["node"] == "second"
    assert view["output"] is None
    assert view["steps_used"] == 1
    trace = node_trace(view)
    assert trace["first"]["status"] == "completed"
    assert "second" not in trace  # never started
    assert view["checkpoint"]["status"] == "exhausted"
    assert view["checkpoint"]["completed"] == {"first": {"text": "one"}}


def test_cancel_an_interrupted_run(make_server: ServerFactory) -> None:
    async def main() -> None:
        async with make_server() as server:
            api = server.api
            deployment = await deploy(server, "ask", ASK_PLAN)
            started = await api.start_run(deployment)
            run_id = started["run_id"]
            before = await wait_for_status(inspector(server, run_id), {"interrupted"})
            with pytest.raises(InvalidArgument):  # an oversized reason is refused, nothing kept
                await api.cancel_run(run_id, "x" * 1_001)
            assert await api.inspect_run(run_id) == before
            cancelled = await api.cancel_run(run_id, "no longer needed")
            assert cancelled["status"] == "cancelled"
            assert cancelled["error"] == {"code": "cancelled", "message": "no longer needed"}
            assert cancelled["awaiting"] == []
            assert cancelled["finished_at"] is not None
            assert node_trace(cancelled)["ask"]["status"] == "cancelled"
            assert cancelled["checkpoint"]["status"] == "cancelled"
            assert await api.inspect_run(run_id) == cancelled
            with pytest.raises(Conflict):
                await api.cancel_run(run_id)
            with pytest.raises(Conflict):
                await api.resume_run(run_id, "yes")
            assert await api.inspect_run(run_id) == cancelled

    asyncio.run(main())


def test_an_operator_cancel_whose_reason_starts_with_run_fails_the_node(
    make_server: ServerFactory,
) -> None:
    # The engine tells its own cancels by their origin, never by their text: an
    # operator's reason that reads like the engine's ("run ...") is still news.
    async def main() -> View:
        async with make_server(activities=[]) as server:  # no worker: the node stays queued
            deployment = await deploy(server, "chain", CHAIN_PLAN)
            started = await server.api.start_run(deployment)
            run_id = started["run_id"]
            assert node_trace(started)["first"]["status"] == "submitted"
            await server.server.scheduler.cancel_activity(
                f"{run_id}.first", "run 7 is obsolete", ANONYMOUS_ADMIN
            )
            return await wait_for_status(inspector(server, run_id), {"failed"})

    view = asyncio.run(main())
    assert view["error"]["code"] == "activity_cancelled"
    assert view["error"]["node"] == "first"
    assert node_trace(view)["first"]["status"] == "failed"


def test_inspect_never_shows_a_change_whose_store_write_is_in_flight(
    make_server: ServerFactory,
) -> None:
    async def main() -> None:
        async with make_server() as server:
            api = server.api
            deployment = await deploy(server, "ask", ASK_PLAN)
            run_id = (await api.start_run(deployment))["run_id"]
            await wait_for_status(inspector(server, run_id), {"interrupted"})
            engine = server.server.engine
            store = engine.store
            entered, release = asyncio.Event(), asyncio.Event()
            real_update = store.update_run

            async def gated_update(row: Any, *, expected_revision: int) -> Any:
                entered.set()
                await release.wait()
                return await real_update(row, expected_revision=expected_revision)

            store.update_run = gated_update  # type: ignore[method-assign]
            try:
                cancelling = asyncio.create_task(api.cancel_run(run_id, "stop"))
                await entered.wait()  # the run is cancelled in memory, not yet stored
                reading = asyncio.create_task(api.inspect_run(run_id))
                done, _ = await asyncio.wait({reading}, timeout=0.3)
                assert not done, "inspect_run answered with a state the store lacks"
                stored = await api.list_runs()
                assert [r["status"] for r in stored["runs"]] == ["interrupted"]
            finally:
                release.set()
                store.update_run = real_update  # type: ignore[method-assign]
            assert (await cancelling)["status"] == "cancelled"
            assert (await reading)["status"] == "cancelled"
            assert [r["status"] for r in (await api.list_runs())["runs"]] == ["cancelled"]

    asyncio.run(main())


def test_timer_node_fires_after_its_delay(make_server: ServerFactory) -> None:
    async def main() -> tuple[View, View]:
        async with make_server() as server:
            deployment = await deploy(server, "pause", TIMER_PLAN)
            started = await server.api.start_run(deployment)
            done = await wait_for_status(
                inspector(server, started["run_id"]), {"completed", "failed"}
            )
            return started, done

    started, done = asyncio.run(main())
    assert started["status"] == "running"
    [waiting] = started["trace"]
    assert waiting["status"] == "waiting"
    assert done["status"] == "completed", done
    [node] = done["trace"]
    assert node["kind"] == "timer"
    assert node["status"] == "completed"
    assert node["wake_at"] == waiting["wake_at"]
    assert node["wake_at"] == pytest.approx(node["started_at"] + TIMER_DELAY_S)
    assert node["finished_at"] >= node["wake_at"]
    fired = done["output"]["timer"]
    assert fired["due_at"] == node["wake_at"]
    assert fired["fired_at"] >= fired["due_at"]


def test_list_runs_pages_and_filters(make_server: ServerFactory) -> None:
    async def main() -> None:
        async with make_server() as server:
            api = server.api
            first = await deploy(server, "ask", ASK_PLAN, name="first")
            second = await deploy(server, "ask", ASK_PLAN, name="second")
            ids = []
            for deployment in (first, second, first, second, first):
                ids.append((await api.start_run(deployment))["run_id"])
            assert ids == [f"run-00000{n}" for n in range(1, 6)]
            for run_id in ids:
                await wait_for_status(inspector(server, run_id), {"interrupted"})
            for run_id in (ids[1], ids[3]):
                await api.cancel_run(run_id)

            pages: list[list[str]] = []
            cursor = None
            while True:
                page = await api.list_runs(limit=2, cursor=cursor)
                pages.append([r["run_id"] for r in page["runs"]])
                cursor = page["next_cursor"]
                if cursor is None:
                    break
                assert isinstance(cursor, str)
                assert len(pages) < 10, pages
            assert pages == [ids[0:2], ids[2:4], ids[4:5]]

            everything = await api.list_runs()
            assert everything["next_cursor"] is None
            summaries = everything["runs"]
            assert [r["run_id"] for r in summaries] == ids  # oldest first
            assert [r["deployment_id"] for r in summaries] == [
                first,
                second,
                first,
                second,
                first,
            ]
            assert [r["status"] for r in summaries] == [
                "interrupted",
                "cancelled",
                "interrupted",
                "cancelled",
                "interrupted",
            ]
            assert all(r["trigger"]["kind"] == "manual" for r in summaries)
            assert summaries[0] == {
                k: v for k, v in (await api.inspect_run(ids[0])).items() if k in summaries[0]
            }

            async def listed(**filters: Any) -> list[str]:
                return [r["run_id"] for r in (await api.list_runs(**filters))["runs"]]

            assert await listed(deployment_id=first) == [ids[0], ids[2], ids[4]]
            assert await listed(deployment_id=second) == [ids[1], ids[3]]
            assert await listed(status="cancelled") == [ids[1], ids[3]]
            assert await listed(status="interrupted") == [ids[0], ids[2], ids[4]]
            assert await listed(deployment_id=second, status="interrupted") == []
            assert await listed(deployment_id="ask.nope") == []
            assert await listed(status="completed") == []
            filtered = await api.list_runs(deployment_id=first, limit=2)
            assert [r["run_id"] for r in filtered["runs"]] == [ids[0], ids[2]]
            rest = await api.list_runs(deployment_id=first, limit=2, cursor=filtered["next_cursor"])
            assert [r["run_id"] for r in rest["runs"]] == [ids[4]]
            assert rest["next_cursor"] is None

            for limit in (0, 101, -1):
                with pytest.raises(InvalidArgument) as bad_limit:
                    await api.list_runs(limit=limit)
                assert bad_limit.value.details["field"] == "limit"
            for cursor in ("not a cursor!", "bm9wZQ", ""):
                with pytest.raises(InvalidArgument) as bad_cursor:
                    await api.list_runs(cursor=cursor)
                assert bad_cursor.value.details["field"] == "cursor"
            with pytest.raises(InvalidArgument) as bad_status:
                await api.list_runs(status="sleeping")
            assert bad_status.value.details["field"] == "status"

    asyncio.run(main())


def test_start_run_refuses_bad_inputs_and_unknown_deployments(make_server: ServerFactory) -> None:
    async def main() -> None:
        async with make_server() as server:
            api = server.api
            deployment = await deploy(server, "fan", FAN_PLAN)
            for inputs in (
                {"left": 5, "right": "y"},  # wrong type
                {"left": "x"},  # required input missing
                {"left": "x", "right": "y", "extra": 1},  # closed properties
            ):
                with pytest.raises(InvalidArgument) as refused:
                    await api.start_run(deployment, inputs)
                assert refused.value.details["field"] == "inputs"
                assert refused.value.details["problems"]
            with pytest.raises(InvalidArgument):
                await api.start_run(deployment)
            with pytest.raises(NotFound):
                await api.start_run("fan.nope", {"left": "x", "right": "y"})
            with pytest.raises(NotFound):
                await api.start_run("nope.default")
            assert await api.list_runs() == {"runs": [], "next_cursor": None}
            with pytest.raises(NotFound):
                await api.inspect_run("run-000001")
            with pytest.raises(NotFound):
                await api.resume_run("run-000001", {})
            with pytest.raises(NotFound):
                await api.cancel_run("run-000001")

    asyncio.run(main())


def test_run_ids_are_sequential_and_survive_a_restart(make_server: ServerFactory) -> None:
    async def main() -> None:
        async with make_server() as server:
            deployment = await deploy(server, "ask", ASK_PLAN)
            first = await server.api.start_run(deployment)
            second = await server.api.start_run(deployment)
            assert [first["run_id"], second["run_id"]] == ["run-000001", "run-000002"]
            await server.api.cancel_run("run-000002")
        async with make_server() as again:
            third = await again.api.start_run(deployment)
            assert third["run_id"] == "run-000003"
            listed = await again.api.list_runs()
            assert [(r["run_id"], r["status"]) for r in listed["runs"]] == [
                ("run-000001", "interrupted"),
                ("run-000002", "cancelled"),
                ("run-000003", "interrupted"),
            ]
            # The run interrupted before the restart is still resumable after it.
            await again.api.resume_run("run-000001", {"go": True})
            done = await wait_for_status(inspector(again, "run-000001"), {"completed", "failed"})
            assert done["status"] == "completed", done
            assert done["output"] == {"answer": {"go": True}}

    asyncio.run(main())


def test_an_admitted_run_shows_nothing_synthesized(make_server: ServerFactory) -> None:
    async def main() -> None:
        async with make_server() as server:
            deployment = await deploy(server, "ask", ASK_PLAN)
            trigger = Trigger(kind="schedule", schedule_id="s1", occurrence=0.0)
            run, plan = await server.api.workflow.prepare_run(
                deployment, None, caller=ANONYMOUS_ADMIN, trigger=trigger
            )
            admitted = await server.server.engine.admit(run, plan)
            assert admitted.run_id == "run-000001"
            view = await server.api.inspect_run(admitted.run_id)
            assert view["status"] == "admitted"
            assert view["trace"] == []
            assert view["output"] is None
            assert view["checkpoint"] is None
            assert view["awaiting"] == []
            assert view["resumes"] == []
            assert view["started_at"] is None
            assert view["finished_at"] is None
            assert view["steps_used"] == 0
            assert view["trigger"] == {"kind": "schedule", "schedule_id": "s1", "occurrence": 0.0}
            by_schedule = await server.api.list_runs(schedule_id="s1")
            assert [r["run_id"] for r in by_schedule["runs"]] == ["run-000001"]
            assert (await server.api.list_runs(schedule_id="s2"))["runs"] == []
            by_status = await server.api.list_runs(status="admitted")
            assert [r["status"] for r in by_status["runs"]] == ["admitted"]
            # A manual run afterwards takes the next number and is not a schedule's.
            manual = await server.api.start_run(deployment)
            assert manual["run_id"] == "run-000002"
            assert (await server.api.list_runs(schedule_id="s1"))["runs"] == by_schedule["runs"]

    asyncio.run(main())
