"""Cron expressions: validation, time zones and fire instants (contract 004).

Theory of operation
-------------------
A schedule is a five-field Unix cron expression (``minute hour day-of-month
month day-of-week``) plus an IANA time zone, default UTC. The expression is
read as *wall time* in that zone; fire instants leave this module as aware
UTC datetimes (or POSIX seconds: :func:`next_fire_after`), and the zone name
stays with the definition.

**Grammar.** :func:`validate_cron` owns the grammar: ``*``, numbers, month
and weekday names (``jan``..``dec``, ``sun``..``sat``, case-insensitive),
ranges ``a-b``, steps ``*/n`` and ``a-b/n``, and comma lists. Day-of-week
``0`` and ``7`` are both Sunday; ``sun`` or ``0`` as the end of a range that
starts later is 7, so ``fri-sun`` and ``5-0`` mean ``5-7`` (croniter's
reading). Everything else is refused: six/seven-field forms (seconds, years),
``@`` nicknames (``@reboot`` has no meaning here; write ``@daily`` as
``0 0 * * *``), croniter's extensions (``L``, ``W``, ``#``, ``?``, ``H``,
``R`` -- the last one is random), ``a/n`` without a range, reversed
(wrapping) ranges, and a day of month that never occurs in the named months.

**Calendar.** croniter owns calendar resolution, including DST gaps and
folds (contract 004); there is no custom calendar filtering. The fire
instants are exactly what croniter yields -- given the zone-aware start,
``day_or=True`` and our canonical expression -- converted to UTC. We do not
hand croniter the user's text: :func:`validate_cron` parses each field into
its set of values and croniter gets a canonical numeric form (``*`` or a comma
list). That is validation, not calendar filtering: it keeps the grammar ours
and sidesteps croniter quirks -- it reads an equal range such as ``5-5`` or
``mon-mon`` as the *whole* cycle, and resolves ``7`` and wrapped ranges
through special cases. croniter is always given an explicit start, so it
never reads the clock.

**Day of month and day of week** combine as POSIX and Vixie cron specify: if
either field is exactly ``*`` the other alone restricts the day; if both are
restricted a day matches when *either* matches (OR; croniter's ``day_or=True``).
We do not reproduce Vixie's quirk that makes any field *starting* with ``*``
(``*/2``) count as unrestricted. A restricted field that covers its whole
range (``1-31``, ``0-6``) under OR allows every day, so we pass ``*`` for both.

**DST** is croniter's, per 004. What croniter 7 does with zoneinfo (pinned
by the tests):

* *Gap* (spring forward, e.g. 02:30 does not exist on 2026-03-08 in
  America/New_York or 2026-03-29 in Europe/Berlin): a job with a fixed hour
  fires once, at the first wall time after the gap (03:00 local, the instant
  of the transition). A job whose hour field covers every hour (``*``,
  ``*/1``) has no occurrence in the missing hour; its cadence in real time is
  unchanged (01:30 -> 03:30 is one hour).
* *Fold* (fall back, e.g. 02:30 occurs twice on 2026-10-25 in Europe/Berlin,
  01:30 twice on 2026-11-01 in America/New_York): croniter yields **both**
  instants of an ambiguous wall time, so a daily ``30 2 * * *`` job in
  Europe/Berlin fires at 2026-10-25T00:30Z and again at 01:30Z, and a
  ``*/30`` job runs through the repeated hour twice. Each is a distinct UTC
  instant, so each is its own occurrence and instants still strictly
  increase. Operators who do not want the repeat pick a time outside the
  repeated hour or a UTC schedule.

**Users.** Deployment schedules (:mod:`wf.schedules`, the one cron engine, which
covers WF-005 §18's recurring triggers) and calendar delays of activities
(:class:`~wf.scheduler.timer.CalendarSchedule`) resolve their instants here;
``wf cron next`` prints them. The core keeps no table of recurring triggers.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Final, NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from croniter import CroniterError, croniter

from wf.errors import (
    InvalidArgument,
    InvalidCronExpression,
    InvalidTimezone,
    NaiveDatetime,
)

__all__ = [
    "COUNT_MAX",
    "EXPRESSION_LENGTH_MAX",
    "next_fire_after",
    "next_instants",
    "require_aware",
    "resolve_zone",
    "validate_cron",
]

EXPRESSION_LENGTH_MAX: Final = 1024
"""Longest cron expression accepted (a list of every minute is ~170 characters)."""
COUNT_MAX: Final = 10_000
"""Most instants one :func:`next_instants` call computes."""
ZONE_NAME_LENGTH_MAX: Final = 255
"""Longest time zone name accepted."""

_ALLOWED_CHARS_RE: Final = re.compile(r"[A-Za-z0-9*,/\- \t]*", re.ASCII)
_ITEM_RE: Final = re.compile(
    r"(?:(?P<star>\*)|(?P<low>[a-z0-9]+)(?:-(?P<high>[a-z0-9]+))?)(?:/(?P<step>[0-9]+))?",
    re.ASCII,
)
_ZONE_RE: Final = re.compile(r"[A-Za-z0-9_+\-]+(?:/[A-Za-z0-9_+\-]+)*", re.ASCII)
# Names that resolve to whatever the host is configured with: a schedule must
# mean the same thing on every node.
_HOST_ZONE_ALIASES: Final = frozenset({"localtime", "posixrules"})

_MONTH_NAMES: Final = {
    name: number
    for number, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
        start=1,
    )
}
_DOW_NAMES: Final = {
    name: number for number, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))
}


class _Field(NamedTuple):
    name: str
    low: int
    high: int
    names: dict[str, int]


_FIELDS: Final = (
    _Field("minute", 0, 59, {}),
    _Field("hour", 0, 23, {}),
    _Field("day-of-month", 1, 31, {}),
    _Field("month", 1, 12, _MONTH_NAMES),
    _Field("day-of-week", 0, 7, _DOW_NAMES),
)
_DOM: Final = 2
_DOW: Final = 4
_DOW_CYCLE: Final = 7


class _Compiled(NamedTuple):
    normalized: str
    """What the user wrote, whitespace collapsed and lower-cased."""
    canonical: str
    """What croniter is given: ``*`` or a numeric comma list per field."""


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------


def _invalid(expression: str, reason: str, **details: object) -> InvalidCronExpression:
    return InvalidCronExpression(
        f"invalid cron expression {expression!r}: {reason}", expression=expression, **details
    )


def _parse_value(expression: str, field: _Field, token: str) -> int:
    if token.isdigit():
        value = int(token)
    elif token in field.names:
        value = field.names[token]
    elif field.names:
        raise _invalid(
            expression,
            f"{field.name} value {token!r} is not a number or a three-letter name",
            field=field.name,
        )
    else:
        raise _invalid(
            expression,
            f"{field.name} value {token!r} is not a number "
            "(croniter extensions L, W, #, ?, H and R are not accepted)",
            field=field.name,
        )
    if not field.low <= value <= field.high:
        raise _invalid(
            expression,
            f"{field.name} value {token!r} is outside {field.low}-{field.high}",
            field=field.name,
        )
    return value


def _parse_field(expression: str, field: _Field, text: str) -> frozenset[int]:
    """The set of values one field allows (day of week folded to 0..6)."""
    values: set[int] = set()
    for item in text.split(","):
        match = _ITEM_RE.fullmatch(item)
        if match is None:
            raise _invalid(
                expression, f"{field.name} item {item!r} is not valid cron", field=field.name
            )
        step = 1
        if match["step"] is not None:
            step = int(match["step"])
            span = field.high - field.low + 1
            if not 1 <= step <= span:
                raise _invalid(
                    expression,
                    f"{field.name} step {step} is outside 1-{span}",
                    field=field.name,
                )
        if match["star"] is not None:
            low, high = field.low, field.high
        elif match["high"] is None:
            if match["step"] is not None:
                raise _invalid(
                    expression,
                    f"{field.name} item {item!r}: a step needs a range or '*' "
                    f"(write {match['low']}-{field.high}/{step})",
                    field=field.name,
                )
            low = high = _parse_value(expression, field, match["low"])
        else:
            low = _parse_value(expression, field, match["low"])
            high = _parse_value(expression, field, match["high"])
            if field is _FIELDS[_DOW] and high == 0 and low > 0:
                # ``fri-sun`` and ``5-0``: Sunday (``sun`` or ``0``) closing a range
                # that starts later is 7, as croniter reads it (004: 0 and 7 are
                # both Sunday); the range ends the week, it never wraps.
                high = _DOW_CYCLE
            if low > high:
                raise _invalid(
                    expression,
                    f"{field.name} range {item!r} is reversed; cron ranges do not wrap",
                    field=field.name,
                )
        values.update(range(low, high + 1, step))
    if field is _FIELDS[_DOW]:
        return frozenset(value % _DOW_CYCLE for value in values)
    return frozenset(values)


def _field_size(field: _Field) -> int:
    return _DOW_CYCLE if field is _FIELDS[_DOW] else field.high - field.low + 1


def _canonical_field(field: _Field, text: str, values: frozenset[int]) -> str:
    if text == "*" or len(values) == _field_size(field):
        return "*"
    return ",".join(str(value) for value in sorted(values))


@functools.lru_cache(maxsize=4096)
def _compile(expression: str) -> _Compiled:
    if not expression.strip():
        raise _invalid(expression, "the expression is empty")
    if expression.lstrip().startswith("@"):
        raise _invalid(
            expression,
            "@-nicknames (@reboot, @daily, ...) are not supported; "
            "write five fields, e.g. '0 0 * * *' for @daily",
        )
    if len(expression) > EXPRESSION_LENGTH_MAX:
        raise _invalid(expression, f"longer than {EXPRESSION_LENGTH_MAX} characters")
    if _ALLOWED_CHARS_RE.fullmatch(expression) is None:
        bad = next(ch for ch in expression if _ALLOWED_CHARS_RE.fullmatch(ch) is None)
        raise _invalid(
            expression,
            f"unexpected character {bad!r} (five-field cron uses digits, names, "
            "'*', ',', '-', '/' and spaces)",
        )
    texts = expression.lower().split()
    if len(texts) in (6, 7):
        raise _invalid(
            expression,
            f"{len(texts)} fields; only five-field Unix cron "
            "(minute hour day-of-month month day-of-week) is accepted, "
            "without seconds or years",
        )
    if len(texts) != len(_FIELDS):
        raise _invalid(
            expression,
            f"{len(texts)} field(s); expected five (minute hour day-of-month month day-of-week)",
        )
    sets = [_parse_field(expression, f, t) for f, t in zip(_FIELDS, texts, strict=True)]
    canonical = [_canonical_field(f, t, s) for f, t, s in zip(_FIELDS, texts, sets, strict=True)]
    dom_restricted = texts[_DOM] != "*"
    dow_restricted = texts[_DOW] != "*"
    if dom_restricted and dow_restricted and "*" in (canonical[_DOM], canonical[_DOW]):
        # OR with a field that allows every day allows every day. Saying so
        # with two stars keeps croniter from collapsing only one of them,
        # which would turn the OR into an AND.
        canonical[_DOM] = canonical[_DOW] = "*"
    compiled = _Compiled(" ".join(texts), " ".join(canonical))
    try:
        # ``strict`` makes croniter refuse a day of month that no named month
        # has (``31 2``); it only applies when the day of week is ``*``,
        # because otherwise the OR keeps the schedule alive.
        croniter.expand(compiled.canonical, strict=canonical[_DOW] == "*")
    except CroniterError as exc:
        raise _invalid(
            expression, f"the day of month never occurs in the months given ({exc})"
        ) from None
    return compiled


def validate_cron(expression: str) -> str:
    """Check a five-field Unix cron expression and return its normalized form.

    The normalized form has single spaces between fields and lower-case names;
    two expressions with the same normalized form are the same schedule.

    Raises:
        InvalidCronExpression: the expression is empty, has other than five
            fields, uses syntax outside five-field Unix cron, or names a day
            that never occurs. ``details["expression"]`` is the input.
    """
    if not isinstance(expression, str):
        raise InvalidCronExpression(
            f"a cron expression must be a string, not {type(expression).__name__}",
            expression=repr(expression),
        )
    return _compile(expression).normalized


# ---------------------------------------------------------------------------
# Zones and datetimes
# ---------------------------------------------------------------------------


def resolve_zone(name: str) -> ZoneInfo:
    """Load the IANA time zone ``name`` (e.g. ``"Europe/Berlin"``, ``"UTC"``).

    Raises:
        InvalidTimezone: empty, malformed (``"../etc"``, absolute paths), a
            host-dependent alias (``"localtime"``) or not a known zone.
    """
    if not isinstance(name, str):
        raise InvalidTimezone(
            f"a time zone must be a string, not {type(name).__name__}", timezone=repr(name)
        )
    if (
        len(name) > ZONE_NAME_LENGTH_MAX
        or _ZONE_RE.fullmatch(name) is None
        or name in _HOST_ZONE_ALIASES
    ):
        raise InvalidTimezone(f"{name!r} is not an IANA time zone name", timezone=name)
    # Membership first: on a case-insensitive file system ZoneInfo would load
    # "europe/berlin", so the same schedule would be valid on one node only.
    if name not in _known_zones():
        raise InvalidTimezone(f"unknown time zone {name!r}", timezone=name)
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidTimezone(f"unknown time zone {name!r}", timezone=name) from None


@functools.cache
def _known_zones() -> frozenset[str]:
    """Every IANA zone key on the zone path or in the tzdata package (read once)."""
    return frozenset(available_timezones())


def require_aware(dt: datetime, field: str) -> datetime:
    """Return ``dt`` converted to UTC; refuse a naive datetime.

    Raises:
        NaiveDatetime: ``dt`` has no UTC offset (wf never guesses a zone).
    """
    if not isinstance(dt, datetime):
        raise InvalidArgument(f"{field} must be a datetime, not {type(dt).__name__}", field=field)
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise NaiveDatetime(
            f"{field} has no UTC offset; give one (e.g. 2026-03-08T07:30:00+00:00)",
            field=field,
            value=dt.isoformat(),
        )
    try:
        return dt.astimezone(UTC)
    except OverflowError:
        raise InvalidArgument(f"{field} is out of range", field=field) from None


# ---------------------------------------------------------------------------
# Fire instants
# ---------------------------------------------------------------------------


def _instants_after(expression: str, timezone: str, after: datetime) -> Iterator[datetime]:
    """Fire instants (aware UTC) strictly after ``after``.

    ``after`` must be aware. The iterator is infinite in principle; croniter
    gives up after 50 years without a match, which we report as invalid.
    """
    compiled = _compile(validate_cron(expression))
    zone = resolve_zone(timezone)
    try:
        start = after.astimezone(zone)
        cron = croniter(compiled.canonical, start, ret_type=datetime, day_or=True)
    except (OverflowError, ValueError) as exc:
        raise InvalidArgument(f"cannot start a schedule at {after!r}: {exc}") from None
    while True:
        try:
            local = cron.get_next()
        except (CroniterError, OverflowError, ValueError) as exc:
            raise InvalidArgument(
                f"no fire instant of {expression!r} in {timezone} near {after.isoformat()}: {exc}",
                expression=expression,
                timezone=timezone,
            ) from None
        yield local.astimezone(UTC)


def _check_count(count: int) -> None:
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= COUNT_MAX:
        raise InvalidArgument(f"count must be an integer in 1..{COUNT_MAX}, got {count!r}")


def next_instants(
    expression: str, timezone: str = "UTC", *, after: datetime, count: int = 1
) -> list[datetime]:
    """The next ``count`` fire instants strictly after ``after``, as aware UTC datetimes.

    ``expression`` is read as wall time in the IANA zone ``timezone``; see the
    module docstring for DST gaps and folds.

    Raises:
        InvalidCronExpression: bad expression.
        InvalidTimezone: bad zone.
        NaiveDatetime: ``after`` has no offset.
        InvalidArgument: ``count`` outside ``1..COUNT_MAX``, or no instant
            is representable.
    """
    _check_count(count)
    validate_cron(expression)
    resolve_zone(timezone)
    start = require_aware(after, "after")
    instants = _instants_after(expression, timezone, start)
    return [next(instants) for _ in range(count)]


def _from_posix(seconds: float, field: str) -> datetime:
    if not math.isfinite(seconds):
        raise InvalidArgument(f"{field} must be finite, got {seconds!r}", field=field)
    try:
        # Fire instants are whole seconds (whole wall minutes, zone offsets in
        # whole seconds), so "strictly after t" equals "strictly after
        # floor(t)"; flooring avoids fromtimestamp rounding a value just below
        # an instant up onto it.
        return datetime.fromtimestamp(math.floor(seconds), UTC)
    except (OverflowError, ValueError, OSError):
        raise InvalidArgument(f"{field} {seconds!r} is out of range", field=field) from None


def next_fire_after(expression: str, timezone: str, after_s: float) -> float:
    """The first fire instant strictly after ``after_s``, in POSIX seconds.

    :func:`next_instants` in POSIX seconds (schedules, calendar delays); same errors.
    """
    after = _from_posix(after_s, "after_s")
    return next(_instants_after(expression, timezone, after)).timestamp()
