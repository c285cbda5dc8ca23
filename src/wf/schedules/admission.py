"""Admission decisions: which occurrences are admitted, skipped, coalesced or held.

Theory of operation
-------------------
Pure, like the scheduler core: :func:`next_step` takes a schedule, ``now``,
the number of its unfinished scheduled runs and the misfire allowance, and
returns the next :class:`Step` (occurrences to record, at most one instant to
admit) after updating the schedule's watermark, candidate and counters in
place. The service stores each step in one transaction (the occurrences, the
schedule and the admitted run together) and calls again until there is no
step, so a crash can never split an admission from its occurrence.

The rules are contract 004's:

* Due instants are the trigger's instants after the ``watermark`` and at or
  before ``now``. The watermark starts at creation (no backfill), moves past
  every instant dealt with (never replayed), and jumps to ``now`` when a
  paused schedule resumes or a schedule is edited (paused spans and time
  before a revision are consumed, never resurrected).
* ``misfire="skip"``: an instant more than the allowance late is
  ``skipped-misfire``; otherwise it is admitted if overlap allows, else
  ``skipped-overlap``.
* ``misfire="latest"``: of the due instants only the newest is kept, as the
  held *candidate*; the older ones are ``coalesced`` and a candidate it
  replaces is ``superseded``. The candidate is admitted as soon as overlap
  allows. So there is never a burst: one admission per schedule at a time.
* Overlap: ``skip`` admits only when the schedule has no unfinished scheduled
  run (admitted, running, interrupted); ``parallel`` admits while fewer than
  ``max_active_runs`` are unfinished. Manual runs and other schedules never
  count.

Capacity (``max_concurrent_runs``) is not decided here: an admitted run waits
in ``admitted`` until the service has an execution slot for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wf.schedules.model import CATCHUP_MAX, Schedule, next_instant_after


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One occurrence to record."""

    instant: float
    """Its resolved UTC instant."""
    status: str
    """A stored occurrence status."""
    detail: str | None = None
    """Why, for people."""


@dataclass(slots=True)
class Step:
    """One transaction's worth of admission."""

    record: list[Occurrence] = field(default_factory=list)
    """Occurrences to store (an admitted one included)."""
    admit: float | None = None
    """The instant admitted in this step, if any (its occurrence is in ``record``)."""


def overlap_room(schedule: Schedule, unfinished: int) -> int:
    """How many more scheduled runs overlap allows now."""
    if schedule.overlap == "parallel":
        return max(0, (schedule.max_active_runs or 1) - unfinished)
    return 0 if unfinished else 1


def due_instants(schedule: Schedule, now: float, limit: int = CATCHUP_MAX) -> list[float]:
    """Instants after the watermark and at or before ``now``, oldest first (at most ``limit``)."""
    found: list[float] = []
    t = next_instant_after(schedule.trigger, schedule.watermark)
    while t is not None and t <= now and len(found) < limit:
        found.append(t)
        t = next_instant_after(schedule.trigger, t)
    return found


def next_step(
    schedule: Schedule, now: float, *, unfinished: int, allowance_s: float
) -> Step | None:
    """The next admission step for ``schedule`` at ``now`` (``None``: nothing to do).

    Call it only for schedules that may admit (not paused, deleted or blocked).
    """
    if schedule.misfire == "latest":
        return _latest(schedule, now, unfinished)
    return _skip(schedule, now, unfinished, allowance_s)


def _skip(schedule: Schedule, now: float, unfinished: int, allowance_s: float) -> Step | None:
    step = Step()
    room = overlap_room(schedule, unfinished)
    for t in due_instants(schedule, now):
        late = now - t
        if late > allowance_s:
            step.record.append(
                Occurrence(
                    t,
                    "skipped-misfire",
                    f"{late:.3f} s late; the misfire allowance is {allowance_s:g} s",
                )
            )
            schedule.skipped_misfire += 1
            schedule.watermark = t
            continue
        if room > 0:
            step.record.append(Occurrence(t, "admitted"))
            step.admit = t
            schedule.watermark = t
            return step
        step.record.append(Occurrence(t, "skipped-overlap", _overlap_detail(schedule, unfinished)))
        schedule.skipped_overlap += 1
        schedule.watermark = t
    return step if step.record else None


def _latest(schedule: Schedule, now: float, unfinished: int) -> Step | None:
    step = Step()
    due = due_instants(schedule, now)
    if due:
        newest = due[-1]
        if schedule.candidate is not None:
            step.record.append(
                Occurrence(
                    schedule.candidate, "superseded", f"replaced by a later instant {newest}"
                )
            )
        step.record.extend(
            Occurrence(t, "coalesced", f"coalesced into the latest instant {newest}")
            for t in due[:-1]
        )
        schedule.candidate = newest
        schedule.candidate_since = now
        schedule.watermark = newest
    # A long catch-up arrives in chunks: admit only once the newest due instant is known.
    more = bool(due) and len(due) == CATCHUP_MAX and _due_after(schedule, due[-1], now)
    if not more and schedule.candidate is not None and overlap_room(schedule, unfinished) > 0:
        step.record.append(Occurrence(schedule.candidate, "admitted"))
        step.admit = schedule.candidate
        schedule.candidate = None
        schedule.candidate_since = None
    return step if step.record or due else None


def _due_after(schedule: Schedule, t: float, now: float) -> bool:
    following = next_instant_after(schedule.trigger, t)
    return following is not None and following <= now


def drop_candidate(schedule: Schedule, why: str) -> list[Occurrence]:
    """Clear a held candidate (pause, delete, a policy edit), recording it as superseded."""
    if schedule.candidate is None:
        return []
    dropped = Occurrence(schedule.candidate, "superseded", why)
    schedule.candidate = None
    schedule.candidate_since = None
    return [dropped]


def next_wake(schedule: Schedule) -> float | None:
    """When this schedule next needs attention: its next instant after the watermark
    (a held candidate waits for a run to finish, which wakes the service itself)."""
    return next_instant_after(schedule.trigger, schedule.watermark)


def _overlap_detail(schedule: Schedule, unfinished: int) -> str:
    if schedule.overlap == "parallel":
        return f"{unfinished} unfinished run(s) reach max_active_runs={schedule.max_active_runs}"
    return "an unfinished scheduled run of this schedule blocks it (overlap=skip)"
