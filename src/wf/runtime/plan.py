"""Plans: the DAG an artifact holds, its validation, canonical form and hash.

Theory of operation
-------------------
A :class:`Plan` is data only: a list of nodes (a tagged union on ``kind``),
the JSON Schema of a run's inputs, and an output mapping. Nodes depend on
each other through ``needs`` (upstream node ids); an activity node's
``args`` and the plan's ``output`` are *bindings*, JSON values in which a
few one-key-family objects are references resolved when a run executes:

* ``{"$input": "name"}``: the run input ``name``;
* ``{"$node": "step1"}`` / ``{"$node": "step1", "path": "a.b"}``: the output
  of upstream node ``step1`` (optionally a dotted path into it);
* ``{"$literal": value}``: ``value`` as is (to write an object that would
  otherwise read as a reference);
* ``{"$item": "a.b"}``: in a map node's ``args`` only, the current item
  (``""``: the whole item) or a dotted path into it;
* anything else: itself, with objects and arrays resolved element-wise.

A reference to a node that was skipped (a branch not taken) reads as ``null``.
A condition node's ``when`` is an expression over bindings
(:mod:`wf.runtime.expr`); a map node's ``items`` is a reference to a list.

An object with a key starting with ``$`` that is none of these is refused,
so a typo never becomes a silent literal.

The structs themselves are part of the wire contract (:mod:`wf.wire.workflow`,
re-exported here): this module holds the rules, not the shapes.

:func:`plan_from_json` decodes (msgspec, unknown fields refused) and
:func:`validate_plan` checks everything the types cannot say: non-empty,
id format, unique ids, ``needs`` that exist, no cycle (the cycle is named),
references only to *upstream* nodes (a transitive ``needs`` ancestor, so a
run always has the value when the node becomes ready), valid JSON
Schemas, well-formed expressions and map bounds, and **bound inputs**: a
``$input`` outside a condition must name an input every run has (listed in
the schema's ``required`` or given a ``default``, whose value must fit its
property), so a run never fails mid-way on an optional input nobody passed.
Every refusal is an :class:`~wf.errors.InvalidArgument` whose details carry
``node`` and ``field``. These rules apply when a plan is *created*; a stored
artifact is decoded (:func:`decode_canonical`) and never re-validated, so one
accepted under older rules still loads and runs. :func:`check_activity_args`
checks ``args`` against the declared parameters of the activity types a
caller knows (:func:`params_of`).

The canonical form (:func:`canonical_plan`) is JSON with sorted keys and
default values omitted, so a field added later with a default keeps every
existing hash; :func:`content_hash` is ``sha256:`` + the hex digest of it.
The DAG engine (next step of issue 5) reads :func:`topological_order` and
:func:`resolve_binding`.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeAlias

import msgspec

from wf.errors import InvalidArgument, WfError
from wf.runtime.expr import MISSING, check_expression
from wf.runtime.schema import instance_problems, schema_problem
from wf.scheduler.timer import delay_spec_from_dict
from wf.wire.bounds import DURATION_MAX_S
from wf.wire.workflow import (
    MAP_ITEMS_MAX,
    NODES_MAX,
    PLAN_FORMAT,
    ActivityNode,
    ConditionNode,
    InterruptNode,
    MapNode,
    Node,
    Plan,
    TimerNode,
)

BINDING_DEPTH_MAX: Final = 32
"""Deepest nesting of objects and arrays inside one binding."""
ID_MAX: Final = 64
"""Longest node, artifact or deployment-name id."""
ID_RE: Final = re.compile(r"^[a-z0-9][a-z0-9_]{0,63}$")
"""Ids: lower-case ASCII letters, digits and ``_``, starting with a letter or digit,
at most 64 characters. No ``.``: a deployment id is ``<artifact_id>.<name>``."""
NODE_KINDS: Final = ("activity", "interrupt", "timer", "condition", "map")
"""The node kinds a plan may use."""


# --------------------------------------------------------------- bindings


class InputRef(msgspec.Struct, frozen=True):
    """``{"$input": name}``."""

    name: str


class NodeRef(msgspec.Struct, frozen=True):
    """``{"$node": node, "path": path}``; ``path`` is a tuple of keys."""

    node: str
    path: tuple[str, ...] = ()


class ItemRef(msgspec.Struct, frozen=True):
    """``{"$item": path}``: the current item of a map node (``""``: the whole item)."""

    path: tuple[str, ...] = ()


Ref: TypeAlias = InputRef | NodeRef | ItemRef
"""Any reference a binding may hold."""

_REF_KEYS: Final = frozenset({"$input", "$node", "$literal", "$item"})


def references(value: Any, *, where: str, node: str | None) -> list[Ref]:
    """Every reference in the binding ``value``; refuses malformed bindings.

    ``where`` names the field (``args.x`` or ``output.y``) for error details.
    """
    found: list[Ref] = []
    _walk(value, where, node, found, 0)
    return found


def _walk(value: Any, where: str, node: str | None, out: list[Ref], depth: int) -> None:
    if depth > BINDING_DEPTH_MAX:
        raise _bad(f"binding {where} nests deeper than {BINDING_DEPTH_MAX}", node, where)
    if isinstance(value, list):
        for i, item in enumerate(value):
            _walk(item, f"{where}[{i}]", node, out, depth + 1)
        return
    if not isinstance(value, dict):
        return
    dollars = [k for k in value if isinstance(k, str) and k.startswith("$")]
    if not dollars:
        for key, item in value.items():
            _walk(item, f"{where}.{key}", node, out, depth + 1)
        return
    if len(dollars) > 1 or dollars[0] not in _REF_KEYS:
        raise _bad(
            f"binding {where} has unknown reference key(s) {sorted(dollars)}; "
            "use one of $input, $node, $literal, $item",
            node,
            where,
        )
    key = dollars[0]
    allowed = {"$node", "path"} if key == "$node" else {key}
    extra = sorted(set(value) - allowed)
    if extra:
        raise _bad(f"binding {where}: {key} does not take {extra}", node, where)
    target = value[key]
    if key == "$literal":
        return
    if key == "$item":
        if not isinstance(target, str):
            raise _bad(f"binding {where}: $item takes a dotted path string", node, where)
        out.append(ItemRef(_path_parts(target, where, node)))
        return
    if not isinstance(target, str) or not target:
        raise _bad(f"binding {where}: {key} must name a non-empty string", node, where)
    if key == "$input":
        out.append(InputRef(target))
        return
    path = value.get("path", "")
    if not isinstance(path, str):
        raise _bad(f"binding {where}: path must be a dotted string", node, where)
    out.append(NodeRef(target, _path_parts(path, where, node)))


def _path_parts(path: str, where: str, node: str | None) -> tuple[str, ...]:
    parts = tuple(path.split(".")) if path else ()
    if any(not p for p in parts):
        raise _bad(f"binding {where}: path {path!r} has an empty segment", node, where)
    return parts


class _NoItem:
    """No current item (outside a map node's item arguments)."""


NO_ITEM: Final = _NoItem()
"""The ``item`` of :func:`resolve_binding` outside a map node."""


def resolve_binding(
    value: Any,
    inputs: Mapping[str, Any],
    outputs: Mapping[str, Any],
    *,
    item: Any = NO_ITEM,
    skipped: frozenset[str] = frozenset(),
) -> Any:
    """The JSON value of a (validated) binding, given run inputs and node outputs.

    A reference to a node in ``skipped`` is ``null`` (whatever its path);
    ``{"$item": path}`` reads ``item``. Raises :class:`~wf.errors.InvalidArgument`
    when a referenced input is absent or a path does not exist.
    """
    if isinstance(value, list):
        return [resolve_binding(v, inputs, outputs, item=item, skipped=skipped) for v in value]
    if not isinstance(value, dict):
        return value
    if "$literal" in value:
        return value["$literal"]
    if "$input" in value:
        name = value["$input"]
        if name not in inputs:
            raise InvalidArgument(f"run input {name!r} is not set", field=name)
        return inputs[name]
    if "$node" in value:
        if value["$node"] in skipped:
            return None
        path = value.get("path", "")
        found = _follow(outputs[value["$node"]], path)
        if found is MISSING:
            raise InvalidArgument(
                f"output of node {value['$node']!r} has no {path!r}",
                node=value["$node"],
                field=path,
            )
        return found
    if "$item" in value:
        if isinstance(item, _NoItem):
            raise InvalidArgument("$item is only bound in a map node's args", field="$item")
        found = _follow(item, value["$item"])
        if found is MISSING:
            raise InvalidArgument(f"the item has no {value['$item']!r}", field=value["$item"])
        return found
    return {
        k: resolve_binding(v, inputs, outputs, item=item, skipped=skipped) for k, v in value.items()
    }


def _follow(found: Any, path: str) -> Any:
    """``found`` at the dotted ``path`` (object keys, array indexes), or MISSING."""
    for part in path.split(".") if path else ():
        if isinstance(found, dict) and part in found:
            found = found[part]
        elif (
            isinstance(found, list) and part.isascii() and part.isdigit() and int(part) < len(found)
        ):
            found = found[int(part)]
        else:
            return MISSING
    return found


def resolve_operand(
    value: Any, inputs: Mapping[str, Any], outputs: Mapping[str, Any], skipped: frozenset[str]
) -> Any:
    """A condition operand's value, never an error: a reference that does not resolve
    (input not set, node skipped, path absent) is :data:`~wf.runtime.expr.MISSING`
    at the top and ``null`` inside a composite value."""
    if isinstance(value, list):
        return [_plain(resolve_operand(v, inputs, outputs, skipped)) for v in value]
    if not isinstance(value, dict):
        return value
    if "$literal" in value:
        return value["$literal"]
    if "$input" in value:
        return inputs.get(value["$input"], MISSING)
    if "$node" in value:
        name = value["$node"]
        if name in skipped or name not in outputs:
            return MISSING
        return _follow(outputs[name], value.get("path", ""))
    return {k: _plain(resolve_operand(v, inputs, outputs, skipped)) for k, v in value.items()}


def _plain(value: Any) -> Any:
    return None if value is MISSING else value


# ------------------------------------------------------------- decoding


_plan_decoder: Final = msgspec.json.Decoder(Plan)
_canonical_encoder: Final = msgspec.json.Encoder(order="sorted")
_PATH_RE: Final = re.compile(r"at `\$\.nodes\[(\d+)\](?:\.(\w+))?")
_FIELD_RE: Final = re.compile(r"at `\$\.(\w+)")


def plan_from_builtins(data: Any) -> Plan:
    """Decode a plan from its JSON-like form and validate it (:func:`validate_plan`)."""
    if isinstance(data, Plan):
        plan = data
    else:
        if not isinstance(data, dict):
            raise InvalidArgument(f"a plan is an object, not {type(data).__name__}", field="plan")
        _check_kinds(data)
        try:
            plan = msgspec.convert(data, Plan, strict=True)
        except msgspec.ValidationError as exc:
            raise _decode_error(exc, data) from None
    validate_plan(plan)
    return plan


def plan_from_json(raw: bytes | str) -> Plan:
    """Decode a plan from JSON text and validate it."""
    try:
        data = msgspec.json.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise InvalidArgument(f"a plan must be JSON: {exc}", field="plan") from None
    return plan_from_builtins(data)


def _check_kinds(data: dict[str, Any]) -> None:
    """Name an unknown node kind precisely (msgspec only says 'invalid value')."""
    nodes = data.get("nodes")
    if not isinstance(nodes, list):
        return
    for i, item in enumerate(nodes):
        if not isinstance(item, dict):
            continue
        node = item.get("id") if isinstance(item.get("id"), str) else f"#{i}"
        if "kind" not in item:
            raise InvalidArgument(
                f"node {node!r} has no kind; kinds are {', '.join(NODE_KINDS)}",
                node=node,
                field="kind",
            )
        if item["kind"] == "timer" and isinstance(item.get("delay"), dict):
            try:
                delay_spec_from_dict(item["delay"])
            except WfError as exc:
                inner = exc.details.get("field")
                field = f"delay.{inner}" if isinstance(inner, str) else "delay"
                details = {**exc.details, "node": node, "field": field}
                raise type(exc)(f"node {node!r} delay: {exc.message}", **details) from None
        if item["kind"] not in NODE_KINDS:
            raise InvalidArgument(
                f"node {node!r} has unknown kind {item['kind']!r}; "
                f"kinds are {', '.join(NODE_KINDS)}",
                node=node,
                field="kind",
            )


def _decode_error(exc: msgspec.ValidationError, data: dict[str, Any]) -> InvalidArgument:
    text = str(exc)
    match = _PATH_RE.search(text)
    if match is not None:
        index = int(match.group(1))
        nodes = data.get("nodes", [])
        item = nodes[index] if index < len(nodes) else None
        node = (
            item.get("id")
            if isinstance(item, dict) and isinstance(item.get("id"), str)
            else f"#{index}"
        )
        return InvalidArgument(
            f"invalid plan node {node!r}: {text}", node=node, field=match.group(2)
        )
    field = _FIELD_RE.search(text)
    return InvalidArgument(
        f"invalid plan: {text}", node=None, field=field.group(1) if field else None
    )


def canonical_plan(plan: Plan) -> bytes:
    """The canonical JSON of ``plan``: sorted keys, defaults omitted (what is hashed)."""
    return _canonical_encoder.encode(plan)


def content_hash(plan: Plan) -> str:
    """``sha256:<hex>`` of :func:`canonical_plan`."""
    return "sha256:" + hashlib.sha256(canonical_plan(plan)).hexdigest()


def decode_canonical(raw: bytes) -> Plan:
    """A plan from its stored canonical JSON (no re-validation: it was valid when stored)."""
    return _plan_decoder.decode(raw)


# ------------------------------------------------------------ validation


def _bad(message: str, node: str | None, field: str | None, **details: Any) -> InvalidArgument:
    return InvalidArgument(message, node=node, field=field, **details)


def check_id(value: object, what: str, *, node: str | None = None, field: str = "id") -> str:
    """``value`` if it is a well-formed id (:data:`ID_RE`), else InvalidArgument."""
    if not isinstance(value, str) or not ID_RE.match(value):
        raise _bad(
            f"{what} {value!r} is not a valid id: use 1-{ID_MAX} lower-case letters, "
            "digits and '_', starting with a letter or digit",
            node,
            field,
        )
    return value


def validate_plan(plan: Plan) -> None:
    """Refuse a plan the runtime could not run; see the module docstring for the rules."""
    if plan.format != PLAN_FORMAT:
        raise _bad(
            f"plan format {plan.format} is not supported (expected {PLAN_FORMAT})", None, "format"
        )
    if not plan.nodes:
        raise _bad("a plan needs at least one node", None, "nodes")
    by_id: dict[str, Node] = {}
    for node in plan.nodes:
        check_id(node.id, "node id", node=node.id)
        if node.id in by_id:
            raise _bad(f"duplicate node id {node.id!r}", node.id, "id")
        by_id[node.id] = node
    for node in plan.nodes:
        seen: set[str] = set()
        for need in node.needs:
            if need in seen:
                raise _bad(f"node {node.id!r} needs {need!r} twice", node.id, "needs")
            seen.add(need)
            if need not in by_id:
                raise _bad(f"node {node.id!r} needs unknown node {need!r}", node.id, "needs")
    order = topological_order(plan)
    ancestors = _ancestors(by_id, order)
    _check_schema(plan.input_schema, None, "input_schema")
    _check_defaults(plan.input_schema)
    inputs = _input_rules(plan.input_schema)
    for node in plan.nodes:
        _check_node(node, by_id, ancestors[node.id], inputs)
    for name, binding in plan.output.items():
        for ref in references(binding, where=f"output.{name}", node=None):
            _check_ref(ref, None, f"output.{name}", by_id, None, inputs)


class _Inputs(msgspec.Struct, frozen=True):
    """What the input schema says a binding may read."""

    declared: frozenset[str] | None
    """Names the schema closes its properties to (``None``: any name may be passed)."""
    bound: frozenset[str]
    """Names a run always has: ``required`` ones and those with a ``default``."""
    strict: bool = True
    """Whether an input must be in ``bound`` (operands of conditions need not be)."""


def _input_rules(schema: Mapping[str, Any]) -> _Inputs:
    required = schema.get("required")
    names = {r for r in required if isinstance(r, str)} if isinstance(required, list) else set()
    return _Inputs(
        declared=_declared_inputs(schema), bound=frozenset(names | set(input_defaults_of(schema)))
    )


def input_defaults_of(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The ``default`` of each top-level property of an input schema that declares one."""
    props = schema.get("properties")
    if not isinstance(props, dict):
        return {}
    return {
        name: prop["default"]
        for name, prop in props.items()
        if isinstance(prop, dict) and "default" in prop
    }


def _check_defaults(schema: Mapping[str, Any]) -> None:
    props = schema.get("properties")
    for name, value in input_defaults_of(schema).items():
        assert isinstance(props, dict)
        problems = instance_problems(props[name], value, root=dict(schema))
        if problems:
            raise _bad(
                f"the default of input {name!r} does not match its schema: {'; '.join(problems)}",
                None,
                f"input_schema.properties.{name}.default",
            )


def _check_node(
    node: Node, by_id: Mapping[str, Node], upstream: frozenset[str], inputs: _Inputs
) -> None:
    if isinstance(node, ActivityNode | MapNode):
        if not node.activity_type:
            raise _bad(f"node {node.id!r} has an empty activity_type", node.id, "activity_type")
        if node.timeout_s is not None and not (
            math.isfinite(node.timeout_s) and node.timeout_s > 0
        ):
            raise _bad(
                f"node {node.id!r}: timeout_s must be positive and finite, got {node.timeout_s!r}",
                node.id,
                "timeout_s",
            )
        start_s = node.schedule_to_start_s
        if start_s is not None and not (0 < start_s <= DURATION_MAX_S):
            raise _bad(
                f"node {node.id!r}: schedule_to_start_s must be positive and at most "
                f"{DURATION_MAX_S:g}, got {start_s!r}",
                node.id,
                "schedule_to_start_s",
            )
        if node.retry.max_attempts < 1:
            raise _bad(f"node {node.id!r}: retry.max_attempts must be at least 1", node.id, "retry")
        for name, binding in node.args.items():
            for ref in references(binding, where=f"args.{name}", node=node.id):
                if isinstance(ref, ItemRef) and isinstance(node, MapNode):
                    continue
                _check_ref(ref, node.id, f"args.{name}", by_id, upstream, inputs)
        if isinstance(node, MapNode):
            _check_map(node, by_id, upstream, inputs)
    elif isinstance(node, InterruptNode):
        _check_schema(node.input_schema, node.id, "input_schema")
    elif isinstance(node, ConditionNode):
        lenient = msgspec.structs.replace(inputs, strict=False)

        def operand(value: Any, where: str) -> None:
            for ref in references(value, where=where, node=node.id):
                _check_ref(ref, node.id, where, by_id, upstream, lenient)

        check_expression(node.when, node=node.id, where="when", operand=operand)


def _check_map(
    node: MapNode, by_id: Mapping[str, Node], upstream: frozenset[str], inputs: _Inputs
) -> None:
    if not 1 <= node.max_items <= MAP_ITEMS_MAX:
        raise _bad(
            f"node {node.id!r}: max_items must be 1-{MAP_ITEMS_MAX}, got {node.max_items}",
            node.id,
            "max_items",
        )
    if node.concurrency is not None and not 1 <= node.concurrency <= node.max_items:
        raise _bad(
            f"node {node.id!r}: concurrency must be 1-{node.max_items} (max_items), "
            f"got {node.concurrency}",
            node.id,
            "concurrency",
        )
    refs = references(node.items, where="items", node=node.id)
    if not ("$input" in node.items or "$node" in node.items):
        raise _bad(
            f"node {node.id!r}: items must be a reference ($input or $node) to a list",
            node.id,
            "items",
        )
    for ref in refs:
        _check_ref(ref, node.id, "items", by_id, upstream, inputs)


def _check_ref(
    ref: Ref,
    node: str | None,
    where: str,
    by_id: Mapping[str, Node],
    upstream: frozenset[str] | None,
    inputs: _Inputs,
) -> None:
    owner = f"node {node!r}" if node is not None else "the plan output"
    if isinstance(ref, ItemRef):
        raise _bad(f"{owner} binds {where} to $item, which only a map node's args may", node, where)
    if isinstance(ref, InputRef):
        declared = inputs.declared
        if declared is not None and ref.name not in declared:
            raise _bad(
                f"{owner} binds {where} to input {ref.name!r}, which the input schema "
                f"does not declare (declared: {sorted(declared)})",
                node,
                where,
                input=ref.name,
            )
        if inputs.strict and ref.name not in inputs.bound:
            raise _bad(
                f"{owner} binds {where} to input {ref.name!r}, which a run may lack: the "
                "input schema neither lists it in required nor gives it a default",
                node,
                where,
                input=ref.name,
            )
        return
    if ref.node not in by_id:
        raise _bad(f"{owner} binds {where} to unknown node {ref.node!r}", node, where)
    if upstream is not None and ref.node not in upstream:
        raise _bad(
            f"{owner} binds {where} to node {ref.node!r}, which is not upstream of it "
            f"(add it to needs, directly or through another node)",
            node,
            where,
        )


class ActivityParams(msgspec.Struct, frozen=True):
    """The keyword parameters an activity function declares (see :func:`params_of`)."""

    required: frozenset[str]
    """Parameters without a default: every node of the type must bind them."""
    optional: frozenset[str] = frozenset()
    """Parameters with a default."""
    any_keyword: bool = False
    """It takes ``**kwargs``: any other argument name is accepted."""


def params_of(fn: Callable[..., Any]) -> ActivityParams:
    """The parameters of an activity function, as a node's ``args`` bind them (by
    keyword: positional-only parameters and ``*args`` cannot be bound)."""
    required: set[str] = set()
    optional: set[str] = set()
    any_keyword = False
    for param in inspect.signature(fn).parameters.values():
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            any_keyword = True
        elif param.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            target = required if param.default is inspect.Parameter.empty else optional
            target.add(param.name)
    return ActivityParams(frozenset(required), frozenset(optional), any_keyword)


def check_activity_args(plan: Plan, known: Mapping[str, ActivityParams]) -> None:
    """Refuse activity and map nodes whose ``args`` do not fit the declared parameters
    of their type, for the types in ``known`` (others are not known here: a remote
    worker registers names only). InvalidArgument names the node and the field."""
    for node in plan.nodes:
        if not isinstance(node, ActivityNode | MapNode) or node.activity_type not in known:
            continue
        params = known[node.activity_type]
        accepted = params.required | params.optional
        for name in node.args:
            if name not in accepted and not params.any_keyword:
                raise _bad(
                    f"node {node.id!r} binds args.{name}, which activity "
                    f"{node.activity_type!r} does not take (it takes {sorted(accepted)})",
                    node.id,
                    f"args.{name}",
                )
        missing = sorted(params.required - set(node.args))
        if missing:
            raise _bad(
                f"node {node.id!r} does not bind {missing}, which activity "
                f"{node.activity_type!r} requires",
                node.id,
                "args",
                missing=missing,
            )


def _check_schema(schema: object, node: str | None, field: str) -> None:
    problem = schema_problem(schema)
    if problem is not None:
        where = f"node {node!r} {field}" if node is not None else field
        raise _bad(f"{where} is not a valid JSON Schema: {problem}", node, field)


def _declared_inputs(schema: Mapping[str, Any]) -> frozenset[str] | None:
    """Input names a binding may use: the schema's ``properties`` when it closes them
    (``additionalProperties: false``), else any (``None``)."""
    props = schema.get("properties")
    if isinstance(props, dict) and schema.get("additionalProperties") is False:
        return frozenset(props)
    return None


def topological_order(plan: Plan) -> list[str]:
    """Node ids, every node after its ``needs`` (ties in plan order).

    Raises :class:`~wf.errors.InvalidArgument` naming a cycle (``a -> b -> a``).
    """
    needs = {n.id: n.needs for n in plan.nodes}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    order: list[str] = []
    for root in needs:
        if state.get(root):
            continue
        # Iterative DFS: (node, index of the next need to visit).
        stack: list[tuple[str, int]] = [(root, 0)]
        state[root] = 1
        while stack:
            current, i = stack[-1]
            deps = needs[current]
            if i == len(deps):
                stack.pop()
                state[current] = 2
                order.append(current)
                continue
            stack[-1] = (current, i + 1)
            nxt = deps[i]
            mark = state.get(nxt)
            if mark == 1:
                path = [s for s, _ in stack]
                cycle = [*path[path.index(nxt) :], nxt]
                cycle.reverse()  # as data flows: upstream -> downstream
                raise _bad(
                    f"the plan has a cycle: {' -> '.join(cycle)}",
                    nxt,
                    "needs",
                    cycle=cycle,
                )
            if mark is None and nxt in needs:
                state[nxt] = 1
                stack.append((nxt, 0))
    return order


def _ancestors(by_id: Mapping[str, Node], order: Sequence[str]) -> dict[str, frozenset[str]]:
    found: dict[str, frozenset[str]] = {}
    for node_id in order:
        acc: set[str] = set()
        for need in by_id[node_id].needs:
            acc.add(need)
            acc |= found[need]
        found[node_id] = frozenset(acc)
    return found


__all__ = [
    "MAP_ITEMS_MAX",
    "NODES_MAX",
    "NODE_KINDS",
    "NO_ITEM",
    "PLAN_FORMAT",
    "ActivityNode",
    "ActivityParams",
    "ConditionNode",
    "InputRef",
    "InterruptNode",
    "ItemRef",
    "MapNode",
    "Node",
    "NodeRef",
    "Plan",
    "Ref",
    "TimerNode",
    "WfError",
    "canonical_plan",
    "check_activity_args",
    "check_id",
    "content_hash",
    "decode_canonical",
    "input_defaults_of",
    "params_of",
    "plan_from_builtins",
    "plan_from_json",
    "references",
    "resolve_binding",
    "resolve_operand",
    "topological_order",
    "validate_plan",
]
