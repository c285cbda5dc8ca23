"""Runs: the durable document of one workflow execution, and its store row.

Theory of operation
-------------------
A :class:`Run` is everything the DAG engine knows about one execution: the
pinned snapshot (deployment revision, artifact id, version and content hash,
the merged and validated inputs), the run's status, one :class:`NodeRun` per
plan node, the output, the error that stopped it, the checkpoint taken when it
stopped, and the resume marks. The whole document is one row of the store's
``runs`` table (:class:`~wf.store.protocol.RunRow`), rewritten under an
optimistic revision at every transition, so a transition is atomic and a
second writer can never interleave with the owner unnoticed.

The per-attempt trace (which worker, when, what error) is *not* copied here:
it is the scheduler's own append-only history of the node's activity, read
by ``inspect_run`` (:mod:`wf.runtime.trace`). A run holds what only the
runtime knows.

Statuses (:class:`RunStatus`): ``admitted`` (stored, nothing started),
``running``, ``interrupted`` (nothing can progress without an answer to an
interrupt node), and the final ``completed``, ``failed``, ``exhausted``
(``max_steps`` spent) and ``cancelled``. A corrupt body is a
:class:`~wf.errors.CorruptRecord`: the run is reported, never guessed at.
"""

from __future__ import annotations

import enum
import hashlib
from typing import TYPE_CHECKING, Any, Final

import msgspec

from wf.errors import CorruptRecord
from wf.runtime.stored import decode_body
from wf.scheduler.model import Priority

if TYPE_CHECKING:
    from wf.store.protocol import RunRow

RUN_FORMAT: Final = 1
"""Version of the stored run document."""
RUN_BYTES_MAX: Final = 16 * 1024 * 1024
"""Largest stored run document, in encoded bytes (16 MiB; docs/workflows.md, "Limits").
Every transition rewrites the whole document and recovery reads every live one back,
so one run's size must stay bounded: a run that would grow past it fails closed with
``run_too_large`` (:mod:`wf.runtime.dag`, :class:`wf.runtime.engine.RunEngine`)."""
RUN_TOO_LARGE: Final = "run_too_large"
"""The :class:`RunError` code of a run stopped at :data:`RUN_BYTES_MAX`."""


class RunStatus(enum.StrEnum):
    """Where a run is in its life."""

    ADMITTED = "admitted"
    """Stored with its snapshot; no node has started (no trace, output or checkpoint)."""
    RUNNING = "running"
    """At least one node is submitted or waiting on a timer."""
    INTERRUPTED = "interrupted"
    """Only answers to interrupt nodes (``resume_run``) can make progress."""
    COMPLETED = "completed"
    """Every node completed; ``output`` is set."""
    FAILED = "failed"
    """A node failed for good, the deadline passed, or recovery failed it closed."""
    EXHAUSTED = "exhausted"
    """The next node would have exceeded ``max_steps``."""
    CANCELLED = "cancelled"
    """``cancel_run`` stopped it."""


FINAL_STATUSES: Final = frozenset(
    {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.EXHAUSTED, RunStatus.CANCELLED}
)
"""Statuses a run never leaves."""


class NodeStatus(enum.StrEnum):
    """Where one plan node is in a run."""

    PENDING = "pending"
    """Not started: an upstream node has not completed."""
    SUBMITTED = "submitted"
    """An activity node handed to the scheduler (queued, leased, executing or retrying)."""
    WAITING = "waiting"
    """A timer node armed until ``wake_at``."""
    AWAITING_INPUT = "awaiting_input"
    """An interrupt node waiting for ``resume_run``."""
    COMPLETED = "completed"
    """Finished with ``output``."""
    FAILED = "failed"
    """Failed for good (``error`` says why)."""
    CANCELLED = "cancelled"
    """Withdrawn because the run stopped first."""
    SKIPPED = "skipped"
    """Never run: a condition it needs did not hold, or its needs were skipped
    (docs/workflows.md, "Conditions"); its output reads as ``null``."""


