"""The node's read port: what the shell may know of the scheduler's state.

Theory of operation
-------------------
The core (:class:`~wf.scheduler.dispatcher.SchedulerCore`) changes as soon as
a command is handled; the store catches up when the command's commit lands
(:class:`~wf.node.SchedulerNode`). Everything outside the node — the
scheduler API, the run engine, metrics, logs, traces — reads the scheduler
through one :class:`NodeReads` (``node.reads``) instead of the core's
internals, so that what a read may show is decided once, here. Its reads come
in four kinds, each named for what it promises:

* **Committed reads** (``async``: :meth:`~NodeReads.activity`,
  :meth:`~NodeReads.workers`, :meth:`~NodeReads.queue`) answer clients. Each
  first waits until every command handled so far is committed
  (:meth:`SchedulerNode.durable`), then reads the core in the same step and
  copies what it returns, so the answer never holds a change whose commit is
  in flight or failed (while writes are stopped they raise
  :class:`~wf.errors.StoreUnavailable`).
* **Activity facts** (:meth:`~NodeReads.facts`, :meth:`~NodeReads.tenant_of`,
  :meth:`~NodeReads.correlation_id`): an activity's fixed attributes (tenant,
  type, run, correlation id), for every unfinished activity and the
  :data:`~wf.scheduler.dispatcher.FINISHED_MEMORY_MAX` most recently finished
  ones. One index, kept from *committed* outcomes only: a submission enters
  it when its commit lands (the node calls :meth:`~NodeReads.committed` from
  the commit's completion, before anyone awaiting that commit resumes) and
  moves to the finished memory when its terminal transition lands. A reload
  rebuilds it from the reloaded core (:meth:`~NodeReads.reset`), which is
  committed state. The scheduler API's tenant checks, the lifecycle logs and
  the traces all read it; before, each kept a shadow index of its own.
* **The id rule** (:meth:`~NodeReads.ids_in_use`): activity ids are never
  reused. An id is in use when the core holds it (unfinished, its commit in
  flight or not), still remembers it finished, or the store has it (the
  core's memory of finished ids is bounded; the store's is not). The
  scheduler API answers a submission naming such an id with that id when it
  is a retry of the accepted submission (the same content, compared with
  what :meth:`~NodeReads.submitted` reads back) and refuses it otherwise; the
  run engine, whose submissions are idempotent by id, skips them.
* **Decision reads** (:meth:`~NodeReads.knows_worker`,
  :meth:`~NodeReads.worker_labels`, :meth:`~NodeReads.lease_holder`,
  :meth:`~NodeReads.worker_demand`, :meth:`~NodeReads.attempt`,
  :meth:`~NodeReads.holds`, :meth:`~NodeReads.held_ids`,
  :meth:`~NodeReads.next_delay_due`, :meth:`~NodeReads.admit_new_workflow`)
  read the core *as decided*, which may be ahead of the store by the commits
  in flight. They exist for checks made right before a command, and are safe
  because of that: what they gate is a command the core decides again, whose
  commit lands after those of everything the read saw (commits land in order)
  and is refused if one of them failed. The two whose refusal is itself an
  answer to a caller (:meth:`~NodeReads.worker_labels`,
  :meth:`~NodeReads.lease_holder`: worker ownership) raise
  :class:`~wf.errors.StoreUnavailable` while writes are stopped rather than
  answer from a failed change.

:meth:`~NodeReads.figures` and :meth:`~NodeReads.counters` are the one
deliberate exception: metric gauges and counters read at scrape time, which
must keep answering while writes are stopped (that is when an operator looks)
and cannot wait for a quiet moment under load. They may count decisions whose
commit is in flight, or failed until the reload; they never describe one
activity or worker.

**Inspection reads** (:meth:`~NodeReads.deepest_lanes`,
:meth:`~NodeReads.unserved_types`, :meth:`~NodeReads.unserved_waiting`,
:meth:`~NodeReads.queued_at`) serve the operator's views of the same kind: the
console's dispatch figures, the unserved-type warning and gauge, the
``unserved`` mark of ``runs.inspect`` and the scheduling-latency histogram.
They read the core *as decided* too, without waiting, and copy what they
answer. :meth:`~NodeReads.queued_at` is one dictionary look-up (the histogram
reads it once per committed grant); the others cost one pass over the ready
queue's lanes, so they run on a scrape, a periodic check or an inspect, never
per command.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING

import msgspec

from wf.scheduler.backpressure import BackpressureLevel
from wf.scheduler.dispatcher import FINISHED_MEMORY_MAX, SchedulerCore
from wf.scheduler.metrics import CoreMetrics
from wf.scheduler.model import (
    TERMINAL_STATES,
    Activity,
    ActivityState,
    HeartbeatStats,
    Priority,
    WorkerInfo,
    WorkerStatus,
)
from wf.scheduler.outputs import ActivitySubmitted, Outcome, Transition
from wf.scheduler.unserved import unserved_types

if TYPE_CHECKING:
    from wf.node import SchedulerNode


class ActivityFacts(msgspec.Struct, frozen=True, gc=False):
    """An activity's fixed attributes (they never change once it is accepted)."""

    tenant: str
    """Owning tenant."""
    activity_type: str
    """Which implementation runs it."""
    workflow_id: str
    """The run it belongs to ("" for a standalone activity)."""
    correlation_id: str
    """Correlation id carried into logs and traces ("" if none)."""


