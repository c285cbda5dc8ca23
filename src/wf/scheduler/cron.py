"""Cron schedules (WF-005 §18): validation, fire instants and the cron table.

Theory of operation
-------------------
A schedule is a five-field Unix cron expression (``minute hour day-of-month
month day-of-week``) plus an IANA time zone, default UTC. The expression is
read as *wall time* in that zone; fire instants leave this module as aware
UTC datetimes (or POSIX seconds for the core), and the zone name stays with
the definition.

**Grammar.** :func:`validate_cron` owns the grammar: ``*``, numbers, month
and weekday names (``jan``..``dec``, ``sun``..``sat``, case-insensitive),
ranges ``a-b``, steps ``*/n`` and ``a-b/n``, and comma lists. Day-of-week
``0`` and ``7`` are both Sunday; ``sun`` as the end of a range is 7, so
``fri-sun`` works. Everything else is refused: six/seven-field forms (seconds,
years), ``@`` nicknames (``@reboot`` has no meaning here; write ``@daily`` as
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

**The table.** :class:`CronTable` keeps entries in a dict and a binary heap of
``(next_fire_at, cron_id, token)``; removal and rescheduling only retire the
token (lazy invalidation), stale heap items are dropped when they surface, and
the heap is rebuilt when stale items outnumber live ones. :meth:`CronTable.due`
coalesces a backlog: an entry that missed several instants fires once, for the
latest, and reports how many earlier ones it skipped.
"""

from __future__ import annotations

import functools
import heapq
import math
import re
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Final, NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

import msgspec
from croniter import CroniterError, croniter

from wf.errors import (
    AlreadyExists,
    CorruptRecord,
    Internal,
    InvalidArgument,
    InvalidCronExpression,
    InvalidTimezone,
    NaiveDatetime,
    NotFound,
)

