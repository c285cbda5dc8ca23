"""The scheduler's Python API (``server.api.scheduler``) and its ``scheduler.*`` methods.

Theory of operation
-------------------
:class:`SchedulerAPI` sits on a :class:`~wf.node.SchedulerNode` and turns the
node's command/outcome interface into calls that workers and operators make:
register, heartbeat, long-poll, start, renew, complete, fail, shut down, and
the admin reads and writes. Every state change goes through
``node.execute``, so it is durable before the call returns. The methods'
parameters, results and declarations are the wire contract's
(:mod:`wf.wire.scheduler_methods`); :mod:`wf.server.scheduler_rpc` attaches a
handler to each.

Long polls: a worker's ``poll`` first takes any leases already granted to it
(its *mailbox*), otherwise announces demand to the core and waits until a
grant arrives or ``wait_s`` passes. Grants can come from any command (a
submission, another worker's completion, a tick), so the API listens to every
committed outcome (``node.listeners``) and files ``LeaseGranted`` decisions
in the mailbox of their worker and ``LeaseRevoked`` ones in its revocation
list, which the next heartbeat or poll delivers. Every poll ends by
withdrawing whatever demand it did not use (``CancelPoll``), so work is only
ever granted to a worker that is actually waiting; it returns whatever was
filed in the meantime, so no grant is stranded, and one never collected
expires like any other lease. A completion or failure may carry the worker's
next poll (``poll``): the report and a ``Poll`` that does not wait run back to
back and share one commit (:meth:`SchedulerAPI._report`), and the answer takes
the mailbox as a poll does.

Failover. A worker that registers again (its server failed over or restarted)
lists the leases it holds (``held``); the core keeps those with a fresh grace
and requeues at once the leases granted to that worker id that it does not
list (``RegisterWorker.held``), in the registration's one commit. A submission
retried after its answer was lost is answered as submitted when it asks for
exactly what was accepted under its ids (:meth:`SchedulerAPI.submit_activities`).

Authorization beyond the role check of :mod:`wf.server.rpc` (WF-005 §24).
A *bound* caller is any caller that is not an unscoped admin: worker
credentials and tenant-scoped admins.

- A bound caller registers only with capabilities, tenants and activity
  types its scope grants; its tenants and types are written into the
  registration, so the core never dispatches outside them and such a
  worker can never claim a lease of another type or tenant.
- Every registration is stamped with the credential that made it (the
  ``wf.credential`` label, set here and never taken from the worker, and
  persisted with the registration so it survives restarts). A bound caller
  may act only for worker ids its credential registered, and only for
  leases held by them: heartbeat, poll, shutdown, start, renew, complete
  and fail for another credential's worker are ``Forbidden``.
- Tenant-scoped callers see only their tenants: an activity of another
  tenant, named by id (get, history, cancel), answers ``NotFound`` exactly
  as an unknown id would, so its existence does not leak; the worker list
  shows only workers that may serve one of their tenants, with leases of
  their tenants only; cluster-wide queue figures are ``Forbidden``;
  submitting for another tenant is ``Forbidden`` (the caller named it).
  Tenants come from the node's committed activity facts
  (:meth:`~wf.node_reads.NodeReads.tenant_of`), which remember the most
  recent ``FINISHED_MEMORY_MAX`` finished activities; older ones, those
  finished before a restart, and those whose submission is not committed
  yet, answer ``NotFound`` to tenant-scoped callers (fail closed) and stay
  readable by unscoped callers.

Races. A call's command is decided at once but answered only after its
commit, and other calls are decided meanwhile (a completion, a cancel, a
tick that expires the lease or declares the worker lost). So nothing a call
answers is read back from the core after its commit: it comes from the
call's own outcome, and every refusal is the core's typed error
(``StaleLease``, ``LeaseExpired``, ``NotFound``, ``WorkerNotActive``...),
never an internal one. The admin reads go through the node's read port
(``node.reads``), whose reads answer from committed state only.

Memory. Per-worker state here (mailbox, revocations, the poll's wake-up
event) exists only for workers the core knows: a call naming an unknown id
is refused by the core before anything is kept, and everything kept for a
worker is dropped when the core forgets it (``WorkerRemoved``, after
``departed_worker_retention_s``). So these structures are bounded by the
registered workers, whatever ids callers send.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable
from typing import Final

import msgspec

from wf.errors import AlreadyExists, Forbidden, InvalidArgument, NotFound, StaleLease, WfError
from wf.node import SchedulerNode
from wf.runtime.runs import node_of_activity
from wf.scheduler import commands as cmd
from wf.scheduler.model import (
    Activity,
    ActivityState,
    HeartbeatStats,
    WorkerInfo,
    WorkerStatus,
    same_submission,
)
from wf.scheduler.outputs import (
    Decision,
    LeaseGranted,
    LeaseRenewed,
    LeaseRevoked,
    Outcome,
    WorkerRemoved,
)
from wf.server.dispatch_stats import dispatch_stats
from wf.server.http_server import cancel_on_disconnect
from wf.server.rpc import Caller
from wf.tenancy import require_namespace
from wf.wire.bounds import (
    DETAILS_BYTES_MAX,
    check_json_bytes,
    check_name,
    check_text,
    invalid_params,
)
from wf.wire.paging import PAGE_LIMIT_DEFAULT, check_limit, decode_cursor, encode_cursor
from wf.wire.scheduler_methods import (
    ActivityView,
    DispatchStats,
    HeldLease,
    PollResult,
    QueueStats,
    RegisterResult,
    ReportPoll,
    ReportResult,
    SubmitParams,
    TransitionPage,
    WorkerPage,
    WorkerView,
)

POLL_WAIT_MAX_S: Final = 60.0
"""Longest a long poll may wait."""
MAILBOX_MAX: Final = 10_000
"""Most undelivered grants kept for one worker."""
OWNER_LABEL: Final = "wf.credential"
"""Worker label naming the credential that registered it (set by the server only)."""
_HISTORY: Final = "history"
_HELD_STATES: Final = frozenset({ActivityState.LEASED, ActivityState.EXECUTING})
_WORKERS: Final = "workers"
"""Cursor kinds of ``scheduler.activities.history`` and ``scheduler.workers.list``."""


def _check_bounds(activities: list[Activity]) -> None:
    """Refuse activities outside :mod:`wf.wire.bounds` exactly as the wire would."""
    try:
        msgspec.convert({"activities": msgspec.to_builtins(activities)}, SubmitParams, strict=False)
    except msgspec.ValidationError as exc:
        raise invalid_params(str(exc)) from None


class SchedulerAPI:
    """The Python API behind ``scheduler.*`` (see the module docstring)."""

    def __init__(self, node: SchedulerNode) -> None:
        self.node = node
        self.reads = node.reads
        # Per-worker state, only ever for workers the core knows (never for an id a
        # caller merely names) and dropped when the core forgets the worker, so it is
        # bounded by the registered workers (see "Memory" in the module docstring).
        self._mailbox: dict[str, list[LeaseGranted]] = {}
        """Granted, not yet collected leases, by worker (no empty lists kept)."""
        self._revoked: dict[str, list[LeaseRevoked]] = {}
        """Revocations not yet delivered, by worker."""
        self._arrived: dict[str, asyncio.Event] = {}
        """Set when something is filed for a worker; created by its first poll."""
        self._polling: dict[str, int] = {}
        """Long polls under way, by worker (only while they are: bounded by the calls)."""
        self._draining = False
        node.listeners.append(self._route)
        self.trace_context: Callable[[LeaseGranted], str | None] | None = None
        """Set by :mod:`wf.server.tracing` when tracing is on: a lease's ``traceparent``."""

    # ---------------------------------------------------------------- routing

    def _route(self, outcome: Outcome) -> None:
        decisions: list[Decision] = outcome.decisions
        known = self.reads.knows_worker
        for d in decisions:
            if type(d) is LeaseGranted:
                worker_id = d.lease.worker_id
                if not known(worker_id):
                    continue  # Forgotten since (outcomes may be routed late): drop it.
                box = self._mailbox.setdefault(worker_id, [])
                if len(box) < MAILBOX_MAX:
                    box.append(d)
                self._wake(worker_id)
            elif type(d) is LeaseRevoked:
                worker_id = d.worker_id
                self._drop_from_mailbox(d)
                if not known(worker_id):
                    continue
                revoked = self._revoked.setdefault(worker_id, [])
                if len(revoked) < MAILBOX_MAX:
                    revoked.append(d)
                self._wake(worker_id)
        for r in outcome.records:
            if type(r) is WorkerRemoved:
                self._forget(r.worker_id)

    def _wake(self, worker_id: str) -> None:
        """Wake the worker's waiting poll, if it has one."""
        event = self._arrived.get(worker_id)
        if event is not None:
            event.set()

    def _forget(self, worker_id: str) -> None:
        """The core forgot a departed worker: so does the API."""
        self._wake(worker_id)
        self._mailbox.pop(worker_id, None)
        self._revoked.pop(worker_id, None)
        self._arrived.pop(worker_id, None)

    def release_polls(self) -> None:
        """Wake every waiting long poll and make new ones return at once (server drain)."""
        self._draining = True
        for event in self._arrived.values():
            event.set()

    def resume_polls(self) -> None:
        """Take long polls again, with empty mailboxes: a cluster node that becomes the
        active node again after :meth:`release_polls` (what it held is of its last
        term; the store is the truth, and workers register again and poll)."""
        self._draining = False
        self._mailbox.clear()
        self._revoked.clear()

    def _drop_from_mailbox(self, revoked: LeaseRevoked) -> None:
        box = self._mailbox.get(revoked.worker_id)
        if box:
            box[:] = [g for g in box if g.lease.token != revoked.token]
            if not box:
                del self._mailbox[revoked.worker_id]

    def _take(self, worker_id: str, limit: int) -> PollResult:
        box = self._mailbox.pop(worker_id, [])
        leases, rest = box[:limit], box[limit:]
        if rest:
            self._mailbox[worker_id] = rest
        revoked = self._revoked.pop(worker_id, [])
        context = self.trace_context
        if context is None or not leases:
            return PollResult(leases=leases, revoked=revoked)
        parents = {g.lease.lease_id: p for g in leases if (p := context(g)) is not None}
        return PollResult(leases=leases, revoked=revoked, traceparents=parents)

    # ---------------------------------------------------------- authorization

    def _owner(self, worker_id: str) -> str | None:
        labels = self.reads.worker_labels(worker_id)
        return labels.get(OWNER_LABEL) if labels is not None else None

    def _bind(self, caller: Caller, info: WorkerInfo) -> WorkerInfo:
        """Check a registration against the caller's scope; narrow it and stamp its owner."""
        owner = self._owner(info.worker_id)
        if not _bound(caller):
            labels = {**info.labels, OWNER_LABEL: owner or caller.identity}
            return msgspec.structs.replace(info, labels=labels)
        if owner is not None and owner != caller.identity:
            raise Forbidden(
                f"worker id {info.worker_id!r} belongs to another credential",
                worker_id=info.worker_id,
            )
        if caller.capabilities is not None and not info.capabilities <= caller.capabilities:
            raise Forbidden(
                "the credential does not grant capabilities "
                f"{sorted(info.capabilities - caller.capabilities)}",
                worker_id=info.worker_id,
            )
        tenants = info.tenants
        if caller.tenants is not None:
            if tenants is not None and not tenants <= caller.tenants:
                raise Forbidden(
                    f"the credential does not grant tenants {sorted(tenants - caller.tenants)}",
                    worker_id=info.worker_id,
                )
            tenants = caller.tenants if tenants is None else tenants
        types = info.activity_types
        if caller.activity_types is not None:
            if types is not None and not types <= caller.activity_types:
                raise Forbidden(
                    "the credential does not grant activity types "
                    f"{sorted(types - caller.activity_types)}",
                    worker_id=info.worker_id,
                )
            types = caller.activity_types if types is None else types
        labels = {**info.labels, OWNER_LABEL: caller.identity}
        return msgspec.structs.replace(info, tenants=tenants, activity_types=types, labels=labels)

    def _check_worker(self, caller: Caller, worker_id: str) -> None:
        if _bound(caller) and self._owner(worker_id) != caller.identity:
            raise Forbidden(
                f"worker id {worker_id!r} was not registered by this credential",
                worker_id=worker_id,
            )

    def _check_lease(self, caller: Caller, activity_id: str) -> None:
        if not _bound(caller):
            return
        holder = self.reads.lease_holder(activity_id)
        if holder is not None:
            self._check_worker(caller, holder)

    def _check_tenants(self, caller: Caller, activities: list[Activity]) -> None:
        if caller.tenants is None:
            return
        outside = sorted({a.tenant for a in activities} - caller.tenants)
        if outside:
            raise Forbidden(f"the credential does not grant tenants {outside}", tenants=outside)
        for a in activities:
            # Before any lookup: the answer never depends on other tenants' ids.
            require_namespace(
                a.activity_id, a.tenant, caller.tenants, kind="activity", field="activity_id"
            )
            if a.ordering_key is not None:
                require_namespace(
                    a.ordering_key, a.tenant, caller.tenants, kind="ordering", field="ordering_key"
                )

    def _check_visible(self, caller: Caller, activity_id: str) -> None:
        """``NotFound``, as for an unknown id, when the activity is outside the caller's tenants."""
        if caller.tenants is None:
            return
        tenant = self.reads.tenant_of(activity_id)
        if tenant is None or tenant not in caller.tenants:
            raise NotFound(f"unknown activity {activity_id!r}", activity_id=activity_id)

    # ----------------------------------------------------------- worker calls

    async def register_worker(
        self, info: WorkerInfo, caller: Caller, held: list[HeldLease] | None = None
    ) -> RegisterResult:
        """Register (or renew the registration of) a worker (``held``: see
        :class:`~wf.wire.scheduler_methods.RegisterWorkerParams`)."""
        info = self._bind(caller, info)
        pairs = None if held is None else tuple((h.activity_id, h.token) for h in held)
        await self.node.execute(lambda now: cmd.RegisterWorker(now=now, info=info, held=pairs))
        config = self.node.config
        return RegisterResult(
            worker_id=info.worker_id,
            lease_ttl_s=config.lease_ttl_s,
            heartbeat_misses_max=config.heartbeat_misses_max,
        )

    async def heartbeat(
        self, worker_id: str, stats: HeartbeatStats, caller: Caller
    ) -> list[LeaseRevoked]:
        """Record a heartbeat; returns revocations the worker must act on."""
        self._check_worker(caller, worker_id)
        await self.node.execute(
            lambda now: cmd.Heartbeat(now=now, worker_id=worker_id, stats=stats)
        )
        return self._revoked.pop(worker_id, [])

    async def poll(
        self, worker_id: str, max_items: int, wait_s: float, caller: Caller, *, start: int = 0
    ) -> PollResult:
        """Long poll: up to ``max_items`` leases, waiting at most ``wait_s`` seconds; the
        first ``start`` grants are started on grant (the worker runs them on receipt)."""
        self._check_worker(caller, worker_id)
        if not 0 <= wait_s <= POLL_WAIT_MAX_S:
            raise InvalidArgument(f"wait_s must be 0..{POLL_WAIT_MAX_S}", field="wait_s")
        if self._mailbox.get(worker_id) or self._revoked.get(worker_id):
            return self._take(worker_id, max_items)
        # Counted while under way: a report's poll (complete/fail with ``poll``) then
        # leaves this poll's demand and grants alone.
        self._polling[worker_id] = self._polling.get(worker_id, 0) + 1
        try:
            return await self._long_poll(worker_id, max_items, wait_s, start)
        finally:
            left = self._polling[worker_id] - 1
            if left:
                self._polling[worker_id] = left
            else:
                del self._polling[worker_id]

    async def _long_poll(
        self, worker_id: str, max_items: int, wait_s: float, start: int
    ) -> PollResult:
        """:meth:`poll` once nothing was waiting in the mailbox."""
        arrived = self._arrived.get(worker_id)
        if arrived is not None:
            arrived.clear()
        # An unknown or departed worker is refused here, before anything is kept for it.
        await self.node.execute(
            lambda now: cmd.Poll(now=now, worker_id=worker_id, max_items=max_items, start=start)
        )
        if arrived is None:
            if not self.reads.knows_worker(worker_id):
                return self._take(worker_id, max_items)  # Forgotten during the commit.
            # What was filed during the commit is in the mailbox or the revocations,
            # which the test below looks at; the event is for what comes later.
            arrived = self._arrived.setdefault(worker_id, asyncio.Event())
        if (
            not self._mailbox.get(worker_id)
            and not self._revoked.get(worker_id)
            and wait_s > 0
            and not self._draining
        ):
            # A worker that hangs up stops this wait at once (over HTTP); what it
            # did not take stays in the mailbox for its next poll.
            cancel_on_disconnect()
            # asyncio.timeout, not wait_for: no extra task per poll, and a grant
            # wakes the poll in one step instead of three.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    await arrived.wait()
        # Demand the poll did not use is withdrawn, so later work never goes to a
        # worker that is busy with this answer rather than polling (a CancelPoll
        # writes no records, so this costs no commit).
        if self.reads.worker_demand(worker_id):
            await self.node.execute(lambda now: cmd.CancelPoll(now=now, worker_id=worker_id))
        return self._take(worker_id, max_items)

    async def shutdown_worker(self, worker_id: str, caller: Caller) -> int:
        """Graceful shutdown; returns how many unstarted leases went back to the queue."""
        self._check_worker(caller, worker_id)
        outcome = await self.node.execute(
            lambda now: cmd.ShutdownWorker(now=now, worker_id=worker_id)
        )
        # The returned (unstarted) grants left the mailbox with their revocations; a
        # grant committed as its start stays for the draining worker's open poll,
        # woken here: it must run it (docs/architecture.md, "Start on grant").
        box = self._mailbox.pop(worker_id, None)
        started = [g for g in box or () if g.started]
        if started:
            self._mailbox[worker_id] = started
        self._wake(worker_id)
        return sum(1 for d in outcome.decisions if type(d) is LeaseRevoked)

    async def start_activity(self, activity_id: str, token: int, caller: Caller) -> None:
        """The lease holder began executing."""
        self._check_lease(caller, activity_id)
        await self.node.execute(
            lambda now: cmd.StartActivity(now=now, activity_id=activity_id, token=token)
        )

    async def renew_lease(
        self, activity_id: str, token: int, caller: Caller, details: bytes | None = None
    ) -> float:
        """Extend a lease; returns its new expiry. ``details`` (one JSON document of at
        most 64 KiB, or ``None`` to keep the held ones) are the attempt's latest
        heartbeat details: stored with the activity in the renewal's commit."""
        if details is not None:
            check_json_bytes(details, "details", bytes_max=DETAILS_BYTES_MAX)
        self._check_lease(caller, activity_id)
        outcome = await self.node.execute(
            lambda now: cmd.RenewLease(
                now=now, activity_id=activity_id, token=token, details=details
            )
        )
        # From the outcome, never from the core: by the time the commit is done a
        # concurrent completion, cancel or expiry may have removed the activity or
        # leased it again, and this renewal was still accepted before that.
        (renewed,) = [r for r in outcome.records if type(r) is LeaseRenewed]
        return renewed.expires_at

    async def lease_details(self, activity_id: str, token: int, caller: Caller) -> bytes | None:
        """The last heartbeat details an earlier attempt of the activity sent, for the
        holder of its current lease (fenced by ``token``: StaleLease otherwise), so that
        the new attempt can resume where the last one stopped; ``None`` if none did."""
        self._check_lease(caller, activity_id)
        held = self.reads.attempt(activity_id)
        if held is None or held[1] != token or held[0] not in _HELD_STATES:
            raise StaleLease(
                f"lease token {token} for activity {activity_id!r} is not current",
                activity_id=activity_id,
                token=token,
            )
        return await self.node.store.heartbeat_details(activity_id)

    async def complete_activity(
        self,
        activity_id: str,
        token: int,
        result: bytes,
        caller: Caller,
        *,
        unreported_start: bool = False,
        poll: ReportPoll | None = None,
    ) -> ReportResult:
        """Record the result (fenced by ``token``); ``unreported_start``: the start too;
        ``poll``: and poll without waiting, in the same commit (:meth:`_report`).

        The result must be empty or one UTF-8 JSON document within
        :mod:`wf.wire.bounds` (the run engine decodes it): checked here, for wire
        and in-process callers alike, before anything is stored."""
        check_json_bytes(result, "result")
        self._check_lease(caller, activity_id)
        return await self._report(
            lambda now: cmd.Complete(
                now=now,
                activity_id=activity_id,
                token=token,
                result=result,
                unreported_start=unreported_start,
            ),
            activity_id,
            token,
            poll,
            caller,
        )

    async def fail_activity(
        self,
        activity_id: str,
        token: int,
        error_type: str,
        message: str,
        retryable: bool,
        caller: Caller,
        *,
        unreported_start: bool = False,
        stack_trace: str = "",
        poll: ReportPoll | None = None,
    ) -> ReportResult:
        """Record a failed attempt (fenced by ``token``); ``unreported_start``: the start
        too; ``poll``: as for :meth:`complete_activity`.

        ``stack_trace`` (free text within :mod:`wf.wire.bounds`) is kept with the
        attempt's record and shown by ``runs.inspect``."""
        check_name(error_type, "error_type")
        check_text(message, "message")
        check_text(stack_trace, "stack_trace")
        self._check_lease(caller, activity_id)
        return await self._report(
            lambda now: cmd.Fail(
                now=now,
                activity_id=activity_id,
                token=token,
                error_type=error_type,
                message=message,
                retryable=retryable,
                unreported_start=unreported_start,
                stack_trace=stack_trace,
            ),
            activity_id,
            token,
            poll,
            caller,
        )

    async def _report(
        self,
        make: Callable[[float], cmd.Command],
        activity_id: str,
        token: int,
        poll: ReportPoll | None,
        caller: Caller,
    ) -> ReportResult:
        """Run a completion or failure, and with ``poll`` the lease holder's next poll
        right behind it, so both land in one commit (:meth:`SchedulerNode.execute_then`).

        The poll never waits: it takes what its own command granted, or what was
        already in the mailbox, as :meth:`poll` would, revocations included, and its
        unused demand is withdrawn (``CancelPoll``). While a long poll of the worker
        is under way (or the server drains) the report goes alone and the answer's
        ``leases`` are empty: that poll's demand and grants are left to it.
        """
        if poll is None:
            await self.node.execute(make)
            return _REPORTED
        worker_id = poll.worker_id
        items_max = self.node.config.poll_items_max
        if not 1 <= poll.max_items <= items_max:
            raise InvalidArgument(f"poll.max_items must be 1..{items_max}", field="poll.max_items")
        if not 0 <= poll.start <= poll.max_items:
            raise InvalidArgument(
                f"poll.start must be 0..poll.max_items ({poll.max_items})", field="poll.start"
            )
        self._check_worker(caller, worker_id)
        holder = self.reads.lease_holder(activity_id)
        attempt = self.reads.attempt(activity_id)
        if (
            holder is not None
            and holder != worker_id
            and attempt is not None
            and attempt[1] == token
        ):
            # (A stale token is left to the report's own refusal: stale_lease.)
            raise InvalidArgument(
                f"poll.worker_id {worker_id!r} does not hold the lease of {activity_id!r}",
                field="poll.worker_id",
                activity_id=activity_id,
                worker_id=worker_id,
            )
        if self._polling.get(worker_id) or self._draining:
            await self.node.execute(make)
            return ReportResult(ok=True, leases=[])
        if self._mailbox.get(worker_id) or self._revoked.get(worker_id):
            # As poll: what waits is answered first, with no new demand.
            await self.node.execute(make)
            return _as_report(self._take(worker_id, poll.max_items))
        _, polled = await self.node.execute_then(
            make,
            lambda now: cmd.Poll(
                now=now, worker_id=worker_id, max_items=poll.max_items, start=poll.start
            ),
        )
        if self._polling.get(worker_id):
            return ReportResult(ok=True, leases=[])  # a long poll came meanwhile: its own
        if isinstance(polled, WfError):
            # The worker may not poll (draining, lost): the report stands; grants kept
            # for it stay in the mailbox, revocations go with this answer.
            return _as_report(self._take(worker_id, 0))
        if self.reads.worker_demand(worker_id):
            await self.node.execute(lambda now: cmd.CancelPoll(now=now, worker_id=worker_id))
        return _as_report(self._take(worker_id, poll.max_items))

    # ------------------------------------------------------------ admin calls

    async def submit_activities(self, activities: list[Activity], caller: Caller) -> list[str]:
        """Submit activities; returns their ids once durable.

        Idempotent by content: an activity whose id was already used (finished ones
        included, while the store keeps them) is answered as submitted if it asks
        for exactly what was accepted under that id (its submitted fields, not its
        state: :func:`~wf.scheduler.model.same_submission`), and nothing changes;
        other content is ``AlreadyExists``. So a retried submission whose first
        answer was lost (a failover) neither fails nor submits twice."""
        _check_bounds(activities)  # the bounds the wire enforces, for in-process callers too
        return await self.submit_checked(activities, caller)

    async def submit_checked(self, activities: list[Activity], caller: Caller) -> list[str]:
        """:meth:`submit_activities` for activities already within :mod:`wf.wire.bounds`
        (the wire's decoding checked them)."""
        self._check_tenants(caller, activities)
        if not activities:
            raise InvalidArgument("submit needs at least one activity", field="activities")
        reserved = [a.activity_id for a in activities if node_of_activity(a.activity_id)]
        if reserved:
            # The run engine owns these ids; a stray submission could stand in for a node.
            raise InvalidArgument(
                f"activity ids of the form run-<number>.<node> belong to workflow runs: "
                f"{reserved[:10]}",
                field="activities",
                activity_ids=reserved[:10],
            )
        for attempt in range(2):
            fresh = await self._unsubmitted(activities)
            if not fresh:
                break
            batch = tuple(fresh)
            try:
                outcome = await self.node.execute(functools.partial(_submit_command, batch))
            except AlreadyExists:
                # A concurrent call (a retry racing its original) submitted one of these
                # ids since they were looked up: look again, once, and compare contents.
                if attempt or len({a.activity_id for a in batch}) < len(batch):
                    raise
                continue
            if any(type(d) is LeaseGranted for d in outcome.decisions):
                # One loop turn, so the polls these grants woke answer their workers
                # before this answer goes out: the work starts sooner, nobody loses.
                await asyncio.sleep(0)
            break
        return [a.activity_id for a in activities]

    async def _unsubmitted(self, activities: list[Activity]) -> list[Activity]:
        """The activities still to submit: those whose id was never used.

        Ids are never reused (the rule and where it looks: ``NodeReads.ids_in_use``),
        but a submission naming a used id with exactly the content it was accepted
        with is a retry (its first answer was lost, or the server failed over after
        committing it): it is answered as submitted, and nothing changes. Any other
        content is ``AlreadyExists``, and so is an id a batch names twice.
        """
        taken = await self.reads.ids_in_use(a.activity_id for a in activities)
        if not taken:
            return activities
        accepted = await self.reads.submitted(taken)
        differing = sorted(
            {
                a.activity_id
                for a in activities
                if a.activity_id in taken
                and (
                    (stored := accepted.get(a.activity_id)) is None
                    or not same_submission(stored, a)
                )
            }
        )
        if differing:
            raise AlreadyExists(
                f"activity ids already used: {differing[:10]}", activity_ids=differing
            )
        seen: set[str] = set()
        for a in activities:
            if a.activity_id in seen and a.activity_id in taken:
                # The core's rule for a batch naming one id twice, kept for retries too.
                raise AlreadyExists(
                    f"activity {a.activity_id!r} already exists", activity_id=a.activity_id
                )
            seen.add(a.activity_id)
        return [a for a in activities if a.activity_id not in taken]

    async def cancel_activity(self, activity_id: str, reason: str, caller: Caller) -> None:
        """Cancel an unfinished activity."""
        check_text(reason, "reason")
        self._check_visible(caller, activity_id)
        await self.node.execute(
            lambda now: cmd.Cancel(now=now, activity_id=activity_id, reason=reason)
        )

    async def get_activity(self, activity_id: str, caller: Caller) -> ActivityView:
        """An activity's current state (never ahead of what the store holds)."""
        self._check_visible(caller, activity_id)
        read = await self.reads.activity(activity_id)
        if read is None:
            raise NotFound(f"unknown activity {activity_id!r}", activity_id=activity_id)
        return ActivityView(activity=read.activity, finished_state=read.finished_state)

    async def activity_history(
        self,
        activity_id: str,
        caller: Caller,
        limit: int = PAGE_LIMIT_DEFAULT,
        cursor: str | None = None,
    ) -> TransitionPage:
        """One page of an activity's transitions, oldest first, with ``next_cursor``
        (``None`` on the last page); ``limit`` is 1-100. The store reads the page
        through its ``(activity_id, id)`` index, so a long history costs a page."""
        limit = check_limit(limit)
        after = 0 if cursor is None else decode_cursor(cursor, _HISTORY, (int,))[0]
        self._check_visible(caller, activity_id)
        stored = await self.node.store.history_page(activity_id, after=after, limit=limit + 1)
        if not stored and not await self.node.store.existing_activity_ids([activity_id]):
            raise NotFound(f"unknown activity {activity_id!r}", activity_id=activity_id)
        more = len(stored) > limit
        return TransitionPage(
            transitions=[t for _, t in stored[:limit]],
            next_cursor=encode_cursor(_HISTORY, stored[limit - 1][0]) if more else None,
        )

    async def list_workers(
        self, caller: Caller, limit: int = PAGE_LIMIT_DEFAULT, cursor: str | None = None
    ) -> WorkerPage:
        """One page of the known workers in registration order, with ``next_cursor``
        (``None`` on the last page); ``limit`` is 1-100. For a tenant-scoped caller:
        the workers that may serve its tenants, with leases of its tenants only.

        The page is read as committed (:meth:`~wf.node_reads.NodeReads.workers`:
        refused while writes are stopped), ``limit + 1`` workers to know whether
        another page follows.
        """
        limit = check_limit(limit)
        after = 0 if cursor is None else decode_cursor(cursor, _WORKERS, (int,))[0]
        scope = caller.tenants
        chosen = await self.reads.workers(after=after, limit=limit + 1, tenants=scope)
        tenant_of = self.reads.tenant_of
        views: list[WorkerView] = []
        for w in chosen[:limit]:
            leases = w.leases
            if scope is not None:
                leases = {aid: t for aid, t in leases.items() if tenant_of(aid) in scope}
            views.append(
                WorkerView(
                    info=w.info,
                    status=w.status.value,
                    registered_at=w.registered_at,
                    last_seen_at=w.last_seen_at,
                    leases=leases,
                    stats=w.stats,
                )
            )
        more = len(chosen) > limit
        return WorkerPage(
            workers=views,
            next_cursor=encode_cursor(_WORKERS, chosen[limit - 1].seq) if more else None,
        )

    async def queue_stats(self, caller: Caller) -> QueueStats:
        """Queue depth, capacity and backpressure (cluster-wide: unscoped callers only)."""
        if caller.tenants is not None:
            raise Forbidden(
                "queue figures are cluster-wide; a tenant-scoped credential may not read them",
                method="scheduler.queue.stats",
            )
        figures = await self.reads.queue()  # as committed (refused while writes stopped)
        return QueueStats(
            depth=figures.depth,
            depth_by_partition=figures.depth_by_partition,
            running=figures.running,
            capacity=figures.capacity,
            delayed=figures.delayed,
            backpressure=figures.backpressure.value,
            workers_active=figures.workers_by_status[WorkerStatus.ACTIVE],
        )

    async def dispatch_stats(self, caller: Caller) -> DispatchStats:
        """Queue depth by partition and lane, dispatch counters, scheduling latency and
        workers by status (cluster-wide: unscoped callers only; see
        :mod:`wf.server.dispatch_stats`)."""
        return dispatch_stats(self.node, caller)

    # ------------------------------------------------------------ registration


_REPORTED: Final = ReportResult(ok=True)
"""The answer of a report without ``poll``: ``{"ok": true}``, as before it existed."""


def _as_report(taken: PollResult) -> ReportResult:
    return ReportResult(
        ok=True, leases=taken.leases, revoked=taken.revoked, traceparents=taken.traceparents
    )


def _submit_command(batch: tuple[Activity, ...], now: float) -> cmd.Submit:
    return cmd.Submit(now=now, activities=batch)


def _bound(caller: Caller) -> bool:
    """Whether scopes and worker ownership apply (everyone but an unscoped admin)."""
    return not (
        caller.role == "admin"
        and caller.tenants is None
        and caller.activity_types is None
        and caller.capabilities is None
    )
