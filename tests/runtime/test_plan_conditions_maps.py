"""Plan validation of condition and map nodes, strict input bindings, and the
expression language (issue 19): what creation refuses, and evaluation that is
total and deterministic on any operands, hostile ones included."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wf.errors import InvalidArgument
from wf.runtime.expr import (
    COMPARE_OPS,
    EXPR_DEPTH_MAX,
    EXPR_OPS_MAX,
    OPS,
    evaluate,
    json_equal,
)
from wf.runtime.plan import (
    MAP_ITEMS_MAX,
    ActivityParams,
    ConditionNode,
    MapNode,
    canonical_plan,
    check_activity_args,
    content_hash,
    decode_canonical,
    input_defaults_of,
    params_of,
    plan_from_builtins,
    plan_from_json,
    resolve_binding,
    resolve_operand,
)
from wf.runtime.schema import plan_json_schema
from wf.wire.workflow import EXPRESSION_OPS


def act(node_id: str, **kw: Any) -> dict[str, Any]:
    return {"kind": "activity", "id": node_id, "activity_type": f"do_{node_id}", **kw}


def cond(node_id: str, when: Any, **kw: Any) -> dict[str, Any]:
    return {"kind": "condition", "id": node_id, "when": when, **kw}


def fan(node_id: str, items: Any, **kw: Any) -> dict[str, Any]:
    return {"kind": "map", "id": node_id, "activity_type": "do_item", "items": items, **kw}


def refused(data: Any) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as info:
        plan_from_builtins(data)
    return info.value


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "limit": {"type": "integer", "default": 10},
        "note": {"type": "string"},
        "urls": {"type": "array"},
    },
    "required": ["name", "urls"],
}

BRANCHY: dict[str, Any] = {
    "input_schema": SCHEMA,
    "nodes": [
        act("fetch", args={"name": {"$input": "name"}, "limit": {"$input": "limit"}}),
        cond(
            "big",
            {"op": "gt", "args": [{"$node": "fetch", "path": "size"}, {"$input": "limit"}]},
            needs=["fetch"],
        ),
        act("shrink", needs=["big"]),
        fan(
            "each",
            {"$input": "urls"},
            args={"url": {"$item": ""}, "host": {"$item": "host"}, "n": {"$input": "name"}},
            max_items=50,
            concurrency=3,
            needs=["fetch"],
            idempotent=True,
        ),
        act("join", needs=["shrink", "each"], skip_when="all_skipped"),
    ],
    "output": {"each": {"$node": "each"}, "shrunk": {"$node": "shrink"}},
}


# ------------------------------------------------------------- valid plans


def test_a_plan_with_conditions_and_maps_decodes_and_round_trips() -> None:
    plan = plan_from_builtins(BRANCHY)
    kinds = [type(n).__name__ for n in plan.nodes]
    assert kinds == ["ActivityNode", "ConditionNode", "ActivityNode", "MapNode", "ActivityNode"]
    big, each = plan.nodes[1], plan.nodes[3]
    assert isinstance(big, ConditionNode)
    assert big.skip_when == "any_skipped"
    assert isinstance(each, MapNode)
    assert (each.max_items, each.concurrency, each.idempotent) == (50, 3, True)
    assert plan.nodes[4].skip_when == "all_skipped"
    again = plan_from_json(json.dumps(BRANCHY))
    assert content_hash(again) == content_hash(plan)
    assert decode_canonical(canonical_plan(plan)) == plan


def test_defaults_keep_existing_hashes_of_plans_without_the_new_fields() -> None:
    # skip_when is omitted at its default: a plan written before it hashes the same.
    plan = plan_from_builtins({"nodes": [act("a")]})
    assert b"skip_when" not in canonical_plan(plan)
    assert b"skip_when" not in canonical_plan(plan_from_builtins(BRANCHY)).split(b'"join"')[0]


def test_input_defaults_are_read_from_the_schema_properties() -> None:
    assert input_defaults_of(SCHEMA) == {"limit": 10}
    assert input_defaults_of({"type": "object"}) == {}


# ---------------------------------------------------------- strict inputs


@pytest.mark.parametrize(
    ("where", "binding_owner"),
    [
        ("args", lambda b: {"nodes": [act("a", args={"x": b})]}),
        ("output", lambda b: {"nodes": [act("a")], "output": {"x": b}}),
        ("items", lambda b: {"nodes": [fan("m", b)]}),
    ],
)
def test_an_optional_input_without_default_is_refused_at_creation(
    where: str, binding_owner: Any
) -> None:
    data = binding_owner({"$input": "note"})
    data["input_schema"] = SCHEMA
    error = refused(data)
    assert "note" in error.message
    assert "required" in error.message
    assert error.details["input"] == "note"
    assert error.details["field"].startswith(where)
    expected_node = None if where == "output" else data["nodes"][0]["id"]
    assert error.details["node"] == expected_node


def test_an_input_the_schema_does_not_mention_is_refused_too() -> None:
    error = refused({"nodes": [act("a", args={"x": {"$input": "who"}})]})
    assert error.details == {"node": "a", "field": "args.x", "input": "who"}


def test_required_and_defaulted_inputs_are_accepted() -> None:
    plan_from_builtins(
        {
            "input_schema": SCHEMA,
            "nodes": [act("a", args={"n": {"$input": "name"}, "l": {"$input": "limit"}})],
        }
    )


def test_a_condition_may_test_an_optional_input_for_existence() -> None:
    plan_from_builtins(
        {
            "input_schema": SCHEMA,
            "nodes": [cond("c", {"op": "exists", "args": [{"$input": "note"}]})],
        }
    )


def test_a_default_that_does_not_fit_its_property_is_refused() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "default": "ten"}}}
    error = refused({"input_schema": schema, "nodes": [act("a")]})
    assert error.details["field"] == "input_schema.properties.n.default"


def test_a_stored_plan_from_before_the_strict_rules_still_loads() -> None:
    # Creation refuses it now; decoding the stored canonical form never re-validates.
    data = {"nodes": [act("a", args={"x": {"$input": "who"}})]}
    refused(data)
    plan = decode_canonical(msgspec.json.encode(data))
    assert plan.nodes[0].id == "a"


# -------------------------------------------------------------- map nodes


@pytest.mark.parametrize(
    ("node", "field", "fragment"),
    [
        (fan("m", {"$input": "urls"}, max_items=0), "max_items", "max_items must be"),
        (fan("m", {"$input": "urls"}, max_items=MAP_ITEMS_MAX + 1), "max_items", "1-1000"),
        (fan("m", {"$input": "urls"}, max_items=5, concurrency=6), "concurrency", "concurrency"),
        (fan("m", {"$input": "urls"}, concurrency=0), "concurrency", "concurrency"),
        (fan("m", {"literal": 1}), "items", "reference"),
        (fan("m", {"wrapped": {"$input": "urls"}}), "items", "reference"),
        (fan("m", {"$literal": [1, 2]}), "items", "reference"),
        (fan("m", {"$item": ""}), "items", "reference"),
        (fan("m", {"$input": "urls"}, activity_type=""), "activity_type", "empty"),
        (fan("m", {"$input": "urls"}, timeout_s=0), "timeout_s", "positive"),
        (fan("m", {"$node": "later"}), "items", "not upstream"),
    ],
)
def test_bad_map_nodes_are_refused(node: dict[str, Any], field: str, fragment: str) -> None:
    error = refused({"input_schema": SCHEMA, "nodes": [node, act("later")]})
    assert error.details["node"] == "m"
    assert error.details["field"] == field
    assert fragment in error.message


def test_item_references_are_refused_outside_a_map_nodes_args() -> None:
    error = refused({"nodes": [act("a", args={"x": {"$item": ""}})]})
    assert error.details == {"node": "a", "field": "args.x"}
    assert "$item" in error.message
    error = refused({"nodes": [act("a")], "output": {"x": {"$item": "a"}}})
    assert error.details["field"] == "output.x"


def test_items_that_are_not_an_object_are_refused_by_type() -> None:
    error = refused({"nodes": [fan("m", [1, 2])]})
    assert error.details["node"] == "m"
    assert error.details["field"] == "items"


# ----------------------------------------------------------- conditions


@pytest.mark.parametrize(
    ("when", "fragment"),
    [
        ("true", "Expected `object`"),
        ({"op": "eq"}, "args array"),
        ({"op": "xor", "args": [1, 2]}, "unknown op 'xor'"),
        ({"op": "eq", "args": [1]}, "exactly 2"),
        ({"op": "eq", "args": [1, 2, 3]}, "exactly 2"),
        ({"op": "not", "args": []}, "exactly 1"),
        ({"op": "and", "args": []}, "at least 1"),
        ({"op": "and", "args": [True]}, "must be an object"),
        ({"op": "exists", "args": [3]}, "exists takes a reference"),
        ({"op": "eq", "args": [1, 2], "extra": 0}, "does not take"),
        ({"op": "eq", "args": [{"$node": "later"}, 1]}, "not upstream"),
        ({"op": "eq", "args": [{"$bogus": 1}, 1]}, "unknown reference"),
        ({"op": "eq", "args": [{"$item": ""}, 1]}, "$item"),
        ({"op": "eq", "args": [{"$input": "nope"}, 1]}, "does not declare"),
    ],
)
def test_bad_expressions_are_refused_with_node_and_field(when: Any, fragment: str) -> None:
    closed = {"type": "object", "properties": {"x": {}}, "additionalProperties": False}
    error = refused({"input_schema": closed, "nodes": [cond("c", when), act("later")]})
    assert error.details["node"] == "c"
    assert error.details["field"].startswith("when")
    assert fragment in error.message


def test_deep_and_wide_expressions_are_refused_not_recursed() -> None:
    deep: dict[str, Any] = {"op": "eq", "args": [1, 1]}
    for _ in range(10_000):
        deep = {"op": "not", "args": [deep]}
    error = refused({"nodes": [cond("c", deep)]})
    assert f"deeper than {EXPR_DEPTH_MAX}" in error.message
    wide = {"op": "and", "args": [{"op": "eq", "args": [1, 1]}] * (EXPR_OPS_MAX + 1)}
    error = refused({"nodes": [cond("c", wide)]})
    assert f"more than {EXPR_OPS_MAX}" in error.message


def test_a_deeply_nested_plan_document_is_refused_cleanly_from_json() -> None:
    text = '{"nodes": [{"kind": "condition", "id": "c", "when": ' + "[" * 100_000 + "]" * 100_000
    with pytest.raises(InvalidArgument):
        plan_from_json(text + "}]}")


# -------------------------------------------------------------- evaluation


def run_expr(expr: dict[str, Any], inputs: Any = None, outputs: Any = None) -> bool:
    skipped = frozenset({"gone"})
    return evaluate(expr, lambda v: resolve_operand(v, inputs or {}, outputs or {}, skipped))


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ({"op": "eq", "args": [1, 1.0]}, True),
        ({"op": "eq", "args": [True, 1]}, False),
        ({"op": "eq", "args": [False, 0]}, False),
        ({"op": "eq", "args": [{"a": [1, {"b": None}]}, {"a": [1, {"b": None}]}]}, True),
        ({"op": "eq", "args": [{"a": 1}, {"a": 1, "b": 2}]}, False),
        ({"op": "ne", "args": ["a", "b"]}, True),
        ({"op": "lt", "args": [1, 2]}, True),
        ({"op": "lt", "args": ["b", "a"]}, False),
        ({"op": "ge", "args": [2, 2]}, True),
        ({"op": "le", "args": [3, 2]}, False),
        ({"op": "gt", "args": ["1", 0]}, False),  # mixed types: false, never coerced
        ({"op": "gt", "args": [True, 0]}, False),  # booleans are not numbers
        ({"op": "lt", "args": [None, 1]}, False),
        ({"op": "in", "args": [2, [1, 2.0]]}, True),
        ({"op": "in", "args": [True, [1]]}, False),
        ({"op": "in", "args": ["k", {"k": 0}]}, True),
        ({"op": "in", "args": ["ell", "hello"]}, True),
        ({"op": "in", "args": [1, "1"]}, False),
        ({"op": "in", "args": [1, 5]}, False),
        (
            {"op": "and", "args": [{"op": "eq", "args": [1, 1]}, {"op": "eq", "args": [1, 2]}]},
            False,
        ),
        ({"op": "or", "args": [{"op": "eq", "args": [1, 2]}, {"op": "eq", "args": [1, 1]}]}, True),
        ({"op": "not", "args": [{"op": "eq", "args": [1, 2]}]}, True),
        ({"op": "exists", "args": [{"$input": "x"}]}, True),
        ({"op": "exists", "args": [{"$input": "absent"}]}, False),
        ({"op": "exists", "args": [{"$node": "a", "path": "deep.0"}]}, True),
        ({"op": "exists", "args": [{"$node": "a", "path": "deep.9"}]}, False),
        ({"op": "exists", "args": [{"$node": "gone"}]}, False),
        ({"op": "eq", "args": [{"$input": "absent"}, None]}, True),  # missing reads as null
        ({"op": "eq", "args": [{"$node": "gone", "path": "x"}, None]}, True),
        ({"op": "eq", "args": [{"$node": "a", "path": "deep.0"}, "z"]}, True),
        ({"op": "eq", "args": [[{"$input": "x"}, {"$input": "absent"}], [3, None]]}, True),
        ({"op": "eq", "args": [{"$literal": {"$input": "x"}}, {"$input": "lit"}]}, True),
    ],
)
def test_expressions_evaluate_as_documented(expr: dict[str, Any], expected: bool) -> None:
    inputs = {"x": 3, "lit": {"$input": "x"}}
    outputs = {"a": {"deep": ["z"]}}
    assert run_expr(expr, inputs, outputs) is expected


def test_the_published_operators_are_the_evaluated_ones() -> None:
    assert OPS == EXPRESSION_OPS


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(a=json_values, b=json_values, op=st.sampled_from(sorted(COMPARE_OPS)))
@settings(max_examples=300, deadline=None)
def test_comparisons_are_total_and_deterministic_on_any_json(a: Any, b: Any, op: str) -> None:
    expr = {"op": op, "args": [{"$literal": a}, {"$literal": b}]}
    first = run_expr(expr)
    assert isinstance(first, bool)
    assert run_expr(expr) is first
    if op == "eq":
        assert first is json_equal(b, a)
        assert run_expr({"op": "ne", "args": expr["args"]}) is not first


def test_equality_of_hostile_deep_values_does_not_recurse() -> None:
    deep_a: Any = 1
    deep_b: Any = 1
    for _ in range(50_000):
        deep_a, deep_b = [deep_a], [deep_b]
    assert json_equal(deep_a, deep_b)
    assert not json_equal(deep_a, [deep_b])


# -------------------------------------------------------------- bindings


def test_item_and_skipped_references_resolve() -> None:
    binding = {"u": {"$item": ""}, "h": {"$item": "host"}, "s": {"$node": "gone", "path": "x.y"}}
    value = resolve_binding(
        binding, {}, {}, item={"host": "example.org"}, skipped=frozenset({"gone"})
    )
    assert value == {"u": {"host": "example.org"}, "h": "example.org", "s": None}
    with pytest.raises(InvalidArgument, match="has no 'port'"):
        resolve_binding({"p": {"$item": "port"}}, {}, {}, item={"host": "h"})
    with pytest.raises(InvalidArgument, match="only bound in a map"):
        resolve_binding({"$item": ""}, {}, {})


def test_a_superscript_digit_path_segment_is_absent_not_a_crash() -> None:
    with pytest.raises(InvalidArgument, match="has no"):
        resolve_binding({"$node": "a", "path": "²"}, {}, {"a": [1, 2, 3]})


# ------------------------------------------------------------ JSON Schema


def test_the_plan_json_schema_lists_the_new_kinds_and_is_valid() -> None:
    import jsonschema  # type: ignore[import-untyped]

    schema = plan_json_schema()
    # A valid JSON Schema document (wf's stricter rules for *input* schemas, which refuse
    # ``pattern``, do not apply: this schema is published, never run against inputs here).
    jsonschema.Draft202012Validator.check_schema(schema)
    defs = schema["$defs"]
    assert {"ConditionNode", "MapNode"} <= set(defs)
    assert defs["ConditionNode"]["properties"]["when"]["properties"]["op"]["enum"] == list(
        EXPRESSION_OPS
    )
    assert defs["MapNode"]["required"] == ["kind", "id", "activity_type", "items"]
    assert defs["ActivityNode"]["properties"]["skip_when"]["enum"] == [
        "all_skipped",
        "any_skipped",
    ]
    jsonschema.validate(BRANCHY, schema)


# ------------------------------------------------------ declared parameters


def _fetch(url: str, retries: int = 3, *, verbose: bool = False) -> None: ...


def _echo(tag: str, **values: Any) -> None: ...


def _positional(a: int, /, *rest: int) -> None: ...


def test_params_of_reads_what_a_node_may_bind() -> None:
    assert params_of(_fetch) == ActivityParams(
        required=frozenset({"url"}), optional=frozenset({"retries", "verbose"})
    )
    assert params_of(_echo) == ActivityParams(required=frozenset({"tag"}), any_keyword=True)
    assert params_of(_positional) == ActivityParams(required=frozenset())


KNOWN = {"fetch": params_of(_fetch), "echo": params_of(_echo)}


def typed(node_id: str, activity_type: str, **kw: Any) -> dict[str, Any]:
    return {"kind": "activity", "id": node_id, "activity_type": activity_type, **kw}


@pytest.mark.parametrize(
    ("node", "field", "fragment"),
    [
        (typed("a", "fetch", args={"url": "u", "rtries": 1}), "args.rtries", "does not take"),
        (typed("a", "fetch", args={"retries": 1}), "args", "does not bind ['url']"),
        (fan("a", {"$input": "xs"}, activity_type="fetch"), "args", "requires"),
        (typed("a", "echo", args={"other": 1}), "args", "does not bind ['tag']"),
    ],
)
def test_args_that_do_not_fit_declared_parameters_are_refused(
    node: dict[str, Any], field: str, fragment: str
) -> None:
    plan = plan_from_builtins({"input_schema": {"required": ["xs"]}, "nodes": [node]})
    with pytest.raises(InvalidArgument) as info:
        check_activity_args(plan, KNOWN)
    assert info.value.details["node"] == "a"
    assert info.value.details["field"] == field
    assert fragment in info.value.message


def test_args_that_fit_and_unknown_types_pass() -> None:
    plan = plan_from_builtins(
        {
            "input_schema": {"required": ["xs"]},
            "nodes": [
                typed("a", "fetch", args={"url": "u", "verbose": True}),
                typed("b", "echo", args={"tag": "t", "anything": 1}),
                typed("c", "unknown_type", args={"whatever": 1}),
                fan("d", {"$input": "xs"}, activity_type="fetch", args={"url": {"$item": ""}}),
            ],
        }
    )
    check_activity_args(plan, KNOWN)
