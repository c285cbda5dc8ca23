"""The DAG engine's decisions: pure functions from (run, plan, event, now) to effects.

Theory of operation
-------------------
Like the scheduler core, this module does no I/O and reads no clock. Each
function takes a mutable :class:`~wf.runtime.runs.Run`, its
:class:`~wf.runtime.plan.Plan`, one event and ``now``; it updates the run in
place and returns :class:`Effects`: scheduler activities to submit, activities
to cancel, timers to arm. The shell (:mod:`wf.runtime.engine`) stores the run
first and only then carries the effects out, so after a crash the stored run
says what should exist and recovery makes it so (submission by a
deterministic activity id is idempotent).

Progress (:func:`advance`): every pending node whose ``needs`` have all
completed starts, in plan order. An activity node becomes a scheduler
activity carrying the run's tenant, priority (the node's or the run's),
deadline, policy group, capabilities, idempotency, retry policy and the run
id as workflow and correlation id; its arguments are the node's bindings
resolved against the pinned inputs and upstream outputs. A timer node resolves
its delay spec against ``now`` and waits; an interrupt node awaits an answer.
Each start is one step: when the next start would exceed ``max_steps`` the run
becomes ``exhausted``. When every node has completed the output mapping is
evaluated and the run completes. A node that fails for good fails the run
with its cause and withdraws the rest. Retries are the scheduler's: an
activity's attempts, backoff and non-retryable errors live in the core, so
attempt counts survive requeues and restarts with the core's own records.

Conditions and skips: a node is *ready* when each of its needs completed or
was skipped. A ready node is skipped instead of started when its needs say
so (``skip_when``): by default when any need was skipped or is a condition
whose expression did not hold; with ``all_skipped`` only when every need
was (a join after an if/else). A condition node starts and completes in the
same step: its output is the expression's boolean (:mod:`wf.runtime.expr`).
Skipping cascades within one :func:`advance` (passes repeat until nothing
changes), costs no step, and a skipped node's output reads as ``null``.
The run completes when every node completed or was skipped.

Fan-out (map nodes): when a map node starts, its ``items`` binding is
resolved (a list of at most ``max_items``, else the node fails with
``binding_failed`` or ``too_many_items``), one :class:`NodeRun` per item is
stored in the node's state, and items are submitted in order, at most
``concurrency`` in flight; item ``i`` is activity ``<run>.<node>.<i>``, a
deterministic id, so recovery matches each item with its own activity as it
does a plain node's. When every item completed, the node completes with
their results in item order; an item that fails for good fails the node and
the run. The whole map node is one step.

Size: a completion is accepted only while the run's running size
(:attr:`~wf.runtime.runs.Run.size`, the stored body's bytes plus the results
accepted since) plus the result stays within the bound the shell passes
(:data:`~wf.runtime.runs.RUN_BYTES_MAX`); otherwise the result is dropped and
the node (a map item's: the map node, naming the item) fails the run with
``run_too_large`` (:func:`fail_too_large`). Checking costs an addition, not an
encoding of the document.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from wf.errors import WfError
from wf.runtime.expr import evaluate
from wf.runtime.plan import (
    ActivityNode,
    ConditionNode,
    InterruptNode,
    MapNode,
    Node,
    Plan,
    TimerNode,
    resolve_binding,
    resolve_operand,
)
from wf.runtime.runs import (
    RUN_TOO_LARGE,
    Checkpoint,
    NodeRun,
    NodeStatus,
    Run,
    RunError,
    RunStatus,
    activity_id_for,
)
from wf.scheduler.model import Activity
from wf.scheduler.timer import resolve_not_before
from wf.wire.payloads import encode_payload

_IN_FLIGHT = frozenset({NodeStatus.SUBMITTED, NodeStatus.WAITING})
_DONE = frozenset({NodeStatus.COMPLETED, NodeStatus.SKIPPED})


@dataclass(slots=True)
class Effects:
    """What the shell must do after storing the run."""

    submit: list[Activity] = field(default_factory=list)
    """Activities to hand to the scheduler."""
    cancel: list[str] = field(default_factory=list)
    """Activity ids to withdraw."""
    timers: list[tuple[float, str]] = field(default_factory=list)
    """``(wake_at, node_id)`` timers to arm."""

    def extend(self, other: Effects) -> None:
        """Add ``other``'s effects after these."""
        self.submit += other.submit
        self.cancel += other.cancel
        self.timers += other.timers


