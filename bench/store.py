"""Performance benchmark of the durable stores (not a test: nothing here asserts speed).

Theory of operation
-------------------
Five figures, each measured through the same code a scheduler node runs:

* ``sqlite_transitions_per_s`` -- durable transitions per second through
  :class:`~wf.store.sqlite.SQLiteStore` with group commit and ``fsync``
  durability, under a real core workload: submitter tasks keep a backlog
  (``Submit`` batches), each worker has a poll loop (one ``Poll`` for all its
  free slots after any completions) and one asyncio task per slot that takes a
  grant, sends ``StartActivity`` and then ``Complete``. Every command is
  decided by one :class:`~wf.scheduler.dispatcher.SchedulerCore`, its records
  are appended with ``store.append`` and the caller waits for the commit
  before it sees the outcome (persist before acknowledging). Hundreds of such
  appenders are in flight at once, so the writer batches them into shared
  commits. Only ``Transition`` records of acknowledged commands count (four per
  activity: queued, leased, executing, completed). The same run with
  ``durability="process"`` gives ``sqlite_transitions_per_s_process``, and the
  same workload through :meth:`SchedulerNode.execute` (the whole shell: its
  commit task, listeners and fail-stop bookkeeping around the same append)
  gives ``sqlite_transitions_per_s_node``.
* ``postgres_transitions_per_s`` -- the same workload against
  :class:`~wf.store.postgres.PostgresStore` in a fresh schema, dropped at the end.
* ``sqlite_recovery_s`` -- process start to first dispatch with 10^6 queued and
  10^4 leased activities. The store is built first by driving a core (``Submit``
  batches, workers that poll and start half their grants) and appending its
  records through the store's own append path in large batches. Then a fresh
  Python process (so interpreter start-up and imports count) runs
  ``SchedulerNode.start()`` and one ``Poll`` of an idle worker, and reports
  the wall instant of the first ``LeaseGranted``; the figure is that instant
  minus the instant the parent spawned it. ``sqlite_recovery_start_to_lease_s``
  is the in-process part (``start()`` call to the grant) and
  ``sqlite_recovery_phases_s`` splits it (store load, ``build_snapshot``,
  ``recover``, the rest). The child's clock is anchored one second after the
  build's last instant, so the leases are still live (a quick restart):
  recovery keeps them and re-arms their expiry.
* ``postgres_recovery_s`` -- the same with 10^5 queued and 10^3 leased.
* ``sqlite_bytes_per_activity`` -- ``scheduler.db`` plus its WAL after the
  10^6 build, divided by the activities stored (their transitions included).

Medians of a few repetitions are reported where a repetition is cheap (the
machine may be shared). ``--quick`` shrinks every size for the CI smoke test;
``--profile-recovery`` runs the SQLite recovery in-process under cProfile.
``--recovery-only`` measures the SQLite recovery alone; ``--queued`` and
``--leased`` resize its store (e.g. 10^5 to profile quickly), and
``--keep-store DIR`` builds it in ``DIR`` once and reuses it on later runs
(with the same sizes), so before/after comparisons skip the long build and
read the very same file::

    uv run python bench/store.py --recovery-only --keep-store /tmp/wf-rec-1m
    uv run python bench/store.py --profile-recovery --queued 100000 --leased 1000

The last line printed is always one JSON object; everything before it is
progress.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import dataclasses
import datetime
import gc
import io
import json
import os
import platform
import pstats
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, Protocol, TypeVar

from wf import node as node_module
from wf.node import SchedulerNode
from wf.scheduler import commands as cmd
from wf.scheduler.config import SchedulerConfig
from wf.scheduler.dispatcher import SchedulerCore
from wf.scheduler.model import Activity, Lease, Priority, WorkerInfo
from wf.scheduler.outputs import LeaseGranted, Outcome, Record, Transition
from wf.store.protocol import OwnerInfo, Store
from wf.store.sqlite import DB_NAME, Durability, SQLiteStore
from wf.tuning import tune_gc

DSN_ENV: Final = "WF_TEST_POSTGRES_DSN"
DEFAULT_DSN: Final = "postgresql://postgres@127.0.0.1:5432/test"
TENANTS: Final = ("t0", "t1", "t2", "t3")
PRIORITIES: Final = tuple(Priority)
ACTIVITY_TYPE: Final = "bench.job"
POLLER: Final = "poller"
"""The idle worker whose Poll measures the first dispatch after recovery."""
POLLER_CONCURRENCY: Final = 64
BUILD_SUBMIT_BATCH: Final = 10_000
"""Activities per ``Submit`` while building a store (the core's batch limit)."""
BUILD_APPEND_RECORDS: Final = 20_000
"""Records per ``append`` while building a store (a few group commits each)."""
BUILD_AT_S: Final = 1_700_000_000.0
"""Virtual instant of every command of the build (the recovery clock starts 1 s later)."""
RECOVER_AFTER_S: Final = 1.0
CHILD_TIMEOUT_S: Final = 600
PROFILE_TOP: Final = 25

T = TypeVar("T")
Via = Literal["store", "node"]
"""Through the bare store (core + append + await) or a whole ``SchedulerNode``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """Sizes and repetitions of one benchmark run."""

    workers: int
    """Workers of the throughput workload."""
    concurrency: int
    """Slots (concurrent activities, so concurrent appenders) per worker."""
    submitters: int
    """Submitting tasks of the throughput workload."""
    submit_batch: int
    """Activities per ``Submit`` in the throughput workload."""
    warmup_s: float
    """Throughput run time discarded before the window."""
    window_s: float
    """Timed window of one throughput run."""
    throughput_repetitions: int
    sqlite_queued: int
    """Activities left queued in the SQLite recovery store."""
    sqlite_leased: int
    """Activities leased (half of them started) in the SQLite recovery store."""
    postgres_queued: int
    postgres_leased: int
    recovery_repetitions: int
    lease_workers: int
    """Workers holding the leases of a recovery store (each holds leased/lease_workers)."""


FULL: Final = Plan(
    workers=64,
    concurrency=8,
    submitters=4,
    submit_batch=200,
    warmup_s=1.0,
    window_s=5.0,
    throughput_repetitions=3,
    sqlite_queued=1_000_000,
    sqlite_leased=10_000,
    postgres_queued=100_000,
    postgres_leased=1_000,
    recovery_repetitions=5,
    lease_workers=100,
)
QUICK: Final = Plan(
    workers=8,
    concurrency=4,
    submitters=2,
    submit_batch=50,
    warmup_s=0.2,
    window_s=1.0,
    throughput_repetitions=1,
    sqlite_queued=10_000,
    sqlite_leased=100,
    postgres_queued=2_000,
    postgres_leased=20,
    recovery_repetitions=1,
    lease_workers=10,
)


def say(message: str) -> None:
    """One progress line (flushed, so a slow step shows where it is)."""
    print(message, flush=True)


def bench_config() -> SchedulerConfig:
    """The configuration of every core here (the defaults: priority policy, 30 s leases)."""
    return SchedulerConfig()


def activity_spec(prefix: str, n: int) -> Activity:
    """The n-th submitted activity: tenants and priorities in turn (16 lanes)."""
    return Activity(
        activity_id=f"{prefix}{n:09d}",
        activity_type=ACTIVITY_TYPE,
        tenant=TENANTS[n % len(TENANTS)],
        priority=PRIORITIES[(n // len(TENANTS)) % len(PRIORITIES)],
    )


def owner() -> OwnerInfo:
    return OwnerInfo(host=platform.node(), pid=os.getpid(), since="bench")


class AnchoredClock:
    """A clock that starts at a given instant and advances with monotonic time."""

    def __init__(self, start_s: float) -> None:
        self._start_s = start_s
        self._mono_s = time.monotonic()

    def now(self) -> float:
        return self._start_s + (time.monotonic() - self._mono_s)

    def wall(self) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(self.now(), tz=datetime.UTC)


def at(factory: Callable[..., cmd.Command], **fields: Any) -> Callable[[float], cmd.Command]:
    """What ``SchedulerNode.execute`` takes: the command built for the instant it runs."""

    def make(now: float) -> cmd.Command:
        return factory(now=now, **fields)

    return make


def transitions_in(records: Sequence[Record]) -> int:
    return sum(1 for r in records if type(r) is Transition)


# ------------------------------------------------------------ postgres helpers


def postgres_reachable(dsn: str) -> str | None:
    """``None`` if a connection works, else why not."""
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - psycopg is a dependency
        return f"psycopg is not installed: {exc}"
    try:
        psycopg.connect(dsn, connect_timeout=3).close()
    except psycopg.Error as exc:
        return f"{type(exc).__name__}: {exc}".strip()
    return None


def fresh_schema() -> str:
    return f"wf_bench_{secrets.token_hex(6)}"


def drop_schema(dsn: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def postgres_schema_bytes(dsn: str, schema: str) -> int:
    """Heap, index and TOAST bytes of every table in ``schema``."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind = 'r'",
            (schema,),
        ).fetchone()
    return int(row[0]) if row else 0


