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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wf.errors import WfError
from wf.runtime.plan import ActivityNode, InterruptNode, Plan, TimerNode, resolve_binding
from wf.runtime.runs import (
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
    for node in plan.nodes:
        state = node_state(run, node.id)
        if state.status is not NodeStatus.PENDING or not _ready(run, node.needs):
            continue
        if run.max_steps is not None and run.steps_used >= run.max_steps:
            effects.extend(
                stop(
                    run,
                    RunStatus.EXHAUSTED,
                    RunError(
                        code="max_steps_exhausted",
                        message=f"node {node.id!r} would be step {run.steps_used + 1} of a "
                        f"budget of {run.max_steps}",
                        node=node.id,
                    ),
                    now,
                )
            )
            return _withdrawn(effects)
        run.steps_used += 1
        state.started_at = now
        if isinstance(node, ActivityNode):
            try:
                effects.submit.append(_activity(run, node, now))
            except WfError as exc:  # an argument path missing in an upstream output
                state.status = NodeStatus.FAILED
                state.finished_at = now
                error = RunError(code="binding_failed", message=exc.message, node=node.id)
                state.error = error
                effects.extend(stop(run, RunStatus.FAILED, error, now))
                return _withdrawn(effects)
            state.status = NodeStatus.SUBMITTED
            state.activity_id = activity_id_for(run.run_id, node.id)
        elif isinstance(node, TimerNode):
            state.status = NodeStatus.WAITING
            state.wake_at = resolve_not_before(node.delay, now)
            effects.timers.append((state.wake_at, node.id))
        else:
            state.status = NodeStatus.AWAITING_INPUT
    effects.extend(_settle(run, plan, now))
    return effects


def _withdrawn(effects: Effects) -> Effects:
    """The run stopped in the advance that was starting nodes: what it had not yet
    handed to the scheduler is dropped rather than submitted and cancelled."""
    unsent = {a.activity_id for a in effects.submit}
    return Effects(cancel=[c for c in effects.cancel if c not in unsent])


def _ready(run: Run, needs: tuple[str, ...]) -> bool:
    return all(node_state(run, n).status is NodeStatus.COMPLETED for n in needs)


def _activity(run: Run, node: ActivityNode, now: float) -> Activity:
    args = resolve_binding(node.args, run.inputs, outputs_of(run))
    return Activity(
        activity_id=activity_id_for(run.run_id, node.id),
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
    )


def _settle(run: Run, plan: Plan, now: float) -> Effects:
    """After progress: complete the run, or mark it interrupted / running."""
    states = [node_state(run, n.id) for n in plan.nodes]
    if all(s.status is NodeStatus.COMPLETED for s in states):
        try:
            run.output = resolve_binding(plan.output, run.inputs, outputs_of(run))
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
    for state in run.nodes.values():
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


def activity_completed(run: Run, plan: Plan, node_id: str, output: Any, now: float) -> Effects:
    """A node's activity completed with ``output`` (ignored unless it was in flight)."""
    state = run.nodes.get(node_id)
    if run.final or state is None or state.status is not NodeStatus.SUBMITTED:
        return Effects()
    state.status = NodeStatus.COMPLETED
    state.output = output
    state.finished_at = now
    return advance(run, plan, now)


def activity_failed(run: Run, node_id: str, error: RunError, now: float) -> Effects:
    """A node's activity failed for good: the run fails with its cause."""
    state = run.nodes.get(node_id)
    if run.final or state is None or state.status is not NodeStatus.SUBMITTED:
        return Effects()
    state.status = NodeStatus.FAILED
    state.error = error
    state.finished_at = now
    return stop(run, RunStatus.FAILED, error, now)


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
