"""References and expressions: the Python side of a plan's bindings.

A :class:`Ref` stands for a value a run will have: a run input
(:class:`Input`), a node's output or a path into it (:class:`Output`), or
the current item of a map node (:class:`Item`). Each knows the JSON binding
it becomes (``{"$input": ...}``, ``{"$node": ..., "path": ...}``,
``{"$item": ...}``) and the nodes it reads, from which the builder derives
``needs``. Indexing an :class:`Output` or :class:`Item` makes a path
(``a["value"]``, ``a["items"][0]``), typed through the declared value type
where mypy can follow it: ``Output[dict[str, int]]["x"]`` is an
``Output[int]``, ``Output[list[T]][0]`` an ``Output[T]``, a TypedDict's field an
``Output[object]``, and a key into a value that is neither a mapping nor a
sequence is a type error (``Output[Any]`` takes any key).

An :class:`Expr` is a condition node's ``when`` (:mod:`wf.runtime.expr`),
built with :func:`eq`, :func:`ne`, :func:`contains`, :func:`exists`, the
ordering operators on references (``a["n"] > 3``) and ``&``, ``|``, ``~``.
``==`` is deliberately not overloaded: it keeps its Python meaning.

:func:`to_binding` turns a Python argument (references, JSON literals,
lists and dicts of both) into the binding JSON; a literal dict with a ``$``
key is written as ``{"$literal": ...}`` so it never reads as a reference.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Generic, TypeVar, overload

from wf.errors import InvalidArgument

T_co = TypeVar("T_co", covariant=True)
V = TypeVar("V")


class Ref(Generic[T_co]):
    """A value a run will have; ``T_co`` is its declared Python type."""

    __slots__ = ()

    def binding(self) -> dict[str, Any]:
        """The JSON binding this reference is written as."""
        raise NotImplementedError

    def nodes(self) -> tuple[str, ...]:
        """The node ids whose outputs it reads."""
        return ()

    # Ordering operators build condition expressions (``==`` keeps its meaning).
    def __lt__(self, other: object) -> Expr:
        return Expr.compare("lt", self, other)

    def __le__(self, other: object) -> Expr:
        return Expr.compare("le", self, other)

    def __gt__(self, other: object) -> Expr:
        return Expr.compare("gt", self, other)

    def __ge__(self, other: object) -> Expr:
        return Expr.compare("ge", self, other)

    def __bool__(self) -> bool:
        # ``if ref:`` in a workflow body would decide at build time, not at run time.
        raise TypeError(
            "a wf.flow reference has no truth value while the plan is built; "
            "use flow.when(...) to branch at run time"
        )


class Input(Ref[T_co]):
    """A run input, ``{"$input": name}`` (inputs take no path)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def binding(self) -> dict[str, Any]:
        return {"$input": self.name}

    def __repr__(self) -> str:
        return f"Input({self.name!r})"


class Output(Ref[T_co]):
    """A node's output, or the value at a path in it: ``{"$node": id, "path": "a.0"}``."""

    __slots__ = ("node", "path")

    def __init__(self, node: str, path: tuple[str, ...] = ()) -> None:
        self.node = node
        self.path = path

    def binding(self) -> dict[str, Any]:
        if not self.path:
            return {"$node": self.node}
        return {"$node": self.node, "path": ".".join(self.path)}

    def nodes(self) -> tuple[str, ...]:
        return (self.node,)

    @overload
    def __getitem__(self: Output[Mapping[str, V]], key: str) -> Output[V]: ...
    @overload
    def __getitem__(self: Output[Sequence[V]], key: int) -> Output[V]: ...
    def __getitem__(self, key: str | int) -> Output[Any]:
        return Output(self.node, (*self.path, _segment(key)))

    def __repr__(self) -> str:
        return f"Output({self.node!r}, {'.'.join(self.path)!r})"


class Item(Ref[T_co]):
    """The current item of a map node, or a path in it: ``{"$item": "a.b"}``."""

    __slots__ = ("path",)

    def __init__(self, path: tuple[str, ...] = ()) -> None:
        self.path = path

    def binding(self) -> dict[str, Any]:
        return {"$item": ".".join(self.path)}

    @overload
    def __getitem__(self: Item[Mapping[str, V]], key: str) -> Item[V]: ...
    @overload
    def __getitem__(self: Item[Sequence[V]], key: int) -> Item[V]: ...
    def __getitem__(self, key: str | int) -> Item[Any]:
        return Item((*self.path, _segment(key)))

    def __repr__(self) -> str:
        return f"Item({'.'.join(self.path)!r})"


item: Item[Any] = Item()
"""The current item of a map node (``flow.item["name"]`` for a path in it)."""


def _segment(key: object) -> str:
    if isinstance(key, bool) or not isinstance(key, str | int):
        raise InvalidArgument(f"a path segment is a str or an int, not {type(key).__name__}")
    if isinstance(key, int):
        if key < 0:
            raise InvalidArgument(f"a path index must be >= 0, got {key}")
        return str(key)
    if not key or "." in key:
        raise InvalidArgument(f"a path key must be non-empty and hold no '.', got {key!r}")
    return key


# ------------------------------------------------------------ expressions


