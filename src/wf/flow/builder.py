"""The builder: a workflow function run once, its calls recorded as plan nodes.

Theory of operation
-------------------
``@workflow("hello")`` runs the decorated function once, at decoration, with
a fresh builder current (a context variable). Inside it, :func:`input`
declares a run input (its JSON Schema comes from the Python type), and
:func:`call`, :func:`map`, :func:`interrupt`, :func:`timer` and :func:`when`
each append one node and return a reference to its output. The function
returns the output mapping. The result is a :class:`Flow`: the artifact id
and a :class:`~wf.wire.workflow.Plan` that went through
:func:`~wf.runtime.plan.plan_from_builtins`, so it is exactly the plan the
equivalent hand-written JSON decodes to, with the same content hash.

What comes from where:

* an activity node's ``activity_type``, ``idempotent``, ``retry`` and
  ``capabilities`` come from the ``@activity`` declaration; ``timeout_s``,
  ``priority`` and overrides are keyword options of :func:`call`;
* ``needs`` is derived: the nodes the arguments read, the ``after=`` nodes and
  the enclosing ``with flow.when(...)`` conditions, minus any that is already
  an ancestor of another (the fewest direct dependencies that order the same);
* node ids default to the activity name made id-safe (``_2``, ``_3`` ... when
  taken); pass ``id=`` to choose.

Every check that can run at build time does, and fails with
:class:`~wf.errors.InvalidArgument` naming the node and field: arguments
against the activity function's signature (unknown, positional-only or
missing parameters), literal arguments against the parameter's annotation
where msgspec can convert to it, then the whole plan through
:func:`~wf.runtime.plan.validate_plan`.
"""

from __future__ import annotations

import contextvars
import inspect
import re
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, TypeVar, overload

import msgspec

from wf.errors import InvalidArgument
from wf.flow.refs import Expr, Input, Output, Ref, has_item, referenced_nodes, to_binding
from wf.runtime.plan import check_id, content_hash, plan_from_builtins
from wf.scheduler.model import Priority, RetryPolicy
from wf.scheduler.timer import AbsoluteInstant, DelaySpec, RelativeDelay
from wf.wire.workflow import (
    MAP_ITEMS_DEFAULT,
    ActivityNode,
    ConditionNode,
    InterruptNode,
    MapNode,
    Node,
    Plan,
    SkipWhen,
    TimerNode,
)
from wf.worker.activity import ActivityDefinition, TypedActivity

T = TypeVar("T")
R = TypeVar("R")

Outputs = Mapping[str, object] | None
"""What a workflow function returns: output name to reference or JSON value."""


class TimerFired(typing.TypedDict):
    """A timer node's output."""

    fired_at: float
    due_at: float


class _Unset:
    """No default given."""


_UNSET: Final = _Unset()


# ---------------------------------------------------------------- builder


class _Builder:
    """The plan being built by one workflow function."""

    def __init__(self, artifact_id: str) -> None:
        self.artifact_id = artifact_id
        self.properties: dict[str, dict[str, Any]] = {}
        self.required: list[str] = []
        self.nodes: list[Node] = []
        self.ancestors: dict[str, frozenset[str]] = {}
        self.gates: list[str] = []

    def node_id(self, wanted: str | None, base: str) -> str:
        if wanted is not None:
            check_id(wanted, "node id", node=wanted)
            if wanted in self.ancestors:
                raise InvalidArgument(f"duplicate node id {wanted!r}", node=wanted, field="id")
            return wanted
        stem = re.sub(r"[^a-z0-9_]", "_", base.lower()).strip("_")[:58] or "node"
        candidate, n = stem, 2
        while candidate in self.ancestors:
            candidate, n = f"{stem}_{n}", n + 1
        return candidate

    def needs(self, node: str, after: Sequence[Ref[Any]], reads: Iterable[str]) -> tuple[str, ...]:
        """The fewest direct needs ordering ``node`` after everything it must follow."""
        wanted: list[str] = list(self.gates)
        for i, ref in enumerate(after):
            if not isinstance(ref, Output):
                raise InvalidArgument(
                    f"node {node!r}: after[{i}] must be a node's output, not {ref!r}",
                    node=node,
                    field="needs",
                )
            wanted.append(ref.node)
        wanted.extend(reads)
        candidates = list(dict.fromkeys(wanted))
        for other in candidates:
            if other not in self.ancestors:
                raise InvalidArgument(
                    f"node {node!r} reads node {other!r}, which this flow has not built "
                    "(a reference from another flow?)",
                    node=node,
                    field="needs",
                )
        needs = tuple(
            c for c in candidates if not any(c in self.ancestors[o] for o in candidates if o != c)
        )
        closure: set[str] = set(candidates)
        for c in candidates:
            closure |= self.ancestors[c]
        self.ancestors[node] = frozenset(closure)
        return needs


