"""The threads sync activities run on (``wf.worker.threads``): outcomes come back to
the loop, threads start on demand up to the slots, shutdown runs nothing queued."""

from __future__ import annotations

import asyncio
import threading

import pytest

from wf.worker.threads import ActivityThreads


def test_a_result_and_an_exception_come_back_to_the_awaiting_loop() -> None:
    async def main() -> None:
        threads = ActivityThreads(2)
        loop = asyncio.get_running_loop()
        try:
            assert await threads.run(loop, lambda a, b: a + b, 2, 3) == 5

            def fails() -> None:
                raise ValueError("boom")

            with pytest.raises(ValueError, match="boom"):
                await threads.run(loop, fails)

            def stops() -> None:
                raise StopIteration

            # A future cannot carry StopIteration: it comes back as a RuntimeError.
            with pytest.raises(RuntimeError, match="StopIteration") as caught:
                await threads.run(loop, stops)
            assert isinstance(caught.value.__cause__, StopIteration)
        finally:
            threads.shutdown()

    asyncio.run(main())


def test_threads_start_on_demand_and_never_exceed_the_slots() -> None:
    async def main() -> None:
        threads = ActivityThreads(3)
        loop = asyncio.get_running_loop()
        release = threading.Event()
        running: set[str] = set()
        lock = threading.Lock()

        def body() -> str:
            with lock:
                running.add(threading.current_thread().name)
            release.wait(10)
            return threading.current_thread().name

        try:
            assert await threads.run(loop, lambda: "warm") == "warm"
            assert len(threads._threads) == 1  # one job at a time: one thread
            jobs = [threads.run(loop, body) for _ in range(5)]
            deadline = loop.time() + 10
            while len(running) < 3:
                assert loop.time() < deadline, "three bodies never ran at once"
                await asyncio.sleep(0.001)
            assert len(threads._threads) == 3
            release.set()
            names = await asyncio.gather(*jobs)
            assert set(names) <= {t.name for t in threads._threads}
            assert threads._running == 0
        finally:
            release.set()
            threads.shutdown()

    asyncio.run(main())


def test_shutdown_cancels_what_has_not_started_and_drops_a_late_outcome() -> None:
    async def main() -> None:
        threads = ActivityThreads(1)
        loop = asyncio.get_running_loop()
        started = threading.Event()
        release = threading.Event()
        ran: list[str] = []

        def first() -> str:
            started.set()
            release.wait(10)
            ran.append("first")
            return "first"

        try:
            running = threads.run(loop, first)
            queued = threads.run(loop, lambda: ran.append("queued"))
            await asyncio.to_thread(started.wait, 10)
            running.cancel()  # the caller stops waiting; the body goes on
            threads.shutdown()
            release.set()
            with pytest.raises(asyncio.CancelledError):
                await queued
            with pytest.raises(asyncio.CancelledError):
                await running
            for thread in threads._threads:
                await asyncio.to_thread(thread.join, 10)
            assert ran == ["first"]
            assert threads.run(loop, lambda: None).cancelled()
        finally:
            release.set()

    asyncio.run(main())
