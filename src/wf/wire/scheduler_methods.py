"""The ``scheduler.*`` methods: parameters, results and declarations.

Workers call the ``scheduler.workers.*`` and ``scheduler.leases.*`` methods,
operators the ``scheduler.activities.*`` ones and the reads. The server's
:class:`~wf.server.scheduler_api.SchedulerAPI` is the Python API behind
them (each declaration's ``python_name`` is its method); the ``App`` client
and the worker SDK build their calls from the same declarations.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

import msgspec

from wf.scheduler.model import Activity, ActivityState, HeartbeatStats, WorkerInfo
from wf.scheduler.outputs import LeaseGranted, LeaseRevoked, Transition
from wf.wire.bounds import (
    Count,
    Cursor,
    Details,
    Id,
    Name,
    NonNegI64,
    Payload,
    PositiveCount,
    Text,
)
from wf.wire.methods import MethodSpec, NoParams
from wf.wire.paging import PAGE_LIMIT_DEFAULT, Limit
from wf.wire.scheduler import WireActivity
from wf.wire.views import View

SUBMIT_BATCH_MAX: Final = 10_000
"""Most activities one ``scheduler.activities.submit`` call may carry."""


# ------------------------------------------------------------------- params


class HeldLease(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A lease a (re-)registering worker still holds and is working on."""

    activity_id: Id
    token: NonNegI64


class RegisterWorkerParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``scheduler.workers.register``."""

    info: WorkerInfo
    """Who the worker is and what it serves; ``info.declared`` carries each served
    type's declared defaults (``idempotent``, ``retry``), which the server applies to
    this worker's leases of submissions that leave them unsaid (docs/server.md,
    "Declared defaults")."""
    held: Annotated[list[HeldLease], msgspec.Meta(max_length=10_000)] | None = None
    """The leases the worker holds as it registers (after a server failover or a
    restart of the server): the server keeps these, gives them a fresh grace, and
    requeues at once every lease it granted to this worker id that is not listed
    (docs/ha.md). ``None`` (an older worker) leaves the worker's leases to their
    TTL."""


class HeartbeatParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``scheduler.workers.heartbeat``."""

    worker_id: Id
    stats: HeartbeatStats = msgspec.field(default_factory=HeartbeatStats)


class PollParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``scheduler.workers.poll``."""

    worker_id: Id
    max_items: PositiveCount = 1
    wait_s: float = 20.0
    start: Count = 0
    """How many of the leases the worker begins on receipt (see ``Poll.start``): each
    such grant is committed as the activity's start, and the worker must run it."""


class WorkerIdParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Methods that name one worker."""

    worker_id: Id


class FencedParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``scheduler.leases.start`` and ``scheduler.leases.details``."""

    activity_id: Id
    token: NonNegI64


class RenewParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``scheduler.leases.renew``."""

    activity_id: Id
    token: NonNegI64
    details: Details | None = None
    """The attempt's latest heartbeat details (one UTF-8 JSON document of at most
    64 KiB), when they changed since the last renewal; ``None`` keeps the ones the
    server holds. The server keeps them with the activity and hands them to its next
    attempt (``scheduler.leases.details``)."""


class ReportPoll(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``poll`` of ``scheduler.leases.complete`` and ``scheduler.leases.fail``: "and
    give me up to ``max_items`` more leases now, without waiting".

    The server handles the report, then at once a poll of ``worker_id`` (which must
    hold the reported lease), so both land in one commit; the answer carries the
    grants (``leases``, empty when none was ready) and pending revocations as a poll's
    would. Demand left unused is withdrawn, as at the end of a poll."""

    worker_id: Id
    """The lease holder (a mismatch is refused as ``invalid_argument``)."""
    max_items: PositiveCount = 1
    """As :attr:`PollParams.max_items`."""
    start: Count = 0
    """As :attr:`PollParams.start`: how many of the grants the worker begins on receipt."""