_current: Final[contextvars.ContextVar[_Builder]] = contextvars.ContextVar("wf_flow_builder")


def _builder(what: str) -> _Builder:
    try:
        return _current.get()
    except LookupError:
        raise InvalidArgument(
            f"flow.{what}() is only valid inside a @flow.workflow function"
        ) from None


# ----------------------------------------------------------------- inputs


@overload
def input(
    name: str,
    type_: type[T],
    /,
    *,
    default: Any = _UNSET,
    description: str | None = None,
) -> Input[T]: ...
@overload
def input(
    name: str,
    /,
    *,
    schema: Mapping[str, Any],
    default: Any = _UNSET,
    description: str | None = None,
) -> Input[Any]: ...
def input(
    name: str,
    type_: Any = None,
    /,
    *,
    schema: Mapping[str, Any] | None = None,
    default: Any = _UNSET,
    description: str | None = None,
) -> Input[Any]:
    """Declare the run input ``name``: its JSON Schema comes from ``type_`` (or is
    ``schema``); with a ``default`` it is optional, else required."""
    b = _builder("input")
    if not isinstance(name, str) or not name or name.startswith("$"):
        raise InvalidArgument(f"input name {name!r} must be a non-empty string", field="input")
    if name in b.properties:
        raise InvalidArgument(f"input {name!r} is declared twice", field=f"input.{name}")
    if (type_ is None) == (schema is None):
        raise InvalidArgument(f"input {name!r}: give a type or a schema", field=f"input.{name}")
    if schema is not None:
        prop = dict(schema)
    else:
        try:
            prop = msgspec.json.schema(type_)
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(
                f"input {name!r}: no JSON Schema for {type_!r} ({exc}); pass schema=",
                field=f"input.{name}",
            ) from None
    if "$defs" in prop:
        prop = _inline_defs(prop, name)
    if description is not None:
        prop["description"] = description
    if not isinstance(default, _Unset):
        if type_ is not None:
            try:
                msgspec.convert(default, type_)
            except (msgspec.ValidationError, TypeError) as exc:
                raise InvalidArgument(
                    f"the default of input {name!r} does not fit {type_!r}: {exc}",
                    field=f"input.{name}.default",
                ) from None
        prop["default"] = msgspec.to_builtins(default)
    else:
        b.required.append(name)
    b.properties[name] = prop
    return Input(name)


def _inline_defs(schema: dict[str, Any], name: str) -> dict[str, Any]:
    """``schema`` with msgspec's ``{"$ref": "#/$defs/X"}`` replaced by the definitions.

    msgspec names struct and TypedDict schemas in ``$defs``; a ``#/...`` reference
    resolves against the root of the document, which for a property is the whole input
    schema, and an input's default is checked against its property alone: inlined, the
    property stands on its own. A recursive type cannot be inlined (pass ``schema=``).
    """
    defs: dict[str, Any] = schema.pop("$defs")

    def inline(value: Any, seen: tuple[str, ...]) -> Any:
        if isinstance(value, list):
            return [inline(v, seen) for v in value]
        if not isinstance(value, dict):
            return value
        ref = value.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            key = ref.removeprefix("#/$defs/")
            if key in seen or key not in defs:
                raise InvalidArgument(
                    f"input {name!r}: the type {key!r} refers to itself; pass schema=",
                    field=f"input.{name}",
                )
            rest = {k: v for k, v in value.items() if k != "$ref"}
            return {**inline(defs[key], (*seen, key)), **inline(rest, seen)}
        return {k: inline(v, seen) for k, v in value.items()}

    inlined: dict[str, Any] = inline(schema, ())
    return inlined


