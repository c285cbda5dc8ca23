"""Retention: removing what finished long ago, never what a run or a schedule still needs.

Theory of operation
-------------------
Without retention a store grows for ever: every run, its activities and their
transitions, every occurrence a schedule records. :func:`prune` removes, in
bounded batches, what finished before a cutoff instant:

* **runs** in a final status (:data:`RUN_FINAL_STATUSES`) last written before
  the cutoff, together with their activities, those activities' transitions
  and the occurrence that admitted them. A run is kept while any of its
  activities is unfinished (a cancelled run whose activity a worker still
  holds: the core still holds it too), and the run a schedule's *latest*
  occurrence names is kept with that occurrence;
* **activities** submitted outside any run (the scheduler API), finished
  before the cutoff, with their transitions. An activity of a run goes only
  with its run (one whose run no longer exists goes on its own);
* **occurrences** recorded before the cutoff, except each schedule's latest
  one and any whose run is still stored.

What the live system holds is never touched: unfinished activities and their
leases, live runs (``admitted``, ``running``, ``interrupted``, however old),
schedules themselves (their watermark, which the misfire and overlap logic
reads, is in the schedule's own row), counters, workers. Departed workers
are already forgotten by the core itself after
``departed_worker_retention_s`` (it deletes their rows), so they are not
pruned here.

Each batch is read first (a read transaction: no write waits for the scan),
then deleted in one short write transaction that checks every test again, so
a row that changed in between (a run resumed, an occurrence recorded) is
kept. Batches are bounded (``batch`` runs, activities or occurrences), so a
server pruning a large backlog never holds the writer for long: on SQLite the
deletes queue between group commits; on PostgreSQL they run on the owner's
session behind the write fence.

The store layer cannot read a run's document (the runtime owns it), so the
caller passes :class:`RunLinks`: which activities a run's document names,
and which run an activity id belongs to. A run whose document does not
decode is kept (``wf store check`` reports it).

An activity id becomes free again once its activity is pruned: a client
resubmitting an old standalone activity's id after the retention age gets a
new activity, not the old answer. Run activity ids never repeat (run numbers
come from a counter that is never rewound).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from wf.errors import Internal, InvalidArgument
from wf.store import rows
from wf.store.protocol import RunRow
from wf.store.query import Body, Query

RUN_FINAL_STATUSES: Final = ("completed", "failed", "exhausted", "cancelled")
"""Run statuses a run never leaves (the runtime's ``FINAL_STATUSES``; the prune
queries of ``sql/queries.sql`` spell the same list)."""
BATCH_DEFAULT: Final = 500
"""Rows of each kind one batch reads and deletes, unless told otherwise."""
BATCH_MAX: Final = 5_000
"""Largest batch accepted (one bound parameter per id, well under every limit)."""
IDS_PER_QUERY_MAX: Final = 500
"""Most ids one statement names (a run's activities can be many)."""


class RunLinks(Protocol):
    """What retention needs to know of the runtime's documents."""

    def activities_of(self, run: RunRow) -> Sequence[str] | None:
        """The activity ids ``run``'s document names; ``None`` if it does not decode
        (the run is then kept)."""
        ...

    def run_of(self, activity_id: str) -> str | None:
        """The run ``activity_id`` belongs to, or ``None`` for a standalone activity."""
        ...


@dataclass(slots=True)
class PruneCounts:
    """What a prune removed (or, in a dry run, would remove)."""

    runs: int = 0
    activities: int = 0
    transitions: int = 0
    occurrences: int = 0

    def add(self, other: PruneCounts) -> None:
        """Add ``other``'s counts to these."""
        self.runs += other.runs
        self.activities += other.activities
        self.transitions += other.transitions
        self.occurrences += other.occurrences

    def total(self) -> int:
        """Rows of every kind."""
        return self.runs + self.activities + self.transitions + self.occurrences

    def as_dict(self) -> dict[str, int]:
        """The counts by kind (for ``--json`` and logs)."""
        return {
            "runs": self.runs,
            "activities": self.activities,
            "transitions": self.transitions,
            "occurrences": self.occurrences,
        }


Runner = Callable[[Body[Any]], Awaitable[Any]]
"""A backend's ``_run_read`` or ``_run_write``."""


async def prune(
    read: Runner,
    write: Runner,
    links: RunLinks,
    *,
    cutoff: float,
    batch: int = BATCH_DEFAULT,
    dry_run: bool = False,
    max_batches: int | None = None,
    pause: Callable[[], Awaitable[None]] | None = None,
) -> PruneCounts:
    """Remove what finished before ``cutoff`` (POSIX seconds; see the module docstring),
    ``batch`` rows of a kind at a time, at most ``max_batches`` batches of each kind
    (``None``: until nothing is left). ``dry_run`` counts what would go and changes
    nothing. ``pause`` is awaited between two batches (a server leaves the writer to
    its group commits meanwhile). Returns the counts."""
    if not 1 <= batch <= BATCH_MAX:
        raise InvalidArgument(f"batch must be within 1..{BATCH_MAX}, not {batch}", field="batch")
    counts = PruneCounts()

    async def more(done: int) -> bool:
        if done and pause is not None:
            await pause()
        return max_batches is None or done < max_batches

    after, done = 0, 0
    while await more(done):
        found: list[RunRow] = await read(_candidate_runs(cutoff, after, batch))
        if not found:
            break
        after, done = found[-1].seq, done + 1
        plans = [
            (row.run_id, ids) for row in found if (ids := links.activities_of(row)) is not None
        ]
        if plans:
            counts.add(await _settle_runs(read, write, cutoff, plans, dry_run))
        if len(found) < batch:
            break

    after, done = 0, 0
    while await more(done):
        candidates: list[tuple[int, str]] = await read(_candidate_activities(cutoff, after, batch))
        if not candidates:
            break
        after, done = candidates[-1][0], done + 1
        ids = [activity_id for _, activity_id in candidates]
        owners = {a: run for a in ids if (run := links.run_of(a)) is not None}
        kept: set[str] = set()
        if owners:
            existing = set(await read(_existing_runs(sorted(set(owners.values())))))
            kept = {a for a, run in owners.items() if run in existing}
        gone = [a for a in ids if a not in kept]
        if gone:
            counts.add(await _settle_activities(read, write, cutoff, gone, dry_run))
        if len(candidates) < batch:
            break

    key: tuple[str, float] = ("", 0.0)
    done = 0
    while await more(done):
        keys: list[tuple[str, float]] = await read(_candidate_occurrences(cutoff, key, batch))
        if not keys:
            break
        key, done = keys[-1], done + 1
        if dry_run:
            counts.occurrences += len(keys)
        else:
            counts.occurrences += await write(_delete_occurrences(cutoff, keys))
        if len(keys) < batch:
            break
    return counts


# ------------------------------------------------------------------ bodies


def _candidate_runs(cutoff: float, after_seq: int, limit: int) -> Body[list[RunRow]]:
    query = Query(
        "prune_candidate_runs", {"cutoff": cutoff, "after_seq": after_seq, "limit": limit}
    )
    return [rows.run_from_row(r) for r in (yield query).rows]


def _candidate_activities(cutoff: float, after_seq: int, limit: int) -> Body[list[tuple[int, str]]]:
    query = Query(
        "prune_candidate_activities", {"cutoff": cutoff, "after_seq": after_seq, "limit": limit}
    )
    return [(int(seq), str(aid)) for seq, aid in (yield query).rows]


def _candidate_occurrences(
    cutoff: float, after: tuple[str, float], limit: int
) -> Body[list[tuple[str, float]]]:
    params = {
        "cutoff": cutoff,
        "after_schedule": after[0],
        "after_instant": after[1],
        "limit": limit,
    }
    found = (yield Query("prune_candidate_occurrences", params)).rows
    return [(str(schedule_id), float(instant)) for schedule_id, instant in found]


def _existing_runs(run_ids: Sequence[str]) -> Body[list[str]]:
    return [str(r[0]) for r in (yield _named("prune_existing_runs", "run_id", run_ids)).rows]


def _count_transitions(ids: Sequence[str]) -> Body[int]:
    row = (yield _named("prune_count_transitions", "activity_id", ids)).one()
    return int(row[0]) if row is not None else 0


def _count_run_occurrences(run_id: str) -> Body[int]:
    row = (yield _named("prune_count_run_occurrences", "run_id", [run_id])).one()
    return int(row[0]) if row is not None else 0


def _named(name: str, column: str, ids: Sequence[str], **params: Any) -> Query:
    """Query ``name`` narrowed to ``column IN (ids)``, one bound parameter per id."""
    if not ids or len(ids) > BATCH_MAX:
        raise Internal(f"{name}: {len(ids)} ids (retention names 1..{BATCH_MAX} at a time)")
    marks = {f"id_{i}": value for i, value in enumerate(ids)}
    clause = f"{column} IN ({', '.join(f':{m}' for m in marks)})"
    return Query(name, {**params, **marks}, (clause,))


def _chunks(ids: Sequence[str]) -> list[Sequence[str]]:
    return [ids[i : i + IDS_PER_QUERY_MAX] for i in range(0, len(ids), IDS_PER_QUERY_MAX)]


async def _settle_runs(
    read: Runner,
    write: Runner,
    cutoff: float,
    plans: list[tuple[str, Sequence[str]]],
    dry_run: bool,
) -> PruneCounts:
    if not dry_run:
        result: PruneCounts = await write(_delete_runs(cutoff, plans))
        return result
    counts = PruneCounts()
    for run_id, ids in plans:
        live: list[str] = []
        for chunk in _chunks(list(ids)):
            live += await read(_live_activities(chunk))
        if live:
            continue
        counts.runs += 1
        counts.activities += len(ids)
        counts.occurrences += await read(_count_run_occurrences(run_id))
        for chunk in _chunks(list(ids)):
            counts.transitions += await read(_count_transitions(chunk))
    return counts


def _live_activities(ids: Sequence[str]) -> Body[list[str]]:
    return [str(r[0]) for r in (yield _named("prune_live_activities", "activity_id", ids)).rows]


def _delete_runs(cutoff: float, plans: list[tuple[str, Sequence[str]]]) -> Body[PruneCounts]:
    """One write transaction: confirm the runs, keep any with an unfinished activity,
    delete the rest with their activities, transitions and admitting occurrences."""
    counts = PruneCounts()
    confirmed = {
        str(r[0])
        for r in (
            yield _named("prune_confirm_runs", "run_id", [p[0] for p in plans], cutoff=cutoff)
        ).rows
    }
    kept = [(run_id, list(ids)) for run_id, ids in plans if run_id in confirmed]
    named = [activity_id for _, ids in kept for activity_id in ids]
    live: set[str] = set()
    for chunk in _chunks(named):  # one query per chunk of ids, not one per run
        live.update(
            str(r[0]) for r in (yield _named("prune_live_activities", "activity_id", chunk)).rows
        )
    doomed: list[str] = []
    activity_ids: list[str] = []
    for run_id, ids in kept:
        if live.isdisjoint(ids):
            doomed.append(run_id)
            activity_ids.extend(ids)
    if not doomed:
        return counts
    for chunk in _chunks(activity_ids):
        counts.transitions += (
            yield _named("prune_delete_transitions", "activity_id", chunk)
        ).rowcount
        counts.activities += (
            yield _named("prune_delete_activities", "activity_id", chunk)
        ).rowcount
    counts.occurrences = (yield _named("prune_delete_run_occurrences", "run_id", doomed)).rowcount
    counts.runs = (yield _named("prune_delete_runs", "run_id", doomed)).rowcount
    return counts


async def _settle_activities(
    read: Runner, write: Runner, cutoff: float, ids: list[str], dry_run: bool
) -> PruneCounts:
    if not dry_run:
        result: PruneCounts = await write(_delete_activities(cutoff, ids))
        return result
    counts = PruneCounts(activities=len(ids))
    for chunk in _chunks(ids):
        counts.transitions += await read(_count_transitions(chunk))
    return counts


def _delete_activities(cutoff: float, ids: list[str]) -> Body[PruneCounts]:
    """One write transaction: the activities still finished before ``cutoff``, with
    their transitions."""
    counts = PruneCounts()
    for chunk in _chunks(ids):
        found = (yield _named("prune_confirm_activities", "activity_id", chunk, cutoff=cutoff)).rows
        confirmed = [str(r[0]) for r in found]
        if not confirmed:
            continue
        counts.transitions += (
            yield _named("prune_delete_transitions", "activity_id", confirmed)
        ).rowcount
        counts.activities += (
            yield _named("prune_delete_activities", "activity_id", confirmed)
        ).rowcount
    return counts


def _delete_occurrences(cutoff: float, keys: list[tuple[str, float]]) -> Body[int]:
    """One write transaction: each schedule's span of ``keys``, the tests checked again."""
    spans: dict[str, tuple[float, float]] = {}
    for schedule_id, instant in keys:
        low, high = spans.get(schedule_id, (instant, instant))
        spans[schedule_id] = (min(low, instant), max(high, instant))
    deleted = 0
    for schedule_id, (low, high) in spans.items():
        params = {"schedule_id": schedule_id, "low": low, "high": high, "cutoff": cutoff}
        deleted += (yield Query("prune_delete_occurrences", params)).rowcount
    return deleted
