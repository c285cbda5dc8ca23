"""``wf.testing.WorkflowEnvironment``: wf in process on a virtual clock in one call (issue 19).

Every test runs the user's own activities (declared here, not the built-ins) on real
in-process workers over loopback, and asserts the virtual instants production would
record.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest

from wf.errors import InvalidArgument
from wf.scheduler.cron import next_instants
from wf.testing import WorkflowEnvironment
from wf.testing.clock import VirtualClock
from wf.testing.environment import activities_of
from wf.worker import ActivityDefinition, activity, activity_info

T = TypeVar("T")

REPEAT = int(os.environ.get("WF_ENVIRONMENT_REPEAT", "3"))
"""How many times the week is played (3 in CI; more by hand)."""
GUARD_S = 60.0
"""Real-time bound on one test's body: a hang fails instead of hanging."""
RETRY_S = 5.0
START = datetime(2026, 6, 1, tzinfo=UTC)  # a Monday
CRON = "0 */6 * * *"


@activity(name="fetch", idempotent=True)
def fetch(source: str) -> dict[str, str]:
    """One branch of the fan-out."""
    return {"text": source.upper()}


@activity(name="flaky_store", idempotent=True)
def flaky_store(text: str) -> dict[str, str]:
    """Fails its first attempt, then succeeds: a retried failure."""
    if activity_info().attempt == 1:
        raise RuntimeError("the first attempt fails")
    return {"text": text + "!"}


@activity(name="gather", idempotent=True)
async def gather(texts: list[str]) -> dict[str, str]:
    """The fan-in (an ``async`` activity)."""
    return {"text": "+".join(texts)}


BEGAN: list[tuple[str, int, float]] = []
"""``stamped`` attempts: (text, attempt, the virtual instant its code began)."""
CLOCKS: list[VirtualClock] = []
"""The clock ``stamped`` reads (the environment's)."""


@activity(name="stamped", idempotent=True)
def stamped(text: str) -> dict[str, str]:
    """Records the virtual instant its code begins; fails its first attempt."""
    attempt = activity_info().attempt
    BEGAN.append((text, attempt, CLOCKS[-1].now()))
    if attempt == 1:
        raise RuntimeError("the first attempt fails")
    return {"text": text}


ACTIVITIES: list[ActivityDefinition] = [fetch, flaky_store, gather, stamped]


def retried(node_id: str, needs: str, backoff_s: float) -> dict[str, Any]:
    """A ``flaky_store`` node after ``needs``, retried ``backoff_s`` after its failure."""
    return {
        "kind": "activity",
        "id": node_id,
        "activity_type": "flaky_store",
        "args": {"text": {"$node": needs, "path": "text"}},
        "needs": [needs],
        "retry": {"max_attempts": 3, "initial_backoff_s": backoff_s, "jitter_fraction": 0},
    }


FAN_OUT: dict[str, Any] = {
    "nodes": [
        {"kind": "activity", "id": "a", "activity_type": "fetch", "args": {"source": "a"}},
        {"kind": "activity", "id": "b", "activity_type": "fetch", "args": {"source": "b"}},
        retried("s", "a", RETRY_S),
        {
            "kind": "activity",
            "id": "g",
            "activity_type": "gather",
            "args": {"texts": [{"$node": "s", "path": "text"}, {"$node": "b", "path": "text"}]},
            "needs": ["s", "b"],
        },
    ],
    "output": {"text": {"$node": "g", "path": "text"}},
}
"""``a`` and ``b`` fan out; ``s`` (after ``a``) fails once and is retried ``RETRY_S``
later; ``g`` gathers ``s`` and ``b``."""


def guarded(body: Awaitable[T]) -> T:
    return asyncio.run(asyncio.wait_for(body, GUARD_S))


def attempts(view: dict[str, Any]) -> dict[str, list[tuple[int, float, str]]]:
    """Node id -> its attempts: (number, start instant, outcome)."""
    return {
        n["node"]: [(t["attempt"], t["started_at"], t["outcome"]) for t in n.get("attempts", [])]
        for n in view["trace"]
    }


# ------------------------------------------------------------------ a week