def node_state(run: Run, node_id: str) -> NodeRun:
    """The node's state, created pending on first use."""
    state = run.nodes.get(node_id)
    if state is None:
        state = run.nodes[node_id] = NodeRun()
    return state


def outputs_of(run: Run) -> dict[str, Any]:
    """Outputs of the completed nodes."""
    return {k: n.output for k, n in run.nodes.items() if n.status is NodeStatus.COMPLETED}


def skipped_of(run: Run) -> frozenset[str]:
    """The skipped nodes (a reference to one reads as ``null``)."""
    return frozenset(k for k, n in run.nodes.items() if n.status is NodeStatus.SKIPPED)


def item_key(node_id: str, index: int) -> str:
    """The key of a map node's item: ``<node>.<index>`` (its activity id after the run's)."""
    return f"{node_id}.{index}"


def split_key(key: str) -> tuple[str, int | None]:
    """``(node_id, item index)`` of an activity key (``None``: a plain node's)."""
    node_id, dot, rest = key.partition(".")
    if dot and rest.isascii() and rest.isdigit():
        return node_id, int(rest)
    return key, None


def activity_state(run: Run, key: str) -> NodeRun | None:
    """The state of the node or map item ``key`` names (see :func:`split_key`)."""
    node_id, index = split_key(key)
    state = run.nodes.get(node_id)
    if index is None or state is None:
        return state
    items = state.items
    return items[index] if items is not None and index < len(items) else None


def begin(run: Run, plan: Plan, now: float) -> Effects:
    """Start an admitted run: its first nodes start."""
    run.status = RunStatus.RUNNING
    run.started_at = now
    for node in plan.nodes:
        node_state(run, node.id)
    return advance(run, plan, now)


def advance(run: Run, plan: Plan, now: float) -> Effects:
    """Start every ready node, then settle the run's status (see the module docstring)."""
    effects = Effects()
    if run.final:
        return effects
    by_id = {n.id: n for n in plan.nodes}
    progressed = True
    while progressed:
        # Conditions complete and skips happen within a pass: repeat until one
        # changes nothing, so a node earlier in plan order is never left behind.
        progressed = False
        for node in plan.nodes:
            state = node_state(run, node.id)
            if isinstance(node, MapNode) and state.status is NodeStatus.SUBMITTED:
                if not _fill(run, node, state, now, effects):
                    return _withdrawn(effects)
                continue
            if state.status is not NodeStatus.PENDING or not _ready(run, node.needs):
                continue
            if _skips(run, node, by_id):
                state.status = NodeStatus.SKIPPED
                state.finished_at = now
                progressed = True
                continue
            if not _start(run, node, state, now, effects):
                return _withdrawn(effects)
            # A condition completes at once, and so does a map over an empty list.
            progressed = progressed or isinstance(node, ConditionNode | MapNode)
    effects.extend(_settle(run, plan, now))
    return effects


def _skips(run: Run, node: Node, by_id: dict[str, Node]) -> bool:
    """Whether a ready node is skipped rather than started (see the module docstring)."""
    if not node.needs:
        return False
    blocked = [_blocks(run, need, by_id) for need in node.needs]
    return all(blocked) if node.skip_when == "all_skipped" else any(blocked)


def _blocks(run: Run, need: str, by_id: dict[str, Node]) -> bool:
    state = node_state(run, need)
    if state.status is NodeStatus.SKIPPED:
        return True
    return isinstance(by_id.get(need), ConditionNode) and state.output is not True


