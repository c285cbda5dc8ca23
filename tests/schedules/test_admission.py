"""Pure admission decisions (contract 004: misfire, overlap, watermark, DST, one-shot).

Every test builds a :class:`~wf.schedules.model.Schedule` by hand (explicit
zones, watermark set directly) and calls the pure functions of
:mod:`wf.schedules.admission` with explicit ``now`` values: no store, no
clock, no service. ``drive`` mirrors what the service does with a step: it
counts an admitted instant as one more unfinished run of the schedule and
asks again until there is nothing more to do.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from wf.scheduler.cron import next_instants, resolve_zone
from wf.schedules.admission import (
    Occurrence,
    drop_candidate,
    due_instants,
    next_step,
    next_wake,
    overlap_room,
)
from wf.schedules.model import CATCHUP_MAX, CronTrigger, OneShotTrigger, Schedule, Trigger

MONDAY = datetime(2026, 1, 5, tzinfo=UTC)
T0 = MONDAY.timestamp()
"""2026-01-05T00:00:00Z, a Monday: the base of the hand-made timelines."""
HOUR_S = 3600.0
MINUTE_S = 60.0
ALLOWANCE_S = 60.0
"""The default misfire lateness allowance (``server.scheduler.misfire_lateness_s``)."""
HOURLY = CronTrigger(expression="0 * * * *", timezone="UTC")
STEPS_MAX = 10_000
"""Bound on the steps one ``drive`` call takes (a runaway loop fails instead of hanging)."""


def hour(n: float) -> float:
    """T0 plus ``n`` hours."""
    return T0 + n * HOUR_S


def make_schedule(
    trigger: Trigger = HOURLY, *, watermark: float = T0 + 30, **fields: Any
) -> Schedule:
    """A schedule as if created at ``watermark`` (default: 30 s past T0)."""
    return Schedule(
        schedule_id="report",
        deployment_id="report.default",
        tenant="default",
        trigger=trigger,
        watermark=watermark,
        created_at=watermark,
        **fields,
    )


@dataclass
class Drive:
    """What ``drive`` saw: every recorded occurrence and every admission, in order."""

    records: list[Occurrence] = field(default_factory=list)
    admitted: list[float] = field(default_factory=list)
    steps: int = 0


def drive(
    schedule: Schedule, now: float, *, unfinished: int = 0, allowance_s: float = ALLOWANCE_S
) -> Drive:
    """Ask for steps at ``now`` until there is none; an admission adds one unfinished run."""
    seen = Drive()
    for _ in range(STEPS_MAX):
        step = next_step(
            schedule, now, unfinished=unfinished + len(seen.admitted), allowance_s=allowance_s
        )
        if step is None:
            return seen
        seen.steps += 1
        seen.records.extend(step.record)
        if step.admit is not None:
            assert [o.instant for o in step.record if o.status == "admitted"] == [step.admit]
            seen.admitted.append(step.admit)
        elif not step.record:
            return seen
    pytest.fail(f"no quiescence after {STEPS_MAX} steps")


def statuses(records: list[Occurrence]) -> list[tuple[float, str]]:
    return [(o.instant, o.status) for o in records]


# ------------------------------------------------------------------ misfire=skip


def test_misfire_skip_drops_late_instants_and_admits_the_on_time_one() -> None:
    schedule = make_schedule()
    # Down from 00:00:30 to 03:00:30: 01:00 and 02:00 are hours late, 03:00 is 30 s late.
    now = hour(3) + 30
    seen = drive(schedule, now)
    assert statuses(seen.records) == [
        (hour(1), "skipped-misfire"),
        (hour(2), "skipped-misfire"),
        (hour(3), "admitted"),
    ]
    assert seen.admitted == [hour(3)]
    assert schedule.skipped_misfire == 2
    assert schedule.skipped_overlap == 0
    assert schedule.watermark == hour(3)
    late = seen.records[0]
    assert late.detail is not None
    assert "allowance" in late.detail
    # Nothing is due again at the same instant, nor before the next hour.
    assert next_step(schedule, now, unfinished=1, allowance_s=ALLOWANCE_S) is None
    assert next_step(schedule, hour(4) - 1, unfinished=1, allowance_s=ALLOWANCE_S) is None
    assert next_wake(schedule) == hour(4)


@pytest.mark.parametrize(
    ("late_s", "expected"),
    [(0.0, "admitted"), (ALLOWANCE_S, "admitted"), (ALLOWANCE_S + 0.001, "skipped-misfire")],
)
def test_misfire_allowance_boundary(late_s: float, expected: str) -> None:
    """A start is missed only *past* the allowance."""
    schedule = make_schedule()
    seen = drive(schedule, hour(1) + late_s)
    assert statuses(seen.records) == [(hour(1), expected)]
    assert schedule.skipped_misfire == (1 if expected == "skipped-misfire" else 0)


def test_misfire_allowance_is_configurable() -> None:
    schedule = make_schedule()
    seen = drive(schedule, hour(1) + 200, allowance_s=300)
    assert statuses(seen.records) == [(hour(1), "admitted")]
    strict = make_schedule()
    seen = drive(strict, hour(1) + 1, allowance_s=0)
    assert statuses(seen.records) == [(hour(1), "skipped-misfire")]


# ---------------------------------------------------------------------- overlap


def test_overlap_skip_with_an_unfinished_run_skips() -> None:
    schedule = make_schedule()
    step = next_step(schedule, hour(1) + 5, unfinished=1, allowance_s=ALLOWANCE_S)
    assert step is not None
    assert statuses(step.record) == [(hour(1), "skipped-overlap")]
    assert step.admit is None
    assert step.record[0].detail is not None
    assert "overlap" in step.record[0].detail
    assert schedule.skipped_overlap == 1
    assert schedule.skipped_misfire == 0
    assert schedule.watermark == hour(1)  # consumed: never reconsidered
    # The run finishing later does not bring the skipped instant back.
    assert next_step(schedule, hour(1) + 30, unfinished=0, allowance_s=ALLOWANCE_S) is None
    seen = drive(schedule, hour(2) + 5)
    assert statuses(seen.records) == [(hour(2), "admitted")]


def test_overlap_parallel_admits_while_unfinished_below_max_active_runs() -> None:
    schedule = make_schedule(overlap="parallel", max_active_runs=2)
    for n, unfinished in ((1, 0), (2, 1)):
        step = next_step(schedule, hour(n) + 5, unfinished=unfinished, allowance_s=ALLOWANCE_S)
        assert step is not None
        assert statuses(step.record) == [(hour(n), "admitted")]
        assert step.admit == hour(n)
    step = next_step(schedule, hour(3) + 5, unfinished=2, allowance_s=ALLOWANCE_S)
    assert step is not None
    assert statuses(step.record) == [(hour(3), "skipped-overlap")]
    assert step.record[0].detail is not None
    assert "max_active_runs=2" in step.record[0].detail
    assert schedule.skipped_overlap == 1


def test_overlap_parallel_two_instants_due_at_once_admit_one_per_step() -> None:
    schedule = make_schedule(
        CronTrigger(expression="*/5 * * * *", timezone="UTC"),
        overlap="parallel",
        max_active_runs=2,
    )
    # 00:05 and 00:10 are both due, and within a 10-minute allowance, at 00:10:00.
    seen = drive(schedule, T0 + 10 * MINUTE_S, allowance_s=10 * MINUTE_S)
    assert seen.admitted == [T0 + 5 * MINUTE_S, T0 + 10 * MINUTE_S]
    assert seen.steps == 2


def test_overlap_room() -> None:
    skip = make_schedule()
    assert [overlap_room(skip, n) for n in (0, 1, 5)] == [1, 0, 0]
    parallel = make_schedule(overlap="parallel", max_active_runs=3)
    assert [overlap_room(parallel, n) for n in (0, 1, 2, 3, 7)] == [3, 2, 1, 0, 0]
    # Lowering the limit below the unfinished count blocks, it never goes negative.
    parallel.max_active_runs = 1
    assert overlap_room(parallel, 3) == 0


# ------------------------------------------------------------------- misfire=latest


def test_latest_after_downtime_coalesces_all_but_the_newest_and_holds_it() -> None:
    schedule = make_schedule(misfire="latest")
    now = hour(10) + 17  # down for ten instants; one scheduled run still unfinished
    seen = drive(schedule, now, unfinished=1)
    assert statuses(seen.records) == [(hour(n), "coalesced") for n in range(1, 10)]
    assert all(o.detail and str(hour(10)) in o.detail for o in seen.records)
    assert seen.admitted == []
    assert schedule.candidate == hour(10)
    assert schedule.candidate_since == now
    assert schedule.watermark == hour(10)
    # Still blocked: nothing new to record, the candidate stays held.
    assert next_step(schedule, now + 60, unfinished=1, allowance_s=ALLOWANCE_S) is None
    assert schedule.candidate == hour(10)
    # Misfire=latest never counts skips.
    assert (schedule.skipped_misfire, schedule.skipped_overlap) == (0, 0)


def test_latest_supersedes_an_older_held_candidate() -> None:
    schedule = make_schedule(misfire="latest", candidate=hour(1), candidate_since=hour(1))
    schedule.watermark = hour(1)
    seen = drive(schedule, hour(3) + 5, unfinished=1)
    assert statuses(seen.records) == [(hour(1), "superseded"), (hour(2), "coalesced")]
    assert schedule.candidate == hour(3)


def test_latest_admits_the_candidate_once_overlap_has_room_and_never_bursts() -> None:
    schedule = make_schedule(misfire="latest", overlap="parallel", max_active_runs=5)
    # Ten missed instants, plenty of overlap room: still exactly one admission.
    seen = drive(schedule, hour(10) + 17, unfinished=0)
    assert seen.admitted == [hour(10)]
    assert [o.status for o in seen.records] == ["coalesced"] * 9 + ["admitted"]
    assert schedule.candidate is None

    held = make_schedule(misfire="latest")
    assert drive(held, hour(4) + 1, unfinished=1).admitted == []
    assert held.candidate == hour(4)
    # The run finishes mid-hour: the candidate goes at once, alone.
    seen = drive(held, hour(4) + 1200, unfinished=0)
    assert statuses(seen.records) == [(hour(4), "admitted")]
    assert seen.admitted == [hour(4)]
    assert held.candidate is None
    assert held.candidate_since is None
    assert next_step(held, hour(4) + 1200, unfinished=1, allowance_s=ALLOWANCE_S) is None


def test_latest_ignores_the_lateness_allowance() -> None:
    schedule = make_schedule(misfire="latest")
    seen = drive(schedule, hour(2) + 30 * MINUTE_S)  # 01:00 and a 30-minute-late 02:00
    assert statuses(seen.records) == [(hour(1), "coalesced"), (hour(2), "admitted")]


def test_latest_after_a_downtime_longer_than_catchup_max_admits_only_the_newest() -> None:
    every_minute = CronTrigger(expression="* * * * *", timezone="UTC")
    schedule = make_schedule(
        every_minute, watermark=T0, misfire="latest", overlap="parallel", max_active_runs=3
    )
    missed = CATCHUP_MAX * 2 + 500
    now = T0 + missed * MINUTE_S + 5
    seen = drive(schedule, now)
    newest = T0 + missed * MINUTE_S
    # One admission, of the newest instant, even though the catch-up is read in chunks.
    assert seen.admitted == [newest]
    decided = [o.instant for o in seen.records]
    assert sorted(decided) == [T0 + m * MINUTE_S for m in range(1, missed + 1)]
    assert len(set(decided)) == len(decided)
    assert {o.status for o in seen.records if o.instant != newest} <= {"coalesced", "superseded"}
    assert schedule.candidate is None
    assert schedule.watermark == newest


# ---------------------------------------------------------- watermark / creation


def test_creation_watermark_means_no_backfill() -> None:
    created = hour(10) + 30 * MINUTE_S  # 10:30; 00:00 .. 10:00 are before the creation
    schedule = make_schedule(watermark=created)
    assert due_instants(schedule, hour(11) - 1) == []
    assert next_step(schedule, hour(11) - 1, unfinished=0, allowance_s=ALLOWANCE_S) is None
    assert due_instants(schedule, hour(11)) == [hour(11)]
    seen = drive(schedule, hour(11) + 2)
    assert statuses(seen.records) == [(hour(11), "admitted")]
    # Latest too: nothing before the creation is ever a candidate.
    latest = make_schedule(watermark=created, misfire="latest")
    seen = drive(latest, hour(11) + 2)
    assert statuses(seen.records) == [(hour(11), "admitted")]


def test_an_instant_exactly_at_the_watermark_is_consumed() -> None:
    schedule = make_schedule(watermark=hour(2))
    assert due_instants(schedule, hour(3)) == [hour(3)]


def test_due_instants_respects_its_limit() -> None:
    schedule = make_schedule(watermark=T0)
    assert due_instants(schedule, hour(10), limit=3) == [hour(1), hour(2), hour(3)]


# --------------------------------------------------------------------------- DST


def croniter_instants(expression: str, zone: str, after: datetime, until: datetime) -> list[float]:
    """Instants straight from croniter (zone-aware start, ``day_or=True``), after..until."""
    it = croniter(expression, after.astimezone(resolve_zone(zone)), ret_type=datetime, day_or=True)
    found: list[float] = []
    while (t := it.get_next()).astimezone(UTC) <= until:
        found.append(t.astimezone(UTC).timestamp())
    return found


def wf_instants(expression: str, zone: str, after: datetime, until: datetime) -> list[float]:
    """Instants from :func:`wf.scheduler.cron.next_instants`, after..until."""
    return [
        d.timestamp() for d in next_instants(expression, zone, after=after, count=200) if d <= until
    ]


BERLIN_GAP = (datetime(2026, 3, 28, 20, tzinfo=UTC), datetime(2026, 3, 29, 6, tzinfo=UTC))
"""Around 2026-03-29 02:00 CET -> 03:00 CEST (02:xx local does not exist)."""
BERLIN_FOLD = (datetime(2026, 10, 24, 20, tzinfo=UTC), datetime(2026, 10, 25, 6, tzinfo=UTC))
"""Around 2026-10-25 03:00 CEST -> 02:00 CET (02:xx local happens twice)."""


@pytest.mark.parametrize("window", [BERLIN_GAP, BERLIN_FOLD], ids=["march-gap", "october-fold"])
@pytest.mark.parametrize("expression", ["0 * * * *", "30 2 * * *", "*/30 * * * *"])
def test_dst_instants_are_exactly_croniters(
    window: tuple[datetime, datetime], expression: str
) -> None:
    after, until = window
    trigger = CronTrigger(expression=expression, timezone="Europe/Berlin")
    expected = croniter_instants(expression, "Europe/Berlin", after, until)
    assert expected == wf_instants(expression, "Europe/Berlin", after, until)
    # All at once (a downtime) ...
    schedule = make_schedule(trigger, watermark=after.timestamp())
    assert due_instants(schedule, until.timestamp()) == expected
    # ... and instant by instant, as a live service sees them: each admitted once.
    live = make_schedule(trigger, watermark=after.timestamp())
    admitted: list[float] = []
    for t in expected:
        seen = drive(live, t + 1)
        assert statuses(seen.records) == [(t, "admitted")]
        admitted += seen.admitted
    assert admitted == expected
    assert len(set(admitted)) == len(admitted)


def test_berlin_hourly_gap_and_fold_counts() -> None:
    """The local day of the gap has 23 hourly instants, the day of the fold 25."""
    trigger = CronTrigger(expression="0 * * * *", timezone="Europe/Berlin")
    berlin = resolve_zone("Europe/Berlin")
    for day, count in ((datetime(2026, 3, 29), 23), (datetime(2026, 10, 25), 25)):
        start = day.replace(tzinfo=berlin).astimezone(UTC)
        end = (day + timedelta(days=1)).replace(tzinfo=berlin).astimezone(UTC)
        schedule = make_schedule(trigger, watermark=start.timestamp() - 1)
        found = due_instants(schedule, end.timestamp() - 1)
        assert len(found) == count
        # Real time between consecutive instants is always one hour: none invented, none lost.
        assert {b - a for a, b in itertools.pairwise(found)} == {HOUR_S}
    gap_locals = [
        datetime.fromtimestamp(t, UTC).astimezone(berlin).strftime("%H:%M")
        for t in due_instants(
            make_schedule(trigger, watermark=BERLIN_GAP[0].timestamp()),
            BERLIN_GAP[1].timestamp(),
        )
    ]
    assert "02:00" not in gap_locals
    fold_locals = [
        datetime.fromtimestamp(t, UTC).astimezone(berlin).strftime("%H:%M")
        for t in due_instants(
            make_schedule(trigger, watermark=BERLIN_FOLD[0].timestamp()),
            BERLIN_FOLD[1].timestamp(),
        )
    ]
    assert fold_locals.count("02:00") == 2


# ---------------------------------------------------------------------- one-shot


def test_one_shot_fires_once_and_never_again() -> None:
    at = datetime(2026, 1, 5, 9, 30, tzinfo=UTC).astimezone(resolve_zone("Europe/Berlin"))
    trigger = OneShotTrigger(at=at.isoformat())
    schedule = make_schedule(trigger)
    assert next_wake(schedule) == at.timestamp()
    assert next_step(schedule, at.timestamp() - 1, unfinished=0, allowance_s=ALLOWANCE_S) is None
    seen = drive(schedule, at.timestamp() + 2)
    assert statuses(seen.records) == [(at.timestamp(), "admitted")]
    assert next_wake(schedule) is None
    for later in (at.timestamp() + 3, at.timestamp() + 86_400, at.timestamp() + 10**8):
        assert next_step(schedule, later, unfinished=0, allowance_s=ALLOWANCE_S) is None
        assert due_instants(schedule, later) == []


@pytest.mark.parametrize("misfire", ["skip", "latest"])
def test_one_shot_missed_by_a_downtime(misfire: str) -> None:
    at = hour(1)
    schedule = make_schedule(
        OneShotTrigger(at=datetime.fromtimestamp(at, UTC).isoformat()), misfire=misfire
    )
    seen = drive(schedule, hour(5))
    expected = "skipped-misfire" if misfire == "skip" else "admitted"
    assert statuses(seen.records) == [(at, expected)]
    assert drive(schedule, hour(6)).records == []


# ----------------------------------------------------------------- drop_candidate


def test_drop_candidate_records_it_as_superseded() -> None:
    schedule = make_schedule(misfire="latest", candidate=hour(3), candidate_since=hour(3) + 1)
    dropped = drop_candidate(schedule, "dropped by pause")
    assert dropped == [Occurrence(hour(3), "superseded", "dropped by pause")]
    assert schedule.candidate is None
    assert schedule.candidate_since is None
    assert drop_candidate(schedule, "dropped by pause") == []


# ------------------------------------------------------------------------ property

EVENTS = st.lists(
    st.one_of(
        st.tuples(st.just("advance"), st.floats(min_value=1, max_value=4 * HOUR_S)),
        st.tuples(st.just("finish"), st.integers(min_value=0, max_value=10)),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(
    events=EVENTS,
    overlap=st.sampled_from(["skip", "parallel"]),
    max_active_runs=st.integers(min_value=1, max_value=3),
    misfire=st.sampled_from(["skip", "latest"]),
    expression=st.sampled_from(["*/10 * * * *", "0 * * * *", "15,45 * * * *"]),
    allowance_s=st.sampled_from([0.0, 60.0, 900.0]),
)
def test_admission_invariants_over_random_event_sequences(
    events: list[tuple[str, float]],
    overlap: str,
    max_active_runs: int,
    misfire: str,
    expression: str,
    allowance_s: float,
) -> None:
    limit = max_active_runs if overlap == "parallel" else 1
    schedule = make_schedule(
        CronTrigger(expression=expression, timezone="UTC"),
        overlap=overlap,
        max_active_runs=max_active_runs if overlap == "parallel" else None,
        misfire=misfire,
    )
    created = schedule.watermark
    now = created
    unfinished: list[float] = []
    status_of: dict[float, str] = {}
    admitted: list[float] = []
    for kind, value in events:
        if kind == "finish":
            if unfinished:
                unfinished.pop(int(value) % len(unfinished))
        else:
            now += value
        for _ in range(STEPS_MAX):
            step = next_step(schedule, now, unfinished=len(unfinished), allowance_s=allowance_s)
            if step is None:
                break
            for o in step.record:
                assert created < o.instant <= now, "no backfill, nothing from the future"
                assert o.instant not in status_of, f"instant {o.instant} decided twice"
                assert o.instant != schedule.candidate, "a held candidate is not recorded"
                status_of[o.instant] = o.status
            if step.admit is not None:
                admitted.append(step.admit)
                unfinished.append(step.admit)
                assert len(unfinished) <= limit, "admissions exceed max_active_runs"
            elif not step.record:
                break
        else:
            pytest.fail("admission never settled")
        assert schedule.candidate is None or misfire == "latest"
        if schedule.candidate is not None:
            assert schedule.candidate <= now
            assert len(unfinished) >= limit, "a candidate is held only while overlap blocks"
    assert len(admitted) == len(set(admitted))
    assert all(status_of[t] == "admitted" for t in admitted)
    due = due_instants(make_schedule(schedule.trigger, watermark=created), now)
    held = [] if schedule.candidate is None else [schedule.candidate]
    assert sorted([*status_of, *held]) == due, "every due instant has exactly one outcome"
    allowed = (
        {"admitted", "coalesced", "superseded"}
        if misfire == "latest"
        else {"admitted", "skipped-misfire", "skipped-overlap"}
    )
    assert set(status_of.values()) <= allowed
    assert schedule.skipped_misfire == list(status_of.values()).count("skipped-misfire")
    assert schedule.skipped_overlap == list(status_of.values()).count("skipped-overlap")
