"""DAG decisions: what starts when, what a stop withdraws, and that any completion order ends well.

Every test here drives the pure functions of :mod:`wf.runtime.dag` directly on a
:class:`~wf.runtime.runs.Run` built by hand and a plan from ``plan_from_builtins``;
``now`` is always an argument, never a clock.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wf.runtime import dag
from wf.runtime.plan import Plan, decode_canonical, plan_from_builtins
from wf.runtime.runs import Checkpoint, NodeStatus, Run, RunError, RunStatus
from wf.scheduler.model import Activity, Priority, RetryPolicy

RUN_ID = "run-000001"


def act(node_id: str, **kw: Any) -> dict[str, Any]:
    return {"kind": "activity", "id": node_id, "activity_type": f"do_{node_id}", **kw}


def make_run(**kw: Any) -> Run:
    fields: dict[str, Any] = {
        "run_id": RUN_ID,
        "deployment_id": "demo.main",
        "deployment_revision": 1,
        "artifact_id": "demo",
        "artifact_version": 1,
        "content_hash": "sha256:00",
        "tenant": "default",
        "priority": Priority.NORMAL,
        "inputs": {},
        "created_at": 0.0,
        **kw,
    }
    return Run(**fields)


def aid(node_id: str) -> str:
    return f"{RUN_ID}.{node_id}"


def ids(activities: list[Activity]) -> list[str]:
    return [a.activity_id for a in activities]


def snapshot(run: Run) -> bytes:
    return msgspec.json.encode(run)


def status_of(run: Run) -> RunStatus:
    """The run's status, read without letting mypy narrow ``run.status`` for later asserts."""
    return run.status


def checkpoint_of(run: Run) -> Checkpoint | None:
    """The run's checkpoint, likewise read without narrowing."""
    return run.checkpoint


def statuses(run: Run) -> dict[str, NodeStatus]:
    return {k: n.status for k, n in run.nodes.items()}


# ------------------------------------------------------------ fan-out / fan-in

FAN: dict[str, Any] = {
    "input_schema": {"type": "object", "required": ["name"]},
    "nodes": [
        act("a", args={"name": {"$input": "name"}}),
        act(
            "b",
            needs=["a"],
            args={
                "v": {"$node": "a", "path": "v"},
                "name": {"$input": "name"},
                "raw": {"$literal": {"$input": "name"}},
            },
            capabilities=["gpu"],
            idempotent=True,
            retry={"max_attempts": 5, "initial_backoff_s": 2.0},
        ),
        act("c", needs=["a"], args={"items": [{"$node": "a", "path": "list.1"}, 7]}, priority=1),
        act("d", needs=["b", "c"], args={"b": {"$node": "b"}, "c": {"$node": "c"}}),
    ],
    "output": {
        "total": {"$node": "d", "path": "sum"},
        "both": [{"$node": "b"}, {"$node": "c", "path": "n"}],
        "name": {"$input": "name"},
    },
}


def fan_run() -> Run:
    return make_run(
        tenant="acme",
        priority=Priority.LOW,
        policy="batch",
        deadline=5_000.0,
        inputs={"name": "ada"},
    )


def test_begin_on_a_fan_out_plan_submits_only_the_root() -> None:
    plan, run = plan_from_builtins(FAN), fan_run()
    effects = dag.begin(run, plan, 10.0)
    assert ids(effects.submit) == [aid("a")]
    assert effects.cancel == []
    assert effects.timers == []
    assert run.status is RunStatus.RUNNING
    assert run.started_at == 10.0
    assert run.steps_used == 1
    assert statuses(run) == {
        "a": NodeStatus.SUBMITTED,
        "b": NodeStatus.PENDING,
        "c": NodeStatus.PENDING,
        "d": NodeStatus.PENDING,
    }
    assert run.nodes["a"].activity_id == aid("a")
    assert run.nodes["a"].started_at == 10.0
    assert msgspec.json.decode(effects.submit[0].payload) == {"name": "ada"}


