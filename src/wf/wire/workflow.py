"""The workflow documents that cross the wire: plans, artifacts, deployments, pages.

These are data only. Their rules live in the runtime: :mod:`wf.runtime.plan`
validates a plan, computes its canonical form and hash, and resolves its
bindings; :mod:`wf.runtime.artifacts` and :mod:`wf.runtime.deployments`
store and check the rest. Those modules re-export the structs, so
``wf.runtime.Plan`` and this ``Plan`` are one class; they live here so that
the ``App`` client can decode a ``workflow.*`` answer without loading the
runtime, the node or the store.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, TypeAlias

import msgspec

from wf.scheduler.model import DEFAULT_RETRY, Priority, RetryPolicy
from wf.scheduler.timer import DelaySpec
from wf.wire.views import View

PLAN_FORMAT: Final = 1
"""The plan format version this code writes and reads."""
NODES_MAX: Final = 1_000
"""Most nodes one plan may hold."""
VERSION_MAX: Final = 2**31 - 1
"""Highest artifact version."""
MAP_ITEMS_MAX: Final = 1_000
"""Hard cap on a map node's ``max_items`` (items one fan-out may run)."""
MAP_ITEMS_DEFAULT: Final = 100
"""A map node's ``max_items`` when the plan does not say."""

SkipWhen: TypeAlias = Literal["any_skipped", "all_skipped"]
"""When a node is skipped because of its ``needs`` (docs/workflows.md, "Conditions"):
``any_skipped`` (the default) when any need was skipped or is a condition that did
not hold; ``all_skipped`` only when every need was (a join after branches)."""

Bindings: TypeAlias = dict[str, Any]
"""Names to binding expressions (see :mod:`wf.runtime.plan`)."""


def _no_schema() -> dict[str, Any]:
    return {"type": "object"}


EXPRESSION_OPS: Final = ("and", "eq", "exists", "ge", "gt", "in", "le", "lt", "ne", "not", "or")
"""The operators of a condition expression (:mod:`wf.runtime.expr`)."""

_EXPRESSION_SCHEMA: Final[dict[str, Any]] = {
    "description": 'A condition expression: {"op": OP, "args": [...]}. eq/ne/lt/le/gt/ge/in '
    "take two operands (bindings), exists one reference, and/or one or more "
    "expressions, not exactly one.",
    "required": ["op", "args"],
    "properties": {
        "op": {"enum": list(EXPRESSION_OPS)},
        "args": {"type": "array", "minItems": 1},
    },
    "additionalProperties": False,
}

Expression: TypeAlias = Annotated[
    dict[str, Any], msgspec.Meta(extra_json_schema=_EXPRESSION_SCHEMA)
]
"""A condition node's ``when`` (checked by :mod:`wf.runtime.expr` when a plan is created)."""

ItemsBinding: TypeAlias = Annotated[
    dict[str, Any],
    msgspec.Meta(
        description='The list a map node fans out over: {"$input": name} or '
        '{"$node": id, "path": "a.b"}.'
    ),
]
"""A map node's ``items``: a reference that resolves to a list."""


# -------------------------------------------------------------------- plans


class ActivityNode(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    omit_defaults=True,
    forbid_unknown_fields=True,
    tag_field="kind",
    tag="activity",
):
    """Run one activity on a worker; its output is the activity's result."""

    id: str
    """Node id, unique in the plan (see :data:`wf.runtime.plan.ID_RE`)."""
    activity_type: str
    """The activity type a worker registered."""
    args: Bindings = msgspec.field(default_factory=dict)
    """Argument name to binding (run inputs, upstream outputs, literals)."""
    needs: tuple[str, ...] = ()
    """Upstream node ids that must complete first."""
    skip_when: SkipWhen = "any_skipped"
    """When the node is skipped because of its needs (see :data:`SkipWhen`)."""
    capabilities: frozenset[str] = frozenset()
    """Capabilities a worker must advertise to take it."""
    priority: Priority | None = None
    """Scheduling priority; ``None`` takes the deployment's."""
    retry: RetryPolicy = DEFAULT_RETRY
    """Retry policy for the activity's own failures."""
    timeout_s: float | None = None
    """Most seconds one attempt may run; ``None``: no limit of its own."""
    schedule_to_start_s: float | None = None
    """Most seconds its activity may wait in the ready queue for a worker each time it
    is queued: past that the attempt fails (``ScheduleToStartTimeout``, retryable, so
    ``retry`` applies); ``None``: it waits as long as it takes."""
    idempotent: bool = False
    """May be rerun safely after its executing worker was lost."""


class InterruptNode(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    omit_defaults=True,
    forbid_unknown_fields=True,
    tag_field="kind",
    tag="interrupt",
):
    """Wait for external input; its output is the answer given to ``resume_run``."""

    id: str
    """Node id, unique in the plan."""
    prompt: str
    """What the run asks for, shown to whoever answers."""
    needs: tuple[str, ...] = ()
    """Upstream node ids that must complete first."""
    skip_when: SkipWhen = "any_skipped"
    """When the node is skipped because of its needs (see :data:`SkipWhen`)."""
    input_schema: dict[str, Any] = msgspec.field(default_factory=_no_schema)
    """JSON Schema the answer must satisfy."""


