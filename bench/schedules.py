"""Deployment-schedule benchmark: admission precision, and idle CPU with 10,000 schedules.

Theory of operation
-------------------
Both phases run a real local server in this process
(``build_local_static_workflow_server(..., schedules=True, activities=[],
durability="fsync")``: SQLite in a temporary folder, every commit fsynced)
and its admission service (``build_scheduler_service`` with
``poll_interval_s=1.0``, started in the background exactly as a server
starts it). The deployment's plan is one interrupt node, so no worker is
needed: an admitted run begins and at once waits for input (``interrupted``),
holding no execution slot. Time is the server's own clock
(``node.clock``, which the service reads), so instants and observations are on
one time base.

**Lateness** of an admission is measured three ways per admitted run, from a
listener on the run engine (``engine.listeners``):

* ``admission_lateness_*`` (the headline) -- the instant the engine adopts the
  admitted run minus the occurrence instant. The engine adopts it right after
  the one transaction that stores the occurrence, the schedule's watermark
  and the run has committed (fsynced), so this is "durably admitted" lateness:
  the timer's wake-up, the tick, the store's read of the schedule, the
  preflight and the commit.
* ``admission_lateness_created_*`` -- the run's ``created_at`` minus the
  occurrence instant (taken before the commit, so smaller).
* ``admission_lateness_service_*`` -- the service's own samples
  (``ScheduleService.lateness_s``: the tick's ``now`` minus the instant; what
  ``wf_schedule_admission_lateness_seconds`` exposes).

``start_lateness_*`` is when the run first left ``admitted`` (it began and
reached its interrupt) minus the instant.

**Phase 1, precision.** ``N`` one-shot schedules at instants ``gap`` apart
(200 every 20 ms; the first one about a second after the last is created:
the creation cost is measured on a few warm-up schedules first), plus, in
the full run, three ``* * * * *`` cron schedules in different zones
(``overlap="parallel"``, so their interrupted runs do not block the next
minute) observed for ``--cron-minutes`` whole minutes. The three crons come
due at the same instant, so one of them queues behind the other two's
commits: that is in the figures too. ``scheduler_misfires`` counts the
``skipped-misfire`` occurrences the service recorded (0 expected: nothing is
more than the 60 s allowance late unless the scheduler itself stalls).

**Phase 2, idle CPU.** A fresh server and service. First the process's CPU
time (``time.process_time``: every thread, so the store's writer thread
too) over ``--window-s`` idle wall seconds with no schedule
(``cpu_s_per_s_baseline``). Then ``--schedules`` daily cron schedules
(``M H * * *`` over seven zones, minutes and hours spread out, each at least
five hours away from now in its zone, so none is due) are created through
``ScheduleAPI.create_schedule``, ``CREATE_CONCURRENCY`` calls in flight
(each does the deployment preflight and one committed write; the creation
rate is reported), and the service catches up with the changes. The CPU
time over a window with none of them due is
``cpu_s_per_s_schedules_none_due`` (the bare cost of holding them). Then
five ``* * * * *`` crons and five one-shots due mid-window are added and the
CPU time is taken again over the same window: ``cpu_s_per_s_schedules``,
with ``schedules_active`` saying at what size. ``cpu_s_per_s_10k_schedules``
is that figure only when 10,000 or more daily schedules were held, else
``null`` (``--quick`` holds 1,000: its figure is only under
``cpu_s_per_s_schedules``). In the full run the window is placed around a
minute boundary, so the every-minute crons come due inside it. The due ones
must all be admitted (``idle_due_admitted`` of ``idle_due_expected``, their
worst lateness ``idle_due_lateness_max_ms``), none of the daily ones
(``idle_unexpected_admissions``); ``idle_ticks_per_s`` counts the service's
ticks in the window.

``--durability process`` runs both phases without the fsync per commit (to
tell the disk's share of the lateness from the scheduler's); every other
flag only changes a size. Either makes the mode ``...-custom``.

The last line printed is one JSON object; everything before it is progress.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
import json
import os
import platform
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal
from zoneinfo import ZoneInfo

from wf.runtime.runs import Run, RunStatus
from wf.schedules import SchedulerServiceConfig, ScheduleService, build_scheduler_service
from wf.server.local import LocalStaticServer, build_local_static_workflow_server
from wf.tuning import run as run_loop
from wf.tuning import tune_gc

Durability = Literal["fsync", "process"]
DEPLOYMENT: Final = "bench_ask.default"
PLAN: Final[dict[str, Any]] = {
    "nodes": [{"kind": "interrupt", "id": "ask", "prompt": "Go on?"}],
    "output": {"answer": {"$node": "ask"}},
}
"""One interrupt node: a run needs no worker and holds no slot once it has begun."""
POLL_INTERVAL_S: Final = 1.0
CREATE_CONCURRENCY: Final = 16
"""``create_schedule`` calls in flight while the 10,000 are created."""
WARMUP_SCHEDULES: Final = 5
"""Far-future one-shots created first, to time one creation."""
LEAD_S: Final = 1.0
"""How long after the last one-shot is created the first one comes due."""
CRON_ZONES: Final = ("UTC", "America/New_York", "Asia/Kolkata")
IDLE_ZONES: Final = (
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "America/Los_Angeles",
    "Asia/Tokyo",
    "Asia/Kolkata",
    "Australia/Sydney",
)
IDLE_DUE_CRONS: Final = 5
"""``* * * * *`` schedules among the idle ones."""
IDLE_DUE_ONESHOTS: Final = 5
"""One-shots due in the middle of the idle window."""
SETTLE_TIMEOUT_S: Final = 600.0
SETTLE_POLL_S: Final = 0.05
ADMIT_GRACE_S: Final = 10.0
"""How long after its instant an expected admission is waited for before giving up."""
EVERY_MINUTE: Final = "* * * * *"
TARGETS: Final = {"admission_lateness_p99_ms": "<= 10"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Sizes:
    """Sizes of one benchmark run."""

    oneshots: int
    oneshot_gap_s: float
    cron_minutes: int
    schedules: int
    window_s: float
    align_window: bool
    """Place the idle window around a minute boundary (so the every-minute crons fire)."""
    durability: Durability = "fsync"


FULL: Final = Sizes(
    oneshots=200,
    oneshot_gap_s=0.02,
    cron_minutes=2,
    schedules=10_000,
    window_s=10.0,
    align_window=True,
)
QUICK: Final = Sizes(
    oneshots=20,
    oneshot_gap_s=0.02,
    cron_minutes=0,
    schedules=1_000,
    window_s=3.0,
    align_window=False,
)


def say(message: str) -> None:
    """One progress line (flushed, so a slow step shows where it is)."""
    print(message, flush=True)


def percentile(samples: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (``fraction`` in 0..1) of a non-empty sample."""
    ordered = sorted(samples)
    rank = max(1, round(fraction * len(ordered) + 0.5))
    return ordered[min(rank, len(ordered)) - 1]


