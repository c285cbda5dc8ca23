"""The scheduler's data model: activities, workers, leases and the lifecycle table.

Theory of operation
-------------------
Time in the core is one float, ``now``: seconds since the POSIX epoch (UTC) as
the shell's clock reports it. The shell keeps that clock monotonic (it never
goes backwards, even when the wall clock is stepped) and anchored to wall time,
so lease expiries persisted before a restart still mean something after it.

An :class:`Activity` is mutable and owned by exactly one core; everything the
core hands out (leases, decisions, records) is an immutable value. The
lifecycle of WF-005 §5 is the table :data:`TRANSITIONS`; the core changes
``Activity.state`` in one place (``SchedulerCore._to``), which looks the edge
up in the table and raises :class:`~wf.errors.IllegalTransition` before
anything changes; :func:`check_transition` is the same check for code outside
the core (a history read back from a store). Why an edge was taken is a
:class:`TransitionReason`; why a ``Cancel`` was sent is its
:class:`CancelOrigin`, never its text.

``READY`` is the state of a just-submitted activity while the core decides
where it goes (queue, timer, ordering hold); ``DELAYED`` is WF-005 §17's
dormant state.
"""

from __future__ import annotations

import enum
from typing import Annotated, Final

import msgspec

from wf.errors import IllegalTransition
from wf.scheduler.timer import DelaySpec
from wf.wire.bounds import (
    CONCURRENCY_MAX,
    DURATION_MAX_S,
    Count,
    Fraction,
    Id,
    Name,
    PositiveCount,
    Seconds,
)

_NAMES_MAX: Final = 256
"""Most entries in a set or map of names (capabilities, labels, types, tenants)."""
NameSet = Annotated[frozenset[Name], msgspec.Meta(max_length=_NAMES_MAX)]
"""A bounded set of names, as registrations and retry policies carry them."""
_LeaseStatus = Annotated[dict[Id, Name], msgspec.Meta(max_length=CONCURRENCY_MAX)]


class Priority(enum.IntEnum):
    """WF-005 §10 priority levels; a lower value is dispatched first."""

    CRITICAL = 0
    """Immediate execution."""
    HIGH = 1
    """Elevated importance."""
    NORMAL = 2
    """The default."""
    LOW = 3
    """Background processing."""


class ActivityState(enum.StrEnum):
    """The lifecycle of WF-005 §5, plus the dormant and cancelled states."""

    READY = "ready"
    """Submitted; the core is placing it (queue, timer or ordering hold)."""
    DELAYED = "delayed"
    """Dormant until its ``not_before`` instant (WF-005 §17)."""
    QUEUED = "queued"
    """In the ready queue (or held behind an earlier activity of its ordering key)."""
    LEASED = "leased"
    """Granted to a worker under a lease; the worker has not reported a start."""
    EXECUTING = "executing"
    """The worker reported that it started executing."""
    COMPLETED = "completed"
    """Finished with a result (terminal)."""
    FAILED = "failed"
    """Finished without a result (terminal)."""
    CANCELLED = "cancelled"
    """Withdrawn by its owner (terminal)."""


TERMINAL_STATES: Final = frozenset(
    {ActivityState.COMPLETED, ActivityState.FAILED, ActivityState.CANCELLED}
)
"""States an activity never leaves."""

_S = ActivityState
TRANSITIONS: Final[dict[ActivityState, frozenset[ActivityState]]] = {
    _S.READY: frozenset({_S.QUEUED, _S.DELAYED}),
    _S.DELAYED: frozenset({_S.QUEUED, _S.CANCELLED}),
    # QUEUED -> DELAYED/FAILED: its schedule-to-start timeout passed (a failed
    # attempt, retried by its policy), the only way a queued activity fails.
    _S.QUEUED: frozenset({_S.LEASED, _S.CANCELLED, _S.DELAYED, _S.FAILED}),
    # LEASED -> QUEUED: lease lost before start (expiry, worker loss, steal, return).
    # LEASED -> FAILED: the infrastructure requeue budget ran out.
    _S.LEASED: frozenset({_S.EXECUTING, _S.QUEUED, _S.CANCELLED, _S.FAILED}),
    # EXECUTING -> QUEUED/DELAYED: a retry, or an abandoned idempotent activity.
    _S.EXECUTING: frozenset({_S.COMPLETED, _S.FAILED, _S.QUEUED, _S.DELAYED, _S.CANCELLED}),
    _S.COMPLETED: frozenset(),
    _S.FAILED: frozenset(),
    _S.CANCELLED: frozenset(),
}
"""Allowed lifecycle transitions: ``TRANSITIONS[a]`` is every state reachable from ``a``."""


