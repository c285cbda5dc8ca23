"""Delayed execution (WF-005 §17): delay specs and the dormant-activity timer heap.

Theory of operation
-------------------
A caller asks for an activity to stay dormant with one of four *delay specs*,
a msgspec tagged union on the field ``kind``:

``relative``  :class:`RelativeDelay` -- ``seconds`` after submission.
``absolute``  :class:`AbsoluteInstant` -- an instant with a UTC offset.
``zoned``     :class:`ZonedWallTime` -- a naive wall time in an IANA zone.
``calendar``  :class:`CalendarSchedule` -- the next instant of a cron expression.

Each spec validates itself on construction and on decoding, so an invalid
spec never exists. :func:`resolve_not_before` turns a spec and the core's
``now`` into one POSIX instant, the activity's ``not_before``; an instant in
the past is allowed and means "eligible at once".

Wall times go through zoneinfo. In a fall-back *fold* a wall time happens
twice: ``fold=0`` picks the first occurrence and ``fold=1`` the second (PEP
495); outside a fold, ``fold`` changes nothing. In a spring-forward *gap* the
wall time never happens; rather than guess a shift, we reject it with
:class:`~wf.errors.InvalidArgument`, naming the gap. A gap is detected by
round-tripping: a wall time that exists comes back unchanged from UTC.

:class:`DelayedTimers` holds the dormant activities as a binary heap of
``(due, seq, activity_id)``: ``seq`` is the caller's sequence number, the
deterministic tie-break. Cancellation is lazy -- the id leaves the live map
and its heap item is discarded when it reaches the top -- and the heap is
rebuilt once stale items outnumber live ones, so every operation is
amortised O(log N) and memory stays within twice the live size.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Final, TypeAlias

import msgspec

from wf.errors import AlreadyExists, CorruptRecord, InvalidArgument

# wf.scheduler.cron (and croniter, about a third of a client command's start-up) is
# imported where a spec is checked or resolved, not here: the client and the worker
# SDK load this module for the delay types alone.

__all__ = [
    "DELAY_MAX_S",
    "AbsoluteInstant",
    "CalendarSchedule",
    "DelaySpec",
    "DelayedTimers",
    "RelativeDelay",
    "ZonedWallTime",
    "delay_spec_from_dict",
    "resolve_not_before",
]

DELAY_MAX_S: Final = 100 * 366 * 86_400.0
"""Longest relative delay accepted: a century, in seconds."""


class _Spec(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="kind"):
    """What every delay spec is: immutable, strict, tagged by ``kind``. Each spec sets its
    tag, ``kw_only`` (msgspec applies it to a class's own fields only) and ``frozen``
    again (mypy's dataclass rules want it said)."""


class RelativeDelay(_Spec, frozen=True, kw_only=True, tag="relative"):
    """Dormant for ``seconds`` after submission."""

    seconds: float
    """Delay in seconds; finite, ``0 <= seconds <= DELAY_MAX_S``."""

    def __post_init__(self) -> None:
        """Refuse negative, non-finite and absurd delays."""
        if not (math.isfinite(self.seconds) and 0 <= self.seconds <= DELAY_MAX_S):
            raise InvalidArgument(
                f"a relative delay must be finite and within 0..{DELAY_MAX_S:.0f} seconds, "
                f"got {self.seconds!r}",
                field="seconds",
            )


class AbsoluteInstant(_Spec, frozen=True, kw_only=True, tag="absolute"):
    """Dormant until an absolute instant."""

    at: datetime
    """The instant; must carry a UTC offset."""

    def __post_init__(self) -> None:
        """Refuse a naive ``at``."""
        from wf.scheduler.cron import require_aware

        require_aware(self.at, "at")


class ZonedWallTime(_Spec, frozen=True, kw_only=True, tag="zoned"):
    """Dormant until a wall-clock time in an IANA time zone."""

    local: datetime
    """Naive wall time in ``timezone``."""
    timezone: str
    """IANA zone name."""
    fold: int = 0
    """Which occurrence of an ambiguous wall time: 0 the first, 1 the second."""

    def __post_init__(self) -> None:
        """Refuse aware ``local``, bad zones, bad ``fold`` and wall times in a DST gap."""
        if self.local.tzinfo is not None:
            raise InvalidArgument(
                "local must be a naive wall time; the zone goes in 'timezone' "
                "(use kind 'absolute' for an instant with an offset)",
                field="local",
            )
        from wf.scheduler.cron import resolve_zone

        zone = resolve_zone(self.timezone)
        if self.fold not in (0, 1):
            raise InvalidArgument(f"fold must be 0 or 1, got {self.fold!r}", field="fold")
        try:
            aware = self.local.replace(tzinfo=zone, fold=self.fold)
            back = aware.astimezone(UTC).astimezone(zone).replace(tzinfo=None)
        except OverflowError:
            raise InvalidArgument(f"{self.local} is out of range", field="local") from None
        if back != self.local:
            raise InvalidArgument(_gap_message(self.local, self.timezone), field="local")


def _gap_message(local: datetime, timezone: str) -> str:
    from wf.scheduler.cron import resolve_zone

    zone = resolve_zone(timezone)
    # The two readings of a nonexistent wall time use the offsets from before
    # and after the transition; their difference is the width of the gap.
    before = local.replace(tzinfo=zone, fold=0).utcoffset()
    after = local.replace(tzinfo=zone, fold=1).utcoffset()
    assert before is not None
    assert after is not None
    width = abs(after - before)
    return (
        f"{local.isoformat()} does not exist in {timezone}: the clocks skip "
        f"{_minutes(width)} there (a DST gap); choose a time outside it"
    )


def _minutes(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m"


class CalendarSchedule(_Spec, frozen=True, kw_only=True, tag="calendar"):
    """Dormant until the next instant of a cron expression after submission."""

    cron: str
    """Five-field Unix cron expression (see :mod:`wf.scheduler.cron`)."""
    timezone: str = "UTC"
    """IANA zone the expression is evaluated in."""

    def __post_init__(self) -> None:
        """Refuse bad expressions and zones."""
        from wf.scheduler.cron import resolve_zone, validate_cron

        validate_cron(self.cron)
        resolve_zone(self.timezone)


DelaySpec: TypeAlias = RelativeDelay | AbsoluteInstant | ZonedWallTime | CalendarSchedule
"""Any delay spec; decode one with :func:`delay_spec_from_dict`."""


def resolve_not_before(spec: DelaySpec, now: float) -> float:
    """The POSIX instant at which an activity with ``spec`` becomes eligible.

    May be earlier than ``now`` (an absolute or zoned time in the past).

    Raises:
        InvalidArgument: ``now`` is not finite.
    """
    if not math.isfinite(now):
        raise InvalidArgument(f"now must be finite, got {now!r}")
    from wf.scheduler.cron import next_fire_after, resolve_zone

    match spec:
        case RelativeDelay(seconds=seconds):
            return now + seconds
        case AbsoluteInstant(at=at):
            return at.timestamp()
        case ZonedWallTime(local=local, timezone=timezone, fold=fold):
            return local.replace(tzinfo=resolve_zone(timezone), fold=fold).timestamp()
        case CalendarSchedule(cron=cron, timezone=timezone):
            return next_fire_after(cron, timezone, now)


def delay_spec_from_dict(data: dict[str, object]) -> DelaySpec:
    """Decode a delay spec from its dict form (e.g. parsed JSON).

    ``kind`` selects the spec; datetimes may be ISO-8601 strings.

    Raises:
        InvalidArgument: not a dict, unknown ``kind``, missing or unknown or
            mistyped field, or an invalid value.
        NaiveDatetime: ``at`` has no UTC offset.
        InvalidTimezone: unknown zone.
        InvalidCronExpression: bad cron expression.
    """
    if not isinstance(data, dict):
        raise InvalidArgument(f"a delay spec must be an object, not {type(data).__name__}")
    try:
        spec: DelaySpec = msgspec.convert(data, type=DelaySpec)
    except msgspec.ValidationError as exc:
        raise InvalidArgument(
            f"invalid delay spec: {exc} (kind is one of "
            "'relative', 'absolute', 'zoned', 'calendar')",
            kind=repr(data.get("kind")),
        ) from None
    # The specs' own checks raise WfErrors, which msgspec lets through: they
    # already say precisely what is wrong.
    return spec


class DelayedTimers:
    """Dormant activities ordered by ``(due, seq)``, with lazy cancellation."""

    def __init__(self) -> None:
        """An empty timer heap."""
        self._heap: list[tuple[float, int, str]] = []
        self._live: dict[str, tuple[float, int]] = {}

    def __len__(self) -> int:
        """Number of live (not cancelled, not popped) timers."""
        return len(self._live)

    def __contains__(self, activity_id: object) -> bool:
        """Whether ``activity_id`` has a live timer."""
        return activity_id in self._live

    def add(self, activity_id: str, due: float, seq: int) -> None:
        """Schedule ``activity_id`` to become due at ``due``; ``seq`` breaks ties.

        Adding the same ``(due, seq)`` again is a no-op.

        Raises:
            InvalidArgument: ``due`` is not finite.
            AlreadyExists: ``activity_id`` has a live timer with another due or seq.
        """
        if not math.isfinite(due):
            raise InvalidArgument(f"due must be finite, got {due!r}", activity_id=activity_id)
        current = self._live.get(activity_id)
        if current is not None:
            if current == (due, seq):
                return
            raise AlreadyExists(
                f"activity {activity_id!r} already has a timer; cancel it first",
                activity_id=activity_id,
                due=current[0],
                seq=current[1],
            )
        self._live[activity_id] = (due, seq)
        heapq.heappush(self._heap, (due, seq, activity_id))

    def cancel(self, activity_id: str) -> bool:
        """Drop the timer of ``activity_id``; False if it had none."""
        if self._live.pop(activity_id, None) is None:
            return False
        self._maybe_compact()
        return True

    def _is_live(self, item: tuple[float, int, str]) -> bool:
        return self._live.get(item[2]) == (item[0], item[1])

    def _maybe_compact(self) -> None:
        if len(self._heap) - len(self._live) > len(self._heap) // 2:
            self._heap = [(due, seq, aid) for aid, (due, seq) in self._live.items()]
            heapq.heapify(self._heap)

    def pop_due(self, now: float) -> list[str]:
        """Remove and return every id whose ``due <= now``, in ``(due, seq)`` order."""
        popped: list[str] = []
        while self._heap and self._heap[0][0] <= now:
            item = heapq.heappop(self._heap)
            # A cancelled-then-re-added id may leave an identical stale copy;
            # the first copy popped retires the id, so the other is skipped.
            if self._is_live(item):
                del self._live[item[2]]
                popped.append(item[2])
        return popped

    def next_due_at(self) -> float | None:
        """The earliest live due instant, or None."""
        while self._heap and not self._is_live(self._heap[0]):
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def snapshot(self) -> list[tuple[float, int, str]]:
        """Live timers as ``(due, seq, activity_id)``, sorted; see :meth:`restore`."""
        return sorted((due, seq, aid) for aid, (due, seq) in self._live.items())

    @classmethod
    def restore(cls, entries: Iterable[tuple[float, int, str]]) -> DelayedTimers:
        """A timer heap holding exactly ``entries`` (as returned by :meth:`snapshot`).

        Raises:
            CorruptRecord: a duplicate id or a non-finite due.
        """
        timers = cls()
        for due, seq, activity_id in entries:
            if activity_id in timers._live or not math.isfinite(due):
                raise CorruptRecord(
                    f"stored timer of {activity_id!r} is duplicated or malformed",
                    activity_id=activity_id,
                )
            timers._live[activity_id] = (due, seq)
            timers._heap.append((due, seq, activity_id))
        heapq.heapify(timers._heap)
        return timers