def test_completing_the_root_submits_both_branches_with_run_and_node_settings() -> None:
    plan, run = plan_from_builtins(FAN), fan_run()
    dag.begin(run, plan, 10.0)
    effects = dag.activity_completed(run, plan, "a", {"v": 3, "list": [1, 2]}, 11.0)
    assert ids(effects.submit) == [aid("b"), aid("c")]
    b, c = effects.submit
    for activity in (b, c):
        assert activity.workflow_id == RUN_ID
        assert activity.correlation_id == RUN_ID
        assert activity.tenant == "acme"
        assert activity.policy == "batch"
        assert activity.deadline == 5_000.0
        assert activity.new_workflow is False
    assert b.activity_type == "do_b"
    assert b.priority is Priority.LOW  # the run's
    assert b.capabilities == frozenset({"gpu"})
    assert b.idempotent is True
    assert b.retry == RetryPolicy(max_attempts=5, initial_backoff_s=2.0)
    assert msgspec.json.decode(b.payload) == {
        "v": 3,
        "name": "ada",
        "raw": {"$input": "name"},
    }
    assert c.priority is Priority.HIGH  # the node's overrides the run's
    assert c.capabilities == frozenset()
    assert c.idempotent is False
    assert c.retry == RetryPolicy()
    assert msgspec.json.decode(c.payload) == {"items": [2, 7]}
    assert run.steps_used == 3
    assert run.nodes["a"].status is NodeStatus.COMPLETED
    assert run.nodes["a"].finished_at == 11.0


def test_fan_in_waits_for_every_branch_then_the_run_completes_with_its_output() -> None:
    plan, run = plan_from_builtins(FAN), fan_run()
    dag.begin(run, plan, 10.0)
    dag.activity_completed(run, plan, "a", {"v": 3, "list": [1, 2]}, 11.0)

    only_b = dag.activity_completed(run, plan, "b", "B", 12.0)
    assert only_b == dag.Effects()
    assert run.nodes["d"].status is NodeStatus.PENDING
    assert status_of(run) is RunStatus.RUNNING

    then_c = dag.activity_completed(run, plan, "c", {"n": 4}, 13.0)
    assert ids(then_c.submit) == [aid("d")]
    assert msgspec.json.decode(then_c.submit[0].payload) == {"b": "B", "c": {"n": 4}}
    assert run.steps_used == 4

    done = dag.activity_completed(run, plan, "d", {"sum": 9}, 14.0)
    assert done == dag.Effects()
    assert run.status is RunStatus.COMPLETED
    assert run.final
    assert run.finished_at == 14.0
    assert run.error is None
    assert run.output == {"total": 9, "both": ["B", 4], "name": "ada"}
    assert run.checkpoint is not None
    assert run.checkpoint.status is RunStatus.COMPLETED
    assert run.checkpoint.at == 14.0
    assert run.checkpoint.revision == run.revision + 1
    assert run.checkpoint.awaiting == []
    assert run.checkpoint.completed == {
        "a": {"v": 3, "list": [1, 2]},
        "b": "B",
        "c": {"n": 4},
        "d": {"sum": 9},
    }


def test_an_unresolvable_output_mapping_fails_the_run() -> None:
    plan = plan_from_builtins({"nodes": [act("a")], "output": {"r": {"$node": "a", "path": "x"}}})
    run = make_run()
    dag.begin(run, plan, 1.0)
    effects = dag.activity_completed(run, plan, "a", {"y": 1}, 2.0)
    assert effects == dag.Effects()
    assert run.status is RunStatus.FAILED
    assert run.error is not None
    assert run.error.code == "output_unresolvable"
    assert run.output is None


# ------------------------------------------------------------------ max_steps

CHAIN: dict[str, Any] = {
    "nodes": [act("a"), act("b", needs=["a"]), act("c", needs=["b"])],
}


