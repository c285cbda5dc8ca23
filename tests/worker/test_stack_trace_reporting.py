"""Failures you can read (issue 17): a failed attempt's stack trace, from the worker's
exception to the attempt's record and the run view.

The worker formats and bounds the trace (:func:`bounded_stack_trace`), the wire
refuses one out of bounds, the core keeps it on the transition that ends the
attempt (and on no other), and the run view shows it per attempt and on the
failed node's and run's error. The store round trip is in
``tests/store/test_conformance.py`` (``rich_history``); the whole path, with the
CLI and the worker's log, in ``tests/e2e/test_e2e_failures.py``.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import msgspec
import pytest

from wf.errors import InvalidArgument
from wf.runtime.plan import plan_from_builtins
from wf.runtime.runs import NodeRun, NodeStatus, Run, RunError, RunStatus
from wf.runtime.trace import attempts, run_view
from wf.scheduler import commands as cmd
from wf.scheduler.config import SchedulerConfig
from wf.scheduler.dispatcher import SchedulerCore
from wf.scheduler.model import Activity, ActivityState, Priority, RetryPolicy, WorkerInfo
from wf.scheduler.outputs import LeaseGranted, Transition
from wf.wire.bounds import TEXT_LENGTH_MAX, check_text
from wf.wire.scheduler_methods import FAIL_ACTIVITY, FailParams
from wf.worker.activity import ActivityContext, ActivityInfo, activity
from wf.worker.execution import STACK_TRACE_MAX, Failed, bounded_stack_trace, execute

S = ActivityState
T0 = 1_767_225_600.0


# ---------------------------------------------------------------- the worker


def test_a_short_trace_is_kept_as_it_is() -> None:
    text = 'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: no'
    assert bounded_stack_trace(text) == text


def test_a_long_trace_loses_its_middle_and_keeps_both_ends() -> None:
    text = "HEAD" + "x" * 100_000 + "ValueError: the end"
    bounded = bounded_stack_trace(text)
    assert len(bounded) <= STACK_TRACE_MAX == TEXT_LENGTH_MAX
    assert bounded.startswith("HEAD")
    assert bounded.endswith("ValueError: the end")
    kept = len(bounded) - len(bounded.split("\n")[1]) - 2
    assert f"... {len(text) - kept} characters trimmed ..." in bounded


def test_nul_and_lone_surrogates_become_text_the_server_accepts() -> None:
    bounded = bounded_stack_trace("a\x00b\udcffc")
    assert "\x00" not in bounded
    bounded.encode("utf-8")  # no lone surrogate left
    assert bounded == "a\\0b\\udcffc"


def _inner_frame_that_raises() -> None:
    raise KeyError("ledger")


@activity(name="t.raises")
def raises() -> None:
    _inner_frame_that_raises()


@activity(name="t.raises_async")
async def raises_async() -> None:
    _inner_frame_that_raises()


def _context(activity_type: str) -> ActivityContext:
    info = ActivityInfo(
        activity_id="a1",
        activity_type=activity_type,
        attempt=1,
        token=1,
        worker_id="w1",
        workflow_id="",
        correlation_id="",
    )
    return ActivityContext(info=info)


@pytest.mark.parametrize("defn", [raises, raises_async], ids=["sync", "async"])
def test_a_failing_activity_reports_its_formatted_trace(defn: Any) -> None:
    async def main() -> Any:
        with ThreadPoolExecutor(1) as pool:
            return await execute(defn, _context(defn.name), b"", pool, lambda _: None)

    ending = asyncio.run(main())
    assert isinstance(ending, Failed)
    assert ending.stack_trace.startswith("Traceback (most recent call last):")
    assert "_inner_frame_that_raises" in ending.stack_trace
    assert ending.stack_trace.rstrip().endswith("KeyError: 'ledger'")


# ------------------------------------------------------------------ the wire


def test_the_wire_refuses_a_trace_longer_than_the_text_bound() -> None:
    ok = {"activity_id": "a1", "token": 1, "stack_trace": "x" * TEXT_LENGTH_MAX}
    assert msgspec.convert(ok, FailParams).stack_trace == "x" * TEXT_LENGTH_MAX
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({**ok, "stack_trace": "x" * (TEXT_LENGTH_MAX + 1)}, FailParams)
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({**ok, "stack_trace": "a\x00b"}, FailParams)
    assert FAIL_ACTIVITY.params is FailParams


def test_in_process_text_bounds_refuse_a_lone_surrogate_and_nul() -> None:
    # What the JSON decoder already refuses on the wire, in-process callers are refused
    # too: no store could hold it, and a failed commit would stop the node's writes.
    assert check_text("caf\u00e9 \u2713", "stack_trace") == "caf\u00e9 \u2713"
    with pytest.raises(InvalidArgument, match="lone surrogate"):
        check_text("x\ud800y", "stack_trace")
    with pytest.raises(InvalidArgument, match="NUL"):
        check_text("x\x00y", "stack_trace")


# ------------------------------------------------------------------ the core


def _core_with_executing(retry: RetryPolicy) -> tuple[SchedulerCore, int]:
    core = SchedulerCore(SchedulerConfig())
    core.handle(
        cmd.RegisterWorker(
            now=T0, info=WorkerInfo(worker_id="w1", max_concurrency=1, heartbeat_interval_s=60)
        )
    )
    core.handle(
        cmd.Submit(now=T0, activities=(Activity(activity_id="a1", activity_type="t", retry=retry),))
    )
    return core, _lease_and_start(core, T0)


def _lease_and_start(core: SchedulerCore, now: float) -> int:
    out = core.handle(cmd.Poll(now=now, worker_id="w1", max_items=1))
    core.handle(cmd.CancelPoll(now=now, worker_id="w1"))
    (grant,) = [d for d in out.decisions if isinstance(d, LeaseGranted)]
    core.handle(cmd.StartActivity(now=now, activity_id="a1", token=grant.lease.token))
    return grant.lease.token


def test_the_core_keeps_the_trace_on_the_transition_that_ends_the_attempt() -> None:
    core, token = _core_with_executing(RetryPolicy(max_attempts=2, initial_backoff_s=0.0))
    out = core.handle(
        cmd.Fail(now=T0 + 1, activity_id="a1", token=token, error_type="E", stack_trace="tb one")
    )
    records = [r for r in out.records if isinstance(r, Transition)]
    assert [(r.to_state, r.stack_trace) for r in records] == [(S.QUEUED, "tb one")]
    token = _lease_and_start(core, T0 + 2)
    out = core.handle(
        cmd.Fail(now=T0 + 3, activity_id="a1", token=token, error_type="E", stack_trace="tb two")
    )
    records = [r for r in out.records if isinstance(r, Transition)]
    assert [(r.to_state, r.stack_trace) for r in records] == [(S.FAILED, "tb two")]


def test_a_failure_without_a_trace_records_none() -> None:
    core, token = _core_with_executing(RetryPolicy(max_attempts=1))
    out = core.handle(cmd.Fail(now=T0 + 1, activity_id="a1", token=token, error_type="E"))
    (record,) = [r for r in out.records if isinstance(r, Transition)]
    assert record.stack_trace is None


# ----------------------------------------------------------------- the view

ACTIVITY = "run-000001.a"


def _tr(frm: ActivityState, to: ActivityState, at: float, **kw: Any) -> Transition:
    kw.setdefault("reason", "")
    return Transition(
        at=at,
        activity_id=ACTIVITY,
        from_state=frm,
        to_state=to,
        attempt=kw.pop("attempt", 1),
        failures=0,
        infra_requeues=0,
        token=kw.pop("token", 1),
        **kw,
    )


HISTORY = [
    _tr(S.QUEUED, S.LEASED, 2.0, reason="granted", worker_id="w1"),
    _tr(S.LEASED, S.EXECUTING, 3.0, reason="started"),
    _tr(S.EXECUTING, S.QUEUED, 4.0, reason="retry", error="E: one", stack_trace="tb one"),
    _tr(S.QUEUED, S.LEASED, 5.0, reason="granted", token=2, worker_id="w1"),
    _tr(S.LEASED, S.EXECUTING, 6.0, reason="started", token=2, attempt=2),
    _tr(
        S.EXECUTING,
        S.FAILED,
        7.0,
        reason="retries_exhausted",
        token=2,
        attempt=2,
        error="E: two",
        stack_trace="tb two",
    ),
]


def test_each_failed_attempt_shows_its_own_trace() -> None:
    first, second = attempts(HISTORY)
    assert (first["error"], first["stack_trace"]) == ("E: one", "tb one")
    assert (second["error"], second["stack_trace"]) == ("E: two", "tb two")


def test_the_failed_node_and_run_carry_the_last_attempts_trace() -> None:
    plan = plan_from_builtins(
        {"nodes": [{"kind": "activity", "id": "a", "activity_type": "t"}], "output": {}}
    )
    error = RunError(code="activity_failed", message="E: two", node="a", error_type="E")
    run = Run(
        run_id="run-000001",
        deployment_id="d",
        deployment_revision=1,
        artifact_id="x",
        artifact_version=1,
        content_hash="sha256:00",
        tenant="default",
        priority=Priority.NORMAL,
        inputs={},
        created_at=1.0,
        status=RunStatus.FAILED,
        error=error,
        nodes={"a": NodeRun(status=NodeStatus.FAILED, activity_id=ACTIVITY, error=error)},
    )
    view = run_view(run, plan, {ACTIVITY: HISTORY})
    assert view["trace"][0]["error"]["stack_trace"] == "tb two"
    assert view["error"]["stack_trace"] == "tb two"
    # The stored run document is untouched: the trace lives with the attempts only.
    assert run.error is not None
    assert not hasattr(run.error, "stack_trace")