def make_postgres(dsn: str, schema: str) -> Store:
    from wf.store.postgres import PostgresStore

    return PostgresStore(dsn, schema=schema)


# ------------------------------------------------------------------ throughput


class Shell(Protocol):
    """What the workload drives: a core behind an ``execute`` that returns once durable."""

    core: SchedulerCore

    async def execute(self, make: Callable[[float], cmd.Command]) -> Outcome: ...


class StoreShell:
    """The least a shell does: the core decides, the store appends, the caller
    waits for the commit and only then sees the outcome (no node around it)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.core = SchedulerCore(bench_config())
        self.clock = AnchoredClock(time.time())

    async def execute(self, make: Callable[[float], cmd.Command]) -> Outcome:
        outcome = self.core.handle(make(self.clock.now()))
        if outcome.records:
            await self.store.append(outcome.records)
        return outcome


class Workload:
    """Submitters, worker poll loops and worker slots driving one shell."""

    def __init__(self, shell: Shell, plan: Plan) -> None:
        self.shell = shell
        self.plan = plan
        self.transitions = 0
        """Transition records of acknowledged (committed) commands."""
        self.executes = 0
        self.submitted = 0
        self.inboxes: dict[str, asyncio.Queue[Lease]] = {}
        self.wakes: dict[str, asyncio.Event] = {}
        """Per worker: set when a slot freed up (its poll loop polls again)."""
        self.running = True

    async def execute(self, make: Callable[[float], cmd.Command]) -> Outcome:
        outcome = await self.shell.execute(make)
        self.transitions += transitions_in(outcome.records)
        self.executes += 1
        for decision in outcome.decisions:
            if type(decision) is LeaseGranted:
                self.inboxes[decision.lease.worker_id].put_nowait(decision.lease)
        return outcome

    async def submitter(self, index: int) -> None:
        plan = self.plan
        backlog_min = 2 * plan.workers * plan.concurrency
        counter = 0
        prefix = f"s{index}-"
        while self.running:
            if self.shell.core.queue.depth >= backlog_min:
                await asyncio.sleep(0.001)
                continue
            specs = tuple(activity_spec(prefix, counter + i) for i in range(plan.submit_batch))
            counter += plan.submit_batch
            await self.execute(at(cmd.Submit, activities=specs))
            self.submitted += len(specs)

    async def slot(self, worker_id: str) -> None:
        """One slot of a worker: start and complete each lease it receives."""
        inbox = self.inboxes[worker_id]
        wake = self.wakes[worker_id]
        while self.running:
            lease = await inbox.get()
            aid, token = lease.activity_id, lease.token
            await self.execute(at(cmd.StartActivity, activity_id=aid, token=token))
            await self.execute(at(cmd.Complete, activity_id=aid, token=token))
            wake.set()

    async def poller(self, worker_id: str) -> None:
        """A worker's poll loop: after completions, one Poll asks for every free slot.

        A Poll sets the worker's demand to its free slots (it does not add), so
        one Poll after any number of completions restores the full demand.
        """
        wake = self.wakes[worker_id]
        slots = self.plan.concurrency
        while self.running:
            await wake.wait()
            wake.clear()
            await self.execute(at(cmd.Poll, worker_id=worker_id, max_items=slots))

    async def run(self) -> tuple[int, float, int]:
        """Warm up, then time the window: (transitions, seconds, executes)."""
        plan = self.plan
        worker_ids = [f"w{w:03d}" for w in range(plan.workers)]
        for wid in worker_ids:
            self.inboxes[wid] = asyncio.Queue()
            self.wakes[wid] = asyncio.Event()
            self.wakes[wid].set()  # the first Poll
            info = WorkerInfo(worker_id=wid, max_concurrency=plan.concurrency)
            await self.execute(at(cmd.RegisterWorker, info=info))
        tasks = [
            asyncio.create_task(self.submitter(i), name=f"submitter-{i}")
            for i in range(plan.submitters)
        ]
        for wid in worker_ids:
            tasks.append(asyncio.create_task(self.poller(wid)))
            tasks.extend(asyncio.create_task(self.slot(wid)) for _ in range(plan.concurrency))
        try:
            await asyncio.sleep(plan.warmup_s)
            first, first_executes = self.transitions, self.executes
            started = time.perf_counter()
            await asyncio.sleep(plan.window_s)
            elapsed_s = time.perf_counter() - started
            count, executes = self.transitions - first, self.executes - first_executes
        finally:
            self.running = False
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return count, elapsed_s, executes


@dataclass(frozen=True, slots=True)
class ThroughputRun:
    per_s: float
    appends_per_commit: float | None


async def throughput_run(store: Store, plan: Plan, via: Via) -> ThroughputRun:
    """One run of the workload on a fresh store, through the bare store or a node."""
    node: SchedulerNode | None = None
    shell: Shell
    if via == "node":
        shell = node = SchedulerNode(store, bench_config(), owner=owner())
        await node.start()
    else:
        await store.open()
        await store.acquire_ownership(owner())
        shell = StoreShell(store)
    try:
        commits_before = getattr(store, "commits", None)
        appends_before = getattr(store, "appends_committed", None)
        count, elapsed_s, _executes = await Workload(shell, plan).run()
        batch: float | None = None
        commits_after = getattr(store, "commits", None)
        appends_after = getattr(store, "appends_committed", None)
        if None not in (commits_before, commits_after, appends_before, appends_after):
            commits = commits_after - commits_before  # type: ignore[operator]
            appends = appends_after - appends_before  # type: ignore[operator]
            batch = appends / commits if commits else None
    finally:
        if node is not None:
            await node.stop()
        else:
            await store.close()
    return ThroughputRun(per_s=count / elapsed_s, appends_per_commit=batch)


def bench_sqlite_throughput(
    plan: Plan, durability: Durability, scratch: Path, via: Via = "store"
) -> tuple[list[float], list[float]]:
    """Transitions per second and appends per commit of each repetition."""
    rates: list[float] = []
    batches: list[float] = []
    for i in range(plan.throughput_repetitions):
        root = scratch / f"throughput-{durability}-{via}-{i}"
        gc.collect()
        run = asyncio.run(throughput_run(SQLiteStore(root, durability=durability), plan, via))
        shutil.rmtree(root, ignore_errors=True)
        rates.append(run.per_s)
        if run.appends_per_commit is not None:
            batches.append(run.appends_per_commit)
        say(
            f"sqlite ({durability}, via {via}) run {i + 1}/{plan.throughput_repetitions}: "
            f"{run.per_s:,.0f} transitions/s, {run.appends_per_commit or 0:.1f} appends per commit"
        )
    return rates, batches


def bench_postgres_throughput(plan: Plan, dsn: str) -> list[float]:
    rates: list[float] = []
    for i in range(plan.throughput_repetitions):
        schema = fresh_schema()
        gc.collect()
        try:
            run = asyncio.run(throughput_run(make_postgres(dsn, schema), plan, "store"))
        finally:
            drop_schema(dsn, schema)
        rates.append(run.per_s)
        say(f"postgres run {i + 1}/{plan.throughput_repetitions}: {run.per_s:,.0f} transitions/s")
    return rates


# --------------------------------------------------------------- build a store


async def build_store(store: Store, queued: int, leased: int, lease_workers: int) -> None:
    """Fill ``store`` through a core: ``queued`` left queued, ``leased`` leased (half started).

    Every record goes through ``store.append`` in batches of about
    ``BUILD_APPEND_RECORDS``; the next batch is computed while the previous
    one commits.
    """
    core = SchedulerCore(bench_config())
    now = BUILD_AT_S
    pending: list[Record] = []
    inflight: asyncio.Task[None] | None = None

    async def flush(force: bool = False) -> None:
        nonlocal pending, inflight
        if len(pending) < BUILD_APPEND_RECORDS and not force:
            return
        if inflight is not None:
            await inflight
            inflight = None
        if pending:
            inflight = asyncio.ensure_future(store.append(pending))
            pending = []
            await asyncio.sleep(0)  # let it queue its steps before the next batch is built

    def handle(command: cmd.Command) -> Outcome:
        outcome = core.handle(command)
        pending.extend(outcome.records)
        return outcome

    await store.open()
    try:
        await store.acquire_ownership(owner())
        per_worker = max(1, leased // lease_workers)
        for w in range(lease_workers):
            info = WorkerInfo(worker_id=f"lw{w:03d}", max_concurrency=per_worker)
            handle(cmd.RegisterWorker(now=now, info=info))
        handle(
            cmd.RegisterWorker(
                now=now, info=WorkerInfo(worker_id=POLLER, max_concurrency=POLLER_CONCURRENCY)
            )
        )
        total = queued + per_worker * lease_workers
        reported = 0
        for first in range(0, total, BUILD_SUBMIT_BATCH):
            size = min(BUILD_SUBMIT_BATCH, total - first)
            specs = tuple(activity_spec("a", n) for n in range(first, first + size))
            handle(cmd.Submit(now=now, activities=specs))
            await flush()
            if first + size - reported >= 200_000:
                reported = first + size
                say(f"  build: {reported:>9,} submitted")
        grants: list[Lease] = []
        for w in range(lease_workers):
            outcome = handle(cmd.Poll(now=now, worker_id=f"lw{w:03d}", max_items=per_worker))
            grants.extend(d.lease for d in outcome.decisions if type(d) is LeaseGranted)
            await flush()
        for lease in grants[::2]:
            handle(cmd.StartActivity(now=now, activity_id=lease.activity_id, token=lease.token))
        await flush(force=True)
        if inflight is not None:
            await inflight
        assert core.queue.depth == queued, (core.queue.depth, queued)
        assert len(grants) == per_worker * lease_workers
    finally:
        await store.close()


def sqlite_files_bytes(root: Path) -> dict[str, int]:
    """Sizes of ``scheduler.db`` and its ``-wal`` and ``-shm`` files."""
    sizes: dict[str, int] = {}
    for suffix in ("", "-wal", "-shm"):
        path = root / f"{DB_NAME}{suffix}"
        sizes[DB_NAME + suffix] = path.stat().st_size if path.exists() else 0
    return sizes


# -------------------------------------------------------------------- recovery


class Phases:
    """Wall and CPU seconds spent in named phases (CPU: every thread of the process)."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    def add(self, name: str, wall_s: float, cpu_s: float) -> None:
        self.wall[name] = self.wall.get(name, 0.0) + wall_s
        self.cpu[name] = self.cpu.get(name, 0.0) + cpu_s

    def timed(self, name: str, fn: Callable[..., T]) -> Callable[..., T]:
        def wrapper(*args: Any, **kwargs: Any) -> T:
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(name, time.perf_counter() - wall, time.process_time() - cpu)

        return wrapper

    def timed_async(
        self, name: str, fn: Callable[..., Awaitable[T]]
    ) -> Callable[..., Awaitable[T]]:
        async def wrapper(*args: Any, **kwargs: Any) -> T:
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return await fn(*args, **kwargs)
            finally:
                self.add(name, time.perf_counter() - wall, time.process_time() - cpu)

        return wrapper


