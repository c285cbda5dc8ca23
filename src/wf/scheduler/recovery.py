"""Snapshots, exact restore, and recovery after a restart (WF-005 §22, §23).

Theory of operation
-------------------
:func:`snapshot` captures every piece of core state that can influence a
future decision: activities with their counters, workers with their leases
and demand, ordering holds, timers, rate-limiter buckets, backpressure
level, balancer cursor and policy counters, and the sequence and token
counters. :func:`restore` rebuilds a core that makes exactly the
same decisions as the original from that point on (the determinism tests
replay half a log, snapshot, restore, and compare the rest byte for byte).
Heaps are rebuilt from their live entries; their internal layout may differ,
but the order they yield is fixed by unique ``(key, seq)`` pairs. Restoring
10^6 queued activities is a start-up cost, so the ready queue is filled in
bulk (each lane's entries appended, then heapified once; tickets, lane order
and counters exactly as one-by-one pushes would leave them), and
``adopt=True`` lets a caller that owns a fresh snapshot (one
:func:`snapshot_from_durable` built) hand its activities over instead of
having them copied.

:func:`snapshot_from_durable` is the other way into a core: from what a store
keeps (activities, workers, counters: :class:`DurableRows`, decoded by the
store) it derives everything else, so the knowledge of how a core is put
together stays in the core and the store only hands over rows.

:func:`recover` is the §23 procedure for a *restart*: restore the state, then
the :class:`~wf.scheduler.commands.Recover` command, which a core that took
over a store warm (a standby's) is handed too. While no scheduler ran nobody
could heartbeat, renew or report, so nobody is blamed for that time: every
live worker gets a fresh heartbeat grace period from ``now``, every held
lease (granted or started) a fresh lease grace (its expiry becomes at least
``now`` plus the lease TTL, recorded as a ``LeaseRenewed``, so the store
agrees), and poll demand is dropped because the long polls died with the old
process. A lease whose expiry passed during the outage therefore does not
expire at recovery's first tick, which would fail non-idempotent work whose
worker lived through it; a worker that died with the old server loses its
leases when its heartbeat grace or their lease grace runs out, and one that
registers again listing what it holds gets the rest requeued at once. Then
one ``Tick`` at ``now`` fires due timers, forgets departed workers and
resumes dispatch. It is a pure function of (snapshot, now), so recovery does
not break determinism.

:func:`state_digest` hashes a canonical encoding of the durable state, for
tests that compare the state after recovery with the state at the last
acknowledged transition.
"""

from __future__ import annotations

import hashlib
import heapq
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

import msgspec

from wf.errors import CorruptRecord
from wf.scheduler import commands as cmd
from wf.scheduler.backpressure import BackpressureController, BackpressureSnapshot
from wf.scheduler.config import SchedulerConfig
from wf.scheduler.dispatcher import SchedulerCore
from wf.scheduler.model import (
    LIVE_WORKER_STATUSES,
    Activity,
    ActivityState,
    WorkerInfo,
    WorkerState,
    WorkerStatus,
)
from wf.scheduler.outputs import Outcome
from wf.scheduler.policies import _PolicyBase, make_policy
from wf.scheduler.queue import Entry, Lane, worker_signature
from wf.scheduler.rate_limiter import RateLimiter, RateLimiterSnapshot
from wf.scheduler.timer import DelayedTimers

SNAPSHOT_VERSION = 1

Rank = Callable[[Activity], Any]
"""A policy's within-lane order key."""
_BASE_RANK: Final = _PolicyBase.rank
"""The base policies' ``rank``: the same key for every activity."""

_QUEUED: Final = ActivityState.QUEUED
_LEASED: Final = ActivityState.LEASED
_EXECUTING: Final = ActivityState.EXECUTING


class CoreSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a :class:`SchedulerCore` needs to continue identically."""

    version: int = SNAPSHOT_VERSION
    """Format version of this snapshot."""
    config: SchedulerConfig
    """The configuration the core ran with."""
    seq: int
    """Activity creation sequence counter."""
    token: int
    """Last fencing token granted."""
    worker_seq: int
    """Worker registration sequence counter."""
    activities: list[Activity]
    """Unfinished activities in creation order."""
    finished: list[tuple[str, ActivityState]]
    """Recently finished ids (oldest first) and their terminal states."""
    workers: list[WorkerState]
    """Every known worker in registration order."""
    waiting: list[str]
    """Workers with poll demand, in the order they began waiting."""
    timers: list[tuple[float, int, str]]
    """Dormant activities (due, seq, id)."""
    limiter: RateLimiterSnapshot
    """Rate-limiter buckets and running counts."""
    backpressure: BackpressureSnapshot
    """Backpressure level and slow-dispatch bucket."""
    balancer: dict[str, int]
    """Load-balancer cursor."""
    policies: dict[str, dict[str, Any]]
    """Policy group -> policy state."""
    run_deadlines: list[tuple[float, int, str, float]] = msgspec.field(default_factory=list)
    """Armed execution timeouts (``SchedulerCore.run_deadlines``). A snapshot built from
    the store has none: ``Recover`` arms them from the recovery instant."""


def snapshot(core: SchedulerCore) -> CoreSnapshot:
    """Capture the core's full state (see the module docstring)."""
    return CoreSnapshot(
        config=core.config,
        seq=core.seq,
        token=core.leases.token,
        worker_seq=core.registry.seq,
        # Copies: a snapshot is a value and must not change as the core goes on.
        activities=[
            msgspec.structs.replace(a)
            for a in sorted(core.activities.values(), key=lambda a: a.seq)
        ],
        finished=list(core.finished.items()),
        workers=[
            msgspec.structs.replace(w, leases=dict(w.leases))
            for w in sorted(core.registry.workers.values(), key=lambda w: w.seq)
        ],
        waiting=list(core.waiting),
        timers=core.timers.snapshot(),
        limiter=core.limiter.snapshot(),
        backpressure=core.backpressure.snapshot(),
        balancer=core.balancer.snapshot(),
        policies={name: p.snapshot() for name, p in core.policies.items()},
        run_deadlines=list(core.run_deadlines),
    )


def restore(
    snap: CoreSnapshot, *, adopt: bool = False, by_id: dict[str, Activity] | None = None
) -> SchedulerCore:
    """A core that continues exactly where the snapshotted one stood.

    The core works on copies of the snapshot's activities, so the snapshot
    stays a value. With ``adopt=True`` it takes the snapshot's ``Activity``
    objects over instead (no copies): only for a snapshot that nobody reads
    afterwards, such as the fresh one :func:`snapshot_from_durable` returns; the
    core mutates those objects from then on. ``by_id`` (only with ``adopt``):
    those same activities keyed by id in the same order, which the core then
    takes as its activity table instead of building one; ignored unless it holds
    as many as the snapshot (a snapshot that left an activity out builds its own).
    """
    if snap.version != SNAPSHOT_VERSION:
        raise CorruptRecord(f"unsupported snapshot version {snap.version}", version=snap.version)
    core = SchedulerCore(snap.config)
    core.seq = snap.seq
    core.leases.token = snap.token
    core.registry.seq = snap.worker_seq
    if adopt:
        activities = snap.activities  # _restore_queue resets their queue tickets
    else:
        # Copies, so that the snapshot stays a value even while the core mutates.
        replace = msgspec.structs.replace
        activities = [replace(original, queue_ticket=0) for original in snap.activities]
    if adopt and by_id is not None and len(by_id) == len(activities):
        core.activities = by_id
    else:
        core.activities = {a.activity_id: a for a in activities}
    held = _restore_queue(core, activities)
    core.finished = OrderedDict(snap.finished)
    for ws in snap.workers:
        worker = msgspec.structs.replace(ws, leases=dict(ws.leases))
        wid = worker.info.worker_id
        core.registry.workers[wid] = worker
        core._signatures[wid] = worker_signature(worker.info)
        if worker.status is WorkerStatus.ACTIVE:
            core.capacity += worker.info.max_concurrency
        if worker.status in LIVE_WORKER_STATUSES:
            core.registry.touch(worker, worker.last_seen_at)
        else:
            core.registry.arm_purge(worker)
        core.running += len(worker.leases)
        for aid in worker.leases:
            _check_lease(core, worker, aid)
    core.waiting = {wid: core.registry.workers[wid] for wid in snap.waiting}
    core.timers = DelayedTimers.restore(snap.timers)
    core.run_deadlines = list(snap.run_deadlines)
    heapq.heapify(core.run_deadlines)
    core.limiter = RateLimiter.restore(snap.config.limits, snap.limiter)
    core.backpressure = BackpressureController.restore(snap.config.backpressure, snap.backpressure)
    core.balancer.restore(snap.balancer)
    for name, state in snap.policies.items():
        policy = core.policies[name]
        policy.restore(state)
        if isinstance(policy, _PolicyBase):
            policy.running = {}
    live = core.activities
    for a in held:
        if live.get(a.activity_id) is not a:
            continue  # a duplicate id: the table keeps the last one
        policy = core.policies[core._group(a)]
        if isinstance(policy, _PolicyBase):
            policy.running[a.tenant] = policy.running.get(a.tenant, 0) + 1
    return core


