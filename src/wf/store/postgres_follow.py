"""A standby's warm copy of the scheduler state, kept close to the PostgreSQL store.

Theory of operation
-------------------
Every group commit of the active also inserts one ``change_log`` row (in the
same fenced transaction, so it exists exactly when the commit does): the
commit's sequence number and the ids of the activities and workers it
touched. A standby holds a :class:`WarmCopy`: the state recovery would load
(live activities, recently finished ones, workers, counters) as of a fence
sequence. Every half second or so it *catches up*: in one ``REPEATABLE
READ`` snapshot it reads the fence's sequence, the log rows past its own, and
the rows of the ids they name, decoded by the very decoders recovery's load
uses (:mod:`wf.store.rows`). So at take-over the standby pays only the last
catch-up and the core's rebuild, not a full load (docs/ha.md).

The log is pruned by the active (:data:`CHANGE_LOG_KEEP`); a copy older than
what was pruned, or one that finds a row it cannot decode, is rebuilt from a
full load. :func:`verify` compares a copy with a full load at the same
sequence: the standby runs it periodically, and replaces a copy that differs
(with an error in the log: it would be a bug).

Catalog writes (runs, schedules) advance the fence too, but touch nothing the
scheduler recovers: they leave no log row, and a gap in the log's sequence
numbers is normal.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from wf.scheduler.model import TERMINAL_STATES, Activity, ActivityState
from wf.store import codec, rows
from wf.store.postgres_load import IDS_PER_QUERY_MAX, Conn, load_state
from wf.store.protocol import Diagnostic, StoredState, StoredWorker

CHANGE_LOG_KEEP: Final = 200_000
"""Fence sequence numbers of log the active keeps; an older copy reloads in full."""
CHANGE_LOG_PRUNE_EVERY: Final = 1_024
"""Group commits between two prunings (each one a DELETE in that commit)."""

INSERT_CHANGE: Final = """
INSERT INTO change_log (commit_seq, activity_ids, worker_ids)
SELECT commit_seq, %s, %s FROM fence WHERE id = 1"""
"""Run after ``fence_advance`` in the commit's transaction: the fence holds its sequence."""
PRUNE: Final = """
WITH cut AS (SELECT commit_seq - %s AS below FROM fence WHERE id = 1),
gone AS (DELETE FROM change_log WHERE commit_seq < (SELECT below FROM cut))
UPDATE change_log_meta SET pruned_below = GREATEST(pruned_below, (SELECT below FROM cut))
WHERE id = 1"""
_FENCE_SEQ: Final = "SELECT commit_seq FROM fence WHERE id = 1"
_PRUNED_BELOW: Final = "SELECT pruned_below FROM change_log_meta WHERE id = 1"
_CHANGES: Final = """
SELECT activity_ids, worker_ids FROM change_log
WHERE commit_seq > %s AND commit_seq <= %s ORDER BY commit_seq"""
_ACTIVITIES_BY_ID: Final = """
SELECT activity_id, seq, spec, state, attempt, failures, infra_requeues, steals, token,
       worker_id, lease_expires_at, not_before, queued_at, last_error, submitted_at
FROM activities WHERE activity_id = ANY(%s)"""


def touched_ids(steps: Iterable[tuple[str, dict[str, object]]]) -> tuple[list[str], list[str]]:
    """The activity ids and worker ids a group commit's steps write."""
    activities: dict[str, None] = {}
    workers: dict[str, None] = {}
    for _name, params in steps:
        if "activity_id" in params:
            activities[str(params["activity_id"])] = None
        elif "worker_id" in params:
            workers[str(params["worker_id"])] = None
    return list(activities), list(workers)


@dataclass(slots=True)
class WarmCopy:
    """The state recovery would load, as of fence sequence :attr:`seq`."""

    seq: int
    counters: tuple[int, int, int]
    """(activity seq, fencing token, worker seq)."""
    live: dict[str, Activity]
    finished: dict[str, ActivityState]
    """The most recently finished activities, oldest first (an ordered set)."""
    finished_max: int
    workers: dict[str, StoredWorker]
    diagnostics: list[Diagnostic] = field(default_factory=list)

    def finish(self, activity_id: str, state: ActivityState) -> None:
        """Note a newly finished activity, forgetting the oldest past the bound."""
        if activity_id in self.finished:
            return
        self.finished[activity_id] = state
        while len(self.finished) > self.finished_max:
            del self.finished[next(iter(self.finished))]

    def state(self) -> StoredState:
        """As :meth:`~wf.store.postgres.PostgresStore.load` would answer at :attr:`seq`.

        The copy is handed over (a take-over's last use of it): when :attr:`live`
        is in ``seq`` order, as a full load fills it and a catch-up keeps it (an id
        is never reused, so a new activity comes after every older one and a
        changed one keeps its place), it goes along as the state's ``by_id``, which
        recovery adopts as the core's activity table."""
        activities = sorted(self.live.values(), key=operator.attrgetter("seq"))
        in_order = all(map(operator.is_, activities, self.live.values()))
        return StoredState(
            seq=self.counters[0],
            token=self.counters[1],
            worker_seq=self.counters[2],
            activities=activities,
            finished=list(self.finished.items()),
            workers=sorted(self.workers.values(), key=lambda w: w.seq),
            diagnostics=list(self.diagnostics),
            by_id=self.live if in_order else None,
        )