class TransitionReason(enum.StrEnum):
    """Why the core moved an activity: the ``reason`` of a
    :class:`~wf.scheduler.outputs.Transition`.

    The values are the strings stores and the wire have always carried, so a
    stored history reads the same. Two reasons carry more text in the record: a
    cancel records the text its issuer gave (:attr:`CANCELLED` when none), and
    a stolen lease's new grant records ``stolen_from:<victim worker id>``.
    """

    SUBMITTED = "submitted"
    """``ready -> queued``: accepted and due now."""
    DELAYED = "delayed"
    """``ready -> delayed``: accepted with a later ``not_before`` (WF-005 §17)."""
    TIMER = "timer"
    """``delayed -> queued``: its instant came (``early_grant_s`` early)."""
    GRANTED = "granted"
    """``queued -> leased``: dispatched to a waiting worker."""
    STARTED = "started"
    """``leased -> executing``: the holder began it (or the grant was its start)."""
    COMPLETED = "completed"
    """``executing -> completed``: finished with a result."""
    RETRY = "retry"
    """``executing -> delayed | queued``: a failed attempt will run again."""
    NON_RETRYABLE = "non_retryable"
    """``executing -> failed``: the error may not be retried."""
    RETRIES_EXHAUSTED = "retries_exhausted"
    """``executing | queued -> failed``: ``retry.max_attempts`` used up."""
    SCHEDULE_TO_START_TIMEOUT = "schedule_to_start_timeout"
    """``queued -> delayed``: it waited in the ready queue longer than its
    ``schedule_to_start_s``, a failed attempt to be retried (``queued -> failed`` when
    that was the last attempt: :attr:`RETRIES_EXHAUSTED`)."""
    START_TO_CLOSE_TIMEOUT = "start_to_close_timeout"
    """``executing -> delayed | queued``: the attempt ran longer than its
    ``start_to_close_s``; its lease is revoked and it counts as a failed attempt to be
    retried (``executing -> failed`` when that was the last: :attr:`RETRIES_EXHAUSTED`)."""
    MAY_HAVE_EXECUTED = "may_have_executed"
    """``executing -> failed``: the lease was lost mid-execution and the activity may
    not run twice (neither idempotent nor ``restart_on_abandon``)."""
    INFRA_REQUEUES_EXHAUSTED = "infra_requeues_exhausted"
    """``leased | executing -> failed``: lost leases requeued it too often."""
    LEASE_EXPIRED = "lease_expired"
    """``leased | executing -> queued``: the lease lapsed unrenewed."""
    RETURNED = "returned"
    """``leased -> queued``: a draining worker handed back an unstarted lease."""
    MISSED_HEARTBEATS = "missed_heartbeats"
    """``leased | executing -> queued``: its worker was declared lost (silence)."""
    INFRASTRUCTURE_FAILURE = "infrastructure_failure"
    """``leased | executing -> queued``: its worker was reported lost (``WorkersLost``)."""
    STOLEN = "stolen"
    """``leased -> queued``: an idle worker takes the unstarted lease (work stealing)."""
    LEASE_ABANDONED = "lease_abandoned"
    """``leased | executing -> queued`` (or ``executing -> failed`` by the usual rule): its
    worker registered again listing the leases it holds, and this one was not among
    them (``RegisterWorker.held``): the worker no longer has it, so it is requeued at
    once instead of waiting for its expiry."""
    STOLEN_FROM = "stolen_from"
    """``queued -> leased``: the thief's grant; recorded as ``stolen_from:<victim>``."""
    CANCELLED = "cancelled"
    """``* -> cancelled``: withdrawn by a ``Cancel`` (see :class:`CancelOrigin`)."""


class CancelOrigin(enum.StrEnum):
    """Who sent a ``Cancel``: listeners decide by this, never by the reason's text."""

    OPERATOR = "operator"
    """A caller of the API (an operator, a client, a test): news for the run engine."""
    RUN = "run"
    """The run engine itself, withdrawing the work of a run that stopped."""