__all__ = [
    "CATCH_UP_SCAN_MAX",
    "COUNT_MAX",
    "EXPRESSION_LENGTH_MAX",
    "CronEntry",
    "CronTable",
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
CATCH_UP_SCAN_MAX: Final = 10_000
"""Most missed instants :meth:`CronTable.due` counts one by one before it jumps."""
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
            if field is _FIELDS[_DOW] and match["high"] == "sun" and low > 0:
                # ``fri-sun``: Sunday closes the week as 7, never wraps.
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


def _instants_after(
    expression: str, timezone: str, after: datetime, *, prev: bool = False
) -> Iterator[datetime]:
    """Fire instants (aware UTC) strictly after (or before, ``prev``) ``after``.

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
            local = cron.get_prev() if prev else cron.get_next()
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

    The core's form of :func:`next_instants`; same errors.
    """
    after = _from_posix(after_s, "after_s")
    return next(_instants_after(expression, timezone, after)).timestamp()


def _latest_at_or_before(expression: str, timezone: str, now: float) -> float:
    """The last fire instant ``<= now``, found backwards and checked forwards."""
    # croniter's get_prev floors its start to the minute after stepping back a
    # microsecond, so starting one second past floor(now) includes floor(now).
    start = datetime.fromtimestamp(math.floor(now) + 1, UTC)
    candidate = next(_instants_after(expression, timezone, start, prev=True))
    # Re-derive it with the forward rule, which is the one the table uses.
    return next_fire_after(expression, timezone, candidate.timestamp() - 1)


# ---------------------------------------------------------------------------
# The cron table
# ---------------------------------------------------------------------------


class CronEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One registered schedule and its next fire instant."""

    cron_id: str
    """Caller-chosen unique id."""
    expression: str
    """Normalized five-field cron expression (see :func:`validate_cron`)."""
    timezone: str
    """IANA zone the expression is evaluated in."""
    next_fire_at: float
    """Next fire instant, POSIX seconds."""
    template: bytes = b""
    """Opaque: what to submit when it fires; the core interprets it."""
    created_at: float
    """When the entry was added, POSIX seconds."""


_HeapItem = tuple[float, str, int]
"""(next_fire_at, cron_id, token); live iff the token is the entry's current one."""


class CronTable:
    """Registered cron schedules, ordered by next fire instant.

    O(log N) add, remove and per-entry firing; no clock is read, ``now`` is
    always an argument.
    """

    def __init__(self) -> None:
        """An empty table."""
        self._entries: dict[str, CronEntry] = {}
        self._tokens: dict[str, int] = {}
        self._heap: list[_HeapItem] = []
        self._next_token = 0

    def __len__(self) -> int:
        """Number of registered entries."""
        return len(self._entries)

    def __contains__(self, cron_id: object) -> bool:
        """Whether ``cron_id`` is registered."""
        return cron_id in self._entries

    def _push(self, entry: CronEntry) -> None:
        token = self._next_token
        self._next_token += 1
        self._tokens[entry.cron_id] = token
        heapq.heappush(self._heap, (entry.next_fire_at, entry.cron_id, token))

    def _is_live(self, item: _HeapItem) -> bool:
        return self._tokens.get(item[1]) == item[2]

    def _maybe_compact(self) -> None:
        # Stale items beyond half the heap: rebuild, so memory stays within
        # twice the live size and pops stay O(log N) amortised.
        if len(self._heap) - len(self._entries) > len(self._heap) // 2:
            self._heap = [item for item in self._heap if self._is_live(item)]
            heapq.heapify(self._heap)

    def add(
        self, cron_id: str, expression: str, timezone: str, now: float, template: bytes = b""
    ) -> CronEntry:
        """Register a schedule; its first fire is the first instant strictly after ``now``.

        Re-adding an identical schedule (same normalized expression, zone and
        template) returns the existing entry unchanged.

        Raises:
            InvalidCronExpression, InvalidTimezone: bad definition (checked first).
            InvalidArgument: empty ``cron_id`` or non-finite ``now``.
            AlreadyExists: ``cron_id`` is registered with another definition.
        """
        normalized = validate_cron(expression)
        resolve_zone(timezone)
        if not isinstance(cron_id, str) or not cron_id:
            raise InvalidArgument("cron_id must be a non-empty string", cron_id=repr(cron_id))
        existing = self._entries.get(cron_id)
        if existing is not None:
            if (existing.expression, existing.timezone, existing.template) == (
                normalized,
                timezone,
                template,
            ):
                return existing
            raise AlreadyExists(
                f"cron {cron_id!r} is already registered with another definition",
                cron_id=cron_id,
                expression=existing.expression,
                timezone=existing.timezone,
            )
        entry = CronEntry(
            cron_id=cron_id,
            expression=normalized,
            timezone=timezone,
            next_fire_at=next_fire_after(normalized, timezone, now),
            template=template,
            created_at=now,
        )
        self._entries[cron_id] = entry
        self._push(entry)
        return entry

    def remove(self, cron_id: str) -> CronEntry:
        """Unregister ``cron_id`` and return its last state.

        Raises:
            NotFound: ``cron_id`` is not registered.
        """
        entry = self._entries.pop(cron_id, None)
        if entry is None:
            raise NotFound(f"no cron {cron_id!r}", cron_id=cron_id)
        del self._tokens[cron_id]
        self._maybe_compact()
        return entry

    def get(self, cron_id: str) -> CronEntry | None:
        """The entry registered as ``cron_id``, or None."""
        return self._entries.get(cron_id)

    def next_due_at(self) -> float | None:
        """The earliest next fire instant of any entry, or None if the table is empty."""
        while self._heap and not self._is_live(self._heap[0]):
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def due(self, now: float) -> list[tuple[CronEntry, float, int]]:
        """Fire every entry whose next fire instant is ``<= now``.

        Returns ``(entry, fire_instant, missed)`` in ``(fire_instant, cron_id)``
        order. An entry that fell behind by several instants fires once, for
        the latest instant ``<= now``; ``missed`` counts the earlier instants
        coalesced away (exact up to :data:`CATCH_UP_SCAN_MAX`, which it means
        "at least" when reached). ``entry`` is the updated entry: its
        ``next_fire_at`` is the first instant strictly after ``now``.
        """
        if not math.isfinite(now):
            raise InvalidArgument(f"now must be finite, got {now!r}")
        fired: list[tuple[CronEntry, float, int]] = []
        while self._heap and self._heap[0][0] <= now:
            item = self._heap[0]
            if not self._is_live(item):
                heapq.heappop(self._heap)
                continue
            entry = self._entries[item[1]]
            # Computed before the pop: if it raises, this entry is unchanged.
            fire_at, missed, next_at = self._catch_up(entry, now)
            heapq.heappop(self._heap)
            updated = msgspec.structs.replace(entry, next_fire_at=next_at)
            self._entries[entry.cron_id] = updated
            self._push(updated)
            fired.append((updated, fire_at, missed))
        fired.sort(key=lambda f: (f[1], f[0].cron_id))
        return fired

    @staticmethod
    def _catch_up(entry: CronEntry, now: float) -> tuple[float, int, float]:
        """(latest instant <= now, instants skipped before it, first instant > now)."""
        expression, timezone = entry.expression, entry.timezone
        fire_at = entry.next_fire_at
        instants = _instants_after(expression, timezone, _from_posix(fire_at, "next_fire_at"))
        for missed in range(CATCH_UP_SCAN_MAX):
            following = next(instants).timestamp()
            if following > now:
                return fire_at, missed, following
            fire_at = following
        # A long outage of a frequent schedule: jump instead of walking the
        # whole backlog; the count saturates.
        fire_at = _latest_at_or_before(expression, timezone, now)
        following = next_fire_after(expression, timezone, fire_at)
        if not entry.next_fire_at < fire_at <= now < following:
            raise Internal(
                "cron catch-up found no instant before now",
                cron_id=entry.cron_id,
                fire_at=fire_at,
                now=now,
            )
        return fire_at, CATCH_UP_SCAN_MAX, following

    def snapshot(self) -> list[CronEntry]:
        """Every entry, ordered by ``cron_id``; :meth:`restore` rebuilds the same table."""
        return [self._entries[cron_id] for cron_id in sorted(self._entries)]

    @classmethod
    def restore(cls, entries: Iterable[CronEntry]) -> CronTable:
        """A table holding exactly ``entries`` (as returned by :meth:`snapshot`).

        Raises:
            CorruptRecord: a duplicate id, a definition that no longer
                validates or is not in normalized form, or a non-finite instant.
        """
        table = cls()
        for entry in entries:
            try:
                normalized = validate_cron(entry.expression)
                resolve_zone(entry.timezone)
            except InvalidArgument as exc:
                raise CorruptRecord(
                    f"stored cron {entry.cron_id!r} is invalid: {exc.message}",
                    cron_id=entry.cron_id,
                ) from exc
            if (
                normalized != entry.expression
                or entry.cron_id in table._entries
                or not math.isfinite(entry.next_fire_at)
            ):
                raise CorruptRecord(
                    f"stored cron {entry.cron_id!r} is duplicated or malformed",
                    cron_id=entry.cron_id,
                )
            table._entries[entry.cron_id] = entry
            table._push(entry)
        return table
