"""``restore`` re-arms schedule-to-start deadlines in its one pass over the activities.

The deadlines heap is a function of the queued activities (those waiting behind
the head of their ordering line included); restore arms it in the same pass that
fills the ready queue, which must push exactly what arming every queued activity
with ``watch_start`` in creation order pushes, into the same heap layout.
"""

from __future__ import annotations

import heapq

from wf.scheduler import commands as cmd
from wf.scheduler.dispatcher import SchedulerCore
from wf.scheduler.model import Activity, ActivityState, WorkerInfo
from wf.scheduler.recovery import CoreSnapshot, restore, snapshot

T0 = 1_767_225_600.0


def _reference(snap: CoreSnapshot) -> list[tuple[float, int, str, float]]:
    """Every queued activity's deadline pushed one by one in creation order."""
    heap: list[tuple[float, int, str, float]] = []
    for a in snap.activities:
        if a.schedule_to_start_s is not None and a.state is ActivityState.QUEUED:
            heapq.heappush(
                heap, (a.queued_at + a.schedule_to_start_s, a.seq, a.activity_id, a.queued_at)
            )
    return heap


def test_restore_arms_every_queued_deadline_as_one_by_one_pushes() -> None:
    core = SchedulerCore()
    core.handle(cmd.RegisterWorker(now=T0, info=WorkerInfo(worker_id="w", max_concurrency=2)))
    acts = [
        Activity(
            activity_id=f"s{i:02}",
            activity_type="t",
            # Later ids wait less: deadlines not in creation order (a heap, not a list).
            schedule_to_start_s=None if i % 4 == 3 else 100.0 - i,
            # Lines of three: the second and third wait behind the head, still queued.
            ordering_key=f"k{i // 3}" if i < 9 else None,
            not_before=T0 + 50 if i == 10 else None,
        )
        for i in range(16)
    ]
    core.handle(cmd.Submit(now=T0, activities=tuple(acts)))
    core.handle(cmd.Poll(now=T0 + 1, worker_id="w", max_items=2))  # two heads leased
    snap = snapshot(core)
    states = {a.activity_id: a.state for a in snap.activities}
    assert ActivityState.LEASED in states.values()
    assert ActivityState.DELAYED in states.values()
    waiting = [
        a
        for a in snap.activities
        if a.ordering_key is not None
        and a.state is ActivityState.QUEUED
        and core.key_lines[a.ordering_key][0] is not a
    ]
    assert any(a.schedule_to_start_s is not None for a in waiting)
    expected = _reference(snap)
    assert len(expected) >= 8
    for adopt in (False, True):
        restored = restore(snap if not adopt else snapshot(core), adopt=adopt)
        assert restored.start_deadlines == expected
