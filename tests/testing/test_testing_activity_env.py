"""``wf.testing.ActivityEnvironment``: one activity with a fake context (issue 19).

Heartbeats are captured in order, cancellation reaches the code as it does on a
worker (``async``: ``CancelledError`` at its next await; sync: ``is_cancelled``),
and the attempt number and the last heartbeat details of an earlier attempt reach
the code, so a resuming activity can be tested alone.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from wf.testing import ActivityEnvironment
from wf.worker import (
    ActivityCancelled,
    NonRetryableError,
    activity,
    activity_info,
    decode_result,
    heartbeat,
    is_cancelled,
    last_heartbeat_details,
)
from wf.worker.execution import Abandoned, Failed, Succeeded

GUARD_S = 30.0


@activity(name="count_up", idempotent=True)
def count_up(n: int) -> dict[str, Any]:
    """Heartbeats each step; resumes after the last step an earlier attempt reported."""
    done = last_heartbeat_details() or {"step": 0}
    for step in range(done["step"] + 1, n + 1):
        heartbeat({"step": step})
    return {"attempt": activity_info().attempt, "resumed_from": done["step"], "steps": n}


@activity(name="sync_until_cancelled")
def sync_until_cancelled(release: threading.Event) -> str:
    """Heartbeats, then waits for the cancellation it polls for (as sync code must)."""
    heartbeat("started")
    while not is_cancelled():
        release.wait(0.001)
    heartbeat("saw cancellation")
    return "finished anyway"


CLEANED: list[str] = []


@activity(name="async_until_cancelled")
async def async_until_cancelled() -> str:
    """Heartbeats, then sleeps until cancelled; cleans up on the way out."""
    heartbeat("started")
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        CLEANED.append("cleaned up")
        raise
    return "never"


@activity(name="refuses")
def refuses(why: str) -> None:
    raise NonRetryableError(why)


def guarded(body: Any) -> Any:
    return asyncio.run(asyncio.wait_for(body, GUARD_S))


def test_heartbeats_are_captured_in_order_with_the_attempt_info() -> None:
    env = ActivityEnvironment()
    result = env.run_sync(count_up, 3)
    assert result == {"attempt": 1, "resumed_from": 0, "steps": 3}
    assert env.heartbeats == [{"step": 1}, {"step": 2}, {"step": 3}]
    assert env.context is not None
    assert env.context.heartbeats == 3


def test_a_later_attempt_resumes_from_the_last_heartbeat_details() -> None:
    env = ActivityEnvironment(attempt=2, last_heartbeat_details={"step": 2})
    assert env.run_sync(count_up, 4) == {"attempt": 2, "resumed_from": 2, "steps": 4}
    assert env.heartbeats == [{"step": 3}, {"step": 4}]


def test_on_heartbeat_sees_every_details_as_they_are_recorded() -> None:
    seen: list[Any] = []
    env = ActivityEnvironment(on_heartbeat=seen.append)
    env.run_sync(count_up, 2)
    assert seen == [{"step": 1}, {"step": 2}]


def test_a_sync_activity_cancelled_mid_run_sees_is_cancelled_and_its_result_is_discarded() -> None:
    async def body() -> None:
        env = ActivityEnvironment()
        release = threading.Event()
        running = asyncio.ensure_future(env.run(sync_until_cancelled, release))
        await env.wait_for_heartbeats(1)
        env.cancel("revoked:cancelled")
        with pytest.raises(ActivityCancelled, match="revoked:cancelled"):
            await running
        assert env.heartbeats == ["started", "saw cancellation"]

    guarded(body())


def test_an_async_activity_cancelled_mid_run_sees_cancelled_error() -> None:
    async def body() -> None:
        CLEANED.clear()
        env = ActivityEnvironment()
        running = asyncio.ensure_future(env.run(async_until_cancelled))
        await env.wait_for_heartbeats(1)
        env.cancel()
        with pytest.raises(ActivityCancelled, match="cancelled"):
            await running
        assert CLEANED == ["cleaned up"]

    guarded(body())


def test_cancelling_from_a_heartbeat_callback_cancels_at_that_step() -> None:
    def stop_at_two(details: Any) -> None:
        if details == {"step": 2}:
            env.cancel("lease lost")

    @activity(name="steps")
    def steps() -> None:
        for step in range(1, 6):
            heartbeat({"step": step})
            if is_cancelled():
                return

    env = ActivityEnvironment(on_heartbeat=stop_at_two)
    with pytest.raises(ActivityCancelled, match="lease lost"):
        env.run_sync(steps)
    assert env.heartbeats == [{"step": 1}, {"step": 2}]


def test_execute_answers_what_the_worker_would_report() -> None:
    async def body() -> None:
        env = ActivityEnvironment()
        done = await env.execute(count_up, 2)
        assert isinstance(done, Succeeded)
        assert decode_result(done.result) == {"attempt": 1, "resumed_from": 0, "steps": 2}
        refused = await env.execute(refuses, "no")
        assert isinstance(refused, Failed)
        assert (refused.error_type, refused.message, refused.retryable) == (
            "NonRetryableError",
            "no",
            False,
        )
        running = asyncio.ensure_future(env.execute(async_until_cancelled))
        await env.wait_for_heartbeats(1)
        env.cancel("revoked:timeout")
        assert await running == Abandoned("revoked:timeout")

    guarded(body())


def test_exceptions_propagate_as_raised() -> None:
    with pytest.raises(NonRetryableError, match="bad input"):
        ActivityEnvironment().run_sync(refuses, "bad input")


def test_waiting_for_heartbeats_counts_the_next_run_not_the_last_one() -> None:
    async def body() -> None:
        env = ActivityEnvironment()
        await env.run(count_up, 3)  # three heartbeats, kept in env.heartbeats
        running = asyncio.ensure_future(env.run(async_until_cancelled))
        await env.wait_for_heartbeats(1)
        assert env.heartbeats == ["started"]
        env.cancel()
        with pytest.raises(ActivityCancelled):
            await running

    guarded(body())
