"""DAG decisions for condition and map nodes (issue 19), on the pure functions of
:mod:`wf.runtime.dag`: what is skipped and why, how a fan-out submits, bounds
and gathers, and that a run stored mid-branch or mid-fan-out and read back
continues exactly as the one kept in memory."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wf.runtime import dag
from wf.runtime.plan import Plan, plan_from_builtins
from wf.runtime.runs import NodeStatus, Run, RunError, RunStatus
from wf.scheduler.model import Priority
from wf.wire.payloads import payload_arguments

RUN_ID = "run-000007"


def act(node_id: str, **kw: Any) -> dict[str, Any]:
    return {"kind": "activity", "id": node_id, "activity_type": f"do_{node_id}", **kw}


def cond(node_id: str, when: Any, **kw: Any) -> dict[str, Any]:
    return {"kind": "condition", "id": node_id, "when": when, **kw}


def make_run(**inputs: Any) -> Run:
    return Run(
        run_id=RUN_ID,
        deployment_id="demo.main",
        deployment_revision=1,
        artifact_id="demo",
        artifact_version=1,
        content_hash="sha256:00",
        tenant="default",
        priority=Priority.NORMAL,
        inputs=inputs,
        created_at=0.0,
    )


def statuses(run: Run) -> dict[str, str]:
    return {k: str(n.status) for k, n in run.nodes.items()}


def submitted(effects: dag.Effects) -> list[str]:
    return [a.activity_id for a in effects.submit]


def args_of(effects: dag.Effects) -> list[dict[str, Any]]:
    return [payload_arguments(a.payload)[1] for a in effects.submit]


def reread(run: Run) -> Run:
    """The run as the store would give it back (its document encoded and decoded)."""
    return msgspec.json.decode(msgspec.json.encode(run), type=Run)


# -------------------------------------------------------------- conditions

IF_ELSE: dict[str, Any] = {
    "input_schema": {"type": "object", "required": ["size"]},
    "nodes": [
        act("measure", args={"size": {"$input": "size"}}),
        cond(
            "big",
            {"op": "gt", "args": [{"$node": "measure", "path": "size"}, 100]},
            needs=["measure"],
        ),
        cond(
            "small",
            {
                "op": "not",
                "args": [{"op": "gt", "args": [{"$node": "measure", "path": "size"}, 100]}],
            },
            needs=["measure"],
        ),
        act("shrink", needs=["big"]),
        act("archive", needs=["shrink"]),
        act("keep", needs=["small"]),
        act(
            "report",
            needs=["archive", "keep"],
            skip_when="all_skipped",
            args={"archived": {"$node": "archive"}, "kept": {"$node": "keep", "path": "x"}},
        ),
    ],
    "output": {
        "big": {"$node": "big"},
        "archived": {"$node": "archive"},
        "kept": {"$node": "keep"},
    },
}


def test_a_false_condition_skips_its_branch_and_the_join_still_runs() -> None:
    plan, run = plan_from_builtins(IF_ELSE), make_run(size=5)
    dag.begin(run, plan, 1.0)
    effects = dag.activity_completed(run, plan, "measure", {"size": 5}, 2.0)
    assert statuses(run) == {
        "measure": "completed",
        "big": "completed",
        "small": "completed",
        "shrink": "skipped",
        "archive": "skipped",  # skipped because its need was: the cascade
        "keep": "submitted",
        "report": "pending",
    }
    assert (run.nodes["big"].output, run.nodes["small"].output) == (False, True)
    assert submitted(effects) == [f"{RUN_ID}.keep"]
    assert run.steps_used == 4  # measure, big, small, keep: skipped nodes cost nothing
    effects = dag.activity_completed(run, plan, "keep", {"x": 1}, 3.0)
    # The join runs (not every need was skipped); the skipped need reads as null.
    assert submitted(effects) == [f"{RUN_ID}.report"]
    assert args_of(effects) == [{"archived": None, "kept": 1}]
    dag.activity_completed(run, plan, "report", {}, 4.0)
    assert run.status is RunStatus.COMPLETED
    assert run.output == {"big": False, "archived": None, "kept": {"x": 1}}


def test_a_true_condition_runs_its_branch() -> None:
    plan, run = plan_from_builtins(IF_ELSE), make_run(size=500)
    dag.begin(run, plan, 1.0)
    effects = dag.activity_completed(run, plan, "measure", {"size": 500}, 2.0)
    assert submitted(effects) == [f"{RUN_ID}.shrink"]
    assert run.nodes["keep"].status is NodeStatus.SKIPPED
    dag.activity_completed(run, plan, "shrink", "s", 3.0)
    dag.activity_completed(run, plan, "archive", "a", 4.0)
    dag.activity_completed(run, plan, "report", "r", 5.0)
    assert run.status is RunStatus.COMPLETED
    assert run.output == {"big": True, "archived": "a", "kept": None}


def test_a_join_whose_needs_were_all_skipped_is_skipped() -> None:
    plan = plan_from_builtins(
        {
            "nodes": [
                cond("no", {"op": "eq", "args": [1, 2]}),
                act("a", needs=["no"]),
                act("b", needs=["no"]),
                act("j", needs=["a", "b"], skip_when="all_skipped"),
            ],
            "output": {"j": {"$node": "j"}},
        }
    )
    run = make_run()
    effects = dag.begin(run, plan, 1.0)
    assert effects.submit == []
    assert statuses(run) == {"no": "completed", "a": "skipped", "b": "skipped", "j": "skipped"}
    assert run.status is RunStatus.COMPLETED
    assert run.output == {"j": None}


def test_skips_cascade_to_nodes_earlier_in_plan_order() -> None:
    # Plan order is the reverse of data order: every pass must be repeated.
    plan = plan_from_builtins(
        {
            "nodes": [
                act("c", needs=["b"]),
                act("b", needs=["a"]),
                act("a", needs=["gate"]),
                cond("gate", {"op": "exists", "args": [{"$input": "flag"}]}),
            ]
        }
    )
    run = make_run()
    dag.begin(run, plan, 1.0)
    assert statuses(run) == {"c": "skipped", "b": "skipped", "a": "skipped", "gate": "completed"}
    assert run.status is RunStatus.COMPLETED


def test_a_condition_reads_an_interrupts_answer() -> None:
    plan = plan_from_builtins(
        {
            "nodes": [
                {"kind": "interrupt", "id": "ask", "prompt": "go?"},
                cond(
                    "yes",
                    {"op": "eq", "args": [{"$node": "ask", "path": "go"}, True]},
                    needs=["ask"],
                ),
                act("do", needs=["yes"]),
            ]
        }
    )
    run = make_run()
    dag.begin(run, plan, 1.0)
    assert run.status is RunStatus.INTERRUPTED
    effects = dag.answered(run, plan, "ask", {"go": True}, 2.0)
    assert submitted(effects) == [f"{RUN_ID}.do"]


# ------------------------------------------------------------------- maps


def fan_plan(**kw: Any) -> Plan:
    node = {
        "kind": "map",
        "id": "each",
        "activity_type": "fetch",
        "needs": ["list"],
        "items": {"$node": "list", "path": "urls"},
        "args": {"url": {"$item": "u"}, "tag": {"$input": "tag"}},
        "idempotent": True,
        **kw,
    }
    return plan_from_builtins(
        {
            "input_schema": {"type": "object", "required": ["tag"]},
            "nodes": [
                act("list"),
                node,
                act("after", needs=["each"], args={"all": {"$node": "each"}}),
            ],
            "output": {"all": {"$node": "each"}},
        }
    )


def urls(n: int) -> dict[str, Any]:
    return {"urls": [{"u": f"http://h/{i}"} for i in range(n)]}


def test_a_map_submits_one_activity_per_item_with_deterministic_ids() -> None:
    plan, run = fan_plan(), make_run(tag="t")
    dag.begin(run, plan, 1.0)
    effects = dag.activity_completed(run, plan, "list", urls(3), 2.0)
    assert submitted(effects) == [f"{RUN_ID}.each.{i}" for i in range(3)]
    assert args_of(effects) == [{"url": f"http://h/{i}", "tag": "t"} for i in range(3)]
    assert all(a.idempotent and a.workflow_id == RUN_ID for a in effects.submit)
    state = run.nodes["each"]
    assert state.status is NodeStatus.SUBMITTED
    assert [i.activity_id for i in state.items or ()] == submitted(effects)
    assert run.steps_used == 2  # the map is one step, whatever its item count


def test_items_gather_in_item_order_whatever_the_completion_order() -> None:
    plan, run = fan_plan(), make_run(tag="t")
    dag.begin(run, plan, 1.0)
    dag.activity_completed(run, plan, "list", urls(3), 2.0)
    for index in (2, 0):
        effects = dag.activity_completed(run, plan, f"each.{index}", {"i": index}, 3.0)
        assert effects.submit == []
    effects = dag.activity_completed(run, plan, "each.1", {"i": 1}, 4.0)
    assert run.nodes["each"].status is NodeStatus.COMPLETED
    assert run.nodes["each"].output == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert args_of(effects) == [{"all": [{"i": 0}, {"i": 1}, {"i": 2}]}]
    # The results are kept once, in the node's output.
    assert [i.output for i in run.nodes["each"].items or ()] == [None, None, None]
    # A late duplicate completion changes nothing.
    assert dag.activity_completed(run, plan, "each.1", {"i": 9}, 5.0).submit == []
    assert run.nodes["each"].output == [{"i": 0}, {"i": 1}, {"i": 2}]


def test_concurrency_bounds_items_in_flight_and_refills_in_order() -> None:
    plan, run = fan_plan(concurrency=2), make_run(tag="t")
    dag.begin(run, plan, 1.0)
    effects = dag.activity_completed(run, plan, "list", urls(5), 2.0)
    assert submitted(effects) == [f"{RUN_ID}.each.0", f"{RUN_ID}.each.1"]
    effects = dag.activity_completed(run, plan, "each.1", 1, 3.0)
    assert submitted(effects) == [f"{RUN_ID}.each.2"]
    effects = dag.activity_completed(run, plan, "each.0", 0, 4.0)
    assert submitted(effects) == [f"{RUN_ID}.each.3"]
    in_flight = [i for i in run.nodes["each"].items or () if i.status is NodeStatus.SUBMITTED]
    assert len(in_flight) == 2


def test_an_empty_list_completes_the_map_at_once() -> None:
    plan, run = fan_plan(), make_run(tag="t")
    dag.begin(run, plan, 1.0)
    effects = dag.activity_completed(run, plan, "list", urls(0), 2.0)
    assert run.nodes["each"].output == []
    assert submitted(effects) == [f"{RUN_ID}.after"]


def test_more_items_than_max_items_fails_the_node_clearly() -> None:
    plan, run = fan_plan(max_items=3), make_run(tag="t")
    dag.begin(run, plan, 1.0)
    effects = dag.activity_completed(run, plan, "list", urls(4), 2.0)
    assert effects.submit == []
    assert run.status is RunStatus.FAILED
    assert run.error == RunError(
        code="too_many_items",
        message="node 'each': 4 items, more than its max_items 3",
        node="each",
    )
    assert run.nodes["each"].status is NodeStatus.FAILED


@pytest.mark.parametrize(
    ("output", "fragment"),
    [({"urls": {"u": 1}}, "resolved to dict, not a list"), ({"urls": None}, "null, not a list")],
)
def test_items_that_are_not_a_list_fail_the_node(output: Any, fragment: str) -> None:
    plan, run = fan_plan(), make_run(tag="t")
    dag.begin(run, plan, 1.0)
    dag.activity_completed(run, plan, "list", output, 2.0)
    assert run.error is not None
    assert run.error.code == "binding_failed"
    assert fragment in run.error.message


def test_an_item_whose_arguments_do_not_resolve_fails_the_run_and_submits_nothing() -> None:
    plan, run = fan_plan(), make_run(tag="t")
    dag.begin(run, plan, 1.0)
    effects = dag.activity_completed(run, plan, "list", {"urls": [{"u": 1}, {"v": 2}]}, 2.0)
    assert effects.submit == []
    assert run.error is not None
    assert run.error.code == "binding_failed"
    assert run.error.message.startswith("item 1: ")


def test_a_failed_item_fails_the_run_and_withdraws_its_siblings() -> None:
    plan, run = fan_plan(), make_run(tag="t")
    dag.begin(run, plan, 1.0)
    dag.activity_completed(run, plan, "list", urls(3), 2.0)
    dag.activity_completed(run, plan, "each.0", 0, 3.0)
    cause = RunError(code="activity_failed", message="boom", node="each.2", error_type="E")
    effects = dag.activity_failed(run, "each.2", cause, 4.0)
    assert effects.cancel == [f"{RUN_ID}.each.1"]
    assert run.status is RunStatus.FAILED
    assert run.error == RunError(
        code="activity_failed", message="item 2: boom", node="each", error_type="E"
    )
    items = run.nodes["each"].items or []
    assert [str(i.status) for i in items] == ["completed", "cancelled", "failed"]
    assert run.nodes["each"].status is NodeStatus.FAILED


def test_a_run_read_back_mid_fan_out_continues_as_the_one_in_memory() -> None:
    plan = fan_plan(concurrency=2)
    kept, stored = make_run(tag="t"), make_run(tag="t")
    for run in (kept, stored):
        dag.begin(run, plan, 1.0)
        dag.activity_completed(run, plan, "list", urls(4), 2.0)
        dag.activity_completed(run, plan, "each.0", "r0", 3.0)
    stored = reread(stored)
    assert msgspec.json.encode(stored) == msgspec.json.encode(kept)
    for index, at in ((1, 4.0), (2, 5.0), (3, 6.0)):
        one = dag.activity_completed(kept, plan, f"each.{index}", f"r{index}", at)
        two = dag.activity_completed(stored, plan, f"each.{index}", f"r{index}", at)
        assert submitted(one) == submitted(two)
        stored = reread(stored)
    assert stored.nodes["each"].output == kept.nodes["each"].output == ["r0", "r1", "r2", "r3"]


def test_activity_keys_name_nodes_and_items() -> None:
    assert dag.split_key("each.12") == ("each", 12)
    assert dag.split_key("each") == ("each", None)
    assert dag.split_key("each.x") == ("each.x", None)
    assert dag.split_key("each.²") == ("each.²", None)
    run = make_run()
    assert dag.activity_state(run, "nope.3") is None


def test_retention_links_a_run_to_its_map_items_activities() -> None:
    # Pruning a run prunes its items' activities too, not only its plain nodes'.
    from wf.runtime.runs import run_row
    from wf.server.retention import RuntimeLinks

    plan, run = fan_plan(), make_run(tag="t")
    dag.begin(run, plan, 1.0)
    dag.activity_completed(run, plan, "list", urls(2), 2.0)
    row = run_row(run, seq=7, updated_at=2.0)
    found = RuntimeLinks().activities_of(row)
    assert found is not None
    assert sorted(found) == [f"{RUN_ID}.each.0", f"{RUN_ID}.each.1", f"{RUN_ID}.list"]
    assert RuntimeLinks().run_of(f"{RUN_ID}.each.1") == RUN_ID


@given(
    count=st.integers(min_value=0, max_value=12),
    concurrency=st.integers(min_value=1, max_value=12),
    picks=st.lists(st.integers(min_value=0, max_value=1_000), min_size=12, max_size=12),
)
@settings(max_examples=100, deadline=None)
def test_any_completion_order_gathers_every_item_once_in_order(
    count: int, concurrency: int, picks: list[int]
) -> None:
    plan, run = fan_plan(max_items=12, concurrency=concurrency), make_run(tag="t")
    dag.begin(run, plan, 1.0)
    effects = dag.activity_completed(run, plan, "list", urls(count), 2.0)
    in_flight = [a for a in submitted(effects) if ".each." in a]
    seen: list[str] = list(in_flight)
    step = 0
    while in_flight:
        assert len(in_flight) <= concurrency
        done = in_flight.pop(picks[step % len(picks)] % len(in_flight))
        index = int(done.rsplit(".", 1)[1])
        effects = dag.activity_completed(run, plan, f"each.{index}", index * 10, 3.0 + step)
        fresh = [a for a in submitted(effects) if ".each." in a]
        in_flight += fresh
        seen += fresh
        step += 1
    assert seen == [f"{RUN_ID}.each.{i}" for i in range(count)]  # each once, in order
    assert run.nodes["each"].output == [i * 10 for i in range(count)]
    assert run.nodes["after"].status is NodeStatus.SUBMITTED