def test_steps_used_counts_node_starts() -> None:
    plan, run = plan_from_builtins(CHAIN), make_run()
    dag.begin(run, plan, 1.0)
    assert run.steps_used == 1
    dag.activity_completed(run, plan, "a", 1, 2.0)
    assert run.steps_used == 2
    dag.activity_completed(run, plan, "a", 1, 2.5)  # a repeat is not a start
    assert run.steps_used == 2
    dag.activity_completed(run, plan, "b", 2, 3.0)
    assert run.steps_used == 3
    dag.activity_completed(run, plan, "c", 3, 4.0)
    assert run.status is RunStatus.COMPLETED
    assert run.steps_used == 3


def test_the_start_beyond_max_steps_exhausts_the_run() -> None:
    plan, run = plan_from_builtins(CHAIN), make_run(max_steps=2)
    dag.begin(run, plan, 1.0)
    dag.activity_completed(run, plan, "a", 1, 2.0)
    assert status_of(run) is RunStatus.RUNNING
    effects = dag.activity_completed(run, plan, "b", 2, 3.0)
    assert effects.submit == []
    assert run.status is RunStatus.EXHAUSTED
    assert run.final
    assert run.steps_used == 2
    assert run.error is not None
    assert run.error.code == "max_steps_exhausted"
    assert run.error.node == "c"
    assert run.nodes["c"].status is NodeStatus.PENDING
    assert run.finished_at == 3.0
    assert run.checkpoint is not None
    assert run.checkpoint.status is RunStatus.EXHAUSTED
    assert run.checkpoint.completed == {"a": 1, "b": 2}


def test_exhaustion_cancels_activities_still_in_flight() -> None:
    plan = plan_from_builtins({"nodes": [act("a"), act("side"), act("b", needs=["a"])]})
    run = make_run(max_steps=2)
    assert ids(dag.begin(run, plan, 1.0).submit) == [aid("a"), aid("side")]
    effects = dag.activity_completed(run, plan, "a", 1, 2.0)
    assert run.status is RunStatus.EXHAUSTED
    assert effects.submit == []
    assert effects.cancel == [aid("side")]
    assert run.nodes["side"].status is NodeStatus.CANCELLED
    assert run.nodes["side"].finished_at == 2.0


@pytest.mark.parametrize(
    ("plan_data", "run_kw"),
    [
        pytest.param({"nodes": [act("a"), act("b")]}, {"max_steps": 1}, id="max_steps"),
        pytest.param(
            {"nodes": [act("a"), act("b", args={"x": {"$input": "missing"}})]},
            {},
            id="binding_failed",
        ),
    ],
)
def test_a_stop_in_the_same_advance_does_not_submit_what_it_cancels(
    plan_data: dict[str, Any], run_kw: dict[str, Any]
) -> None:
    # A plan stored before inputs were checked at creation (it is decoded, not validated).
    plan, run = decode_canonical(msgspec.json.encode(plan_data)), make_run(**run_kw)
    effects = dag.begin(run, plan, 1.0)
    assert run.final
    assert run.nodes["a"].status is NodeStatus.CANCELLED
    assert not set(ids(effects.submit)) & set(effects.cancel)


# ------------------------------------------------------------------ failures


def test_a_failed_activity_fails_the_run_and_cancels_the_rest() -> None:
    plan, run = plan_from_builtins(FAN), fan_run()
    dag.begin(run, plan, 10.0)
    dag.activity_completed(run, plan, "a", {"v": 3, "list": [1, 2]}, 11.0)
    error = RunError(code="activity_failed", message="boom", node="b", error_type="ValueError")
    effects = dag.activity_failed(run, "b", error, 12.0)
    assert effects.submit == []
    assert effects.cancel == [aid("c")]
    assert run.status is RunStatus.FAILED
    assert run.error == error
    assert run.finished_at == 12.0
    assert run.nodes["b"].status is NodeStatus.FAILED
    assert run.nodes["b"].error == error
    assert run.nodes["c"].status is NodeStatus.CANCELLED
    assert run.nodes["c"].finished_at == 12.0
    assert run.nodes["d"].status is NodeStatus.PENDING
    assert run.checkpoint is not None
    assert run.checkpoint.status is RunStatus.FAILED
    assert run.checkpoint.completed == {"a": {"v": 3, "list": [1, 2]}}