def _start(run: Run, node: Node, state: NodeRun, now: float, effects: Effects) -> bool:
    """Start one ready node; ``False`` when the run stopped instead (its effects are
    then in ``effects``, and the caller withdraws what was not yet handed over)."""
    if run.max_steps is not None and run.steps_used >= run.max_steps:
        error = RunError(
            code="max_steps_exhausted",
            message=f"node {node.id!r} would be step {run.steps_used + 1} of a "
            f"budget of {run.max_steps}",
            node=node.id,
        )
        effects.extend(stop(run, RunStatus.EXHAUSTED, error, now))
        return False
    run.steps_used += 1
    state.started_at = now
    if isinstance(node, ActivityNode):
        try:
            effects.submit.append(_activity(run, node, now))
        except WfError as exc:  # an argument path missing in an upstream output
            return _fail_node(run, state, node.id, "binding_failed", exc.message, now, effects)
        state.status = NodeStatus.SUBMITTED
        state.activity_id = activity_id_for(run.run_id, node.id)
    elif isinstance(node, TimerNode):
        state.status = NodeStatus.WAITING
        state.wake_at = resolve_not_before(node.delay, now)
        effects.timers.append((state.wake_at, node.id))
    elif isinstance(node, ConditionNode):
        outputs, skipped = outputs_of(run), skipped_of(run)
        state.output = evaluate(
            node.when, lambda v: resolve_operand(v, run.inputs, outputs, skipped)
        )
        state.status = NodeStatus.COMPLETED
        state.finished_at = now
    elif isinstance(node, MapNode):
        try:
            items = _map_items(run, node)
        except WfError as exc:
            return _fail_node(run, state, node.id, "binding_failed", exc.message, now, effects)
        except _TooManyItems as exc:
            return _fail_node(run, state, node.id, "too_many_items", str(exc), now, effects)
        state.items = [NodeRun() for _ in items]
        state.status = NodeStatus.SUBMITTED
        if not items:
            _gather(state, now)
            return True
        return _fill(run, node, state, now, effects)
    else:
        state.status = NodeStatus.AWAITING_INPUT
    return True


class _TooManyItems(Exception):
    """A map node's list is longer than its ``max_items`` (the node fails)."""


def _map_items(run: Run, node: MapNode) -> list[Any]:
    """The list a map node fans out over (WfError: not a list; _TooManyItems)."""
    items = resolve_binding(node.items, run.inputs, outputs_of(run), skipped=skipped_of(run))
    if not isinstance(items, list):
        kind = "null" if items is None else type(items).__name__
        raise WfError(f"node {node.id!r}: items resolved to {kind}, not a list", node=node.id)
    if len(items) > node.max_items:
        raise _TooManyItems(
            f"node {node.id!r}: {len(items)} items, more than its max_items {node.max_items}"
        )
    return items


def _fill(run: Run, node: MapNode, state: NodeRun, now: float, effects: Effects) -> bool:
    """Submit a started map node's pending items, in order, up to its concurrency;
    ``False`` when an item's arguments do not resolve (the run stopped)."""
    slots = state.items or []
    limit = len(slots) if node.concurrency is None else node.concurrency
    free = limit - sum(1 for s in slots if s.status is NodeStatus.SUBMITTED)
    if free <= 0 or not any(s.status is NodeStatus.PENDING for s in slots):
        return True
    # Checked when the node started; inputs and upstream outputs never change, so
    # this is the same list again (nothing but its length is stored).
    items = _map_items(run, node)
    outputs, skipped = outputs_of(run), skipped_of(run)
    for index, slot in enumerate(slots):
        if free <= 0:
            break
        if slot.status is not NodeStatus.PENDING:
            continue
        key = item_key(node.id, index)
        try:
            args = resolve_binding(
                node.args, run.inputs, outputs, item=items[index], skipped=skipped
            )
        except WfError as exc:
            message = f"item {index}: {exc.message}"
            return _fail_node(run, state, node.id, "binding_failed", message, now, effects)
        effects.submit.append(_submission(run, node, key, args))
        slot.status = NodeStatus.SUBMITTED
        slot.activity_id = activity_id_for(run.run_id, key)
        slot.started_at = now
        free -= 1
    return True


def _gather(state: NodeRun, now: float) -> None:
    """Every item completed: the node completes with their results, in item order
    (kept once, in the node's output, not again in each item)."""
    items = state.items or []
    state.output = [s.output for s in items]
    for slot in items:
        slot.output = None
    state.status = NodeStatus.COMPLETED
    state.finished_at = now


