"""wf.flow builds exactly the plans the equivalent hand-written JSON decodes to.

Each equality test compares the built plan with ``plan_from_builtins`` of the
JSON, as structs *and* by content hash (the hash is what makes an artifact
version the same one), then checks that ``validate_plan`` accepted it.
The refusals name the node and the argument (``details.node``, ``details.field``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict

import pytest

from wf import flow
from wf.activities import format_text, join_texts, upper
from wf.errors import InvalidArgument
from wf.runtime.plan import content_hash, plan_from_builtins
from wf.runtime.schema import instance_problems
from wf.scheduler.model import Priority, RetryPolicy
from wf.worker import activity


@activity(name="double", idempotent=True)
def double(x: int) -> dict[str, int]:
    return {"value": 2 * x}


@activity(name="add", retry=RetryPolicy(max_attempts=5))
def add(x: int, y: int = 0) -> dict[str, int]:
    return {"value": x + y}


@activity(name="notify", capabilities=["email"])
async def notify(to: str, *, body: str) -> None:
    return None


@activity(name="pos_only")
def pos_only(x: int, /) -> int:
    return x


@activity(name="takes_id")
def takes_id(id: str, after: int) -> str:
    return id


def _same(built: flow.Flow, hand_written: dict[str, Any]) -> None:
    expected = plan_from_builtins(hand_written)
    assert built.plan == expected
    assert built.content_hash == content_hash(expected)


# ------------------------------------------------------- the docs' plans


SCHEDULED_HELLO: dict[str, Any] = {
    "input_schema": {
        "type": "object",
        "properties": {"greeting": {"type": "string"}},
        "required": ["greeting"],
    },
    "nodes": [
        {
            "kind": "activity",
            "id": "hello",
            "activity_type": "format_text",
            "args": {"template": "{greeting} on a schedule", "greeting": {"$input": "greeting"}},
            "idempotent": True,
        }
    ],
    "output": {"result": {"$node": "hello", "path": "text"}},
}
"""README's "A schedule from Python" and docs/workflows.md's "The plan format"."""

FIVE_MINUTES: dict[str, Any] = {
    "input_schema": {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
    },
    "nodes": [
        {
            "kind": "activity",
            "id": "greet",
            "activity_type": "format_text",
            "args": {"template": "hello {n}", "n": {"$input": "name"}},
            "idempotent": True,
        },
        {
            "kind": "interrupt",
            "id": "approve",
            "prompt": "Send it?",
            "needs": ["greet"],
            "input_schema": {"type": "boolean"},
        },
        {
            "kind": "activity",
            "id": "shout",
            "activity_type": "upper",
            "needs": ["approve"],
            "args": {"text": {"$node": "greet", "path": "text"}},
        },
    ],
    "output": {"result": {"$node": "shout", "path": "text"}},
}
"""docs/workflows.md's "In five minutes"."""


def test_the_scheduled_hello_flow_is_the_readme_plan() -> None:
    @flow.workflow("scheduled_hello")
    def scheduled_hello() -> flow.Outputs:
        greeting = flow.input("greeting", str)
        hello = flow.call(
            format_text, id="hello", template="{greeting} on a schedule", greeting=greeting
        )
        return {"result": hello["text"]}

    assert scheduled_hello.artifact_id == "scheduled_hello"
    _same(scheduled_hello, SCHEDULED_HELLO)


def test_the_five_minute_flow_is_the_docs_plan() -> None:
    @flow.workflow("hello")
    def hello() -> flow.Outputs:
        name = flow.input("name", str)
        greet = flow.call(format_text, id="greet", template="hello {n}", n=name)
        approve = flow.interrupt("Send it?", id="approve", schema=bool, after=[greet])
        # The docs' JSON leaves shout's idempotent out; upper declares it: say so here.
        shout = flow.call(upper, id="shout", text=greet["text"], after=[approve], idempotent=False)
        return {"result": shout["text"]}

    _same(hello, FIVE_MINUTES)
    # needs is the fewest direct dependencies: greet is upstream through approve.
    assert [n.needs for n in hello.plan.nodes] == [(), ("greet",), ("approve",)]