async def recover_and_poll(
    store: Store, start_s: float, *, server_gc: bool = False
) -> dict[str, Any]:
    """``SchedulerNode.start()`` then one Poll of the idle worker; timings of both.

    ``server_gc``: tune the collector around the start as ``wf-rpc-server`` does
    (``wf.tuning.tune_gc`` before it, which opts recovery into freezing what it
    builds, and again after it), its cost counted in the start."""
    phases = Phases()
    # Timing wrappers around the phases of SchedulerNode.start() (a bench-only patch).
    setattr(store, "load", phases.timed_async("load", store.load))  # noqa: B010
    setattr(store, "open", phases.timed_async("open", store.open))  # noqa: B010
    patched = ("build_snapshot", "recover")
    originals = {name: getattr(node_module, name) for name in patched}
    for name in patched:
        setattr(node_module, name, phases.timed(name, originals[name]))
    try:
        node = SchedulerNode(store, bench_config(), clock=AnchoredClock(start_s), owner=owner())
        started, started_cpu = time.perf_counter(), time.process_time()
        if server_gc:
            tune_gc()
        report = await node.start(background=False)
        if server_gc:
            tune_gc()
        started_s = time.perf_counter() - started
        outcome = await node.execute(at(cmd.Poll, worker_id=POLLER, max_items=1))
        granted = any(type(d) is LeaseGranted for d in outcome.decisions)
        first_lease_wall = time.time()  # compared with the parent's spawn instant
        to_lease_s = time.perf_counter() - started
        to_lease_cpu_s = time.process_time() - started_cpu
        await node.stop()
    finally:
        for name, original in originals.items():
            setattr(node_module, name, original)
    phases.add(
        "other", to_lease_s - sum(phases.wall.values()), to_lease_cpu_s - sum(phases.cpu.values())
    )
    return {
        "granted": granted,
        "first_lease_wall": first_lease_wall,
        "process_cpu_s": time.process_time(),
        "start_s": started_s,
        "start_to_lease_s": to_lease_s,
        "start_to_lease_cpu_s": to_lease_cpu_s,
        "phases_s": phases.wall,
        "phases_cpu_s": phases.cpu,
        "activities": report.activities,
        "leases": report.leases,
        "expired_leases": report.expired_leases,
    }