def _fail_node(
    run: Run, state: NodeRun, node_id: str, code: str, message: str, now: float, effects: Effects
) -> bool:
    state.status = NodeStatus.FAILED
    state.finished_at = now
    error = RunError(code=code, message=message, node=node_id)
    state.error = error
    effects.extend(stop(run, RunStatus.FAILED, error, now))
    return False


def _withdrawn(effects: Effects) -> Effects:
    """The run stopped in the advance that was starting nodes: what it had not yet
    handed to the scheduler is dropped rather than submitted and cancelled."""
    unsent = {a.activity_id for a in effects.submit}
    return Effects(cancel=[c for c in effects.cancel if c not in unsent])


def _ready(run: Run, needs: tuple[str, ...]) -> bool:
    return all(node_state(run, n).status in _DONE for n in needs)


def _activity(run: Run, node: ActivityNode, now: float) -> Activity:
    args = resolve_binding(node.args, run.inputs, outputs_of(run), skipped=skipped_of(run))
    return _submission(run, node, node.id, args)


def _submission(run: Run, node: ActivityNode | MapNode, key: str, args: Any) -> Activity:
    """The scheduler activity of a node (or of one map item, ``key`` ``<node>.<i>``)."""
    return Activity(
        activity_id=activity_id_for(run.run_id, key),
        activity_type=node.activity_type,
        workflow_id=run.run_id,
        tenant=run.tenant,
        priority=run.priority if node.priority is None else node.priority,
        deadline=run.deadline,
        capabilities=node.capabilities,
        idempotent=node.idempotent,
        correlation_id=run.run_id,
        policy=run.policy,
        new_workflow=False,
        retry=node.retry,
        payload=encode_payload(**args),
        schedule_to_start_s=node.schedule_to_start_s,
        start_to_close_s=node.timeout_s,
    )


def _settle(run: Run, plan: Plan, now: float) -> Effects:
    """After progress: complete the run, or mark it interrupted / running."""
    states = [node_state(run, n.id) for n in plan.nodes]
    if all(s.status in _DONE for s in states):
        try:
            run.output = resolve_binding(
                plan.output, run.inputs, outputs_of(run), skipped=skipped_of(run)
            )
        except WfError as exc:
            error = RunError(code="output_unresolvable", message=exc.message)
            return stop(run, RunStatus.FAILED, error, now)
        run.status = RunStatus.COMPLETED
        run.finished_at = now
        run.checkpoint = checkpoint(run, now)
        return Effects()
    if any(s.status in _IN_FLIGHT for s in states):
        run.status = RunStatus.RUNNING
    elif run.status is not RunStatus.INTERRUPTED and any(
        s.status is NodeStatus.AWAITING_INPUT for s in states
    ):
        run.status = RunStatus.INTERRUPTED
        run.checkpoint = checkpoint(run, now)
    return Effects()


def checkpoint(run: Run, now: float) -> Checkpoint:
    """The run's checkpoint as of now (its revision is the one about to be stored)."""
    return Checkpoint(
        at=now,
        status=run.status,
        revision=run.revision + 1,
        completed=outputs_of(run),
        awaiting=[k for k, n in run.nodes.items() if n.status is NodeStatus.AWAITING_INPUT],
    )


def stop(run: Run, status: RunStatus, error: RunError, now: float) -> Effects:
    """End the run with ``status``: withdraw every unfinished node."""
    effects = Effects()
    if run.final:
        return effects
    for node in run.nodes.values():
        for state in [node, *(node.items or ())]:  # a map node's items too
            if state.status in _IN_FLIGHT or state.status is NodeStatus.AWAITING_INPUT:
                if state.status is NodeStatus.SUBMITTED and state.activity_id is not None:
                    effects.cancel.append(state.activity_id)
                state.status = NodeStatus.CANCELLED
                state.finished_at = now
    run.status = status
    run.error = error
    run.finished_at = now
    run.checkpoint = checkpoint(run, now)
    return effects


