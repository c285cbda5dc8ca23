"""Issue 17: a day-of-week range ending in ``0`` (``5-0``) ends on Sunday, as croniter
reads it and as 004 says (``0`` and ``7`` both mean Sunday): the same schedule as
the range ending in ``7``, never a refused "reversed" range."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from wf.errors import InvalidCronExpression
from wf.scheduler.cron import next_instants, validate_cron

SUNDAY_ENDS = st.integers(min_value=1, max_value=6)


@settings(max_examples=60, deadline=None)
@given(
    low=SUNDAY_ENDS,
    step=st.integers(min_value=1, max_value=3),
    zone=st.sampled_from(["UTC", "Europe/Berlin", "America/New_York"]),
    after=st.datetimes(
        min_value=datetime(2020, 1, 1), max_value=datetime(2035, 1, 1), timezones=st.just(UTC)
    ),
)
def test_a_weekday_range_ending_in_0_means_the_same_as_ending_in_7(
    low: int, step: int, zone: str, after: datetime
) -> None:
    suffix = "" if step == 1 else f"/{step}"
    ends_0 = f"0 9 * * {low}-0{suffix}"
    ends_7 = f"0 9 * * {low}-7{suffix}"
    assert validate_cron(ends_0) == ends_0
    ours = next_instants(ends_0, zone, after=after, count=8)
    assert ours == next_instants(ends_7, zone, after=after, count=8)
    # And it is croniter's own reading of the text as written.
    theirs = croniter(ends_0, after.astimezone(ZoneInfo(zone)), ret_type=datetime, day_or=True)
    assert ours == [theirs.get_next().astimezone(UTC) for _ in range(8)]


def test_5_0_is_friday_to_sunday() -> None:
    after = datetime(2026, 3, 1, tzinfo=UTC)
    got = next_instants("0 0 * * 5-0", after=after, count=6)
    assert [d.isoweekday() for d in got] == [5, 6, 7, 5, 6, 7]
    assert got == next_instants("0 0 * * fri-sun", after=after, count=6)


@pytest.mark.parametrize("expression", ["0 0 * * 6-1", "0 0 * * sat-mon", "0 0 * * 6-5"])
def test_ranges_that_really_wrap_are_still_refused(expression: str) -> None:
    with pytest.raises(InvalidCronExpression, match="reversed"):
        validate_cron(expression)