def summary_ms(prefix: str, samples_s: Sequence[float]) -> dict[str, float | None]:
    """``<prefix>_p50_ms``, ``_p99_ms``, ``_max_ms`` (``None`` without samples)."""
    if not samples_s:
        return {f"{prefix}_{k}_ms": None for k in ("p50", "p99", "max")}
    ms = [s * 1000.0 for s in samples_s]
    return {
        f"{prefix}_p50_ms": round(percentile(ms, 0.50), 3),
        f"{prefix}_p99_ms": round(percentile(ms, 0.99), 3),
        f"{prefix}_max_ms": round(max(ms), 3),
    }


def iso(instant: float) -> str:
    return datetime.datetime.fromtimestamp(instant, tz=datetime.UTC).isoformat()


@dataclass(slots=True)
class Admission:
    """What the engine listener saw of one scheduled run."""

    schedule_id: str
    occurrence: float
    admitted_at: float
    created_at: float
    started_at: float | None = None


@dataclass(slots=True)
class Node:
    """A started local server, its service, and what the listener saw."""

    server: LocalStaticServer
    service: ScheduleService
    admissions: dict[str, Admission] = field(default_factory=dict)
    ticks: int = 0
    ticking: bool = False
    """A tick is in progress (it may take a while after many changes)."""
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    """Set on every scheduled run the listener sees."""

    @property
    def now(self) -> Callable[[], float]:
        return self.server.server.node.clock.now

    def listen(self, run: Run) -> None:
        trigger = run.trigger
        if trigger.kind != "schedule" or trigger.schedule_id is None:
            return
        seen = self.admissions.get(run.run_id)
        if seen is None:
            assert trigger.occurrence is not None
            seen = self.admissions[run.run_id] = Admission(
                trigger.schedule_id, trigger.occurrence, self.now(), run.created_at
            )
        if seen.started_at is None and run.status is not RunStatus.ADMITTED:
            seen.started_at = self.now()
        self.changed.set()

    def of(self, schedule_ids: set[str]) -> list[Admission]:
        return [a for a in self.admissions.values() if a.schedule_id in schedule_ids]

    async def create(self, schedule_id: str, trigger: dict[str, Any], **options: Any) -> None:
        await self.server.api.schedules.create_schedule(
            schedule_id=schedule_id, deployment_id=DEPLOYMENT, trigger=trigger, **options
        )

    async def settle(self) -> None:
        """Until the service has reconsidered every changed schedule: nothing pending
        and no tick in progress (a tick takes the pending set when it starts)."""
        for _ in range(int(SETTLE_TIMEOUT_S / SETTLE_POLL_S)):
            if not (self.service.pending_work() or self.ticking):
                return
            await asyncio.sleep(SETTLE_POLL_S)

    async def wait_admitted(self, schedule_ids: set[str], count: int, last_due: float) -> None:
        """Until ``count`` runs of ``schedule_ids`` are admitted, or ``ADMIT_GRACE_S``
        after ``last_due`` (then the shortfall shows in the report)."""
        give_up = last_due + ADMIT_GRACE_S
        while len(self.of(schedule_ids)) < count and self.now() < give_up:
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), give_up - self.now())

    def misfires(self) -> int:
        return sum(n for (_, reason), n in self.service.skipped.items() if reason == "misfire")

    def overlaps(self) -> int:
        return sum(n for (_, reason), n in self.service.skipped.items() if reason == "overlap")


