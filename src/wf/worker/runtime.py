"""The worker: registers, heartbeats, long-polls for leases, runs them, reports once.

Theory of operation
-------------------
A :class:`Worker` is a handful of asyncio tasks around one
:class:`~wf.client.rpc_client.RpcClient`:

* the *registrar* registers (declaring the activity types it runs, and
  listing every lease it holds) whenever the worker is not known to be
  connected: at start (holding nothing), after any call found the server
  unreachable, after the client moved to another node of a cluster, and
  after a heartbeat or poll was refused with
  ``worker_not_active``/``not_found``/``forbidden`` (the server restarted on
  another store, or declared the worker lost). It retries with
  :class:`~wf.worker.backoff.Backoff` (exponential, capped, jittered) and is
  the only place that waits between reconnection attempts; every other loop
  waits for its ``connected`` event;
* the *heartbeat* loop sends workload, CPU, memory, queue depth, last
  completed activity and lease status every ``heartbeat_interval_s``;
* the *poll* loop long-polls for as many leases as the worker has free
  slots, and does not poll while it has none (revocations then arrive with
  the next heartbeat answer, or as a refused renewal). A result sent while
  no long poll is on the wire carries the poll for the slot it frees
  (``poll`` on complete/fail: one call and one commit), and its answer's
  leases are taken as a poll's; the poll loop asks only for what no request
  on the wire covers (``_asked_extra``, ``_start_reserved``);
* the *renewal* loop renews every held lease each third of the lease TTL;
* the :class:`~wf.worker.outbox.Outbox` sends start, renew, complete and
  fail calls, batched when several are ready at once.

Each lease gets a runner task: it waits for an execution slot
(``max_concurrency``; leases beyond it, up to ``prefetch``, wait unstarted),
reports the start, runs the activity (:func:`~wf.worker.execution.execute`)
and reports the result with the lease's fencing token. A report the server
did not answer is retried (after reconnecting) until the server answers:
the fencing token makes the retry harmless, since a report that was applied
the first time is refused as stale the second. A lease is *lost* when a
revocation names it (delivered by poll and heartbeat answers) or when the
server refuses one of its calls as ``stale_lease``/``lease_expired``/
``not_found``; a lost lease is cancelled (its ``async`` task is cancelled,
sync code sees :func:`~wf.worker.activity.is_cancelled`) and never reported
on again. So each lease is reported on at most once, and exactly once
unless it was lost first.

Following the active node
-------------------------
With several server URLs (a cluster on one PostgreSQL store, docs/ha.md)
the :class:`~wf.client.rpc_client.RpcClient` follows ``not_leader`` to the
active and rotates after transport failures, retrying each call for up to
``failover_timeout_s`` (:data:`WORKER_FAILOVER_TIMEOUT_S`, long enough to
ride out a takeover inside one call); a long poll answered ``not_leader``
is thus sent again at once to the new node. Whenever the client moved
(:attr:`~wf.client.rpc_client.RpcClient.failovers` changed since the last
registration: it followed ``not_leader``, gave up on a node after a transport
failure, or found another server instance answering at a URL, a restart between
two calls included), the worker registers again with ``held`` listing every lease
it holds, running or prefetched, so the new active keeps those (with a
fresh grace) and requeues at once the ones it granted to this worker that
the worker never received; a long poll still open on the old node is
abandoned, so polling resumes at the new one as soon as the registration is
answered. Short per-attempt timeouts (:data:`WORKER_CALL_TIMEOUT_S`) find a
frozen node within a heartbeat interval and a few seconds. A result report
that crossed the failover is retried at the new active (fenced by the
token); if it refuses the report as stale or already finished (the first
try may have been applied before the old node went away), the report is
logged at warning and dropped.

Graceful :meth:`Worker.shutdown`: stop polling, drop unstarted leases, call
``scheduler.workers.shutdown`` (the server requeues the unstarted leases at
once instead of letting them expire), keep heartbeating and renewing while
executing activities finish and report, then stop. The worker never
re-registers while draining: that would make it active again. An operator's
drain (``scheduler.workers.shutdown`` for this worker, e.g. the console's
"drain") is honoured the same way: once a poll or heartbeat is refused with
``worker_not_active`` and the status ``draining`` or ``gone``, the worker drains
(without announcing it again) and :meth:`Worker.run` returns
(:attr:`Worker.drained_by_server`). Only after a poll of this process was
accepted, though: before that, such a refusal is about a predecessor under
the same worker id, and the worker registers again as after any refusal.

An *early grant* (``LeaseGranted.not_before``: the server queues a delayed
activity ``early_grant_s`` before its instant) takes its execution slot at
once and waits there for the instant on the worker's own timer, so delayed
work starts on time without a dispatch hop after its instant; losing the
lease (a revocation, a graceful shutdown) ends the wait. One granted into an
idle slot is committed as its start (``started``), so it begins at the
instant without a start round trip, and a graceful shutdown lets it run.

Time is the event loop's monotonic clock, except ``not_before``, which is
scheduler time: the injected :class:`~wf.clock.Clock` (wall time anchored
once, advanced monotonically) tells when it has come.

Why this module is over 1,000 lines: what could stand alone already does
(leases and their status, the outbox, execution, backoff, stats: the sibling
modules). What is left is one state machine, the connection state, the held
leases, the slots and the drain, that the five loops and the lease runners
above all read and change between two awaits. Split across modules, each
piece would need the whole state and the rules of when it may change (who
re-registers, who may drop a lease, when the drain ends), which is exactly
what reading this one file makes plain.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import ssl
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import msgspec

import wf
from wf.client.rpc_client import LONG_POLL_MARGIN_S, RpcClient, split_urls
from wf.clock import Clock, SystemClock, sleep_until
from wf.errors import (
    Conflict,
    Forbidden,
    IllegalTransition,
    InvalidArgument,
    LeaseExpired,
    NotFound,
    StaleLease,
    Unauthorized,
    WfError,
    WorkerNotActive,
)
from wf.log_lines import line_sink
from wf.scheduler.model import HeartbeatStats, WorkerInfo, WorkerStatus
from wf.scheduler.outputs import LeaseGranted, LeaseRevoked
from wf.wire.methods import MethodSpec
from wf.wire.scheduler_methods import (
    COMPLETE_ACTIVITY,
    FAIL_ACTIVITY,
    HEARTBEAT,
    LEASE_DETAILS,
    POLL,
    REGISTER_WORKER,
    RENEW_LEASE,
    SHUTDOWN_WORKER,
    START_ACTIVITY,
    CompleteParams,
    FailParams,
    HeartbeatParams,
    PollParams,
    PollResult,
    RegisterResult,
    RegisterWorkerParams,
    RenewParams,
    ReportPoll,
    ReportResult,
    WorkerIdParams,
)
from wf.wire.scheduler_methods import (
    HeldLease as WireHeldLease,
)
from wf.worker.activity import ActivityContext, ActivityDefinition, ActivityInfo
from wf.worker.backoff import Backoff
from wf.worker.execution import Abandoned, Ending, Failed, Succeeded, execute
from wf.worker.leases import ACKNOWLEDGED_MAX, HeldLease, LeaseStatus, WorkerCounters
from wf.worker.outbox import Outbox, stop_task
from wf.worker.stats import ProcessSampler
from wf.worker.threads import ActivityThreads

log = logging.getLogger("wf.worker")

POLL_WAIT_S: Final = 10.0
"""Default long-poll wait (the server allows up to 60 s)."""
START_REPORT_DELAY_S: Final = 0.05
"""How long a ``may_restart`` activity runs before its start is reported on its own.