class TimerNode(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    omit_defaults=True,
    forbid_unknown_fields=True,
    tag_field="kind",
    tag="timer",
):
    """Wait until a durable timer fires (relative, absolute, zoned or calendar)."""

    id: str
    """Node id, unique in the plan."""
    delay: DelaySpec
    """When it fires, counted from the moment the node becomes ready."""
    needs: tuple[str, ...] = ()
    """Upstream node ids that must complete first."""
    skip_when: SkipWhen = "any_skipped"
    """When the node is skipped because of its needs (see :data:`SkipWhen`)."""


class ConditionNode(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    omit_defaults=True,
    forbid_unknown_fields=True,
    tag_field="kind",
    tag="condition",
):
    """Evaluate an expression over inputs and upstream outputs; its output is the
    boolean, and the nodes that need it are skipped when it is false."""

    id: str
    """Node id, unique in the plan."""
    when: Expression
    """The expression (``{"op": ..., "args": [...]}``, see :mod:`wf.runtime.expr`)."""
    needs: tuple[str, ...] = ()
    """Upstream node ids that must complete first."""
    skip_when: SkipWhen = "any_skipped"
    """When the node is skipped because of its needs (see :data:`SkipWhen`)."""


class MapNode(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    omit_defaults=True,
    forbid_unknown_fields=True,
    tag_field="kind",
    tag="map",
):
    """Run one activity per item of a list; its output is their results, in order."""

    id: str
    """Node id, unique in the plan."""
    activity_type: str
    """The activity type a worker registered (run once per item)."""
    items: ItemsBinding
    """Binding that resolves to the list to fan out over (a run input or upstream output)."""
    args: Bindings = msgspec.field(default_factory=dict)
    """Argument name to binding; ``{"$item": "path"}`` is the current item (``""``: whole)."""
    max_items: int = MAP_ITEMS_DEFAULT
    """Most items (1..:data:`MAP_ITEMS_MAX`); a longer list fails the node."""
    concurrency: int | None = None
    """Most items in flight at once (``None``: all)."""
    needs: tuple[str, ...] = ()
    """Upstream node ids that must complete first."""
    skip_when: SkipWhen = "any_skipped"
    """When the node is skipped because of its needs (see :data:`SkipWhen`)."""
    capabilities: frozenset[str] = frozenset()
    """Capabilities a worker must advertise to take an item."""
    priority: Priority | None = None
    """Scheduling priority; ``None`` takes the deployment's."""
    retry: RetryPolicy = DEFAULT_RETRY
    """Retry policy of each item's activity."""
    timeout_s: float | None = None
    """Most seconds one attempt of an item may run."""
    schedule_to_start_s: float | None = None
    """Most seconds an item's activity may wait in the ready queue (as for an
    activity node)."""
    idempotent: bool = False
    """An item may be rerun safely after its executing worker was lost."""


Node: TypeAlias = ActivityNode | InterruptNode | TimerNode | ConditionNode | MapNode
"""Any plan node (tagged by ``kind``)."""


class Plan(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, forbid_unknown_fields=True
):
    """A workflow definition: a DAG of nodes, an input schema and an output mapping."""

    nodes: Annotated[list[Node], msgspec.Meta(max_length=NODES_MAX)]
    """The nodes, in any order (dependencies come from ``needs``)."""
    input_schema: dict[str, Any] = msgspec.field(default_factory=_no_schema)
    """JSON Schema a run's inputs must satisfy."""
    output: Bindings = msgspec.field(default_factory=dict)
    """Output name to binding, evaluated when every node has completed or was skipped."""
    format: int = PLAN_FORMAT
    """Plan format version."""


# ---------------------------------------------------------------- artifacts


class Artifact(View, frozen=True, kw_only=True):
    """One version of a plan, as stored."""

    artifact_id: str
    """Artifact id (lower-case letters, digits, ``_``; see :data:`wf.runtime.plan.ID_RE`)."""
    version: int
    """Version, 1..:data:`VERSION_MAX`, chosen by the creator."""
    plan: Plan
    """The plan (validated)."""
    content_hash: str
    """``sha256:<hex>`` of the plan's canonical JSON."""
    created_at: float
    """When this version was first stored (POSIX seconds)."""


class ArtifactPage(View, frozen=True, kw_only=True):
    """One page of ``list_artifacts``."""

    artifacts: list[Artifact]
    """Artifact versions, by id then version."""
    next_cursor: str | None
    """Pass back to get the next page; ``None`` on the last one."""


# -------------------------------------------------------------- deployments


class Deployment(View, frozen=True, kw_only=True, omit_defaults=True):
    """A saved deployment."""

    deployment_id: str
    """``<artifact_id>.<name>``."""
    artifact_id: str
    """The artifact deployed."""
    artifact_version: int
    """The pinned version."""
    name: str
    """Deployment name."""
    default_inputs: dict[str, Any] = msgspec.field(default_factory=dict)
    """Inputs a run gets unless it names them itself."""
    tenant: str = "default"
    """Tenant of its runs."""
    priority: Priority = Priority.NORMAL
    """Default priority of its activities."""
    policy: str | None = None
    """Scheduling policy group (``None``: the server's default)."""
    max_steps: int | None = None
    """Most node executions one run may take."""
    run_deadline_s: float | None = None
    """Seconds a run may take from its start."""
    created_at: float = 0.0
    """When revision 1 was saved (POSIX seconds)."""
    updated_at: float = 0.0
    """When this revision was saved."""
    revision: int = 0
    """Raised by one on every save, starting at 1."""


class DeploymentPage(View, frozen=True, kw_only=True):
    """One page of ``list_deployments``."""

    deployments: list[Deployment]
    """Deployments, by id."""
    next_cursor: str | None
    """Pass back to get the next page; ``None`` on the last one."""
