"""Performance benchmark of the scheduler core (not a test: nothing here asserts speed).

Theory of operation
-------------------
Three figures, each measured with the core exactly as the shell drives it:

* ``queue_op_us`` -- the :class:`~wf.scheduler.queue.ReadyQueue` alone. Its
  lanes (4 tenants x 4 priority levels) are filled with N ``QUEUED``
  activities, then M pairs "push one new activity, pop a lane's head" are
  timed at that steady size. The lanes cycle, so each lane stays at N/16.
  Ranks come from the weighted-fair policy (all 0: FIFO by ``seq``); a second
  series, ``queue_op_us_deadline_rank``, uses random deadline ranks so that
  every push really sifts (the heap's O(log N) worst case).
* ``core_cycles_per_s`` -- a saturated cluster: 100 workers of concurrency 8,
  weighted-fair policy over 4 tenants of weights 1:2:3:4, a backlog kept by
  submitting batches of 1,000. One cycle is the steady state of one slot:
  ``Complete`` the oldest lease, the freed worker ``Poll`` s for one item, the
  grant is answered by ``StartActivity``; every command goes through
  :meth:`SchedulerCore.handle`. It is timed in the steady state, once the
  core's memory of finished ids (``FINISHED_MEMORY_MAX``) is full and evicts
  on every completion; ``core_cycles_per_s_young_core`` times the same loop
  before that. Time is virtual inside the core (each cycle advances ``now``
  by 1 µs), wall time (``perf_counter``) only out here.
* ``bytes_per_queued_activity`` -- ``tracemalloc``'s traced-memory growth of a
  core into which 10^6 activities were submitted (``Submit`` batches, no
  workers, so every one stays queued), divided by the count. It includes the
  activity id strings, the activity table and the heap entries.

``--profile`` runs the cycle loop under cProfile and prints the top functions
by own time. ``--quick`` shrinks every size for the CI smoke test. The last
line printed is always one JSON object; everything before it is progress.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import gc
import io
import json
import os
import platform
import pstats
import random
import statistics
import sys
import time
import tracemalloc
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from wf.scheduler import commands as cmd
from wf.scheduler.config import PolicyConfig, SchedulerConfig
from wf.scheduler.dispatcher import FINISHED_MEMORY_MAX, SchedulerCore
from wf.scheduler.model import Activity, ActivityState, Priority, WorkerInfo
from wf.scheduler.outputs import LeaseGranted, Outcome
from wf.scheduler.queue import Lane, ReadyQueue

TENANT_WEIGHTS: Final = {"t0": 1.0, "t1": 2.0, "t2": 3.0, "t3": 4.0}
"""Four tenants of different weights for the weighted-fair policy."""
TENANTS: Final = tuple(TENANT_WEIGHTS)
PRIORITIES: Final = tuple(Priority)
GROUP: Final = "default"
ACTIVITY_TYPE: Final = "bench.job"

WORKER_COUNT: Final = 100
WORKER_CONCURRENCY: Final = 8
SUBMIT_BATCH_SIZE: Final = 1_000
"""Activities per ``Submit`` command."""
BACKLOG_MIN: Final = 20_000
"""The cycle loop submits another batch whenever fewer than this are queued."""
CYCLE_CHECK_EVERY: Final = 1_000
"""Cycles between two reads of the wall clock (and two ``Tick`` commands)."""
CYCLE_WARMUP_COUNT: Final = 5_000
"""Cycles run and discarded on a fresh core before anything is timed."""
CYCLE_STEP_S: Final = 1e-6
"""Virtual time that passes inside the core per cycle."""
START_AT_S: Final = 1_700_000_000.0
"""The core's virtual ``now`` at the start of every run."""
QUEUE_TARGET_RATIO_MAX: Final = 3.0
"""Target: per-pair time at 10^6 queued within this factor of 10^3."""
CYCLES_TARGET_PER_S: Final = 50_000
PROFILE_TOP: Final = 25
SEED: Final = 20240601


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """Sizes and repetitions of one benchmark run."""

    queue_sizes: tuple[int, ...]
    """Steady queue sizes N for ``queue_op_us``."""
    queue_pairs: int
    """Timed push+pop pairs M per repetition."""
    cycle_fresh_count: int
    """Cycles timed on a young core (before its finished-id memory fills)."""
    cycle_saturate: bool
    """Run until the finished-id memory is full before the steady-state window."""
    cycle_duration_s: float
    """Wall time of the steady-state window of one cycle run."""
    memory_count: int
    """Activities queued for ``bytes_per_queued_activity``."""
    repetitions: int
    """Repetitions of the queue and cycle measurements (the median is reported)."""
    cycle_repetitions: int
    """Cycle runs (each on a fresh core)."""


