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
import asyncio
import json
import math
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from wf.clock import SystemClock
from wf.errors import WfError
from wf.node import default_owner
from wf.scheduler.config import PolicyConfig, SchedulerConfig
from wf.scheduler.dispatcher import SchedulerCore
from wf.scheduler.load_balancer import BalancingStrategy
from wf.scheduler.model import Activity, Priority, RetryPolicy, WorkerInfo
from wf.scheduler.outputs import LeaseGranted, Record
from wf.scheduler.recovery import restore
from wf.scheduler.timer import RelativeDelay
from wf.store.loader import build_snapshot
from wf.store.sqlite import SQLiteStore
from wf.testing.clock import VirtualClock
from wf.testing.cluster import InProcessCluster, Step

START = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``wf demo``."""
    parser = subparsers.add_parser(
        "demo", help="watch the scheduler run an hour of work, persisted in a store folder"
    )
    parser.add_argument(
        "--store-root",
        default=".wf_store",
        help="embedded store folder (SQLite); runs accumulate there (default: .wf_store)",
    )
    parser.add_argument(
        "--in-memory", action="store_true", help="keep nothing: no store folder is used"
    )
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


DEMO_CONFIG = SchedulerConfig(
    policies={
        "default": PolicyConfig(
            policy="weighted_fair", options={"weights": {"acme": 3, "globex": 1}}
        )
    },
    balancer=BalancingStrategy.LOCALITY_AWARE,
    lease_ttl_s=30,
)
"""Two tenants weighted 3:1, locality-aware balancing, 30-second leases."""


def build_demo(cluster: InProcessCluster, prefix: str = "") -> InProcessCluster:
    """Load the demo scenario into ``cluster``; activity ids get ``prefix``."""
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
            activity_id=f"{prefix}{tenant}-{i}",
            activity_type="resize",
            tenant=tenant,
            priority=Priority.NORMAL if i % 3 else Priority.HIGH,
            idempotent=True,
            correlation_id=f"{prefix}run-{tenant}-{i}",
        )
        for tenant in ("acme", "globex")
        for i in range(6)
    ]
    cluster.submit(*batch)
    cluster.submit(
        Activity(
            activity_id=f"{prefix}train-model",
            activity_type="train",
            capabilities=frozenset({"gpu"}),
        ),
        Activity(
            activity_id=f"{prefix}nightly-cleanup",
            activity_type="cleanup",
            priority=Priority.LOW,
            delay=RelativeDelay(seconds=600),
        ),
        Activity(
            activity_id=f"{prefix}flaky-sync",
            activity_type="flaky",
            retry=RetryPolicy(max_attempts=3, initial_backoff_s=10),
        ),
        Activity(
            activity_id=f"{prefix}charge-card-42",
            activity_type="charge-card",
            tenant="acme",
        ),
        Activity(
            activity_id=f"{prefix}rebuild-index",
            activity_type="charge-card",
            tenant="acme",
            idempotent=True,
        ),
    )
    return cluster


class _DemoStore:
    """The demo's store folder: recover the core from it, persist every record to it."""

    def __init__(self, root: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.store = SQLiteStore(root)
        self.clock = SystemClock()

    def open(self) -> SchedulerCore:
        async def recover_core() -> SchedulerCore:
            await self.store.open()
            await self.store.acquire_ownership(default_owner(self.clock))
            stored = await self.store.load()
            snapshot, _diagnostics = build_snapshot(stored, DEMO_CONFIG, self.clock.now())
            return restore(snapshot)

        return self.loop.run_until_complete(recover_core())

    def persist(self, records: list[Record]) -> None:
        self.loop.run_until_complete(self.store.append(records))

    def close(self) -> dict[str, int]:
        async def finish() -> dict[str, int]:
            diagnostics = await self.store.check()
            stored = await self.store.load()
            await self.store.close()
            return {"unfinished_in_store": len(stored.activities), "diagnostics": len(diagnostics)}

        try:
            return self.loop.run_until_complete(finish())
        finally:
            self.loop.close()


def run(args: argparse.Namespace) -> int:
    """Run the scenario and print its timeline and summary."""
    demo_store = None if args.in_memory else _DemoStore(Path(args.store_root))
    try:
        if demo_store is None:
            cluster = build_demo(InProcessCluster(DEMO_CONFIG, VirtualClock(START)))
        else:
            core = demo_store.open()
            # Each run starts at the current quarter hour (real time), so instants in
            # the store move forward from run to run and the scenario keeps its
            # shape against the quarter-hour cron; ids carry the run's first seq.
            start_at = math.floor(demo_store.clock.now() / 900) * 900
            prefix = f"r{core.seq}-" if core.seq else ""
            cluster = build_demo(
                InProcessCluster(
                    DEMO_CONFIG, VirtualClock(start_at), core=core, persist=demo_store.persist
                ),
                prefix,
            )
        summary = _play(cluster)
        if demo_store is not None:
            summary["store"] = {"root": str(Path(args.store_root).resolve())}
            summary["store"].update(demo_store.close())
            demo_store = None
    except WfError as exc:
        print(f"wf: error: {exc.message}", file=sys.stderr)
        return 2
    finally:
        if demo_store is not None:
            demo_store.loop.run_until_complete(demo_store.store.close())
            demo_store.loop.close()
    if not args.json:
        for event in cluster.events:
            stamp = datetime.fromtimestamp(event.at, UTC).strftime("%H:%M:%S")
            print(f"{stamp}  {event.text}")
        print()
        print("The core made every decision above; workers and time were simulated in-process.")
    print(json.dumps(summary, sort_keys=True))
    return 0


def _play(cluster: InProcessCluster) -> dict[str, Any]:
    """One virtual hour; at minute one the worker holding the card charge dies."""
    start = cluster.clock.now()
    cluster.run_until(start + 60)
    running = {w: cluster.workers[w].running for w in ("cpu-1", "cpu-2")}
    holder = next(
        (w for w, held in running.items() if any(a.endswith("charge-card-42") for a in held)),
        "cpu-2",
    )
    cluster.crash(holder)
    # Stop just before the next quarter hour, so no report is left mid-flight.
    cluster.run_until(start + 3599)
    core = cluster.core
    return {
        "virtual_hours": 1,
        "completed": len(cluster.completed),
        "failed": {aid: f.reason for aid, f in sorted(cluster.failed.items())},
        "queued": core.queue.depth,
        "metrics": core.metrics.as_dict(),
    }