class RunError(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Why a run (or a node) failed."""

    code: str
    """Stable cause: ``activity_failed``, ``may_have_executed``, ``activity_cancelled``,
    ``deadline_exceeded``, ``max_steps_exhausted``, ``output_unresolvable``,
    ``resume_ambiguous``, ``cancelled``, ``binding_failed``, ``too_many_items`` (a map
    node's list is longer than its ``max_items``) or ``run_too_large`` (a result would
    take the stored run past :data:`RUN_BYTES_MAX`)."""
    message: str
    """A sentence for people."""
    node: str | None = None
    """The node that caused it, if one did."""
    error_type: str | None = None
    """The activity's error type (its exception class name), if any."""
    may_have_executed: bool = False
    """External effects of the failed attempt may already have happened."""


class NodeRun(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One node's state in a run."""

    status: NodeStatus = NodeStatus.PENDING
    """Where the node is."""
    activity_id: str | None = None
    """The scheduler activity of an activity node (once submitted)."""
    started_at: float | None = None
    """When the node started (submitted, armed or began awaiting input)."""
    finished_at: float | None = None
    """When it completed, failed or was cancelled."""
    wake_at: float | None = None
    """A timer node's instant."""
    output: Any = None
    """The output (only meaningful once completed)."""
    error: RunError | None = None
    """Why it failed."""
    items: list[NodeRun] | None = None
    """A map node's items, one state each (set when it starts; an item's own output is
    dropped once the node gathers them into its output)."""


class Trigger(msgspec.Struct, frozen=True, kw_only=True):
    """What started a run."""

    kind: str = "manual"
    """``manual`` (start_run) or ``schedule`` (a deployment schedule's occurrence)."""
    schedule_id: str | None = None
    """The schedule, for scheduled runs."""
    occurrence: float | None = None
    """The occurrence's resolved UTC instant, for scheduled runs."""


class ResumeMark(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One ``resume_run`` attempt, stored *before* the answer is applied (004)."""

    attempt: int
    """1, 2, ... per run."""
    node: str
    """The interrupt node answered."""
    at: float
    """When the attempt was marked."""
    base_revision: int
    """The run revision the attempt read; the answer applies only on top of it."""
    state: str = "started"
    """``started``, ``applied``, ``rejected`` (bad answer) or ``abandoned`` (the process
    stopped between the mark and the answer; the store shows the answer was not applied)."""
    finished_at: float | None = None
    """When the attempt ended."""


class Checkpoint(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What a run had achieved when it stopped (interrupted or final)."""

    at: float
    """When it was taken."""
    status: RunStatus
    """The run status it was taken for."""
    revision: int
    """The run revision that stored it."""
    completed: dict[str, Any] = msgspec.field(default_factory=dict)
    """Outputs of the completed nodes."""
    awaiting: list[str] = msgspec.field(default_factory=list)
    """Interrupt nodes waiting for an answer."""


class Run(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The durable document of one run (see the module docstring)."""

    run_id: str
    """``run-000001`` style, store-assigned, never reused."""
    deployment_id: str
    """The deployment that ran."""
    deployment_revision: int
    """The deployment's revision at admission (its settings are pinned below)."""
    artifact_id: str
    """The pinned artifact."""
    artifact_version: int
    """The pinned artifact version."""
    content_hash: str
    """The pinned plan's content hash (checked whenever the plan is loaded)."""
    tenant: str
    """Owning tenant."""
    priority: Priority
    """Default priority of its activities."""
    inputs: dict[str, Any]
    """The pinned inputs: deployment defaults overlaid with the caller's."""
    created_at: float
    """When it was admitted."""
    status: RunStatus = RunStatus.ADMITTED
    """Where it is."""
    format: int = RUN_FORMAT
    """Document version."""
    policy: str | None = None
    """Scheduling policy group of its activities."""
    max_steps: int | None = None
    """Most node starts allowed (``None``: unbounded)."""
    deadline: float | None = None
    """Instant by which it must finish (``None``: none)."""
    trigger: Trigger = msgspec.field(default_factory=Trigger)
    """What started it."""
    steps_used: int = 0
    """Node starts so far (retries of one node are the same step)."""
    nodes: dict[str, NodeRun] = msgspec.field(default_factory=dict)
    """Per-node state, one entry per plan node once started."""
    started_at: float | None = None
    """When it left ``admitted``."""
    finished_at: float | None = None
    """When it reached a final status."""
    output: dict[str, Any] | None = None
    """The evaluated output mapping (completed runs)."""
    error: RunError | None = None
    """Why it stopped, for failed, exhausted and cancelled runs."""
    checkpoint: Checkpoint | None = None
    """Taken when it stopped (interrupted or final); never for an admitted run."""
    resumes: list[ResumeMark] = msgspec.field(default_factory=list)
    """Every resume attempt, oldest first."""
    request_id: str | None = None
    """The client's request id it was started under (unique per tenant; stored in the
    runs table too): a retry naming it answers this run (docs/workflows.md)."""
    request_digest: str | None = None
    """What that request asked for (:func:`request_digest`): a later call naming the
    same request id with another request is refused (``already_exists``)."""
    revision: int = 0
    """The store revision this document was read at (not part of the body)."""
    size: int = 0
    """Running size: the encoded bytes of the body as last read or stored, plus the
    results accepted since (not part of the body); what :data:`RUN_BYTES_MAX` is
    checked against without encoding the document again."""

    @property
    def final(self) -> bool:
        """Whether the run can no longer change."""
        return self.status in FINAL_STATUSES


_encoder: Final = msgspec.json.Encoder(order="sorted")
_decoder: Final = msgspec.json.Decoder(Run)


def run_row(run: Run, *, seq: int, updated_at: float) -> RunRow:
    """The store row of ``run`` at ``run.revision``."""
    # Imported here: the DAG engine uses this module, and must not load the store.
    from wf.store.protocol import RunRow

    body = _encoder.encode(msgspec.structs.replace(run, revision=0, size=0))
    return RunRow(
        run_id=run.run_id,
        seq=seq,
        deployment_id=run.deployment_id,
        tenant=run.tenant,
        status=str(run.status),
        schedule_id=run.trigger.schedule_id,
        body=body,
        revision=run.revision,
        created_at=run.created_at,
        updated_at=updated_at,
        request_id=run.request_id,
    )


def request_digest(kind: str, target: str, inputs: dict[str, Any] | None = None) -> str:
    """A digest of what a request asked for: ``kind`` (``start`` or ``trigger``), the
    deployment or schedule it names and the inputs it gave (none and ``{}`` alike),
    so two calls under one request id can be told apart without keeping the request."""
    canonical = _encoder.encode({"kind": kind, "target": target, "inputs": inputs or {}})
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


def run_from_row(row: RunRow) -> Run:
    """The run a store row holds; :class:`CorruptRecord` if it does not decode or
    contradicts its row."""
    run = decode_body(_decoder.decode, row.body, "runs", row.run_id)
    if run.run_id == "":
        # Written in the transaction that numbered it: the store assigned the id.
        run.run_id = row.run_id
    if run.run_id != row.run_id or str(run.status) != row.status:
        raise CorruptRecord(
            f"run {row.run_id!r}: body names {run.run_id!r} status {run.status}, "
            f"row status {row.status}",
            table="runs",
            key=row.run_id,
        )
    run.revision = row.revision
    run.size = len(row.body)
    return run


def run_seq(run_id: str) -> int:
    """The number in a ``run-000001`` id (``-1`` if it is not one)."""
    prefix, _, number = run_id.partition("-")
    # isascii: str.isdigit also accepts digits int() refuses (superscripts) or
    # reads differently (other scripts); run ids are ASCII.
    return int(number) if prefix == "run" and number.isascii() and number.isdigit() else -1


def activity_id_for(run_id: str, node_id: str) -> str:
    """The scheduler activity id of a run's activity node."""
    return f"{run_id}.{node_id}"


def node_of_activity(activity_id: str) -> tuple[str, str] | None:
    """``(run_id, node_id)`` of a run's activity id, or ``None`` for other activities."""
    run_id, dot, node_id = activity_id.partition(".")
    if not dot or run_seq(run_id) < 0:
        return None
    return run_id, node_id
