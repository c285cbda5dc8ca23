"""Tests of WF-005 §17 delayed execution: delay specs and the timer heap."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wf.errors import (
    AlreadyExists,
    CorruptRecord,
    InvalidArgument,
    InvalidCronExpression,
    InvalidTimezone,
    NaiveDatetime,
)
from wf.scheduler.cron import next_fire_after
from wf.scheduler.timer import (
    DELAY_MAX_S,
    AbsoluteInstant,
    CalendarSchedule,
    DelayedTimers,
    RelativeDelay,
    ZonedWallTime,
    delay_spec_from_dict,
    resolve_not_before,
)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC).timestamp()


def ts(text: str) -> float:
    """POSIX seconds of an ISO-8601 string with an offset."""
    return datetime.fromisoformat(text).timestamp()


# ---------------------------------------------------------------------------
# Delay specs
# ---------------------------------------------------------------------------


def test_relative_delay_is_seconds_after_now() -> None:
    assert resolve_not_before(RelativeDelay(seconds=90.5), NOW) == NOW + 90.5
    assert resolve_not_before(RelativeDelay(seconds=0), NOW) == NOW


@pytest.mark.parametrize("seconds", [-1.0, -0.001, math.inf, math.nan, DELAY_MAX_S + 1])
def test_relative_delay_must_be_finite_non_negative_and_bounded(seconds: float) -> None:
    with pytest.raises(InvalidArgument) as info:
        RelativeDelay(seconds=seconds)
    assert info.value.details["field"] == "seconds"


def test_absolute_instant_resolves_to_its_timestamp_even_in_the_past() -> None:
    at = datetime.fromisoformat("2026-03-08T03:30:00-04:00")
    assert resolve_not_before(AbsoluteInstant(at=at), NOW) == ts("2026-03-08T07:30:00+00:00")
    past = datetime(2020, 1, 1, tzinfo=UTC)
    assert resolve_not_before(AbsoluteInstant(at=past), NOW) == past.timestamp()


def test_absolute_instant_refuses_a_naive_datetime() -> None:
    with pytest.raises(NaiveDatetime):
        AbsoluteInstant(at=datetime(2026, 3, 8, 3, 30))


def test_zoned_wall_time_resolves_in_its_zone() -> None:
    spec = ZonedWallTime(local=datetime(2026, 6, 1, 12, 0), timezone="Europe/Berlin")
    assert resolve_not_before(spec, NOW) == ts("2026-06-01T10:00:00+00:00")


def test_zoned_wall_time_fold_picks_the_occurrence_in_an_autumn_fold() -> None:
    wall = datetime(2026, 10, 25, 2, 30)  # happens twice in Berlin
    first = ZonedWallTime(local=wall, timezone="Europe/Berlin", fold=0)
    second = ZonedWallTime(local=wall, timezone="Europe/Berlin", fold=1)
    assert resolve_not_before(first, NOW) == ts("2026-10-25T00:30:00+00:00")
    assert resolve_not_before(second, NOW) == ts("2026-10-25T01:30:00+00:00")


def test_zoned_wall_time_fold_changes_nothing_outside_a_fold() -> None:
    wall = datetime(2026, 7, 1, 2, 30)
    zero = ZonedWallTime(local=wall, timezone="America/New_York", fold=0)
    one = ZonedWallTime(local=wall, timezone="America/New_York", fold=1)
    assert resolve_not_before(zero, NOW) == resolve_not_before(one, NOW)


@pytest.mark.parametrize(
    ("wall", "tz", "width"),
    [
        (datetime(2026, 3, 29, 2, 30), "Europe/Berlin", "1h00m"),
        (datetime(2026, 3, 8, 2, 0), "America/New_York", "1h00m"),
        (datetime(2026, 10, 4, 2, 15), "Australia/Lord_Howe", "30m"),
    ],
)
@pytest.mark.parametrize("fold", [0, 1])
def test_zoned_wall_time_in_a_spring_gap_is_rejected_naming_the_gap(
    wall: datetime, tz: str, width: str, fold: int
) -> None:
    with pytest.raises(InvalidArgument) as info:
        ZonedWallTime(local=wall, timezone=tz, fold=fold)
    assert "does not exist" in info.value.message
    assert f"skip {width}" in info.value.message
    assert "DST gap" in info.value.message


def test_zoned_wall_time_just_outside_the_gap_is_fine() -> None:
    before = ZonedWallTime(local=datetime(2026, 3, 29, 1, 59), timezone="Europe/Berlin")
    after = ZonedWallTime(local=datetime(2026, 3, 29, 3, 0), timezone="Europe/Berlin")
    assert resolve_not_before(after, NOW) - resolve_not_before(before, NOW) == 60


def test_zoned_wall_time_refuses_an_aware_local_a_bad_zone_and_a_bad_fold() -> None:
    with pytest.raises(InvalidArgument) as info:
        ZonedWallTime(local=datetime(2026, 6, 1, tzinfo=UTC), timezone="UTC")
    assert "naive" in info.value.message
    with pytest.raises(InvalidTimezone):
        ZonedWallTime(local=datetime(2026, 6, 1), timezone="../etc")
    with pytest.raises(InvalidArgument) as info:
        ZonedWallTime(local=datetime(2026, 6, 1), timezone="UTC", fold=2)
    assert "fold" in info.value.message


def test_calendar_schedule_is_the_next_cron_instant_after_now() -> None:
    spec = CalendarSchedule(cron="30 2 * * *", timezone="Europe/Berlin")
    assert resolve_not_before(spec, NOW) == next_fire_after("30 2 * * *", "Europe/Berlin", NOW)
    assert resolve_not_before(spec, NOW) == ts("2026-03-02T02:30:00+01:00")
    assert resolve_not_before(CalendarSchedule(cron="0 * * * *"), NOW) == NOW + 3600


def test_calendar_schedule_refuses_bad_cron_and_zone() -> None:
    with pytest.raises(InvalidCronExpression):
        CalendarSchedule(cron="* * * * * *")
    with pytest.raises(InvalidTimezone):
        CalendarSchedule(cron="* * * * *", timezone="Mars/Base")


def test_resolve_not_before_refuses_a_non_finite_now() -> None:
    with pytest.raises(InvalidArgument):
        resolve_not_before(RelativeDelay(seconds=1), math.nan)


# ---------------------------------------------------------------------------
# delay_spec_from_dict
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"kind": "relative", "seconds": 30}, RelativeDelay(seconds=30.0)),
        (
            {"kind": "absolute", "at": "2026-03-08T07:30:00Z"},
            AbsoluteInstant(at=datetime(2026, 3, 8, 7, 30, tzinfo=UTC)),
        ),
        (
            {"kind": "zoned", "local": "2026-10-25T02:30:00", "timezone": "Europe/Berlin"},
            ZonedWallTime(local=datetime(2026, 10, 25, 2, 30), timezone="Europe/Berlin"),
        ),
        (
            {
                "kind": "zoned",
                "local": "2026-10-25T02:30:00",
                "timezone": "Europe/Berlin",
                "fold": 1,
            },
            ZonedWallTime(local=datetime(2026, 10, 25, 2, 30), timezone="Europe/Berlin", fold=1),
        ),
        ({"kind": "calendar", "cron": "0 */6 * * *"}, CalendarSchedule(cron="0 */6 * * *")),
    ],
)
def test_delay_spec_from_dict_decodes_every_kind(data: dict[str, object], expected: object) -> None:
    assert delay_spec_from_dict(data) == expected


@pytest.mark.parametrize(
    "spec",
    [
        RelativeDelay(seconds=1.25),
        AbsoluteInstant(at=datetime.fromisoformat("2026-03-08T03:30:00-04:00")),
        ZonedWallTime(local=datetime(2026, 10, 25, 2, 30), timezone="Europe/Berlin", fold=1),
        CalendarSchedule(cron="0 9 * * mon-fri", timezone="America/New_York"),
    ],
)
def test_delay_specs_round_trip_through_json(spec: object) -> None:
    data = msgspec.json.decode(msgspec.json.encode(spec))
    assert delay_spec_from_dict(data) == spec


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"kind": "later", "seconds": 1}, "$.kind"),
        ({"seconds": 1}, "missing required field `kind`"),
        ({"kind": "relative"}, "missing required field `seconds`"),
        ({"kind": "relative", "seconds": "soon"}, "Expected `float`"),
        ({"kind": "relative", "seconds": 1, "unit": "ms"}, "unknown field `unit`"),
        ({"kind": "absolute", "at": "next tuesday"}, "datetime"),
        ({"kind": "relative", "seconds": -5}, "relative delay"),
        ({"kind": "zoned", "local": "2026-03-29T02:30:00", "timezone": "Europe/Berlin"}, "gap"),
    ],
)
def test_delay_spec_from_dict_refuses_bad_input_clearly(
    data: dict[str, object], fragment: str
) -> None:
    with pytest.raises(InvalidArgument) as info:
        delay_spec_from_dict(data)
    assert fragment in info.value.message


def test_delay_spec_from_dict_refuses_a_non_dict() -> None:
    with pytest.raises(InvalidArgument) as info:
        delay_spec_from_dict([1, 2])  # type: ignore[arg-type]
    assert "object" in info.value.message


def test_delay_spec_from_dict_uses_the_specific_error_classes() -> None:
    with pytest.raises(NaiveDatetime):
        delay_spec_from_dict({"kind": "absolute", "at": "2026-03-08T07:30:00"})
    with pytest.raises(InvalidTimezone):
        delay_spec_from_dict({"kind": "zoned", "local": "2026-06-01T00:00:00", "timezone": "X/Y"})
    with pytest.raises(InvalidTimezone):
        delay_spec_from_dict({"kind": "calendar", "cron": "* * * * *", "timezone": ""})
    with pytest.raises(InvalidCronExpression):
        delay_spec_from_dict({"kind": "calendar", "cron": "@reboot"})


# ---------------------------------------------------------------------------
# DelayedTimers
# ---------------------------------------------------------------------------


def test_pop_due_returns_due_ids_in_due_then_seq_order() -> None:
    timers = DelayedTimers()
    timers.add("late", 30.0, 1)
    timers.add("b", 10.0, 5)
    timers.add("a", 10.0, 2)
    timers.add("first", 5.0, 9)
    assert timers.pop_due(4.9) == []
    assert timers.pop_due(10.0) == ["first", "a", "b"]
    assert timers.pop_due(10.0) == []
    assert timers.pop_due(100.0) == ["late"]
    assert len(timers) == 0


def test_cancelled_ids_are_never_returned() -> None:
    timers = DelayedTimers()
    timers.add("x", 1.0, 1)
    timers.add("y", 2.0, 2)
    assert timers.cancel("x") is True
    assert timers.cancel("x") is False
    assert timers.cancel("never") is False
    assert "x" not in timers
    assert len(timers) == 1
    assert timers.next_due_at() == 2.0
    assert timers.pop_due(10.0) == ["y"]


def test_next_due_at_skips_cancelled_entries_and_is_none_when_empty() -> None:
    timers = DelayedTimers()
    assert timers.next_due_at() is None
    timers.add("x", 1.0, 1)
    timers.add("y", 2.0, 2)
    timers.cancel("x")
    assert timers.next_due_at() == 2.0
    timers.cancel("y")
    assert timers.next_due_at() is None


def test_add_is_idempotent_for_the_same_timer_and_refuses_another() -> None:
    timers = DelayedTimers()
    timers.add("x", 5.0, 1)
    timers.add("x", 5.0, 1)
    assert len(timers) == 1
    with pytest.raises(AlreadyExists):
        timers.add("x", 6.0, 1)
    assert timers.pop_due(10.0) == ["x"]


def test_cancel_then_re_add_the_same_timer_pops_once() -> None:
    timers = DelayedTimers()
    timers.add("x", 5.0, 1)
    timers.cancel("x")
    timers.add("x", 5.0, 1)
    assert timers.pop_due(10.0) == ["x"]
    assert timers.next_due_at() is None


def test_a_popped_id_may_be_added_again() -> None:
    timers = DelayedTimers()
    timers.add("x", 5.0, 1)
    assert timers.pop_due(5.0) == ["x"]
    timers.add("x", 50.0, 7)
    assert "x" in timers
    assert timers.pop_due(50.0) == ["x"]


@pytest.mark.parametrize("due", [math.nan, math.inf, -math.inf])
def test_add_refuses_a_non_finite_due(due: float) -> None:
    with pytest.raises(InvalidArgument):
        DelayedTimers().add("x", due, 1)


def test_cancelled_garbage_is_compacted() -> None:
    timers = DelayedTimers()
    for i in range(1000):
        timers.add(f"a{i}", float(i), i)
    for i in range(990):
        timers.cancel(f"a{i}")
    assert len(timers) == 10
    assert len(timers._heap) <= 2 * len(timers) + 1
    assert timers.pop_due(2000.0) == [f"a{i}" for i in range(990, 1000)]


def test_snapshot_and_restore_round_trip() -> None:
    timers = DelayedTimers()
    timers.add("b", 2.0, 2)
    timers.add("a", 2.0, 1)
    timers.add("c", 1.0, 3)
    timers.add("gone", 0.5, 4)
    timers.cancel("gone")
    snapshot = timers.snapshot()
    assert snapshot == [(1.0, 3, "c"), (2.0, 1, "a"), (2.0, 2, "b")]
    restored = DelayedTimers.restore(snapshot)
    assert restored.snapshot() == snapshot
    assert restored.pop_due(5.0) == timers.pop_due(5.0) == ["c", "a", "b"]


def test_restore_refuses_duplicates_and_non_finite_dues() -> None:
    with pytest.raises(CorruptRecord):
        DelayedTimers.restore([(1.0, 1, "x"), (2.0, 2, "x")])
    with pytest.raises(CorruptRecord):
        DelayedTimers.restore([(math.nan, 1, "x")])


ids = st.sampled_from([f"a{i}" for i in range(8)])
operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), ids, st.integers(0, 20), st.integers(0, 5)),
        st.tuples(st.just("cancel"), ids),
        st.tuples(st.just("pop"), st.integers(0, 25)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(ops=operations)
def test_timers_behave_like_a_sorted_list(ops: list[tuple[object, ...]]) -> None:
    timers = DelayedTimers()
    model: list[tuple[float, int, str]] = []
    cancelled: set[str] = set()
    for op in ops:
        if op[0] == "add":
            _, aid, due, seq = op
            assert isinstance(aid, str)
            assert isinstance(due, int)
            assert isinstance(seq, int)
            live = {m[2]: m for m in model}
            if aid in live and live[aid][:2] != (float(due), seq):
                with pytest.raises(AlreadyExists):
                    timers.add(aid, float(due), seq)
            else:
                timers.add(aid, float(due), seq)
                if aid not in live:
                    model.append((float(due), seq, aid))
                    cancelled.discard(aid)
        elif op[0] == "cancel":
            (_, aid) = op
            present = any(m[2] == aid for m in model)
            assert timers.cancel(str(aid)) is present
            model = [m for m in model if m[2] != aid]
            cancelled.add(str(aid))
        else:
            (_, now) = op
            assert isinstance(now, int)
            expected = sorted(m for m in model if m[0] <= now)
            popped = timers.pop_due(float(now))
            assert popped == [m[2] for m in expected]
            assert not set(popped) & cancelled
            model = [m for m in model if m[0] > now]
        assert len(timers) == len(model)
        assert timers.next_due_at() == (min(model)[0] if model else None)
        assert all(m[2] in timers for m in model)
        assert timers.snapshot() == sorted(model)