# ------------------------------------------------------------------ nodes


@overload
def call(
    activity: TypedActivity[..., Awaitable[R]],
    /,
    *,
    id: str | None = None,
    after: Sequence[Ref[Any]] = (),
    skip_when: SkipWhen = "any_skipped",
    timeout_s: float | None = None,
    retry: RetryPolicy | Mapping[str, Any] | None = None,
    priority: Priority | None = None,
    capabilities: Iterable[str] = (),
    idempotent: bool | None = None,
    args: Mapping[str, object] | None = None,
    **kwargs: object,
) -> Output[R]: ...
@overload
def call(
    activity: TypedActivity[..., R],
    /,
    *,
    id: str | None = None,
    after: Sequence[Ref[Any]] = (),
    skip_when: SkipWhen = "any_skipped",
    timeout_s: float | None = None,
    retry: RetryPolicy | Mapping[str, Any] | None = None,
    priority: Priority | None = None,
    capabilities: Iterable[str] = (),
    idempotent: bool | None = None,
    args: Mapping[str, object] | None = None,
    **kwargs: object,
) -> Output[R]: ...
@overload
def call(
    activity: ActivityDefinition,
    /,
    *,
    id: str | None = None,
    after: Sequence[Ref[Any]] = (),
    skip_when: SkipWhen = "any_skipped",
    timeout_s: float | None = None,
    retry: RetryPolicy | Mapping[str, Any] | None = None,
    priority: Priority | None = None,
    capabilities: Iterable[str] = (),
    idempotent: bool | None = None,
    args: Mapping[str, object] | None = None,
    **kwargs: object,
) -> Output[Any]: ...
def call(
    activity: ActivityDefinition,
    /,
    *,
    id: str | None = None,
    after: Sequence[Ref[Any]] = (),
    skip_when: SkipWhen = "any_skipped",
    timeout_s: float | None = None,
    retry: RetryPolicy | Mapping[str, Any] | None = None,
    priority: Priority | None = None,
    capabilities: Iterable[str] = (),
    idempotent: bool | None = None,
    args: Mapping[str, object] | None = None,
    **kwargs: object,
) -> Output[Any]:
    """An activity node running ``activity`` with these keyword arguments.

    Arguments are references (``flow.input(...)``, another node's output or a path
    in it) or JSON values, nested freely. An activity parameter named like one of
    the options (``id``, ``after``, ``args`` ...) is bound through ``args={...}``.
    ``retry``, ``idempotent`` and ``capabilities`` default to the declaration's
    (capabilities add to it); ``after`` adds ordering without reading an output.
    """
    b = _builder("call")
    node = b.node_id(id, _require_activity(activity).name)
    bound = _arguments(activity, node, args, kwargs, allow_item=False)
    needs = b.needs(node, after, referenced_nodes(list(bound.values())))
    b.nodes.append(
        _node(
            ActivityNode,
            id=node,
            activity_type=activity.name,
            args=_bindings(bound, node),
            needs=needs,
            skip_when=skip_when,
            capabilities=activity.capabilities | frozenset(capabilities),
            priority=priority,
            retry=_retry(activity, retry),
            timeout_s=timeout_s,
            idempotent=activity.idempotent if idempotent is None else idempotent,
        )
    )
    return Output(node)


