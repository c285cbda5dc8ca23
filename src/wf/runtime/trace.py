"""What ``inspect_run`` and ``list_runs`` show: run views and per-node traces.

Theory of operation
-------------------
A run view is built from two sources that never disagree because neither is
a copy: the run document (status, pinned snapshot, node states, output,
checkpoint, resume marks) and, for each activity node, the scheduler's
append-only history of its activity (:meth:`wf.store.protocol.Store.history`).
Each lease in that history is one attempt: which worker held it, when it was
leased, started and finished, and how it ended (completed, failed and
retried, requeued after a lost lease, failed for good), with the error and
the stack trace its worker reported for a failed one. Nothing is
synthesized: an admitted run has an empty trace and no output or checkpoint.
A skipped node shows as ``skipped``; a map node's entry lists its items
(``items``: index, status, activity id, attempts, error), in item order.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from wf.errors import InvalidArgument
from wf.runtime.plan import ActivityNode, ConditionNode, InterruptNode, MapNode, Plan, TimerNode
from wf.runtime.runs import NodeRun, NodeStatus, Run, RunStatus
from wf.scheduler.model import ActivityState, TransitionReason
from wf.scheduler.outputs import Transition
from wf.wire.bounds import I64_MAX

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
        if t.stack_trace:
            current["stack_trace"] = t.stack_trace
        current = None
    return found


def _outcome(t: Transition) -> str:
    if t.to_state is _S.COMPLETED:
        return "completed"
    if t.to_state is _S.FAILED:
        return f"failed ({t.reason})"
    if t.to_state is _S.CANCELLED:
        return "cancelled"
    if t.reason == TransitionReason.RETRY:
        return "failed, retried"
    return f"{t.reason}, requeued"


_KINDS: dict[type, str] = {
    ActivityNode: "activity",
    InterruptNode: "interrupt",
    TimerNode: "timer",
    ConditionNode: "condition",
    MapNode: "map",
}


def node_kind(plan: Plan, node_id: str) -> str:
    """``activity``, ``timer``, ``interrupt``, ``condition`` or ``map``."""
    for node in plan.nodes:
        if node.id == node_id:
            return _KINDS.get(type(node), "unknown")
    return "unknown"


def activity_ids(run: Run) -> list[str]:
    """The scheduler activity of every started node and map item of ``run``."""
    return [s.activity_id for s in _states(run) if s.activity_id]


def _states(run: Run) -> list[NodeRun]:
    return [s for n in run.nodes.values() for s in [n, *(n.items or ())]]


def run_view(
    run: Run,
    plan: Plan,
    histories: Mapping[str, Sequence[Transition]],
    details: Mapping[str, bytes] | None = None,
    unserved: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """The full ``inspect_run`` answer (JSON-ready); ``details`` are the latest
    heartbeat details of the run's activities (JSON documents), by activity id;
    ``unserved`` the ids of its queued activities no registered worker may take."""
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
            "trace": []
            if run.status is RunStatus.ADMITTED
            else _trace(run, plan, histories, details or {}, unserved),
        }
    )
    _with_stack_trace(view)
    return view


def _with_stack_trace(view: dict[str, Any]) -> None:
    """A failed node's (and a failed run's) error gains the stack trace of the node's
    last failed attempt, so the answer names where it failed, not only what."""
    traces: dict[str, str] = {}
    for entry in view["trace"]:
        for item in entry.get("items", ()):  # a map item's, and then its map node's
            found = [a["stack_trace"] for a in item.get("attempts", ()) if "stack_trace" in a]
            if found and isinstance(item.get("error"), dict):
                item["error"]["stack_trace"] = found[-1]
                if isinstance(entry.get("error"), dict):
                    entry["error"]["stack_trace"] = traces[entry["node"]] = found[-1]
        found = [a["stack_trace"] for a in entry.get("attempts", ()) if "stack_trace" in a]
        if found and isinstance(entry.get("error"), dict):
            entry["error"]["stack_trace"] = traces[entry["node"]] = found[-1]
    error = view.get("error")
    if isinstance(error, dict) and error.get("node") in traces:
        error["stack_trace"] = traces[error["node"]]


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
    run: Run,
    plan: Plan,
    histories: Mapping[str, Sequence[Transition]],
    details: Mapping[str, bytes],
    unserved: frozenset[str],
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
        _activity_entry(entry, state, histories, details, unserved)
        if state.items is not None:
            entry["items"] = [
                _item_entry(i, item, histories, details, unserved)
                for i, item in enumerate(state.items)
            ]
        trace.append(entry)
    return trace


def _activity_entry(
    entry: dict[str, Any],
    state: NodeRun,
    histories: Mapping[str, Sequence[Transition]],
    details: Mapping[str, bytes],
    unserved: frozenset[str],
) -> None:
    if state.activity_id is not None:
        entry["activity_id"] = state.activity_id
        entry["attempts"] = attempts(histories.get(state.activity_id, ()))
        raw = details.get(state.activity_id)
        if raw:
            entry["heartbeat_details"] = _details(raw)
        if state.activity_id in unserved:
            # Queued, and no registered worker may take its type (tenant, capabilities).
            entry["unserved"] = True


def _item_entry(
    index: int,
    item: NodeRun,
    histories: Mapping[str, Sequence[Transition]],
    details: Mapping[str, bytes],
    unserved: frozenset[str],
) -> dict[str, Any]:
    """One map item (its result is in the node's gathered output, not repeated here)."""
    entry: dict[str, Any] = {
        "index": index,
        "status": str(item.status),
        "started_at": item.started_at,
        "finished_at": item.finished_at,
    }
    if item.error is not None:
        entry["error"] = msgspec.to_builtins(item.error)
    _activity_entry(entry, item, histories, details, unserved)
    return entry


def _details(raw: bytes) -> Any:
    """Stored heartbeat details as JSON (checked at the edge; a record that no longer
    decodes is shown as its text rather than failing the whole view)."""
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return raw.decode("utf-8", "replace")


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
        digits = raw[len(_CURSOR_PREFIX) :]
        # ASCII digits only (int() also takes spaces, "_" and other scripts' digits),
        # and a run number a store column can hold: a larger one reached the store
        # and failed there as an internal error.
        if not digits.isdigit() or len(digits) > 19:
            raise ValueError("not a run number")
        seq = int(digits)
        if seq > I64_MAX:
            raise ValueError("out of range")
    except (ValueError, UnicodeDecodeError):
        raise InvalidArgument(f"cursor {cursor!r} is not a runs cursor", field="cursor") from None
    return seq
