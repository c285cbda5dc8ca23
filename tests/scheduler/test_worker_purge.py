"""Departed workers are forgotten after ``departed_worker_retention_s`` (issue 13 item 11).

A worker that failed (missed heartbeats, ``WorkersLost``) or left (graceful
shutdown) holds nothing; the core keeps it for the retention, then a tick
forgets it and emits ``WorkerRemoved`` for the store. Time is the command's
``now`` (the core's virtual time), so every boundary is exact.
"""

from __future__ import annotations

import pytest
from _core_helpers import T0, Driver, act, fingerprint, of_type

from wf.errors import InvalidArgument, NotFound, WorkerNotActive
from wf.scheduler import commands as cmd
from wf.scheduler.config import SchedulerConfig
from wf.scheduler.model import WorkerStatus
from wf.scheduler.outputs import WorkerRemoved, WorkerUpserted
from wf.scheduler.recovery import restore, snapshot

RETENTION_S = 3600.0
HEARTBEAT_S = 10.0
MISSES = 3


def driver(retention_s: float = RETENTION_S, lease_ttl_s: float = 30.0) -> Driver:
    return Driver(
        SchedulerConfig(
            heartbeat_misses_max=MISSES,
            departed_worker_retention_s=retention_s,
            lease_ttl_s=lease_ttl_s,
        )
    )


def removed(d: Driver) -> list[str]:
    return [r.worker_id for r in d.records if isinstance(r, WorkerRemoved)]


def test_a_gone_worker_is_forgotten_exactly_when_its_retention_ends() -> None:
    d = driver()
    d.register("w1", heartbeat_interval_s=HEARTBEAT_S)
    d.now = T0 + 5
    d.do(cmd.ShutdownWorker, worker_id="w1")
    worker = d.core.registry.workers["w1"]
    assert (worker.status, worker.departed_at) == (WorkerStatus.GONE, T0 + 5)
    assert d.core.next_wake_at(d.now) is not None
    d.tick(T0 + 5 + RETENTION_S - 0.001)
    assert "w1" in d.core.registry.workers
    assert removed(d) == []
    out = d.tick(T0 + 5 + RETENTION_S)
    assert out.records == [WorkerRemoved(at=T0 + 5 + RETENTION_S, worker_id="w1")]
    assert "w1" not in d.core.registry.workers
    assert "w1" not in d.core._signatures
    # Forgotten means unknown: its late calls are NotFound, not WorkerNotActive.
    with pytest.raises(NotFound):
        d.do(cmd.Heartbeat, worker_id="w1")


def test_a_lost_worker_is_forgotten_after_retention_and_its_work_was_requeued_first() -> None:
    d = driver()
    d.register("w1", heartbeat_interval_s=HEARTBEAT_S)
    d.submit(act("a1"))
    lease = d.lease("w1")["a1"]
    d.start(lease)
    lost_at = T0 + HEARTBEAT_S * MISSES
    d.tick(lost_at)
    worker = d.core.registry.workers["w1"]
    assert worker.status is WorkerStatus.FAILED
    assert worker.leases == {}
    assert worker.departed_at == lost_at
    d.tick(lost_at + RETENTION_S)
    assert removed(d) == ["w1"]
    assert "w1" not in d.core.registry.workers


def test_a_worker_that_comes_back_within_retention_is_kept_and_its_clock_restarts() -> None:
    d = driver()
    d.register("w1", heartbeat_interval_s=HEARTBEAT_S)
    d.do(cmd.ShutdownWorker, worker_id="w1")
    d.now = T0 + RETENTION_S / 2
    # It comes back with a heartbeat interval long enough to stay alive unattended.
    d.register("w1", heartbeat_interval_s=RETENTION_S)
    assert d.core.registry.workers["w1"].departed_at is None
    d.tick(T0 + RETENTION_S)  # The stale purge entry falls due: nothing happens.
    assert removed(d) == []
    assert d.core.registry.workers["w1"].status is WorkerStatus.ACTIVE
    # Leaves again: the retention counts from this second departure.
    d.now = T0 + RETENTION_S + 10
    d.do(cmd.ShutdownWorker, worker_id="w1")
    d.tick(T0 + 2 * RETENTION_S + 9)
    assert removed(d) == []
    d.tick(T0 + 2 * RETENTION_S + 10)
    assert removed(d) == ["w1"]