@overload
def map(
    activity: TypedActivity[..., Awaitable[R]],
    /,
    items: Input[Sequence[Any]] | Output[Sequence[Any]],
    *,
    id: str | None = None,
    after: Sequence[Ref[Any]] = (),
    skip_when: SkipWhen = "any_skipped",
    max_items: int = MAP_ITEMS_DEFAULT,
    concurrency: int | None = None,
    timeout_s: float | None = None,
    retry: RetryPolicy | Mapping[str, Any] | None = None,
    priority: Priority | None = None,
    capabilities: Iterable[str] = (),
    idempotent: bool | None = None,
    args: Mapping[str, object] | None = None,
    **kwargs: object,
) -> Output[list[R]]: ...
@overload
def map(
    activity: TypedActivity[..., R],
    /,
    items: Input[Sequence[Any]] | Output[Sequence[Any]],
    *,
    id: str | None = None,
    after: Sequence[Ref[Any]] = (),
    skip_when: SkipWhen = "any_skipped",
    max_items: int = MAP_ITEMS_DEFAULT,
    concurrency: int | None = None,
    timeout_s: float | None = None,
    retry: RetryPolicy | Mapping[str, Any] | None = None,
    priority: Priority | None = None,
    capabilities: Iterable[str] = (),
    idempotent: bool | None = None,
    args: Mapping[str, object] | None = None,
    **kwargs: object,
) -> Output[list[R]]: ...
@overload
def map(
    activity: ActivityDefinition,
    /,
    items: Input[Sequence[Any]] | Output[Sequence[Any]],
    *,
    id: str | None = None,
    after: Sequence[Ref[Any]] = (),
    skip_when: SkipWhen = "any_skipped",
    max_items: int = MAP_ITEMS_DEFAULT,
    concurrency: int | None = None,
    timeout_s: float | None = None,
    retry: RetryPolicy | Mapping[str, Any] | None = None,
    priority: Priority | None = None,
    capabilities: Iterable[str] = (),
    idempotent: bool | None = None,
    args: Mapping[str, object] | None = None,
    **kwargs: object,
) -> Output[list[Any]]: ...
def map(
    activity: ActivityDefinition,
    /,
    items: Input[Sequence[Any]] | Output[Sequence[Any]],
    *,
    id: str | None = None,
    after: Sequence[Ref[Any]] = (),
    skip_when: SkipWhen = "any_skipped",
    max_items: int = MAP_ITEMS_DEFAULT,
    concurrency: int | None = None,
    timeout_s: float | None = None,
    retry: RetryPolicy | Mapping[str, Any] | None = None,
    priority: Priority | None = None,
    capabilities: Iterable[str] = (),
    idempotent: bool | None = None,
    args: Mapping[str, object] | None = None,
    **kwargs: object,
) -> Output[list[Any]]:
    """A map node: ``activity`` once per element of ``items`` (at most ``max_items``,
    ``concurrency`` at a time); its output is the results in order. Arguments may
    read ``flow.item`` (the current element, or a path in it)."""
    b = _builder("map")
    node = b.node_id(id, _require_activity(activity).name)
    if not isinstance(items, Input | Output):
        raise InvalidArgument(
            f"node {node!r}: items must be an input or a node's output, not {items!r}",
            node=node,
            field="items",
        )
    bound = _arguments(activity, node, args, kwargs, allow_item=True)
    reads = referenced_nodes([items, *bound.values()])
    needs = b.needs(node, after, reads)
    b.nodes.append(
        _node(
            MapNode,
            id=node,
            activity_type=activity.name,
            items=items.binding(),
            args=_bindings(bound, node),
            max_items=max_items,
            concurrency=concurrency,
            needs=needs,
            skip_when=skip_when,
            capabilities=activity.capabilities | frozenset(capabilities),
            priority=priority,
            retry=_retry(activity, retry),
            timeout_s=timeout_s,
            idempotent=activity.idempotent if idempotent is None else idempotent,
        )
    )
    return Output(node)