FULL: Final = Plan(
    queue_sizes=(1_000, 10_000, 100_000, 1_000_000),
    queue_pairs=200_000,
    cycle_fresh_count=FINISHED_MEMORY_MAX // 2,
    cycle_saturate=True,
    cycle_duration_s=3.0,
    memory_count=1_000_000,
    repetitions=3,
    cycle_repetitions=3,
)
QUICK: Final = Plan(
    queue_sizes=(1_000, 10_000),
    queue_pairs=20_000,
    cycle_fresh_count=5_000,
    cycle_saturate=False,
    cycle_duration_s=1.0,
    memory_count=10_000,
    repetitions=3,
    cycle_repetitions=1,
)


def say(message: str) -> None:
    """One progress line (flushed, so a slow step shows where it is)."""
    print(message, flush=True)


def activity_spec(n: int) -> Activity:
    """The n-th submitted activity: tenants and priorities in turn (16 lanes)."""
    return Activity(
        activity_id=f"act-{n:09d}",
        activity_type=ACTIVITY_TYPE,
        tenant=TENANTS[n % len(TENANTS)],
        priority=PRIORITIES[(n // len(TENANTS)) % len(PRIORITIES)],
    )


def batch_specs(first: int, size: int) -> tuple[Activity, ...]:
    return tuple(activity_spec(n) for n in range(first, first + size))


def make_core() -> SchedulerCore:
    weights = dict(TENANT_WEIGHTS)
    policy = PolicyConfig(policy="weighted_fair", options={"weights": weights})
    return SchedulerCore(SchedulerConfig(policies={GROUP: policy}))


# ------------------------------------------------------------------ queue


def queued_activity(n: int) -> Activity:
    """An activity as the dispatcher hands it to ``ReadyQueue.push``: QUEUED, with a seq."""
    a = activity_spec(n)
    a.state = ActivityState.QUEUED
    a.seq = n + 1
    return a


def make_lanes(queue: ReadyQueue) -> list[Lane]:
    """One lane per (tenant, priority), in the order ``activity_spec`` cycles through."""
    lanes: list[Lane] = []
    for n in range(len(TENANTS) * len(PRIORITIES)):
        lanes.append(queue.lane_for(activity_spec(n), GROUP))
    return lanes


def time_queue(size: int, pairs: int, repetitions: int, rank: Callable[[int], Any]) -> float:
    """Median microseconds per push+pop pair at a steady ``size``."""
    queue = ReadyQueue()
    lanes = make_lanes(queue)
    lane_count = len(lanes)
    for n in range(size):
        queue.push(lanes[n % lane_count], queued_activity(n), rank(n))
    assert queue.depth == size
    samples: list[float] = []
    next_n = size
    for _ in range(repetitions):
        # Built before the clock starts: only push and pop are timed.
        plan = [
            (lanes[n % lane_count], queued_activity(n), rank(n))
            for n in range(next_n, next_n + pairs)
        ]
        next_n += pairs
        push, pop = queue.push, queue.pop
        gc.collect()
        started = time.perf_counter()
        for lane, activity, r in plan:
            push(lane, activity, r)
            pop(lane)
        elapsed_s = time.perf_counter() - started
        assert queue.depth == size
        samples.append(elapsed_s / pairs * 1e6)
    return round(statistics.median(samples), 4)


def bench_queue(plan: Plan) -> tuple[dict[str, float], dict[str, float]]:
    """Both rank series, keyed by size as a string."""
    fifo: dict[str, float] = {}
    deadline: dict[str, float] = {}
    rng = random.Random(SEED)
    deadlines = [rng.uniform(0.0, 86_400.0) for _ in range(1 << 16)]
    mask = (1 << 16) - 1
    for size in plan.queue_sizes:
        fifo[str(size)] = us = time_queue(size, plan.queue_pairs, plan.repetitions, lambda n: 0)
        say(f"queue  N={size:>9,}  fifo rank      {us:7.3f} µs per push+pop")
        us = time_queue(
            size, plan.queue_pairs, plan.repetitions, lambda n: deadlines[(n * 40_503) & mask]
        )
        deadline[str(size)] = us
        say(f"queue  N={size:>9,}  deadline rank  {us:7.3f} µs per push+pop")
    return fifo, deadline


# ----------------------------------------------------------------- cycles


class Cluster:
    """A saturated cluster driving one core: the shell's side of the cycle."""

    def __init__(self) -> None:
        self.core = make_core()
        self.now = START_AT_S
        self.submitted = 0
        self.granted = 0
        self.completed = 0
        self.inflight: deque[tuple[str, str, int]] = deque()
        """(worker id, activity id, token) of every started lease, oldest first."""
        for w in range(WORKER_COUNT):
            info = WorkerInfo(worker_id=f"worker-{w:03d}", max_concurrency=WORKER_CONCURRENCY)
            self.handle(cmd.RegisterWorker(now=self.now, info=info))
        self.top_up()
        for w in range(WORKER_COUNT):
            worker_id = f"worker-{w:03d}"
            self.handle(cmd.Poll(now=self.now, worker_id=worker_id, max_items=WORKER_CONCURRENCY))
        assert len(self.inflight) == WORKER_COUNT * WORKER_CONCURRENCY

    def handle(self, command: cmd.Command) -> Outcome:
        """Send a command; start every lease it granted (as a worker would at once)."""
        outcome = self.core.handle(command)
        for decision in outcome.decisions:
            if type(decision) is LeaseGranted:
                lease = decision.lease
                self.granted += 1
                self.core.handle(
                    cmd.StartActivity(
                        now=self.now, activity_id=lease.activity_id, token=lease.token
                    )
                )
                self.inflight.append((lease.worker_id, lease.activity_id, lease.token))
        return outcome

    def top_up(self) -> None:
        """Submit batches until the backlog is at least ``BACKLOG_MIN``."""
        while self.submitted - self.granted < BACKLOG_MIN:
            specs = batch_specs(self.submitted, SUBMIT_BATCH_SIZE)
            self.handle(cmd.Submit(now=self.now, activities=specs))
            self.submitted += SUBMIT_BATCH_SIZE

    def cycles(self, count: int) -> None:
        """``count`` times: complete the oldest lease, its worker polls for one more."""
        for _ in range(count):
            worker_id, activity_id, token = self.inflight.popleft()
            self.now += CYCLE_STEP_S
            self.handle(cmd.Complete(now=self.now, activity_id=activity_id, token=token))
            self.completed += 1
            self.handle(cmd.Poll(now=self.now, worker_id=worker_id, max_items=1))
            if self.submitted - self.granted < BACKLOG_MIN:
                self.top_up()
        self.handle(cmd.Tick(now=self.now))

    def saturate(self) -> None:
        """Cycle until the core's memory of finished ids is full (its steady state)."""
        while self.completed < FINISHED_MEMORY_MAX:
            self.cycles(CYCLE_CHECK_EVERY)

    def run_for(self, duration_s: float) -> tuple[int, float]:
        """Cycle for about ``duration_s`` of wall time; returns (completed, elapsed seconds)."""
        first = self.completed
        started = time.perf_counter()
        elapsed_s = 0.0
        while elapsed_s < duration_s:
            self.cycles(CYCLE_CHECK_EVERY)
            elapsed_s = time.perf_counter() - started
        return self.completed - first, elapsed_s


def warm_cluster(plan: Plan) -> Cluster:
    """A fresh cluster in the state the steady-state window starts from."""
    cluster = Cluster()
    cluster.cycles(CYCLE_WARMUP_COUNT)
    if plan.cycle_saturate:
        cluster.saturate()
    return cluster


def cycle_run(plan: Plan) -> tuple[float, float]:
    """One run on a fresh core: (young-core rate, steady-state rate), cycles per second."""
    cluster = Cluster()
    cluster.cycles(CYCLE_WARMUP_COUNT)
    started = time.perf_counter()
    cluster.cycles(plan.cycle_fresh_count)
    fresh_per_s = plan.cycle_fresh_count / (time.perf_counter() - started)
    if plan.cycle_saturate:
        cluster.saturate()
    count, elapsed_s = cluster.run_for(plan.cycle_duration_s)
    return fresh_per_s, count / elapsed_s


def bench_cycles(plan: Plan) -> tuple[list[float], list[float]]:
    """Young-core and steady-state rates of every run."""
    fresh: list[float] = []
    steady: list[float] = []
    for i in range(plan.cycle_repetitions):
        gc.collect()
        fresh_per_s, steady_per_s = cycle_run(plan)
        fresh.append(fresh_per_s)
        steady.append(steady_per_s)
        say(
            f"cycles run {i + 1}/{plan.cycle_repetitions}: young core {fresh_per_s:,.0f}/s, "
            f"steady state {steady_per_s:,.0f}/s"
        )
    return fresh, steady


# ----------------------------------------------------------------- memory


def bench_memory(count: int) -> float:
    """Traced bytes per activity queued through ``Submit`` (no workers: all stay queued)."""
    gc.collect()
    tracemalloc.start()
    try:
        core = make_core()
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        now = START_AT_S
        for first in range(0, count, SUBMIT_BATCH_SIZE):
            size = min(SUBMIT_BATCH_SIZE, count - first)
            core.handle(cmd.Submit(now=now, activities=batch_specs(first, size)))
            if first % 100_000 == 0 and first:
                say(f"memory {first:>9,} queued")
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        assert core.queue.depth == count, "every submitted activity should be queued"
    finally:
        tracemalloc.stop()
    return (after - before) / count


# ---------------------------------------------------------------- profile


def profile_cycles(plan: Plan) -> list[dict[str, Any]]:
    """The cycle loop under cProfile; prints and returns the top functions by own time."""
    cluster = warm_cluster(plan)
    profiler = cProfile.Profile()
    profiler.enable()
    count, elapsed_s = cluster.run_for(plan.cycle_duration_s)
    profiler.disable()
    say(f"profiled {count:,} cycles in {elapsed_s:.2f} s (cProfile slows it down)")
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats(pstats.SortKey.TIME).print_stats(PROFILE_TOP)
    print(text.getvalue(), flush=True)
    return top_functions(stats, count)


def top_functions(stats: pstats.Stats, cycles: int) -> list[dict[str, Any]]:
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, Any]]
    raw = stats.stats  # type: ignore[attr-defined]
    rows = sorted(raw.items(), key=lambda kv: kv[1][2], reverse=True)[:PROFILE_TOP]
    return [
        {
            "function": f"{os.path.basename(path)}:{line}({name})",
            "calls_per_cycle": round(calls / cycles, 3),
            "tottime_us_per_cycle": round(tottime / cycles * 1e6, 3),
        }
        for (path, line, name), (_cc, calls, tottime, _cum, _callers) in rows
    ]


