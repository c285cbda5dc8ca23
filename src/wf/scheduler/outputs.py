"""What the core returns for a command: decisions to act on and records to persist.

*Decisions* are for the shell to carry out after the records are durable:
deliver a lease, tell a worker its lease was revoked, tell the runtime an
activity finished, notify operators. *Records* are the state changes, one per
lifecycle transition (WF-005 §5) plus worker and lease-renewal changes; the
store appends them before anyone hears of the decisions
("persist before acknowledging"). Both are immutable msgspec structs tagged
by ``kind`` so that they encode as JSON and decode back to equal values.
"""

from __future__ import annotations

import msgspec

from wf.scheduler.model import (
    Activity,
    ActivityState,
    CancelOrigin,
    Lease,
    TransitionReason,
    WorkerInfo,
    WorkerStatus,
)


class _Decision(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind"):
    pass


class LeaseGranted(_Decision, frozen=True, kw_only=True, tag="lease_granted"):
    """Deliver this lease (and what the worker needs to run it) to its worker."""

    lease: Lease
    activity_type: str
    workflow_id: str
    correlation_id: str
    payload: bytes
    started: bool = False
    """The grant is also the start (the poll's ``start``): the activity is already
    ``EXECUTING``; the worker runs it at once and must not report ``StartActivity``."""
    may_restart: bool = False
    """The activity may run again (idempotent or ``restart_on_abandon``), so the worker
    may begin it before its start is acknowledged and report the start with the
    result (``unreported_start``): a start the server never learns of is harmless, the
    lease simply expires and the activity is requeued."""
    not_before: float | None = None
    """Set on a grant made before the activity's due instant (``early_grant_s``): the
    worker must not start it before this POSIX instant. With ``started`` the start is
    already committed: the worker holds the slot and begins the activity at this
    instant on its own timer, with no start round trip, even while it drains."""


class LeaseRevoked(_Decision, frozen=True, kw_only=True, tag="lease_revoked"):
    """Tell the worker to stop: its lease is no longer valid (token fenced)."""

    worker_id: str
    activity_id: str
    token: int
    reason: str
    """The :class:`~wf.scheduler.model.TransitionReason` that ended the lease, or a
    cancel's own text."""


class ActivityCompleted(_Decision, frozen=True, kw_only=True, tag="activity_completed"):
    """The activity finished; the runtime advances its workflow."""

    activity_id: str
    workflow_id: str
    correlation_id: str
    attempt: int
    result: bytes


class ActivityFailed(_Decision, frozen=True, kw_only=True, tag="activity_failed"):
    """The activity failed for good; the runtime fails or compensates its workflow."""

    activity_id: str
    workflow_id: str
    correlation_id: str
    attempt: int
    reason: TransitionReason
    """``retries_exhausted``, ``non_retryable``, ``may_have_executed`` or
    ``infra_requeues_exhausted``."""
    error_type: str
    message: str
    may_have_executed: bool
    """True when external effects may already have happened."""


class ActivityCancelled(_Decision, frozen=True, kw_only=True, tag="activity_cancelled"):
    """The activity was withdrawn by a ``Cancel``; its lease, if any, was revoked."""

    activity_id: str
    workflow_id: str
    correlation_id: str
    origin: CancelOrigin
    """Who sent the cancel: the run engine treats an ``operator`` cancel of a run's
    activity as news (the node fails) and ignores its own (``run``)."""
    reason: str
    """The text the cancel's issuer gave (free text, for people)."""


class RetryScheduled(_Decision, frozen=True, kw_only=True, tag="retry_scheduled"):
    """A failed attempt will be retried at ``not_before``."""

    activity_id: str
    attempt: int
    not_before: float


class WorkerFailed(_Decision, frozen=True, kw_only=True, tag="worker_failed"):
    """A worker was declared lost; its leases were revoked."""

    worker_id: str
    reason: TransitionReason
    """``missed_heartbeats`` or ``infrastructure_failure``."""


class BackpressureChanged(_Decision, frozen=True, kw_only=True, tag="backpressure_changed"):
    """Operator notification: the backpressure level changed (WF-005 §20)."""

    previous: str
    level: str
    queue_depth: int
    utilization: float


Decision = (
    LeaseGranted
    | LeaseRevoked
    | ActivityCompleted
    | ActivityFailed
    | ActivityCancelled
    | RetryScheduled
    | WorkerFailed
    | BackpressureChanged
)
"""Everything the core may ask the shell to do."""


class _Record(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind"):
    at: float
    """The command's ``now``."""


class ActivitySubmitted(_Record, frozen=True, kw_only=True, tag="activity_submitted"):
    """A new activity, as accepted (state ``ready``)."""

    activity: Activity


class Transition(_Record, frozen=True, kw_only=True, tag="transition"):
    """One lifecycle transition (WF-005 §5) with the counters after it."""

    activity_id: str
    from_state: ActivityState
    to_state: ActivityState
    reason: str
    """A :class:`~wf.scheduler.model.TransitionReason` value; a cancel's is its
    issuer's text and a steal's grant ``stolen_from:<victim>`` (see there). Typed
    ``str`` so that every stored history decodes as it was written."""
    attempt: int
    failures: int
    infra_requeues: int
    steals: int = 0
    token: int
    worker_id: str | None = None
    lease_expires_at: float = 0.0
    not_before: float | None = None
    error: str | None = None
    result: bytes | None = None
    """The result reported with a completion; only on transitions to ``COMPLETED``."""
    stack_trace: str | None = None
    """The stack trace a worker reported with a failed attempt; only on the transition
    that ends that attempt (retried or failed for good)."""


class LeaseRenewed(_Record, frozen=True, kw_only=True, tag="lease_renewed"):
    """A lease's new expiry."""

    activity_id: str
    token: int
    expires_at: float
    details: bytes | None = None
    """Heartbeat details sent with the renewal (the store keeps the latest per activity)."""


class WorkerUpserted(_Record, frozen=True, kw_only=True, tag="worker_upserted"):
    """A worker's registration or status changed."""

    info: WorkerInfo
    seq: int
    status: WorkerStatus
    registered_at: float


class WorkerRemoved(_Record, frozen=True, kw_only=True, tag="worker_removed"):
    """A departed worker's retention ended: the core forgot it; the store deletes its row."""

    worker_id: str


Record = ActivitySubmitted | Transition | LeaseRenewed | WorkerUpserted | WorkerRemoved
"""Everything the store persists."""


class Outcome(msgspec.Struct, kw_only=True):
    """The result of one command."""

    decisions: list[Decision]
    records: list[Record]