@overload
def interrupt(
    prompt: str,
    *,
    schema: type[T],
    id: str | None = None,
    after: Sequence[Ref[Any]] = (),
    skip_when: SkipWhen = "any_skipped",
) -> Output[T]: ...
@overload
def interrupt(
    prompt: str,
    *,
    schema: Mapping[str, Any] | None = None,
    id: str | None = None,
    after: Sequence[Ref[Any]] = (),
    skip_when: SkipWhen = "any_skipped",
) -> Output[Any]: ...
def interrupt(
    prompt: str,
    *,
    schema: Any = None,
    id: str | None = None,
    after: Sequence[Ref[Any]] = (),
    skip_when: SkipWhen = "any_skipped",
) -> Output[Any]:
    """An interrupt node: the run waits for an answer (``resume_run``) that fits
    ``schema`` (a Python type or a JSON Schema; default: any object)."""
    b = _builder("interrupt")
    node = b.node_id(id, "interrupt")
    needs = b.needs(node, after, ())
    if schema is None:
        answer: dict[str, Any] = {"type": "object"}
    elif isinstance(schema, Mapping):
        answer = dict(schema)
    else:
        answer = msgspec.json.schema(schema)
    b.nodes.append(
        _node(
            InterruptNode,
            id=node,
            prompt=prompt,
            needs=needs,
            skip_when=skip_when,
            input_schema=answer,
        )
    )
    return Output(node)


def timer(
    delay: float | timedelta | datetime | DelaySpec,
    *,
    id: str | None = None,
    after: Sequence[Ref[Any]] = (),
    skip_when: SkipWhen = "any_skipped",
) -> Output[TimerFired]:
    """A timer node: seconds or a ``timedelta`` from when it becomes ready, an aware
    ``datetime``, or any delay spec (zoned wall time, cron calendar)."""
    b = _builder("timer")
    node = b.node_id(id, "timer")
    spec: DelaySpec
    if isinstance(delay, timedelta):
        spec = RelativeDelay(seconds=delay.total_seconds())
    elif isinstance(delay, datetime):
        spec = AbsoluteInstant(at=delay)
    elif isinstance(delay, bool):
        raise InvalidArgument(f"timer delay must be seconds or a delay spec, not {delay!r}")
    elif isinstance(delay, int | float):
        spec = RelativeDelay(seconds=float(delay))
    else:
        spec = delay
    needs = b.needs(node, after, ())
    b.nodes.append(_node(TimerNode, id=node, delay=spec, needs=needs, skip_when=skip_when))
    return Output(node)


class Condition(Output[bool]):
    """A condition node's output; ``with`` it, nodes built inside run only when it held
    (they need it, so they are skipped when it did not)."""

    __slots__ = ()

    def __enter__(self) -> Condition:
        _builder("when").gates.append(self.node)
        return self

    def __exit__(self, *exc: object) -> None:
        gates = _builder("when").gates
        if gates and gates[-1] == self.node:
            gates.pop()


def when(
    expr: Expr,
    *,
    id: str | None = None,
    after: Sequence[Ref[Any]] = (),
    skip_when: SkipWhen = "any_skipped",
) -> Condition:
    """A condition node evaluating ``expr``; nodes that need it (``after=[cond]``, or
    built in ``with cond:``) are skipped when it is false."""
    b = _builder("when")
    node = b.node_id(id, "when")
    if not isinstance(expr, Expr):
        raise InvalidArgument(
            f"node {node!r}: when takes an expression (flow.eq, a > b, ...), not {expr!r}",
            node=node,
            field="when",
        )
    needs = b.needs(node, after, expr.nodes())
    b.nodes.append(
        _node(ConditionNode, id=node, when=expr.to_json(), needs=needs, skip_when=skip_when)
    )
    return Condition(node)


# ------------------------------------------------------------- arguments


N = TypeVar("N", bound=msgspec.Struct)