def test_a_purged_worker_registers_afresh() -> None:
    d = driver()
    d.register("w1", heartbeat_interval_s=HEARTBEAT_S)
    first_seq = d.core.registry.workers["w1"].seq
    d.do(cmd.ShutdownWorker, worker_id="w1")
    d.tick(T0 + RETENTION_S)
    d.now = T0 + RETENTION_S + 1
    out = d.register("w1", heartbeat_interval_s=HEARTBEAT_S)
    worker = d.core.registry.workers["w1"]
    assert worker.seq > first_seq
    assert (worker.status, worker.registered_at) == (WorkerStatus.ACTIVE, d.now)
    assert of_type(out.records, WorkerUpserted)[0].seq == worker.seq
    d.submit(act("a1"))
    assert set(d.lease("w1")) == {"a1"}
    # The liveness entry left from its first life does not fail it early.
    d.tick(d.now + HEARTBEAT_S * MISSES - 0.001)
    assert d.core.registry.workers["w1"].status is WorkerStatus.ACTIVE


def test_a_draining_worker_is_kept_until_its_last_lease_ends() -> None:
    d = driver(lease_ttl_s=2 * RETENTION_S)
    d.register("w1", heartbeat_interval_s=RETENTION_S)
    d.submit(act("a1"))
    lease = d.lease("w1")["a1"]
    d.start(lease)
    d.do(cmd.ShutdownWorker, worker_id="w1")
    assert d.core.registry.workers["w1"].status is WorkerStatus.DRAINING
    d.now = T0 + RETENTION_S + 1
    d.do(cmd.Heartbeat, worker_id="w1")
    d.tick()
    assert removed(d) == []
    d.do(cmd.RenewLease, activity_id="a1", token=lease.token)
    d.complete(lease)
    assert d.core.registry.workers["w1"].departed_at == d.now
    d.tick(d.now + RETENTION_S)
    assert removed(d) == ["w1"]


def test_zero_retention_keeps_departed_workers_for_ever() -> None:
    d = driver(retention_s=0.0)
    d.register("w1", heartbeat_interval_s=HEARTBEAT_S)
    d.do(cmd.ShutdownWorker, worker_id="w1")
    assert d.core.registry.next_purge_at() is None  # Nothing to wake the tick loop for.
    d.tick(T0 + 100 * 365 * 86_400.0)
    assert removed(d) == []
    assert d.core.registry.workers["w1"].status is WorkerStatus.GONE
    with pytest.raises(WorkerNotActive):
        d.do(cmd.Heartbeat, worker_id="w1")


def test_many_departed_workers_are_all_forgotten_in_registration_order() -> None:
    d = driver()
    for i in range(200):
        d.register(f"w{i:03}", heartbeat_interval_s=HEARTBEAT_S)
    for i in range(200):
        d.do(cmd.ShutdownWorker, worker_id=f"w{i:03}")
    d.tick(T0 + RETENTION_S)
    assert removed(d) == [f"w{i:03}" for i in range(200)]
    assert d.core.registry.workers == {}
    assert d.core._signatures == {}


def test_snapshot_and_restore_keep_the_purge_schedule() -> None:
    d = driver()
    d.register("w1", heartbeat_interval_s=HEARTBEAT_S)
    d.now = T0 + 7
    d.do(cmd.ShutdownWorker, worker_id="w1")
    d.core = restore(snapshot(d.core))
    assert d.core.registry.workers["w1"].departed_at == T0 + 7
    d.tick(T0 + 7 + RETENTION_S - 0.001)
    assert removed(d) == []
    d.tick(T0 + 7 + RETENTION_S)
    assert removed(d) == ["w1"]


def test_a_purge_changes_nothing_else() -> None:
    d = driver()
    d.register("w1", heartbeat_interval_s=HEARTBEAT_S)
    d.register("w2", heartbeat_interval_s=3600.0)
    d.submit(act("a1"), act("a2"))
    d.do(cmd.ShutdownWorker, worker_id="w1")
    d.now = T0 + RETENTION_S
    d.do(cmd.Heartbeat, worker_id="w2")
    before = fingerprint(d.core)
    d.tick()
    after = fingerprint(d.core)
    assert removed(d) == ["w1"]
    del before["workers"]["w1"]
    # The liveness heap may still hold w1's stale entry; everything else is as it was.
    before.pop("deadlines")
    after.pop("deadlines")
    assert after == before


@pytest.mark.parametrize("retention_s", [-1.0, float("nan"), float("inf"), 1e12])
def test_a_bad_retention_is_refused(retention_s: float) -> None:
    with pytest.raises(InvalidArgument, match="departed_worker_retention_s"):
        SchedulerConfig(departed_worker_retention_s=retention_s)
