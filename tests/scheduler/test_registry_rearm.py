"""After a clock jump, live workers' liveness counts from the new instant (the
time-skipping harness's ``SchedulerNode.rearm_liveness``); departed ones stay departed."""

from __future__ import annotations

from wf.scheduler.model import WorkerInfo, WorkerStatus
from wf.scheduler.worker_registry import WorkerRegistry

INTERVAL_S = 10.0
MISSES = 3
GRACE_S = INTERVAL_S * MISSES


def registry_with(*statuses: WorkerStatus) -> WorkerRegistry:
    """One worker per status, all last seen at 0."""
    registry = WorkerRegistry(MISSES)
    for i, status in enumerate(statuses):
        info = WorkerInfo(worker_id=f"w{i}", max_concurrency=1, heartbeat_interval_s=INTERVAL_S)
        worker, _ = registry.register(info, 0.0)
        if status is not WorkerStatus.ACTIVE:
            worker.status = status
    return registry


def test_live_workers_get_a_full_grace_from_the_jumped_instant() -> None:
    registry = registry_with(WorkerStatus.ACTIVE, WorkerStatus.DRAINING)
    registry.rearm_live(1000.0)
    assert registry.pop_dead(1000.0 + GRACE_S - 1) == []
    dead = registry.pop_dead(1000.0 + GRACE_S)
    assert [w.info.worker_id for w in dead] == ["w0", "w1"]


def test_without_the_rearm_the_jump_would_lose_them() -> None:
    registry = registry_with(WorkerStatus.ACTIVE, WorkerStatus.DRAINING)
    assert [w.info.worker_id for w in registry.pop_dead(1000.0)] == ["w0", "w1"]


def test_departed_workers_are_not_brought_back() -> None:
    registry = registry_with(WorkerStatus.FAILED, WorkerStatus.GONE)
    registry.rearm_live(1000.0)
    assert all(w.last_seen_at == 0.0 for w in registry.workers.values())
    assert registry.pop_dead(1000.0 + GRACE_S) == []


def test_a_later_sign_of_life_is_kept() -> None:
    registry = registry_with(WorkerStatus.ACTIVE)
    registry.heartbeat("w0", registry.workers["w0"].stats, 50.0)
    registry.rearm_live(20.0)  # not a step back in time
    assert registry.workers["w0"].last_seen_at == 50.0