def _node(cls: type[N], **fields: Any) -> N:
    """``cls(**fields)`` without the fields equal to their default: the canonical JSON
    omits a default only when it is the default object itself, and a hand-written plan
    that leaves a field out must hash the same as the built one."""
    given = {}
    for info in msgspec.structs.fields(cls):
        if info.name not in fields:
            continue
        value = fields[info.name]
        if info.default is not msgspec.NODEFAULT:
            default = info.default
        elif info.default_factory is not msgspec.NODEFAULT:
            default = info.default_factory()
        else:
            given[info.name] = value
            continue
        if value != default:
            given[info.name] = value
    return cls(**given)


def _require_activity(activity: object) -> ActivityDefinition:
    if not isinstance(activity, ActivityDefinition):
        raise InvalidArgument(
            f"flow.call and flow.map take an @activity function, not {activity!r}",
            field="activity",
        )
    return activity


def _retry(
    activity: ActivityDefinition, retry: RetryPolicy | Mapping[str, Any] | None
) -> RetryPolicy:
    policy = retry if retry is not None else activity.retry
    if policy is None:
        return RetryPolicy()
    if isinstance(policy, Mapping):
        # The JSON form a plan document uses is accepted too, checked as the wire checks it.
        try:
            policy = msgspec.convert(dict(policy), RetryPolicy, strict=True)
        except msgspec.ValidationError as exc:
            raise InvalidArgument(f"retry: {exc}", field="retry") from None
    # Rebuilt without the fields equal to their defaults, so that
    # RetryPolicy(max_attempts=5, initial_backoff_s=1.0) is written {"max_attempts": 5}.
    return _node(RetryPolicy, **{f: getattr(policy, f) for f in policy.__struct_fields__})


def _arguments(
    activity: ActivityDefinition,
    node: str,
    args: Mapping[str, object] | None,
    kwargs: Mapping[str, object],
    *,
    allow_item: bool,
) -> dict[str, object]:
    bound = dict(args or {})
    for name, value in kwargs.items():
        if name in bound:
            raise InvalidArgument(
                f"node {node!r}: argument {name!r} is given twice", node=node, field=f"args.{name}"
            )
        bound[name] = value
    if not allow_item:
        for name, value in bound.items():
            if has_item(value):
                raise InvalidArgument(
                    f"node {node!r}: argument {name!r} reads flow.item, which only "
                    "flow.map arguments may",
                    node=node,
                    field=f"args.{name}",
                )
    check_signature(activity, node, bound)
    return bound


def _bindings(bound: Mapping[str, object], node: str) -> dict[str, Any]:
    return {name: to_binding(v, where=f"args.{name}", node=node) for name, v in bound.items()}


def check_signature(activity: ActivityDefinition, node: str, bound: Mapping[str, object]) -> None:
    """Refuse arguments the activity function cannot take by name, a parameter without
    a default left unbound, and a literal that does not fit its parameter's type."""
    try:
        signature = inspect.signature(activity.fn)
    except (TypeError, ValueError):
        return  # a builtin or C function: nothing to check against
    params = signature.parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    named = [
        p.name
        for p in params.values()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]
    where = f"node {node!r}: activity {activity.name!r}"
    for name in bound:
        param = params.get(name)
        if param is not None and param.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise InvalidArgument(
                f"{where}: parameter {name!r} is positional-only, and a plan passes "
                "arguments by name",
                node=node,
                field=f"args.{name}",
            )
        if name not in named and not takes_any:
            raise InvalidArgument(
                f"{where} has no parameter {name!r} (it takes: {', '.join(named) or 'none'})",
                node=node,
                field=f"args.{name}",
            )
    for param in params.values():
        if param.default is not inspect.Parameter.empty or param.name in bound:
            continue
        if param.kind in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.KEYWORD_ONLY,
        ):
            raise InvalidArgument(
                f"{where}: parameter {param.name!r} has no default and the node does not bind it",
                node=node,
                field=f"args.{param.name}",
            )
    _check_literals(activity, node, bound, where)