async def a_week(root: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """A cron over a virtual week; returns (recorded, expected) per occurrence."""
    async with WorkflowEnvironment.start(ACTIVITIES, store=root, start_time=START) as env:
        deployment = await env.deploy(FAN_OUT, name="fan")
        await env.api.schedules.create_schedule(
            schedule_id="six_hourly",
            deployment_id=deployment,
            trigger={"kind": "cron", "expression": CRON, "timezone": "UTC"},
        )
        end = START + timedelta(days=7, hours=1)  # after the week's 28th occurrence ended
        await env.advance_to(end)
        assert env.now() == end
        recorded = []
        for o in await env.occurrences("six_hourly"):
            run = await env.api.inspect_run(o["run_id"])
            recorded.append(
                (o["instant_s"], o["status"], run["finished_at"], run["output"], attempts(run))
            )
    expected = []
    # A schedule's first occurrence comes after its creation (at START): 06:00.
    for when in next_instants(CRON, "UTC", after=START, count=28):
        t = when.timestamp()
        r = t + RETRY_S
        expected.append(
            (
                t,
                "completed",
                r,
                {"text": "A!+B"},
                {
                    "a": [(1, t, "completed")],
                    "b": [(1, t, "completed")],
                    "s": [(1, t, "failed, retried"), (2, r, "completed")],
                    "g": [(1, r, "completed")],
                },
            )
        )
    return recorded, expected


def test_a_virtual_week_of_fan_out_runs_with_a_retried_failure_records_the_expected_occurrences(
    tmp_path: Path,
) -> None:
    for rep in range(REPEAT):
        recorded, expected = guarded(a_week(tmp_path / f"store-{rep}"))
        assert len(expected) == 28
        assert recorded == expected, f"repetition {rep} differs"


# ------------------------------------------------------------------ runs


def test_run_skips_a_timer_and_a_retry_backoff_and_ends_at_their_virtual_instants() -> None:
    plan = {
        "input_schema": {
            "type": "object",
            "properties": {"source": {"type": "string"}},
            "required": ["source"],
        },
        "nodes": [
            {"kind": "timer", "id": "wait", "delay": {"kind": "relative", "seconds": 3600}},
            {
                "kind": "activity",
                "id": "a",
                "activity_type": "fetch",
                "args": {"source": {"$input": "source"}},
                "needs": ["wait"],
            },
            retried("s", "a", RETRY_S),
        ],
        "output": {"text": {"$node": "s", "path": "text"}},
    }

    async def body() -> None:
        async with WorkflowEnvironment.start(ACTIVITIES, start_time=START) as env:
            deployment = await env.deploy(plan)
            assert deployment == "flow.default"
            view = await env.run(deployment, {"source": "x"})
            assert view["status"] == "completed"
            assert view["output"] == {"text": "X!"}
            t = START.timestamp() + 3600
            assert view["finished_at"] == t + RETRY_S
            assert attempts(view)["s"] == [(1, t, "failed, retried"), (2, t + RETRY_S, "completed")]
            # Time moved only as far as the run needed.
            assert env.now() == START + timedelta(seconds=3600 + RETRY_S)

    guarded(body())


def test_the_app_is_a_loopback_client_of_the_same_server() -> None:
    async def body() -> None:
        async with WorkflowEnvironment.start(ACTIVITIES, start_time=START) as env:
            deployment = await env.deploy(FAN_OUT, name="fan")
            started = await env.app.start_run(deployment)
            view = await env.wait_for_run(started["run_id"])
            assert view["status"] == "completed"
            assert await env.app.inspect_run(started["run_id"]) == view

    guarded(body())


def test_wait_for_run_within_a_virtual_bound_times_out_at_the_bound() -> None:
    plan = {"nodes": [{"kind": "timer", "id": "t", "delay": {"kind": "relative", "seconds": 7200}}]}

    async def body() -> None:
        async with WorkflowEnvironment.start(ACTIVITIES, start_time=START) as env:
            run_id = await env.start_run(await env.deploy(plan))
            with pytest.raises(TimeoutError, match="still running after 3600"):
                await env.wait_for_run(run_id, within_s=3600)
            assert env.now() == START + timedelta(seconds=3600)
            view = await env.wait_for_run(run_id)
            assert (view["status"], view["finished_at"]) == (
                "completed",
                START.timestamp() + 7200,
            )

    guarded(body())


def test_an_early_grant_starts_at_its_own_instant_on_the_virtual_clock() -> None:
    # Two retries 30 ms apart: the jump to the first grants the second early
    # (SchedulerConfig.early_grant_s, 50 ms); the worker must hold it until its own
    # instant on the virtual clock (a year far from the real clock's), and the
    # skipper must jump there rather than wait for the lease to be given back.
    start = datetime(2031, 3, 4, tzinfo=UTC)

    def stamp(node_id: str, backoff_s: float) -> dict[str, Any]:
        node = retried(node_id, "a", backoff_s)
        return {**node, "activity_type": "stamped", "args": {"text": node_id}}

    plan = {
        "nodes": [
            {"kind": "activity", "id": "a", "activity_type": "fetch", "args": {"source": "a"}},
            stamp("s1", 5.0),
            stamp("s2", 5.03),
        ]
    }

    async def body() -> None:
        async with WorkflowEnvironment.start(ACTIVITIES, start_time=start) as env:
            CLOCKS.append(env.clock)
            BEGAN.clear()
            view = await env.run(await env.deploy(plan))
            assert view["status"] == "completed"
            assert sum(w.counters.early_grants for w in env.server.workers) == 1
            t = start.timestamp()
            assert sorted(BEGAN) == [
                ("s1", 1, t),
                ("s1", 2, t + 5.0),
                ("s2", 1, t),
                ("s2", 2, pytest.approx(t + 5.03, abs=1e-6)),
            ]

    guarded(body())


def test_closing_with_an_early_grant_waiting_for_its_instant_returns() -> None:
    # Stopped 10 ms into the early-grant window: a worker's graceful shutdown runs the
    # waiting activity at its instant, which the environment must bring.
    plan = {
        "nodes": [
            {"kind": "activity", "id": "a", "activity_type": "fetch", "args": {"source": "a"}},
            retried("s1", "a", 5.0),
            retried("s2", "a", 5.03),
        ]
    }

    async def body() -> None:
        async with WorkflowEnvironment.start(ACTIVITIES, start_time=START) as env:
            await env.start_run(await env.deploy(plan))
            await env.advance(5.01)
            waiting = [t for w in env.server.workers for t in w.waiting_until().values()]
            assert waiting == [pytest.approx(START.timestamp() + 5.03, abs=1e-6)]

    guarded(body())


# ------------------------------------------------------------------ forms


def test_run_sync_runs_an_async_body_without_an_asyncio_plugin() -> None:
    async def body(env: WorkflowEnvironment) -> dict[str, Any]:
        return await env.run(await env.deploy(FAN_OUT))

    view = WorkflowEnvironment.run_sync(body, ACTIVITIES, start_time=START)
    assert (view["status"], view["output"]) == ("completed", {"text": "A!+B"})


def test_activities_come_from_a_module_or_a_list() -> None:
    here = sys.modules[__name__]
    assert activities_of(here) == ACTIVITIES
    with pytest.raises(InvalidArgument):
        activities_of([fetch, print])  # type: ignore[list-item]


def test_a_temporary_store_is_removed_on_exit() -> None:
    async def body() -> Path:
        async with WorkflowEnvironment.start(ACTIVITIES) as env:
            root = Path(env.server.server.config.server.store.root)
            assert await asyncio.to_thread(root.exists)
        return root

    assert not guarded(body()).exists()


def test_deploy_takes_a_flow_under_its_own_name_or_the_one_given() -> None:
    """Issue 17: a ``wf.flow`` Flow deploys as ``wf deploy`` publishes it (its plan, its
    artifact id), not only a plan dict."""
    from wf import flow

    @flow.workflow("fetcher")
    def fetcher() -> flow.Outputs:
        return {"fetched": flow.call(fetch, source=flow.input("source", str))}

    async def body() -> None:
        async with WorkflowEnvironment.start([fetch], start_time=START) as env:
            assert await env.deploy(fetcher) == "fetcher.default"
            assert await env.deploy(fetcher, name="renamed", version=3) == "renamed.default"
            artifact = await env.api.get_artifact("renamed", 3)
            assert artifact.content_hash == fetcher.content_hash
            view = await env.run("fetcher.default", {"source": "x"})
            assert (view.status, view.output) == ("completed", {"fetched": {"text": "X"}})

    guarded(body())
