"""Time-skipping for tests: run days of schedules in well under a second.

Theory of operation
-------------------
A server built with a :class:`~wf.testing.clock.VirtualClock` (``clock=`` on
:func:`wf.server.local.build_local_static_workflow_server`, and the same clock
for :func:`wf.schedules.build_scheduler_service`) runs the production code
unchanged: the scheduler node, the run engine and the schedule service all
sleep on that clock (:func:`wf.clock.sleep_until`). :class:`TimeSkipper` moves
the clock the way Temporal's test environment does: it first lets the system
*settle* (every queued run event applied, no activity waiting for or held by
a worker, no schedule or waiting run left to consider), then jumps straight
to the next instant anything is due (a schedule's occurrence, a timer
node, a run deadline, a delayed activity or retry), and ticks the node, the
engine and the service at that instant, in that order. Repeated up to the
target instant, this is deterministic: the same program records the same
occurrences at the same virtual instants.

Work that needs a worker still runs for real (in-process workers over
loopback), but only while the clock stands still: skipping waits for it.
Because no virtual time passes while workers are busy, heartbeats and leases
are never outrun by a jump; each jump re-arms the liveness deadlines of live
workers from the new instant (as start-up recovery does), since a worker
cannot heartbeat across an interval that took no real time.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any, Final

from wf.errors import Conflict
from wf.scheduler.model import ActivityState, WorkerStatus
from wf.schedules.service import ScheduleService
from wf.server.app import WfServer
from wf.testing.clock import VirtualClock

SETTLE_TIMEOUT_S: Final = 30.0
"""Longest (real) wait for the system to settle before a jump."""
SETTLE_POLL_S: Final = 0.002
"""Real-time pause between settle checks while workers run."""
_BUSY: Final = frozenset({ActivityState.READY, ActivityState.QUEUED, ActivityState.LEASED,
                          ActivityState.EXECUTING})  # fmt: skip


class TimeSkipper:
    """Skips a server's virtual clock from due instant to due instant (see module doc)."""

    def __init__(
        self, server: Any, clock: VirtualClock, service: ScheduleService | None = None
    ) -> None:
        self.server: WfServer = getattr(server, "server", server)
        if self.server.node.clock is not clock:
            raise Conflict("the server was not built with this virtual clock")
        self.clock = clock
        self.service = service
        self.jumps = 0
        """Jumps made so far."""

    def busy(self) -> bool:
        """Whether anything is in flight that must finish before time may move."""
        engine = self.server.engine
        if not engine.idle():
            return True
        if any(a.state in _BUSY for a in self.server.node.core.activities.values()):
            return True
        service = self.service
        return service is not None and service.pending_work()

    async def settle(self, timeout_s: float = SETTLE_TIMEOUT_S) -> None:
        """Wait (in real time, bounded) until nothing is in flight at the current instant."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        quiet = False
        while True:
            await self.server.engine.poll()
            if self.service is not None:
                await self.service.tick()
            # The core changes before its commit lands, and listeners (the run engine)
            # hear of a change only once the committing caller resumes: wait for the
            # commits, and call the system settled only when it is still idle after a
            # pause, so that no change is between its commit and its listeners.
            await self.server.node.durable()
            if not self.busy():
                if quiet:
                    return
                quiet = True
            else:
                quiet = False
            if loop.time() > deadline:
                raise TimeoutError(f"the system did not settle within {timeout_s} s")
            await asyncio.sleep(SETTLE_POLL_S)

    def next_due(self) -> float | None:
        """The next instant something is due (occurrences, timers, delayed activities)."""
        core = self.server.node.core
        candidates = [
            core.timers.next_due_at(),
            self.server.engine.next_timer_at(),
            None if self.service is None else self.service.next_wake_at(),
        ]
        due = [t for t in candidates if t is not None]
        return min(due) if due else None

    async def advance_to(self, t: float | datetime) -> int:
        """Skip to ``t``, stopping at every due instant on the way; returns the jumps made."""
        target = t.timestamp() if isinstance(t, datetime) else float(t)
        jumps = 0
        await self.settle()
        while True:
            due = self.next_due()
            if due is None or due > target:
                break
            await self._jump(max(due, self.clock.now()))
            jumps += 1
        if target > self.clock.now():
            await self._jump(target)
            jumps += 1
        self.jumps += jumps
        return jumps

    async def advance(self, seconds: float) -> int:
        """Skip ``seconds`` ahead (see :meth:`advance_to`)."""
        return await self.advance_to(self.clock.now() + seconds)

    async def _jump(self, t: float) -> None:
        self.clock.advance_to(t)
        core = self.server.node.core
        for worker in core.registry.workers.values():
            if worker.status is WorkerStatus.ACTIVE:
                core.registry.touch(worker, t)
        await self.server.node.tick()
        await self.settle()
