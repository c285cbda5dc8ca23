"""Time-skipping for tests: run days of schedules in well under a second.

Theory of operation
-------------------
A server built with a :class:`~wf.testing.clock.VirtualClock` (``clock=`` on
:func:`wf.server.local.build_local_static_workflow_server`, and the same clock
for :func:`wf.schedules.build_scheduler_service`) runs the production code
unchanged: the scheduler node, the run engine and the schedule service all
sleep on that clock (:func:`wf.clock.sleep_until`), and in-process workers
run the activities for real over loopback. :class:`TimeSkipper` moves the
clock the way Temporal's test environment does: it lets the system *settle*,
then jumps straight to the next instant anything is due (a schedule's
occurrence, a timer node, a run deadline or node timeout, a delayed activity
or retry), brings the node and the run engine up to that instant, lets the
system settle again, and so on up to the target instant.

**The guarantee: time moves only when every component is idle.** Settled
means, all at one moment (:meth:`TimeSkipper.busy_reason` names what is not):

- the scheduler node: every command handled is committed and its listeners
  are told (:meth:`~wf.node.SchedulerNode.quiescent`), no delayed activity is
  due;
- the scheduler core: no activity ready, queued, leased or executing;
- the run engine: no event queued or being applied, no run being changed
  (a run's lock held: a start, a resume, a cancel), no timer due;
- the schedule service: no pass under way, no schedule to reconsider or due,
  no waiting run a free slot lets start
  (:meth:`~wf.schedules.service.ScheduleService.pending_work`);
- the local server's in-process workers: no lease held, so no activity
  running and no result or start report on its way to the server.

Each of these is a state the component keeps, not an inference from timing:
work in flight is visible in one of them at every moment between two awaits
(a completion is an executing activity, then an untold command, then a
queued run event, then a run being changed, then a submitted activity or a
schedule to reconsider), so one look that finds them all idle means nothing
is in flight. The jump itself holds the service's passes off
(:meth:`~wf.schedules.service.ScheduleService.hold`) while it ticks the node
and polls the engine at the new instant, so the service always decides an
instant after the engine has applied what was due then, whichever task the
clock woke first; and it re-arms the liveness deadlines of live workers
from the new instant (as start-up recovery does), since a worker cannot
heartbeat across an interval that took no real time. The same program
therefore records the same occurrences, and starts its runs, at the same
virtual instants every time.

**Stopping.** A skipper given the service replaces the service's drain wait
(:attr:`~wf.schedules.service.ScheduleService.drain_wait`): stopping the
service (or the server, which stops it first) skips time toward the drain's
deadline, from due instant to due instant, so the drain ends when the runs
end, or at ``drain_grace_s`` of virtual time, as it would on a real clock.
Stopping a local server then skips to the instant of any early grant its
workers still hold (:attr:`~wf.server.local.LocalStaticServer.before_workers_stop`),
which their graceful shutdown runs at that instant.

Work that needs a worker still takes real time, but only while the clock
stands still. Remote workers are seen only through the core (their leases).
Local workers run on the server's clock: an activity granted ahead of its due
instant (``SchedulerConfig.early_grant_s``, 50 ms) waits in its worker's slot
for that instant on the virtual clock, as it would on a real one; such a wait
is not work in flight, and its instant is a due instant the skipper jumps to.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Final

from wf.errors import Conflict
from wf.scheduler.model import ActivityState
from wf.schedules.service import ScheduleService
from wf.server.app import WfServer
from wf.server.local import LocalStaticServer
from wf.testing.clock import VirtualClock
from wf.worker import Worker

SETTLE_TIMEOUT_S: Final = 30.0
"""Longest (real) wait for the system to settle before a jump."""
SETTLE_POLL_S: Final = 0.001
"""Real-time pause between two looks while workers run (no look is a guess: see the
module docstring)."""
_BUSY: Final = frozenset({ActivityState.READY, ActivityState.QUEUED, ActivityState.LEASED,
                          ActivityState.EXECUTING})  # fmt: skip


class TimeSkipper:
    """Skips a server's virtual clock from due instant to due instant (see module doc).

    ``server`` is a local server (its in-process workers are watched too) or a
    :class:`~wf.server.app.WfServer`; ``service``, when given, is ticked at each
    instant and its drain skips time (see "Stopping").
    """

    def __init__(
        self,
        server: LocalStaticServer | WfServer,
        clock: VirtualClock,
        service: ScheduleService | None = None,
    ) -> None:
        self._local = server if isinstance(server, LocalStaticServer) else None
        self.server: WfServer = server.server if isinstance(server, LocalStaticServer) else server
        if self.server.node.clock is not clock:
            raise Conflict("the server was not built with this virtual clock")
        self.clock = clock
        self.service = service
        if service is not None:
            service.drain_wait = self._drain_wait
        if self._local is not None:
            self._local.before_workers_stop = self._release_early_grants
        self.jumps = 0
        """Jumps made so far."""
        self._driving = asyncio.Lock()
        # One driver at a time: an advance and a drain never move the clock together.

    # ------------------------------------------------------------- looking

    def busy_reason(self) -> str | None:
        """What is in flight at the current instant, or ``None`` when all is idle."""
        node = self.server.node
        if not node.quiescent():
            return "a scheduler command is committing or its listeners are not told yet"
        now = self.clock.now()
        due = node.reads.next_delay_due()
        if due is not None and due <= now:
            return "a delayed activity is due"
        reads = node.reads
        # An early grant waiting in a local worker's slot for its (future) instant is
        # not work in flight: nothing runs until the clock reaches it (next_due).
        waiting = {a for a, t in self._waiting_until().items() if t > now}
        for activity_id in reads.held_ids():
            held = reads.attempt(activity_id)
            if held is not None and held[0] in _BUSY and activity_id not in waiting:
                return f"activity {activity_id} is {held[0].value}"
        engine = self.server.engine
        if not engine.idle():
            return "the run engine has events to apply"
        run_id = engine.run_being_changed()
        if run_id is not None:
            return f"run {run_id} is being changed"
        timer = engine.next_timer_at()
        if timer is not None and timer <= now:
            return "a run timer is due"
        if self.service is not None and self.service.pending_work():
            return "the schedule service has work"
        for worker in self._workers():
            if any(activity_id not in waiting for activity_id in worker.held()):
                return f"worker {worker.worker_id} holds a lease"
        return None

    def busy(self) -> bool:
        """Whether anything is in flight that must finish before time may move."""
        return self.busy_reason() is not None

    def next_due(self) -> float | None:
        """The next instant something is due (occurrences, timers, delayed activities)."""
        candidates = [
            self.server.node.reads.next_delay_due(),
            self.server.engine.next_timer_at(),
            None if self.service is None else self.service.next_wake_at(),
            *self._waiting_until().values(),
        ]
        due = [t for t in candidates if t is not None]
        return min(due) if due else None

    # ------------------------------------------------------------- settling

    async def settle(self, timeout_s: float = SETTLE_TIMEOUT_S) -> None:
        """Wait (in real time, bounded) until nothing is in flight at the current instant.

        Raises :class:`TimeoutError` naming what is still busy after ``timeout_s``
        (an activity no worker serves, for instance)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        node = self.server.node
        while True:
            due = node.reads.next_delay_due()
            if due is not None and due <= self.clock.now():
                await node.tick()
            await self.server.engine.poll()
            if self.service is not None:
                await self.service.tick()
            await node.durable()
            reason = self.busy_reason()
            if reason is None:
                return
            if loop.time() > deadline:
                raise TimeoutError(f"the system did not settle within {timeout_s} s: {reason}")
            await asyncio.sleep(SETTLE_POLL_S)

    # ------------------------------------------------------------- skipping

    async def advance_to(self, t: float | datetime) -> int:
        """Skip to ``t``, stopping at every due instant on the way; returns the jumps made.

        Settles first and at every instant, and returns settled at ``t``."""
        target = t.timestamp() if isinstance(t, datetime) else float(t)
        jumps = 0
        async with self._driving:
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

    async def _drain_wait(self, deadline: float, changed: asyncio.Event) -> None:
        """The service's drain wait on virtual time: skip toward ``deadline`` from due
        instant to due instant until ``changed`` is set (a run changed) or it is reached."""
        async with self._driving:
            while True:
                await self.settle()
                if changed.is_set() or self.clock.now() >= deadline:
                    return
                due = self.next_due()
                await self._jump(deadline if due is None else min(due, deadline))
                self.jumps += 1

    async def _release_early_grants(self) -> None:
        """Skip to the instant of the early grants local workers still hold (under
        ``early_grant_s`` away): a worker's graceful shutdown runs a started one at
        its instant, which on a virtual clock only the skipper brings."""
        waiting = self._waiting_until()
        if waiting:
            await self.advance_to(max(waiting.values()))

    async def _jump(self, t: float) -> None:
        async with self._passes_held():
            self.clock.advance_to(max(t, self.clock.now()))
            self.server.node.rearm_liveness()
            await self.server.node.tick()
            await self.server.engine.poll()
        await self.settle()

    @contextlib.asynccontextmanager
    async def _passes_held(self) -> AsyncIterator[None]:
        if self.service is None:
            yield
            return
        async with self.service.hold():
            yield

    def _workers(self) -> list[Worker]:
        return [] if self._local is None else self._local.workers

    def _waiting_until(self) -> dict[str, float]:
        """Early grants the local workers hold until their instant (see
        :meth:`~wf.worker.Worker.waiting_until`): activity id -> instant."""
        waiting: dict[str, float] = {}
        for worker in self._workers():
            waiting.update(worker.waiting_until())
        return waiting
