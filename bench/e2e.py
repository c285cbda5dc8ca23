"""End-to-end benchmark: a real ``wf-rpc-server`` and real worker processes on loopback.

Theory of operation
-------------------
One *session* per durability mode (``fsync``, then ``process``): a
``wf-rpc-server`` subprocess on 127.0.0.1 with a fresh SQLite store in a
temporary folder (log level ``warning``, durability set in its config file)
and two ``wf worker`` subprocesses (log level ``warning``) running this
module's no-op activity (``--app bench.e2e:activities``). The benchmark
process itself is the admin client (:class:`~wf.client.rpc_client.RpcClient`).
Every figure is a wall time; all processes share one machine, so
``time.time()`` values taken in different processes are comparable.

The no-op activity does one thing: it appends ``<activity id> <time.time()>``
to a file of its worker (one ``os.write`` on an ``O_APPEND`` descriptor, a
few microseconds), so the benchmark learns when each activity *started*
executing: after the worker received the lease and the server acknowledged
``scheduler.leases.start``.

* ``register_p99_ms`` -- ``scheduler.workers.register`` round trips of new
  worker ids, one at a time, from the benchmark process, before the workers
  start (each registration is committed before it is answered).
* ``renew_p99_ms`` -- ``scheduler.leases.renew`` round trips, one at a time,
  of one lease the benchmark process holds as a worker of its own (an
  activity type nobody else runs); each renewal is committed too.
* ``dispatch_p50_ms`` / ``dispatch_p99_ms`` -- light load: activities are
  submitted one at a time, 20 ms apart, to the two idle workers, which are
  long-polling. Latency = activity start (inside the activity) minus the
  instant just before the ``scheduler.activities.submit`` call. It includes
  the submission (an id check against the store and a commit), the grant
  reaching the waiting poll, the poll's answer, the worker's
  ``leases.start`` round trip (a commit too) and starting the activity's
  task. ``dispatch_after_ack_*`` counts from the submission's answer
  instead (the worker may start before that answer arrives: the grant
  rides the same commit), ``submit_*`` is the submission's round trip.
  ``dispatch_cpu_us`` is the CPU time the server, the workers together and
  this client spent per dispatch over those calls (from ``/proc`` and
  ``time.process_time``; heartbeats and polls included): the Python work
  behind the median.
* ``throughput_per_s`` -- N no-op activities are submitted up front in
  batches of 1,000, all dormant until one common ``not_before`` instant,
  while both workers wait; the instant leaves twice the time the previous
  repetition's submission took (a guess the first time), and
  ``throughput_submission_overlapped`` says whether submitting took longer.
  Throughput = N / (last completion - first start). The first start is the
  earliest start line; the last completion is when ``scheduler.queue.stats``
  first shows nothing queued, running or delayed (polled every 5 ms once
  fewer than 500 are left, so it is late by at most that; every 100 ms
  before, to leave the server alone). Median of several repetitions on the
  same server. ``throughput_cpu_us_per_activity`` is the CPU time (user +
  system, from ``/proc``) the server process and the two workers used per
  activity during the runs: steadier than throughput on a shared machine,
  and the figure to watch when optimizing.

Keys without suffix are the ``fsync`` figures (the default: every commit is
fsynced before it is acknowledged, surviving a power cut); the same keys
with ``_process`` are for ``durability: process`` (commits reach the OS
before they are acknowledged: they survive a SIGKILL of the server, not a
power cut).

``--profile`` runs only the fsync throughput phase, with the server and one
worker under cProfile (started through this module's ``_profiled-server``
and ``_profiled-wf`` entries), prints each one's top functions by own time
(main thread only: the store's writer thread is not profiled) and reports
them in the JSON line. ``--quick`` shrinks every size for the CI smoke test.
The last line printed is always one JSON object; everything before it is
progress.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import dataclasses
import datetime
import io
import json
import os
import platform
import pstats
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

from wf.worker import activity, activity_info

BIN: Final = Path(sys.executable).parent
REPO: Final = Path(__file__).resolve().parents[1]
ACTIVITY_TYPE: Final = "bench.noop"
RENEW_TYPE: Final = "bench.renew"
"""An activity type only the benchmark's own pseudo-worker runs (renewals)."""
IDLE_TYPE: Final = "bench.idle"
"""Declared by the registration pseudo-workers: nothing of it is ever submitted."""
STARTS_ENV: Final = "WF_BENCH_STARTS_FILE"
"""The worker's file of ``<activity id> <start time>`` lines."""
PROFILE_ENV: Final = "WF_BENCH_PROFILE_OUT"
"""Where ``_profiled-server`` / ``_profiled-wf`` dump their cProfile statistics."""
WORKER_COUNT: Final = 2
WORKER_CONCURRENCY: Final = 128
"""``--max-concurrency`` of each worker (no-op async activities: cheap slots)."""
WORKER_PREFETCH: Final = 128
"""``--prefetch``: leases held unstarted beyond the concurrency."""
SUBMIT_BATCH: Final = 1_000
"""Activities per ``scheduler.activities.submit`` call in the throughput phase."""
STATS_POLL_S: Final = 0.005
"""How often the benchmark asks whether everything finished, near the end."""
STATS_POLL_FAR_S: Final = 0.1
"""How often it asks while more than :data:`STATS_NEAR_END` activities are left."""
STATS_NEAR_END: Final = 500
"""Unfinished activities below which it asks every :data:`STATS_POLL_S`."""
START_TIMEOUT_S: Final = 30.0
STOP_TIMEOUT_S: Final = 20.0
PHASE_TIMEOUT_S: Final = 300.0
CALL_TIMEOUT_S: Final = 30.0
PROFILE_TOP: Final = 30
TARGETS: Final = {
    "dispatch_p99_ms": "< 5",
    "throughput_per_s": ">= 4000",
    "register_p99_ms": "< 10",
    "renew_p99_ms": "< 2",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """Sizes and repetitions of one benchmark run."""

    dispatch_count: int
    """Activities submitted one at a time for the dispatch latency."""
    dispatch_gap_s: float
    """Pause between two of those submissions."""
    throughput_count: int
    """Activities per throughput repetition."""
    throughput_repetitions: int
    register_count: int
    renew_count: int
    warmup_calls: int
    """Unmeasured calls before each latency series (connections, caches)."""


FULL: Final = Plan(
    dispatch_count=400,
    dispatch_gap_s=0.02,
    throughput_count=20_000,
    throughput_repetitions=3,
    register_count=300,
    renew_count=500,
    warmup_calls=20,
)
QUICK: Final = Plan(
    dispatch_count=20,
    dispatch_gap_s=0.01,
    throughput_count=500,
    throughput_repetitions=1,
    register_count=20,
    renew_count=20,
    warmup_calls=3,
)


def say(message: str) -> None:
    """One progress line (flushed, so a slow step shows where it is)."""
    print(message, flush=True)


# ---------------------------------------------------------- worker side


_starts_fd: int | None = None


@activity(name=ACTIVITY_TYPE, idempotent=True)
async def noop() -> None:
    """Record this activity's start instant in the worker's file; nothing else."""
    started = time.time()
    global _starts_fd
    if _starts_fd is None:
        path = os.environ[STARTS_ENV]
        _starts_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_starts_fd, f"{activity_info().activity_id} {started!r}\n".encode())