Such an activity may run again, so the worker need not wait for the server to
acknowledge its start: it begins at once and reports the start with its result
(``unreported_start``), one call and one commit instead of two round trips. One
that is still running after this long reports its start by itself, so operators
see it ``executing`` while it runs."""
POLL_ITEMS_MAX: Final = 1_000
"""Most leases asked for in one poll (the server's default bound; halved while a
server with a lower ``poll_items_max`` refuses it)."""
CALL_TIMEOUT_MARGIN_S: Final = LONG_POLL_MARGIN_S
"""Added to a long poll's wait before it counts as unanswered."""
HEARTBEAT_TIMEOUT_S: Final = 10.0
"""Longest the graceful shutdown call may take."""
WORKER_CALL_TIMEOUT_S: Final = 3.0
"""Bound of one attempt of a heartbeat, a registration or a batch of lease calls
(answered in milliseconds by a live node, within a second by a very busy one on a
shared machine): a node that froze is given up within this and the call moves on to
the next node, so a worker finds out within ``heartbeat_interval_s`` plus this, and
then abandons its long poll there too. Its results reach the new active well within
the fresh lease grace a take-over gives (docs/ha.md)."""
WORKER_FAILOVER_TIMEOUT_S: Final = 5.0
"""The worker's failover budget per call (see :mod:`wf.client.rpc_client`): a
takeover (at most 5 s after a freeze or a cut-off) is ridden out inside one call,
retrying at most a second apart; past it the call counts as a lost connection and
the registrar takes over with its own backoff."""
FORBIDDEN_RETRIES_MAX: Final = 3
"""Lease calls refused as ``forbidden`` are retried after re-registering this often."""
DEFAULT_LEASE_TTL_S: Final = 30.0
"""Assumed until the server's registration answer names the real TTL."""

_REGISTRATION_LOST: Final = (WorkerNotActive, NotFound, Forbidden)
"""Refusals of heartbeat/poll that mean: register again."""
_LEASE_LOST: Final = (StaleLease, LeaseExpired, NotFound, Conflict)
"""Refusals of a lease call that mean: the lease is not ours any more."""


def default_worker_id() -> str:
    """``<hostname>-<pid>``: unique among the live processes of a fleet."""
    return f"{socket.gethostname()}-{os.getpid()}"


def _drained(exc: WfError) -> bool:
    """A refusal saying the server drained the worker (or it left after draining)."""
    return isinstance(exc, WorkerNotActive) and exc.details.get("status") in (
        WorkerStatus.DRAINING.value,
        WorkerStatus.GONE.value,
    )


def _transport_error(exc: BaseException) -> bool:
    """An error after which the server may be fine but must be reached again."""
    return isinstance(exc, TimeoutError) or (isinstance(exc, WfError) and exc.retryable)