class CompleteParams(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    """``scheduler.leases.complete`` (defaults are not sent: a report without ``poll``
    reads as it did before ``poll`` existed, so older servers take it)."""

    activity_id: Id
    token: NonNegI64
    result: Payload = b""
    """The result: empty, or one UTF-8 JSON document (see :mod:`wf.wire.bounds`)."""
    unreported_start: bool = False
    """The worker began without reporting the start (only for a grant with
    ``may_restart``): the start is recorded with the result, in one commit."""
    poll: ReportPoll | None = None
    """Also a poll without waiting, in the same commit (see :class:`ReportPoll`);
    ``None`` (and servers before it): the completion alone."""


class FailParams(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    """``scheduler.leases.fail``."""

    activity_id: Id
    token: NonNegI64
    error_type: Name = "Error"
    message: Text = ""
    retryable: bool = True
    unreported_start: bool = False
    """As for ``scheduler.leases.complete``."""
    stack_trace: Text = ""
    """The failure's formatted stack trace (at most 16,384 characters: the worker SDK
    trims longer ones in the middle); kept with the attempt's record."""
    poll: ReportPoll | None = None
    """As for ``scheduler.leases.complete``."""


class SubmitParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``scheduler.activities.submit``."""

    activities: Annotated[list[WireActivity], msgspec.Meta(max_length=SUBMIT_BATCH_MAX)]


class ActivityIdParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Methods that name one activity."""

    activity_id: Id


class CancelParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``scheduler.activities.cancel``."""

    activity_id: Id
    reason: Text = "cancelled"


class HistoryParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``scheduler.activities.history``."""

    activity_id: Id
    """The activity."""
    limit: Limit = PAGE_LIMIT_DEFAULT
    """Page size, 1-100."""
    cursor: Cursor | None = None
    """``next_cursor`` of the previous page."""


class ListWorkersParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``scheduler.workers.list``."""

    limit: Limit = PAGE_LIMIT_DEFAULT
    """Page size, 1-100."""
    cursor: Cursor | None = None
    """``next_cursor`` of the previous page."""


# ------------------------------------------------------------------ results


class PollResult(View, frozen=True, kw_only=True, omit_defaults=True):
    """Leases for the worker, and revocations it must act on."""

    leases: list[LeaseGranted]
    revoked: list[LeaseRevoked]
    traceparents: dict[str, str] = msgspec.field(default_factory=dict)
    """Lease id -> W3C ``traceparent`` of its lease span (only when tracing is on)."""


class ReportResult(View, frozen=True, kw_only=True, omit_defaults=True):
    """The answer of ``scheduler.leases.complete`` and ``scheduler.leases.fail``:
    ``{"ok": true}``, and with a ``poll``, what that poll took."""

    ok: bool
    """Always true: the report was recorded."""
    leases: list[LeaseGranted] | None = None
    """With a ``poll``: the grants (possibly none), as :attr:`PollResult.leases`;
    ``None`` (not sent) without one."""
    revoked: list[LeaseRevoked] = msgspec.field(default_factory=list)
    """With a ``poll``: revocations the worker must act on, as a poll delivers them."""
    traceparents: dict[str, str] = msgspec.field(default_factory=dict)
    """As :attr:`PollResult.traceparents`."""


class RegisterResult(View, frozen=True, kw_only=True):
    """What a worker needs to know after registering."""

    worker_id: str
    lease_ttl_s: float
    heartbeat_misses_max: int


class ActivityView(View, frozen=True, kw_only=True):
    """An activity as admin reads show it."""

    activity: Activity | None
    """The live activity, or ``None`` once it finished."""
    finished_state: ActivityState | None = None
    """Its terminal state, when finished and still remembered."""


class WorkerView(View, frozen=True, kw_only=True):
    """A worker as admin reads show it."""

    info: WorkerInfo
    status: str
    registered_at: float
    last_seen_at: float
    leases: dict[str, int]
    stats: HeartbeatStats


class WorkerPage(View, frozen=True, kw_only=True):
    """One page of ``list_workers``."""

    workers: list[WorkerView]
    """Workers in registration order."""
    next_cursor: str | None
    """Pass back to get the next page; ``None`` on the last one."""


class TransitionPage(View, frozen=True, kw_only=True):
    """One page of ``activity_history``."""

    transitions: list[Transition]
    """Transitions, oldest first."""
    next_cursor: str | None
    """Pass back to get the next page; ``None`` on the last one."""


class QueueStats(View, frozen=True, kw_only=True):
    """Queue and capacity figures."""

    depth: int
    depth_by_partition: dict[str, int]
    running: int
    capacity: int
    delayed: int
    backpressure: str
    workers_active: int


class LaneDepth(View, frozen=True, kw_only=True):
    """One non-empty lane of the ready queue (``scheduler.dispatch.stats``)."""

    partition: str
    tenant: str
    activity_type: str
    priority: str
    region: str | None
    depth: int


class DispatchStats(View, frozen=True, kw_only=True):
    """Dispatch figures now (``scheduler.dispatch.stats``): counters since the core
    started, from which a reader derives rates between two calls, and the
    scheduling-latency histogram (queued -> leased)."""

    at: float
    """The server's clock when read."""
    depth: int
    depth_by_partition: dict[str, int]
    lanes: list[LaneDepth]
    """The deepest non-empty lanes, deepest first (at most :data:`LANES_SHOWN_MAX`)."""
    lanes_total: int
    """Non-empty lanes in all."""
    running: int
    capacity: int
    delayed: int
    backpressure: str
    workers_by_status: dict[str, int]
    submitted: int
    dispatched: int
    completed: int
    failed: int
    retries: int
    requeued: int
    expired_leases: int
    latency_bounds_s: list[float]
    """Upper bounds of the latency buckets (the last bucket, +Inf, has none)."""
    latency_buckets: list[int]
    """Non-cumulative counts per bucket (one more than the bounds)."""
    latency_sum_s: float
    latency_count: int


LANES_SHOWN_MAX: Final = 50
"""Most lanes ``scheduler.dispatch.stats`` lists."""


# ------------------------------------------------------------- declarations

REGISTER_WORKER: Final = MethodSpec(
    name="scheduler.workers.register",
    python_name="register_worker",
    params=RegisterWorkerParams,
    result=RegisterResult,
    access="worker",
    summary="Register a worker or renew its registration.",
)
HEARTBEAT: Final = MethodSpec(
    name="scheduler.workers.heartbeat",
    python_name="heartbeat",
    params=HeartbeatParams,
    result=list[LeaseRevoked],
    wrap="revoked",
    access="worker",
    summary="Heartbeat; returns lease revocations to act on.",
)
POLL: Final = MethodSpec(
    name="scheduler.workers.poll",
    python_name="poll",
    params=PollParams,
    result=PollResult,
    access="worker",
    summary="Long-poll for up to max_items leases.",
)
SHUTDOWN_WORKER: Final = MethodSpec(
    name="scheduler.workers.shutdown",
    python_name="shutdown_worker",
    params=WorkerIdParams,
    result=int,
    wrap="returned",
    access="worker",
    summary="Graceful shutdown: unstarted leases return to the queue.",
)
START_ACTIVITY: Final = MethodSpec(
    name="scheduler.leases.start",
    python_name="start_activity",
    params=FencedParams,
    result=None,
    access="worker",
    summary="Report that a leased activity started executing.",
)
RENEW_LEASE: Final = MethodSpec(
    name="scheduler.leases.renew",
    python_name="renew_lease",
    params=RenewParams,
    result=float,
    wrap="expires_at",
    access="worker",
    summary="Renew a lease (fenced by its token).",
)
LEASE_DETAILS: Final = MethodSpec(
    name="scheduler.leases.details",
    python_name="lease_details",
    params=FencedParams,
    result=bytes | None,
    wrap="details",
    access="worker",
    summary="The last heartbeat details an earlier attempt of a leased activity sent (fenced).",
)
COMPLETE_ACTIVITY: Final = MethodSpec(
    name="scheduler.leases.complete",
    python_name="complete_activity",
    params=CompleteParams,
    result=ReportResult,
    access="worker",
    summary="Complete a leased activity with its result (fenced); optionally poll too.",
)
FAIL_ACTIVITY: Final = MethodSpec(
    name="scheduler.leases.fail",
    python_name="fail_activity",
    params=FailParams,
    result=ReportResult,
    access="worker",
    summary="Report a failed attempt (fenced); optionally poll too.",
)
SUBMIT_ACTIVITIES: Final = MethodSpec(
    name="scheduler.activities.submit",
    python_name="submit_activities",
    params=SubmitParams,
    result=list[str],
    wrap="activity_ids",
    access="operate",
    summary="Submit activities.",
)
CANCEL_ACTIVITY: Final = MethodSpec(
    name="scheduler.activities.cancel",
    python_name="cancel_activity",
    params=CancelParams,
    result=None,
    access="operate",
    summary="Cancel an unfinished activity.",
)
GET_ACTIVITY: Final = MethodSpec(
    name="scheduler.activities.get",
    python_name="get_activity",
    params=ActivityIdParams,
    result=ActivityView,
    access="read",
    summary="An activity's current state.",
)
ACTIVITY_HISTORY: Final = MethodSpec(
    name="scheduler.activities.history",
    python_name="activity_history",
    params=HistoryParams,
    result=TransitionPage,
    access="read",
    summary="A page of an activity's transitions, oldest first.",
)
LIST_WORKERS: Final = MethodSpec(
    name="scheduler.workers.list",
    python_name="list_workers",
    params=ListWorkersParams,
    result=WorkerPage,
    access="read",
    summary="A page of workers with their leases and heartbeat figures.",
)
QUEUE_STATS: Final = MethodSpec(
    name="scheduler.queue.stats",
    python_name="queue_stats",
    params=NoParams,
    result=QueueStats,
    access="read",
    summary="Queue depth, capacity and backpressure level.",
)
DISPATCH_STATS: Final = MethodSpec(
    name="scheduler.dispatch.stats",
    python_name="dispatch_stats",
    params=NoParams,
    result=DispatchStats,
    access="read",
    summary="Queue depth by partition and lane, dispatch counters, latency, workers.",
)

METHODS: Final[tuple[MethodSpec[Any], ...]] = (
    REGISTER_WORKER,
    HEARTBEAT,
    POLL,
    SHUTDOWN_WORKER,
    START_ACTIVITY,
    RENEW_LEASE,
    LEASE_DETAILS,
    COMPLETE_ACTIVITY,
    FAIL_ACTIVITY,
    SUBMIT_ACTIVITIES,
    CANCEL_ACTIVITY,
    GET_ACTIVITY,
    ACTIVITY_HISTORY,
    LIST_WORKERS,
    QUEUE_STATS,
    DISPATCH_STATS,
)
"""Every ``scheduler.*`` method."""