def check_transition(activity_id: str, current: ActivityState, target: ActivityState) -> None:
    """Raise :class:`IllegalTransition` unless ``current -> target`` is in the table."""
    if target not in TRANSITIONS[current]:
        raise IllegalTransition(
            f"activity {activity_id!r} cannot go from {current.value} to {target.value}",
            activity_id=activity_id,
            current=current.value,
            target=target.value,
        )


class RetryPolicy(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, forbid_unknown_fields=True
):
    """How the core retries an activity's own failures (not infrastructure losses)."""

    max_attempts: PositiveCount = 3
    """Execution attempts allowed in total, the first included (1 = never retry)."""
    initial_backoff_s: Seconds = 1.0
    """Delay before the second attempt."""
    backoff_coefficient: Annotated[float, msgspec.Meta(ge=1.0, le=1000.0)] = 2.0
    """Each later delay is the previous one times this."""
    max_backoff_s: Seconds = 300.0
    """Upper bound of one delay."""
    jitter_fraction: Fraction = 0.1
    """Deterministic jitter: up to this fraction of the delay, derived from id and attempt."""
    non_retryable_errors: NameSet = frozenset()
    """Error types that fail the activity at once."""
    restart_on_abandon: bool = False
    """Rerun a non-idempotent activity whose executing worker was lost (explicit opt-in)."""


DEFAULT_RETRY: Final = RetryPolicy()


class Activity(msgspec.Struct, kw_only=True, gc=False, forbid_unknown_fields=True):
    """One schedulable unit of work and its scheduling state.

    The first block of fields is the submission (fixed once accepted); the
    second is state the core maintains.
    """

    activity_id: str
    """Unique, caller-chosen id."""
    activity_type: str
    """Which activity implementation runs it; workers declare the types they run."""
    workflow_id: str = ""
    """The run (workflow instance) this activity belongs to."""
    tenant: str = "default"
    """Owning tenant, for isolation, fairness and tenant limits."""
    priority: Priority = Priority.NORMAL
    """WF-005 §10 level."""
    deadline: float | None = None
    """The workflow's deadline (scheduler time), for deadline-first ordering."""
    capabilities: frozenset[str] = frozenset()
    """Capabilities a worker must advertise to run it (hard rule)."""
    locality: str | None = None
    """Preferred worker ``locality`` label (soft preference)."""
    region: str | None = None
    """Region, for partitioning by region."""
    idempotent: bool | None = None
    """Safe to run twice; abandoned executions of it are simply requeued. ``None``
    (not said): as the activity type's declaration on the worker holding the lease
    says (:attr:`WorkerInfo.declared`), else ``False`` (docs/server.md, "Declared
    defaults")."""
    correlation_id: str = ""
    """The workflow correlation id carried into logs, traces and decisions."""
    ordering_key: str | None = None
    """Activities sharing a key start one at a time, in submission order."""
    policy: str | None = None
    """Scheduling policy group (per deployment); ``None`` selects the configured default."""
    new_workflow: bool = False
    """This submission starts a workflow; backpressure may refuse it."""
    not_before: float | None = None
    """Dormant until this instant (WF-005 §17)."""
    delay: DelaySpec | None = None
    """A relative delay, absolute instant, zoned wall time or calendar (cron) spec;
    the core resolves it into ``not_before`` against the submission's ``now``."""
    retry: RetryPolicy = DEFAULT_RETRY
    """Retry policy for the activity's own failures. The server's default (equal to
    :data:`DEFAULT_RETRY`) counts as not said: the activity type's declared policy,
    if the lease holder declares one, applies instead."""
    payload: bytes = b""
    """Opaque arguments for the worker; the scheduler never reads them."""
    renewable: bool = True
    """Whether its leases may be renewed (a non-renewable lease must finish within the TTL)."""
    schedule_to_start_s: float | None = None
    """Most seconds it may wait in the ready queue for a worker each time it is queued:
    past that, the waiting counts as a failed attempt (``ScheduleToStartTimeout``,
    retryable: the retry policy applies). ``None``: it waits as long as it takes."""
    start_to_close_s: float | None = None
    """Most seconds one attempt may execute, from its start: past that, the server
    revokes the lease (its worker cancels the code) and the attempt counts as failed
    (``StartToCloseTimeout``, retryable: the retry policy applies). ``None``: as the
    lease holder declares (:attr:`ActivityDefaults.start_to_close_s`), else unbounded
    (the lease TTL bounds a holder's silence, not an attempt's length)."""

    state: ActivityState = ActivityState.READY
    """Current lifecycle state."""
    seq: int = 0
    """Creation sequence number: ties are broken by it, so order is deterministic."""
    attempt: int = 0
    """Execution attempts started so far (never decreases)."""
    failures: int = 0
    """The activity's own failed attempts (counts against ``retry.max_attempts``)."""
    infra_requeues: int = 0
    """Requeues caused by lost workers or leases; never eats the retry budget."""
    steals: int = 0
    """Times work stealing moved it to another worker."""
    token: int = 0
    """Fencing token of the current (or last) lease; 0 before the first grant."""
    worker_id: str | None = None
    """Holder of the current lease, if any."""
    lease_expires_at: float = 0.0
    """Expiry of the current lease (meaningful while leased or executing)."""
    submitted_at: float = 0.0
    """When the core accepted it."""
    queued_at: float = 0.0
    """When it last entered the ready queue."""
    queue_ticket: int = 0
    """Ticket of its live ready-queue entry; older entries for it are stale (lazy removal)."""
    last_error: str | None = None
    """The most recent failure's description."""


