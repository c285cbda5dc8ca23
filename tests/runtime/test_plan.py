"""Plans: every refusal names what is wrong; hashes are stable; random DAGs validate."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wf.errors import InvalidArgument, InvalidTimezone
from wf.runtime.plan import (
    ActivityNode,
    Plan,
    canonical_plan,
    content_hash,
    decode_canonical,
    plan_from_builtins,
    plan_from_json,
    resolve_binding,
    topological_order,
)


def act(node_id: str, **kw: Any) -> dict[str, Any]:
    return {"kind": "activity", "id": node_id, "activity_type": "t", **kw}


def refused(data: Any) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as info:
        plan_from_builtins(data)
    return info.value


HELLO: dict[str, Any] = {
    "input_schema": {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
        "additionalProperties": False,
    },
    "nodes": [
        act("greet", args={"template": "hello {name}", "name": {"$input": "name"}}),
        {"kind": "interrupt", "id": "approve", "prompt": "ok?", "needs": ["greet"]},
        {
            "kind": "timer",
            "id": "wait",
            "needs": ["approve"],
            "delay": {"kind": "relative", "seconds": 5},
        },
        act("send", needs=["wait"], args={"text": {"$node": "greet", "path": "text"}}),
    ],
    "output": {"result": {"$node": "send"}},
}


def test_a_valid_plan_decodes_with_all_node_kinds() -> None:
    plan = plan_from_builtins(HELLO)
    assert [n.id for n in plan.nodes] == ["greet", "approve", "wait", "send"]
    assert topological_order(plan) == ["greet", "approve", "wait", "send"]
    assert plan_from_json(canonical_plan(plan)) == plan


@pytest.mark.parametrize(
    ("data", "message", "node", "field"),
    [
        ({"nodes": []}, "at least one node", None, "nodes"),
        ({"nodes": [act("a"), act("a")]}, "duplicate node id 'a'", "a", "id"),
        ({"nodes": [act("A b")]}, "not a valid id", "A b", "id"),
        ({"nodes": [{"kind": "loop", "id": "x"}]}, "unknown kind 'loop'", "x", "kind"),
        ({"nodes": [{"id": "x"}]}, "has no kind", "x", "kind"),
        ({"nodes": [act("a", needs=["ghost"])]}, "unknown node 'ghost'", "a", "needs"),
        ({"nodes": [act("a", needs=["a"])]}, "cycle: a -> a", "a", "needs"),
        (
            {"nodes": [act("a", needs=["c"]), act("b", needs=["a"]), act("c", needs=["b"])]},
            "cycle: ",
            None,
            "needs",
        ),
        (
            {"nodes": [act("a", args={"x": {"$node": "ghost"}})]},
            "unknown node 'ghost'",
            "a",
            "args.x",
        ),
        (
            {"nodes": [act("a"), act("b", args={"x": {"$node": "a"}})]},
            "not upstream",
            "b",
            "args.x",
        ),
        (
            {"nodes": [act("a", args={"x": {"$nod": "b"}})]},
            "unknown reference key",
            "a",
            "args.x",
        ),
        (
            {"nodes": [act("a")], "output": {"r": {"$node": "zz"}}},
            "unknown node 'zz'",
            None,
            "output.r",
        ),
        (
            {**HELLO, "nodes": [act("a", args={"x": {"$input": "nome"}})]},
            "does not declare",
            "a",
            "args.x",
        ),
        (
            {"nodes": [act("a")], "input_schema": {"type": "nope"}},
            "not a valid JSON Schema",
            None,
            "input_schema",
        ),
        (
            {
                "nodes": [
                    {
                        "kind": "interrupt",
                        "id": "i",
                        "prompt": "?",
                        "input_schema": {"minimum": "x"},
                    }
                ]
            },
            "not a valid JSON Schema",
            "i",
            "input_schema",
        ),
        ({"nodes": [act("a", bogus=1)]}, "unknown field `bogus`", "a", None),
        ({"nodes": [act("a", timeout_s=-1)]}, "timeout_s must be positive", "a", "timeout_s"),
        ({"nodes": [act("a", timeout_s="x")]}, "Expected `float | null`", "a", "timeout_s"),
        ({"nodes": [act("a", activity_type="")]}, "empty activity_type", "a", "activity_type"),
        (
            {"nodes": [{"kind": "timer", "id": "t", "delay": {"kind": "relative", "seconds": -1}}]},
            "node 't' delay",
            "t",
            "delay.seconds",
        ),
        ({"nodes": [act("a")], "extra": 1}, "unknown field `extra`", None, None),
        ("not a plan", "a plan is an object", None, "plan"),
    ],
)
def test_every_refusal_is_precise(
    data: Any, message: str, node: str | None, field: str | None
) -> None:
    error = refused(data)
    assert message in error.message
    if node is not None:
        assert error.details["node"] == node
    if field is not None:
        assert error.details["field"] == field


def test_a_cycle_is_named_in_data_order() -> None:
    error = refused(
        {"nodes": [act("a", needs=["c"]), act("b", needs=["a"]), act("c", needs=["b"])]}
    )
    cycle = error.details["cycle"]
    assert cycle[0] == cycle[-1]
    assert set(cycle) == {"a", "b", "c"}
    assert " -> ".join(cycle) in error.message


def test_a_bad_timer_zone_keeps_its_class_and_names_the_node() -> None:
    bad = {
        "kind": "timer",
        "id": "t",
        "delay": {"kind": "calendar", "cron": "* * * * *", "timezone": "Mars/Base"},
    }
    with pytest.raises(InvalidTimezone) as info:
        plan_from_builtins({"nodes": [bad]})
    assert info.value.details["node"] == "t"


def test_hash_is_stable_and_ignores_key_order_and_defaults() -> None:
    plan = plan_from_builtins(HELLO)
    reordered = dict(reversed(list(HELLO.items())))
    explicit = {**HELLO, "format": 1}
    assert content_hash(plan_from_builtins(reordered)) == content_hash(plan)
    assert content_hash(plan_from_builtins(explicit)) == content_hash(plan)
    assert content_hash(plan).startswith("sha256:")
    assert decode_canonical(canonical_plan(plan)) == plan
    # A pinned value: the canonical form must never drift silently.
    one = plan_from_builtins({"nodes": [act("a")]})
    assert (
        canonical_plan(one) == b'{"input_schema":{"type":"object"},"nodes":'
        b'[{"activity_type":"t","id":"a","kind":"activity"}]}'
    )
    changed = plan_from_builtins({"nodes": [act("a", idempotent=True)]})
    assert content_hash(changed) != content_hash(one)


def test_bindings_resolve() -> None:
    binding = {
        "a": {"$input": "name"},
        "b": [{"$node": "s", "path": "x.0"}, 3],
        "c": {"$literal": {"$input": "raw"}},
    }
    value = resolve_binding(binding, {"name": "ada"}, {"s": {"x": ["first"]}})
    assert value == {"a": "ada", "b": ["first", 3], "c": {"$input": "raw"}}
    with pytest.raises(InvalidArgument):
        resolve_binding({"$input": "missing"}, {}, {})
    with pytest.raises(InvalidArgument):
        resolve_binding({"$node": "s", "path": "y"}, {}, {"s": {"x": 1}})


@st.composite
def dags(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Random DAGs: node i may need any earlier node, and bind to what it needs."""
    count = draw(st.integers(min_value=1, max_value=25))
    nodes = []
    for i in range(count):
        needs = sorted(draw(st.sets(st.integers(0, i - 1), max_size=4))) if i else []
        args = {f"x{j}": {"$node": f"n{j}"} for j in needs[:2]}
        nodes.append(act(f"n{i}", needs=[f"n{j}" for j in needs], args=args))
    order = draw(st.permutations(nodes))
    return list(order)