class Worker:
    """A wf worker (see the module docstring).

    ``servers`` are tried in order (failover); ``token`` is a worker
    credential; ``ssl_context`` verifies the server (and presents a client
    certificate for mutual TLS). ``capabilities`` default to everything the
    activities require; explicit ones must cover those requirements.
    ``prefetch`` leases beyond ``max_concurrency`` may be held unstarted to
    hide poll latency (the server sees ``max_concurrency + prefetch`` as the
    worker's capacity); graceful shutdown returns them at once.
    ``drain_timeout_s`` bounds how long :meth:`shutdown` waits for executing
    activities before cancelling them (``None``: as long as they take).
    ``clock`` is scheduler time for early grants (default
    :class:`~wf.clock.SystemClock`). ``failover_timeout_s`` is each call's
    failover budget (see the module docstring).
    """

    def __init__(
        self,
        servers: str | Sequence[str],
        activities: Iterable[ActivityDefinition],
        *,
        worker_id: str | None = None,
        token: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        capabilities: Iterable[str] | None = None,
        labels: Mapping[str, str] | None = None,
        max_concurrency: int = 4,
        prefetch: int = 0,
        heartbeat_interval_s: float = 5.0,
        tenants: Iterable[str] | None = None,
        partitions: Iterable[str] | None = None,
        poll_wait_s: float = POLL_WAIT_S,
        drain_timeout_s: float | None = None,
        version: str = wf.__version__,
        start_report_delay_s: float | None = START_REPORT_DELAY_S,
        clock: Clock | None = None,
        failover_timeout_s: float = WORKER_FAILOVER_TIMEOUT_S,
    ) -> None:
        self.servers = split_urls(servers)
        if not self.servers:
            raise InvalidArgument("a worker needs at least one server URL", field="servers")
        self.activities: dict[str, ActivityDefinition] = {}
        for defn in activities:
            if not isinstance(defn, ActivityDefinition):
                raise InvalidArgument(f"{defn!r} is not an @activity", field="activities")
            if defn.name in self.activities:
                raise InvalidArgument(f"two activities named {defn.name!r}", field="activities")
            self.activities[defn.name] = defn
        if not self.activities:
            raise InvalidArgument("a worker needs at least one activity", field="activities")
        needed = frozenset().union(*(d.capabilities for d in self.activities.values()))
        advertised = needed if capabilities is None else frozenset(capabilities)
        if not needed <= advertised:
            raise InvalidArgument(
                f"the activities need capabilities {sorted(needed - advertised)} "
                "the worker does not advertise",
                field="capabilities",
            )
        if max_concurrency < 1 or prefetch < 0:
            raise InvalidArgument("max_concurrency must be >= 1 and prefetch >= 0")
        if not 0 < heartbeat_interval_s <= 3600:
            raise InvalidArgument("heartbeat_interval_s must be in (0, 3600]")
        if not 0 <= poll_wait_s <= 60:
            raise InvalidArgument("poll_wait_s must be in [0, 60]")
        if start_report_delay_s is not None and not 0 <= start_report_delay_s <= 60:
            raise InvalidArgument("start_report_delay_s must be in [0, 60] or None")
        if not 0 <= failover_timeout_s <= 3600:
            raise InvalidArgument("failover_timeout_s must be in [0, 3600]")
        self.failover_timeout_s = failover_timeout_s
        self.worker_id = worker_id or default_worker_id()
        self.token = token
        self.ssl_context = ssl_context
        self.capabilities = advertised
        self.labels = dict(labels or {})
        self.max_concurrency = max_concurrency
        self.prefetch = prefetch
        self.heartbeat_interval_s = heartbeat_interval_s
        self.tenants = frozenset(tenants) if tenants is not None else None
        self.partitions = frozenset(partitions) if partitions is not None else None
        self.poll_wait_s = poll_wait_s
        self.drain_timeout_s = drain_timeout_s
        self.version = version
        self.start_report_delay_s = start_report_delay_s
        """See :data:`START_REPORT_DELAY_S`; ``None``: every start is reported and
        acknowledged before the activity begins (no start on grant either: the exact
        handshake, one round trip and commit more per activity)."""
        self.info = WorkerInfo(
            worker_id=self.worker_id,
            hostname=socket.gethostname(),
            capabilities=self.capabilities,
            max_concurrency=max_concurrency + prefetch,
            labels=self.labels,
            version=version,
            heartbeat_interval_s=heartbeat_interval_s,
            activity_types=frozenset(self.activities),
            tenants=self.tenants,
            partitions=self.partitions,
            declared={name: d.declared() for name, d in self.activities.items()} or None,
        )
        self.clock: Clock = clock or SystemClock()
        """Scheduler time, for early grants' ``not_before`` (see the module docstring)."""
        self.counters = WorkerCounters()
        self.lease_ttl_s = DEFAULT_LEASE_TTL_S
        self.connected = asyncio.Event()
        """Set while the worker is registered and the server answers."""
        self._register_needed = asyncio.Event()
        self._slot_freed = asyncio.Event()
        self._idle = asyncio.Event()
        self._finished = asyncio.Event()
        self._closed = asyncio.Event()
        self._held: dict[int, HeldLease] = {}
        self._buffer: deque[HeldLease] = deque()
        self._executing = 0
        self._runners: set[asyncio.Task[None]] = set()
        self._draining = False
        self._running = False
        self._stopped_unstarted = False
        """:meth:`shutdown` came before :meth:`run`: there is nothing to run."""
        self._polled = False
        """A poll was accepted: the server had this process's registration active. A
        refusal as draining or gone after that is an operator's drain (before it, it
        is about a predecessor under the same worker id)."""
        self._server_drain: asyncio.Task[None] | None = None
        self.drained_by_server = False
        """The server drained this worker (``scheduler.workers.shutdown`` by an
        operator): it stopped polling, finished its work and left (see the module
        docstring)."""
        self._fatal: BaseException | None = None
        self._last_completed: str | None = None
        self._client: RpcClient | None = None
        self._outbox: Outbox | None = None
        self._executor: ActivityThreads | None = None
        self._poll_task: asyncio.Task[None] | None = None
        self._poll_call: asyncio.Future[Any] | None = None
        """The long poll on the wire, abandoned when the worker moves to another node."""
        self._registered_at = 0
        """The client's ``failovers`` when the last registration was answered."""
        self._registered_url: str | None = None
        """The server that answered it."""
        self._poll_items_max = POLL_ITEMS_MAX
        self._report_polls = True
        """Reports carry the worker's next poll (``poll``); off for good once a server
        refused the field (one that predates it)."""
        self._asked_extra = 0
        """Leases asked for by reports' polls on the wire beyond their own slots (each
        also asks for the slot its report frees, which is still in ``_held``)."""
        self._start_reserved = 0
        """Idle execution slots promised to started-on-grant leases by polls and
        reports' polls on the wire: nothing else may take them, and no other request
        may promise them again (docs/architecture.md, "Start on grant")."""
        self._registrations_begun = 0
        """Registrations whose ``held`` list was built (answered or not)."""
        self._registrations_answered = 0
        """The last of those whose answer came before ``connected`` was set."""
        self._backoff = Backoff(self.worker_id)
        self._sampler: ProcessSampler | None = None

    def replace(self, **changes: Any) -> Worker:
        """A new, unstarted worker with the same settings except ``changes``."""
        settings: dict[str, Any] = {
            "servers": self.servers,
            "activities": list(self.activities.values()),
            "worker_id": self.worker_id,
            "token": self.token,
            "ssl_context": self.ssl_context,
            "capabilities": self.capabilities,
            "labels": self.labels,
            "max_concurrency": self.max_concurrency,
            "prefetch": self.prefetch,
            "heartbeat_interval_s": self.heartbeat_interval_s,
            "tenants": self.tenants,
            "partitions": self.partitions,
            "poll_wait_s": self.poll_wait_s,
            "drain_timeout_s": self.drain_timeout_s,
            "version": self.version,
            "start_report_delay_s": self.start_report_delay_s,
            "clock": self.clock,
            "failover_timeout_s": self.failover_timeout_s,
        }
        settings.update(changes)
        return Worker(**settings)

    # -------------------------------------------------------------- lifecycle

    @property
    def executing(self) -> int:
        """Activities running now."""
        return self._executing

    @property
    def lease_calls(self) -> tuple[int, int]:
        """``(calls, HTTP requests)`` of lease calls so far: batching shows as calls > requests."""
        if self._outbox is None:
            return 0, 0
        return self._outbox.calls_sent, self._outbox.batches_sent

    def held(self) -> dict[str, LeaseStatus]:
        """Activity id -> status of every lease held now."""
        return {h.activity_id: h.status for h in self._held.values()}

    def waiting_until(self) -> dict[str, float]:
        """Activity id -> ``not_before`` of every early grant waiting in its slot for
        its instant on :attr:`clock` (held, but its code has not begun)."""
        return {
            h.activity_id: h.grant.not_before
            for h in self._held.values()
            if h.due_wake is not None and h.grant.not_before is not None
        }

    def context_of(self, activity_id: str) -> ActivityContext | None:
        """The context of a held lease's attempt (heartbeat details, cancellation)."""
        for h in self._held.values():
            if h.activity_id == activity_id:
                return h.context
        return None

    async def run(self) -> None:
        """Work until :meth:`shutdown` finishes; raises a fatal error (e.g. refused
        credentials) if one stops the worker. After a :meth:`shutdown` that came
        first, returns at once (a host stopped right after starting it)."""
        if self._stopped_unstarted:
            return
        if self._running or self._closed.is_set():
            raise RuntimeError("a Worker runs once")
        self._running = True
        loop = asyncio.get_running_loop()
        self._sampler = ProcessSampler(loop.time())
        self._client = RpcClient(
            self.servers,
            token=self.token,
            ssl_context=self.ssl_context,
            failover_timeout_s=self.failover_timeout_s,
            jitter_seed=self.worker_id,
        )
        self._outbox = Outbox(
            self._client,
            attempt_timeout_s=WORKER_CALL_TIMEOUT_S,
            prepare=self._one_poll_per_batch,
        )
        if any(not d.is_async for d in self.activities.values()):
            self._executor = ActivityThreads(self.max_concurrency)
        self._register_needed.set()
        loops = [
            asyncio.create_task(self._outbox.run(), name="wf-worker-outbox"),
            asyncio.create_task(self._registrar(), name="wf-worker-registrar"),
            asyncio.create_task(self._heartbeat_loop(), name="wf-worker-heartbeat"),
            asyncio.create_task(self._renew_loop(), name="wf-worker-renew"),
        ]
        self._poll_task = asyncio.create_task(self._poll_loop(), name="wf-worker-poll")
        log.info(
            "worker %s starting",
            self.worker_id,
            extra={
                "action": "worker.starting",
                "worker_id": self.worker_id,
                "servers": self.servers,
                "activity_types": sorted(self.activities),
                "max_concurrency": self.max_concurrency,
            },
        )
        try:
            await self._finished.wait()
        finally:
            await stop_task(self._server_drain)  # waits for _closed, or was cut short
            await stop_task(self._poll_task)
            for runner in list(self._runners):
                await stop_task(runner)
            for task in reversed(loops):
                await stop_task(task)
            await self._client.close()
            if self._executor is not None:
                self._executor.shutdown()
            self._closed.set()
            log.info(
                "worker %s stopped%s",
                self.worker_id,
                " (drained by the server)" if self.drained_by_server else "",
                extra={
                    "action": "worker.stopped",
                    "worker_id": self.worker_id,
                    "drained_by_server": self.drained_by_server,
                },
            )
        if self._fatal is not None:
            raise self._fatal

    async def shutdown(self) -> None:
        """Graceful shutdown (see the module docstring); returns once the worker stopped."""
        if not self._running:
            self._stopped_unstarted = True  # run() then returns at once
            self._closed.set()
            return
        if self._draining or self._finished.is_set():
            await self._closed.wait()
            return
        self._draining = True
        log.info(
            "worker %s draining",
            self.worker_id,
            extra={
                "action": "worker.draining",
                "worker_id": self.worker_id,
                "executing": self._executing,
                "unstarted": len(self._buffer),
            },
        )
        # The server first: it grants nothing more and answers the open long poll at
        # once. That answer may carry grants committed as their start (start on grant),
        # which this worker must run: dropping one would leave it executing on the
        # server with nobody running it (docs/architecture.md, "Start on grant").
        if await self._announce_shutdown():
            await self._finish_polling()
        await self._drain()

    async def _drain(self) -> None:
        """The rest of a drain, the server told: return the unstarted leases, let the
        executing ones finish (bounded by ``drain_timeout_s``), then stop."""
        await stop_task(self._poll_task)
        for held in [h for h in self._buffer if not h.grant.started]:
            self._lose(held, "returned")
        for held in [
            h for h in self._held.values() if h.due_wake is not None and not h.grant.started
        ]:
            self._lose(held, "returned")  # not started yet: the server requeues it
        self._pump()  # started grants run while draining
        self._check_idle()
        try:
            async with asyncio.timeout(self.drain_timeout_s):
                await self._idle.wait()
        except TimeoutError:
            log.warning(
                "worker %s: drain timeout, cancelling %d activities",
                self.worker_id,
                self._executing,
                extra={"action": "worker.drain_timeout", "worker_id": self.worker_id},
            )
        self._finished.set()
        await self._closed.wait()

    async def _finish_polling(self) -> None:
        """Let a long poll already on the wire come back (bounded), so its grants are
        accepted: after the answer the poll loop sees the drain and ends by itself."""
        task = self._poll_task
        if task is not None and self._poll_call is not None and not task.done():
            await asyncio.wait({task}, timeout=HEARTBEAT_TIMEOUT_S)

    async def _announce_shutdown(self) -> bool:
        """``scheduler.workers.shutdown``, if the server can be reached in reasonable
        time; returns whether it answered."""
        assert self._client is not None
        if self.counters.registrations == 0:
            return False
        try:
            async with asyncio.timeout(HEARTBEAT_TIMEOUT_S):
                answer = await self._client.call(
                    SHUTDOWN_WORKER.name, WorkerIdParams(worker_id=self.worker_id)
                )
        except (WfError, TimeoutError) as exc:
            log.warning(
                "worker %s: shutdown not acknowledged: %r",
                self.worker_id,
                exc,
                extra={"action": "worker.shutdown_unacknowledged", "worker_id": self.worker_id},
            )
            return False
        log.info(
            "worker %s: server returned %s unstarted leases",
            self.worker_id,
            answer.get("returned") if isinstance(answer, dict) else answer,
            extra={"action": "worker.shutdown_acknowledged", "worker_id": self.worker_id},
        )
        return True

    def _check_idle(self) -> None:
        if self._draining and not self._held:
            self._idle.set()

    def _stop_fatally(self, exc: BaseException) -> None:
        if self._fatal is None:
            self._fatal = exc
            log.error(
                "worker %s stops: %s",
                self.worker_id,
                exc,
                extra={"action": "worker.fatal", "worker_id": self.worker_id, "error": repr(exc)},
            )
        self._finished.set()

    # ----------------------------------------------------------- connection

    def _connection_lost(self, exc: BaseException) -> None:
        if self.connected.is_set():
            self.counters.connection_losses += 1
            log.warning(
                "worker %s: server unreachable: %r",
                self.worker_id,
                exc,
                extra={"action": "worker.connection_lost", "worker_id": self.worker_id},
            )
        self.connected.clear()
        self._register_needed.set()

    def _registration_lost(self, exc: WfError) -> None:
        if self._draining:
            return
        if self._polled and _drained(exc):
            self._drained_by_server(exc)
            return
        log.warning(
            "worker %s: registration lost (%s); registering again",
            self.worker_id,
            exc.code,
            extra={"action": "worker.registration_lost", "worker_id": self.worker_id},
        )
        self.connected.clear()
        self._register_needed.set()

    def _drained_by_server(self, exc: WfError) -> None:
        """An operator drained this worker (``scheduler.workers.shutdown``): drain as
        :meth:`shutdown` does, without announcing it again, and stop for good. Before,
        it registered again at its next call, and the drain did not stick."""
        self._draining = True
        self.drained_by_server = True
        log.info(
            "worker %s drained by the server (%s): finishing %d activities, then stopping",
            self.worker_id,
            exc.details.get("status"),
            self._executing,
            extra={
                "action": "worker.drained_by_server",
                "worker_id": self.worker_id,
                "executing": self._executing,
                "unstarted": len(self._buffer),
            },
        )

        async def drain() -> None:
            await self._finish_polling()  # it may carry grants started on grant
            await self._drain()

        self._server_drain = asyncio.create_task(drain(), name="wf-worker-server-drain")

    async def _registrar(self) -> None:
        assert self._client is not None
        while True:
            await self._register_needed.wait()
            try:
                if self._draining:
                    # Registering would make a draining worker active again: probe.
                    await self._probe()
                else:
                    await self._register()
            except (Unauthorized, Forbidden, InvalidArgument) as exc:
                self._stop_fatally(exc)
                return
            except (WfError, TimeoutError) as exc:
                await asyncio.sleep(self._backoff.next_delay_s())
                if not _transport_error(exc):
                    log.warning(
                        "worker %s: registration refused: %r",
                        self.worker_id,
                        exc,
                        extra={"action": "worker.register_refused", "worker_id": self.worker_id},
                    )
                continue
            self._registrations_answered = self._registrations_begun
            self._register_needed.clear()
            self.connected.set()

    async def _register(self) -> None:
        assert self._client is not None
        # Every lease still ours, running or prefetched: the server keeps these and
        # requeues at once the others it granted to this worker id (empty at start).
        # A grant answered after this list was built may be one of those others: it
        # waits for this answer before its first lease call (_after_registration).
        self._registrations_begun += 1
        held = [
            WireHeldLease(activity_id=h.activity_id, token=h.token)
            for h in self._held.values()
            if h.lost is None
        ]
        raw, url = await self._client.call_answered_by(
            REGISTER_WORKER.name,
            RegisterWorkerParams(info=self.info, held=held),
            timeout_s=WORKER_CALL_TIMEOUT_S,
        )
        # Read right after the answer. A concurrent call may have moved the client on
        # meanwhile: then the URLs differ and the next contact registers again.
        self._registered_at = self._client.failovers
        self._registered_url = url
        answer: RegisterResult = REGISTER_WORKER.decode(raw)
        self.lease_ttl_s = answer.lease_ttl_s
        self.counters.registrations += 1
        log.info(
            "worker %s registered",
            self.worker_id,
            extra={
                "action": "worker.registered",
                "worker_id": self.worker_id,
                "lease_ttl_s": answer.lease_ttl_s,
                "registrations": self.counters.registrations,
                "held": len(held),
                "server": url,
            },
        )

    async def _probe(self) -> None:
        assert self._client is not None
        # Refused or not, the server answered: it is reachable, and that was the question.
        with contextlib.suppress(WorkerNotActive, NotFound):
            await self._client.call(
                HEARTBEAT.name,
                HeartbeatParams(worker_id=self.worker_id, stats=self._stats()),
                timeout_s=WORKER_CALL_TIMEOUT_S,
            )

    def _contact(self) -> None:
        """A call was answered: the next failure backs off from the start; if the
        client got there by moving to another node, register there."""
        self._backoff.reset()
        client = self._client
        if client is not None and (
            client.failovers != self._registered_at or client.url != self._registered_url
        ):
            self._moved(client)

    def _moved(self, client: RpcClient) -> None:
        """The client now talks to another node (or maybe another, behind one URL):
        register again with the held leases, and abandon a long poll left open on
        the old node (a frozen one would hold it until its timeout)."""
        self._registered_at = client.failovers
        self._registered_url = client.url
        if self._draining:
            return  # registering would make a draining worker active again
        log.info(
            "worker %s: now at %s; registering again",
            self.worker_id,
            client.url,
            extra={"action": "worker.moved", "worker_id": self.worker_id, "server": client.url},
        )
        self.connected.clear()
        self._register_needed.set()
        poll = self._poll_call
        if poll is not None and not poll.done():
            poll.cancel()

    # -------------------------------------------------------------- heartbeat

    def _stats(self) -> HeartbeatStats:
        loop = asyncio.get_running_loop()
        sampler = self._sampler
        assert sampler is not None
        status = {
            h.activity_id: (
                LeaseStatus.LEASED.value
                if h.status is LeaseStatus.LEASED
                else LeaseStatus.EXECUTING.value
            )
            for h in self._held.values()
            if h.lost is None
        }
        return HeartbeatStats(
            workload=self._executing,
            memory_fraction=sampler.memory_fraction(),
            cpu_fraction=sampler.cpu_fraction(loop.time()),
            queue_depth=len(self._buffer),
            last_completed_activity=self._last_completed,
            lease_status=status,
        )

    async def _heartbeat_loop(self) -> None:
        assert self._client is not None
        while True:
            await self.connected.wait()
            try:
                raw = await self._client.call(
                    HEARTBEAT.name,
                    HeartbeatParams(worker_id=self.worker_id, stats=self._stats()),
                    timeout_s=WORKER_CALL_TIMEOUT_S,
                )
            except Unauthorized as exc:
                self._stop_fatally(exc)
                return
            except _REGISTRATION_LOST as exc:
                self._registration_lost(exc)
                if not self._draining:
                    continue
            except (WfError, TimeoutError) as exc:
                self._connection_lost(exc)
                continue
            else:
                self._contact()
                self._on_revoked(HEARTBEAT.decode(raw))
            await asyncio.sleep(self.heartbeat_interval_s)

    # ------------------------------------------------------------------- poll

    async def _poll_loop(self) -> None:
        assert self._client is not None
        while not self._draining:
            await self.connected.wait()
            self._slot_freed.clear()
            want = min(
                self.max_concurrency + self.prefetch - len(self._held) - self._asked_extra,
                self._poll_items_max,
            )
            if want <= 0:
                await self._slot_freed.wait()
                continue
            # Slots idle now and not promised to another request stay idle until this
            # answer arrives (only answers fill the buffer, and _pump keeps promised
            # slots), so grants for them may be started on grant: the server then
            # commits the grant as the start, and this worker must run what it gets.
            start = (
                0 if self.start_report_delay_s is None else max(0, min(want, self._idle_slots()))
            )
            self._start_reserved += start
            sent_after = self._registrations_begun
            call = asyncio.ensure_future(
                self._client.call(
                    POLL.name,
                    PollParams(
                        worker_id=self.worker_id,
                        max_items=want,
                        wait_s=self.poll_wait_s,
                        start=start,
                    ),
                    timeout_s=self.poll_wait_s + CALL_TIMEOUT_MARGIN_S,
                )
            )
            self._poll_call = call
            self.counters.polls += 1
            try:
                await asyncio.wait({call})
            finally:
                self._poll_call = None
                self._start_reserved -= start  # the answer's started grants take them now
                if not call.done():
                    call.cancel()  # this loop itself is being cancelled
            if start and (call.cancelled() or call.exception() is not None):
                self._pump()  # slots no longer promised, no grant for them: buffered ones
            if call.cancelled():
                continue  # abandoned on a move: poll again once registered at the new node
            try:
                raw = call.result()
            except Unauthorized as exc:
                self._stop_fatally(exc)
                return
            except _REGISTRATION_LOST as exc:
                self._registration_lost(exc)
                continue
            except InvalidArgument as exc:
                if want == 1:
                    self._stop_fatally(exc)
                    return
                # The server bounds polls lower than we guessed (its poll_items_max).
                self._poll_items_max = max(1, want // 2)
                continue
            except (WfError, TimeoutError) as exc:
                if _transport_error(exc):
                    self._connection_lost(exc)
                else:
                    self._stop_fatally(exc)
                    return
                continue
            self._contact()
            self._polled = True
            result: PollResult = POLL.decode(raw)
            self._on_revoked(result.revoked)
            self._accept(result.leases, result.traceparents, sent_after)
            if result.leases:
                # Two loop turns (the runner's, then its activity task's): the activities
                # just received begin before the next poll is encoded and sent, since a
                # start is what dispatch latency is about.
                await asyncio.sleep(0)
                await asyncio.sleep(0)

    def _accept(
        self, grants: list[LeaseGranted], traceparents: Mapping[str, str], sent_after: int
    ) -> None:
        """Buffer (and start) the grants of an answer to a request sent when
        ``sent_after`` registrations had begun.

        A registration begun since may reach the server after the request, or after
        a start sent for one of its grants, without listing the lease; the server
        then requeues a leased one and fails closed (``may_have_executed``) one
        that started. So such a grant's first lease call waits for that
        registration's answer: its ``leases.start`` is then judged after it, and a
        started grant runs only once a renewal proves it still ours
        (:meth:`_confirmed_start`)."""
        debug = log.isEnabledFor(logging.DEBUG)
        unsure = self._registrations_begun if sent_after != self._registrations_begun else 0
        for grant in grants:
            lease = grant.lease
            if lease.token in self._held:
                continue  # delivered twice (a retried poll): one runner per lease
            info = ActivityInfo(
                activity_id=lease.activity_id,
                activity_type=grant.activity_type,
                attempt=lease.attempt,
                token=lease.token,
                worker_id=self.worker_id,
                workflow_id=grant.workflow_id,
                correlation_id=grant.correlation_id,
                traceparent=traceparents.get(lease.lease_id),
            )
            held = HeldLease(grant=grant, context=ActivityContext(info=info))
            if unsure:
                held.confirm_after = unsure
            self._held[lease.token] = held
            if grant.started:
                # Already EXECUTING on the server: it goes first, ahead of prefetched work.
                self._buffer.appendleft(held)
            else:
                self._buffer.append(held)
            self.counters.received += 1
            if debug:
                log.debug(
                    "lease %s received",
                    lease.token,
                    extra={
                        "action": "lease.received",
                        "worker_id": self.worker_id,
                        "activity_id": lease.activity_id,
                        "token": lease.token,
                        "correlation_id": grant.correlation_id,
                    },
                )
        self._pump()

    def _idle_slots(self) -> int:
        """Execution slots idle now that no request on the wire was promised."""
        return self.max_concurrency - self._executing - len(self._buffer) - self._start_reserved

    def _pump(self) -> None:
        """Start buffered leases while execution slots are free."""
        while self._buffer and self._executing < self.max_concurrency:
            if not self._buffer[0].grant.started and (
                # The server takes unstarted leases back; started ones are run.
                self._draining
                # Slots promised to started grants on the wire stay theirs.
                or self._executing >= self.max_concurrency - self._start_reserved
            ):
                break
            held = self._buffer.popleft()
            self._executing += 1
            held.status = LeaseStatus.EXECUTING
            runner = asyncio.create_task(self._run_lease(held), name=f"wf-lease-{held.token}")
            self._runners.add(runner)
            runner.add_done_callback(self._runners.discard)

    # ----------------------------------------------------------- revocation

    def _on_revoked(self, revoked: list[LeaseRevoked]) -> None:
        for r in revoked:
            held = self._held.get(r.token)
            if held is not None:
                self._lose(held, f"revoked:{r.reason}")

    def _lose(self, held: HeldLease, reason: str) -> None:
        """The lease is no longer ours: cancel its work, never report on it."""
        if held.lost is not None:
            return
        held.lost = reason
        held.context.cancel(reason)
        if held.due_wake is not None:
            held.due_wake.set()
        self.counters.lost += 1
        log.info(
            "lease %s lost: %s",
            held.token,
            reason,
            extra={
                "action": "lease.lost",
                "worker_id": self.worker_id,
                "activity_id": held.activity_id,
                "token": held.token,
                "reason": reason,
                "status": held.status.value,
                "correlation_id": held.grant.correlation_id,
            },
        )
        if held.status is LeaseStatus.LEASED:
            self._buffer.remove(held)
            self._release(held)
        elif held.activity_task is not None:
            held.activity_task.cancel()

    def _release(self, held: HeldLease) -> None:
        self._held.pop(held.token, None)
        self._slot_freed.set()
        self._check_idle()

    # ---------------------------------------------------------------- leases

    async def _run_lease(self, held: HeldLease) -> None:
        grant = held.grant
        reporter: asyncio.Task[None] | None = None
        try:
            ending: Ending | None = None
            try:
                if grant.not_before is not None:
                    await self._until_due(held, grant.not_before)
                    if self._draining and held.lost is None and not grant.started:
                        # Due while draining: like any unstarted lease, it goes back
                        # (a started one is executing on the server: it runs).
                        self._lose(held, "returned")
                if held.confirm_after:  # rare: checked here, no coroutine per lease
                    await self._after_registration(held)
                if held.lost is not None:
                    began = False
                elif grant.started:
                    held.start_reported = True
                    began = not held.confirm_after or await self._confirmed_start(held)
                    if began:
                        self.counters.started_on_grant += 1
                elif grant.may_restart and self.start_report_delay_s is not None:
                    # Begins now; the start goes with the result (START_REPORT_DELAY_S).
                    reporter = asyncio.create_task(self._report_start_later(held))
                    began = True
                else:
                    began = await self._fenced_call(held, START_ACTIVITY, held.fenced())
                    held.start_reported = began
                if began:
                    self.counters.started += 1
                    ending = await self._execute(held)
            finally:
                self._executing -= 1
                self._pump()
                if reporter is not None:
                    await self._settle_start_report(held, reporter)
            if ending is None or isinstance(ending, Abandoned) or held.lost is not None:
                return
            held.status = LeaseStatus.REPORTING
            await self._report(held, ending)
        finally:
            if reporter is not None and not reporter.done():
                reporter.cancel()
            self._release(held)

    async def _confirmed_start(self, held: HeldLease) -> bool:
        """Whether a started grant may run: at once, unless a registration was begun
        while its request was on the wire (:meth:`_accept`). Then, once that
        registration is answered, a renewal says whether the server still holds the
        lease for this worker: the server runs a worker's calls as they arrive, so
        an answer after the registration's comes from after it. Refused, the lease
        was failed closed without running (the window of docs/architecture.md,
        "Start on grant"), and it is dropped unrun. Called after
        :meth:`_after_registration`."""
        if not held.confirm_after:
            return True
        return await self._fenced_call(held, RENEW_LEASE, self._renewal(held))

    async def _after_registration(self, held: HeldLease) -> None:
        """For a grant answered while a registration was begun (:meth:`_accept`): wait
        for that registration's answer, so that the server judges the grant's next
        lease call after the registration."""
        if not held.confirm_after:
            return
        self.counters.registration_waits += 1
        while self._registrations_answered < held.confirm_after:
            await self.connected.wait()

    async def _until_due(self, held: HeldLease, not_before: float) -> None:
        """Hold an early grant's slot until ``not_before`` or until the lease is lost."""
        self.counters.early_grants += 1
        clock = self.clock
        held.due_wake = wake = asyncio.Event()
        try:
            # A loop: an event-loop timer may wake a fraction of a millisecond early
            # (libuv counts whole milliseconds), and the instant must never be beaten.
            while held.lost is None and clock.now() < not_before:
                await sleep_until(clock, not_before, wake)
        finally:
            held.due_wake = None

    async def _report_start_later(self, held: HeldLease) -> None:
        """Report a ``may_restart`` activity's start once it has run a while."""
        assert self.start_report_delay_s is not None
        await asyncio.sleep(self.start_report_delay_s)
        held.start_calling = True
        if await self._fenced_call(held, START_ACTIVITY, held.fenced()):
            held.start_reported = True

    async def _settle_start_report(self, held: HeldLease, reporter: asyncio.Task[None]) -> None:
        """The activity ended: drop a start report not sent yet, or wait for the one on
        the wire (the result must reach the server after it, never beside it).

        A reporter cancelled before ``start_calling`` is set never sends (the
        cancellation lands at its sleep), so nothing is awaited for it: the result
        goes out without a loop turn spent on a task that only has to end."""
        if not held.start_calling:
            reporter.cancel()
            return
        await asyncio.wait({reporter})

    async def _execute(self, held: HeldLease) -> Ending:
        if held.lost is not None:
            return Abandoned(held.lost)
        if held.grant.lease.attempt > 1:
            # A later attempt: it may resume from what an earlier one heartbeated.
            held.context.last_heartbeat_details = await self._previous_details(held)

        def keep(task: asyncio.Task[Any]) -> None:
            held.activity_task = task

        return await execute(
            self.activities.get(held.grant.activity_type),
            held.context,
            held.grant.payload,
            self._executor,
            keep,
        )

    def _renewal(self, held: HeldLease) -> RenewParams:
        """A renewal with the latest heartbeat details (see :meth:`HeldLease.renewal`);
        details it cannot send are logged once per lease."""
        refused = held.details_refused
        params = held.renewal()
        if held.details_refused is not None and held.details_refused != refused:
            log.warning(
                "activity %s: heartbeat details not sent: %s",
                held.activity_id,
                held.details_refused,
                extra={
                    "action": "lease.details_refused",
                    "worker_id": self.worker_id,
                    "activity_id": held.activity_id,
                    "token": held.token,
                    "reason": held.details_refused,
                },
            )
        return params

    async def _previous_details(self, held: HeldLease) -> Any:
        """The details an earlier attempt last sent (``None`` if none did, or if they
        cannot be read: the attempt then starts from the beginning)."""
        outbox = self._outbox
        assert outbox is not None
        try:
            raw = await outbox.call(LEASE_DETAILS.name, held.fenced())
            data = LEASE_DETAILS.decode(raw)
            return None if not data else msgspec.json.decode(data)
        except (WfError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            log.warning(
                "activity %s: the last heartbeat details could not be read: %s",
                held.activity_id,
                exc,
                extra={
                    "action": "lease.details_unread",
                    "worker_id": self.worker_id,
                    "activity_id": held.activity_id,
                    "token": held.token,
                },
            )
            return None

    async def _report(self, held: HeldLease, ending: Succeeded | Failed) -> None:
        if isinstance(ending, Failed) and held.unsent_details():
            # The next attempt resumes from the details: send the latest before the
            # failure (best effort: a refusal is the failure report's to find out).
            with contextlib.suppress(WfError):
                assert self._outbox is not None
                await self._outbox.call(RENEW_LEASE.name, self._renewal(held))
        unreported_start = not held.start_reported
        if unreported_start:
            self.counters.unreported_starts += 1
        method: MethodSpec[Any]
        params: CompleteParams | FailParams
        beyond, start = self._ask_with_report()
        poll = (
            None
            if beyond < 0
            else ReportPoll(worker_id=self.worker_id, max_items=1 + beyond, start=start)
        )
        if isinstance(ending, Succeeded):
            method = COMPLETE_ACTIVITY
            params = CompleteParams(
                activity_id=held.activity_id,
                token=held.token,
                result=ending.result,
                unreported_start=unreported_start,
                poll=poll,
            )
        else:
            method = FAIL_ACTIVITY
            params = FailParams(
                activity_id=held.activity_id,
                token=held.token,
                error_type=ending.error_type,
                message=ending.message,
                retryable=ending.retryable,
                unreported_start=unreported_start,
                stack_trace=ending.stack_trace,
                poll=poll,
            )
        if poll is not None:
            self.counters.report_polls += 1
        answered: list[Any] = []
        sent_after = self._registrations_begun
        try:
            reported = await self._fenced_call(held, method, params, answered)
        finally:
            if poll is not None:
                self._asked_extra -= beyond
                self._start_reserved -= start  # the answer's started grants take them now
        if poll is not None and reported and answered:
            self._take_with_report(method.decode(answered[0]), sent_after)
        if start:
            self._pump()  # slots no longer promised: buffered leases may have them
        if not reported:
            return
        if isinstance(ending, Succeeded):
            self.counters.completed += 1
            if len(self.counters.acknowledged) < ACKNOWLEDGED_MAX:
                self.counters.acknowledged.append((held.activity_id, held.token))
            self._last_completed = held.activity_id
        else:
            self.counters.failed += 1
        if isinstance(ending, Succeeded) and not log.isEnabledFor(logging.INFO):
            return  # the line's fields are not even built
        extra = {
            "worker_id": self.worker_id,
            "activity_id": held.activity_id,
            "token": held.token,
            "attempt": held.grant.lease.attempt,
            "correlation_id": held.grant.correlation_id,
        }
        if isinstance(ending, Succeeded):
            sink = line_sink(log)
            if sink is not None:  # the same line, without a LogRecord (wf.log_lines)
                message = f"activity {held.activity_id} completed"
                sink.write_line(logging.INFO, log.name, "lease.completed", message, extra)
            else:
                log.info(
                    "activity %s completed",
                    held.activity_id,
                    extra={"action": "lease.completed", **extra},
                )
        else:
            # A warning: an activity's own failure is what an operator looks for first.
            # The trace stays with the attempt on the server (wf runs inspect --attempts).
            log.warning(
                "activity %s failed: %s: %s",
                held.activity_id,
                ending.error_type,
                ending.message,
                extra={
                    "action": "lease.failed",
                    "error_type": ending.error_type,
                    "error_message": ending.message,
                    "retryable": ending.retryable,
                    **extra,
                },
            )

    def _ask_with_report(self) -> tuple[int, int]:
        """What a report about to be sent asks for with its ``poll``: ``(extra, start)``,
        ``extra`` leases beyond the slot the report frees (``-1``: send no ``poll``).

        Only when the poll loop would otherwise poll for that slot once the report is
        answered: no long poll is on the wire (its demand would be replaced), the
        worker is connected and not draining. Asks for the report's own slot plus any
        capacity no request on the wire covers, and reserves both until the answer:
        ``start`` counts only execution slots idle now and promised to no other
        request, as the poll loop's does (docs/architecture.md, "Start on grant").
        """
        if (
            not self._report_polls
            or self._draining
            or not self.connected.is_set()
            or self._poll_call is not None
        ):
            return -1, 0
        free = self.max_concurrency + self.prefetch - len(self._held) - self._asked_extra
        extra = max(0, min(free, self._poll_items_max - 1))
        start = (
            0 if self.start_report_delay_s is None else max(0, min(1 + extra, self._idle_slots()))
        )
        self._asked_extra += extra
        self._start_reserved += start
        return extra, start

    def _one_poll_per_batch(
        self, calls: list[tuple[str, msgspec.Struct]]
    ) -> list[tuple[str, msgspec.Struct]]:
        """The outbox's ``prepare``: the ``poll`` of every report in one batch folded
        into the batch's last report.

        The server runs a batch's calls in order, so the last report's poll comes
        after every completion in the batch has freed its slot: one dispatch pass
        for the batch instead of one per report. It asks for what the reports asked
        together (within :data:`POLL_ITEMS_MAX`'s learned bound), started grants
        included. Each report keeps its own reservation until its answer, as
        before; the others' answers carry no leases (the server did not poll for
        them), and the last one's carries them all.
        """
        carriers: list[tuple[int, ReportPoll]] = []
        for i, (_, params) in enumerate(calls):
            if isinstance(params, (CompleteParams, FailParams)) and params.poll is not None:
                carriers.append((i, params.poll))
        if len(carriers) < 2:
            return calls
        max_items = min(sum(poll.max_items for _, poll in carriers), self._poll_items_max)
        start = min(sum(poll.start for _, poll in carriers), max_items)
        folded = list(calls)
        for i, _ in carriers[:-1]:
            method, params = folded[i]
            folded[i] = (method, msgspec.structs.replace(params, poll=None))
        last = carriers[-1][0]
        method, params = folded[last]
        poll = ReportPoll(worker_id=self.worker_id, max_items=max_items, start=start)
        folded[last] = (method, msgspec.structs.replace(params, poll=poll))
        return folded

    def _take_with_report(self, answer: ReportResult, sent_after: int) -> None:
        """Take a report's poll answer as the poll loop takes a poll's: revocations, then
        leases (started ones run at once). ``leases`` is ``None`` when the server did
        not poll (it dropped an unknown ``poll``): the poll loop then asks."""
        if answer.leases is None:
            return
        self._on_revoked(answer.revoked)
        if not answer.leases:
            return
        self.counters.report_poll_leases += len(answer.leases)
        self._accept(answer.leases, answer.traceparents, sent_after)
        if self._draining:
            # Drained meanwhile: unstarted leases go back, as _drain returns them (the
            # server requeues them); started ones run (_pump), as from any poll.
            grants = {g.lease.token for g in answer.leases if not g.started}
            for token in grants:
                held = self._held.get(token)
                if held is not None and held.status is LeaseStatus.LEASED:
                    self._lose(held, "returned")

    async def _fenced_call(
        self,
        held: HeldLease,
        method: MethodSpec[Any],
        params: msgspec.Struct,
        answered: list[Any] | None = None,
    ) -> bool:
        """One lease call, retried until the server answers; False if the lease was lost.
        ``answered`` receives the server's answer.

        A start refused as ``illegal_transition`` was applied by an earlier try
        whose answer got lost: it counts as done. A report whose ``poll`` a server
        refused as an invalid argument (one that predates the field) is sent again
        without it, and no later report carries one.
        """
        outbox = self._outbox
        assert outbox is not None
        forbidden = 0
        unanswered = 0
        starting = method is START_ACTIVITY
        reporting = method is COMPLETE_ACTIVITY or method is FAIL_ACTIVITY
        while True:
            if starting and held.lost is not None:
                return False
            try:
                answer = await outbox.call(method.name, params)
            except InvalidArgument as exc:
                if isinstance(params, (CompleteParams, FailParams)) and params.poll is not None:
                    self._without_report_polls(exc)
                    params = msgspec.structs.replace(params, poll=None)
                    continue
                self._lose(held, exc.code)
                return False
            except IllegalTransition as exc:
                if starting:
                    return True
                if reporting:
                    self._report_refused(held, exc, unanswered)
                self._lose(held, exc.code)
                return False
            except _LEASE_LOST as exc:
                if reporting:
                    self._report_refused(held, exc, unanswered)
                self._lose(held, exc.code)
                return False
            except Unauthorized as exc:
                self._lose(held, exc.code)
                self._stop_fatally(exc)
                return False
            except Forbidden as exc:
                forbidden += 1
                if forbidden > FORBIDDEN_RETRIES_MAX:
                    self._lose(held, exc.code)
                    return False
                self._registration_lost(exc)
            except WfError as exc:
                if not exc.retryable:
                    self._lose(held, exc.code)
                    return False
                unanswered += 1
                self._connection_lost(exc)
            else:
                self._contact()
                if answered is not None:
                    answered.append(answer)
                return True
            await self.connected.wait()

    def _without_report_polls(self, exc: InvalidArgument) -> None:
        """A server refused a report's ``poll``: send none from now on."""
        if self._report_polls:
            self._report_polls = False
            log.info(
                "worker %s: the server refused a poll with a report (%s); polling apart",
                self.worker_id,
                exc.message,
                extra={"action": "worker.report_polls_off", "worker_id": self.worker_id},
            )

    def _report_refused(self, held: HeldLease, exc: WfError, unanswered: int) -> None:
        """A result the server refused (stale, expired, finished): dropped, never
        retried. After an unanswered try (a failover), the first try may well have
        been applied; otherwise the lease was lost while the activity ran."""
        self.counters.reports_dropped += 1
        log.warning(
            "activity %s: result refused (%s), dropped",
            held.activity_id,
            exc.code,
            extra={
                "action": "lease.report_dropped",
                "worker_id": self.worker_id,
                "activity_id": held.activity_id,
                "token": held.token,
                "reason": exc.code,
                "unanswered_tries": unanswered,
                "correlation_id": held.grant.correlation_id,
            },
        )

    async def _renew_loop(self) -> None:
        outbox = self._outbox
        assert outbox is not None
        while True:
            # After connecting: the registration answer names the TTL.
            await self.connected.wait()
            await asyncio.sleep(self.lease_ttl_s / 3.0)
            due = [
                h
                for h in self._held.values()
                if h.lost is None
                and h.status is not LeaseStatus.REPORTING
                and h.grant.lease.renewable
            ]
            if not due:
                continue
            answers = await asyncio.gather(
                *(outbox.call(RENEW_LEASE.name, self._renewal(h)) for h in due),
                return_exceptions=True,
            )
            for held, answer in zip(due, answers, strict=True):
                if not isinstance(answer, BaseException):
                    continue
                if held.status is LeaseStatus.REPORTING:
                    continue  # the report's own answer decides
                if isinstance(answer, _LEASE_LOST):
                    self._lose(held, answer.code)
                elif isinstance(answer, WfError) and answer.retryable:
                    self._connection_lost(answer)