def _restore_queue(core: SchedulerCore, activities: list[Activity]) -> list[Activity]:
    """Ordering lines, ready-queue lanes, lease expiries and schedule-to-start deadlines
    of restored activities, in one pass (at 10^6 activities a pass of its own costs
    about 0.1 s: each activity is a cache miss).

    The result equals pushing every queued activity (without an ordering key,
    or at the head of its line) one by one with ``core._push`` in creation
    order, re-arming every held lease with ``core.leases.track`` and every queued
    activity's ``schedule_to_start_s`` deadline with ``core.watch_start``: lanes are
    created in the same order, tickets are handed out in the same order, and
    the counters end the same. Only the work differs: each lane's entries are
    appended and heapified once (O(N) instead of N sifting pushes), and the
    lane and rank function are looked up once per lane key. A policy that
    keeps the base class's constant ``rank`` (FIFO within a lane) is not called
    per activity, and when such a lane was empty and its activities come in
    ascending ``seq`` (a store's load always does) its entries are already
    sorted, hence a heap: heapify, a third of the restore at 10^6, is skipped.
    Queue tickets of the activities that are not queued are reset here (an
    adopted snapshot's may be stale). Returns the held (leased or executing)
    activities in creation order.
    """
    queue = core.queue
    lines = core.key_lines
    policies = core.policies
    default_group = core.config.default_policy
    track = core.leases.track
    watch = core.watch_start
    queued_state, leased_state, executing_state = _QUEUED, _LEASED, _EXECUTING
    # (policy, tenant, type, capabilities, priority, region) -> (the lane's heap's
    # append, its group's rank function or None if constant, the constant rank).
    # Keyed by the raw ``policy`` field, which maps to one lane as surely as the
    # group it resolves to.
    slots: dict[tuple[Any, ...], tuple[Callable[[Entry], None], Rank | None, Any]] = {}
    before: dict[Lane, int] = {}
    """Lane -> its heap's length before the first of these entries."""
    constant: set[Lane] = set()
    """Lanes whose group ranks every activity alike."""
    held: list[Activity] = []
    ticket = queue._ticket
    last_seq = -1
    ascending = True
    """Every queued activity so far came with a higher ``seq`` than the one before."""
    for a in activities:
        state = a.state
        key = a.ordering_key
        if key is not None:
            line = lines.get(key)
            if line is None:
                line = lines[key] = deque()
            line.append(a)  # Creation order: seq ascending.
            if line[0] is not a:
                if a.queue_ticket:
                    a.queue_ticket = 0
                if state is leased_state or state is executing_state:
                    held.append(a)
                    track(a)
                elif state is queued_state and a.schedule_to_start_s is not None:
                    watch(a)
                continue
        if state is queued_state:
            if a.schedule_to_start_s is not None:
                watch(a)
            slot_key = (a.policy, a.tenant, a.activity_type, a.capabilities, a.priority, a.region)
            slot = slots.get(slot_key)
            if slot is None:
                group = a.policy or default_group
                lane = queue.lane_for(a, group)
                policy = policies[group]
                if getattr(type(policy), "rank", None) is _BASE_RANK:
                    slot = (lane.heap.append, None, policy.rank(a))
                    constant.add(lane)
                else:
                    slot = (lane.heap.append, policy.rank, None)
                slots[slot_key] = slot
                before.setdefault(lane, len(lane.heap))
            append, rank, value = slot
            seq = a.seq
            if seq <= last_seq:
                ascending = False
            last_seq = seq
            ticket += 1
            a.queue_ticket = ticket
            append((value if rank is None else rank(a), seq, ticket, a))
        else:
            if a.queue_ticket:
                a.queue_ticket = 0
            if state is leased_state or state is executing_state:
                held.append(a)
                track(a)
    queue._ticket = ticket
    for lane, length in before.items():
        count = len(lane.heap) - length
        if not (ascending and length == 0 and lane in constant):
            heapq.heapify(lane.heap)
        lane.size += count
        queue.depth += count
        queue.depth_by_partition[lane.partition] += count
        queue.depth_by_level[lane.group][lane.priority] += count
    return held