def test_events_after_a_final_status_change_nothing() -> None:
    plan = plan_from_builtins(
        {
            "nodes": [
                act("a"),
                act("b"),
                {"kind": "timer", "id": "t", "delay": {"kind": "relative", "seconds": 5}},
            ]
        }
    )
    run = make_run()
    dag.begin(run, plan, 1.0)
    error = RunError(code="activity_failed", message="boom", node="a")
    effects = dag.activity_failed(run, "a", error, 2.0)
    assert effects.cancel == [aid("b")]  # the timer is withdrawn, but it is no activity
    assert run.nodes["t"].status is NodeStatus.CANCELLED
    before = snapshot(run)
    assert dag.activity_completed(run, plan, "b", "late", 3.0) == dag.Effects()
    assert dag.activity_completed(run, plan, "a", "late", 3.0) == dag.Effects()
    assert dag.activity_failed(run, "b", error, 3.0) == dag.Effects()
    assert dag.timer_fired(run, plan, "t", 100.0) == dag.Effects()
    assert dag.advance(run, plan, 4.0) == dag.Effects()
    assert dag.stop(run, RunStatus.CANCELLED, RunError(code="cancelled", message="x"), 5.0) == (
        dag.Effects()
    )
    assert snapshot(run) == before


def test_a_repeated_completion_of_the_same_node_is_ignored() -> None:
    plan, run = plan_from_builtins(FAN), fan_run()
    dag.begin(run, plan, 10.0)
    first = dag.activity_completed(run, plan, "a", {"v": 3, "list": [1, 2]}, 11.0)
    assert ids(first.submit) == [aid("b"), aid("c")]
    before = snapshot(run)
    again = dag.activity_completed(run, plan, "a", {"v": 99, "list": []}, 12.0)
    assert again == dag.Effects()
    assert snapshot(run) == before
    assert run.nodes["a"].output == {"v": 3, "list": [1, 2]}


def test_events_for_unknown_or_pending_nodes_are_ignored() -> None:
    plan, run = plan_from_builtins(CHAIN), make_run()
    dag.begin(run, plan, 1.0)
    before = snapshot(run)
    assert dag.activity_completed(run, plan, "ghost", 1, 2.0) == dag.Effects()
    assert dag.activity_completed(run, plan, "c", 1, 2.0) == dag.Effects()
    error = RunError(code="activity_failed", message="x")
    assert dag.activity_failed(run, "c", error, 2.0) == dag.Effects()
    assert dag.timer_fired(run, plan, "a", 2.0) == dag.Effects()
    assert snapshot(run) == before


# --------------------------------------------------------------------- timers

TIMED: dict[str, Any] = {
    "nodes": [
        act("a"),
        {
            "kind": "timer",
            "id": "t",
            "needs": ["a"],
            "delay": {"kind": "relative", "seconds": 30},
        },
        act("b", needs=["t"], args={"due": {"$node": "t", "path": "due_at"}}),
    ]
}


def test_a_timer_node_arms_a_timer_relative_to_now() -> None:
    plan, run = plan_from_builtins(TIMED), make_run()
    dag.begin(run, plan, 1.0)
    effects = dag.activity_completed(run, plan, "a", None, 100.0)
    assert effects.submit == []
    assert effects.timers == [(130.0, "t")]
    assert run.nodes["t"].status is NodeStatus.WAITING
    assert run.nodes["t"].wake_at == 130.0
    assert run.nodes["t"].started_at == 100.0
    assert run.status is RunStatus.RUNNING
    assert run.steps_used == 2


