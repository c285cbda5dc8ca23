"""Shared helpers of the scheduler-core tests (test_lifecycle, test_leases, test_failures,
test_policies_dispatch, test_dispatch_features): a command driver that checks the
one-record-per-transition invariant after every command, and a state fingerprint."""

from __future__ import annotations

from collections import Counter
from typing import Any, TypeVar

import msgspec

from wf.scheduler import commands as cmd
from wf.scheduler.config import SchedulerConfig
from wf.scheduler.dispatcher import SchedulerCore
from wf.scheduler.model import (
    TERMINAL_STATES,
    TRANSITIONS,
    Activity,
    ActivityState,
    Lease,
    WorkerInfo,
)
from wf.scheduler.outputs import ActivitySubmitted, LeaseGranted, Outcome, Transition

S = ActivityState
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z: a whole day, so cron instants are round.

D = TypeVar("D")


def act(activity_id: str, **kw: Any) -> Activity:
    """An activity of type ``t`` unless told otherwise."""
    kw.setdefault("activity_type", "t")
    return Activity(activity_id=activity_id, **kw)


def fingerprint(core: SchedulerCore) -> Any:
    """Everything the core holds, as plain data, to compare before and after a command."""

    def b(value: Any) -> Any:
        return msgspec.to_builtins(value, order="deterministic")

    queue = core.queue
    lanes = {
        repr(sorted(map(str, key))): [(e[0], e[1], e[2], e[3].activity_id) for e in lane.heap]
        for key, lane in queue.lanes.items()
    }
    return {
        "seq": core.seq,
        "activities": {aid: b(a) for aid, a in core.activities.items()},
        "finished": dict(core.finished),
        "queue": (queue.depth, dict(queue.depth_by_partition), b(queue.depth_by_level), lanes),
        "leases": (core.leases.token, sorted(core.leases._expiry)),
        "workers": {
            wid: {
                "info": b(w.info),
                "seq": w.seq,
                "status": w.status,
                "times": (w.registered_at, w.last_seen_at),
                "stats": b(w.stats),
                "leases": dict(w.leases),
                "demand": w.demand,
            }
            for wid, w in core.registry.workers.items()
        },
        "deadlines": sorted(core.registry._deadlines),
        "timers": core.timers.snapshot(),
        "key_lines": {k: [a.activity_id for a in v] for k, v in core.key_lines.items()},
        "waiting": list(core.waiting),
        "counters": (core.capacity, core.running),
        "policies": {n: (p.snapshot(), dict(p.running)) for n, p in core.policies.items()},
        "limiter": b(core.limiter.snapshot()),
        "backpressure": b(core.backpressure.snapshot()),
        "balancer": core.balancer.snapshot(),
    }


def grants(out: Outcome) -> dict[str, Lease]:
    """The leases granted in an outcome, by activity id."""
    return {d.lease.activity_id: d.lease for d in out.decisions if isinstance(d, LeaseGranted)}


def of_type(items: list[Any], kind: type[D]) -> list[D]:
    """The decisions or records of one type, in order."""
    return [x for x in items if isinstance(x, kind)]


class Driver:
    """Feeds commands at ``self.now``; after each one checks that every state change of
    every activity came with exactly one Transition record, contiguous and in the table."""

    def __init__(self, config: SchedulerConfig | None = None) -> None:
        self.core = SchedulerCore(config)
        self.now = T0
        self.states: dict[str, ActivityState] = {}
        self.open: set[str] = set()
        self.edges: set[tuple[ActivityState, ActivityState]] = set()
        self.records: list[Any] = []
        self.decisions: list[Any] = []

    def do(self, command_type: type[Any], **kw: Any) -> Outcome:
        out = self.core.handle(command_type(now=self.now, **kw))
        self.decisions.extend(out.decisions)
        for record in out.records:
            self.records.append(record)
            if isinstance(record, ActivitySubmitted):
                assert record.activity.activity_id not in self.states
                assert record.activity.state is S.READY
                self.states[record.activity.activity_id] = S.READY
                self.open.add(record.activity.activity_id)
            elif isinstance(record, Transition):
                assert record.at == self.now
                assert self.states[record.activity_id] is record.from_state
                assert record.to_state in TRANSITIONS[record.from_state]
                self.states[record.activity_id] = record.to_state
                self.edges.add((record.from_state, record.to_state))
                if record.to_state in TERMINAL_STATES:
                    self.open.discard(record.activity_id)
                else:
                    self.open.add(record.activity_id)
        # Unfinished activities match their records; finished ones are remembered as such.
        activities = self.core.activities
        assert activities.keys() == self.open
        for aid in self.open:
            assert activities[aid].state is self.states[aid], aid
        for record in out.records:
            if isinstance(record, Transition) and record.to_state in TERMINAL_STATES:
                assert self.core.finished[record.activity_id] is self.states[record.activity_id]
        return out

    def register(self, worker_id: str = "w1", **kw: Any) -> Outcome:
        kw.setdefault("max_concurrency", 10)
        kw.setdefault("heartbeat_interval_s", 3600.0)
        return self.do(cmd.RegisterWorker, info=WorkerInfo(worker_id=worker_id, **kw))

    def submit(self, *activities: Activity) -> Outcome:
        return self.do(cmd.Submit, activities=activities)

    def poll(self, worker_id: str = "w1", n: int = 1) -> dict[str, Lease]:
        """Poll and leave the rest of the demand outstanding."""
        return grants(self.do(cmd.Poll, worker_id=worker_id, max_items=n))

    def lease(self, worker_id: str = "w1", n: int = 1) -> dict[str, Lease]:
        """Poll, then drop whatever demand is left (nothing stays waiting)."""
        leases = self.poll(worker_id, n)
        self.do(cmd.CancelPoll, worker_id=worker_id)
        return leases

    def start(self, lease: Lease) -> Outcome:
        return self.do(cmd.StartActivity, activity_id=lease.activity_id, token=lease.token)

    def complete(self, lease: Lease, result: bytes = b"") -> Outcome:
        return self.do(
            cmd.Complete, activity_id=lease.activity_id, token=lease.token, result=result
        )

    def fail(self, lease: Lease, **kw: Any) -> Outcome:
        return self.do(cmd.Fail, activity_id=lease.activity_id, token=lease.token, **kw)

    def tick(self, at: float | None = None) -> Outcome:
        if at is not None:
            self.now = at
        return self.do(cmd.Tick)

    def state(self, activity_id: str) -> ActivityState:
        live = self.core.activities.get(activity_id)
        return live.state if live is not None else self.core.finished[activity_id]

    def count(self, kind: type[Any]) -> Counter[str]:
        """How many decisions of ``kind`` named each activity."""
        return Counter(d.activity_id for d in self.decisions if isinstance(d, kind))