def test_idempotency_retry_and_capabilities_come_from_the_declaration() -> None:
    @flow.workflow
    def declared() -> flow.Outputs:
        n = flow.input("n", int)
        a = flow.call(double, x=n)
        b = flow.call(add, x=a["value"], y=n)
        flow.call(notify, to="ops@example.com", body=b["value"], timeout_s=30.0)
        return {"total": b["value"]}

    assert declared.artifact_id == "declared"
    _same(
        declared,
        {
            "input_schema": {
                "type": "object",
                "properties": {"n": {"type": "integer"}},
                "required": ["n"],
            },
            "nodes": [
                {
                    "kind": "activity",
                    "id": "double",
                    "activity_type": "double",
                    "args": {"x": {"$input": "n"}},
                    "idempotent": True,
                },
                {
                    "kind": "activity",
                    "id": "add",
                    "activity_type": "add",
                    "args": {"x": {"$node": "double", "path": "value"}, "y": {"$input": "n"}},
                    "needs": ["double"],
                    "retry": {"max_attempts": 5},
                },
                {
                    "kind": "activity",
                    "id": "notify",
                    "activity_type": "notify",
                    "args": {"to": "ops@example.com", "body": {"$node": "add", "path": "value"}},
                    "needs": ["add"],
                    "capabilities": ["email"],
                    "timeout_s": 30.0,
                },
            ],
            "output": {"total": {"$node": "add", "path": "value"}},
        },
    )


def test_options_override_the_declaration_and_ids_are_made_unique() -> None:
    @flow.workflow("overrides")
    def overrides() -> flow.Outputs:
        n = flow.input("n", int, default=3, description="how many")
        first = flow.call(double, x=n, idempotent=False, priority=Priority.HIGH)
        second = flow.call(
            double,
            x=first["value"],
            # A default spelled out (another 1.0 object) is written as left out.
            retry=RetryPolicy(max_attempts=1, initial_backoff_s=float("1.0")),
            capabilities=["gpu"],
        )
        flow.call(takes_id, args={"id": "x", "after": 1}, after=[second])
        return None

    _same(
        overrides,
        {
            "input_schema": {
                "type": "object",
                "properties": {"n": {"type": "integer", "default": 3, "description": "how many"}},
            },
            "nodes": [
                {
                    "kind": "activity",
                    "id": "double",
                    "activity_type": "double",
                    "args": {"x": {"$input": "n"}},
                    "priority": 1,
                },
                {
                    "kind": "activity",
                    "id": "double_2",
                    "activity_type": "double",
                    "args": {"x": {"$node": "double", "path": "value"}},
                    "needs": ["double"],
                    "retry": {"max_attempts": 1},
                    "capabilities": ["gpu"],
                    "idempotent": True,
                },
                {
                    "kind": "activity",
                    "id": "takes_id",
                    "activity_type": "takes_id",
                    "args": {"id": "x", "after": 1},
                    "needs": ["double_2"],
                },
            ],
        },
    )


def test_a_dollar_object_holding_a_reference_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="mixes '\\$' keys with references") as caught:

        @flow.workflow("dollar")
        def dollar() -> flow.Outputs:
            words = flow.input("words", list[str])
            flow.call(format_text, template="{b}", b={"k": words, "$ref": 1})
            return None

    assert caught.value.details["node"] == "format_text"


def test_paths_lists_and_dollar_literals() -> None:
    @flow.workflow("paths")
    def paths() -> flow.Outputs:
        words = flow.input("words", list[str])
        joined = flow.call(join_texts, texts=words, separator="-")
        echo = flow.call(
            format_text,
            template="{a} {b}",
            a=[joined["text"], 1, None, (True, 2.5)],
            b={"$ref": "kept as written"},
        )
        return {"first": echo["text"], "deep": echo["parts"][0]["name"], "all": echo}

    _same(
        paths,
        {
            "input_schema": {
                "type": "object",
                "properties": {"words": {"type": "array", "items": {"type": "string"}}},
                "required": ["words"],
            },
            "nodes": [
                {
                    "kind": "activity",
                    "id": "join_texts",
                    "activity_type": "join_texts",
                    "args": {"texts": {"$input": "words"}, "separator": "-"},
                    "idempotent": True,
                },
                {
                    "kind": "activity",
                    "id": "format_text",
                    "activity_type": "format_text",
                    "args": {
                        "template": "{a} {b}",
                        "a": [{"$node": "join_texts", "path": "text"}, 1, None, [True, 2.5]],
                        "b": {"$literal": {"$ref": "kept as written"}},
                    },
                    "needs": ["join_texts"],
                    "idempotent": True,
                },
            ],
            "output": {
                "first": {"$node": "format_text", "path": "text"},
                "deep": {"$node": "format_text", "path": "parts.0.name"},
                "all": {"$node": "format_text"},
            },
        },
    )


