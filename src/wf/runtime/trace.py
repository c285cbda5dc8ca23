"""What ``inspect_run`` and ``list_runs`` show: run views and per-node traces.

Theory of operation
-------------------
A run view is built from two sources that never disagree because neither is
a copy: the run document (status, pinned snapshot, node states, output,
checkpoint, resume marks) and, for each activity node, the scheduler's
append-only history of its activity (:meth:`wf.store.protocol.Store.history`).
Each lease in that history is one attempt: which worker held it, when it was
leased, started and finished, and how it ended (completed, failed and
retried, requeued after a lost lease, failed for good). Nothing is
synthesized: an admitted run has an empty trace and no output or checkpoint.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from wf.errors import InvalidArgument
from wf.runtime.plan import ActivityNode, InterruptNode, Plan, TimerNode
from wf.runtime.runs import NodeStatus, Run, RunStatus
from wf.scheduler.model import ActivityState
from wf.scheduler.outputs import Transition

_S = ActivityState
_HELD = frozenset({_S.LEASED, _S.EXECUTING})


def attempts(history: Sequence[Transition]) -> list[dict[str, Any]]:
    """One entry per lease of an activity, oldest first (see the module docstring)."""
    found: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for t in history:
        if t.to_state is _S.LEASED and t.from_state not in _HELD:
            current = {"token": t.token, "worker_id": t.worker_id, "leased_at": t.at}
            found.append(current)
            continue
        if current is None or t.token != current["token"]:
            continue
        if t.to_state is _S.EXECUTING:
            current["attempt"] = t.attempt
            current["started_at"] = t.at
            continue
        current["finished_at"] = t.at
        current["outcome"] = _outcome(t)
        if t.error:
            current["error"] = t.error
        current = None
    return found


def _outcome(t: Transition) -> str:
    if t.to_state is _S.COMPLETED:
        return "completed"
    if t.to_state is _S.FAILED:
        return f"failed ({t.reason})"
    if t.to_state is _S.CANCELLED:
        return "cancelled"
    if t.reason == "retry":
        return "failed, retried"
    return f"{t.reason}, requeued"


def node_kind(plan: Plan, node_id: str) -> str:
    """``activity``, ``timer`` or ``interrupt``."""
    for node in plan.nodes:
        if node.id == node_id:
            if isinstance(node, ActivityNode):
                return "activity"
            return "timer" if isinstance(node, TimerNode) else "interrupt"
    return "unknown"


def run_view(run: Run, plan: Plan, histories: Mapping[str, Sequence[Transition]]) -> dict[str, Any]:
    """The full ``inspect_run`` answer (JSON-ready)."""
    view = run_summary(run)
    view.update(
        {
            "inputs": run.inputs,
            "artifact": {
                "artifact_id": run.artifact_id,
                "version": run.artifact_version,
                "content_hash": run.content_hash,
            },
            "deployment_revision": run.deployment_revision,
            "priority": int(run.priority),
            "policy": run.policy,
            "deadline": run.deadline,
            "max_steps": run.max_steps,
            "steps_used": run.steps_used,
            "output": run.output if run.status is RunStatus.COMPLETED else None,
            "checkpoint": None if run.checkpoint is None else msgspec.to_builtins(run.checkpoint),
            "awaiting": _awaiting(run, plan),
            "resumes": msgspec.to_builtins(run.resumes),
            "trace": [] if run.status is RunStatus.ADMITTED else _trace(run, plan, histories),
        }
    )
    return view


def run_summary(run: Run) -> dict[str, Any]:
    """The short form ``list_runs`` pages hold."""
    return {
        "run_id": run.run_id,
        "status": str(run.status),
        "deployment_id": run.deployment_id,
        "tenant": run.tenant,
        "trigger": msgspec.to_builtins(run.trigger),
        "created_at": run.created_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "error": None if run.error is None else msgspec.to_builtins(run.error),
    }


def _awaiting(run: Run, plan: Plan) -> list[dict[str, Any]]:
    return [
        {"node": n.id, "prompt": n.prompt, "input_schema": n.input_schema}
        for n in plan.nodes
        if isinstance(n, InterruptNode)
        and (state := run.nodes.get(n.id)) is not None
        and state.status is NodeStatus.AWAITING_INPUT
    ]


def _trace(
    run: Run, plan: Plan, histories: Mapping[str, Sequence[Transition]]
) -> list[dict[str, Any]]:
    trace: list[dict[str, Any]] = []
    for node in plan.nodes:
        state = run.nodes.get(node.id)
        if state is None or state.status is NodeStatus.PENDING:
            continue
        entry: dict[str, Any] = {
            "node": node.id,
            "kind": node_kind(plan, node.id),
            "status": str(state.status),
            "started_at": state.started_at,
            "finished_at": state.finished_at,
        }
        if state.status is NodeStatus.COMPLETED:
            entry["output"] = state.output
        if state.error is not None:
            entry["error"] = msgspec.to_builtins(state.error)
        if state.wake_at is not None:
            entry["wake_at"] = state.wake_at
        if state.activity_id is not None:
            entry["activity_id"] = state.activity_id
            entry["attempts"] = attempts(histories.get(state.activity_id, ()))
        trace.append(entry)
    return trace


# ----------------------------------------------------------------- cursors

_CURSOR_PREFIX = b"runs:"


def encode_cursor(seq: int) -> str:
    """An opaque continuation cursor after run number ``seq``."""
    return base64.urlsafe_b64encode(_CURSOR_PREFIX + str(seq).encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    """The run number a cursor continues after; InvalidArgument if it is not one of ours."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        if not raw.startswith(_CURSOR_PREFIX):
            raise ValueError("foreign cursor")
        seq = int(raw[len(_CURSOR_PREFIX) :].decode())
        if seq < 0:
            raise ValueError("negative")
    except (ValueError, UnicodeDecodeError):
        raise InvalidArgument(f"cursor {cursor!r} is not a runs cursor", field="cursor") from None
    return seq
