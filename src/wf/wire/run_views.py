"""The typed results of the ``workflow.runs.*`` methods: run views and run pages.

The runtime builds each answer as a JSON object (:mod:`wf.runtime.trace`) and the
Python API returns it as these :class:`~wf.wire.views.View` structs; the fields
are declared in the order the runtime writes the keys, so a view encodes to the
very bytes the server sends (``tests/client/test_typed_results.py`` holds them
to it). Three kinds of key:

- always sent, possibly ``null``: a field without a default (or, where an older
  record may lack it, ``None``);
- sent only in some states and never ``null`` when sent: a default of ``None``
  (or ``False``) in an ``omit_defaults`` view, so the absent key stays absent;
- sent only in some states and possibly ``null`` when sent (a node's ``output``,
  its ``heartbeat_details``): :data:`msgspec.UNSET` when absent, so that
  ``"output" in node`` says whether the key was sent.

Free-form JSON (inputs, outputs, answers, schemas) stays ``dict[str, Any]`` or
``Any``.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from wf.wire.views import View


class RunErrorView(View, frozen=True, kw_only=True, omit_defaults=True):
    """Why a run, a node or a map item failed."""

    code: str
    """Stable cause (``activity_failed``, ``deadline_exceeded``, ``cancelled``, ...)."""
    message: str
    """A sentence for people."""
    node: str | None = None
    """The node that caused it, if one did."""
    error_type: str | None = None
    """The activity's error type (its exception class name), if any."""
    may_have_executed: bool = False
    """External effects of the failed attempt may already have happened."""
    stack_trace: str | None = None
    """The stack trace the node's last failed attempt reported, if any."""


class RunTrigger(View, frozen=True, kw_only=True):
    """What started a run."""

    kind: str = "manual"
    """``manual`` (start_run, trigger_schedule) or ``schedule`` (an occurrence)."""
    schedule_id: str | None = None
    """The schedule, for scheduled runs and a schedule's manual triggers."""
    occurrence: float | None = None
    """The occurrence's UTC instant (epoch seconds), for scheduled runs."""


class RunSummary(View, frozen=True, kw_only=True):
    """A run as ``list_runs`` pages list it.

    A run whose stored record does not decode is listed with ``corrupt`` (why) and
    only ``run_id`` and ``status`` from the wire; its other fields keep their
    defaults here.
    """

    run_id: str
    """``run-000001`` style id."""
    status: str
    """``admitted``, ``running``, ``interrupted``, ``completed``, ``failed``,
    ``exhausted`` or ``cancelled``."""
    deployment_id: str = ""
    """The deployment that runs."""
    tenant: str = ""
    """Owning tenant."""
    trigger: RunTrigger = RunTrigger()
    """What started it."""
    created_at: float = 0.0
    """When it was admitted (epoch seconds)."""
    started_at: float | None = None
    """When it began."""
    finished_at: float | None = None
    """When it stopped for good."""
    error: RunErrorView | None = None
    """Why it failed (``None`` unless it did)."""
    corrupt: str | UnsetType = UNSET
    """Only for a record that does not decode: why."""


class CorruptRunSummary(RunSummary, frozen=True, kw_only=True, omit_defaults=True):
    """What the server lists for a run whose record does not decode: a
    :class:`RunSummary` that travels as ``run_id``, ``status`` and ``corrupt`` only
    (a client decodes it as a :class:`RunSummary` with ``corrupt`` set)."""


class ArtifactRef(View, frozen=True, kw_only=True):
    """The artifact version a run pinned."""

    artifact_id: str
    """Artifact id."""
    version: int
    """Version."""
    content_hash: str
    """``sha256:<hex>`` of the plan."""


class AwaitingInput(View, frozen=True, kw_only=True):
    """An interrupt node waiting for an answer (``resume_run``)."""

    node: str
    """The interrupt node."""
    prompt: str
    """What it asks for."""
    input_schema: dict[str, Any]
    """JSON Schema the answer must satisfy."""


class ResumeMarkView(View, frozen=True, kw_only=True, omit_defaults=True):
    """One ``resume_run`` attempt, as marked before the answer applied."""

    attempt: int
    """1, 2, ... per run."""
    node: str
    """The interrupt node answered."""
    at: float
    """When the attempt was marked."""
    base_revision: int
    """The run revision the attempt read."""
    state: str = "started"
    """``started``, ``applied``, ``rejected`` or ``abandoned``."""
    finished_at: float | None = None
    """When the attempt ended."""


class CheckpointView(View, frozen=True, kw_only=True, omit_defaults=True):
    """What a run had achieved when it stopped (interrupted or final)."""

    at: float
    """When it was taken."""
    status: str
    """The run status it was taken for."""
    revision: int
    """The run revision that stored it."""
    completed: dict[str, Any] = msgspec.field(default_factory=dict)
    """Outputs of the completed nodes."""
    awaiting: list[str] = msgspec.field(default_factory=list)
    """Interrupt nodes waiting for an answer."""