def test_timers_conditions_and_maps() -> None:
    at = datetime(2026, 5, 1, 7, 0, tzinfo=UTC)

    @flow.workflow("branches")
    def branches() -> flow.Outputs:
        orders = flow.input("orders", list[dict[str, Any]])
        limit = flow.input("limit", int, default=10)
        wait = flow.timer(timedelta(minutes=5), id="cool_off")
        flow.timer(at, id="at_seven")
        totals = flow.map(
            double, orders, x=flow.item["amount"], max_items=50, concurrency=4, after=[wait]
        )
        big = flow.when((totals[0]["value"] > limit) & flow.exists(orders), id="big")
        with big:
            alert = flow.call(notify, to="ops@example.com", body=totals[0]["value"])
        small = flow.when(~flow.contains(["a", "b"], "c"), id="small")
        flow.call(
            format_text, id="join", template="done", after=[alert, small], skip_when="all_skipped"
        )
        return {"totals": totals}

    _same(
        branches,
        {
            "input_schema": {
                "type": "object",
                "properties": {
                    "orders": {"type": "array", "items": {"type": "object"}},
                    "limit": {"type": "integer", "default": 10},
                },
                "required": ["orders"],
            },
            "nodes": [
                {"kind": "timer", "id": "cool_off", "delay": {"kind": "relative", "seconds": 300}},
                {
                    "kind": "timer",
                    "id": "at_seven",
                    "delay": {"kind": "absolute", "at": "2026-05-01T07:00:00Z"},
                },
                {
                    "kind": "map",
                    "id": "double",
                    "activity_type": "double",
                    "items": {"$input": "orders"},
                    "args": {"x": {"$item": "amount"}},
                    "max_items": 50,
                    "concurrency": 4,
                    "needs": ["cool_off"],
                    "idempotent": True,
                },
                {
                    "kind": "condition",
                    "id": "big",
                    "when": {
                        "op": "and",
                        "args": [
                            {
                                "op": "gt",
                                "args": [
                                    {"$node": "double", "path": "0.value"},
                                    {"$input": "limit"},
                                ],
                            },
                            {"op": "exists", "args": [{"$input": "orders"}]},
                        ],
                    },
                    "needs": ["double"],
                },
                {
                    "kind": "activity",
                    "id": "notify",
                    "activity_type": "notify",
                    "args": {
                        "to": "ops@example.com",
                        "body": {"$node": "double", "path": "0.value"},
                    },
                    "needs": ["big"],
                    "capabilities": ["email"],
                },
                {
                    "kind": "condition",
                    "id": "small",
                    "when": {"op": "not", "args": [{"op": "in", "args": ["c", ["a", "b"]]}]},
                },
                {
                    "kind": "activity",
                    "id": "join",
                    "activity_type": "format_text",
                    "args": {"template": "done"},
                    "needs": ["notify", "small"],
                    "skip_when": "all_skipped",
                    "idempotent": True,
                },
            ],
            "output": {"totals": {"$node": "double"}},
        },
    )


# ------------------------------------------------------------- refusals


def _refused(body: Any) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as caught:
        flow.build(body, "refused")
    return caught.value


def test_an_unknown_parameter_is_refused_naming_node_and_parameter() -> None:
    def body() -> flow.Outputs:
        flow.call(double, id="twice", x=1, z=2)
        return None

    error = _refused(body)
    assert error.details == {"node": "twice", "field": "args.z"}
    assert "activity 'double' has no parameter 'z' (it takes: x)" in error.message


def test_a_missing_parameter_is_refused() -> None:
    def body() -> flow.Outputs:
        flow.call(notify, to="x")
        return None

    error = _refused(body)
    assert error.details == {"node": "notify", "field": "args.body"}
    assert "parameter 'body' has no default and the node does not bind it" in error.message


def test_a_parameter_with_a_default_may_be_left_out_and_kwargs_take_any_name() -> None:
    @flow.workflow("optional")
    def optional() -> flow.Outputs:
        flow.call(add, x=1)
        flow.call(format_text, template="{anything}", anything=2)
        return None

    assert [n.id for n in optional.plan.nodes] == ["add", "format_text"]


def test_a_positional_only_parameter_is_refused() -> None:
    def body() -> flow.Outputs:
        flow.call(pos_only, x=1)
        return None

    error = _refused(body)
    assert error.details == {"node": "pos_only", "field": "args.x"}
    assert "positional-only" in error.message


def test_a_literal_that_does_not_fit_the_annotation_is_refused() -> None:
    def body() -> flow.Outputs:
        flow.call(double, x="three")
        return None

    error = _refused(body)
    assert error.details == {"node": "double", "field": "args.x"}
    assert "does not fit the parameter's type" in error.message


def test_item_outside_a_map_is_refused() -> None:
    def body() -> flow.Outputs:
        flow.call(double, x=flow.item)
        return None

    assert _refused(body).details == {"node": "double", "field": "args.x"}


