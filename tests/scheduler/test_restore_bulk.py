"""``restore`` fills the ready queue in bulk; it must equal pushing one by one.

:func:`wf.scheduler.recovery.restore` appends each lane's entries and
heapifies once instead of calling ``SchedulerCore._push`` per activity. These
tests rebuild the same snapshots with the straightforward reference (the
pre-bulk algorithm, kept here) and compare everything the core holds: lane
creation order, every lane's entries (rank, seq, ticket, activity), the depth
counters, the ticket counter, ordering lines, lease expiries and the policies'
running counts. Snapshots come from simulated runs (several policy groups,
deadline ranks, ordering keys, leases, restarts) taken every few commands.
``adopt=True`` must build the same core from the snapshot's own objects.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Any

import msgspec
import pytest
from _core_helpers import fingerprint

from wf.scheduler.backpressure import BackpressureController
from wf.scheduler.dispatcher import SchedulerCore
from wf.scheduler.model import ActivityState, WorkerStatus
from wf.scheduler.policies import _PolicyBase
from wf.scheduler.queue import worker_signature
from wf.scheduler.rate_limiter import RateLimiter
from wf.scheduler.recovery import CoreSnapshot, restore, snapshot
from wf.scheduler.replay import LogHeader, replay, start_core
from wf.scheduler.timer import DelayedTimers
from wf.testing.simulation import simulate

SEEDS = (23, 5, 11)
STEPS = 1500
SNAPSHOT_EVERY = 150


def reference_restore(snap: CoreSnapshot) -> SchedulerCore:
    """The one-by-one restore (push per queued activity, track per lease)."""
    core = SchedulerCore(snap.config)
    core.seq = snap.seq
    core.leases.token = snap.token
    core.registry.seq = snap.worker_seq
    lines = core.key_lines
    for original in snap.activities:
        a = msgspec.structs.replace(original, queue_ticket=0)
        core.activities[a.activity_id] = a
        key = a.ordering_key
        if key is not None:
            lines.setdefault(key, deque()).append(a)
        if a.state is ActivityState.QUEUED and (key is None or lines[key][0] is a):
            core._push(a)
        elif a.state in (ActivityState.LEASED, ActivityState.EXECUTING):
            core.leases.track(a)
    core.finished = OrderedDict(snap.finished)
    for ws in snap.workers:
        worker = msgspec.structs.replace(ws, leases=dict(ws.leases))
        wid = worker.info.worker_id
        core.registry.workers[wid] = worker
        core._signatures[wid] = worker_signature(worker.info)
        if worker.status is WorkerStatus.ACTIVE:
            core.capacity += worker.info.max_concurrency
        if worker.status in (WorkerStatus.ACTIVE, WorkerStatus.DRAINING):
            core.registry.touch(worker, worker.last_seen_at)
        core.running += len(worker.leases)
    core.waiting = {wid: core.registry.workers[wid] for wid in snap.waiting}
    core.timers = DelayedTimers.restore(snap.timers)
    core.limiter = RateLimiter.restore(snap.config.limits, snap.limiter)
    core.backpressure = BackpressureController.restore(snap.config.backpressure, snap.backpressure)
    core.balancer.restore(snap.balancer)
    for name, state in snap.policies.items():
        policy = core.policies[name]
        policy.restore(state)
        if isinstance(policy, _PolicyBase):
            policy.running = {}
    for a in core.activities.values():
        if a.state in (ActivityState.LEASED, ActivityState.EXECUTING):
            policy = core.policies[core._group(a)]
            if isinstance(policy, _PolicyBase):
                policy.running[a.tenant] = policy.running.get(a.tenant, 0) + 1
    return core


def comparable(core: SchedulerCore) -> dict[str, Any]:
    """The core's fingerprint with heap layouts sorted (only their order of yield counts)."""
    print_ = fingerprint(core)
    queue = print_.pop("queue")
    depth, by_partition, by_level, lanes = queue
    return {
        **print_,
        "depth": (depth, by_partition, by_level),
        "lanes": {key: sorted(entries, key=lambda e: e[1]) for key, entries in lanes.items()},
        "lane_order": list(core.queue.lanes),
        "ticket": core.queue._ticket,
        "depth_by_partition_order": list(core.queue.depth_by_partition),
        "group_order": list(core.queue.depth_by_level),
        "policy_running_order": {
            n: list(p.running) for n, p in core.policies.items() if isinstance(p, _PolicyBase)
        },
    }