def child_main(args: argparse.Namespace) -> int:
    """The fresh process of one recovery measurement: prints one JSON line."""
    if args.backend == "sqlite":
        store: Store = SQLiteStore(Path(args.root), durability="fsync")
    else:
        store = make_postgres(args.dsn, args.schema)
    result = asyncio.run(recover_and_poll(store, args.now, server_gc=True))
    print(json.dumps(result), flush=True)
    return 0


def spawn_recovery(extra: list[str]) -> dict[str, Any]:
    """One recovery in a fresh process; adds ``process_to_lease_s`` (spawn to grant)."""
    command = [sys.executable, str(Path(__file__).resolve()), "--child-recover", *extra]
    command += ["--now", repr(BUILD_AT_S + RECOVER_AFTER_S)]
    spawned = time.time()  # wall time, compared with the child's
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"recovery child failed ({done.returncode}):\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if not result["granted"]:
        raise RuntimeError("the first Poll after recovery got no lease")
    result["process_to_lease_s"] = result["first_lease_wall"] - spawned
    return result


def summarize_recovery(prefix: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    def median(key: str) -> float:
        return round(float(statistics.median(r[key] for r in runs)), 3)

    def phase_medians(key: str) -> dict[str, float]:
        return {
            name: round(float(statistics.median(r[key][name] for r in runs)), 3)
            for name in runs[0][key]
        }

    return {
        f"{prefix}_recovery_s": median("process_to_lease_s"),
        f"{prefix}_recovery_runs_s": [round(r["process_to_lease_s"], 3) for r in runs],
        f"{prefix}_recovery_start_to_lease_s": median("start_to_lease_s"),
        f"{prefix}_recovery_start_to_lease_cpu_s": median("start_to_lease_cpu_s"),
        f"{prefix}_recovery_phases_s": phase_medians("phases_s"),
        f"{prefix}_recovery_phases_cpu_s": phase_medians("phases_cpu_s"),
    }


def say_recovery(label: str, i: int, total: int, r: dict[str, Any]) -> None:
    phases = ", ".join(f"{k} {v:.2f}" for k, v in r["phases_s"].items())
    say(
        f"{label} recovery {i + 1}/{total}: process start -> first lease "
        f"{r['process_to_lease_s']:.2f} s; start() -> lease {r['start_to_lease_s']:.2f} s "
        f"(CPU {r['start_to_lease_cpu_s']:.2f} s; {phases}); "
        f"{r['activities']:,} activities, {r['leases']:,} leases"
    )


def recovery_store(plan: Plan, root: Path) -> float:
    """Build the SQLite recovery store in ``root``; an already built one (``--keep-store``)
    is reused as it is. Returns the build time (0 when reused)."""
    if (root / DB_NAME).exists():
        say(f"reusing the SQLite store in {root} (built earlier with --keep-store)")
        return 0.0
    say(f"building a SQLite store: {plan.sqlite_queued:,} queued + {plan.sqlite_leased:,} leased")
    started = time.perf_counter()
    store = SQLiteStore(root, durability="process")  # the build is not what is measured
    asyncio.run(build_store(store, plan.sqlite_queued, plan.sqlite_leased, plan.lease_workers))
    return time.perf_counter() - started


def bench_sqlite_recovery(plan: Plan, scratch: Path, keep: Path | None = None) -> dict[str, Any]:
    root = keep if keep is not None else scratch / "recovery"
    total = plan.sqlite_queued + plan.sqlite_leased
    build_s = recovery_store(plan, root)
    sizes = sqlite_files_bytes(root)
    per_activity = (sizes[DB_NAME] + sizes[DB_NAME + "-wal"]) / total
    say(f"  built in {build_s:.1f} s; files {sizes}; {per_activity:,.0f} bytes per activity")
    runs: list[dict[str, Any]] = []
    for i in range(plan.recovery_repetitions):
        runs.append(spawn_recovery(["--backend", "sqlite", "--root", str(root)]))
        say_recovery("sqlite", i, plan.recovery_repetitions, runs[-1])
    result = summarize_recovery("sqlite", runs)
    result.update(
        sqlite_bytes_per_activity=round(per_activity, 1),
        sqlite_build_s=round(build_s, 1),
        sqlite_files_bytes=sizes,
    )
    if keep is None:
        shutil.rmtree(root, ignore_errors=True)
    return result


def bench_postgres_recovery(plan: Plan, dsn: str) -> dict[str, Any]:
    schema = fresh_schema()
    total = plan.postgres_queued + plan.postgres_leased
    say(
        f"building a PostgreSQL store: {plan.postgres_queued:,} queued + "
        f"{plan.postgres_leased:,} leased (schema {schema})"
    )
    try:
        started = time.perf_counter()
        asyncio.run(
            build_store(
                make_postgres(dsn, schema),
                plan.postgres_queued,
                plan.postgres_leased,
                max(1, plan.lease_workers // 10),
            )
        )
        build_s = time.perf_counter() - started
        per_activity = postgres_schema_bytes(dsn, schema) / total
        say(f"  built in {build_s:.1f} s; {per_activity:,.0f} bytes per activity (tables+indexes)")
        runs: list[dict[str, Any]] = []
        for i in range(plan.recovery_repetitions):
            extra = ["--backend", "postgres", "--dsn", dsn, "--schema", schema]
            runs.append(spawn_recovery(extra))
            say_recovery("postgres", i, plan.recovery_repetitions, runs[-1])
    finally:
        drop_schema(dsn, schema)
    result = summarize_recovery("postgres", runs)
    result.update(
        postgres_bytes_per_activity=round(per_activity, 1), postgres_build_s=round(build_s, 1)
    )
    return result


def profile_recovery(plan: Plan, scratch: Path, keep: Path | None = None) -> list[dict[str, Any]]:
    """Build the SQLite store, then run its recovery in-process under cProfile."""
    root = keep if keep is not None else scratch / "profile"
    recovery_store(plan, root)
    profiler = cProfile.Profile()
    gc.collect()
    profiler.enable()
    result = asyncio.run(
        recover_and_poll(SQLiteStore(root, durability="fsync"), BUILD_AT_S + RECOVER_AFTER_S)
    )
    profiler.disable()
    say(f"profiled recovery: start() -> lease {result['start_to_lease_s']:.2f} s (cProfile slows)")
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats(pstats.SortKey.TIME).print_stats(PROFILE_TOP)
    print(text.getvalue(), flush=True)
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, Any]]
    raw = stats.stats  # type: ignore[attr-defined]
    rows = sorted(raw.items(), key=lambda kv: kv[1][2], reverse=True)[:PROFILE_TOP]
    if keep is None:
        shutil.rmtree(root, ignore_errors=True)
    return [
        {
            "function": f"{os.path.basename(path)}:{line}({name})",
            "calls": calls,
            "tottime_s": round(tottime, 4),
            "cumtime_s": round(cumtime, 4),
        }
        for (path, line, name), (_cc, calls, tottime, cumtime, _callers) in rows
    ]


