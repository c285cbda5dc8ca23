"""W1 as shipped, wf alone, with each process's CPU per task (not a test: nothing asserts).

Theory of operation
-------------------
The stock W1 of ``bench/peers.py``, for before/after comparisons of wf itself:
the same :class:`~bench.peerlib.wf_system.WfSystem` in ``stock`` mode (a
``wf-rpc-server`` with no flag changed, ``wf worker --max-concurrency C``
processes with their defaults, a plain ``@activity`` def, one
``App.submit_activities`` call per task). ``--tasks`` tasks are enqueued
first, then the worker processes start; throughput = tasks / (last start -
the instant the workers were ready, or the first start if earlier), as in
``peers.py``. Beside it, the CPU time (user + system, from ``/proc``) the
server and each worker used per task: on a shared machine this moves far
less than the throughput, so judge a change by it, and alternate old and new
trees (A B B A) on the same machine. The span is all of the dispatch, which
begins while the workers are still starting (the first worker to register
takes tasks before the second is up): the server's CPU counts from just
before the workers start; a worker's counts from its birth, less what one
worker of the same shape costs to boot and register with nothing to do
(measured in the same run, once the queue is drained, by starting one
more)::

    uv run python bench/stock_w1.py                 # 10,000 tasks, 2 x 4, 3 repetitions
    uv run python bench/stock_w1.py --postgres      # the PostgreSQL store
    uv run python bench/stock_w1.py --tasks 200 --repetitions 1   # the CI smoke size

Each repetition uses a fresh server and store. The last line printed is one
JSON object: ``throughput_per_s`` (median), ``runs_per_s``,
``server_cpu_us_per_task`` and ``worker_cpu_us_per_task`` (medians; the
workers' figure is their sum divided by all tasks), per-run figures, and the
load average at the start.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.peerlib.base import STOCK, Recorder, task_ids
from bench.peerlib.wf_system import WfPostgresSystem, WfSystem

_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_S


def one_run(tasks: int, processes: int, slots: int, postgres: bool) -> dict[str, Any]:
    """One stock W1 on a fresh server: throughput and CPU per task."""
    system = WfPostgresSystem(mode=STOCK) if postgres else WfSystem(mode=STOCK)
    with tempfile.TemporaryDirectory(prefix="wf-stock-w1-") as tmp:
        recorder = Recorder(Path(tmp) / "starts")
        recorder.folder.mkdir()
        system.setup(Path(tmp) / "system", recorder)
        try:
            system.enqueue_noop(list(task_ids("w1", tasks)))
            assert system.server is not None
            server_before = cpu_s(system.server.pid)
            system.start_workers(processes, slots)
            ready = time.time()
            pids = {name: proc.pid for name, proc in system.workers.items()}
            while recorder.count() < tasks:
                time.sleep(0.02)
            server_s = cpu_s(system.server.pid) - server_before
            born = {name: cpu_s(pid) for name, pid in pids.items()}
            system.start_workers(1, slots)  # the queue is drained: this one only boots
            (idle,) = (proc.pid for name, proc in system.workers.items() if name not in pids)
            boot_s = cpu_s(idle)
        finally:
            system.teardown()
        starts = recorder.starts().values()
    elapsed = max(starts) - min(ready, min(starts))
    workers = sum(max(0.0, spent - boot_s) for spent in born.values())
    return {
        "throughput_per_s": round(tasks / elapsed, 1),
        "server_cpu_us_per_task": round(server_s / tasks * 1e6, 1),
        "worker_cpu_us_per_task": round(workers / tasks * 1e6, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--processes", type=int, default=2, help="worker processes")
    parser.add_argument("--slots", type=int, default=4, help="--max-concurrency of each")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--postgres", action="store_true", help="the PostgreSQL store")
    args = parser.parse_args(argv)
    for name in ("tasks", "processes", "slots", "repetitions"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    load = os.getloadavg()[0]
    runs = []
    for n in range(args.repetitions):
        runs.append(one_run(args.tasks, args.processes, args.slots, args.postgres))
        print(f"run {n + 1}/{args.repetitions}: {runs[-1]}", flush=True)
    result: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "store": "postgres" if args.postgres else "sqlite",
        "tasks": args.tasks,
        "shape": f"{args.processes}x{args.slots}",
        "load_average": load,
        "runs": runs,
    }
    for key in ("throughput_per_s", "server_cpu_us_per_task", "worker_cpu_us_per_task"):
        result[key] = statistics.median(run[key] for run in runs)
    result["runs_per_s"] = [run["throughput_per_s"] for run in runs]
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
