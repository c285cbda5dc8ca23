"""Side-by-side benchmark: wf against Celery, RQ, Procrastinate and Dramatiq on this machine.

Theory of operation
-------------------
Every system is a :class:`bench.peerlib.base.System` found in a module
``bench/peerlib/*_system.py`` (its ``SYSTEMS`` list, or else every concrete
``System`` subclass defined in it). A module that cannot be imported (its
peer is not installed: ``uv sync --group bench``) is reported as not
measured and the run goes on; so does a system whose setup fails (say, Redis
is down).

Modes (``--mode``): ``stock``, the default and the headline, runs every
system as its own quick start configures it (wf with no flag changed, one
enqueue call per task, every peer at its defaults); ``tuned`` runs the
suite's earlier settings, each listed by :meth:`System.non_defaults` next to
its figures; ``both`` runs the two, stock first. A system runs in the modes
its class lists (:attr:`System.modes`).

Repetitions alternate the systems A B A B: repetition *r* runs every (mode,
system) pair once, in the discovery order rotated by *r*, each from a fresh
namespace (:meth:`System.setup` ... :meth:`System.teardown`), through the
same workloads in the same order. Every workload runs in each worker shape
of ``plan.shapes`` the system supports: 2 worker processes × 4 slots
(``c4``), then 2 × 1 (``c1``); an RQ worker runs one job at a time, so RQ
has ``c1`` only.

* **W1 throughput** -- ``w1_count`` no-op tasks enqueued up front
  (:meth:`System.enqueue_noop`), then the worker processes are started;
  throughput = tasks / (last start − the instant the workers were ready, or
  the first start if earlier). Worker boot time is reported apart.
* **W2 light-load latency** -- with idle workers: a few unmeasured warm-up
  tasks, then ``w2_count`` tasks submitted one at a time on a fixed grid
  ``w2_gap_s`` apart; latency = start inside the worker − the instant just
  before the submit call.
* **W3 delayed precision** -- on the same workers: ``w3_count`` tasks, one
  every ``w3_gap_s``, each due ``w3_ahead_s`` after its submission (so the
  figure is the timer's precision, not a backlog); lateness = start − due.
* **W5 burst** -- on the same workers: ``w5_count`` delayed tasks submitted
  back to back (one call each), all due at the same instant ``w5_ahead_s``
  after the first submission; lateness = start − that instant. More tasks
  than slots, so the figure includes working off the burst.
* **W4 wf alone** -- registration and lease renewal round trips on each wf
  variant's live server after W5 (``bench/e2e.py``'s code), then once per
  run: ready-queue operation scaling (``bench/core.py``'s ``bench_queue``)
  and recovery with ``recovery_queued`` queued activities on SQLite and on
  PostgreSQL (``bench/store.py``'s measurement: process start to the first
  dispatch, in a fresh process).

Before each system runs, the driver waits (at most 30 s) until the machine is
85 % idle over a second (:func:`quiesce`, from ``/proc/stat``): what the
previous system left behind (exiting workers, Redis or PostgreSQL writing
back, autovacuum) would otherwise land on the next one's measurements. Each
run records how long it waited and how idle the machine was.

Task starts are learned from :class:`~bench.peerlib.base.Recorder` lines the
task body writes (all processes share this machine's clock). Every figure is
the median over the repetitions, with min and max.

Output: ``results.json``, ``results.md`` and PNG charts into ``--out``
(default ``docs/benchmarks/``; with ``--quick`` a temporary folder), and, with
the default output, the generated part of ``docs/benchmarks.md``. The last
line printed is one JSON object (:func:`bench.peerlib.report.last_line`).

The peers and matplotlib come from the ``bench`` dependency group, which is
never installed by default: without them (and without ``--quick`` or
``--report-only``) the script re-executes itself once under
``uv run --group bench``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import importlib.util
import inspect
import json
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

REPO: Final = Path(__file__).resolve().parents[1]
# Run as a script, sys.path[0] is bench/ (whose modules would shadow top-level
# names such as ``core``); the suite imports its parts as ``bench.*`` instead.
if sys.path and Path(sys.path[0] or ".").resolve() == REPO / "bench":
    sys.path.pop(0)
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.peerlib import report  # noqa: E402
from bench.peerlib.base import (  # noqa: E402
    MODES,
    STOCK,
    TUNED,
    Recorder,
    System,
    percentile,
    task_ids,
    wait_for,
)

PEERLIB: Final = REPO / "bench" / "peerlib"
DEFAULT_OUT: Final = REPO / "docs" / "benchmarks"
PAGE: Final = REPO / "docs" / "benchmarks.md"
REEXEC_ENV: Final = "WF_BENCH_PEERS_REEXEC"
COMMAND_ENV: Final = "WF_BENCH_PEERS_COMMAND"
BENCH_GROUP_MODULES: Final = ("matplotlib", "celery", "rq", "procrastinate", "dramatiq")
"""Importable when the ``bench`` dependency group is installed."""
PROCESSES: Final = 2
"""Worker processes of every workload."""
MODE_CHOICES: Final = {STOCK: (STOCK,), TUNED: (TUNED,), "both": MODES}


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """Sizes of one run (see the module docstring)."""

    repetitions: int
    shapes: tuple[int, ...]
    """Slots per worker process, one shape each (2 processes × slots), the headline first."""
    w1_count: int
    w1_timeout_s: float
    w2_count: int
    w2_warmup: int
    w2_gap_s: float
    w3_count: int
    w3_gap_s: float
    w3_ahead_s: float
    w5_count: int
    w5_ahead_s: float
    latency_timeout_s: float
    recovery_queued: int
    recovery_leased: int
    quick: bool


FULL: Final = Plan(
    repetitions=3,
    shapes=(4, 1),
    w1_count=10_000,
    w1_timeout_s=600.0,
    w2_count=300,
    w2_warmup=10,
    w2_gap_s=0.02,
    w3_count=100,
    w3_gap_s=0.02,
    w3_ahead_s=2.0,
    w5_count=100,
    w5_ahead_s=2.0,
    latency_timeout_s=60.0,
    recovery_queued=1_000_000,
    recovery_leased=10_000,
    quick=False,
)
QUICK: Final = Plan(
    repetitions=1,
    shapes=(4, 1),
    w1_count=200,
    w1_timeout_s=120.0,
    w2_count=20,
    w2_warmup=3,
    w2_gap_s=0.01,
    w3_count=10,
    w3_gap_s=0.01,
    w3_ahead_s=0.5,
    w5_count=20,
    w5_ahead_s=1.0,
    latency_timeout_s=60.0,
    recovery_queued=10_000,
    recovery_leased=100,
    quick=True,
)


FAILED: Final = object()
"""What a failed step of :func:`run_system` gives back."""


def say(message: str) -> None:
    print(message, flush=True)


# ------------------------------------------------------------- discovery


def discover() -> tuple[list[type[System]], dict[str, str]]:
    """Every system of ``bench/peerlib/*_system.py``; modules that failed to import, and why."""
    found: list[type[System]] = []
    failed: dict[str, str] = {}
    for path in sorted(PEERLIB.glob("*_system.py"), key=lambda p: (p.stem != "wf_system", p)):
        module_name = f"bench.peerlib.{path.stem}"
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:
            failed[path.stem.removesuffix("_system")] = (
                f"`{module_name}` did not import ({type(exc).__name__}: {exc}); "
                "install the peers with `uv sync --group bench`"
            )
            continue
        listed = getattr(module, "SYSTEMS", None)
        if listed is None:
            listed = [
                obj
                for _, obj in inspect.getmembers(module, inspect.isclass)
                if issubclass(obj, System)
                and obj.__module__ == module.__name__
                and not inspect.isabstract(obj)
            ]
        found.extend(listed)
    return found, failed


def describe(cls: type[System], mode: str | None = None) -> str:
    """The report's line for ``cls`` (in ``mode``): its ``setup_line()``, else its
    ``description``, else its docstring's first line."""
    if mode is not None and mode in cls.modes:
        line = cls(mode=mode).setup_line()
        if line:
            return line
    if cls.description:
        return cls.description
    first = (inspect.getdoc(cls) or "").split("\n", 1)[0]
    return first.replace(" (see the module docstring)", "").replace("``", "`").rstrip(".")


def select(
    systems: list[type[System]], wanted: list[str] | None, failed: dict[str, str]
) -> list[type[System]]:
    if wanted is None:
        return systems
    for name in [n for n in failed if n not in wanted]:
        del failed[name]  # not asked for: its import failure is no news
    by_name = {s.name: s for s in systems}
    chosen = []
    for name in wanted:
        if name in by_name:
            chosen.append(by_name[name])
        elif name not in failed:
            failed[name] = f"unknown system (known: {', '.join(by_name) or 'none'})"
    return chosen


# ------------------------------------------------------------- workloads


def wait_started(
    recorder: Recorder, ids: Sequence[str], timeout_s: float, what: str
) -> dict[str, float]:
    """Wait until every id has a start line; the starts."""
    wanted = len(ids)
    wait_for(lambda: recorder.count() >= wanted, timeout_s, what, poll_s=0.02)
    deadline = time.monotonic() + timeout_s
    while True:
        starts = recorder.starts()
        missing = [i for i in ids if i not in starts]
        if not missing:
            return starts
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(missing)} of {wanted} tasks never started ({what})")
        time.sleep(0.05)


def on_grid(count: int, gap_s: float, action: Callable[[int], None]) -> None:
    """``action(i)`` at ``start + i × gap_s`` (a fixed grid: slow calls do not shift it)."""
    began = time.perf_counter()
    for i in range(count):
        delay = began + i * gap_s - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        action(i)


def run_w1(
    system: System, recorder: Recorder, plan: Plan, concurrency: int, tag: str
) -> dict[str, Any]:
    recorder.clear()
    ids = list(task_ids(f"{tag}w1", plan.w1_count))
    began = time.time()
    system.enqueue_noop(ids)
    enqueued = time.time()
    system.start_workers(PROCESSES, concurrency)
    ready = time.time()
    try:
        starts = wait_started(recorder, ids, plan.w1_timeout_s, f"W1 c{concurrency}")
    finally:
        system.stop_workers()
    first = min(starts[i] for i in ids)
    last = max(starts[i] for i in ids)
    origin = min(ready, first)
    return {
        "throughput_per_s": plan.w1_count / (last - origin),
        "elapsed_s": last - origin,
        "enqueue_per_s": plan.w1_count / max(enqueued - began, 1e-9),
        "worker_boot_s": first - enqueued,
        "ready_after_first_start_s": ready - first,
    }


def latency_summary(samples_ms: list[float], keys: Sequence[str]) -> dict[str, float]:
    quantiles = {"p50_ms": 0.50, "p95_ms": 0.95, "p99_ms": 0.99}
    out: dict[str, float] = {}
    for key in keys:
        out[key] = max(samples_ms) if key == "max_ms" else percentile(samples_ms, quantiles[key])
    out["min_ms"] = min(samples_ms)
    return {k: round(v, 4) for k, v in out.items()}


def run_w2(system: System, recorder: Recorder, plan: Plan, tag: str) -> dict[str, Any]:
    recorder.clear()
    warm = list(task_ids(f"{tag}w2warm", plan.w2_warmup))

    def submit_warm(i: int) -> None:
        system.submit_one(warm[i])

    on_grid(len(warm), plan.w2_gap_s, submit_warm)
    wait_started(recorder, warm, plan.latency_timeout_s, "W2 warm-up")
    ids = list(task_ids(f"{tag}w2", plan.w2_count))
    submitted: dict[str, float] = {}

    def submit(i: int) -> None:
        submitted[ids[i]] = system.submit_one(ids[i])

    on_grid(len(ids), plan.w2_gap_s, submit)
    starts = wait_started(recorder, ids, plan.latency_timeout_s, "W2")
    samples = [(starts[i] - submitted[i]) * 1000.0 for i in ids]
    return latency_summary(samples, report.W2_KEYS)


def run_w3(system: System, recorder: Recorder, plan: Plan, tag: str) -> dict[str, Any]:
    recorder.clear()
    ids = list(task_ids(f"{tag}w3", plan.w3_count))
    due: dict[str, float] = {}

    def submit(i: int) -> None:
        due[ids[i]] = due_at = time.time() + plan.w3_ahead_s
        system.submit_delayed(ids[i], due_at)

    on_grid(len(ids), plan.w3_gap_s, submit)
    timeout = plan.w3_ahead_s + plan.latency_timeout_s
    starts = wait_started(recorder, ids, timeout, "W3")
    samples = [(starts[i] - due[i]) * 1000.0 for i in ids]
    result = latency_summary(samples, report.W3_KEYS)
    result["early"] = sum(1 for s in samples if s < 0)
    return result


def run_w5(system: System, recorder: Recorder, plan: Plan, tag: str) -> dict[str, Any]:
    """``w5_count`` delayed tasks, submitted back to back, all due at one instant."""
    recorder.clear()
    ids = list(task_ids(f"{tag}w5", plan.w5_count))
    began = time.time()
    due_at = began + plan.w5_ahead_s
    for task_id in ids:
        system.submit_delayed(task_id, due_at)
    submitted = time.time()
    timeout = plan.w5_ahead_s + plan.latency_timeout_s
    starts = wait_started(recorder, ids, timeout, "W5")
    samples = [(starts[i] - due_at) * 1000.0 for i in ids]
    result: dict[str, Any] = latency_summary(samples, report.W5_KEYS)
    result["early"] = sum(1 for s in samples if s < 0)
    result["submit_ms"] = round((submitted - began) * 1000.0, 2)
    if submitted > due_at:
        result["note"] = "the submissions ended after the due instant"
    return result


QUIET_IDLE: Final = 0.85
"""Share of CPU time idle (over ``QUIET_WINDOW_S``) at which the machine counts as quiet."""
QUIET_WINDOW_S: Final = 1.0
QUIET_WAIT_MAX_S: Final = 30.0
"""Longest wait for quiet before a system runs anyway (the figure says how idle it was)."""


def cpu_idle_fraction(window_s: float) -> float:
    """Share of all CPUs' time idle over ``window_s`` (``/proc/stat``; 1.0 elsewhere)."""

    def sample() -> tuple[int, int] | None:
        try:
            fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        except OSError:
            return None
        values = [int(v) for v in fields]
        return values[3] + values[4], sum(values)  # idle + iowait, total

    first = sample()
    time.sleep(window_s)
    second = sample()
    if first is None or second is None or second[1] == first[1]:
        return 1.0
    return (second[0] - first[0]) / (second[1] - first[1])


def quiesce(quick: bool) -> tuple[float, float]:
    """Wait (bounded) until what the previous system left behind has settled: its
    processes exiting, Redis or PostgreSQL writing back, autovacuum. Every system
    then starts on an equally quiet machine. Returns (seconds waited, idle share)."""
    began = time.monotonic()
    idle = cpu_idle_fraction(QUIET_WINDOW_S)
    limit = 0.0 if quick else QUIET_WAIT_MAX_S
    while idle < QUIET_IDLE and time.monotonic() - began < limit:
        idle = cpu_idle_fraction(QUIET_WINDOW_S)
    return time.monotonic() - began, idle


LATENCY_WORKLOADS: Final = (("w2", run_w2), ("w3", run_w3), ("w5", run_w5))


def run_system(cls: type[System], mode: str, plan: Plan, rep: int, root: Path) -> dict[str, Any]:
    """One repetition of every workload on a fresh ``cls`` in ``mode``; errors are
    recorded, not raised."""
    run: dict[str, Any] = {"rep": rep, "errors": []}
    workdir = root / f"rep{rep}-{mode}-{cls.name}"
    folder = workdir / "recorder"
    folder.mkdir(parents=True, exist_ok=True)
    recorder = Recorder(folder)
    system = cls(mode=mode)
    shapes = [c for c in plan.shapes if c <= cls.max_concurrency_per_process]

    def attempt(what: str, step: Callable[[], Any]) -> Any:
        """``step()``'s value, or :data:`FAILED` (the error is recorded and printed)."""
        began = time.perf_counter()
        try:
            value = step()
        except Exception as exc:
            run["errors"].append(f"{what}: {type(exc).__name__}: {exc}")
            say(f"  {cls.name} {what} FAILED: {type(exc).__name__}: {exc}")
            traceback.print_exc(file=sys.stdout)
            with contextlib.suppress(Exception):
                system.stop_workers()
            return FAILED
        say(f"  {cls.name} {what}: {brief(value)} ({time.perf_counter() - began:.1f} s)")
        return value

    try:
        if attempt("setup", lambda: system.setup(workdir, recorder)) is FAILED:
            return run
        w1: dict[str, Any] = {}
        for c in shapes:
            tag = f"r{rep}c{c}"
            result = attempt(
                f"W1 {PROCESSES}x{c}", lambda c=c, tag=tag: run_w1(system, recorder, plan, c, tag)
            )
            if result is not FAILED:
                w1[report.shape_key(c)] = result
        run["w1"] = w1
        for c in shapes:
            tag = f"r{rep}c{c}"
            started = attempt(
                f"workers {PROCESSES}x{c}", lambda c=c: system.start_workers(PROCESSES, c)
            )
            if started is FAILED:
                continue
            for key, step in LATENCY_WORKLOADS:
                result = attempt(
                    f"{key.upper()} {PROCESSES}x{c}",
                    lambda step=step, tag=tag: step(system, recorder, plan, tag),
                )
                if result is not FAILED:
                    run.setdefault(key, {})[report.shape_key(c)] = result
            attempt("stop workers", system.stop_workers)
        measure_rpc = getattr(system, "measure_rpc", None)
        if measure_rpc is not None:
            result = attempt("W4 register/renew", lambda: measure_rpc(plan.quick))
            if result is not FAILED:
                run["w4_rpc"] = result
    finally:
        attempt("teardown", system.teardown)
    return run


def brief(value: Any) -> str:
    if isinstance(value, dict):
        parts = []
        for k, v in value.items():
            if isinstance(v, float):
                parts.append(f"{k} {v:,.2f}")
            elif isinstance(v, dict):
                parts.append(f"{k} {{{brief(v)}}}")
            else:
                parts.append(f"{k} {v}")
        return ", ".join(parts)
    return "ok"


# -------------------------------------------------------------------- W4


def run_w4_once(plan: Plan, postgres: bool, scratch: Path) -> dict[str, Any]:
    """Queue scaling and recovery (once per run; each has its own repetitions)."""
    from bench import core as core_bench
    from bench import store as store_bench

    w4: dict[str, Any] = {}
    say("== W4 ready-queue operation scaling (bench/core.py)")
    core_plan = core_bench.QUICK if plan.quick else core_bench.FULL
    fifo, deadline = core_bench.bench_queue(core_plan)
    sizes = list(fifo)
    w4["queue_op_us"] = fifo
    w4["queue_op_us_deadline_rank"] = deadline
    w4["queue_ratio_largest_vs_smallest"] = round(fifo[sizes[-1]] / fifo[sizes[0]], 3)
    store_plan = dataclasses.replace(
        store_bench.QUICK if plan.quick else store_bench.FULL,
        sqlite_queued=plan.recovery_queued,
        sqlite_leased=plan.recovery_leased,
        postgres_queued=plan.recovery_queued,
        postgres_leased=plan.recovery_leased,
        recovery_repetitions=max(plan.repetitions, 1 if plan.quick else 3),
    )
    recovery: dict[str, Any] = {"queued": plan.recovery_queued, "leased": plan.recovery_leased}
    say(f"== W4 recovery with {plan.recovery_queued:,} queued, SQLite (bench/store.py)")
    try:
        recovery.update(store_bench.bench_sqlite_recovery(store_plan, scratch))
    except Exception as exc:
        recovery["sqlite_note"] = f"failed: {type(exc).__name__}: {exc}"
        traceback.print_exc(file=sys.stdout)
    if postgres:
        from bench.peerlib.wf_system import postgres_dsn

        dsn = postgres_dsn()
        why = store_bench.postgres_reachable(dsn)
        if why is not None:
            recovery["postgres_note"] = f"PostgreSQL unreachable: {why}"
        else:
            say(f"== W4 recovery with {plan.recovery_queued:,} queued, PostgreSQL (bench/store.py)")
            try:
                recovery.update(store_bench.bench_postgres_recovery(store_plan, dsn))
            except Exception as exc:
                recovery["postgres_note"] = f"failed: {type(exc).__name__}: {exc}"
                traceback.print_exc(file=sys.stdout)
    else:
        recovery["postgres_note"] = "not measured (wf-pg not selected)"
    w4["recovery"] = recovery
    return w4


# ------------------------------------------------------------------ main


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes, wf only, 1 repetition (CI smoke test)"
    )
    parser.add_argument(
        "--mode",
        choices=tuple(MODE_CHOICES),
        default=STOCK,
        help="stock: every system as its quick start configures it (default, the headline); "
        "tuned: the suite's earlier settings, every non-default listed; both: stock, then tuned",
    )
    parser.add_argument(
        "--systems",
        help="comma-separated system names (default: every one found; --quick: wf)",
    )
    parser.add_argument("--repetitions", type=int, help="repetitions (default 3; --quick 1)")
    parser.add_argument(
        "--out",
        type=Path,
        help="output folder (default docs/benchmarks, which also updates docs/benchmarks.md; "
        "--quick: a temporary folder)",
    )
    parser.add_argument("--no-w4", action="store_true", help="skip W4's queue and recovery part")
    parser.add_argument(
        "--recovery-queued", type=int, help="activities queued for W4's recovery (default 10^6)"
    )
    parser.add_argument(
        "--report-only",
        type=Path,
        metavar="RESULTS_JSON",
        help="only write the report (Markdown, charts, docs page) again from a results.json",
    )
    parser.add_argument(
        "--no-reexec",
        action="store_true",
        help="never re-execute under `uv run --group bench` when the peers are missing",
    )
    return parser.parse_args(argv)


def command_line(argv: Sequence[str]) -> str:
    return os.environ.get(COMMAND_ENV) or shlex.join(
        ["uv", "run", "python", "bench/peers.py", *argv]
    )


def maybe_reexec(args: argparse.Namespace, argv: Sequence[str]) -> None:
    """Without the ``bench`` group (a measuring run only): run again under it, via uv."""
    if args.quick or args.report_only or args.no_reexec or os.environ.get(REEXEC_ENV):
        return
    missing = [m for m in BENCH_GROUP_MODULES if importlib.util.find_spec(m) is None]
    uv = shutil.which("uv")
    if not missing or uv is None:
        return
    say(
        f"the bench group is not installed ({', '.join(missing)} missing): "
        "re-running under `uv run --group bench`"
    )
    env = {**os.environ, REEXEC_ENV: "1", COMMAND_ENV: command_line(argv)}
    os.chdir(REPO)
    os.execvpe(uv, [uv, "run", "--group", "bench", "python", "bench/peers.py", *argv], env)


def rewrite_report(source: Path, found: list[type[System]], out: Path, page: Path | None) -> int:
    """``--report-only``: the report of an earlier run, written again (same figures; a
    ``results.json`` from before the modes is read as one tuned run)."""
    results = report.upgrade(json.loads(source.read_text()))
    by_name = {s.name: s for s in found}
    for mode, block in results["modes"].items():
        for name, entry in block["systems"].items():
            if not entry.get("description") and name in by_name:
                entry["description"] = describe(by_name[name], mode)
    results.pop("charts_note", None)
    results["context"]["out"] = str(out)
    written = report.write_report(results, out, page)
    say("wrote " + ", ".join(str(p) for p in written))
    print(json.dumps(report.last_line(results), sort_keys=True), flush=True)
    return 0


def system_entry(
    cls: type[System], mode: str, runs: list[dict[str, Any]], shapes: Sequence[str]
) -> dict[str, Any]:
    """The results' entry of one system in one mode: its settings, summary and raw runs."""
    system = cls(mode=mode)
    return {
        "description": describe(cls, mode),
        "non_defaults": system.non_defaults(),
        "durable": cls.durable,
        "max_concurrency_per_process": cls.max_concurrency_per_process,
        "summary": report.summarize(runs, shapes),
        "errors": [e for r in runs for e in r["errors"]],
        "runs": runs,
    }


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    maybe_reexec(args, argv)
    # SIGTERM unwinds like an exception, so every started system is torn down.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    plan = QUICK if args.quick else FULL
    if args.repetitions is not None:
        plan = dataclasses.replace(plan, repetitions=max(1, args.repetitions))
    if args.recovery_queued is not None:
        plan = dataclasses.replace(
            plan,
            recovery_queued=args.recovery_queued,
            recovery_leased=min(plan.recovery_leased, max(1, args.recovery_queued // 100)),
        )
    wanted = args.systems.split(",") if args.systems else (["wf"] if args.quick else None)
    found, unavailable = discover()
    systems = select(found, wanted, unavailable)
    modes = MODE_CHOICES[args.mode]
    units = [(mode, cls) for mode in modes for cls in systems if mode in cls.modes]
    if wanted is not None:
        for cls in systems:
            if not any(c is cls for _, c in units):
                unavailable[cls.name] = (
                    f"runs only in the {' and '.join(cls.modes)} mode (`--mode {cls.modes[0]}`)"
                )
    if args.out is not None:
        out, page = args.out.resolve(), None
    elif args.quick:
        out, page = Path(tempfile.mkdtemp(prefix="wf-bench-peers-out-")), None
    else:
        out, page = DEFAULT_OUT, PAGE
    if args.report_only is not None:
        return rewrite_report(args.report_only, found, out, page)
    size = "quick" if args.quick else "full"
    say(
        f"side-by-side benchmark ({size}, {' and '.join(modes)}): "
        f"{', '.join(f'{m}/{c.name}' for m, c in units) or 'no system'}"
    )
    for name, why in unavailable.items():
        say(f"  not measured: {name}: {why}")
    shapes = [report.shape_key(c) for c in plan.shapes]
    context: dict[str, Any] = {
        "date": report.utc_now(),
        "mode": size,
        "modes": list(modes),
        "command": command_line(argv),
        "machine": report.machine(),
        "repetitions": plan.repetitions,
        "plan": dataclasses.asdict(plan),
        "processes": PROCESSES,
        "shapes": shapes,
        "out": str(out),
        "order": [],
    }
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {(m, c.name): [] for m, c in units}
    scratch = Path(tempfile.mkdtemp(prefix="wf-bench-peers-"))
    try:
        for rep in range(plan.repetitions):
            shift = rep % len(units) if units else 0
            order = units[shift:] + units[:shift]
            context["order"].append([f"{m}/{c.name}" for m, c in order])
            for mode, cls in order:
                say(f"== repetition {rep + 1}/{plan.repetitions}: {mode}/{cls.name}")
                waited, idle = quiesce(plan.quick)
                say(f"  machine {idle:.0%} idle after {waited:.1f} s of waiting")
                run = run_system(cls, mode, plan, rep, scratch)
                run["quiesce"] = {"waited_s": round(waited, 2), "idle": round(idle, 3)}
                runs[mode, cls.name].append(run)
        wf_names = {c.name for _, c in units}
        w4: dict[str, Any] = {}
        if not args.no_w4 and wf_names & {"wf", "wf-fsync", "wf-pg"}:
            w4 = run_w4_once(plan, "wf-pg" in wf_names, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results: dict[str, Any] = {
        "context": context,
        "modes": {
            mode: {
                "systems": {
                    c.name: system_entry(c, mode, runs[mode, c.name], shapes)
                    for m, c in units
                    if m == mode
                }
            }
            for mode in modes
        },
        "unavailable": unavailable,
        "w4": w4,
    }
    results["ratios"] = report.all_ratios(results)
    results["targets"] = report.targets_json(results)
    written = report.write_report(results, out, page)
    say("wrote " + ", ".join(str(p) for p in written))
    print(json.dumps(report.last_line(results), sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