# ------------------------------------------------------------------------ main


def context(plan: Plan, mode: str, dsn: str | None) -> dict[str, Any]:
    return {
        "mode": mode,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine_cores": os.cpu_count(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "sqlite_version": __import__("sqlite3").sqlite_version,
        "durability": "fsync",
        "throughput_repetitions": plan.throughput_repetitions,
        "recovery_repetitions": plan.recovery_repetitions,
        "throughput_workers": plan.workers,
        "throughput_worker_concurrency": plan.concurrency,
        "throughput_submitters": plan.submitters,
        "throughput_submit_batch": plan.submit_batch,
        "throughput_window_s": plan.window_s,
        "sqlite_queued": plan.sqlite_queued,
        "sqlite_leased": plan.sqlite_leased,
        "postgres_queued": plan.postgres_queued,
        "postgres_leased": plan.postgres_leased,
        "postgres": dsn is not None,
    }


def run_benchmarks(plan: Plan, dsn: str | None, scratch: Path) -> dict[str, Any]:
    result: dict[str, Any] = {}
    say("== SQLite durable transitions (group commit, durability=fsync, core + store)")
    rates, batches = bench_sqlite_throughput(plan, "fsync", scratch)
    result["sqlite_transitions_per_s"] = round(statistics.median(rates))
    result["sqlite_transitions_runs_per_s"] = [round(r) for r in rates]
    if batches:
        result["sqlite_appends_per_commit"] = round(statistics.median(batches), 1)
    say(f"sqlite median {result['sqlite_transitions_per_s']:,} transitions/s (target >= 20,000)")
    say("== SQLite durable transitions (durability=process, core + store)")
    rates, _ = bench_sqlite_throughput(plan, "process", scratch)
    result["sqlite_transitions_per_s_process"] = round(statistics.median(rates))
    result["sqlite_transitions_runs_per_s_process"] = [round(r) for r in rates]
    say("== SQLite durable transitions (durability=fsync, through SchedulerNode.execute)")
    rates, _ = bench_sqlite_throughput(plan, "fsync", scratch, via="node")
    result["sqlite_transitions_per_s_node"] = round(statistics.median(rates))
    result["sqlite_transitions_runs_per_s_node"] = [round(r) for r in rates]
    if dsn is not None:
        say("== PostgreSQL durable transitions (group commit)")
        rates = bench_postgres_throughput(plan, dsn)
        result["postgres_transitions_per_s"] = round(statistics.median(rates))
        result["postgres_transitions_runs_per_s"] = [round(r) for r in rates]
    else:
        result["postgres_transitions_per_s"] = None
    say("== SQLite recovery: process start -> first dispatch")
    result.update(bench_sqlite_recovery(plan, scratch))
    say(f"sqlite recovery median {result['sqlite_recovery_s']:.2f} s (target < 5 s at 10^6)")
    if dsn is not None:
        say("== PostgreSQL recovery: process start -> first dispatch")
        result.update(bench_postgres_recovery(plan, dsn))
    else:
        result["postgres_recovery_s"] = None
    return result


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (CI smoke test)")
    parser.add_argument(
        "--profile-recovery",
        action="store_true",
        help="only profile the SQLite recovery in-process (cProfile)",
    )
    parser.add_argument(
        "--postgres-dsn",
        default=os.environ.get(DSN_ENV) or DEFAULT_DSN,
        help=f"PostgreSQL DSN (default: ${DSN_ENV} or {DEFAULT_DSN})",
    )
    parser.add_argument("--no-postgres", action="store_true", help="skip the PostgreSQL figures")
    parser.add_argument("--scratch", type=Path, default=None, help="folder for SQLite stores")
    parser.add_argument(
        "--recovery-only",
        action="store_true",
        help="only the SQLite recovery figure (no throughput, no PostgreSQL)",
    )
    parser.add_argument(
        "--queued", type=int, default=None, help="queued activities of the SQLite recovery store"
    )
    parser.add_argument(
        "--leased", type=int, default=None, help="leased activities of the SQLite recovery store"
    )
    parser.add_argument(
        "--repetitions", type=int, default=None, help="SQLite recovery runs (median reported)"
    )
    parser.add_argument(
        "--keep-store",
        type=Path,
        default=None,
        help="build the SQLite recovery store here and keep it; reuse it if already built",
    )
    # Internal: one recovery measurement in a fresh process.
    parser.add_argument("--child-recover", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--dsn", help=argparse.SUPPRESS)
    parser.add_argument("--schema", help=argparse.SUPPRESS)
    parser.add_argument("--now", type=float, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.child_recover:
        return child_main(args)
    plan = QUICK if args.quick else FULL
    resized = {
        name: value
        for name, value in (
            ("sqlite_queued", args.queued),
            ("sqlite_leased", args.leased),
            ("recovery_repetitions", args.repetitions),
        )
        if value is not None
    }
    if resized:
        plan = dataclasses.replace(plan, **resized)
        plan = dataclasses.replace(
            plan, lease_workers=max(1, min(plan.lease_workers, plan.sqlite_leased))
        )
    mode = ("quick" if args.quick else "full") + ("-profile" if args.profile_recovery else "")
    if args.recovery_only:
        mode += "-recovery"
    say(f"wf store benchmark ({mode}), Python {platform.python_version()}")
    dsn: str | None = None
    postgres_note: str | None = (
        "not measured with --profile-recovery"
        if args.profile_recovery
        else "disabled with --no-postgres"
    )
    if args.recovery_only:
        postgres_note = "not measured with --recovery-only"
    if not args.no_postgres and not args.profile_recovery and not args.recovery_only:
        why = postgres_reachable(args.postgres_dsn)
        if why is None:
            dsn, postgres_note = args.postgres_dsn, None
        else:
            postgres_note = f"PostgreSQL unreachable: {why}"
            say(f"{postgres_note}; PostgreSQL figures are null")
    scratch = Path(tempfile.mkdtemp(prefix="wf-bench-store-", dir=args.scratch))
    try:
        if args.profile_recovery:
            result: dict[str, Any] = {
                "profile_top_by_tottime": profile_recovery(plan, scratch, args.keep_store)
            }
        elif args.recovery_only:
            result = bench_sqlite_recovery(plan, scratch, args.keep_store)
            say(f"sqlite recovery median {result['sqlite_recovery_s']:.2f} s")
        else:
            result = run_benchmarks(plan, dsn, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result.update(context(plan, mode, dsn))
    if postgres_note is not None:
        result["postgres_note"] = postgres_note
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
