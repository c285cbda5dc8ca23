"""Commands: the only inputs of the scheduler core.

Every command carries ``now``, the instant the shell observed when it handed
the command over; the core never reads a clock. A list of commands is the
core's complete input log: replaying it from the same starting state gives
the same decisions, byte for byte (see :mod:`wf.scheduler.replay`).

Commands are msgspec structs tagged by ``cmd`` so that a log encodes as
JSON lines and decodes back to the same objects.
"""

from __future__ import annotations

import msgspec

from wf.scheduler.model import (
    Activity,
    CancelOrigin,
    HeartbeatStats,
    TransitionReason,
    WorkerInfo,
)


class _Command(msgspec.Struct, frozen=True, kw_only=True, tag_field="cmd"):
    now: float
    """The shell's scheduler time when the command arrived."""


class Submit(_Command, frozen=True, kw_only=True, tag="submit"):
    """Accept new activities (the DAG engine's ready nodes)."""

    activities: tuple[Activity, ...]
    """New activities; ids must be unused; state fields are ignored and reset."""


class Cancel(_Command, frozen=True, kw_only=True, tag="cancel"):
    """Withdraw an activity that has not finished; its lease, if any, is revoked."""

    activity_id: str
    reason: str = TransitionReason.CANCELLED
    """Free text for people (recorded in the history); nothing decides by it."""
    origin: CancelOrigin = CancelOrigin.OPERATOR
    """Who cancels: carried to :class:`~wf.scheduler.outputs.ActivityCancelled`, by
    which the run engine tells its own cancels from everyone else's."""


class RegisterWorker(_Command, frozen=True, kw_only=True, tag="register_worker"):
    """Register a worker, or renew/update an existing registration (WF-005 §6)."""

    info: WorkerInfo
    held: tuple[tuple[str, int], ...] | None = None
    """The leases the worker says it holds, as ``(activity_id, token)`` pairs (it
    registers again after a failover or a restart of the server). Those of its leases
    listed with their current token are kept with a fresh expiry (at least ``now`` plus
    the lease TTL); those not listed are abandoned at once (``lease_abandoned``: a
    requeue, or ``may_have_executed`` for executing work that may not run twice);
    listed leases the core does not know, or with another token, are ignored.
    ``None``: the worker said nothing, its leases are left as they are."""


class Heartbeat(_Command, frozen=True, kw_only=True, tag="heartbeat"):
    """A worker's periodic report (WF-005 §7)."""

    worker_id: str
    stats: HeartbeatStats = msgspec.field(default_factory=HeartbeatStats)


class Poll(_Command, frozen=True, kw_only=True, tag="poll"):
    """A worker asks for up to ``max_items`` leases (a long poll's demand)."""

    worker_id: str
    max_items: int = 1
    start: int = 0
    """Of those, how many the worker begins the moment it receives them (it has idle
    execution slots for them). Such a grant (not an early one) is also its start
    (``LEASED`` then ``EXECUTING`` in one commit), which saves the ``StartActivity``
    round trip; the worker must then run it on receipt. A grant whose answer never
    reaches the worker is lost while ``EXECUTING``: requeued if the activity may run
    again, otherwise failed with ``may_have_executed`` (docs/architecture.md, "Start
    on grant")."""


class CancelPoll(_Command, frozen=True, kw_only=True, tag="cancel_poll"):
    """The worker's long poll ended without (all of) its leases: drop its demand."""

    worker_id: str


class StartActivity(_Command, frozen=True, kw_only=True, tag="start"):
    """The lease holder began executing (Leased -> Executing)."""

    activity_id: str
    token: int


class RenewLease(_Command, frozen=True, kw_only=True, tag="renew"):
    """Extend a lease (WF-005 §12); refused if expired, superseded or not renewable."""

    activity_id: str
    token: int
    details: bytes | None = None
    """The attempt's latest heartbeat details (bounded at the edge), passed through to
    the :class:`~wf.scheduler.outputs.LeaseRenewed` record; the core keeps none."""


class Complete(_Command, frozen=True, kw_only=True, tag="complete"):
    """The lease holder finished with a result (fenced by ``token``)."""

    activity_id: str
    token: int
    result: bytes = b""
    unreported_start: bool = False
    """The worker began without reporting it first, as it may for an activity that may
    run again (idempotent or ``restart_on_abandon``; see :attr:`LeaseGranted.may_restart`):
    a still ``LEASED`` activity is started, then finished, in this one command."""


class Fail(_Command, frozen=True, kw_only=True, tag="fail"):
    """The lease holder's attempt failed (fenced by ``token``)."""

    activity_id: str
    token: int
    error_type: str = "Error"
    message: str = ""
    retryable: bool = True
    unreported_start: bool = False
    """As :attr:`Complete.unreported_start`."""
    stack_trace: str = ""
    """The failure's formatted stack trace (bounded at the edge), for the attempt's record."""


class ShutdownWorker(_Command, frozen=True, kw_only=True, tag="shutdown_worker"):
    """Graceful shutdown: unstarted leases return at once; executing work may finish."""

    worker_id: str


class WorkersLost(_Command, frozen=True, kw_only=True, tag="workers_lost"):
    """Infrastructure failure: these workers (e.g. one host) are gone at once."""

    worker_ids: tuple[str, ...]
    reason: TransitionReason = TransitionReason.INFRASTRUCTURE_FAILURE
    """Recorded on every requeue this causes and on each ``WorkerFailed``."""


class Tick(_Command, frozen=True, kw_only=True, tag="tick"):
    """Time passed: fire timers, expire leases, detect dead workers, dispatch."""


class Recover(_Command, frozen=True, kw_only=True, tag="recover"):
    """This core has just become the scheduler of its store (start-up, or a takeover
    by another server): the §23 restart procedure (:func:`wf.scheduler.recovery.recover`).

    While no scheduler ran, nobody could heartbeat, renew or report, so every live
    worker gets a fresh heartbeat grace (its deadline counts from ``now``) and every
    held lease a fresh lease grace (its expiry becomes at least ``now`` plus the lease
    TTL, recorded as a renewal); poll demand is dropped, since the long polls died
    with the old server. Then it is a ``Tick`` at ``now``.
    """


Command = (
    Submit
    | Cancel
    | RegisterWorker
    | Heartbeat
    | Poll
    | CancelPoll
    | StartActivity
    | RenewLease
    | Complete
    | Fail
    | ShutdownWorker
    | WorkersLost
    | Tick
    | Recover
)
"""Every command the core accepts."""