SUBMISSION_FIELDS: Final = tuple(
    name
    for name in Activity.__struct_fields__[: Activity.__struct_fields__.index("renewable") + 1]
    if name != "not_before"
)
"""The fields of an :class:`Activity` that its submitter chose (the first block), but
``not_before``, which :func:`same_submission` compares by its own rule."""


def same_submission(accepted: Activity, submitted: Activity) -> bool:
    """Whether ``submitted`` asks for exactly what ``accepted`` (an activity as the core
    accepted it) was submitted with: a retried submission, not a different activity.

    Only the submitter's fields count (:data:`SUBMISSION_FIELDS`), never the state the
    core keeps. ``not_before`` is the one field the core rewrites on acceptance: with a
    ``delay`` it becomes the resolved instant (the later of the delay's and the
    submitted ``not_before``), which a retry cannot reproduce, so a retry then matches
    if it names no ``not_before`` or one no later than the accepted instant.
    """
    for name in SUBMISSION_FIELDS:
        if getattr(accepted, name) != getattr(submitted, name):
            return False
    if accepted.delay is None or submitted.not_before is None:
        return accepted.delay is not None or accepted.not_before == submitted.not_before
    return accepted.not_before is not None and submitted.not_before <= accepted.not_before


class ActivityDefaults(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, forbid_unknown_fields=True
):
    """What a worker's code declares about one activity type it runs (``@activity``):
    the defaults of submissions of that type that do not say otherwise."""

    idempotent: bool | None = None
    """Declared safe to run again (``None``: not declared)."""
    retry: RetryPolicy | None = None
    """Declared retry policy (``None``: not declared)."""
    schedule_to_start_s: Annotated[float, msgspec.Meta(gt=0.0, le=DURATION_MAX_S)] | None = None
    """Declared schedule-to-start timeout (``None``: not declared). Unlike the other
    two it is resolved when a submission is accepted, not against a lease holder (the
    wait it bounds comes before any worker holds the activity): the shortest that a
    live worker serving the type declares is written into the accepted activity."""
    start_to_close_s: Annotated[float, msgspec.Meta(gt=0.0, le=DURATION_MAX_S)] | None = None
    """Declared execution timeout of one attempt (``None``: not declared), resolved
    against the lease holder when the attempt starts, like the other two."""


_Declared = Annotated[dict[Name, ActivityDefaults], msgspec.Meta(max_length=_NAMES_MAX)]