def drained(core: SchedulerCore) -> list[list[str]]:
    """Every lane popped empty, in lane order: the order the queue yields."""
    out: list[list[str]] = []
    for lane in core.queue.lanes.values():
        ids: list[str] = []
        while lane.head() is not None:
            ids.append(core.queue.pop(lane).activity_id)
        out.append(ids)
    return out


def snapshots_of(seed: int) -> list[CoreSnapshot]:
    result = simulate(seed, steps=STEPS)
    taken: list[CoreSnapshot] = []
    for segment in result.segments:
        core = start_core(LogHeader(config=result.config, snapshot=segment.start))
        for index, _line in enumerate(replay(core, segment.commands)):
            if index % SNAPSHOT_EVERY == 0:
                taken.append(snapshot(core))
        taken.append(snapshot(core))
    return taken


@pytest.mark.parametrize("seed", SEEDS)
def test_bulk_restore_equals_one_by_one_pushes(seed: int) -> None:
    snaps = snapshots_of(seed)
    assert any(s.activities for s in snaps)
    queued_seen = 0
    for snap in snaps:
        expected = reference_restore(snap)
        got = restore(snap)
        assert comparable(got) == comparable(expected)
        queued_seen += got.queue.depth
        assert drained(got) == drained(expected)
    assert queued_seen > 0


def test_simulated_snapshots_cover_ordering_keys_and_leases() -> None:
    snaps = [s for seed in SEEDS for s in snapshots_of(seed)]
    activities = [a for s in snaps for a in s.activities]
    assert any(a.ordering_key is not None for a in activities)
    assert any(a.state is ActivityState.EXECUTING for a in activities)
    assert any(a.state is ActivityState.LEASED for a in activities)
    assert any(a.deadline is not None for a in activities)
    assert len({len(s.config.policies) for s in snaps}) > 1


def test_adopt_builds_the_same_core_from_the_snapshots_objects() -> None:
    for snap in snapshots_of(SEEDS[0])[::3]:
        expected = comparable(restore(snap))
        decoded = msgspec.json.decode(msgspec.json.encode(snap), type=CoreSnapshot)
        adopted = restore(decoded, adopt=True)
        assert comparable(adopted) == expected
        for a in decoded.activities:
            assert adopted.activities[a.activity_id] is a


def test_restore_without_adopt_leaves_the_snapshot_a_value() -> None:
    snap = snapshots_of(SEEDS[0])[-1]
    before = msgspec.json.encode(snap)
    core = restore(snap)
    for a in snap.activities:
        assert core.activities[a.activity_id] is not a
    for a in core.activities.values():
        a.attempt += 1
    assert msgspec.json.encode(snap) == before


def test_adopting_a_table_of_the_same_activities_builds_the_same_core_around_it() -> None:
    for snap in snapshots_of(SEEDS[1])[::3]:
        expected = comparable(restore(snap))
        decoded = msgspec.json.decode(msgspec.json.encode(snap), type=CoreSnapshot)
        table = {a.activity_id: a for a in decoded.activities}
        adopted = restore(decoded, adopt=True, by_id=table)
        assert adopted.activities is table
        assert comparable(adopted) == expected


def test_a_table_that_does_not_hold_every_activity_is_not_adopted() -> None:
    snap = next(s for s in snapshots_of(SEEDS[1]) if len(s.activities) > 1)
    decoded = msgspec.json.decode(msgspec.json.encode(snap), type=CoreSnapshot)
    short = {a.activity_id: a for a in decoded.activities[1:]}
    core = restore(decoded, adopt=True, by_id=short)
    assert core.activities is not short
    assert set(core.activities) == {a.activity_id for a in decoded.activities}
    # Without adopt the core copies the activities, so a table of them is never taken.
    whole = {a.activity_id: a for a in snap.activities}
    assert restore(snap, by_id=whole).activities is not whole
