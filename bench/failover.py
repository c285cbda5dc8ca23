"""Failover benchmark: how fast a standby takes over, and what the standbys cost.

Rerun
-----
::

    export WF_TEST_POSTGRES_DSN=postgresql://postgres@127.0.0.1:5432/test
    uv run python bench/failover.py --quick             # 3 trials, 10^3 live: ~3 minutes
    uv run python bench/failover.py                     # 20 trials at 10^4 and 10^5 live
    uv run python bench/failover.py --live 1000000      # the slow run (outside CI)
    uv run python bench/failover.py --faults sigkill --trials 5 --no-overhead

PostgreSQL comes from ``--postgres-dsn``, else ``$WF_TEST_POSTGRES_DSN``, else
the local test server. Every size runs in a fresh schema ``wf_bench_<hex>``,
dropped at the end. Progress goes to standard error; the last line of
standard output is one JSON object (the report).

Theory of operation
-------------------
The processes are those of the failover tests (``tests/ha``: the cluster
harness, the ledger worker app, the TCP proxy): three ``wf-rpc-server``
nodes on one schema, each reaching PostgreSQL through a proxy of its own
(so any node can be cut off), two ``wf worker`` processes running the
non-idempotent ``ha.ledger`` activity (one ledger line per execution), and a
load client submitting ledger activities (10 a second) through the whole
run and recording every acknowledged id.

*Live activities.* Before the trials, ``--live`` activities of a type no
worker serves (``ha.parked``) are submitted: they stay queued, so the active
and the standbys' warm copies hold that many live activities, and a takeover
pays for them.

*Trials.* Per fault, ``--trials`` times, on the current active:

- ``sigkill``: SIGKILL; the node is restarted (as a standby) afterwards.
- ``freeze``: SIGSTOP; SIGCONT after 10 s; it must come back as a standby.
- ``cutoff``: its proxy black-holes; after the takeover it resets and passes
  again, and the node must come back as a standby.

Each fault finds the cluster healthy: after a trial the benchmark waits until
every standby reports a warm copy again (``rewarm_wait_p50_s`` and
``rewarm_wait_max_s`` say how long that took; at 10^6 live activities a
restarted node needs several seconds to load its first copy). With
``--no-rewarm`` the next fault comes as soon as the faulted node is back as a
standby, so it may meet a cluster whose only other standby is still cold: a
second fault on a degraded cluster, which pays a full load.

A one-shot schedule is created a second before each fault, so every fault
has an instant near it. ``takeover_s`` is the fault to the first ``/readyz``
200 of another node (polled every 10 ms); ``worker_resume_s`` is the fault to
the first completion committed after it (``transitions.at`` of the earliest
``completed`` row with an id above the highest id at the fault, the new
active's clock: all processes share the machine's clock). Percentiles are
nearest-rank.

After the trials: ``lost`` counts acknowledged submissions missing from the
store, ``executed_twice`` ledger ids with more than one execution,
``admitted_twice`` schedules with more than one admitted occurrence or run;
``failed_may_have_executed`` counts acknowledged activities that ended
``failed`` because a lease was lost while executing (not lost, but not
survived either).

*HA overhead (A/B in one run).* On a fresh schema, without proxies: node n1
alone (A), then with n2 and n3 attached as standbys (B), alternating A, B,
A, B. Each phase measures the end-to-end throughput of ``--ab-count``
no-work ledger activities (submitted in batches of 500; completions per
second between the first and the last ``completed`` transition) and the
light-load dispatch latency (one submission every 20 ms; the activity's
start, from its ledger line, minus the instant before the submit call).
Reported: the medians per side and ``ha_throughput_overhead_pct``,
``ha_dispatch_p99_delta_ms``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

REPO: Final = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402
from tests.ha.cluster import (  # noqa: E402
    Cluster,
    Node,
    dsn_host_port,
    http_status,
    node_dsn,
    server_config,
    wait_until,
)
from tests.ha.ledger_app import PARKED_TYPE, ledger  # noqa: E402
from tests.ha.load import Load  # noqa: E402
from tests.ha.tcp_proxy import TcpProxy  # noqa: E402

from wf.client.app import App  # noqa: E402
from wf.scheduler.model import Activity  # noqa: E402

DEFAULT_DSN: Final = "postgresql://postgres@127.0.0.1:5432/test"
FAULTS: Final = ("sigkill", "freeze", "cutoff")
FREEZE_S: Final = 10.0
TAKEOVER_BOUND_S: Final = 30.0
"""A trial without a takeover within this long counts as failed (``takeover_s`` None)."""
RESUME_BOUND_S: Final = 30.0
REWARM_BOUND_S: Final = 300.0
"""Longest wait for every standby to hold a warm copy again between two trials."""
SUBMIT_BATCH: Final = 1_000
AB_BATCH: Final = 500
DISPATCH_GAP_S: Final = 0.02
PROBE_S: Final = 0.01
WORKERS: Final = ("w1", "w2")
TARGETS: Final = {
    "takeover_p99_s_sigkill_1e5": 2.0,
    "takeover_p99_s_sigkill_1e6": 3.0,
    "takeover_p99_s_freeze_cutoff": 5.0,
    "worker_resume_p99_s": "takeover_p99_s + 1.5",
    "lost": 0,
    "executed_twice": 0,
    "admitted_twice": 0,
    "ha_throughput_overhead_pct": 5.0,
    "ha_dispatch_p99_delta_ms": 0.5,
}


def say(message: str) -> None:
    """One progress line on standard error."""
    print(message, file=sys.stderr, flush=True)


def percentile(samples: Sequence[float], fraction: float) -> float | None:
    """Nearest-rank percentile (``None`` without samples)."""
    if not samples:
        return None
    ordered = sorted(samples)
    rank = max(0, min(len(ordered) - 1, math.ceil(fraction * len(ordered)) - 1))
    return ordered[rank]


def new_schema() -> str:
    return f"wf_bench_{uuid.uuid4().hex}"


def drop_schema(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '10s'")
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


async def _submit_all(urls: Sequence[str], specs: Sequence[Activity], batch: int) -> None:
    async with App(list(urls)) as app:
        for i in range(0, len(specs), batch):
            await app.submit_activities(list(specs[i : i + batch]))


def submit(urls: Sequence[str], specs: Sequence[Activity], batch: int = SUBMIT_BATCH) -> None:
    asyncio.run(_submit_all(urls, specs, batch))


def park(urls: Sequence[str], count: int) -> None:
    """``count`` live activities nobody serves."""
    specs = [
        Activity(activity_id=f"park-{i:07d}", activity_type=PARKED_TYPE, payload=b"[]")
        for i in range(count)
    ]
    for i in range(0, count, 10 * SUBMIT_BATCH):
        submit(urls, specs[i : i + 10 * SUBMIT_BATCH])
        say(f"  parked {min(count, i + 10 * SUBMIT_BATCH)}/{count}")


def max_transition_id(cluster: Cluster) -> int:
    with cluster.connect() as conn:
        row = conn.execute("SELECT COALESCE(MAX(id), 0) FROM transitions").fetchone()
    return int(row[0]) if row else 0


def first_completion_after(cluster: Cluster, after_id: int) -> float | None:
    with cluster.connect() as conn:
        row = conn.execute(
            "SELECT MIN(at) FROM transitions WHERE id > %s AND to_state = 'completed'", [after_id]
        ).fetchone()
    return None if row is None or row[0] is None else float(row[0])


def oneshot_soon(urls: Sequence[str], deployment_id: str, schedule_id: str) -> None:
    """A one-shot schedule whose instant is the next whole second at least 1 s ahead."""
    at = float(int(time.time()) + 2)
    with App.sync(list(urls)) as app:
        app.create_schedule(
            schedule_id,
            deployment_id,
            {
                "kind": "oneshot",
                "at": datetime.datetime.fromtimestamp(at, datetime.UTC).isoformat(),
            },
        )


class Trials:
    """The fault trials of one live size (module docstring)."""

    def __init__(self, args: argparse.Namespace, live: int, tmp: Path) -> None:
        self.args = args
        self.live = live
        self.schema = new_schema()
        host, port = dsn_host_port(args.postgres_dsn)
        self.proxies = {f"n{i}": TcpProxy(host, port).start() for i in (1, 2, 3)}
        self.cluster = Cluster(
            tmp,
            args.postgres_dsn,
            self.schema,
            config=server_config(lease_ttl_s=30.0, log_level=args.log_level),
            node_dsns={
                n: node_dsn(args.postgres_dsn, n, host="127.0.0.1", port=p.port)
                for n, p in self.proxies.items()
            },
        )
        self.samples: dict[str, dict[str, list[float]]] = {
            f: {"takeover_s": [], "worker_resume_s": []} for f in FAULTS
        }
        self.failed_trials: dict[str, int] = Counter()
        self.rewarm_s: list[float] = []
        self.schedules: list[str] = []
        self.deployment_id = ""

    def setup(self) -> Load:
        say(f"[{self.live} live] starting three nodes on {self.schema}")
        self.cluster.start()
        self.cluster.start_workers(*WORKERS)
        urls = self.cluster.urls
        park(urls, self.live)
        with App.sync(urls) as app:
            app.create_artifact_from_plan(
                "bench_step",
                1,
                {
                    "nodes": [
                        {
                            "kind": "activity",
                            "id": "step",
                            "activity_type": ledger.name,
                            "args": {"seconds": 0.05},
                            "idempotent": False,
                        }
                    ]
                },
            )
            self.deployment_id = app.save_deployment(
                {"artifact_id": "bench_step", "artifact_version": 1}
            ).deployment_id
        return Load(urls, prefix="bench", rate_per_s=10.0, work_s=0.05).start()

    def trial(self, fault: str, n: int) -> None:
        cluster = self.cluster
        active = cluster.wait_settled(timeout_s=TAKEOVER_BOUND_S)
        schedule_id = f"bench-{fault}-{n}"
        oneshot_soon(cluster.urls, self.deployment_id, schedule_id)
        self.schedules.append(schedule_id)
        others = [node for node in cluster.nodes.values() if node is not active]
        fault_wall = time.time()
        fault_at = time.monotonic()
        if fault == "sigkill":
            active.kill()
        elif fault == "freeze":
            active.freeze()
        else:
            self.proxies[active.node_id].set_mode("blackhole")
        after_id = max_transition_id(cluster)
        takeover_s = self._wait_takeover(others, fault_at)
        resume_s: float | None = None
        deadline = time.monotonic() + RESUME_BOUND_S
        while time.monotonic() < deadline:
            at = first_completion_after(cluster, after_id)
            if at is not None:
                resume_s = at - fault_wall
                break
            time.sleep(0.02)
        say(f"  {fault} #{n} on {active.node_id}: takeover {takeover_s} s, resume {resume_s} s")
        if takeover_s is None or resume_s is None:
            self.failed_trials[fault] += 1
        else:
            self.samples[fault]["takeover_s"].append(takeover_s)
            self.samples[fault]["worker_resume_s"].append(resume_s)
        self._restore(fault, active, fault_at, took_over=takeover_s is not None)

    def _wait_takeover(self, others: Sequence[Node], fault_at: float) -> float | None:
        while time.monotonic() - fault_at < TAKEOVER_BOUND_S:
            for node in others:
                if node.alive() and http_status(f"{node.url}/readyz", 0.5) == 200:
                    return time.monotonic() - fault_at
            time.sleep(PROBE_S)
        return None

    def _restore(self, fault: str, node: Node, fault_at: float, *, took_over: bool) -> None:
        """End the fault; wait until ``node`` is a standby again (or, when nobody took
        over, until the cluster has one active node again: the node may keep its role)."""
        if fault == "sigkill":
            self.cluster.restart(node.node_id)
        elif fault == "freeze":
            time.sleep(max(0.0, fault_at + FREEZE_S - time.monotonic()))  # the fault's length
            node.thaw()
        else:
            self.proxies[node.node_id].set_mode("reset")
            self.proxies[node.node_id].set_mode("pass")
        if took_over:
            wait_until(
                lambda: node.alive() and http_status(f"{node.url}/readyz") == 503,
                f"{node.node_id} back as a standby",
                TAKEOVER_BOUND_S,
            )
        else:
            self.cluster.wait_settled(timeout_s=TAKEOVER_BOUND_S)
        if self.args.rewarm:
            # The next fault finds the cluster healthy: every standby holds a warm copy
            # (as `wf cluster status` shows it). A fault before a restarted node has
            # rebuilt its copy is a second fault on a degraded cluster (--no-rewarm).
            began = time.monotonic()
            wait_until(self._standbys_warm, "every standby warm", REWARM_BOUND_S)
            self.rewarm_s.append(time.monotonic() - began)

    def _standbys_warm(self) -> bool:
        """Whether both standbys reported a warm copy within the last report interval."""
        with self.cluster.connect() as conn:
            rows = conn.execute(
                sql.SQL(
                    "SELECT count(*) FROM {s}.cluster_nodes WHERE role = 'standby' "
                    "AND applied_seq > 0 AND seen_at > now() - interval '2 seconds'"
                ).format(s=sql.Identifier(self.schema))
            ).fetchone()
        return rows is not None and int(rows[0]) >= len(self.cluster.nodes) - 1

    def verdict(self, load: Load) -> dict[str, Any]:
        report = load.stop()
        acked = report.acknowledged
        cluster = self.cluster
        states: dict[str, str] = {}

        def finished() -> bool:
            with cluster.connect() as conn:
                rows = conn.execute(
                    "SELECT activity_id, state FROM activities WHERE activity_id = ANY(%s)",
                    [acked],
                ).fetchall()
            states.clear()
            states.update({str(a): str(s) for a, s in rows})
            return len(states) == len(acked) and all(
                s in ("completed", "failed", "cancelled") for s in states.values()
            )

        try:
            wait_until(finished, "acknowledged activities finished", 60.0)
        except AssertionError as exc:
            say(f"  {exc}")
        lines = [json.loads(x) for x in cluster.ledger.read_text().splitlines() if x]
        executions = Counter(line["activity_id"] for line in lines)
        wait_until(lambda: self._admitted_or_none() is not None, "schedules admitted", 60.0)
        admitted = self._admitted_or_none() or {}
        return {
            "acknowledged": len(acked),
            "lost": len(set(acked) - set(states)),
            "failed_may_have_executed": sum(1 for s in states.values() if s == "failed"),
            "unfinished": sum(
                1 for s in states.values() if s not in ("completed", "failed", "cancelled")
            ),
            "executed_twice": sum(1 for c in executions.values() if c > 1),
            "admitted_twice": sum(1 for c in admitted.values() if c > 1),
            "schedules_not_admitted": sum(1 for c in admitted.values() if c == 0),
            "submission_retries": report.retries,
            "refused_submissions": len(report.refused),
        }

    def _admitted_or_none(self) -> dict[str, int] | None:
        """schedule id → admitted occurrences and runs (the larger), once all have one."""
        with self.cluster.connect() as conn:
            occ = dict(
                conn.execute(
                    "SELECT schedule_id, count(*) FROM occurrences "
                    "WHERE run_id IS NOT NULL GROUP BY schedule_id"
                ).fetchall()
            )
            runs = dict(
                conn.execute(
                    "SELECT schedule_id, count(*) FROM runs WHERE schedule_id IS NOT NULL "
                    "GROUP BY schedule_id"
                ).fetchall()
            )
        counts = {s: max(int(occ.get(s, 0)), int(runs.get(s, 0))) for s in self.schedules}
        return counts if all(counts.values()) else None

    def close(self) -> None:
        self.cluster.close()
        for proxy in self.proxies.values():
            proxy.close()
        drop_schema(self.args.postgres_dsn, self.schema)


def run_trials(args: argparse.Namespace, live: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix=f"wf-failover-{live}-"))
    trials = Trials(args, live, tmp)
    try:
        load = trials.setup()
        for n in range(args.trials):
            for fault in args.faults:
                trials.trial(fault, n)
        result: dict[str, Any] = {}
        for fault in args.faults:
            takeovers = trials.samples[fault]["takeover_s"]
            resumes = trials.samples[fault]["worker_resume_s"]
            result[fault] = {
                "takeover_p50_s": percentile(takeovers, 0.50),
                "takeover_p99_s": percentile(takeovers, 0.99),
                "worker_resume_p50_s": percentile(resumes, 0.50),
                "worker_resume_p99_s": percentile(resumes, 0.99),
                "trials": len(takeovers),
                "failed_trials": trials.failed_trials[fault],
            }
        result["rewarm_wait_p50_s"] = percentile(trials.rewarm_s, 0.50)
        result["rewarm_wait_max_s"] = max(trials.rewarm_s, default=None)
        result.update(trials.verdict(load))
        return result
    finally:
        trials.close()
        if args.keep:
            say(f"[{live} live] logs kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------- A/B overhead


def ab_phase(cluster: Cluster, count: int, dispatches: int, tag: str) -> dict[str, float]:
    """One throughput and one light-load dispatch measurement on the current active."""
    urls = [cluster.wait_settled().url]
    ids = [f"{tag}-t{i:06d}" for i in range(count)]
    after_id = max_transition_id(cluster)
    submit(urls, [ledger.activity(a, args=(0.0,)) for a in ids], AB_BATCH)
    wait_until(
        lambda: _completed(cluster, after_id) >= count, f"{count} activities completed", 300.0
    )
    with cluster.connect() as conn:
        row = conn.execute(
            "SELECT MIN(at), MAX(at) FROM transitions WHERE id > %s AND to_state = 'completed'",
            [after_id],
        ).fetchone()
    assert row is not None
    span = max(float(row[1]) - float(row[0]), 1e-9)
    latencies = asyncio.run(_dispatch(urls, cluster, dispatches, tag))
    return {
        "throughput_per_s": count / span,
        "dispatch_p50_ms": (percentile(latencies, 0.5) or 0.0) * 1000,
        "dispatch_p99_ms": (percentile(latencies, 0.99) or 0.0) * 1000,
    }


def _completed(cluster: Cluster, after_id: int) -> int:
    with cluster.connect() as conn:
        row = conn.execute(
            "SELECT count(*) FROM transitions WHERE id > %s AND to_state = 'completed'",
            [after_id],
        ).fetchone()
    return int(row[0]) if row else 0


async def _dispatch(urls: Sequence[str], cluster: Cluster, count: int, tag: str) -> list[float]:
    sent: dict[str, float] = {}
    async with App(list(urls)) as app:
        for i in range(count):
            aid = f"{tag}-d{i:05d}"
            sent[aid] = time.time()
            await app.submit_activities([ledger.activity(aid, args=(0.0,))])
            await asyncio.sleep(DISPATCH_GAP_S)
    starts: dict[str, float] = {}
    deadline = time.monotonic() + 60.0
    while len(starts) < count and time.monotonic() < deadline:
        for raw in cluster.ledger.read_text().splitlines():
            line = json.loads(raw)
            if line["activity_id"] in sent:
                starts[line["activity_id"]] = float(line["t"])
        await asyncio.sleep(0.05)
    return [starts[a] - sent[a] for a in sent if a in starts]


def run_overhead(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="wf-failover-ab-"))
    schema = new_schema()
    cluster = Cluster(tmp, args.postgres_dsn, schema, config=server_config(lease_ttl_s=30.0))
    sides: dict[str, list[dict[str, float]]] = {"alone": [], "with_standbys": []}
    try:
        say("[A/B] n1 alone, then with two standbys, alternating")
        cluster.start(first="n1")
        # A running cluster started all three: stop the standbys for the first A.
        for node_id in ("n2", "n3"):
            cluster.nodes[node_id].term()
            cluster.nodes[node_id].wait_exit()
        for wid in WORKERS:
            cluster.start_worker(wid, "--max-concurrency", "64")
        wait_until(lambda: set(WORKERS) <= cluster.registered_workers(), "workers", 30.0)
        for rep in range(args.ab_repetitions):
            for side in ("alone", "with_standbys"):
                standbys_up = side == "with_standbys"
                for node_id in ("n2", "n3"):
                    node = cluster.nodes[node_id]
                    if standbys_up and not node.alive():
                        cluster.restart(node_id)
                        if args.standby_nice and node.proc is not None:
                            os.setpriority(os.PRIO_PROCESS, node.proc.pid, args.standby_nice)
                    elif not standbys_up and node.alive():
                        node.term()
                        node.wait_exit()
                figures = ab_phase(cluster, args.ab_count, args.ab_dispatches, f"ab{rep}{side[0]}")
                say(f"  {side} #{rep}: {figures}")
                sides[side].append(figures)
    finally:
        cluster.close()
        drop_schema(args.postgres_dsn, schema)
        shutil.rmtree(tmp, ignore_errors=True)

    def median(side: str, key: str) -> float:
        return statistics.median(f[key] for f in sides[side])

    alone_tp, ha_tp = (
        median("alone", "throughput_per_s"),
        median("with_standbys", "throughput_per_s"),
    )
    return {
        "alone": {k: median("alone", k) for k in sides["alone"][0]},
        "with_standbys": {k: median("with_standbys", k) for k in sides["with_standbys"][0]},
        "ha_throughput_overhead_pct": (alone_tp - ha_tp) / alone_tp * 100.0,
        "ha_dispatch_p99_delta_ms": median("with_standbys", "dispatch_p99_ms")
        - median("alone", "dispatch_p99_ms"),
        "runs": sides,
    }


# ---------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 trials at 10^3 live")
    parser.add_argument("--trials", type=int, default=20, help="trials per fault (default 20)")
    parser.add_argument(
        "--live", default="10000,100000", help="live activity counts, comma-separated"
    )
    parser.add_argument("--faults", default=",".join(FAULTS), help="sigkill,freeze,cutoff")
    parser.add_argument("--no-overhead", action="store_true", help="skip the A/B overhead")
    parser.add_argument("--ab-count", type=int, default=5_000, help="throughput activities")
    parser.add_argument("--ab-dispatches", type=int, default=200, help="light-load dispatches")
    parser.add_argument("--ab-repetitions", type=int, default=2)
    parser.add_argument("--keep", action="store_true", help="keep the nodes' logs")
    parser.add_argument(
        "--no-rewarm",
        dest="rewarm",
        action="store_false",
        help="inject the next fault as soon as the faulted node is back as a standby, "
        "without waiting until every standby holds a warm copy again",
    )
    parser.add_argument(
        "--log-level", default="warning", help="the nodes' log level (default warning)"
    )
    parser.add_argument(
        "--standby-nice",
        type=int,
        default=0,
        help="niceness of the standbys in the A/B (19 stands in for standbys on machines "
        "of their own; 0, the default, shares this machine's cores with them as they are)",
    )
    parser.add_argument("--postgres-dsn", default=os.environ.get("WF_TEST_POSTGRES_DSN"))
    args = parser.parse_args(argv)
    args.postgres_dsn = args.postgres_dsn or DEFAULT_DSN
    args.faults = [f for f in args.faults.split(",") if f]
    unknown = set(args.faults) - set(FAULTS)
    if unknown:
        parser.error(f"unknown faults {sorted(unknown)}")
    args.live = [int(x) for x in args.live.split(",") if x]
    if args.quick:
        args.trials, args.live = 3, [1_000]
        args.ab_count, args.ab_dispatches, args.ab_repetitions = 1_000, 50, 1
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    report: dict[str, Any] = {
        "mode": "quick" if args.quick else "full",
        "trials": args.trials,
        "faults": args.faults,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine_cores": os.cpu_count(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "freeze_s": FREEZE_S,
        "standby_nice": args.standby_nice,
        "rewarm": args.rewarm,
        "targets": TARGETS,
        "live": {},
    }
    # A section that cannot run (a server that does not start, a bound passed) is
    # reported with its error; the report line is always printed.
    for live in args.live:
        try:
            report["live"][str(live)] = run_trials(args, live)
        except Exception as exc:
            say(f"[{live} live] failed: {exc!r}")
            report["live"][str(live)] = {"error": repr(exc)[:2000]}
    if not args.no_overhead:
        try:
            report["overhead"] = run_overhead(args)
        except Exception as exc:
            say(f"[A/B] failed: {exc!r}")
            report["overhead"] = {"error": repr(exc)[:2000]}
    report["elapsed_s"] = round(time.monotonic() - started, 1)
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