activities = [noop]
"""What ``wf worker --app bench.e2e:activities`` runs."""


def read_starts(paths: Sequence[Path]) -> dict[str, float]:
    """Activity id -> start instant, from every worker's file (latest start wins)."""
    starts: dict[str, float] = {}
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            activity_id, _, at = line.partition(" ")
            if at:
                starts[activity_id] = float(at)
    return starts


# ------------------------------------------------------------ processes


def _lines_into(stream: IO[str], sink: queue.Queue[str]) -> None:
    with stream:
        for line in stream:
            sink.put(line)


@dataclass
class Cluster:
    """The server and worker subprocesses of one session (killed on close)."""

    tmp: Path
    durability: str
    concurrency: int = WORKER_CONCURRENCY
    prefetch: int = WORKER_PREFETCH
    profile_out: Path | None = None
    procs: list[subprocess.Popen[Any]] = field(default_factory=list)
    server: subprocess.Popen[str] | None = None
    url: str = ""
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    starts_files: list[Path] = field(default_factory=list)

    def start_server(self) -> None:
        config = {
            "server": {
                "store": {"durability": self.durability},
                "observability": {"log_level": "warning"},
            }
        }
        config_path = self.tmp / "server.json"
        config_path.write_text(json.dumps(config))
        args = [
            "--store-root",
            str(self.tmp / "store"),
            "--port",
            "0",
            "--config",
            str(config_path),
        ]
        env = dict(os.environ)
        if self.profile_out is not None:
            command = [sys.executable, str(Path(__file__).resolve()), "_profiled-server", *args]
            env[PROFILE_ENV] = str(self.profile_out / "server.prof")
        else:
            command = [str(BIN / "wf-rpc-server"), *args]
        log_path = self.tmp / "server.log"
        with log_path.open("w") as log_file:
            proc = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=log_file, text=True, cwd=REPO, env=env
            )
        self.procs.append(proc)
        self.server = proc
        assert proc.stdout is not None
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=_lines_into, args=(proc.stdout, lines), daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or proc.poll() is not None:
                raise RuntimeError(f"server did not start: {log_path.read_text()[-2000:]}")
            try:
                line = lines.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                continue
            with contextlib.suppress(json.JSONDecodeError):
                event = json.loads(line)
                if isinstance(event, dict) and event.get("event") == "listening":
                    self.url = f"http://127.0.0.1:{event['port']}"
                    return

    def start_workers(self) -> None:
        for n in range(WORKER_COUNT):
            worker_id = f"bench-worker-{n}"
            starts = self.tmp / f"starts-{worker_id}.txt"
            self.starts_files.append(starts)
            log_path = self.tmp / f"{worker_id}.log"
            env = {**os.environ, STARTS_ENV: str(starts)}
            command = [str(BIN / "wf")]
            if self.profile_out is not None and n == 0:
                command = [sys.executable, str(Path(__file__).resolve()), "_profiled-wf"]
                env[PROFILE_ENV] = str(self.profile_out / "worker.prof")
            with log_path.open("w") as log_file:
                proc = subprocess.Popen(
                    [
                        *command,
                        "worker",
                        "--app",
                        "bench.e2e:activities",
                        "--server",
                        self.url,
                        "--worker-id",
                        worker_id,
                        "--max-concurrency",
                        str(self.concurrency),
                        "--prefetch",
                        str(self.prefetch),
                        "--log-level",
                        "warning",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=log_file,
                    cwd=REPO,
                    env=env,
                )
            self.procs.append(proc)
            self.workers[worker_id] = proc

    def cpu(self) -> dict[str, float | None]:
        """CPU seconds used so far by the server and by all workers together."""
        server = cpu_seconds(self.server.pid) if self.server is not None else None
        workers = [cpu_seconds(p.pid) for p in self.workers.values()]
        total = None if None in workers else sum(w for w in workers if w is not None)
        return {"server": server, "workers": total}

    def stop(self) -> None:
        """SIGTERM everything (workers first, so they drain against a live server)."""
        for proc in [*self.workers.values(), self.server]:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(STOP_TIMEOUT_S)
            if proc.stdout is not None:
                proc.stdout.close()


# ------------------------------------------------------------- measuring


_CLOCK_TICKS: Final = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process so far (Linux ``/proc``; ``None`` elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    # After the command name: state is field 3, utime 14 and stime 15 (1-based).
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def percentile(samples: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (``fraction`` in 0..1) of a non-empty sample."""
    ordered = sorted(samples)
    rank = max(1, round(fraction * len(ordered) + 0.5))
    return ordered[min(rank, len(ordered)) - 1]


def latency_summary(samples_s: Sequence[float]) -> dict[str, float]:
    ms = [s * 1000.0 for s in samples_s]
    return {
        "p50": round(percentile(ms, 0.50), 3),
        "p99": round(percentile(ms, 0.99), 3),
        "max": round(max(ms), 3),
    }


class Bench:
    """The admin side of one session: every measurement against one cluster."""

    def __init__(self, cluster: Cluster, plan: Plan) -> None:
        from wf.client.rpc_client import RpcClient

        self.cluster = cluster
        self.plan = plan
        self.client = RpcClient(cluster.url)
        self.counter = 0
        self.submit_s_per_batch = 0.1
        """Seconds one throughput submission batch took last time (a guess at first)."""

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        async with asyncio.timeout(CALL_TIMEOUT_S):
            return await self.client.call(method, params or {})

    def next_id(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}-{self.counter:07d}"

    async def wait_workers(self) -> None:
        wanted = set(self.cluster.workers)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            listed: list[dict[str, Any]] = []
            cursor = None
            while True:  # scheduler.workers.list is paged
                page = await self.call("scheduler.workers.list", {"limit": 100, "cursor": cursor})
                listed.extend(page["workers"])
                cursor = page["next_cursor"]
                if cursor is None:
                    break
            active = {w["info"]["worker_id"] for w in listed if w["status"] == "active"}
            if wanted <= active:
                return
            for worker_id, proc in self.cluster.workers.items():
                if proc.poll() is not None:
                    log = (self.cluster.tmp / f"{worker_id}.log").read_text()[-2000:]
                    raise RuntimeError(f"worker {worker_id} exited: {log}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"workers not active after {START_TIMEOUT_S} s: {active}")
            await asyncio.sleep(0.1)

    async def wait_drained(self) -> float:
        """Poll queue stats until nothing is queued, running or delayed; the instant seen.

        Slowly while much is left (each poll is a request the server serves
        beside the workers), every :data:`STATS_POLL_S` near the end.
        """
        deadline = time.monotonic() + PHASE_TIMEOUT_S
        while True:
            stats = await self.call("scheduler.queue.stats")
            seen = time.time()
            left = stats["depth"] + stats["running"] + stats["delayed"]
            if left == 0:
                return seen
            if time.monotonic() > deadline:
                raise RuntimeError(f"activities still unfinished after {PHASE_TIMEOUT_S} s")
            near = left <= STATS_NEAR_END
            await asyncio.sleep(STATS_POLL_S if near else STATS_POLL_FAR_S)

    # -------------------------------------------------------- registration

    async def register(self, worker_id: str, activity_type: str) -> None:
        info = {
            "worker_id": worker_id,
            "activity_types": [activity_type],
            "max_concurrency": 1,
            "heartbeat_interval_s": 600.0,
        }
        await self.call("scheduler.workers.register", {"info": info})

    async def bench_register(self) -> dict[str, float]:
        ids: list[str] = []
        samples: list[float] = []
        total = self.plan.warmup_calls + self.plan.register_count
        for n in range(total):
            worker_id = self.next_id("bench-reg")
            ids.append(worker_id)
            started = time.perf_counter()
            await self.register(worker_id, IDLE_TYPE)
            if n >= self.plan.warmup_calls:
                samples.append(time.perf_counter() - started)
        # They leave at once, so none is ever declared lost mid-benchmark.
        async with asyncio.timeout(CALL_TIMEOUT_S):
            await self.client.batch([("scheduler.workers.shutdown", {"worker_id": w}) for w in ids])
        return latency_summary(samples)

    async def bench_renew(self) -> dict[str, float]:
        worker_id = self.next_id("bench-renewer")
        await self.register(worker_id, RENEW_TYPE)
        activity_id = self.next_id("renew")
        await self.call(
            "scheduler.activities.submit",
            {"activities": [{"activity_id": activity_id, "activity_type": RENEW_TYPE}]},
        )
        polled = await self.call(
            "scheduler.workers.poll", {"worker_id": worker_id, "max_items": 1, "wait_s": 10.0}
        )
        (grant,) = polled["leases"]
        fenced = {"activity_id": activity_id, "token": grant["lease"]["token"]}
        await self.call("scheduler.leases.start", fenced)
        samples: list[float] = []
        for n in range(self.plan.warmup_calls + self.plan.renew_count):
            started = time.perf_counter()
            await self.call("scheduler.leases.renew", fenced)
            if n >= self.plan.warmup_calls:
                samples.append(time.perf_counter() - started)
        await self.call("scheduler.leases.complete", fenced)
        await self.call("scheduler.workers.shutdown", {"worker_id": worker_id})
        return latency_summary(samples)

    # ------------------------------------------------------------ dispatch

    async def bench_dispatch(self) -> dict[str, dict[str, float]]:
        """Dispatch latencies from before the submit call and from its answer, and
        the submissions' own round trips."""
        plan = self.plan
        submitted: dict[str, tuple[float, float]] = {}
        cpu_before: dict[str, float | None] = {}
        for n in range(plan.warmup_calls + plan.dispatch_count):
            if n == plan.warmup_calls:
                cpu_before = {**self.cluster.cpu(), "client": time.process_time()}
            activity_id = self.next_id("dispatch")
            spec = {"activity_id": activity_id, "activity_type": ACTIVITY_TYPE, "idempotent": True}
            at = time.time()
            await self.call("scheduler.activities.submit", {"activities": [spec]})
            if n >= plan.warmup_calls:
                submitted[activity_id] = (at, time.time())
            await asyncio.sleep(plan.dispatch_gap_s)
        await self.wait_drained()
        cpu_after = {**self.cluster.cpu(), "client": time.process_time()}
        starts = read_starts(self.cluster.starts_files)
        missing = [a for a in submitted if a not in starts]
        if missing:
            raise RuntimeError(f"{len(missing)} dispatched activities never started")
        return {
            # CPU each process spent per light-load dispatch (its heartbeats and
            # polls included): the Python work behind the median latency.
            "dispatch_cpu_us": {
                role: round((after - before) / len(submitted) * 1e6, 1)
                for role, before in cpu_before.items()
                if before is not None and (after := cpu_after.get(role)) is not None
            },
            "dispatch": latency_summary([starts[a] - at for a, (at, _) in submitted.items()]),
            "dispatch_after_ack": latency_summary(
                [starts[a] - acked for a, (_, acked) in submitted.items()]
            ),
            "submit": latency_summary([acked - at for at, acked in submitted.values()]),
        }

    # ---------------------------------------------------------- throughput

    async def throughput_run(self, count: int) -> dict[str, Any]:
        prefix = self.next_id("tp")
        ids = [f"{prefix}-{n:06d}" for n in range(count)]
        batches = [ids[i : i + SUBMIT_BATCH] for i in range(0, count, SUBMIT_BATCH)]
        # Everything becomes due at one instant, after the submission is over:
        # the time it took last time, doubled, plus a margin (a guess the first time).
        began = time.time()
        not_before = began + 2.0 * self.submit_s_per_batch * len(batches) + 0.3
        for batch in batches:
            specs = [
                {
                    "activity_id": a,
                    "activity_type": ACTIVITY_TYPE,
                    "idempotent": True,
                    "not_before": not_before,
                }
                for a in batch
            ]
            await self.call("scheduler.activities.submit", {"activities": specs})
        submitted = time.time()
        self.submit_s_per_batch = (submitted - began) / len(batches)
        # CPU is counted from just before the activities become due.
        await asyncio.sleep(max(0.0, not_before - time.time() - 0.05))
        cpu_before = self.cluster.cpu()
        finished = await self.wait_drained()
        cpu_after = self.cluster.cpu()
        starts = read_starts(self.cluster.starts_files)
        missing = [a for a in ids if a not in starts]
        if missing:
            raise RuntimeError(f"{len(missing)} throughput activities never started")
        first = min(starts[a] for a in ids)
        elapsed_s = finished - first
        return {
            "per_s": count / elapsed_s,
            "elapsed_s": elapsed_s,
            "submit_per_s": count / (submitted - began),
            "submission_overlapped": submitted > not_before,
            "cpu_us_per_activity": {
                role: round((after - before) / count * 1e6, 1)
                for role, before in cpu_before.items()
                if before is not None and (after := cpu_after.get(role)) is not None
            },
        }


def say_latency(name: str, summary: dict[str, float]) -> None:
    say(
        f"  {name}: p50 {summary['p50']:.2f} ms, p99 {summary['p99']:.2f} ms, "
        f"max {summary['max']:.2f} ms"
    )


async def run_session_async(
    cluster: Cluster, plan: Plan, *, latency: bool = True
) -> dict[str, Any]:
    bench = Bench(cluster, plan)
    try:
        result: dict[str, Any] = {}
        if latency:
            say("  registration round trips (workers not started yet)")
            result["register"] = summary = await bench.bench_register()
            say_latency("register", summary)
            result["renew"] = summary = await bench.bench_renew()
            say_latency("renew", summary)
        cluster.start_workers()
        await bench.wait_workers()
        if latency:
            say(
                f"  dispatch: {plan.dispatch_count} activities one at a time, "
                f"{plan.dispatch_gap_s * 1000:.0f} ms apart"
            )
            result.update(await bench.bench_dispatch())
            say_latency("dispatch (from before the submit call)", result["dispatch"])
            say_latency("dispatch after the submit was answered", result["dispatch_after_ack"])
            say_latency("the submit round trip", result["submit"])
            say(f"  CPU µs per dispatch: {result['dispatch_cpu_us']}")
        runs: list[dict[str, Any]] = []
        for rep in range(plan.throughput_repetitions):
            run = await bench.throughput_run(plan.throughput_count)
            runs.append(run)
            say(
                f"  throughput run {rep + 1}/{plan.throughput_repetitions}: "
                f"{run['per_s']:,.0f}/s ({plan.throughput_count:,} in {run['elapsed_s']:.2f} s; "
                f"submitted at {run['submit_per_s']:,.0f}/s"
                f"{', OVERLAPPED' if run['submission_overlapped'] else ''}); CPU µs per "
                f"activity: {run['cpu_us_per_activity']}"
            )
        result["throughput"] = runs
        return result
    finally:
        await bench.client.close()


def run_session(
    durability: str,
    plan: Plan,
    *,
    concurrency: int = WORKER_CONCURRENCY,
    prefetch: int = WORKER_PREFETCH,
    latency: bool = True,
    profile: bool = False,
    keep_profile: Path | None = None,
) -> dict[str, Any]:
    """One server + workers with ``durability``; every measurement of the plan."""
    tmp = Path(tempfile.mkdtemp(prefix=f"wf-bench-e2e-{durability}-"))
    profile_out = tmp if profile else None
    cluster = Cluster(
        tmp=tmp,
        durability=durability,
        concurrency=concurrency,
        prefetch=prefetch,
        profile_out=profile_out,
    )
    try:
        cluster.start_server()
        say(f"== session durability={durability}: server at {cluster.url}")
        result = asyncio.run(run_session_async(cluster, plan, latency=latency))
        cluster.stop()
        if profile_out is not None:
            for role in ("server", "worker"):
                stats_path = profile_out / f"{role}.prof"
                say(f"== {role} profile (main thread, cProfile), top {PROFILE_TOP} by own time")
                result[f"profile_{role}"] = profile_report(stats_path)
                if keep_profile is not None:
                    shutil.copyfile(stats_path, f"{keep_profile}.{role}")
        return result
    finally:
        cluster.close()
        shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------- profile


def profiled(entry: str, argv: Sequence[str]) -> int:
    """``_profiled-server ARGS`` (``wf-rpc-server ARGS``) or ``_profiled-wf ARGS``
    (``wf ARGS``) under cProfile; the statistics go to ``$WF_BENCH_PROFILE_OUT`` at exit."""
    if entry == "_profiled-server":
        from wf.server.main import main as entry_main
    else:
        from wf.cli.main import main as entry_main

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        code = entry_main(list(argv))
    finally:
        profiler.disable()
        profiler.dump_stats(os.environ[PROFILE_ENV])
    return code


def profile_report(path: Path) -> list[dict[str, Any]]:
    """Print and return the server's top functions by own time."""
    text = io.StringIO()
    stats = pstats.Stats(str(path), stream=text)
    stats.sort_stats(pstats.SortKey.TIME).print_stats(PROFILE_TOP)
    print(text.getvalue(), flush=True)
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, Any]]
    raw = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in raw.values()) or 1.0
    rows = sorted(raw.items(), key=lambda kv: kv[1][2], reverse=True)[:PROFILE_TOP]
    return [
        {
            "function": f"{os.path.basename(path)}:{line}({name})",
            "calls": calls,
            "tottime_s": round(tottime, 4),
            "share": round(tottime / total, 4),
        }
        for (path, line, name), (_cc, calls, tottime, _cum, _callers) in rows
    ]