def test_a_timer_fired_early_does_nothing() -> None:
    plan, run = plan_from_builtins(TIMED), make_run()
    dag.begin(run, plan, 1.0)
    dag.activity_completed(run, plan, "a", None, 100.0)
    before = snapshot(run)
    assert dag.timer_fired(run, plan, "t", 129.5) == dag.Effects()
    assert snapshot(run) == before


@pytest.mark.parametrize("fired_at", [130.0, 175.0])
def test_a_timer_fired_at_or_after_its_instant_completes_and_starts_dependents(
    fired_at: float,
) -> None:
    plan, run = plan_from_builtins(TIMED), make_run()
    dag.begin(run, plan, 1.0)
    dag.activity_completed(run, plan, "a", None, 100.0)
    effects = dag.timer_fired(run, plan, "t", fired_at)
    assert run.nodes["t"].status is NodeStatus.COMPLETED
    assert run.nodes["t"].output == {"fired_at": fired_at, "due_at": 130.0}
    assert run.nodes["t"].finished_at == fired_at
    assert ids(effects.submit) == [aid("b")]
    assert msgspec.json.decode(effects.submit[0].payload) == {"due": 130.0}
    assert dag.timer_fired(run, plan, "t", fired_at + 1) == dag.Effects()  # repeat ignored


# ----------------------------------------------------------------- interrupts

APPROVAL: dict[str, Any] = {
    "nodes": [
        act("a"),
        {"kind": "interrupt", "id": "ok", "prompt": "approve?", "needs": ["a"]},
        act("b", needs=["ok"], args={"approved": {"$node": "ok", "path": "approved"}}),
    ]
}


def test_an_interrupt_with_nothing_else_in_flight_interrupts_the_run() -> None:
    plan, run = plan_from_builtins(APPROVAL), make_run()
    dag.begin(run, plan, 1.0)
    effects = dag.activity_completed(run, plan, "a", "A", 2.0)
    assert effects == dag.Effects()
    assert run.status is RunStatus.INTERRUPTED
    assert not run.final
    assert run.nodes["ok"].status is NodeStatus.AWAITING_INPUT
    assert [n.id for n in dag.awaiting(run, plan)] == ["ok"]
    assert run.checkpoint is not None
    assert run.checkpoint.status is RunStatus.INTERRUPTED
    assert run.checkpoint.awaiting == ["ok"]
    assert run.checkpoint.completed == {"a": "A"}
    assert run.checkpoint.at == 2.0


def test_answering_an_interrupt_completes_it_and_progresses() -> None:
    plan, run = plan_from_builtins(APPROVAL), make_run()
    dag.begin(run, plan, 1.0)
    dag.activity_completed(run, plan, "a", "A", 2.0)
    effects = dag.answered(run, plan, "ok", {"approved": True}, 3.0)
    assert run.nodes["ok"].status is NodeStatus.COMPLETED
    assert run.nodes["ok"].output == {"approved": True}
    assert run.nodes["ok"].finished_at == 3.0
    assert ids(effects.submit) == [aid("b")]
    assert msgspec.json.decode(effects.submit[0].payload) == {"approved": True}
    assert run.status is RunStatus.RUNNING
    assert dag.awaiting(run, plan) == []
    assert run.steps_used == 3


def test_an_interrupt_beside_an_activity_in_flight_leaves_the_run_running() -> None:
    plan = plan_from_builtins(
        {"nodes": [{"kind": "interrupt", "id": "ok", "prompt": "?"}, act("side")]}
    )
    run = make_run()
    effects = dag.begin(run, plan, 1.0)
    assert ids(effects.submit) == [aid("side")]
    assert run.nodes["ok"].status is NodeStatus.AWAITING_INPUT
    assert status_of(run) is RunStatus.RUNNING
    assert checkpoint_of(run) is None
    dag.activity_completed(run, plan, "side", 1, 2.0)
    assert run.status is RunStatus.INTERRUPTED
    assert run.checkpoint is not None
    assert run.checkpoint.awaiting == ["ok"]


