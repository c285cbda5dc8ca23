"""A virtual clock for tests and simulations: time moves only when told to.

Theory of operation
-------------------
:class:`VirtualClock` implements :class:`wf.clock.Clock` with a number that
only the test changes, and never backwards. Next to it sits a deadline
registry: :meth:`VirtualClock.call_at` registers a callback for an instant and
time moving forward runs the callbacks that fall due, in (deadline,
registration) order, with the clock set to each callback's own deadline while
it runs. :meth:`~VirtualClock.run_next` is Trio's ``MockClock`` idea in a
synchronous form: when nothing else can happen, jump straight to the next
deadline instead of waiting for it.

For asyncio code, :meth:`VirtualClock.sleep_until` and
:meth:`VirtualClock.sleep` are deadlines whose callback wakes the sleeping
task, and :meth:`VirtualClock.run_autojump` (or :meth:`VirtualClock.autojump`,
which wraps one awaitable) is the driver that jumps the clock. asyncio has no
public "every task is blocked" signal, so the driver infers it: it yields to
the event loop ``idle_rounds`` times in a row, and if no deadline was added,
cancelled or fired meanwhile, every other task is taken to be waiting on the
virtual clock and the clock jumps to the earliest deadline. This holds for code
whose every wait is a virtual sleep (or finishes within ``idle_rounds`` loop
iterations); code that waits on real I/O must not be driven by autojump.
Because asyncio runs ready callbacks in FIFO order and nothing here reads a
real clock, a run is deterministic: the same program wakes in the same order
at the same virtual instants, and takes no real time to sleep.
"""

from __future__ import annotations

import asyncio
import heapq
import math
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Final, TypeVar

from wf.errors import Conflict, InvalidArgument, NaiveDatetime

T = TypeVar("T")

DEFAULT_START: Final = datetime(2026, 1, 1, tzinfo=UTC)
"""Where a :class:`VirtualClock` starts unless told otherwise: 2026-01-01T00:00:00Z."""

DEFAULT_IDLE_ROUNDS: Final = 20
"""Loop iterations without clock activity after which autojump deems every task blocked."""


class TimerHandle:
    """A registered deadline; pass it to :meth:`VirtualClock.cancel`.

    Compared by identity, so a handle only ever cancels its own registration.
    """

    __slots__ = ("deadline", "seq")

    def __init__(self, deadline: float, seq: int) -> None:
        self.deadline: Final = deadline
        """The instant (scheduler time) the callback runs at."""
        self.seq: Final = seq
        """Registration order; breaks ties between equal deadlines."""

    def __repr__(self) -> str:
        return f"TimerHandle(deadline={self.deadline!r}, seq={self.seq})"


def _instant(t: float | datetime, what: str) -> float:
    """Scheduler time of ``t``; datetimes must be aware and floats finite."""
    if isinstance(t, datetime):
        if t.tzinfo is None or t.utcoffset() is None:
            raise NaiveDatetime(f"{what} must be timezone-aware", value=t.isoformat())
        return t.timestamp()
    if not math.isfinite(t):
        raise InvalidArgument(f"{what} must be a finite number of seconds", value=repr(t))
    return float(t)