# ------------------------------------------------------------------ main


def figures(session: dict[str, Any], suffix: str) -> dict[str, Any]:
    """The report keys of one session (``suffix`` "" for fsync, "_process" for process)."""
    runs = session["throughput"]
    out: dict[str, Any] = {
        f"throughput_per_s{suffix}": round(statistics.median(r["per_s"] for r in runs)),
        f"throughput_runs_per_s{suffix}": [round(r["per_s"]) for r in runs],
        f"throughput_cpu_us_per_activity{suffix}": {
            role: statistics.median(r["cpu_us_per_activity"][role] for r in runs)
            for role in runs[0]["cpu_us_per_activity"]
        },
        f"throughput_submission_overlapped{suffix}": any(r["submission_overlapped"] for r in runs),
    }
    if "dispatch_cpu_us" in session:
        out[f"dispatch_cpu_us{suffix}"] = session["dispatch_cpu_us"]
    for name in ("dispatch", "dispatch_after_ack", "submit", "register", "renew"):
        if name in session:
            summary = session[name]
            out[f"{name}_p50_ms{suffix}"] = summary["p50"]
            out[f"{name}_p99_ms{suffix}"] = summary["p99"]
            out[f"{name}_max_ms{suffix}"] = summary["max"]
    return out


def context(
    plan: Plan, mode: str, durabilities: Sequence[str], args: argparse.Namespace
) -> dict[str, Any]:
    return {
        "mode": mode,
        "durability": durabilities[0],
        "durability_modes": list(durabilities),
        "store": "sqlite",
        "transport": "http loopback",
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine_cores": os.cpu_count(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "workers": WORKER_COUNT,
        "worker_concurrency": args.concurrency,
        "worker_prefetch": args.prefetch,
        "dispatch_count": plan.dispatch_count,
        "dispatch_gap_ms": plan.dispatch_gap_s * 1000.0,
        "throughput_count": plan.throughput_count,
        "repetitions": plan.throughput_repetitions,
        "submit_batch_size": SUBMIT_BATCH,
        "register_count": plan.register_count,
        "renew_count": plan.renew_count,
        "targets": dict(TARGETS),
    }


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (CI smoke test)")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="only the fsync throughput phase, with the server under cProfile",
    )
    parser.add_argument(
        "--profile-out",
        type=Path,
        metavar="FILE",
        help="with --profile: keep the cProfile statistics in FILE.server, FILE.worker",
    )
    parser.add_argument(
        "--throughput-only",
        action="store_true",
        help="skip the latency measurements (registration, renewal, dispatch)",
    )
    parser.add_argument(
        "--dispatch-gap-ms",
        type=float,
        help="pause between two dispatch-latency submissions (default 20; 10 with --quick)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=WORKER_CONCURRENCY,
        help=f"--max-concurrency of each worker (default {WORKER_CONCURRENCY})",
    )
    parser.add_argument(
        "--prefetch",
        type=int,
        default=WORKER_PREFETCH,
        help=f"--prefetch of each worker (default {WORKER_PREFETCH})",
    )
    parser.add_argument(
        "--durability",
        choices=("both", "fsync", "process"),
        default="both",
        help="which server durability modes to run (default both)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] in (["_profiled-server"], ["_profiled-wf"]):
        return profiled(args_list[0], args_list[1:])
    args = parse_args(args_list)
    plan = QUICK if args.quick else FULL
    if args.dispatch_gap_ms is not None:
        plan = dataclasses.replace(plan, dispatch_gap_s=args.dispatch_gap_ms / 1000.0)
    mode = ("quick" if args.quick else "full") + ("-profile" if args.profile else "")
    mode += "-throughput-only" if args.throughput_only and not args.profile else ""
    durabilities = ["fsync", "process"] if args.durability == "both" else [args.durability]
    if args.profile:
        durabilities = durabilities[:1]
    say(f"wf end-to-end benchmark ({mode}), Python {platform.python_version()}")
    result: dict[str, Any] = {}
    for durability in durabilities:
        latency = not (args.profile or args.throughput_only)
        session = run_session(
            durability,
            plan,
            concurrency=args.concurrency,
            prefetch=args.prefetch,
            latency=latency,
            profile=args.profile,
            keep_profile=args.profile_out,
        )
        suffix = "" if durability == durabilities[0] else f"_{durability}"
        result.update(figures(session, suffix))
        for role in ("server", "worker"):
            if f"profile_{role}" in session:
                result[f"profile_{role}_top_by_tottime"] = session[f"profile_{role}"]
    result.update(context(plan, mode, durabilities, args))
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
