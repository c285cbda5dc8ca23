from __future__ import annotations

import asyncio
import math
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest

from wf.clock import Clock, SystemClock
from wf.errors import Conflict, InvalidArgument, NaiveDatetime
from wf.testing.clock import DEFAULT_START, VirtualClock

START = DEFAULT_START.timestamp()


# -- SystemClock ---------------------------------------------------------


def test_system_clock_is_monotonic_aware_and_near_wall_time() -> None:
    clock: Clock = SystemClock()
    readings = [clock.now() for _ in range(1000)]
    assert readings == sorted(readings)
    assert abs(clock.now() - time.time()) < 5.0
    wall = clock.wall()
    assert wall.tzinfo is UTC
    assert abs(wall.timestamp() - clock.now()) < 5.0


def test_system_clock_ignores_wall_clock_steps() -> None:
    wall = [1_000_000.0]
    mono = [50.0]
    clock = SystemClock(wall_s=lambda: wall[0], monotonic_s=lambda: mono[0])
    assert clock.now() == 1_000_000.0
    mono[0] += 2.5
    wall[0] -= 3600.0  # an operator steps the wall clock back an hour
    assert clock.now() == 1_000_002.5
    assert clock.wall() == datetime.fromtimestamp(1_000_002.5, tz=UTC)


# -- VirtualClock: time ----------------------------------------------------


def test_virtual_clock_starts_at_default_and_is_aware() -> None:
    clock: Clock = VirtualClock()
    assert clock.now() == START
    assert clock.wall() == datetime(2026, 1, 1, tzinfo=UTC)
    assert clock.wall().tzinfo is UTC


def test_virtual_clock_start_accepts_float_and_aware_datetime() -> None:
    assert VirtualClock(100.0).now() == 100.0
    plus_two = timezone(timedelta(hours=2))
    assert VirtualClock(datetime(2026, 1, 1, 2, tzinfo=plus_two)).now() == START
    with pytest.raises(NaiveDatetime):
        VirtualClock(datetime(2026, 1, 1))
    with pytest.raises(InvalidArgument):
        VirtualClock(math.nan)


def test_advance_and_advance_to() -> None:
    clock = VirtualClock(0.0)
    clock.advance(1.5)
    assert clock.now() == 1.5
    clock.advance(0)
    assert clock.now() == 1.5
    clock.advance_to(10.0)
    assert clock.now() == 10.0
    clock.advance_to(datetime.fromtimestamp(20.0, tz=UTC))
    assert clock.now() == 20.0
    clock.advance_to(20.0)  # staying put is not going backwards
    assert clock.now() == 20.0


@pytest.mark.parametrize("seconds", [-0.001, -10.0, math.inf, math.nan])
def test_advance_rejects_negative_or_non_finite(seconds: float) -> None:
    clock = VirtualClock(0.0)
    with pytest.raises(InvalidArgument):
        clock.advance(seconds)
    assert clock.now() == 0.0


def test_time_never_goes_backwards() -> None:
    clock = VirtualClock(100.0)
    with pytest.raises(InvalidArgument):
        clock.advance_to(99.0)
    with pytest.raises(InvalidArgument):
        clock.run_until(50.0)
    assert clock.now() == 100.0


# -- VirtualClock: deadlines ---------------------------------------------


def test_call_at_runs_in_deadline_then_registration_order() -> None:
    clock = VirtualClock(0.0)
    log: list[tuple[str, float]] = []

    def record(name: str) -> None:
        clock.call_at(0.0, lambda: None)  # registering from a callback is allowed
        log.append((name, clock.now()))

    clock.call_at(3.0, lambda: record("c"))
    clock.call_at(1.0, lambda: record("a1"))
    clock.call_at(2.0, lambda: record("b"))
    clock.call_at(1.0, lambda: record("a2"))
    assert clock.next_deadline() == 1.0
    ran = clock.run_until(5.0)
    # Each callback sees its own deadline; past-dated registrations run at once.
    assert log == [("a1", 1.0), ("a2", 1.0), ("b", 2.0), ("c", 3.0)]
    assert ran == 4 + 4
    assert clock.now() == 5.0
    assert clock.pending == 0


def test_run_until_stops_at_target() -> None:
    clock = VirtualClock(0.0)
    log: list[float] = []
    for t in (1.0, 2.0, 3.0):
        clock.call_at(t, lambda: log.append(clock.now()))
    assert clock.run_until(2.0) == 2
    assert log == [1.0, 2.0]
    assert clock.now() == 2.0
    assert clock.pending == 1
    clock.advance(0.5)
    assert log == [1.0, 2.0]
    clock.advance(0.5)
    assert log == [1.0, 2.0, 3.0]


def test_callbacks_chain_within_one_run() -> None:
    clock = VirtualClock(0.0)
    log: list[float] = []

    def tick() -> None:
        log.append(clock.now())
        if clock.now() < 4.0:
            clock.call_later(1.0, tick)

    clock.call_at(1.0, tick)
    clock.run_until(10.0)
    assert log == [1.0, 2.0, 3.0, 4.0]


