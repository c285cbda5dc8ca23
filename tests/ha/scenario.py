"""The shape every fault test shares: a cluster under load and schedules, a fault,
a takeover, then every check of :mod:`checks`.

:func:`begin` starts three nodes, the write audit, two workers of
:mod:`ledger_app`, one-shot schedules one second apart that straddle the
fault, and the load client, and returns once work is flowing. The test
injects its fault and names the node it deposed; :func:`finish` lets the
load run on the new active, stops it and checks everything.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from wf.client.app import App

from .checks import (
    FenceHistory,
    ScheduleSet,
    check_acknowledged,
    check_executed_at_most_once,
    check_fence,
    check_schedules,
    check_store,
    ledger_lines,
)
from .cluster import Cluster, Node, wait_until
from .ledger_app import LEDGER_TYPE
from .load import Load, LoadReport

WORKERS: Final = ("w1", "w2")
SCHEDULES: Final = 8
"""One-shot schedules per test, one second apart."""
SCHEDULE_LEAD_S: Final = 2.0
"""The first instant is at least this far ahead when the schedules are created."""
FLOWING_ACKS: Final = 8
"""Acknowledged submissions before the fault."""
AFTER_ACKS: Final = 8
"""Acknowledged submissions after the takeover, before the load stops."""
WORK_S: Final = 60.0
"""Bound for everything acknowledged (and every scheduled run) to finish."""
TAKEOVER_S: Final = 15.0
"""Bound for a standby to take over after a fault."""
PLAN: Final[dict[str, Any]] = {
    "nodes": [
        {
            "kind": "activity",
            "id": "step",
            "activity_type": LEDGER_TYPE,
            "args": {"seconds": 0.2},
            "idempotent": False,
        }
    ],
    "output": {"worker": {"$node": "step", "path": "worker"}},
}


@dataclass
class Run:
    """A cluster under load, before and after its fault."""

    cluster: Cluster
    active: Node
    """The active node before the fault."""
    load: Load
    schedules: ScheduleSet
    epoch_before: int
    notes: dict[str, Any] = field(default_factory=dict)


def create_schedules(cluster: Cluster, active: Node, count: int = SCHEDULES) -> ScheduleSet:
    """A deployment of :data:`PLAN` and ``count`` one-shot schedules, one a second."""
    urls = [active.url, *(u for u in cluster.urls if u != active.url)]
    with App.sync(urls) as app:
        app.create_artifact_from_plan("ha_step", 1, PLAN)
        deployment = app.save_deployment({"artifact_id": "ha_step", "artifact_version": 1})
        first = math.ceil(time.time() + SCHEDULE_LEAD_S)
        instants = {}
        for i in range(count):
            at = float(first + i)
            schedule_id = f"ha-once-{i}"
            app.create_schedule(
                schedule_id,
                deployment.deployment_id,
                {"kind": "oneshot", "at": datetime.fromtimestamp(at, UTC).isoformat()},
            )
            instants[schedule_id] = at
    return ScheduleSet(instants=instants)


def begin(cluster: Cluster, *, first: str | None = None) -> Run:
    """Start everything and wait until work flows (see the module docstring)."""
    active = cluster.start(first=first)
    cluster.install_audit()
    cluster.start_workers(*WORKERS)
    schedules = create_schedules(cluster, active)
    urls = [active.url, *(u for u in cluster.urls if u != active.url)]
    load = Load(urls, prefix="ack", rate_per_s=8.0, work_s=0.3).start()
    wait_until(
        lambda: load.acknowledged_count >= FLOWING_ACKS and len(ledger_lines(cluster)) >= 3,
        "work flowing before the fault",
        30.0,
    )
    return Run(
        cluster=cluster,
        active=active,
        load=load,
        schedules=schedules,
        epoch_before=cluster.fence()[0],
    )


def finish(run: Run, *, new_active: Node, deposed: str | None) -> FenceHistory:
    """Let the load run on ``new_active``, stop it, and check everything.

    ``deposed`` is the node that lost the fence (``None`` when the same node kept
    or re-took it, as after a PostgreSQL restart it may)."""
    cluster = run.cluster
    acked_at_takeover = run.load.acknowledged_count
    wait_until(
        lambda: run.load.acknowledged_count >= acked_at_takeover + AFTER_ACKS,
        f"{AFTER_ACKS} submissions acknowledged after the takeover",
        30.0,
    )
    report: LoadReport = run.load.stop()
    assert not report.refused, f"submissions refused for good: {report.refused[:10]}"
    epoch_after, _ = cluster.fence()
    assert epoch_after > run.epoch_before or deposed is None, (
        f"the fence's epoch did not move ({run.epoch_before} -> {epoch_after})"
    )
    check_acknowledged(cluster, report.acknowledged, WORK_S)
    check_executed_at_most_once(cluster)
    serving = cluster.wait_settled(timeout_s=TAKEOVER_S)
    assert serving is new_active, (
        f"{serving.node_id} serves at the end, not the new active {new_active.node_id}"
    )
    check_schedules(cluster, run.schedules, serving.url, WORK_S)
    history = check_fence(
        cluster,
        deposed=deposed,
        takeover_epoch=_epoch_started_by(cluster, new_active) if deposed else None,
    )
    check_store(cluster)
    return history


def _epoch_started_by(cluster: Cluster, node: Node) -> int:
    """The first audited epoch ``node`` wrote in after the fault: the takeover epoch."""
    epochs = sorted({e for e, _, _, n in cluster.audit() if n == node.node_id})
    assert epochs, f"the new active {node.node_id} committed nothing"
    return epochs[-1]


def takeover(cluster: Cluster, *, exclude: tuple[str, ...], since: float) -> tuple[Node, float]:
    """Wait for a node outside ``exclude`` to be the only active one; returns it and
    the seconds since ``since`` (a ``time.monotonic()`` instant)."""
    node = cluster.wait_active(exclude=exclude, timeout_s=TAKEOVER_S)
    return node, time.monotonic() - since