def _check_lease(core: SchedulerCore, worker: WorkerState, activity_id: str) -> None:
    """A worker's lease must name a held activity of that worker (fail closed)."""
    a = core.activities.get(activity_id)
    if (
        a is None
        or a.worker_id != worker.info.worker_id
        or a.token != worker.leases[activity_id]
        or a.state not in (ActivityState.LEASED, ActivityState.EXECUTING)
    ):
        raise CorruptRecord(
            f"worker {worker.info.worker_id!r} holds a lease on {activity_id!r} "
            "that the activity does not confirm",
            worker_id=worker.info.worker_id,
            activity_id=activity_id,
        )


def recover(
    snap: CoreSnapshot,
    now: float,
    *,
    adopt: bool = False,
    by_id: dict[str, Activity] | None = None,
) -> tuple[SchedulerCore, Outcome]:
    """Restart procedure (WF-005 §23): restore, rebuild registry, expire, requeue, resume.

    ``adopt`` and ``by_id`` are :func:`restore`'s: the core takes the snapshot's
    activities (and their table) over.
    """
    core = restore(snap, adopt=adopt, by_id=by_id)
    outcome = core.handle(cmd.Recover(now=now))
    return core, outcome


class StoredWorkerRow(Protocol):
    """One worker as the store keeps it (read-only)."""

    @property
    def info(self) -> WorkerInfo:
        """Latest registration."""
        ...

    @property
    def seq(self) -> int:
        """Registration sequence number."""
        ...

    @property
    def status(self) -> WorkerStatus:
        """Last persisted status."""
        ...

    @property
    def registered_at(self) -> float:
        """First registration instant."""
        ...

    @property
    def updated_at(self) -> float:
        """When its row was last written; for a failed or gone worker, its departure."""
        ...


class DurableRows(Protocol):
    """The durable state a store hands over, decoded (the store's ``StoredState`` is
    one): what :func:`snapshot_from_durable` rebuilds a core from."""

    @property
    def seq(self) -> int:
        """Highest activity sequence number ever assigned."""
        ...

    @property
    def token(self) -> int:
        """Highest fencing token ever granted."""
        ...

    @property
    def worker_seq(self) -> int:
        """Highest worker registration sequence number."""
        ...

    @property
    def activities(self) -> list[Activity]:
        """Unfinished activities in ``seq`` order, lifecycle applied."""
        ...

    @property
    def finished(self) -> list[tuple[str, ActivityState]]:
        """The most recently finished activities, oldest first."""
        ...

    @property
    def workers(self) -> Sequence[StoredWorkerRow]:
        """Every worker, in ``seq`` order."""
        ...


class BlockedLease(msgspec.Struct, frozen=True, kw_only=True):
    """A held activity left out of a rebuilt core: the worker it names is unknown."""

    activity_id: str
    """The activity (leased or executing)."""
    state: ActivityState
    """Its stored state."""
    worker_id: str | None
    """The worker it names, which is not registered."""


_HELD: Final = (ActivityState.LEASED, ActivityState.EXECUTING)