@contextlib.asynccontextmanager
async def started(root: Path, durability: Durability = "fsync") -> AsyncIterator[Node]:
    """A server on a fresh store in ``root``, the deployment, a running service."""
    server = build_local_static_workflow_server(
        root, schedules=True, activities=[], durability=durability
    )
    await server.start()
    # As wf-rpc-server does once booted (wf.tuning): no full-collection pauses over
    # what lives as long as the process.
    tune_gc()
    try:
        await server.api.create_artifact_from_plan("bench_ask", 1, PLAN)
        await server.api.save_deployment({"artifact_id": "bench_ask", "artifact_version": 1})
        service = build_scheduler_service(
            server, SchedulerServiceConfig(poll_interval_s=POLL_INTERVAL_S)
        )
        node = Node(server, service)
        server.server.engine.listeners.append(node.listen)
        counted = service.tick

        async def tick(now: float | None = None) -> int:
            node.ticks += 1
            node.ticking = True
            try:
                return await counted(now)
            finally:
                node.ticking = False

        service.tick = tick  # type: ignore[method-assign]  # counts the loop's ticks
        await service.start()
        try:
            yield node
        finally:
            await service.stop()
    finally:
        await server.stop()


async def timed_creates(
    count: int, make: Callable[[int], Awaitable[None]], concurrency: int = 1
) -> float:
    """Run ``make(0..count-1)``, ``concurrency`` at a time; returns the wall seconds."""
    began = time.perf_counter()
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(count):
        queue.put_nowait(i)

    async def lane() -> None:
        while not queue.empty():
            await make(queue.get_nowait())

    await asyncio.gather(*(lane() for _ in range(max(1, min(concurrency, count)))))
    return time.perf_counter() - began