class Expr:
    """A condition expression (``{"op": ..., "args": [...]}``); combine with ``&``, ``|``, ``~``."""

    __slots__ = ("args", "op")

    def __init__(self, op: str, args: tuple[object, ...]) -> None:
        self.op = op
        self.args = args

    @staticmethod
    def compare(op: str, left: object, right: object) -> Expr:
        """A two-operand comparison (``eq``, ``ne``, ``lt``, ``le``, ``gt``, ``ge``, ``in``)."""
        return Expr(op, (left, right))

    def to_json(self) -> dict[str, Any]:
        """The expression as a condition node's ``when``."""
        if self.op in ("and", "or", "not"):
            subs = [_expr(a).to_json() for a in self.args]
            return {"op": self.op, "args": subs}
        return {"op": self.op, "args": [to_binding(a, where="when") for a in self.args]}

    def nodes(self) -> tuple[str, ...]:
        """The node ids its operands read."""
        found: list[str] = []
        for arg in self.args:
            found.extend(arg.nodes() if isinstance(arg, Expr) else referenced_nodes(arg))
        return tuple(dict.fromkeys(found))

    def __and__(self, other: Expr) -> Expr:
        return all_of(self, other)

    def __or__(self, other: Expr) -> Expr:
        return any_of(self, other)

    def __invert__(self) -> Expr:
        return Expr("not", (self,))

    def __bool__(self) -> bool:
        raise TypeError(
            "a wf.flow expression has no truth value while the plan is built "
            "(use &, | and ~, not and/or/not)"
        )

    def __repr__(self) -> str:
        return f"Expr({self.to_json()!r})"


def _expr(value: object) -> Expr:
    if not isinstance(value, Expr):
        raise InvalidArgument(f"and/or/not take expressions, not {type(value).__name__}")
    return value


def eq(left: object, right: object) -> Expr:
    """``left`` equals ``right`` (JSON equality: ``true`` is not ``1``)."""
    return Expr.compare("eq", left, right)


def ne(left: object, right: object) -> Expr:
    """``left`` differs from ``right``."""
    return Expr.compare("ne", left, right)


def contains(collection: object, element: object) -> Expr:
    """``element`` is in ``collection`` (an array's element, an object's key, a substring)."""
    return Expr.compare("in", element, collection)


def exists(ref: Input[Any] | Output[Any]) -> Expr:
    """The input is set, or the node ran (was not skipped) and has the path."""
    return Expr("exists", (ref,))


def all_of(*exprs: Expr) -> Expr:
    """Every expression holds (``and``; ``a & b`` too)."""
    return Expr("and", tuple(_expr(e) for e in exprs))


def any_of(*exprs: Expr) -> Expr:
    """At least one expression holds (``or``; ``a | b`` too)."""
    return Expr("or", tuple(_expr(e) for e in exprs))


def not_(expr: Expr) -> Expr:
    """The expression does not hold (``not``; ``~expr`` too)."""
    return Expr("not", (_expr(expr),))


# --------------------------------------------------------------- bindings


def to_binding(value: object, *, where: str, node: str | None = None) -> Any:
    """The binding JSON of a Python argument: references become ``$`` objects,
    JSON literals stay (tuples become arrays); anything else is refused."""
    return _bind(value, where, node, 0)


def _bind(value: object, where: str, node: str | None, depth: int) -> Any:
    if depth > 32:
        raise InvalidArgument(f"binding {where} nests too deep", node=node, field=where)
    if isinstance(value, Ref):
        return value.binding()
    if isinstance(value, Expr):
        raise InvalidArgument(
            f"binding {where} is an expression: pass it to flow.when(...)", node=node, field=where
        )
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidArgument(f"binding {where} is {value!r}, not JSON", node=node, field=where)
        return value
    if isinstance(value, list | tuple):
        return [_bind(v, f"{where}[{i}]", node, depth + 1) for i, v in enumerate(value)]
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise InvalidArgument(
                    f"binding {where} has a non-string key {key!r}", node=node, field=where
                )
        if any(k.startswith("$") for k in value):
            if referenced_nodes(value) or _has_ref(value):
                raise InvalidArgument(
                    f"binding {where} mixes '$' keys with references", node=node, field=where
                )
            return {"$literal": _bind_plain(value, where, node)}
        return {k: _bind(v, f"{where}.{k}", node, depth + 1) for k, v in value.items()}
    raise InvalidArgument(
        f"binding {where} is a {type(value).__name__}: pass a reference or a JSON value",
        node=node,
        field=where,
    )


def _bind_plain(value: Mapping[str, Any], where: str, node: str | None) -> Any:
    # A literal object holding '$' keys: its values are literals too (checked as JSON).
    return {k: _bind(v, f"{where}.{k}", node, 1) for k, v in value.items()}


def _has_ref(value: object) -> bool:
    if isinstance(value, Ref | Expr):
        return True
    if isinstance(value, list | tuple):
        return any(_has_ref(v) for v in value)
    if isinstance(value, dict):
        return any(_has_ref(v) for v in value.values())
    return False


def referenced_nodes(value: object) -> tuple[str, ...]:
    """The node ids a Python argument's references read, in order of appearance."""
    found: list[str] = []
    stack: list[object] = [value]
    while stack:
        current = stack.pop()
        if isinstance(current, Ref | Expr):
            found.extend(current.nodes())
        elif isinstance(current, list | tuple):
            stack.extend(reversed(current))
        elif isinstance(current, dict):
            stack.extend(reversed(list(current.values())))
    return tuple(dict.fromkeys(found))


def has_item(value: object) -> bool:
    """Whether a Python argument reads the current map item."""
    if isinstance(value, Item):
        return True
    if isinstance(value, list | tuple):
        return any(has_item(v) for v in value)
    if isinstance(value, dict):
        return any(has_item(v) for v in value.values())
    return False