async def full_load(conn: Conn, finished_max: int, where: str) -> WarmCopy:
    """A fresh copy, inside the caller's ``REPEATABLE READ`` read-only transaction."""
    seq = await _fence_seq(conn)
    stored = await load_state(conn, finished_max, where)
    return WarmCopy(
        seq=seq,
        counters=(stored.seq, stored.token, stored.worker_seq),
        # The load's table by id, in seq order (built while it read).
        live=stored.by_id
        if stored.by_id is not None
        else {a.activity_id: a for a in stored.activities},
        finished=dict(stored.finished),
        finished_max=finished_max,
        workers={w.info.worker_id: w for w in stored.workers},
        diagnostics=list(stored.diagnostics),
    )


async def catch_up(conn: Conn, copy: WarmCopy, until: int | None = None) -> bool:
    """Bring ``copy`` to the fence's sequence (or ``until``), inside the caller's
    ``REPEATABLE READ`` read-only transaction; ``False`` when it cannot be (the log
    was pruned past it, or a row does not decode): then reload it in full."""
    cur = await conn.execute(_PRUNED_BELOW)
    row = await cur.fetchone()
    if row is None or copy.seq < int(row[0]):
        return False
    target = await _fence_seq(conn) if until is None else until
    if target <= copy.seq:
        return True
    cur = await conn.execute(_CHANGES, [copy.seq, target])
    activity_ids: dict[str, None] = {}
    workers_touched = False
    for aids, wids in await cur.fetchall():
        activity_ids.update(dict.fromkeys(aids))
        workers_touched = workers_touched or bool(wids)
    ids = list(activity_ids)
    found: dict[str, Activity] = {}
    for start in range(0, len(ids), IDS_PER_QUERY_MAX):
        cur = await conn.execute(
            _ACTIVITIES_BY_ID, [ids[start : start + IDS_PER_QUERY_MAX]], binary=True
        )
        for fetched in await cur.fetchall():
            decoded = rows.activity_from_row(fetched)
            if isinstance(decoded, Diagnostic):
                return False
            found[decoded.activity_id] = decoded
    for aid in ids:
        activity = found.get(aid)
        if activity is None:
            copy.live.pop(aid, None)  # purged with its worker, or never there
        elif activity.state in TERMINAL_STATES:
            copy.live.pop(aid, None)
            copy.finish(aid, activity.state)
        else:
            copy.live[aid] = activity
    if workers_touched:
        cur = await conn.execute(codec.postgres_queries()["select_workers"], binary=True)
        diagnostics: list[Diagnostic] = []
        workers = rows.decode_all(await cur.fetchall(), rows.worker_from_row, diagnostics)
        if diagnostics:
            return False
        copy.workers = {w.info.worker_id: w for w in workers}
    cur = await conn.execute(codec.postgres_queries()["select_counters"])
    diagnostics = []
    counters = rows.counters_from_rows(await cur.fetchall(), diagnostics)
    if diagnostics:
        return False
    copy.counters = (counters["seq"], counters["token"], counters["worker_seq"])
    copy.seq = target
    return True


def differences(copy: WarmCopy, full: WarmCopy) -> list[str]:
    """How ``copy`` differs from ``full`` at the same sequence (live activities, workers
    and counters; the finished window is a best-effort answer cache)."""
    found: list[str] = []
    if copy.counters != full.counters:
        found.append(f"counters {copy.counters} != {full.counters}")
    if copy.live.keys() != full.live.keys():
        extra = sorted(copy.live.keys() - full.live.keys())[:5]
        missing = sorted(full.live.keys() - copy.live.keys())[:5]
        found.append(f"live activities differ (extra {extra}, missing {missing})")
    else:
        changed = [aid for aid, a in full.live.items() if copy.live[aid] != a][:5]
        if changed:
            found.append(f"activities differ: {changed}")
    if copy.workers != full.workers:
        found.append("workers differ")
    return found


async def _fence_seq(conn: Conn) -> int:
    cur = await conn.execute(_FENCE_SEQ)
    row = await cur.fetchone()
    return int(row[0]) if row is not None else 0
