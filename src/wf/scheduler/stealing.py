"""Work stealing (WF-005 §16): an idle worker takes unstarted work from a busy one.

Theory of operation
-------------------
Only leases that are granted but not started (``LEASED``) can move: an
``EXECUTING`` lease is never touched ("respect active leases"). A victim is
a live worker holding at least ``min_victim_backlog`` such leases that the
thief is eligible to run; the most loaded victim is robbed first (ties: the
larger unstarted backlog, then the older registration). From the victim the
thief takes the *newest* unstarted lease, so the victim keeps the work it
was given first and submission order is preserved as far as it can be;
activities with an ordering key are never stolen, since the dispatcher lets
only one activity per key be in flight and moving it could not reorder
anything, but a thief gaining nothing from it either. Nor is an early grant
that waits for its ``not_before``: its victim holds it in a slot to start it
on time, so moving it gains nothing, and a revocation that reached the victim
after the instant would see it run on both workers. Each activity moves at
most ``max_steals_per_activity`` times, so no activity bounces for ever and
none starves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from wf.scheduler.config import StealingConfig
from wf.scheduler.model import Activity, ActivityState, WorkerState, WorkerStatus

_LEASED = ActivityState.LEASED


def choose_steal(
    thief: WorkerState,
    workers: Iterable[WorkerState],
    activities: dict[str, Activity],
    eligible: Callable[[WorkerState, Activity], bool],
    config: StealingConfig,
    now: float,
) -> tuple[WorkerState, Activity] | None:
    """The (victim, activity) the thief should take at ``now``, or ``None``."""
    best: tuple[float, int, int] | None = None
    choice: tuple[WorkerState, Activity] | None = None
    for victim in workers:
        if victim is thief or victim.status is not WorkerStatus.ACTIVE:
            continue
        unstarted = [
            a
            for aid in victim.leases
            if (a := activities[aid]).state is _LEASED
            and a.ordering_key is None
            and a.steals < config.max_steals_per_activity
            and (a.not_before is None or a.not_before <= now)
        ]
        if len(unstarted) < config.min_victim_backlog:
            continue
        candidate = next((a for a in reversed(unstarted) if eligible(thief, a)), None)
        if candidate is None:
            continue
        rank = (-victim.load, -len(unstarted), victim.seq)
        if best is None or rank < best:
            best, choice = rank, (victim, candidate)
    return choice
