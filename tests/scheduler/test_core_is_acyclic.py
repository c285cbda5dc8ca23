"""A core its node drops is freed at once, by reference counting.

A node replaces its core on a reload after a failed commit and on a second
takeover. ``wf-rpc-server`` freezes the boot-time heap and the first
recovery out of the cyclic collector's reach (``wf.tuning``), so a core that
sat in a reference cycle would then never be freed, with every activity it
holds. The core therefore keeps no cycle of its own: after a life through
every command, with the collector off, dropping the last reference frees it.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

from wf.scheduler import commands as cmd
from wf.scheduler.dispatcher import SchedulerCore
from wf.scheduler.model import Activity, WorkerInfo
from wf.scheduler.outputs import LeaseGranted

T0 = 1_767_225_600.0


@contextmanager
def collector_off() -> Iterator[None]:
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def grants(core: SchedulerCore, command: cmd.Command) -> list[LeaseGranted]:
    return [d for d in core.handle(command).decisions if type(d) is LeaseGranted]


def a_life_through_every_command() -> weakref.ref[SchedulerCore]:
    core = SchedulerCore()
    core.handle(cmd.RegisterWorker(now=T0, info=WorkerInfo(worker_id="w", max_concurrency=4)))
    core.handle(cmd.RegisterWorker(now=T0, info=WorkerInfo(worker_id="v", max_concurrency=1)))
    core.handle(
        cmd.Submit(
            now=T0,
            activities=tuple(Activity(activity_id=f"a{i}", activity_type="t") for i in range(8)),
        )
    )
    leases = [g.lease for g in grants(core, cmd.Poll(now=T0, worker_id="w", max_items=4))]
    assert len(leases) == 4
    first, second, third, fourth = leases
    core.handle(cmd.StartActivity(now=T0 + 1, activity_id=first.activity_id, token=first.token))
    core.handle(cmd.RenewLease(now=T0 + 1, activity_id=first.activity_id, token=first.token))
    core.handle(cmd.Heartbeat(now=T0 + 1, worker_id="w"))
    core.handle(cmd.Complete(now=T0 + 2, activity_id=first.activity_id, token=first.token))
    core.handle(cmd.StartActivity(now=T0 + 1, activity_id=second.activity_id, token=second.token))
    core.handle(
        cmd.Fail(now=T0 + 2, activity_id=second.activity_id, token=second.token, message="x")
    )
    core.handle(cmd.Cancel(now=T0 + 2, activity_id=third.activity_id, reason="operator"))
    core.handle(cmd.Poll(now=T0 + 2, worker_id="v", max_items=1))
    core.handle(cmd.CancelPoll(now=T0 + 2, worker_id="v"))
    core.handle(cmd.ShutdownWorker(now=T0 + 3, worker_id="w"))
    core.handle(cmd.WorkersLost(now=T0 + 3, worker_ids=("v",)))
    core.handle(cmd.Tick(now=T0 + 600))
    assert fourth.activity_id in core.activities
    return weakref.ref(core)


def test_a_core_that_handled_every_command_is_freed_without_the_cyclic_collector() -> None:
    with collector_off():
        gone = a_life_through_every_command()
        assert gone() is None
