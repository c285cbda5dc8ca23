"""What must hold after any fault (issue 15, "How to prove it").

- every acknowledged submission is in the store, and finished (completed);
- no non-idempotent activity executed twice (the ledger of executions);
- every schedule instant admitted exactly once (``workflow.schedules.occurrences``
  pages, and one run per schedule in the ``runs`` table);
- ``wf store check`` answers clean;
- the deposed node committed nothing after the fence moved: every audited
  write transaction advanced the fence itself, the commit sequence orders
  the epochs, and each epoch's writes come from one node only (the audit of
  :meth:`cluster.Cluster.install_audit`).

Each check returns what it found and raises ``AssertionError`` naming the
evidence, so a failure is a bug report.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from .cluster import BIN, REPO, Cluster, rpc, wait_until

FINAL: Final = frozenset({"completed", "failed", "cancelled"})
RUN_FINAL: Final = frozenset({"completed", "failed", "exhausted", "cancelled"})
STORE_CHECK_TIMEOUT_S: Final = 60.0


def activity_states(cluster: Cluster, ids: Sequence[str]) -> dict[str, str]:
    """Activity id → stored state, for those of ``ids`` in the store."""
    with cluster.connect() as conn:
        rows = conn.execute(
            "SELECT activity_id, state FROM activities WHERE activity_id = ANY(%s)", [list(ids)]
        ).fetchall()
    return {str(a): str(s) for a, s in rows}


def wait_finished(cluster: Cluster, ids: Sequence[str], timeout_s: float) -> dict[str, str]:
    """Wait until every one of ``ids`` is stored and finished; returns their states."""
    states: dict[str, str] = {}

    def done() -> bool:
        states.clear()
        states.update(activity_states(cluster, ids))
        return len(states) == len(ids) and all(s in FINAL for s in states.values())

    try:
        wait_until(done, f"{len(ids)} acknowledged activities finished", timeout_s)
    except AssertionError as exc:
        missing = sorted(set(ids) - set(states))
        stuck = {a: s for a, s in states.items() if s not in FINAL}
        raise AssertionError(f"{exc}: missing {missing[:20]}, unfinished {stuck}") from None
    return states


def last_errors(cluster: Cluster, ids: Iterable[str]) -> dict[str, Any]:
    """The ``last_error`` and last transition reason of each activity (evidence)."""
    with cluster.connect() as conn:
        rows = conn.execute(
            """
            SELECT a.activity_id, a.last_error,
                   (SELECT t.reason FROM transitions t WHERE t.activity_id = a.activity_id
                    ORDER BY t.id DESC LIMIT 1)
            FROM activities a WHERE a.activity_id = ANY(%s)""",
            [list(ids)],
        ).fetchall()
    return {str(a): {"last_error": e, "reason": r} for a, e, r in rows}


NEVER_RECEIVED_MAX: Final = 8
"""Most acknowledged activities one fault may leave failed closed because their start
was committed as a grant the worker never received (see :func:`check_acknowledged`):
at most one per slot the cut-off active could grant into at once."""


def check_acknowledged(cluster: Cluster, acknowledged: Sequence[str], timeout_s: float) -> None:
    """Every acknowledged submission is stored, finishes, and completes, except one that
    fell in start on grant's documented window (docs/architecture.md, "Start on
    grant"): its grant was committed as its start, the fault cut the answer off, and
    the worker, registering at the new active, did not list it. That one is failed
    closed (``may_have_executed``, ``lease_abandoned``), never run again, and must not
    have run at all: no ledger line. Anything else that did not complete fails."""
    assert acknowledged, "the load client had nothing acknowledged"
    states = wait_finished(cluster, acknowledged, timeout_s)
    not_completed = [a for a, s in states.items() if s != "completed"]
    if not not_completed:
        return
    errors = last_errors(cluster, not_completed)
    executions = Counter(line["activity_id"] for line in ledger_lines(cluster))
    unexplained = unexplained_failures(errors, executions)
    evidence = (
        f"{len(not_completed)} acknowledged activities did not complete: "
        f"{dict(list(errors.items())[:10])}; executions: "
        f"{ {a: executions[a] for a in not_completed[:10]} }"
    )
    assert not unexplained, evidence
    assert len(not_completed) <= NEVER_RECEIVED_MAX, evidence


def unexplained_failures(
    errors: Mapping[str, Any], executions: Mapping[str, int]
) -> dict[str, Any]:
    """Those of ``errors`` (:func:`last_errors`) that start on grant's window does not
    explain: failed closed as ``may_have_executed`` because a registration did not
    list the lease (``lease_abandoned``), and never run (no ledger line)."""
    return {
        a: e
        for a, e in errors.items()
        if not (
            e["reason"] == "may_have_executed"
            and "(lease_abandoned)" in (e["last_error"] or "")
            and executions.get(a, 0) == 0
        )
    }


def ledger_lines(cluster: Cluster) -> list[dict[str, Any]]:
    """Every execution the workers recorded."""
    return [json.loads(line) for line in cluster.ledger.read_text().splitlines() if line]


def check_executed_at_most_once(cluster: Cluster) -> Counter[str]:
    """No ``ha.ledger`` activity (none is idempotent) executed twice; returns the counts."""
    lines = ledger_lines(cluster)
    counts = Counter(line["activity_id"] for line in lines)
    twice = {a: [x for x in lines if x["activity_id"] == a] for a, n in counts.items() if n > 1}
    assert not twice, f"non-idempotent activities executed more than once: {twice}"
    return counts


@dataclass(frozen=True)
class ScheduleSet:
    """One-shot schedules, one per instant, all of one deployment."""

    instants: Mapping[str, float]
    """schedule id → its one instant (POSIX seconds)."""


def occurrences(cluster: Cluster, url: str, schedule_id: str) -> list[dict[str, Any]]:
    """Every occurrence of a schedule, page by page, from node ``url``."""
    rows: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        page = rpc(
            url,
            "workflow.schedules.occurrences.list",
            {"schedule_id": schedule_id, "limit": 2, "cursor": cursor},
        )
        rows.extend(page["occurrences"])
        cursor = page["next_cursor"]
        if cursor is None:
            return rows


def runs_by_schedule(cluster: Cluster) -> dict[str, list[tuple[str, str]]]:
    """schedule id → its runs ``(run_id, status)`` as stored."""
    with cluster.connect() as conn:
        rows = conn.execute(
            "SELECT schedule_id, run_id, status FROM runs WHERE schedule_id IS NOT NULL"
        ).fetchall()
    runs: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for schedule_id, run_id, status in rows:
        runs[str(schedule_id)].append((str(run_id), str(status)))
    return runs


def check_schedules(cluster: Cluster, schedules: ScheduleSet, url: str, timeout_s: float) -> None:
    """Every instant admitted exactly once, and each admitted run finished completed,
    or failed closed in start on grant's window as :func:`check_acknowledged` allows
    (its activity never ran), at most :data:`NEVER_RECEIVED_MAX` of them."""

    def all_runs_final() -> bool:
        runs = runs_by_schedule(cluster)
        return all(
            runs.get(s) and all(status in RUN_FINAL for _, status in runs[s])
            for s in schedules.instants
        )

    try:
        wait_until(all_runs_final, "every scheduled run finished", timeout_s)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: runs {dict(runs_by_schedule(cluster))}") from None
    runs = runs_by_schedule(cluster)
    problems = []
    failed: dict[str, str] = {}
    """activity id → its schedule, for the admitted runs that did not complete."""
    for schedule_id, instant in schedules.instants.items():
        seen = occurrences(cluster, url, schedule_id)
        instants = [o["instant"] for o in seen]
        admitted = [o for o in seen if o.get("run_id")]
        if len(seen) != 1 or len(admitted) != 1 or len(runs[schedule_id]) != 1:
            problems.append(
                f"{schedule_id} (instant {instant}): occurrences {seen}, "
                f"runs {runs[schedule_id]}, instants {instants}"
            )
        elif runs[schedule_id][0][1] != "completed":
            failed[f"{runs[schedule_id][0][0]}.step"] = schedule_id
    if failed:
        errors = last_errors(cluster, failed)
        executions = Counter(line["activity_id"] for line in ledger_lines(cluster))
        unexplained = unexplained_failures(errors, executions)
        if unexplained or len(failed) > NEVER_RECEIVED_MAX:
            problems += [
                f"{failed[a]}: run of {a} did not complete: {errors.get(a)}, "
                f"executions {executions[a]}"
                for a in failed
            ]
    assert not problems, "schedule instants not admitted exactly once:\n" + "\n".join(problems)


def check_store(cluster: Cluster) -> None:
    """``wf store check`` on the cluster's schema exits 0 (clean)."""
    done = subprocess.run(
        [
            str(BIN / "wf"),
            "store",
            "check",
            "--postgres",
            cluster.dsn,
            "--schema",
            cluster.schema,
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=STORE_CHECK_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, (
        f"wf store check exit {done.returncode}: {done.stdout}{done.stderr}"
    )


@dataclass(frozen=True)
class FenceHistory:
    """The audited writes, summarised by epoch."""

    writers: Mapping[int, frozenset[str]]
    """epoch → nodes that committed writes in it."""
    seq_ranges: Mapping[int, tuple[int, int]]
    """epoch → (first, last) commit_seq of its audited writes."""


def check_fence(
    cluster: Cluster, *, deposed: str | None, takeover_epoch: int | None
) -> FenceHistory:
    """The fence held (module docstring). With ``deposed`` and ``takeover_epoch``: the
    deposed node wrote nothing in the epoch that replaced it (nor any later one it did
    not start itself), and the takeover epoch committed writes of another node."""
    audit = cluster.audit()
    assert audit, "no write was audited"
    unfenced = [row for row in audit if not row[2]]
    assert not unfenced, f"write transactions that did not advance the fence: {unfenced[:10]}"
    writers: dict[int, set[str]] = defaultdict(set)
    ranges: dict[int, tuple[int, int]] = {}
    previous_epoch = 0
    seqs = [row[1] for row in audit]
    assert len(seqs) == len(set(seqs)), "two committed writes share a commit_seq"
    for epoch, seq, _, node in audit:
        assert epoch >= previous_epoch, (
            f"commit_seq {seq} was committed in epoch {epoch} after epoch {previous_epoch}"
        )
        previous_epoch = epoch
        writers[epoch].add(node)
        low, _ = ranges.get(epoch, (seq, seq))
        ranges[epoch] = (low, seq)
    shared = {e: sorted(n) for e, n in writers.items() if len(n) > 1}
    assert not shared, f"epochs with writes from more than one node (split brain): {shared}"
    if deposed is not None and takeover_epoch is not None:
        later = {e: sorted(n) for e, n in writers.items() if e >= takeover_epoch}
        assert takeover_epoch in writers, (
            f"no write was committed in the takeover epoch {takeover_epoch}: {dict(writers)}"
        )
        assert deposed not in writers[takeover_epoch], (
            f"the deposed node {deposed} wrote in the takeover epoch: {later}"
        )
    return FenceHistory(
        writers={e: frozenset(n) for e, n in writers.items()}, seq_ranges=dict(ranges)
    )