class AttemptView(View, frozen=True, kw_only=True, omit_defaults=True):
    """One lease of a node's (or a map item's) activity: one attempt."""

    token: int
    """The lease's fencing token."""
    worker_id: str | None
    """The worker that held it."""
    leased_at: float
    """When it was leased."""
    attempt: int | None = None
    """The attempt number, once started."""
    started_at: float | None = None
    """When its worker started it."""
    finished_at: float | None = None
    """When it ended (absent while it runs)."""
    outcome: str | None = None
    """``completed``, ``failed, retried``, ``failed (<reason>)``, ``cancelled`` or
    ``<reason>, requeued``."""
    error: str | None = None
    """The error its worker reported."""
    stack_trace: str | None = None
    """The stack trace its worker reported."""


class MapItemView(View, frozen=True, kw_only=True, omit_defaults=True):
    """One item of a map node (its result is in the node's output)."""

    index: int
    """Position in the mapped list."""
    status: str
    """The item's status (as a node's)."""
    started_at: float | None
    """When it started."""
    finished_at: float | None
    """When it stopped."""
    error: RunErrorView | None = None
    """Why it failed."""
    activity_id: str | None = None
    """Its scheduler activity, once submitted."""
    attempts: list[AttemptView] | None = None
    """Its attempts, oldest first (with ``activity_id``)."""
    heartbeat_details: Any | UnsetType = UNSET
    """The latest heartbeat details its worker sent (a JSON value), if any."""
    unserved: bool = False
    """Queued, and no registered worker may take it."""


class NodeTrace(View, frozen=True, kw_only=True, omit_defaults=True):
    """One node of a run's trace (nodes still pending are not listed)."""

    node: str
    """Node id."""
    kind: str
    """``activity``, ``timer``, ``interrupt``, ``condition`` or ``map``."""
    status: str
    """``running``, ``completed``, ``skipped``, ``failed``, ``awaiting_input``, ..."""
    started_at: float | None
    """When it started."""
    finished_at: float | None
    """When it stopped."""
    output: Any | UnsetType = UNSET
    """Its output, once completed (``UNSET`` before; may be ``None`` after)."""
    error: RunErrorView | None = None
    """Why it failed."""
    wake_at: float | None = None
    """A timer node's instant."""
    activity_id: str | None = None
    """Its scheduler activity (activity nodes), once submitted."""
    attempts: list[AttemptView] | None = None
    """Its attempts, oldest first (with ``activity_id``)."""
    heartbeat_details: Any | UnsetType = UNSET
    """The latest heartbeat details its worker sent (a JSON value), if any."""
    unserved: bool = False
    """Queued, and no registered worker may take it."""
    map_items: list[MapItemView] | None = msgspec.field(default=None, name="items")
    """A map node's items, in item order (the wire's ``items``; the attribute is named
    so as not to hide the mapping method ``items()``)."""


class RunView(RunSummary, frozen=True, kw_only=True):
    """A run in full: what ``start_run``, ``inspect_run``, ``resume_run``,
    ``cancel_run``, ``wait_for_run`` and ``trigger_schedule`` return."""

    inputs: dict[str, Any] = msgspec.field(default_factory=dict)
    """The pinned inputs (deployment defaults overlaid with the caller's)."""
    artifact: ArtifactRef | None = None
    """The pinned artifact version."""
    deployment_revision: int = 0
    """The deployment's revision when the run was admitted."""
    priority: int = 0
    """Default priority of its activities."""
    policy: str | None = None
    """Scheduling policy group."""
    deadline: float | None = None
    """When the run must have finished (epoch seconds)."""
    max_steps: int | None = None
    """Most node executions it may take."""
    steps_used: int = 0
    """Node executions taken so far."""
    output: Any = None
    """The run's output once completed (``None`` before)."""
    checkpoint: CheckpointView | None = None
    """What it had achieved when it last stopped."""
    awaiting: list[AwaitingInput] = msgspec.field(default_factory=list)
    """Interrupt nodes waiting for an answer."""
    resumes: list[ResumeMarkView] = msgspec.field(default_factory=list)
    """Its ``resume_run`` attempts."""
    trace: list[NodeTrace] = msgspec.field(default_factory=list)
    """Per-node trace, in plan order (empty while admitted)."""
    triggered_from: str | UnsetType = UNSET
    """Only in ``trigger_schedule``'s answer: the schedule that started it."""


class RunPage(View, frozen=True, kw_only=True):
    """One page of ``list_runs``."""

    runs: list[RunSummary]
    """Runs, oldest first (newest first with ``newest_first``)."""
    next_cursor: str | None
    """Pass back to get the next page; ``None`` on the last one."""
