"""``wf demo``: a guided hour of scheduling on the real core, in virtual time.

Three workers (two CPU workers in ``eu``, one GPU worker), two tenants with
weights, a cron report every 15 minutes, a delayed job, a flaky activity
that is retried, and a worker that crashes mid-activity: one idempotent
activity it held is requeued elsewhere, one non-idempotent one fails closed
with ``may_have_executed``. Everything runs through
:class:`wf.testing.cluster.InProcessCluster`, so the output is the core's
real decisions; it takes milliseconds because the clock is virtual.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime

from wf.scheduler.config import PolicyConfig, SchedulerConfig
from wf.scheduler.load_balancer import BalancingStrategy
from wf.scheduler.model import Activity, Priority, RetryPolicy, WorkerInfo
from wf.scheduler.outputs import LeaseGranted
from wf.scheduler.timer import RelativeDelay
from wf.testing.clock import VirtualClock
from wf.testing.cluster import InProcessCluster, Step

START = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``wf demo``."""
    parser = subparsers.add_parser("demo", help="watch the scheduler core run an hour of work")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON only")
    parser.set_defaults(handler=run)


def _handler(grant: LeaseGranted) -> Step:
    kind = grant.activity_type
    if kind == "flaky" and grant.lease.attempt == 1:
        return Step(duration_s=5, error="TimeoutError")
    if kind == "train":
        return Step(duration_s=600)
    if kind == "charge-card":
        return Step(duration_s=300)
    return Step(duration_s=20, result=b"ok")


def build_demo() -> InProcessCluster:
    """The demo scenario, ready to run for one virtual hour."""
    config = SchedulerConfig(
        policies={
            "default": PolicyConfig(
                policy="weighted_fair", options={"weights": {"acme": 3, "globex": 1}}
            )
        },
        balancer=BalancingStrategy.LOCALITY_AWARE,
        lease_ttl_s=30,
    )
    cluster = InProcessCluster(config, VirtualClock(START))
    for name, caps in (("cpu-1", frozenset[str]()), ("cpu-2", frozenset[str]())):
        cluster.add_worker(
            WorkerInfo(
                worker_id=name,
                hostname=f"{name}.local",
                capabilities=caps,
                max_concurrency=2,
                labels={"locality": "eu"},
                heartbeat_interval_s=5,
            ),
            _handler,
        )
    cluster.add_worker(
        WorkerInfo(
            worker_id="gpu-1",
            hostname="gpu-1.local",
            capabilities=frozenset({"gpu"}),
            max_concurrency=1,
            heartbeat_interval_s=5,
        ),
        _handler,
    )
    cluster.register_cron(
        "quarter-hour-report",
        "*/15 * * * *",
        Activity(activity_id="template", activity_type="report", tenant="acme"),
        "Europe/Berlin",
    )
    batch = [
        Activity(
            activity_id=f"{tenant}-{i}",
            activity_type="resize",
            tenant=tenant,
            priority=Priority.NORMAL if i % 3 else Priority.HIGH,
            idempotent=True,
            correlation_id=f"run-{tenant}-{i}",
        )
        for tenant in ("acme", "globex")
        for i in range(6)
    ]
    cluster.submit(*batch)
    cluster.submit(
        Activity(activity_id="train-model", activity_type="train", capabilities=frozenset({"gpu"})),
        Activity(
            activity_id="nightly-cleanup",
            activity_type="cleanup",
            priority=Priority.LOW,
            delay=RelativeDelay(seconds=600),
        ),
        Activity(
            activity_id="flaky-sync",
            activity_type="flaky",
            retry=RetryPolicy(max_attempts=3, initial_backoff_s=10),
        ),
        Activity(activity_id="charge-card-42", activity_type="charge-card", tenant="acme"),
        Activity(
            activity_id="rebuild-index",
            activity_type="charge-card",
            tenant="acme",
            idempotent=True,
        ),
    )
    return cluster


def run(args: argparse.Namespace) -> int:
    """Run the scenario and print its timeline and summary."""
    cluster = build_demo()
    start = cluster.clock.now()
    # At 08:01 the worker holding the long card charge dies mid-activity.
    cluster.run_until(start + 60)
    holder = next(
        (w for w in ("cpu-1", "cpu-2") if "charge-card-42" in cluster.workers[w].running), "cpu-2"
    )
    cluster.crash(holder)
    cluster.run_until(start + 3600)
    core = cluster.core
    summary = {
        "virtual_hours": 1,
        "completed": len(cluster.completed),
        "failed": {aid: f.reason for aid, f in sorted(cluster.failed.items())},
        "queued": core.queue.depth,
        "metrics": core.metrics.as_dict(),
    }
    if not args.json:
        for event in cluster.events:
            stamp = datetime.fromtimestamp(event.at, UTC).strftime("%H:%M:%S")
            print(f"{stamp}  {event.text}")
        print()
        print("The core made every decision above; workers and time were simulated in-process.")
    print(json.dumps(summary, sort_keys=True))
    return 0