# ------------------------------------------------------------------- main


def context(plan: Plan, mode: str) -> dict[str, Any]:
    return {
        "mode": mode,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine_cores": os.cpu_count(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "repetitions": plan.repetitions,
        "cycle_repetitions": plan.cycle_repetitions,
        "queue_pairs": plan.queue_pairs,
        "cycle_duration_s": plan.cycle_duration_s,
        "cycle_young_count": plan.cycle_fresh_count,
        "cycle_finished_memory_saturated": plan.cycle_saturate,
        "workers": WORKER_COUNT,
        "worker_concurrency": WORKER_CONCURRENCY,
        "tenant_weights": dict(TENANT_WEIGHTS),
        "submit_batch_size": SUBMIT_BATCH_SIZE,
        "backlog_min": BACKLOG_MIN,
        "memory_count": plan.memory_count,
    }


def run_benchmarks(plan: Plan) -> dict[str, Any]:
    say("== queue: push+pop pairs at a steady size (16 lanes)")
    fifo, deadline = bench_queue(plan)
    say("== core cycles: complete -> poll -> lease -> start, submit to keep a backlog")
    fresh, steady = bench_cycles(plan)
    cycles_per_s = statistics.median(steady)
    say(f"core cycles median {cycles_per_s:,.0f}/s (target >= {CYCLES_TARGET_PER_S:,})")
    say(f"== memory: {plan.memory_count:,} activities queued under tracemalloc")
    started = time.perf_counter()
    per_activity = bench_memory(plan.memory_count)
    say(
        f"memory {per_activity:,.0f} bytes per queued activity "
        f"({time.perf_counter() - started:.1f} s)"
    )
    result: dict[str, Any] = {
        "queue_op_us": fifo,
        "queue_op_us_deadline_rank": deadline,
        "core_cycles_per_s": round(cycles_per_s),
        "core_cycles_runs_per_s": [round(r) for r in steady],
        "core_cycles_per_s_young_core": round(statistics.median(fresh)),
        "core_cycles_young_runs_per_s": [round(r) for r in fresh],
        "bytes_per_queued_activity": round(per_activity, 1),
    }
    sizes = plan.queue_sizes
    if len(sizes) > 1:
        ratio = fifo[str(sizes[-1])] / fifo[str(sizes[0])]
        result["queue_ratio_largest_vs_smallest"] = round(ratio, 2)
        say(
            f"queue ratio N={sizes[-1]:,} vs N={sizes[0]:,}: {ratio:.2f}x "
            f"(target <= {QUEUE_TARGET_RATIO_MAX}x at 10^6 vs 10^3)"
        )
    return result


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (CI smoke test)")
    parser.add_argument(
        "--profile", action="store_true", help="only profile the cycle loop (cProfile)"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    plan = QUICK if args.quick else FULL
    mode = ("quick" if args.quick else "full") + ("-profile" if args.profile else "")
    say(f"wf core benchmark ({mode}), Python {platform.python_version()}")
    if args.profile:
        result: dict[str, Any] = {"profile_top_by_tottime": profile_cycles(plan)}
    else:
        result = run_benchmarks(plan)
    result.update(context(plan, mode))
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