@settings(max_examples=75, deadline=None)
@given(dags())
def test_random_dags_validate(nodes: list[dict[str, Any]]) -> None:
    plan = plan_from_builtins({"nodes": nodes})
    order = topological_order(plan)
    position = {node_id: i for i, node_id in enumerate(order)}
    for node in plan.nodes:
        assert isinstance(node, ActivityNode)
        assert all(position[n] < position[node.id] for n in node.needs)


@settings(max_examples=75, deadline=None)
@given(dags(), st.data())
def test_a_back_edge_is_a_cycle(nodes: list[dict[str, Any]], data: st.DataObject) -> None:
    plan = plan_from_builtins({"nodes": nodes})
    edges = [(n.id, need) for n in plan.nodes for need in n.needs]
    if not edges:
        nodes = [*nodes, act("extra", needs=[nodes[0]["id"]])]
        edges = [("extra", nodes[0]["id"])]
    child, parent = data.draw(st.sampled_from(edges))
    # parent -> child exists; make parent also need child.
    changed = [
        {**n, "needs": [*n.get("needs", []), child]} if n["id"] == parent else n for n in nodes
    ]
    error = refused({"nodes": changed})
    assert "cycle" in error.message
    assert error.details["field"] == "needs"
    assert {child, parent} <= set(error.details["cycle"])


def test_plan_struct_is_accepted_as_is() -> None:
    plan = Plan(nodes=[ActivityNode(id="a", activity_type="t")])
    assert plan_from_builtins(plan) is plan