def _check_literals(
    activity: ActivityDefinition, node: str, bound: Mapping[str, object], where: str
) -> None:
    try:
        hints = typing.get_type_hints(activity.fn)
    except Exception:  # unresolvable annotations: nothing to check
        return
    for name, value in bound.items():
        hint = hints.get(name)
        if hint is None or _reads_ref(value):
            continue
        try:
            literal = to_binding(value, where=f"args.{name}", node=node)
            if isinstance(literal, dict) and set(literal) == {"$literal"}:
                literal = literal["$literal"]  # what the function receives
            msgspec.convert(literal, hint)
        except msgspec.ValidationError as exc:
            raise InvalidArgument(
                f"{where}: argument {name!r} = {value!r} does not fit the parameter's type: {exc}",
                node=node,
                field=f"args.{name}",
            ) from None
        except (TypeError, ValueError):
            continue  # a type msgspec cannot convert to: not checked


def _reads_ref(value: object) -> bool:
    """Whether an argument holds any reference (its value is known only at run time)."""
    if isinstance(value, Ref | Expr):
        return True
    if isinstance(value, list | tuple):
        return any(_reads_ref(v) for v in value)
    if isinstance(value, dict):
        return any(_reads_ref(v) for v in value.values())
    return False


# ------------------------------------------------------------------- flows


@dataclass(frozen=True, slots=True)
class Flow:
    """A built workflow: its artifact id and its validated plan."""

    artifact_id: str
    """The artifact id ``wf deploy`` publishes it under."""
    plan: Plan
    """The plan, as :func:`~wf.runtime.plan.plan_from_builtins` decodes its JSON."""

    @property
    def content_hash(self) -> str:
        """``sha256:<hex>`` of the plan's canonical JSON (what the server stores)."""
        return content_hash(self.plan)

    def to_builtins(self) -> dict[str, Any]:
        """The plan as JSON-ready builtins (what ``wf artifacts create`` takes)."""
        # Through JSON, not to_builtins: that keeps tuples, which are no JSON values.
        data: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(self.plan))
        return data


def build(fn: Callable[[], Outputs], artifact_id: str) -> Flow:
    """Run the workflow function ``fn`` with a fresh builder and return its flow."""
    check_id(artifact_id, "artifact id", field="artifact_id")
    b = _Builder(artifact_id)
    token = _current.set(b)
    try:
        returned = fn()
    finally:
        _current.reset(token)
    if returned is not None and not isinstance(returned, Mapping):
        raise InvalidArgument(
            f"workflow {artifact_id!r} must return a mapping of outputs (or None), "
            f"not {type(returned).__name__}",
            field="output",
        )
    output = {
        str(name): to_binding(value, where=f"output.{name}")
        for name, value in (returned or {}).items()
    }
    schema: dict[str, Any] = {"type": "object", "properties": b.properties}
    if not b.properties:
        del schema["properties"]
    if b.required:
        schema["required"] = b.required
    draft = Plan(nodes=b.nodes, input_schema=schema, output=output)
    return Flow(artifact_id, plan_from_builtins(msgspec.to_builtins(draft)))


@overload
def workflow(fn: Callable[[], Outputs], /) -> Flow: ...
@overload
def workflow(artifact_id: str | None = None, /) -> Callable[[Callable[[], Outputs]], Flow]: ...
def workflow(
    target: Callable[[], Outputs] | str | None = None, /
) -> Flow | Callable[[Callable[[], Outputs]], Flow]:
    """Build a :class:`Flow` from a workflow function, at decoration:
    ``@flow.workflow`` (artifact id: the function's name) or ``@flow.workflow("id")``."""
    if callable(target):
        return build(target, target.__name__)

    def decorate(fn: Callable[[], Outputs]) -> Flow:
        return build(fn, target if target is not None else fn.__name__)

    return decorate