# ---------------------------------------------------------------- phase 1


async def precision(sizes: Sizes, root: Path) -> dict[str, Any]:
    async with started(root, sizes.durability) as node:
        crons = {f"cron-{i}" for i in range(len(CRON_ZONES) if sizes.cron_minutes else 0)}
        crons_created = node.now()
        for schedule_id, zone in zip(sorted(crons), CRON_ZONES, strict=False):
            await node.create(
                schedule_id,
                {"kind": "cron", "expression": EVERY_MINUTE, "timezone": zone},
                overlap="parallel",
                max_active_runs=sizes.cron_minutes + 2,
            )
        far = node.now() + 86_400
        warmup_s = await timed_creates(
            WARMUP_SCHEDULES,
            lambda i: node.create(f"warmup-{i}", {"kind": "oneshot", "at": iso(far + i)}),
        )
        per_create_s = warmup_s / WARMUP_SCHEDULES
        first = node.now() + LEAD_S + 2.0 * sizes.oneshots * per_create_s
        instants = [first + i * sizes.oneshot_gap_s for i in range(sizes.oneshots)]
        oneshots = {f"once-{i:05d}" for i in range(sizes.oneshots)}
        created_s = await timed_creates(
            sizes.oneshots,
            lambda i: node.create(f"once-{i:05d}", {"kind": "oneshot", "at": iso(instants[i])}),
        )
        lead = first - node.now()
        say(
            f"precision: {sizes.oneshots} one-shots created in {created_s:.2f} s; "
            f"the first is due in {lead:.2f} s, then one every "
            f"{sizes.oneshot_gap_s * 1000:.0f} ms"
        )
        await node.wait_admitted(oneshots, sizes.oneshots, instants[-1] if instants else 0.0)
        cron_expected = len(crons) * sizes.cron_minutes
        if crons:
            # The first ``cron_minutes`` minute boundaries after the crons' creation.
            last_due = (int(crons_created // 60) + sizes.cron_minutes) * 60.0
            say(f"precision: waiting for {cron_expected} cron admissions (until {iso(last_due)})")
            await node.wait_admitted(crons, cron_expected, last_due)
        samples = node.of(oneshots | crons)
        late = [a.admitted_at - a.occurrence for a in samples]
        created = [a.created_at - a.occurrence for a in samples]
        begun = [a.started_at - a.occurrence for a in samples if a.started_at is not None]
        cron_late = [a.admitted_at - a.occurrence for a in node.of(crons)]
        report: dict[str, Any] = {
            **summary_ms("admission_lateness", late),
            **summary_ms("admission_lateness_created", created),
            **summary_ms("admission_lateness_service", list(node.service.lateness_s)),
            **summary_ms("start_lateness", begun),
            "admission_lateness_cron_max_ms": (
                round(max(cron_late) * 1000.0, 3) if cron_late else None
            ),
            "oneshots": sizes.oneshots,
            "oneshot_gap_ms": sizes.oneshot_gap_s * 1000.0,
            "oneshots_admitted": len(node.of(oneshots)),
            "oneshot_lead_s": round(lead, 3),
            "crons": len(crons),
            "cron_admissions_expected": cron_expected,
            "cron_admissions": len(node.of(crons)),
            "lateness_samples": len(samples),
            "scheduler_misfires": node.misfires(),
            "scheduler_skipped_overlap": node.overlaps(),
            "admissions_armed": node.service.armed_used,
            "admissions_armed_discarded": node.service.armed_discarded,
        }
        for key in ("admission_lateness", "admission_lateness_created", "start_lateness"):
            say(
                f"precision: {key} p50 {report[key + '_p50_ms']} / p99 {report[key + '_p99_ms']}"
                f" / max {report[key + '_max_ms']} ms"
            )
        return report


# ---------------------------------------------------------------- phase 2


def daily_trigger(i: int, wall: datetime.datetime) -> dict[str, Any]:
    """A daily cron at least five hours away from ``wall`` in its zone."""
    zone = IDLE_ZONES[i % len(IDLE_ZONES)]
    local_hour = wall.astimezone(ZoneInfo(zone)).hour
    hour = (local_hour + 6 + (i // len(IDLE_ZONES)) % 12) % 24
    return {"kind": "cron", "expression": f"{i % 60} {hour} * * *", "timezone": zone}


async def cpu_window(node: Node, window_s: float) -> tuple[float, int]:
    """CPU seconds per wall second over ``window_s`` idle seconds, and the service's ticks."""
    ticks = node.ticks
    cpu0, wall0 = time.process_time(), time.perf_counter()
    await asyncio.sleep(window_s)
    cpu1, wall1 = time.process_time(), time.perf_counter()
    return (cpu1 - cpu0) / (wall1 - wall0), node.ticks - ticks


async def idle_cpu(sizes: Sizes, root: Path) -> dict[str, Any]:
    async with started(root, sizes.durability) as node:
        await node.settle()
        baseline, baseline_ticks = await cpu_window(node, sizes.window_s)
        say(f"idle: no schedules, {baseline:.4f} CPU s/s ({baseline_ticks} ticks)")
        wall = datetime.datetime.now(datetime.UTC)
        daily = {f"daily-{i:05d}" for i in range(sizes.schedules)}
        created_s = await timed_creates(
            sizes.schedules,
            lambda i: node.create(f"daily-{i:05d}", daily_trigger(i, wall)),
            CREATE_CONCURRENCY,
        )
        rate = sizes.schedules / created_s
        say(f"idle: {sizes.schedules} daily schedules created in {created_s:.1f} s ({rate:.0f}/s)")
        settle0 = time.perf_counter()
        await node.settle()
        settle_s = time.perf_counter() - settle0
        none_due, none_due_ticks = await cpu_window(node, sizes.window_s)
        say(
            f"idle: {sizes.schedules} schedules, none due, {none_due:.4f} CPU s/s "
            f"({none_due_ticks} ticks)"
        )
        crons = {f"minutely-{i}" for i in range(IDLE_DUE_CRONS)}
        for i, schedule_id in enumerate(sorted(crons)):
            await node.create(
                schedule_id,
                {"kind": "cron", "expression": EVERY_MINUTE, "timezone": IDLE_ZONES[i]},
                overlap="parallel",
                max_active_runs=10,
            )
        now = node.now()
        start = now + 1.0
        if sizes.align_window:
            boundary = (int(now // 60) + 1) * 60.0
            if boundary - sizes.window_s / 2 < start:
                boundary += 60.0
            start = boundary - sizes.window_s / 2
        end = start + sizes.window_s
        middle = start + sizes.window_s / 2
        oneshots = {f"mid-{i}" for i in range(IDLE_DUE_ONESHOTS)}
        for i, schedule_id in enumerate(sorted(oneshots)):
            await node.create(schedule_id, {"kind": "oneshot", "at": iso(middle + i * 0.05)})
        await node.settle()
        cron_due = [
            t for t in range(int(start // 60) * 60 + 60, int(end) + 1, 60) if start <= t <= end
        ]
        expected = len(oneshots) + len(crons) * len(cron_due)
        say(
            f"idle: window of {sizes.window_s:g} s starts in {start - node.now():.1f} s; "
            f"{expected} admissions due inside it"
        )
        await asyncio.sleep(max(0.0, start - node.now()))
        before = set(node.admissions)
        prior = len(node.of(oneshots | crons))  # minutely ones admitted before the window
        cpu, ticks = await cpu_window(node, sizes.window_s)
        await node.wait_admitted(oneshots | crons, prior + expected, end)
        in_window = [
            a
            for run_id, a in node.admissions.items()
            if run_id not in before and start <= a.occurrence <= end
        ]
        unexpected = node.of(daily)
        due_late = [a.admitted_at - a.occurrence for a in in_window if a.schedule_id not in daily]
        at_10k = sizes.schedules >= 10_000
        say(
            f"idle: {sizes.schedules} schedules + {len(crons) + len(oneshots)} due ones, "
            f"{cpu:.4f} CPU s/s ({ticks} ticks in {sizes.window_s:g} s)"
        )
        return {
            "cpu_s_per_s_schedules": round(cpu, 5),
            "cpu_s_per_s_10k_schedules": round(cpu, 5) if at_10k else None,
            "cpu_s_per_s_baseline": round(baseline, 5),
            "cpu_s_per_s_schedules_none_due": round(none_due, 5),
            "schedules_active": sizes.schedules + len(crons) + len(oneshots),
            "schedules_daily": sizes.schedules,
            "idle_window_s": sizes.window_s,
            "idle_ticks_per_s": round(ticks / sizes.window_s, 3),
            "idle_ticks_per_s_baseline": round(baseline_ticks / sizes.window_s, 3),
            "idle_ticks_per_s_none_due": round(none_due_ticks / sizes.window_s, 3),
            "schedule_create_per_s": round(rate, 1),
            "schedule_create_s": round(created_s, 3),
            "schedule_create_concurrency": CREATE_CONCURRENCY,
            "schedule_settle_s": round(settle_s, 3),
            "idle_due_expected": expected,
            "idle_due_admitted": len(due_late),
            "idle_due_lateness_max_ms": round(max(due_late) * 1000.0, 3) if due_late else None,
            "idle_unexpected_admissions": len(unexpected),
            "idle_scheduler_misfires": node.misfires(),
            "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
        }


# ------------------------------------------------------------------- main


def context(sizes: Sizes, mode: str) -> dict[str, Any]:
    return {
        "mode": mode,
        "durability": sizes.durability,
        "store": "sqlite",
        "poll_interval_s": POLL_INTERVAL_S,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine_cores": os.cpu_count(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "repetitions": 1,
        "cron_minutes": sizes.cron_minutes,
        "targets": dict(TARGETS),
    }


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (CI smoke test)")
    parser.add_argument("--oneshots", type=int, help="one-shot schedules (200; 20 with --quick)")
    parser.add_argument(
        "--cron-minutes",
        type=int,
        help="minutes of every-minute crons in the precision phase (2; 0 with --quick)",
    )
    parser.add_argument(
        "--schedules", type=int, help="daily schedules in the idle phase (10000; 1000 with --quick)"
    )
    parser.add_argument(
        "--window-s", type=float, help="idle CPU window in seconds (10; 3 with --quick)"
    )
    parser.add_argument(
        "--durability",
        choices=("fsync", "process"),
        help="the store's durability (default fsync; process skips the fsync per commit)",
    )
    parser.add_argument("--scratch", type=Path, default=None, help="folder for the stores")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    sizes = QUICK if args.quick else FULL
    changes = {
        "oneshots": args.oneshots,
        "cron_minutes": args.cron_minutes,
        "schedules": args.schedules,
        "window_s": args.window_s,
        "durability": args.durability,
    }
    mode = "quick" if args.quick else "full"
    if any(v is not None for v in changes.values()):
        mode += "-custom"
        sizes = dataclasses.replace(sizes, **{k: v for k, v in changes.items() if v is not None})
    say(f"wf schedules benchmark ({mode}), Python {platform.python_version()}")
    scratch = Path(tempfile.mkdtemp(prefix="wf-bench-schedules-", dir=args.scratch))
    try:
        # The event loop wf-rpc-server runs on (wf.tuning: uvloop where installed).
        result = run_loop(precision(sizes, scratch / "precision"))
        result.update(run_loop(idle_cpu(sizes, scratch / "idle")))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result.update(context(sizes, mode))
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
