"""Condition expressions: a small, safe, total and deterministic language in JSON.

Theory of operation
-------------------
A condition node's ``when`` is an expression, a JSON object
``{"op": OP, "args": [...]}``; nothing is ever handed to ``eval``:

* ``eq``, ``ne``: JSON equality of two operands (``true`` is not ``1``;
  ``1`` is ``1.0``; objects compare by keys and values, arrays in order);
* ``lt``, ``le``, ``gt``, ``ge``: two numbers, or two strings (by code
  point); any other pair is simply false (no error, no coercion);
* ``in``: the first operand is an element of the second (an array, by JSON
  equality), a key of it (an object, the first being a string) or a
  substring of it (two strings); anything else is false;
* ``exists``: its one operand resolves (the input is set, the node was not
  skipped and the path exists in its output);
* ``and``, ``or``: one or more sub-expressions (evaluated left to right,
  short-circuit); ``not``: exactly one.

Operands are bindings (:mod:`wf.runtime.plan`): literals, ``{"$input":
...}``, ``{"$node": ..., "path": ...}`` and ``{"$literal": ...}``. An
operand that does not resolve reads as ``null`` (use ``exists`` to tell the
two apart), so evaluation never fails: every expression that passed
:func:`check_expression` yields ``true`` or ``false`` for any inputs and
outputs. Validation bounds the expression (:data:`EXPR_DEPTH_MAX`,
:data:`EXPR_OPS_MAX`), so hostile nesting is refused when the plan is
created, not met at run time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from wf.errors import InvalidArgument
from wf.wire.workflow import EXPRESSION_OPS

EXPR_DEPTH_MAX: Final = 16
"""Deepest nesting of ``and`` / ``or`` / ``not`` in one expression."""
EXPR_OPS_MAX: Final = 256
"""Most operators in one expression."""
COMPARE_OPS: Final = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "in"})
"""Operators over two operands."""
LOGIC_OPS: Final = frozenset({"and", "or", "not"})
"""Operators over sub-expressions."""
OPS: Final = EXPRESSION_OPS
"""Every operator (the plan's published JSON Schema lists the same)."""

Walk = Callable[[Any, str], None]
"""Checks one operand binding (``value``, ``where``); raises InvalidArgument."""


class _Missing:
    """An operand that did not resolve (reads as ``null`` except to ``exists``)."""


MISSING: Final = _Missing()
"""The value of an operand that does not resolve."""


def check_expression(expr: object, *, node: str, where: str, operand: Walk) -> int:
    """Refuse a malformed expression (InvalidArgument naming ``node`` and the field);
    ``operand`` checks each operand binding. Returns the number of operators."""
    count = [0]
    _check(expr, node, where, operand, 0, count)
    return count[0]


def _check(
    expr: object, node: str, where: str, operand: Walk, depth: int, count: list[int]
) -> None:
    if depth >= EXPR_DEPTH_MAX:
        raise _bad(f"expression {where} nests deeper than {EXPR_DEPTH_MAX}", node, where)
    count[0] += 1
    if count[0] > EXPR_OPS_MAX:
        raise _bad(f"expression has more than {EXPR_OPS_MAX} operators", node, where)
    if not isinstance(expr, dict) or "op" not in expr:
        raise _bad(
            f'expression {where} must be an object {{"op": ..., "args": [...]}}', node, where
        )
    extra = sorted(set(expr) - {"op", "args"})
    if extra:
        raise _bad(f"expression {where} does not take {extra}", node, where)
    op = expr["op"]
    if op not in OPS:
        raise _bad(
            f"expression {where} has unknown op {op!r}; ops are {', '.join(OPS)}", node, where
        )
    args = expr.get("args")
    if not isinstance(args, list):
        raise _bad(f"expression {where} ({op}) needs an args array", node, where)
    arity = {"not": (1, 1), "exists": (1, 1), "and": (1, None), "or": (1, None)}.get(op, (2, 2))
    low, high = arity
    if len(args) < low or (high is not None and len(args) > high):
        wanted = f"exactly {low}" if low == high else f"at least {low}"
        raise _bad(
            f"expression {where} ({op}) takes {wanted} argument(s), got {len(args)}", node, where
        )
    for i, arg in enumerate(args):
        at = f"{where}.args[{i}]"
        if op in LOGIC_OPS:
            _check(arg, node, at, operand, depth + 1, count)
        elif op == "exists":
            if not (isinstance(arg, dict) and ("$input" in arg or "$node" in arg)):
                raise _bad(f"expression {at}: exists takes a reference ($input or $node)", node, at)
            operand(arg, at)
        else:
            operand(arg, at)


def evaluate(expr: Mapping[str, Any], resolve: Callable[[Any], Any]) -> bool:
    """The value of a checked expression; ``resolve`` gives an operand's value, or
    :data:`MISSING` when it does not resolve."""
    op = expr["op"]
    args = expr["args"]
    if op == "and":
        return all(evaluate(a, resolve) for a in args)
    if op == "or":
        return any(evaluate(a, resolve) for a in args)
    if op == "not":
        return not evaluate(args[0], resolve)
    if op == "exists":
        return resolve(args[0]) is not MISSING
    left, right = (_plain(resolve(a)) for a in args)
    if op == "eq":
        return json_equal(left, right)
    if op == "ne":
        return not json_equal(left, right)
    if op == "in":
        return _contains(right, left)
    return _order(op, left, right)


def _plain(value: Any) -> Any:
    return None if value is MISSING else value


def _kind(value: Any) -> str:
    """The JSON type of ``value`` (bool before number: ``True`` is an int in Python)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "other"


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: same type, then same value (arrays in order, objects by key)."""
    # Iterative: the operands are run data, bounded by the wire's nesting limit, but
    # a comparison must never be the thing that hits Python's recursion limit.
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        kind = _kind(x)
        if kind != _kind(y):
            return False
        if kind == "array":
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y, strict=True))
        elif kind == "object":
            if x.keys() != y.keys():
                return False
            stack.extend((x[k], y[k]) for k in x)
        elif kind == "other" or x != y:
            return False
    return True


def _contains(haystack: Any, needle: Any) -> bool:
    kind = _kind(haystack)
    if kind == "array":
        return any(json_equal(item, needle) for item in haystack)
    if kind == "object":
        return isinstance(needle, str) and needle in haystack
    if kind == "string":
        return isinstance(needle, str) and needle in haystack
    return False


def _order(op: str, left: Any, right: Any) -> bool:
    kind = _kind(left)
    if kind != _kind(right) or kind not in ("number", "string"):
        return False
    if op == "lt":
        return bool(left < right)
    if op == "le":
        return bool(left <= right)
    if op == "gt":
        return bool(left > right)
    return bool(left >= right)


def _bad(message: str, node: str, field: str) -> InvalidArgument:
    return InvalidArgument(message, node=node, field=field)
