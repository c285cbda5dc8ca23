"""Activity types no worker takes (issue 17): found in the core, warned about once per
interval, exported as ``wf_activities_unserved`` with a bounded label.

The core read and the watch are driven directly here (a real core, a clock the
test moves); the real server-and-worker path (log line, ``/metrics``,
``runs.inspect`` and the CLI) is in ``tests/e2e/test_e2e_failures.py``.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from wf.node_reads import NodeReads
from wf.scheduler import commands as cmd
from wf.scheduler.dispatcher import SchedulerCore
from wf.scheduler.model import Activity, WorkerInfo
from wf.scheduler.unserved import unserved_types
from wf.server.unserved import TYPES_SHOWN_MAX, UnservedCollector, UnservedWatch

T0 = 1_767_225_600.0


class _Clock:
    def __init__(self) -> None:
        self.t = T0

    def now(self) -> float:
        return self.t


class _Node:
    """The part of a node the watch reads: its core, through the node's read port."""

    def __init__(self, core: SchedulerCore) -> None:
        self.core = core
        self.reads = NodeReads(self)  # type: ignore[arg-type]


def _core(*types: str, **workers: Any) -> SchedulerCore:
    core = SchedulerCore()
    for worker_id, fields in workers.items():
        info = WorkerInfo(worker_id=worker_id, heartbeat_interval_s=3600, **fields)
        core.handle(cmd.RegisterWorker(now=T0, info=info))
    activities = tuple(
        Activity(activity_id=f"{t}-{i}", activity_type=t) for i, t in enumerate(types)
    )
    core.handle(cmd.Submit(now=T0, activities=activities))
    return core


def _unserved(core: SchedulerCore) -> dict[str, int]:
    return unserved_types(core.queue.lanes.values(), core.registry.workers)


def test_types_no_registered_worker_takes_are_unserved() -> None:
    core = _core("a", "b", "b", w1={"activity_types": frozenset({"a"})})
    assert _unserved(core) == {"b": 2}


def test_with_no_worker_at_all_every_waiting_type_is_unserved() -> None:
    assert _unserved(_core("a", "b")) == {"a": 1, "b": 1}


def test_a_worker_of_another_tenant_or_without_the_capability_does_not_serve() -> None:
    core = SchedulerCore()
    core.handle(
        cmd.RegisterWorker(
            now=T0,
            info=WorkerInfo(worker_id="w1", heartbeat_interval_s=3600, tenants=frozenset({"x"})),
        )
    )
    core.handle(
        cmd.Submit(
            now=T0,
            activities=(
                Activity(activity_id="g", activity_type="gpu", capabilities=frozenset({"gpu"})),
                Activity(activity_id="t", activity_type="plain", tenant="x"),
                Activity(activity_id="o", activity_type="plain"),
            ),
        )
    )
    assert _unserved(core) == {"gpu": 1, "plain": 1}


def test_a_draining_worker_takes_nothing_new() -> None:
    core = _core("a", w1={})
    assert _unserved(core) == {}
    core.handle(cmd.ShutdownWorker(now=T0, worker_id="w1"))
    assert _unserved(core) == {"a": 1}


def test_the_watch_warns_once_per_type_per_interval_and_says_when_served(
    caplog: pytest.LogCaptureFixture,
) -> None:
    core = _core("a", "b")
    clock = _Clock()
    watch = UnservedWatch(_Node(core), clock, warn_interval_s=60.0)  # type: ignore[arg-type]

    def actions() -> list[tuple[str, str]]:
        found = [
            (getattr(r, "action", ""), getattr(r, "activity_type", "")) for r in caplog.records
        ]
        caplog.clear()
        return found

    with caplog.at_level(logging.INFO, logger="wf.server.unserved"):
        assert watch.check() == {"a": 1, "b": 1}
        assert actions() == [("activities.unserved", "a"), ("activities.unserved", "b")]
        clock.t += 59.0
        watch.check()
        assert actions() == []
        clock.t += 1.0
        watch.check()
        assert actions() == [("activities.unserved", "a"), ("activities.unserved", "b")]
        core.handle(
            cmd.RegisterWorker(
                now=clock.t,
                info=WorkerInfo(
                    worker_id="w1", heartbeat_interval_s=3600, activity_types=frozenset({"a"})
                ),
            )
        )
        core.handle(cmd.Poll(now=clock.t, worker_id="w1", max_items=1))
        assert watch.check() == {"b": 1}
        assert actions() == [("activities.served", "a")]
    assert caplog.records == []


def test_the_gauge_keeps_a_bounded_set_of_labels() -> None:
    types = [f"t{i:03d}" for i in range(TYPES_SHOWN_MAX + 3)]
    core = _core(*types, *types[:1])  # t000 has two waiting: it ranks first
    (family,) = UnservedCollector(_Node(core)).collect()  # type: ignore[arg-type]
    values = {s.labels["activity_type"]: s.value for s in family.samples}
    assert len(values) == TYPES_SHOWN_MAX + 1
    assert values["t000"] == 2
    assert values["other"] == 3
    assert sum(values.values()) == len(types) + 1