# --------------------------------------------------------------- bindings


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"x": {"$node": "a", "path": "missing.deep"}}, "has no 'missing.deep'"),
        ({"x": {"$node": "a", "path": "list.5"}}, "has no 'list.5'"),
        ({"x": {"$input": "absent"}}, "'absent' is not set"),
    ],
)
def test_an_unresolvable_binding_fails_the_run_without_raising(
    args: dict[str, Any], message: str
) -> None:
    # Decoded, not validated: an unbound input is refused at creation today, but a plan
    # stored before that rule still runs, and fails cleanly.
    data = {"nodes": [act("a"), act("b", needs=["a"], args=args)]}
    plan = decode_canonical(msgspec.json.encode(data))
    run = make_run()
    dag.begin(run, plan, 1.0)
    effects = dag.activity_completed(run, plan, "a", {"list": [0]}, 2.0)
    assert effects.submit == []
    assert run.status is RunStatus.FAILED
    assert run.error is not None
    assert run.error.code == "binding_failed"
    assert run.error.node == "b"
    assert message in run.error.message
    assert run.nodes["b"].status is NodeStatus.FAILED
    assert run.nodes["b"].error == run.error
    assert run.checkpoint is not None
    assert run.checkpoint.status is RunStatus.FAILED


# ------------------------------------------------------------------ property


@st.composite
def random_dags(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Activity nodes n0..nk, each needing only earlier ones, listed in a drawn order."""
    count = draw(st.integers(min_value=1, max_value=8))
    nodes = []
    for i in range(count):
        needs = draw(st.lists(st.integers(0, i - 1), unique=True, max_size=3)) if i else []
        args = {f"from_n{j}": {"$node": f"n{j}", "path": "id"} for j in needs}
        nodes.append(act(f"n{i}", needs=[f"n{j}" for j in needs], args=args))
    return list(draw(st.permutations(nodes)))


@settings(max_examples=150, deadline=None)
@given(random_dags(), st.data())
def test_any_completion_order_completes_every_node_once(
    nodes: list[dict[str, Any]], data: st.DataObject
) -> None:
    plan: Plan = plan_from_builtins(
        {"nodes": nodes, "output": {"all": [{"$node": n["id"]} for n in nodes]}}
    )
    needs = {n["id"]: set(n.get("needs", [])) for n in nodes}
    run = make_run()
    submitted: Counter[str] = Counter()
    completed: list[str] = []
    in_flight: list[str] = []

    def take(effects: dag.Effects) -> None:
        assert effects.cancel == []
        assert effects.timers == []
        for activity in effects.submit:
            node_id = activity.activity_id.removeprefix(f"{RUN_ID}.")
            assert needs[node_id] <= set(completed), f"{node_id} started before its needs"
            assert msgspec.json.decode(activity.payload or b"{}") == {
                f"from_{j}": j for j in needs[node_id]
            }
            submitted[activity.activity_id] += 1
            in_flight.append(node_id)

    take(dag.begin(run, plan, 0.0))
    clock = 0.0
    while in_flight:
        assert not run.final
        node_id = data.draw(st.sampled_from(sorted(in_flight)))
        in_flight.remove(node_id)
        completed.append(node_id)
        clock += 1.0
        take(dag.activity_completed(run, plan, node_id, {"id": node_id}, clock))

    assert run.status is RunStatus.COMPLETED
    assert sorted(completed) == sorted(needs)
    assert all(count == 1 for count in submitted.values())
    assert set(submitted) == {f"{RUN_ID}.{n}" for n in needs}
    assert all(state.status is NodeStatus.COMPLETED for state in run.nodes.values())
    assert run.steps_used == len(nodes)
    assert run.output == {"all": [{"id": n["id"]} for n in nodes]}