def test_run_next_jumps_to_next_deadline() -> None:
    clock = VirtualClock(0.0)
    log: list[str] = []
    clock.call_at(7.0, lambda: log.append("late"))
    clock.call_at(3.0, lambda: log.append("x"))
    clock.call_at(3.0, lambda: log.append("y"))
    assert clock.run_next() == 2
    assert clock.now() == 3.0
    assert log == ["x", "y"]
    assert clock.run_next() == 1
    assert clock.now() == 7.0
    assert clock.run_next() == 0
    assert clock.now() == 7.0


def test_cancel() -> None:
    clock = VirtualClock(0.0)
    log: list[str] = []
    keep = clock.call_at(1.0, lambda: log.append("keep"))
    drop = clock.call_at(0.5, lambda: log.append("drop"))
    assert clock.cancel(drop)
    assert not clock.cancel(drop)
    assert clock.next_deadline() == 1.0
    clock.advance(2.0)
    assert log == ["keep"]
    assert not clock.cancel(keep)
    assert clock.next_deadline() is None


def test_moving_time_from_a_callback_is_refused() -> None:
    clock = VirtualClock(0.0)
    clock.call_at(1.0, lambda: clock.advance(1.0))
    with pytest.raises(Conflict):
        clock.advance(5.0)
    assert clock.now() == 1.0
    clock.advance(1.0)  # the clock is usable again
    assert clock.now() == 2.0


# -- VirtualClock: asyncio -----------------------------------------------


def test_autojump_wakes_sleepers_in_virtual_order_instantly() -> None:
    clock = VirtualClock(0.0)
    log: list[tuple[str, float]] = []

    async def sleeper(name: str, until: float) -> None:
        await clock.sleep_until(until)
        log.append((name, clock.now()))

    async def main() -> None:
        await asyncio.gather(sleeper("late", 3600.0), sleeper("early", 60.0))

    started = time.monotonic()
    asyncio.run(clock.autojump(main()))
    assert time.monotonic() - started < 5.0  # an hour of virtual time, no real waiting
    assert log == [("early", 60.0), ("late", 3600.0)]
    assert clock.now() == 3600.0
    assert clock.pending == 0


def test_autojump_with_run_autojump_and_chained_sleeps() -> None:
    clock = VirtualClock(0.0)
    log: list[tuple[str, float]] = []

    async def ticker(name: str, period: float, count: int) -> None:
        for _ in range(count):
            await clock.sleep(period)
            log.append((name, clock.now()))

    async def main() -> None:
        stop = asyncio.Event()
        driver = asyncio.create_task(clock.run_autojump(stop))
        await asyncio.gather(ticker("a", 2.0, 3), ticker("b", 3.0, 2))
        stop.set()
        await driver

    asyncio.run(main())
    # Both are due at t=6; "b" registered that deadline (at t=3) before "a" (at t=4).
    assert log == [("a", 2.0), ("b", 3.0), ("a", 4.0), ("b", 6.0), ("a", 6.0)]


def test_sleep_until_past_returns_at_once_and_cancel_withdraws() -> None:
    clock = VirtualClock(10.0)

    async def main() -> None:
        await clock.sleep_until(5.0)
        task = asyncio.create_task(clock.sleep_until(20.0))
        await asyncio.sleep(0)
        assert clock.pending == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert clock.pending == 0

    asyncio.run(main())
    assert clock.now() == 10.0


def test_autojump_waits_for_new_deadlines_without_spinning() -> None:
    clock = VirtualClock(0.0)

    async def main() -> float:
        # Let the driver find nothing pending and park, then register a sleep.
        for _ in range(50):
            await asyncio.sleep(0)
        await clock.sleep(30.0)
        return clock.now()

    assert asyncio.run(clock.autojump(main(), idle_rounds=3)) == 30.0


def test_autojump_propagates_a_failing_callback() -> None:
    clock = VirtualClock(0.0)

    def boom() -> None:
        raise RuntimeError("boom")

    async def main() -> None:
        clock.call_at(5.0, boom)
        await clock.sleep_until(10.0)

    with pytest.raises(RuntimeError, match="boom"):
        asyncio.run(clock.autojump(main()))
    assert clock.now() == 5.0


def test_autojump_returns_result_and_propagates_errors() -> None:
    clock = VirtualClock(0.0)

    async def fails() -> None:
        await clock.sleep(1.0)
        raise ValueError("inner")

    with pytest.raises(ValueError, match="inner"):
        asyncio.run(clock.autojump(fails()))

    async def answer() -> int:
        await clock.sleep(2.0)
        return 42

    assert asyncio.run(clock.autojump(answer())) == 42
    assert clock.now() == 3.0


def test_only_one_autojump_driver_per_clock() -> None:
    clock = VirtualClock(0.0)

    async def main() -> None:
        stop = asyncio.Event()
        first = asyncio.create_task(clock.run_autojump(stop))
        await asyncio.sleep(0)
        with pytest.raises(Conflict):
            await clock.run_autojump(stop)
        stop.set()
        await first

    asyncio.run(main())