class VirtualClock:
    """A :class:`~wf.clock.Clock` that moves only when told, plus a deadline registry."""

    def __init__(self, start: float | datetime = DEFAULT_START) -> None:
        self._now = _instant(start, "start")
        # Heap of (deadline, seq, handle); cancelled entries stay in the heap
        # and are skipped when popped (their handle is no longer in _callbacks).
        self._heap: list[tuple[float, int, TimerHandle]] = []
        self._callbacks: dict[TimerHandle, Callable[[], object]] = {}
        self._next_seq = 0
        # Bumped on every registration, cancellation and firing: autojump's
        # evidence that tasks are still making progress.
        self._activity = 0
        self._running = False
        self._wakeup: asyncio.Event | None = None

    # -- Clock protocol ---------------------------------------------------

    def now(self) -> float:
        """Current virtual time, POSIX seconds (UTC)."""
        return self._now

    def wall(self) -> datetime:
        """Current virtual time as an aware UTC datetime."""
        return datetime.fromtimestamp(self._now, tz=UTC)

    # -- moving time ------------------------------------------------------

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, running every callback that falls due.

        Raises :class:`~wf.errors.InvalidArgument` if ``seconds`` is negative
        or not finite.
        """
        if not math.isfinite(seconds) or seconds < 0:
            raise InvalidArgument("cannot advance by a negative or infinite time", seconds=seconds)
        self.run_until(self._now + seconds)

    def advance_to(self, t: float | datetime) -> None:
        """Move time forward to ``t``, running every callback that falls due.

        Raises :class:`~wf.errors.InvalidArgument` if ``t`` is before now.
        """
        self.run_until(t)

    def run_until(self, t: float | datetime) -> int:
        """Run every callback due at or before ``t`` in order, then set the clock to ``t``.

        While a callback runs, the clock reads its deadline (or now, for one
        registered in the past). Callbacks may register further deadlines;
        those due by ``t`` run in this same call. Returns how many ran.
        Raises :class:`~wf.errors.InvalidArgument` if ``t`` is before now and
        :class:`~wf.errors.Conflict` if called from inside a callback.
        """
        target = _instant(t, "t")
        if target < self._now:
            raise InvalidArgument(
                "the virtual clock never goes backwards", now=self._now, target=target
            )
        ran = self._run_due(target)
        self._now = target
        return ran

    def run_next(self) -> int:
        """Jump to the earliest pending deadline and run every callback due then.

        Returns how many callbacks ran: 0 (and time unchanged) when nothing is
        pending. A deadline already in the past runs at the current time.
        Raises :class:`~wf.errors.Conflict` if called from inside a callback.
        """
        deadline = self.next_deadline()
        if deadline is None:
            return 0
        return self.run_until(max(deadline, self._now))

    # -- deadline registry ------------------------------------------------

    def call_at(self, t: float | datetime, callback: Callable[[], object]) -> TimerHandle:
        """Register ``callback`` to run when time reaches ``t``; returns its handle.

        Callbacks with equal deadlines run in registration order. A deadline
        at or before now is due at once: it runs at the next move of time
        (``advance(0)`` or :meth:`run_next` included).
        """
        deadline = _instant(t, "t")
        handle = TimerHandle(deadline, self._next_seq)
        self._next_seq += 1
        self._callbacks[handle] = callback
        heapq.heappush(self._heap, (deadline, handle.seq, handle))
        self._touch()
        return handle

    def call_later(self, seconds: float, callback: Callable[[], object]) -> TimerHandle:
        """:meth:`call_at` ``now() + seconds``."""
        return self.call_at(self._now + seconds, callback)

    def cancel(self, handle: TimerHandle) -> bool:
        """Withdraw a registration; ``False`` if it already ran or was cancelled."""
        if self._callbacks.pop(handle, None) is None:
            return False
        self._touch()
        return True

    def next_deadline(self) -> float | None:
        """The earliest pending deadline, or ``None`` when nothing is registered."""
        heap = self._heap
        while heap and heap[0][2] not in self._callbacks:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    @property
    def pending(self) -> int:
        """How many callbacks are registered and not yet run or cancelled."""
        return len(self._callbacks)

    # -- asyncio ----------------------------------------------------------

    async def sleep_until(self, t: float | datetime) -> None:
        """Complete when virtual time reaches ``t`` (at once if it already has).

        Sleepers with equal deadlines wake in the order they started sleeping.
        Cancelling the sleeping task withdraws its deadline.
        """
        deadline = _instant(t, "t")
        if deadline <= self._now:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not future.done():
                future.set_result(None)

        handle = self.call_at(deadline, wake)
        try:
            await future
        finally:
            self.cancel(handle)

    async def sleep(self, seconds: float) -> None:
        """:meth:`sleep_until` ``now() + seconds``."""
        await self.sleep_until(self._now + seconds)

    async def run_autojump(
        self, stop: asyncio.Event, *, idle_rounds: int = DEFAULT_IDLE_ROUNDS
    ) -> None:
        """Jump to the next deadline whenever every other task is blocked, until ``stop``.

        "Blocked" is inferred: ``idle_rounds`` consecutive yields to the event
        loop with no deadline added, cancelled or fired (see the module
        docstring). With nothing registered it waits, without spinning, for a
        registration or for ``stop``. One driver per clock: a second one raises
        :class:`~wf.errors.Conflict`. An exception from a callback it runs
        propagates out of it.
        """
        if idle_rounds < 1:
            raise InvalidArgument("idle_rounds must be at least 1", idle_rounds=idle_rounds)
        if self._wakeup is not None:
            raise Conflict("an autojump driver is already running on this clock")
        self._wakeup = wakeup = asyncio.Event()
        try:
            idle = 0
            while not stop.is_set():
                seen = self._activity
                await asyncio.sleep(0)
                if self._activity != seen:
                    idle = 0
                    continue
                idle += 1
                if idle < idle_rounds:
                    continue
                idle = 0
                if self.pending:
                    self.run_next()
                else:
                    wakeup.clear()
                    await _first_of(stop, wakeup)
        finally:
            self._wakeup = None

    async def autojump(
        self, awaitable: Awaitable[T], *, idle_rounds: int = DEFAULT_IDLE_ROUNDS
    ) -> T:
        """Await ``awaitable`` with :meth:`run_autojump` driving the clock; return its result.

        ``asyncio.run(clock.autojump(main()))`` runs ``main`` to completion in
        no real time, however long it sleeps on this clock. If a callback the
        driver runs raises, ``awaitable`` is cancelled (nothing would wake it
        any more) and the callback's exception is raised here.
        """
        stop = asyncio.Event()
        driver = asyncio.ensure_future(self.run_autojump(stop, idle_rounds=idle_rounds))
        main = asyncio.ensure_future(awaitable)
        try:
            await asyncio.wait((main, driver), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.set()
            main.cancel()  # a no-op once it is done
        await asyncio.wait((main, driver))
        driver_error = driver.exception()
        if main.cancelled() and driver_error is not None:
            raise driver_error
        return main.result()

    # -- internals --------------------------------------------------------

    def _run_due(self, target: float) -> int:
        if self._running:
            raise Conflict("the virtual clock cannot be moved from inside one of its callbacks")
        self._running = True
        ran = 0
        try:
            heap = self._heap
            while heap and heap[0][0] <= target:
                deadline, _, handle = heapq.heappop(heap)
                callback = self._callbacks.pop(handle, None)
                if callback is None:
                    continue  # cancelled
                self._now = max(self._now, deadline)
                self._touch()
                ran += 1
                callback()
        finally:
            self._running = False
        return ran

    def _touch(self) -> None:
        self._activity += 1
        if self._wakeup is not None:
            self._wakeup.set()


async def _first_of(*events: asyncio.Event) -> None:
    """Wait until any of ``events`` is set."""
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
