"""A background task that runs one step every interval of a clock until stopped.

The server's periodic chores (the retention pass, the unserved-type watch)
each own what a step does; this owns the task, the stop event and the sleep.
The sleep is :func:`wf.clock.sleep_until` on the chore's clock, so a test's
virtual clock drives the chore unchanged, and ``stop`` wakes it at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from wf.clock import Clock, sleep_until


class Periodic:
    """Runs ``step`` every ``interval_s()`` seconds of ``clock`` between start and stop.

    The interval is read before each sleep, so a changed setting applies from
    the next one. The first step runs one interval after :meth:`start`. An
    exception from ``step`` ends the task: a chore that must survive its
    failures catches them itself.
    """

    def __init__(
        self,
        name: str,
        clock: Clock,
        interval_s: Callable[[], float],
        step: Callable[[], Awaitable[None]],
    ) -> None:
        self.name = name
        self.clock = clock
        self.interval_s = interval_s
        self.step = step
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    @property
    def running(self) -> bool:
        """Whether the task is started (and not yet stopped)."""
        return self._task is not None

    def start(self) -> None:
        """Begin the steps (idempotent)."""
        if self._task is not None:
            return
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._loop(), name=self.name)

    async def stop(self) -> None:
        """End the steps; a step in flight is cancelled."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stop.set()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _loop(self) -> None:
        while not self._stop.is_set():
            await sleep_until(self.clock, self.clock.now() + self.interval_s(), self._stop)
            if self._stop.is_set():
                return
            await self.step()