def test_a_reference_from_another_flow_is_refused() -> None:
    leaked: list[flow.Output[Any]] = []

    @flow.workflow("first")
    def first() -> flow.Outputs:
        leaked.append(flow.call(double, id="elsewhere", x=1))
        return None

    def body() -> flow.Outputs:
        flow.call(double, id="here", x=leaked[0]["value"])
        return None

    error = _refused(body)
    assert error.details["node"] == "here"
    assert "'elsewhere', which this flow has not built" in error.message


def test_plan_validation_runs_when_the_flow_is_built() -> None:
    def body() -> flow.Outputs:
        items = flow.input("items", list[int])
        flow.map(double, items, id="each", x=flow.item, max_items=2, concurrency=3)
        return None

    error = _refused(body)
    assert error.details["node"] == "each"
    assert error.details["field"] == "concurrency"


def test_duplicate_ids_inputs_and_bad_ids_are_refused() -> None:
    def twice() -> flow.Outputs:
        flow.call(double, id="a", x=1)
        flow.call(double, id="a", x=2)
        return None

    assert _refused(twice).details == {"node": "a", "field": "id"}

    def input_twice() -> flow.Outputs:
        flow.input("n", int)
        flow.input("n", int)
        return None

    assert "declared twice" in _refused(input_twice).message

    def bad_id() -> flow.Outputs:
        flow.call(double, id="Not-An-Id", x=1)
        return None

    assert _refused(bad_id).details["node"] == "Not-An-Id"

    def bad_default() -> flow.Outputs:
        flow.input("n", int, default="x")
        return None

    assert _refused(bad_default).details == {"field": "input.n.default"}


def test_builder_calls_outside_a_workflow_and_truth_values_are_refused() -> None:
    with pytest.raises(InvalidArgument, match=r"only valid inside a @flow\.workflow"):
        flow.call(double, x=1)

    def branch_in_python() -> flow.Outputs:
        n = flow.input("n", int)
        if n:  # a build-time decision about a run-time value
            flow.call(double, x=n)
        return None

    with pytest.raises(TypeError, match="no truth value"):
        flow.build(branch_in_python, "python_if")


def test_a_non_activity_is_refused() -> None:
    def body() -> flow.Outputs:
        flow.call(print, x=1)  # type: ignore[arg-type]
        return None

    assert _refused(body).details == {"field": "activity"}


class Order(TypedDict):
    id: str
    amount: float


def test_typed_dict_inputs_have_their_definitions_inlined() -> None:
    @flow.workflow("typed_inputs")
    def typed_inputs() -> flow.Outputs:
        orders = flow.input("orders", list[Order])
        flow.input("first", Order, default={"id": "a", "amount": 1.0})
        flow.call(format_text, template="{o}", o=orders)
        return None

    schema = typed_inputs.plan.input_schema
    order = {
        "title": "Order",
        "type": "object",
        "properties": {"amount": {"type": "number"}, "id": {"type": "string"}},
        "required": ["amount", "id"],
    }
    assert schema["properties"]["orders"] == {"type": "array", "items": order}
    assert schema["properties"]["first"] == {**order, "default": {"id": "a", "amount": 1.0}}
    assert "$defs" not in schema
    assert schema["required"] == ["orders"]
    assert instance_problems(schema, {"orders": [{"id": "x", "amount": 2.5}]}) == []
    assert instance_problems(schema, {"orders": [{"id": "x"}]}) != []


@activity(name="tagged")
def tagged(meta: Order) -> None:
    return None


def test_a_dollar_literal_is_checked_as_the_value_the_function_receives() -> None:
    def body() -> flow.Outputs:
        flow.call(tagged, meta={"id": "a", "amount": 1.0, "$note": "x"})
        return None

    built = flow.build(body, "dollar_literal")
    assert built.plan.nodes[0].args == {  # type: ignore[union-attr]
        "meta": {"$literal": {"id": "a", "amount": 1.0, "$note": "x"}}
    }

    def wrong() -> flow.Outputs:
        flow.call(tagged, meta={"id": "a", "$note": "x"})
        return None

    assert _refused(wrong).details == {"node": "tagged", "field": "args.meta"}


def test_a_retry_policy_may_be_written_as_its_json_form_and_is_checked() -> None:
    @flow.workflow("retry_dict")
    def retry_dict() -> flow.Outputs:
        flow.call(double, x=1, retry={"max_attempts": 5})
        return None

    node = retry_dict.plan.nodes[0]
    assert node.retry == RetryPolicy(max_attempts=5)

    with pytest.raises(InvalidArgument, match="retry"):

        @flow.workflow("retry_bad")
        def retry_bad() -> flow.Outputs:
            flow.call(double, x=1, retry={"max_attempts": "many"})
            return None