class ActivityRead(msgspec.Struct, frozen=True, kw_only=True):
    """An activity as committed: live, or finished and still remembered."""

    activity: Activity | None
    """A copy of the live activity, or ``None`` once it finished."""
    finished_state: ActivityState | None = None
    """Its terminal state, when finished and still remembered by the core."""


class WorkerRead(msgspec.Struct, frozen=True, kw_only=True):
    """A registered worker as committed."""

    seq: int
    """Registration number (the order of :meth:`NodeReads.workers`)."""
    info: WorkerInfo
    """Its latest registration."""
    status: WorkerStatus
    """Where it stands."""
    registered_at: float
    """First registration instant."""
    last_seen_at: float
    """Last registration renewal or heartbeat."""
    leases: dict[str, int]
    """Activity id -> fencing token of every lease it holds (a copy)."""
    stats: HeartbeatStats
    """The latest heartbeat's figures."""


class QueueFigures(msgspec.Struct, frozen=True, kw_only=True):
    """Queue, capacity and backpressure figures of the core."""

    depth: int
    """Activities in the ready queue."""
    depth_by_partition: dict[str, int]
    """Ready-queue depth per partition (a copy)."""
    running: int
    """Leases held (leased or executing)."""
    capacity: int
    """Sum of ``max_concurrency`` over active workers."""
    delayed: int
    """Dormant activities (delayed or awaiting a retry)."""
    backpressure: BackpressureLevel
    """The current backpressure level."""
    workers_by_status: dict[WorkerStatus, int]
    """Known workers per status (every status present)."""


class LaneRead(msgspec.Struct, frozen=True, kw_only=True):
    """One non-empty lane of the ready queue: its key's parts and its depth (a copy)."""

    partition: str
    """The partition its activities belong to."""
    tenant: str
    """The tenant of its activities."""
    activity_type: str
    """The activity type of its activities."""
    priority: Priority
    """Their priority."""
    region: str | None
    """Their region (``None``: any)."""
    depth: int
    """Queued activities in it."""