class WorkerInfo(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, forbid_unknown_fields=True
):
    """WF-005 §6 registration metadata, as the worker announces it."""

    worker_id: Id
    """Unique worker id."""
    hostname: Name = ""
    """Host the worker runs on (infrastructure failures are per host)."""
    capabilities: NameSet = frozenset()
    """Advertised capabilities (e.g. ``gpu``)."""
    max_concurrency: Annotated[int, msgspec.Meta(ge=1, le=CONCURRENCY_MAX)] = 1
    """Most leases it holds at once."""
    labels: Annotated[dict[Name, Name], msgspec.Meta(max_length=_NAMES_MAX)] = msgspec.field(
        default_factory=dict
    )
    """Free-form labels; ``locality`` drives locality-aware balancing."""
    version: Name = ""
    """Worker software version."""
    heartbeat_interval_s: Annotated[float, msgspec.Meta(gt=0.0, le=86_400.0)] = 5.0
    """How often it promises to heartbeat."""
    activity_types: NameSet | None = None
    """Activity types it runs; ``None`` means any."""
    tenants: NameSet | None = None
    """Tenants it may serve; ``None`` means any (set from its credential)."""
    partitions: NameSet | None = None
    """Queue partitions it serves; ``None`` means any."""
    declared: _Declared | None = None
    """Declared defaults by activity type (the worker SDK sends its ``@activity``
    declarations). They apply to the leases this worker holds, for submissions that
    leave the field unsaid (docs/server.md, "Declared defaults")."""


class WorkerStatus(enum.StrEnum):
    """Where a registered worker stands."""

    ACTIVE = "active"
    """Heartbeating; may receive leases."""
    DRAINING = "draining"
    """Shutting down gracefully: finishes executing work, takes nothing new."""
    FAILED = "failed"
    """Declared lost (missed heartbeats or infrastructure failure)."""
    GONE = "gone"
    """Deregistered after a graceful shutdown."""


LIVE_WORKER_STATUSES: Final = (WorkerStatus.ACTIVE, WorkerStatus.DRAINING)
"""A worker still there: it heartbeats, holds leases and is watched for liveness (a
failed or gone one has departed and is only remembered)."""


class HeartbeatStats(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, forbid_unknown_fields=True
):
    """WF-005 §7 heartbeat contents."""

    workload: Count = 0
    """Activities the worker is executing."""
    memory_fraction: Fraction = 0.0
    """Memory in use, 0..1."""
    cpu_fraction: Fraction = 0.0
    """CPU utilisation, 0..1."""
    queue_depth: Count = 0
    """Work buffered inside the worker, not yet started."""
    last_completed_activity: Id | None = None
    """Id of the last activity it completed."""
    lease_status: _LeaseStatus = msgspec.field(default_factory=dict)
    """Activity id -> ``leased`` | ``executing`` as the worker sees its leases."""


class Lease(msgspec.Struct, frozen=True, kw_only=True):
    """WF-005 §11 lease, plus its fencing token."""

    lease_id: str
    """Unique lease id (derived from the token)."""
    worker_id: str
    """The holder."""
    activity_id: str
    """The leased activity."""
    token: int
    """Fencing token; grows with every grant across the whole core."""
    granted_at: float
    """When it was granted."""
    expires_at: float
    """When it lapses unless renewed."""
    renewable: bool
    """Whether renewal is allowed."""
    attempt: int
    """The activity's attempt number this lease is for (1-based once started)."""


def lease_id_for(token: int) -> str:
    """The lease id of a fencing token: unique because tokens are."""
    return f"lease-{token}"


class WorkerState(msgspec.Struct, kw_only=True):
    """A registered worker as the core tracks it."""

    info: WorkerInfo
    """Its latest registration."""
    seq: int
    """Registration sequence number (deterministic tie-break)."""
    status: WorkerStatus = WorkerStatus.ACTIVE
    """Where it stands."""
    registered_at: float = 0.0
    """First registration instant."""
    last_seen_at: float = 0.0
    """Last registration renewal or heartbeat."""
    departed_at: float | None = None
    """When it failed or left (``failed``/``gone``); ``None`` while live."""
    stats: HeartbeatStats = msgspec.field(default_factory=HeartbeatStats)
    """The latest heartbeat's figures."""
    leases: dict[str, int] = msgspec.field(default_factory=dict)
    """Activity id -> fencing token of every lease it holds (insertion ordered)."""
    demand: int = 0
    """Leases it is waiting for (outstanding poll credit)."""
    start_demand: int = 0
    """How many of the next grants it starts on receipt (the poll's ``start``)."""

    @property
    def load(self) -> float:
        """Fraction of its concurrency in use: 0..1, above 1 only after a re-registration
        lowered ``max_concurrency`` below the leases it still holds."""
        return len(self.leases) / self.info.max_concurrency

    @property
    def free_slots(self) -> int:
        """How many more leases it may hold."""
        return self.info.max_concurrency - len(self.leases)