def activity_completed(
    run: Run,
    plan: Plan,
    node_id: str,
    output: Any,
    now: float,
    *,
    output_bytes: int = 0,
    bytes_max: int | None = None,
) -> Effects:
    """A node's (or a map item's, ``node_id`` ``<node>.<i>``) activity completed with
    ``output`` (ignored unless it was in flight), ``output_bytes`` long encoded. With
    ``bytes_max``, a result that would take the run's running size past it fails the
    run with ``run_too_large`` instead (see the module docstring)."""
    state = activity_state(run, node_id)
    if run.final or state is None or state.status is not NodeStatus.SUBMITTED:
        return Effects()
    if bytes_max is not None and run.size + output_bytes > bytes_max:
        message = (
            f"its result ({output_bytes} bytes) would take the run's stored document to "
            f"about {run.size + output_bytes} bytes, more than the {bytes_max} allowed"
        )
        return fail_too_large(run, node_id, message, now)
    run.size += output_bytes
    state.status = NodeStatus.COMPLETED
    state.output = output
    state.finished_at = now
    parent_id, index = split_key(node_id)
    if index is not None:
        parent = run.nodes[parent_id]
        if parent.status is not NodeStatus.SUBMITTED:
            return Effects()
        if all(s.status is NodeStatus.COMPLETED for s in parent.items or ()):
            _gather(parent, now)
    return advance(run, plan, now)


def activity_failed(run: Run, node_id: str, error: RunError, now: float) -> Effects:
    """A node's (or a map item's) activity failed for good: the run fails with its
    cause (an item's names the map node and the item)."""
    state = activity_state(run, node_id)
    if run.final or state is None or state.status is not NodeStatus.SUBMITTED:
        return Effects()
    state.status = NodeStatus.FAILED
    state.error = error
    state.finished_at = now
    parent_id, index = split_key(node_id)
    if index is not None:
        error = msgspec.structs.replace(
            error, node=parent_id, message=f"item {index}: {error.message}"
        )
        parent = run.nodes[parent_id]
        parent.status = NodeStatus.FAILED
        parent.error = error
        parent.finished_at = now
    return stop(run, RunStatus.FAILED, error, now)


def fail_too_large(run: Run, node_id: str | None, message: str, now: float) -> Effects:
    """Stop the run as ``run_too_large`` (``node_id``: the node or map item whose result
    did not fit, which fails too; ``None``: the document as a whole). The checkpoint it
    takes lists no outputs: they are in the nodes already, and repeating them would
    double the document that was too large."""
    if node_id is not None:
        error = RunError(code=RUN_TOO_LARGE, message=message, node=node_id)
        effects = activity_failed(run, node_id, error, now)
    else:
        effects = stop(run, RunStatus.FAILED, RunError(code=RUN_TOO_LARGE, message=message), now)
    if run.checkpoint is not None:
        run.checkpoint = msgspec.structs.replace(run.checkpoint, completed={})
    return effects


def timer_fired(run: Run, plan: Plan, node_id: str, now: float) -> Effects:
    """A timer node's instant passed (early or repeated calls are ignored)."""
    state = run.nodes.get(node_id)
    if run.final or state is None or state.status is not NodeStatus.WAITING:
        return Effects()
    if state.wake_at is not None and now < state.wake_at:
        return Effects()
    state.status = NodeStatus.COMPLETED
    state.output = {"fired_at": now, "due_at": state.wake_at}
    state.finished_at = now
    return advance(run, plan, now)


def answered(run: Run, plan: Plan, node_id: str, answer: Any, now: float) -> Effects:
    """An interrupt node got its (validated) answer."""
    state = node_state(run, node_id)
    state.status = NodeStatus.COMPLETED
    state.output = answer
    state.finished_at = now
    run.status = RunStatus.RUNNING
    return advance(run, plan, now)


def awaiting(run: Run, plan: Plan) -> list[InterruptNode]:
    """The interrupt nodes waiting for an answer, in plan order."""
    return [
        n
        for n in plan.nodes
        if isinstance(n, InterruptNode)
        and node_state(run, n.id).status is NodeStatus.AWAITING_INPUT
    ]