class NodeReads:
    """The read port of one :class:`~wf.node.SchedulerNode` (see the module docstring)."""

    def __init__(self, node: SchedulerNode) -> None:
        self._node = node
        self._live: dict[str, Activity] = {}
        """Every committed unfinished activity (the core's own objects where it still
        holds them: only their fixed attributes are ever read)."""
        # An OrderedDict, for the same reason as the core's ``finished``: evicting
        # the oldest entry of a plain dict leaves slots later scans pass over.
        self._finished: OrderedDict[str, ActivityFacts] = OrderedDict()
        """Facts of the most recently finished activities, oldest first (bounded)."""

    # ------------------------------------------------------------ upkeep

    def reset(self, core: SchedulerCore) -> None:
        """Rebuild the facts of unfinished activities from ``core``, which the node has
        just loaded from the store (committed state). The finished memory is kept: it
        holds only what committed outcomes finished."""
        self._live = dict(core.activities)

    def committed(self, outcome: Outcome) -> None:
        """``outcome``'s records are committed: keep the activity facts up to date."""
        live = self._live
        held = self._node.core.activities
        for r in outcome.records:
            if type(r) is ActivitySubmitted:
                a = r.activity
                # The core's object where it still has one, so the record's copy
                # (and its payload) is not kept alive by this index.
                live[a.activity_id] = held.get(a.activity_id, a)
            elif type(r) is Transition and r.to_state in TERMINAL_STATES:
                gone = live.pop(r.activity_id, None)
                if gone is not None:
                    finished = self._finished
                    finished[r.activity_id] = ActivityFacts(
                        gone.tenant, gone.activity_type, gone.workflow_id, gone.correlation_id
                    )
                    if len(finished) > FINISHED_MEMORY_MAX:
                        finished.popitem(last=False)

    # ---------------------------------------------------- activity facts

    def facts(self, activity_id: str) -> ActivityFacts | None:
        """The committed facts of an unfinished or recently finished activity (``None``
        for one never committed, finished too long ago, or finished before the last
        reload)."""
        a = self._live.get(activity_id)
        if a is not None:
            return ActivityFacts(a.tenant, a.activity_type, a.workflow_id, a.correlation_id)
        return self._finished.get(activity_id)

    def tenant_of(self, activity_id: str) -> str | None:
        """The tenant of a committed activity (see :meth:`facts`)."""
        a = self._live.get(activity_id)
        if a is not None:
            return a.tenant
        facts = self._finished.get(activity_id)
        return facts.tenant if facts is not None else None

    def correlation_id(self, activity_id: str) -> str:
        """The correlation id of a committed activity ("" if it has none or is unknown)."""
        a = self._live.get(activity_id)
        if a is not None:
            return a.correlation_id
        facts = self._finished.get(activity_id)
        return facts.correlation_id if facts is not None else ""

    # --------------------------------------------------- committed reads

    async def activity(self, activity_id: str) -> ActivityRead | None:
        """The activity as committed, or ``None`` if its id was never used."""
        node = self._node
        await node.durable()
        core = node.core
        a = core.activities.get(activity_id)
        if a is not None:
            # A copy: the answer is encoded later, and the core may change it by then.
            return ActivityRead(activity=msgspec.structs.replace(a))
        state = core.finished.get(activity_id)
        if state is None and not await node.store.existing_activity_ids([activity_id]):
            return None
        return ActivityRead(activity=None, finished_state=state)

    async def workers(
        self, *, after: int, limit: int, tenants: Collection[str] | None = None
    ) -> list[WorkerRead]:
        """Up to ``limit`` committed workers registered after number ``after``, in
        registration order; with ``tenants``, only those that may serve one of them.

        Workers live in the core's memory: one pass over the registry picks the page
        by registration number (integer comparisons, nothing built), and only the
        page's workers are copied.
        """
        node = self._node
        await node.durable()
        candidates = (
            w
            for w in node.core.registry.workers.values()
            if w.seq > after
            and (
                tenants is None or w.info.tenants is None or not w.info.tenants.isdisjoint(tenants)
            )
        )
        return [
            WorkerRead(
                seq=w.seq,
                info=w.info,
                status=w.status,
                registered_at=w.registered_at,
                last_seen_at=w.last_seen_at,
                leases=dict(w.leases),
                stats=w.stats,
            )
            for w in heapq.nsmallest(limit, candidates, key=lambda w: w.seq)
        ]

    async def queue(self) -> QueueFigures:
        """The queue figures as committed."""
        await self._node.durable()
        return self.figures()

    # ----------------------------------------------------------- id rule

    async def ids_in_use(self, ids: Iterable[str]) -> set[str]:
        """The ids of ``ids`` that are in use: held or remembered by the core, or stored.

        Activity ids are never reused, even beyond the core's bounded memory of
        finished ones; the store is asked only about ids the core does not know.
        """
        node = self._node
        core = node.core
        held, unknown = set(), []
        for activity_id in ids:
            if activity_id in core.activities or activity_id in core.finished:
                held.add(activity_id)
            else:
                unknown.append(activity_id)
        if unknown:
            held |= await node.store.existing_activity_ids(unknown)
        return held

    async def submitted(self, ids: Iterable[str]) -> dict[str, Activity]:
        """The accepted submissions of those of ``ids`` that were ever stored, by id
        (``not_before`` as resolved at acceptance), for comparing a retried
        submission with what was accepted (:func:`~wf.scheduler.model.same_submission`).

        A committed read: it first waits for every commit in flight, so an id the core
        accepted a moment ago is read back from the store like any other (the store
        keeps each submission as accepted; the core's copy of a live activity has its
        ``not_before`` moved by retries). Refused while writes are stopped.
        """
        node = self._node
        await node.durable()
        return await node.store.submitted_activities(list(ids))

    # ---------------------------------------------------- decision reads

    def knows_worker(self, worker_id: str) -> bool:
        """Whether the core knows the worker (registered, not yet forgotten)."""
        return worker_id in self._node.core.registry.workers

    def worker_labels(self, worker_id: str) -> Mapping[str, str] | None:
        """The labels of a known worker's registration (``None`` if unknown).

        Raises :class:`~wf.errors.StoreUnavailable` while writes are stopped.
        """
        node = self._node
        node.refuse_if_stopped()
        worker = node.core.registry.workers.get(worker_id)
        return worker.info.labels if worker is not None else None

    def lease_holder(self, activity_id: str) -> str | None:
        """The worker holding the unfinished activity's current lease, if any.

        Raises :class:`~wf.errors.StoreUnavailable` while writes are stopped.
        """
        node = self._node
        node.refuse_if_stopped()
        a = node.core.activities.get(activity_id)
        return a.worker_id if a is not None else None

    def worker_demand(self, worker_id: str) -> int:
        """Leases the worker still waits for from its polls (0 if it is unknown)."""
        worker = self._node.core.registry.workers.get(worker_id)
        return worker.demand if worker is not None else 0

    def holds(self, activity_id: str) -> bool:
        """Whether the activity is unfinished in the core."""
        return activity_id in self._node.core.activities

    def attempt(self, activity_id: str) -> tuple[ActivityState, int] | None:
        """The unfinished activity's state and current fencing token (``None`` if the
        core does not hold it)."""
        a = self._node.core.activities.get(activity_id)
        return (a.state, a.token) if a is not None else None

    def held_ids(self) -> list[str]:
        """The ids of every activity unfinished in the core (a copy)."""
        return list(self._node.core.activities)

    def next_delay_due(self) -> float | None:
        """The earliest instant a delayed activity or retry falls due (``None`` if none
        waits): the instant the node must tick by to release it."""
        return self._node.core.timers.next_due_at()

    def admit_new_workflow(self, now: float) -> None:
        """Return if backpressure lets a new workflow start at ``now``; else raise
        :class:`~wf.errors.Overloaded` (nothing is changed either way)."""
        self._node.core.backpressure.admit_new_workflow(now)

    # ------------------------------------------------- metrics (current)

    def figures(self) -> QueueFigures:
        """The queue figures as the core holds them now (see the module docstring)."""
        core = self._node.core
        by_status = dict.fromkeys(WorkerStatus, 0)
        for worker in core.registry.workers.values():
            by_status[worker.status] += 1
        return QueueFigures(
            depth=core.queue.depth,
            depth_by_partition=dict(core.queue.depth_by_partition),
            running=core.running,
            capacity=core.capacity,
            delayed=len(core.timers),
            backpressure=core.backpressure.level,
            workers_by_status=by_status,
        )

    def counters(self) -> CoreMetrics:
        """The core's own counters and latency histogram, to be read at once (a restart
        replaces the core, and its counters start again from zero)."""
        return self._node.core.metrics

    # ----------------------------------------------- inspection (current)

    def deepest_lanes(self, limit: int) -> tuple[list[LaneRead], int]:
        """The ``limit`` deepest non-empty lanes of the ready queue, deepest first, and
        how many lanes are non-empty in all (one pass over the lanes)."""
        lanes = [lane for lane in self._node.core.queue.lanes.values() if lane.size > 0]
        deepest = heapq.nlargest(limit, lanes, key=lambda lane: lane.size)
        return (
            [
                LaneRead(
                    partition=lane.partition,
                    tenant=lane.tenant,
                    activity_type=lane.activity_type,
                    priority=lane.priority,
                    region=lane.region,
                    depth=lane.size,
                )
                for lane in deepest
            ],
            len(lanes),
        )

    def unserved_types(self) -> dict[str, int]:
        """Activity type -> queued activities of that type no active worker may take
        (:func:`~wf.scheduler.unserved.unserved_types`)."""
        core = self._node.core
        return unserved_types(core.queue.lanes.values(), core.registry.workers)

    def unserved_waiting(self, activity_ids: Iterable[str]) -> set[str]:
        """Those of ``activity_ids`` queued in the core whose activity type no active
        worker may take (the unserved types are found only if one of them is queued)."""
        held = self._node.core.activities
        queued: list[tuple[str, str]] = []
        for activity_id in activity_ids:
            a = held.get(activity_id)
            if a is not None and a.state is ActivityState.QUEUED:
                queued.append((activity_id, a.activity_type))
        if not queued:
            return set()
        unserved = self.unserved_types()
        return {activity_id for activity_id, kind in queued if kind in unserved}

    def queued_at(self, activity_id: str, token: int) -> float | None:
        """When the activity last entered the ready queue, if the core holds it under
        the lease of fencing token ``token`` (``None`` if it moved on or finished)."""
        a = self._node.core.activities.get(activity_id)
        if a is None or a.token != token:
            return None
        return a.queued_at
