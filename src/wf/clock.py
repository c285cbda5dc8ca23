"""The clock port: where the shell (never the scheduler core) gets ``now``.

Theory of operation
-------------------
The scheduler core takes time as an argument. The shell reads it from one
injected :class:`Clock` and passes it in, so tests and simulations substitute
:class:`wf.testing.clock.VirtualClock` and control time completely.

Scheduler time is one float: POSIX seconds (UTC). It must satisfy two needs
that neither system clock meets alone:

* Leases and heartbeats measure intervals, so time must never go backwards:
  an NTP step or an operator resetting the wall clock must not expire every
  lease at once, or make them live for an extra hour.
* Lease expiries and timers are persisted, so after a restart ``now`` must be
  comparable with instants written by the previous process: a bare monotonic
  clock (whose epoch is arbitrary, often the boot) would make them meaningless.

:class:`SystemClock` therefore anchors the monotonic clock to wall time once,
at construction, and advances only by monotonic time afterwards. Within a
process it never goes backwards and ignores wall-clock steps (it still follows
NTP's gradual frequency corrections, as ``CLOCK_MONOTONIC`` does); across a
restart it re-anchors to the wall clock, which is what persisted instants mean.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    """Scheduler time for the shell; implementations never go backwards."""

    def now(self) -> float:
        """Scheduler time: POSIX seconds (UTC).

        Successive calls never return a smaller value (in one process).
        """
        ...

    def wall(self) -> datetime:
        """``now()`` as a timezone-aware UTC :class:`~datetime.datetime` (for cron and logs)."""
        ...


class SystemClock:
    """The production clock: wall time at construction, advanced by monotonic time.

    ``wall_s`` and ``monotonic_s`` are the underlying sources; they default to
    :func:`time.time` and :func:`time.monotonic` and exist so tests can show
    that a wall-clock step leaves this clock alone.
    """

    __slots__ = ("_anchor_s", "_monotonic_anchor_s", "_monotonic_s")

    def __init__(
        self,
        *,
        # The banned-API rule keeps clocks out of the scheduler core; this
        # module is the shell's one sanctioned clock, so it may read them.
        wall_s: Callable[[], float] = time.time,  # noqa: TID251
        monotonic_s: Callable[[], float] = time.monotonic,  # noqa: TID251
    ) -> None:
        self._monotonic_s = monotonic_s
        self._monotonic_anchor_s = monotonic_s()
        self._anchor_s = wall_s()

    def now(self) -> float:
        """Wall time at construction plus monotonic time elapsed since."""
        return self._anchor_s + (self._monotonic_s() - self._monotonic_anchor_s)

    def wall(self) -> datetime:
        """``now()`` as an aware UTC datetime."""
        return datetime.fromtimestamp(self.now(), tz=UTC)


async def sleep_until(clock: Clock, t: float, wake: asyncio.Event | None = None) -> None:
    """Sleep until ``clock`` reaches ``t`` or ``wake`` is set, whichever comes first.

    On a clock with its own ``sleep_until`` (the virtual clock of
    :mod:`wf.testing.clock`) the sleep is on that clock, so the shell's loops run
    on virtual time unchanged; otherwise it is a real sleep of ``t - now``.
    """
    virtual = getattr(clock, "sleep_until", None)
    if virtual is not None:
        sleeper = asyncio.ensure_future(virtual(t))
        waiter = asyncio.ensure_future(wake.wait()) if wake is not None else None
        pending = {sleeper} if waiter is None else {sleeper, waiter}
        try:
            await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pending:
                task.cancel()
        return
    delay = t - clock.now()
    if delay <= 0:
        return
    if wake is None:
        await asyncio.sleep(delay)
        return
    # Not asyncio.wait_for: on Python 3.11 it can swallow a cancellation that
    # lands as the wake-up fires.
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(delay):
            await wake.wait()
