"""Run traces: attempts read from scheduler transitions, run views, list cursors."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wf.errors import InvalidArgument
from wf.runtime.plan import plan_from_builtins
from wf.runtime.runs import NodeRun, NodeStatus, Run, RunStatus
from wf.runtime.trace import attempts, decode_cursor, encode_cursor, run_view
from wf.scheduler.model import ActivityState, Priority
from wf.scheduler.outputs import Transition

S = ActivityState
ACTIVITY = "run-000001.a"


def tr(
    from_state: ActivityState,
    to_state: ActivityState,
    at: float,
    *,
    reason: str = "",
    token: int = 0,
    worker: str | None = None,
    attempt: int = 0,
    failures: int = 0,
    error: str | None = None,
) -> Transition:
    return Transition(
        at=at,
        activity_id=ACTIVITY,
        from_state=from_state,
        to_state=to_state,
        reason=reason,
        attempt=attempt,
        failures=failures,
        infra_requeues=0,
        token=token,
        worker_id=worker,
        error=error,
    )


SUBMITTED = [tr(S.READY, S.QUEUED, 1.0, reason="submitted")]


def test_no_history_is_no_attempts() -> None:
    assert attempts([]) == []
    assert attempts(SUBMITTED) == []


def test_one_lease_that_completed_is_one_attempt() -> None:
    history = [
        *SUBMITTED,
        tr(S.QUEUED, S.LEASED, 2.0, reason="granted", token=1, worker="w1"),
        tr(S.LEASED, S.EXECUTING, 3.0, reason="started", token=1, worker="w1", attempt=1),
        tr(S.EXECUTING, S.COMPLETED, 4.0, reason="completed", token=1, worker="w1", attempt=1),
    ]
    assert attempts(history) == [
        {
            "token": 1,
            "worker_id": "w1",
            "leased_at": 2.0,
            "attempt": 1,
            "started_at": 3.0,
            "finished_at": 4.0,
            "outcome": "completed",
        }
    ]


def test_a_failed_attempt_then_a_retry_on_another_worker() -> None:
    history = [
        *SUBMITTED,
        tr(S.QUEUED, S.LEASED, 2.0, reason="granted", token=1, worker="w1"),
        tr(S.LEASED, S.EXECUTING, 3.0, reason="started", token=1, worker="w1", attempt=1),
        tr(
            S.EXECUTING,
            S.DELAYED,
            4.0,
            reason="retry",
            token=1,
            worker="w1",
            attempt=1,
            failures=1,
            error="ValueError: boom",
        ),
        tr(S.DELAYED, S.QUEUED, 6.0, reason="due", token=1, attempt=1, failures=1),
        tr(S.QUEUED, S.LEASED, 7.0, reason="granted", token=2, worker="w2", attempt=1),
        tr(S.LEASED, S.EXECUTING, 8.0, reason="started", token=2, worker="w2", attempt=2),
        tr(S.EXECUTING, S.COMPLETED, 9.0, reason="completed", token=2, worker="w2", attempt=2),
    ]
    first, second = attempts(history)
    assert first == {
        "token": 1,
        "worker_id": "w1",
        "leased_at": 2.0,
        "attempt": 1,
        "started_at": 3.0,
        "finished_at": 4.0,
        "outcome": "failed, retried",
        "error": "ValueError: boom",
    }
    assert second == {
        "token": 2,
        "worker_id": "w2",
        "leased_at": 7.0,
        "attempt": 2,
        "started_at": 8.0,
        "finished_at": 9.0,
        "outcome": "completed",
    }


def test_an_immediate_retry_and_a_final_failure() -> None:
    history = [
        tr(S.QUEUED, S.LEASED, 2.0, reason="granted", token=1, worker="w1"),
        tr(S.LEASED, S.EXECUTING, 3.0, reason="started", token=1, worker="w1", attempt=1),
        tr(S.EXECUTING, S.QUEUED, 4.0, reason="retry", token=1, attempt=1, error="E: one"),
        tr(S.QUEUED, S.LEASED, 5.0, reason="granted", token=2, worker="w1", attempt=1),
        tr(S.LEASED, S.EXECUTING, 6.0, reason="started", token=2, worker="w1", attempt=2),
        tr(
            S.EXECUTING,
            S.FAILED,
            7.0,
            reason="retries_exhausted",
            token=2,
            attempt=2,
            error="E: two",
        ),
    ]
    first, second = attempts(history)
    assert (first["outcome"], first["error"]) == ("failed, retried", "E: one")
    assert (second["outcome"], second["error"]) == ("failed (retries_exhausted)", "E: two")
    assert second["finished_at"] == 7.0


def test_a_lost_lease_is_requeued_and_leased_again() -> None:
    history = [
        *SUBMITTED,
        tr(S.QUEUED, S.LEASED, 2.0, reason="granted", token=1, worker="w1"),
        tr(S.LEASED, S.QUEUED, 32.0, reason="lease_expired", token=1, worker="w1"),
        tr(S.QUEUED, S.LEASED, 33.0, reason="granted", token=2, worker="w2"),
        tr(S.LEASED, S.EXECUTING, 34.0, reason="started", token=2, worker="w2", attempt=1),
        tr(S.EXECUTING, S.COMPLETED, 35.0, reason="completed", token=2, worker="w2", attempt=1),
    ]
    lost, done = attempts(history)
    assert lost == {
        "token": 1,
        "worker_id": "w1",
        "leased_at": 2.0,
        "finished_at": 32.0,
        "outcome": "lease_expired, requeued",
    }
    assert "attempt" not in lost  # it never started
    assert done["worker_id"] == "w2"
    assert done["outcome"] == "completed"


def test_a_steal_as_the_dispatcher_records_it_is_two_leases() -> None:
    # The dispatcher requeues the stolen activity and grants a new lease (new token).
    history = [
        tr(S.QUEUED, S.LEASED, 2.0, reason="granted", token=1, worker="w1"),
        tr(S.LEASED, S.QUEUED, 3.0, reason="stolen", token=1, worker="w1"),
        tr(S.QUEUED, S.LEASED, 3.0, reason="stolen_from:w1", token=2, worker="w2"),
        tr(S.LEASED, S.EXECUTING, 4.0, reason="started", token=2, worker="w2", attempt=1),
        tr(S.EXECUTING, S.COMPLETED, 5.0, reason="completed", token=2, worker="w2", attempt=1),
    ]
    stolen, done = attempts(history)
    assert (stolen["worker_id"], stolen["outcome"]) == ("w1", "stolen, requeued")
    assert (done["worker_id"], done["token"], done["outcome"]) == ("w2", 2, "completed")


def test_transitions_of_a_stale_token_do_not_touch_the_current_attempt() -> None:
    history = [
        tr(S.QUEUED, S.LEASED, 2.0, reason="granted", token=2, worker="w2"),
        tr(S.LEASED, S.EXECUTING, 3.0, reason="started", token=1, worker="w1", attempt=1),
        tr(S.LEASED, S.CANCELLED, 4.0, reason="run stopped", token=2, worker="w2"),
    ]
    assert attempts(history) == [
        {
            "token": 2,
            "worker_id": "w2",
            "leased_at": 2.0,
            "finished_at": 4.0,
            "outcome": "cancelled",
        }
    ]


def test_a_lease_still_held_has_no_outcome_yet() -> None:
    history = [
        tr(S.QUEUED, S.LEASED, 2.0, reason="granted", token=1, worker="w1"),
        tr(S.LEASED, S.EXECUTING, 3.0, reason="started", token=1, worker="w1", attempt=1),
    ]
    (only,) = attempts(history)
    assert "outcome" not in only
    assert "finished_at" not in only
    assert only["started_at"] == 3.0


# ------------------------------------------------------------------- run views

PLAN = plan_from_builtins(
    {
        "nodes": [
            {"kind": "activity", "id": "a", "activity_type": "t"},
            {"kind": "interrupt", "id": "ok", "prompt": "go?", "needs": ["a"]},
        ],
        "output": {"r": {"$node": "ok"}},
    }
)


def make_run(**kw: Any) -> Run:
    fields: dict[str, Any] = {
        "run_id": "run-000001",
        "deployment_id": "demo.main",
        "deployment_revision": 1,
        "artifact_id": "demo",
        "artifact_version": 1,
        "content_hash": "sha256:00",
        "tenant": "default",
        "priority": Priority.NORMAL,
        "inputs": {"x": 1},
        "created_at": 10.0,
        **kw,
    }
    return Run(**fields)


def test_an_admitted_run_has_no_trace_output_or_checkpoint() -> None:
    run = make_run()
    history = [tr(S.QUEUED, S.LEASED, 2.0, reason="granted", token=1, worker="w1")]
    view = run_view(run, PLAN, {ACTIVITY: history})
    assert view["status"] == "admitted"
    assert view["trace"] == []
    assert view["output"] is None
    assert view["checkpoint"] is None
    assert view["awaiting"] == []
    assert view["resumes"] == []
    assert view["started_at"] is None
    assert view["error"] is None
    assert view["inputs"] == {"x": 1}
    assert view["steps_used"] == 0
    assert view["artifact"] == {
        "artifact_id": "demo",
        "version": 1,
        "content_hash": "sha256:00",
    }


def test_a_running_run_traces_its_started_nodes_with_their_attempts() -> None:
    run = make_run(
        status=RunStatus.RUNNING,
        started_at=11.0,
        steps_used=1,
        nodes={
            "a": NodeRun(status=NodeStatus.SUBMITTED, activity_id=ACTIVITY, started_at=11.0),
            "ok": NodeRun(),
        },
    )
    history = [tr(S.QUEUED, S.LEASED, 12.0, reason="granted", token=1, worker="w1")]
    view = run_view(run, PLAN, {ACTIVITY: history})
    assert view["trace"] == [
        {
            "node": "a",
            "kind": "activity",
            "status": "submitted",
            "started_at": 11.0,
            "finished_at": None,
            "activity_id": ACTIVITY,
            "attempts": [{"token": 1, "worker_id": "w1", "leased_at": 12.0}],
        }
    ]
    assert view["output"] is None


# --------------------------------------------------------------------- cursors


@given(st.integers(min_value=0, max_value=10**12))
def test_cursors_round_trip(seq: int) -> None:
    cursor = encode_cursor(seq)
    assert "=" not in cursor
    assert decode_cursor(cursor) == seq


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        pytest.param("", id="empty"),
        pytest.param("!!!", id="garbage"),
        pytest.param("a", id="bad-padding"),
        pytest.param(b64(b"deployments:5"), id="foreign"),
        pytest.param(b64(b"runs:"), id="no-number"),
        pytest.param(b64(b"runs:abc"), id="not-a-number"),
        pytest.param(b64(b"runs:-1"), id="negative"),
        pytest.param(b64(b"runs:\xff\xfe"), id="not-utf8"),
        pytest.param("5", id="bare-number"),
    ],
)
def test_a_foreign_or_garbage_cursor_is_an_invalid_argument(cursor: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        decode_cursor(cursor)
    assert info.value.details["field"] == "cursor"