def snapshot_from_durable(
    durable: DurableRows, config: SchedulerConfig, now: float
) -> tuple[CoreSnapshot, list[BlockedLease]]:
    """A core snapshot from a store's durable state; workers count as last seen at
    ``now``. Returns the held activities left out (fail closed) beside it.

    A store keeps only durable state (activities, workers, counters); the rest is
    derived here. Worker lease tables come from the activities that are leased or
    executing; the timer heap from the delayed activities' due instants;
    ordering-key lines from the activities' creation order (:func:`restore`);
    soft state (rate-limiter buckets, backpressure, balancer cursor, policy
    counters, poll demand, heartbeat figures) starts fresh. The snapshot's
    activities are ``durable``'s own objects: restore it with ``adopt=True``.
    An activity that claims a lease held by an unknown worker is left out and
    returned, so the rest of the state recovers.
    """
    workers: dict[str, WorkerState] = {
        w.info.worker_id: WorkerState(
            info=w.info,
            seq=w.seq,
            status=w.status,
            registered_at=w.registered_at,
            last_seen_at=now,
            # Retention runs from the departure, across restarts (see WorkerRegistry).
            departed_at=None if w.status in LIVE_WORKER_STATUSES else w.updated_at,
        )
        for w in durable.workers
    }
    # One pass; the common case (queued) costs a single identity test.
    queued, delayed_state = ActivityState.QUEUED, ActivityState.DELAYED
    stored = durable.activities
    blocked: list[BlockedLease] = []
    left_out: set[int] = set()
    """``id()`` of the held activities whose worker is unknown."""
    held_by_token: list[tuple[int, str, str]] = []
    delayed: list[Activity] = []
    for a in stored:
        state = a.state
        if state is queued:
            continue
        if state is delayed_state:
            delayed.append(a)
        elif state in _HELD:
            worker = workers.get(a.worker_id or "")
            if worker is None:
                blocked.append(
                    BlockedLease(activity_id=a.activity_id, state=state, worker_id=a.worker_id)
                )
                left_out.add(id(a))
                continue
            held_by_token.append((a.token, worker.info.worker_id, a.activity_id))
    activities = [a for a in stored if id(a) not in left_out] if left_out else list(stored)
    for token, worker_id, activity_id in sorted(held_by_token):
        workers[worker_id].leases[activity_id] = token
    snapshot = CoreSnapshot(
        config=config,
        seq=durable.seq,
        token=durable.token,
        worker_seq=durable.worker_seq,
        activities=activities,
        finished=durable.finished,
        workers=sorted(workers.values(), key=lambda w: w.seq),
        waiting=[],
        timers=sorted((a.not_before or 0.0, a.seq, a.activity_id) for a in delayed),
        limiter=RateLimiter(config.limits).snapshot(),
        backpressure=BackpressureController(config.backpressure).snapshot(),
        balancer={},
        policies={
            name: make_policy(pc.policy, pc.options).snapshot()
            for name, pc in config.policies.items()
        },
    )
    return snapshot, blocked


_DIGEST_ENCODER = msgspec.json.Encoder(order="sorted")


class DurableState(msgspec.Struct, frozen=True, kw_only=True):
    """The part of the core's state that the store keeps (everything else is soft)."""

    seq: int
    token: int
    worker_seq: int
    activities: list[Activity]
    workers: list[tuple[str, int, str, float, list[tuple[str, int]]]]
    """(id, seq, status, registered_at, leases by token) per worker."""
    worker_infos: list[WorkerInfo]
    timers: list[tuple[float, int, str]]


def durable_state(core: SchedulerCore) -> DurableState:
    """The core's durable state in canonical form (soft state left out)."""
    workers = sorted(core.registry.workers.values(), key=lambda w: w.seq)
    return DurableState(
        seq=core.seq,
        token=core.leases.token,
        worker_seq=core.registry.seq,
        activities=[
            msgspec.structs.replace(a, queue_ticket=0)
            for a in sorted(core.activities.values(), key=lambda a: a.seq)
        ],
        workers=[
            (
                w.info.worker_id,
                w.seq,
                w.status.value,
                w.registered_at,
                sorted(w.leases.items(), key=lambda item: item[1]),
            )
            for w in workers
        ],
        worker_infos=[w.info for w in workers],
        timers=core.timers.snapshot(),
    )


def durable_digest(core: SchedulerCore) -> str:
    """SHA-256 of :func:`durable_state`: equal for a core and its recovery from a store."""
    return hashlib.sha256(_DIGEST_ENCODER.encode(durable_state(core))).hexdigest()


def state_digest(core: SchedulerCore) -> str:
    """SHA-256 of a canonical encoding of the core's durable state."""
    snap = snapshot(core)
    canonical = msgspec.structs.replace(
        snap,
        activities=[msgspec.structs.replace(a, queue_ticket=0) for a in snap.activities],
    )
    return hashlib.sha256(_DIGEST_ENCODER.encode(canonical)).hexdigest()
