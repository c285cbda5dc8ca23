"""What the core returns for a command: decisions to act on and records to persist.

*Decisions* are for the shell to carry out after the records are durable:
deliver a lease, tell a worker its lease was revoked, tell the runtime an
activity finished, notify operators. *Records* are the state changes, one per
lifecycle transition (WF-005 §5) plus worker, lease-renewal and cron
changes; the store appends them before anyone hears of the decisions
("persist before acknowledging"). Both are immutable msgspec structs tagged
by ``kind`` so that they encode as JSON and decode back to equal values.
"""

from __future__ import annotations

import msgspec

from wf.scheduler.model import Activity, ActivityState, Lease, WorkerInfo, WorkerStatus


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
    worker must not start it before this POSIX instant. Never set with ``started``."""


class LeaseRevoked(_Decision, frozen=True, kw_only=True, tag="lease_revoked"):
    """Tell the worker to stop: its lease is no longer valid (token fenced)."""

    worker_id: str
    activity_id: str
    token: int
    reason: str


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
    reason: str
    """``retries_exhausted``, ``non_retryable``, ``may_have_executed``,
    ``infra_requeues_exhausted`` or ``corrupt_record``."""
    error_type: str
    message: str
    may_have_executed: bool
    """True when external effects may already have happened."""


class RetryScheduled(_Decision, frozen=True, kw_only=True, tag="retry_scheduled"):
    """A failed attempt will be retried at ``not_before``."""

    activity_id: str
    attempt: int
    not_before: float


class WorkerFailed(_Decision, frozen=True, kw_only=True, tag="worker_failed"):
    """A worker was declared lost; its leases were revoked."""

    worker_id: str
    reason: str


class BackpressureChanged(_Decision, frozen=True, kw_only=True, tag="backpressure_changed"):
    """Operator notification: the backpressure level changed (WF-005 §20)."""

    previous: str
    level: str
    queue_depth: int
    utilization: float


class CronFired(_Decision, frozen=True, kw_only=True, tag="cron_fired"):
    """A recurring trigger fired and submitted ``activity_id``."""

    cron_id: str
    instant: float
    activity_id: str
    missed: int
    """Earlier instants coalesced into this firing (the scheduler was behind)."""
    refused: str | None = None
    """Set (``overloaded``) when backpressure refused this new-workflow start."""


Decision = (
    LeaseGranted
    | LeaseRevoked
    | ActivityCompleted
    | ActivityFailed
    | RetryScheduled
    | WorkerFailed
    | BackpressureChanged
    | CronFired
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


class LeaseRenewed(_Record, frozen=True, kw_only=True, tag="lease_renewed"):
    """A lease's new expiry."""

    activity_id: str
    token: int
    expires_at: float


class WorkerUpserted(_Record, frozen=True, kw_only=True, tag="worker_upserted"):
    """A worker's registration or status changed."""

    info: WorkerInfo
    seq: int
    status: WorkerStatus
    registered_at: float


class WorkerRemoved(_Record, frozen=True, kw_only=True, tag="worker_removed"):
    """A departed worker's retention ended: the core forgot it; the store deletes its row."""

    worker_id: str


class CronUpserted(_Record, frozen=True, kw_only=True, tag="cron_upserted"):
    """A recurring trigger was registered, or advanced to its next instant."""

    cron_id: str
    expression: str
    timezone: str
    next_fire_at: float
    template: Activity


class CronRemoved(_Record, frozen=True, kw_only=True, tag="cron_removed"):
    """A recurring trigger was removed."""

    cron_id: str


Record = (
    ActivitySubmitted
    | Transition
    | LeaseRenewed
    | WorkerUpserted
    | WorkerRemoved
    | CronUpserted
    | CronRemoved
)
"""Everything the store persists."""


class Outcome(msgspec.Struct, kw_only=True):
    """The result of one command."""

    decisions: list[Decision]
    records: list[Record]
