"""From stored rows to a core: the bridge between a store's load and §23 recovery.

Theory of operation
-------------------
A store persists only durable state (activities, workers, crons, counters);
:func:`build_snapshot` derives everything else the core needs. Worker lease
tables come from the activities that are leased or executing; the timer heap
from the delayed activities' due instants; ordering-key lines from the
activities' creation order; soft state (rate-limiter buckets, backpressure,
balancer cursor, policy counters, poll demand, heartbeat figures) starts
fresh. The result is a :class:`~wf.scheduler.recovery.CoreSnapshot` whose
:func:`~wf.scheduler.recovery.durable_digest` equals the digest of the core
that wrote the records, as of its last committed append.

Contradictions fail closed: an activity that claims a lease held by an
unknown worker, or a second live lease, is left out of the live state and
reported as a diagnostic, so the rest of the store keeps working. A counter
rewound below its data is the one finding that stops recovery: the core would
hand out numbers that are taken, and its first commit would fence the store.
"""

from __future__ import annotations

import msgspec

from wf.scheduler.backpressure import BackpressureController
from wf.scheduler.config import SchedulerConfig
from wf.scheduler.cron import CronEntry
from wf.scheduler.model import Activity, ActivityState, WorkerState, WorkerStatus
from wf.scheduler.policies import make_policy
from wf.scheduler.rate_limiter import RateLimiter
from wf.scheduler.recovery import CoreSnapshot
from wf.store.check import refuse_rewound_counters
from wf.store.protocol import Diagnostic, StoredState

_HELD = (ActivityState.LEASED, ActivityState.EXECUTING)
_LIVE_WORKER = (WorkerStatus.ACTIVE, WorkerStatus.DRAINING)


def build_snapshot(
    stored: StoredState, config: SchedulerConfig, now: float
) -> tuple[CoreSnapshot, list[Diagnostic]]:
    """A core snapshot from stored state; workers are treated as last seen at ``now``.

    Raises :class:`~wf.errors.CorruptRecord` if a counter was rewound below its data
    (:func:`wf.store.check.refuse_rewound_counters`): that store must not start.
    """
    refuse_rewound_counters(stored.diagnostics)
    diagnostics = list(stored.diagnostics)
    workers: dict[str, WorkerState] = {
        w.info.worker_id: WorkerState(
            info=w.info,
            seq=w.seq,
            status=w.status,
            registered_at=w.registered_at,
            last_seen_at=now,
            # Retention runs from the departure, across restarts (see WorkerRegistry).
            departed_at=None if w.status in _LIVE_WORKER else w.updated_at,
        )
        for w in stored.workers
    }
    # One pass; the common case (queued) costs a single identity test.
    queued, delayed_state = ActivityState.QUEUED, ActivityState.DELAYED
    blocked: set[int] = set()
    """``id()`` of the held activities whose worker is unknown (left out)."""
    held_by_token: list[tuple[int, str, str]] = []
    delayed: list[Activity] = []
    for a in stored.activities:
        state = a.state
        if state is queued:
            continue
        if state is delayed_state:
            delayed.append(a)
        elif state in _HELD:
            worker = workers.get(a.worker_id or "")
            if worker is None:
                diagnostics.append(
                    Diagnostic(
                        kind="unknown_worker",
                        table="activities",
                        key=a.activity_id,
                        message=(
                            f"activity {a.activity_id!r} is {a.state.value} by worker "
                            f"{a.worker_id!r}, which is not registered; blocked"
                        ),
                        activity_id=a.activity_id,
                    )
                )
                blocked.add(id(a))
                continue
            held_by_token.append((a.token, worker.info.worker_id, a.activity_id))
    activities: list[Activity] = (
        [a for a in stored.activities if id(a) not in blocked]
        if blocked
        else list(stored.activities)
    )
    for token, worker_id, activity_id in sorted(held_by_token):
        workers[worker_id].leases[activity_id] = token
    timers = sorted((a.not_before or 0.0, a.seq, a.activity_id) for a in delayed)
    crons = [
        CronEntry(
            cron_id=c.cron_id,
            expression=c.expression,
            timezone=c.timezone,
            next_fire_at=c.next_fire_at,
            template=msgspec.json.encode(c.template),
            created_at=0.0,
        )
        for c in stored.crons
    ]
    snapshot = CoreSnapshot(
        config=config,
        seq=stored.seq,
        token=stored.token,
        worker_seq=stored.worker_seq,
        activities=activities,
        finished=stored.finished,
        workers=sorted(workers.values(), key=lambda w: w.seq),
        waiting=[],
        timers=timers,
        crons=crons,
        cron_templates={c.cron_id: c.template for c in stored.crons},
        limiter=RateLimiter(config.limits).snapshot(),
        backpressure=BackpressureController(config.backpressure).snapshot(),
        balancer={},
        policies={
            name: make_policy(pc.policy, pc.options).snapshot()
            for name, pc in config.policies.items()
        },
    )
    return snapshot, diagnostics
