"""The admission service: turns due occurrences into runs, within execution slots.

Theory of operation
-------------------
:class:`ScheduleService` is opt-in (``server.scheduler.enabled``, or
:func:`build_scheduler_service` for a local server) and lives in the server
process that owns the store, so the store's ownership lock
(``<store_root>/scheduler.lock``, or PostgreSQL's advisory lock) is also what
makes it the only one: a second server over the same store is refused before
its service could start.

**Admission.** Each schedule has one entry in a heap keyed by the next instant
it needs attention (:func:`~wf.schedules.admission.next_wake`). The loop
sleeps until the earliest entry (a timer, not a poll: the sleep ends at the
instant; ``poll_interval_s`` only bounds how long it sleeps without looking),
then for each due schedule, under the schedule's lock, asks
:func:`~wf.schedules.admission.next_step` for steps and stores each in one
transaction (:meth:`~wf.store.protocol.Catalog.record_occurrences`): the
occurrences, the schedule's new watermark and counters, and the admitted run.
A schedule is also reconsidered at once when it changes or when one of its
runs finishes (a held candidate may go, overlap may have room).

**Armed admissions.** Only the commit should happen at an instant. So the
loop wakes :data:`ARM_LEAD_S` early and *arms* what is due by then
(:meth:`ScheduleService.arm`): on a private copy of the cached schedule it
decides the step as of the instant and prepares the run (deployment read,
inputs validated). At the instant ``tick`` uses the preparation only if
nothing it read has changed: the schedule's fence (any stored write; an edit,
pause or delete also drops it), the schedule's unfinished-run count, the deployment
saves (:attr:`~wf.runtime.api.WorkflowAPI.deployment_writes`), and ``now``
still before the trigger's following instant and within the misfire
allowance, so ``next_step`` would decide the same. Otherwise it is discarded
and the step decided afresh (:attr:`ScheduleService.armed_discarded`). The
run's ``created_at`` (and deadline) is the commit's time. The service and the
API are the schedules' only writers (one server owns the store), so the
service keeps the last committed copy of each schedule in memory and reads the
store only after a failed step; the commit's expected revision still guards
every write. Arming never delays an instant: it stops :data:`ARM_MARGIN_S`
before the earliest one and prepares at most :data:`ARM_MAX` per wake.

**One pass at a time.** A pass (:meth:`ScheduleService.tick`, and the
loop's :meth:`~ScheduleService.arm`) runs under one lock: the loop and a
caller driving the service (the time skipper of :mod:`wf.testing.timeskip`)
may both call ``tick``, and two dispatches at once would each see the same
free slot while the run the other is beginning has not yet reported
``running``. :meth:`~ScheduleService.hold` holds passes off from outside.

**Execution slots.** ``max_concurrent_runs`` bounds scheduled runs in status
``running`` plus scheduled resumes in progress. An admitted run waits in
``admitted`` (it counts for overlap) until a slot is free; runs begin in
admission order. Interrupted runs hold no slot; resuming one
(:meth:`ScheduleService.resume_gate`) takes a slot first and is refused with
:class:`~wf.errors.Overloaded` while all are taken, or
:class:`~wf.errors.Draining` while draining. Manual runs bypass all of it.

**Shutdown** (:meth:`ScheduleService.stop`): admission stops first; then
scheduled resumes are refused and the service waits up to ``drain_grace_s``
for running scheduled runs to finish; a resume still in progress at the
deadline is cancelled and joined (its resume mark stays for the next start's
recovery to settle). The drain waits through :attr:`ScheduleService.drain_wait`,
a sleep on the service's clock: on a virtual clock nothing would move time
while it waits, so the time skipper replaces it with one that skips time
toward the deadline. Whatever else is running keeps its stored state: the
run engine's recovery at the next start handles it truthfully.

**Revisions.** An admission writes the schedule under its ``fence`` (the
store row's compare-and-set revision) and leaves its ``revision`` alone: only
an operator's edit moves that, so a get-then-update does not race admission.

**Finished.** A schedule whose trigger yields no further instant once its
watermark has passed it (a one-shot that was admitted, skipped or rejected)
and holds no candidate is marked ``finished_at`` in one more write: its views
say ``finished`` and it never needs attention again.

**Per-schedule allowance.** ``misfire="skip"`` drops starts later than the
schedule's own ``misfire_lateness_s`` when it has one, else the server's
``server.scheduler.misfire_lateness_s``.

**Fail closed.** A schedule whose record, or one of whose runs' records, does
not decode is *blocked*: no admission, and its overlap is never cleared by
guessing; :attr:`ScheduleService.blocked` (the API's
:attr:`~wf.schedules.api.ScheduleAPI.blocked`, so ``get_schedule`` and
``list_schedules`` answer ``status: "blocked"`` with the reason and no
``next_instant``) says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol, runtime_checkable

import msgspec

from wf.clock import Clock, sleep_until
from wf.errors import Conflict, CorruptRecord, Draining, NotFound, Overloaded, WfError
from wf.runtime.engine import RunEngine
from wf.runtime.plan import Plan
from wf.runtime.runs import Run, RunStatus, run_from_row, run_row
from wf.runtime.runs import Trigger as RunTrigger
from wf.schedules.admission import Occurrence, Step, next_step, next_wake
from wf.schedules.api import ScheduleAPI, occurrence_row
from wf.schedules.config import ScheduleServiceConfig
from wf.schedules.model import (
    OneShotTrigger,
    Schedule,
    next_instant_after,
    schedule_from_row,
    schedule_row,
)

log = logging.getLogger("wf.schedules")

LATENESS_SAMPLES_MAX: Final = 10_000
"""Admission lateness samples kept for the metrics and the benchmark."""
ARM_LEAD_S: Final = 0.1
"""How long before an instant the loop prepares its admission (see "Armed admissions")."""
ARM_MAX: Final = 64
"""Most admissions prepared ahead of one wake-up; the rest are prepared at their instant."""
ARM_MARGIN_S: Final = 0.002
"""Arming stops this close to the earliest instant it prepares, so it never delays it."""


@dataclass(slots=True)
class _Armed:
    """An admission prepared ahead of its instant, valid while nothing it read changed."""

    instant: float
    fence: int
    """The schedule fence it was computed from (any stored write moves it)."""
    unfinished: int
    """The schedule's unfinished scheduled runs then (overlap)."""
    deployment_writes: int
    """:attr:`WorkflowAPI.deployment_writes` then (the pinned deployment)."""
    valid_until: float
    """The trigger's following instant, or the misfire allowance's end if sooner."""
    schedule: Schedule
    """A private copy with ``step`` applied."""
    step: Step
    run: Run
    plan: Plan


@dataclass(frozen=True, slots=True)
class _System:
    """The service acts for every tenant."""

    tenants: frozenset[str] | None = None


_SYSTEM: Final = _System()

DrainWait = Callable[[float, asyncio.Event], Awaitable[None]]
"""``wait(deadline, changed)``: return at ``deadline`` (service clock) or once ``changed``
is set, whichever is first."""


class ScheduleService:
    """Admission and execution slots for deployment schedules (see the module docstring)."""

    def __init__(
        self,
        api: ScheduleAPI,
        engine: RunEngine,
        config: ScheduleServiceConfig,
        clock: Clock | None = None,
    ) -> None:
        self.api = api
        self.engine = engine
        self.config = config
        self.clock: Clock = clock or api.clock
        self.state = "stopped"
        """``stopped``, ``running`` or ``draining``."""
        self.blocked: dict[str, str] = api.blocked
        """Schedules refused admission because their records are corrupt, and why
        (the API's own dict, so its views say so)."""
        self.lateness_s: deque[float] = deque(maxlen=LATENESS_SAMPLES_MAX)
        """Admission lateness (admission instant minus occurrence instant) samples."""
        self.admitted_total = 0
        """Occurrences admitted since start."""
        self.skipped: defaultdict[tuple[str, str], int] = defaultdict(int)
        """``(schedule_id, reason)`` → occurrences skipped (``overlap``, ``misfire``)."""
        self._unfinished: defaultdict[str, dict[str, RunStatus]] = defaultdict(dict)
        self._waiting: dict[str, str] = {}  # run_id -> schedule_id, in admission order
        self._running: set[str] = set()
        self._resuming: set[asyncio.Task[Any]] = set()
        self._heap: list[tuple[float, str]] = []
        self._wake_at: dict[str, float] = {}
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._heard: set[str] | None = None
        self._schedules: dict[str, Schedule] = {}
        """Latest committed schedules (the service and the API are their only writers)."""
        self._armed: dict[str, _Armed] = {}
        self.armed_used = 0
        """Admissions committed from an armed preparation."""
        self.armed_discarded = 0
        """Armed preparations found stale at their instant (prepared again then)."""
        self._pass = asyncio.Lock()
        """Held by a pass (tick, arm): one at a time (see the module docstring)."""
        self.drain_wait: DrainWait = self._sleep
        """How :meth:`stop` waits for running runs until its deadline: a sleep on
        :attr:`clock`. A time-skipping test replaces it so that virtual time moves
        during the drain (:class:`wf.testing.timeskip.TimeSkipper` does)."""

    # ----------------------------------------------------------- lifecycle

    async def start(self, *, background: bool = True) -> None:
        """Load schedules and unfinished scheduled runs, then admit (in the background)."""
        if self.state != "stopped":
            raise Conflict(f"the schedule service is {self.state}")
        self.blocked.clear()
        # Listen before loading: a run that changes while we read is then known from
        # its event, which is newer than what the load returns.
        self._heard = set()
        self.engine.listeners.append(self._on_run)
        self.api.listeners.append(self._on_schedule)
        for row in await self.api.store.live_runs():
            if row.schedule_id is None or row.run_id in self._heard:
                continue
            try:
                run = run_from_row(row)
            except CorruptRecord as exc:
                self.blocked[row.schedule_id] = f"run {row.run_id}: {exc.message}"
                continue
            self._track(run)
        self._heard = None
        for stored in await self.api.store.list_schedules():
            try:
                schedule = schedule_from_row(stored)
            except CorruptRecord as exc:
                self.blocked[stored.schedule_id] = exc.message
                continue
            self._schedules[schedule.schedule_id] = schedule
            self._plan_wake(schedule)
            self._dirty.add(schedule.schedule_id)
        for schedule_id, why in self.blocked.items():
            log.error("schedule %s blocked: %s", schedule_id, why)
        self.engine_gate_install()
        self.state = "running"
        if background:
            self._task = asyncio.create_task(self._loop(), name="wf-schedule-service")

    def engine_gate_install(self) -> None:
        """Route resumes of scheduled runs through :meth:`resume_gate`."""
        self.api.workflow.resume_gate = self.resume_gate

    async def stop(self, *, drain: bool = True) -> None:
        """Stop admitting, drain within ``drain_grace_s``, then let go (see module doc).

        ``drain=False`` lets go at once: a cluster node that lost ownership may not
        write, and the new active's recovery takes the scheduled runs over."""
        if self.state == "stopped":
            return
        self.state = "draining"
        self._wake.set()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})
        deadline = self.clock.now() + (self.config.drain_grace_s if drain else 0.0)
        while (self._running or self._resuming) and self.clock.now() < deadline:
            self._changed.clear()
            await self.drain_wait(deadline, self._changed)
        for resume in list(self._resuming):
            resume.cancel()
        if self._resuming:
            await asyncio.wait(set(self._resuming))
        if self._running:
            log.warning(
                "schedule service stopped with %d scheduled run(s) still running; the next "
                "start's recovery takes them over",
                len(self._running),
            )
        with contextlib.suppress(ValueError):
            self.engine.listeners.remove(self._on_run)
        with contextlib.suppress(ValueError):
            self.api.listeners.remove(self._on_schedule)
        if self.api.workflow.resume_gate == self.resume_gate:
            self.api.workflow.resume_gate = None
        self._armed.clear()
        self._schedules.clear()
        self._running.clear()  # the next start (or the next active) tracks them anew
        self.state = "stopped"

    async def _sleep(self, deadline: float, changed: asyncio.Event) -> None:
        await sleep_until(self.clock, deadline, changed)

    # --------------------------------------------------------------- loop

    async def _loop(self) -> None:
        while self.state == "running":
            failed = False
            try:
                await self.tick()
            except WfError:
                failed = True  # what it left undone stays due: retried after the interval
                log.exception("schedule service: a tick failed; retrying after the poll interval")
            if not failed and (self._dirty or self._startable()):
                continue
            try:
                await self.arm(self.clock.now() + ARM_LEAD_S)
            except WfError:
                log.exception("schedule service: preparing admissions failed")
            if not failed and (self._dirty or self._startable()):
                continue
            now = self.clock.now()
            until = now + self.config.poll_interval_s
            if self._heap:
                wake, schedule_id = self._heap[0]
                armed = self._armed.get(schedule_id)
                if (armed is None or armed.instant != wake) and wake - ARM_LEAD_S > now:
                    wake -= ARM_LEAD_S  # wake early enough to prepare it
                until = min(until, wake)
            self._wake.clear()
            await sleep_until(self.clock, until, self._wake)

    def pending_work(self) -> bool:
        """Whether the service has work now: a pass under way, or (while running) a
        schedule to reconsider or due, or a waiting run that a slot allows to start."""
        if self._pass.locked():
            return True
        if self.state != "running":
            return False
        due = self.next_wake_at()
        return (
            bool(self._dirty) or self._startable() or (due is not None and due <= self.clock.now())
        )

    def next_wake_at(self) -> float | None:
        """The earliest instant a schedule needs attention (for time-skipping tests);
        ``None`` while not running (nothing is admitted then)."""
        if self.state != "running" or not self._heap:
            return None
        return self._heap[0][0]

    @contextlib.asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        """Hold passes off (the loop's, anyone's) for the duration of the block.

        The time skipper holds them while it brings the scheduler and the run engine
        up to a new instant, so that a pass at that instant sees what the engine
        applied then (a run that ended frees its overlap place first), whichever task
        the clock woke first."""
        async with self._pass:
            yield

    async def tick(self, now: float | None = None) -> int:
        """Admit everything due at ``now`` (default: the clock), then start waiting runs
        while slots allow. Returns how many occurrences were recorded.

        Safe to call while another pass runs (the loop's, say): it waits for it."""
        async with self._pass:
            return await self._tick(now)

    async def _tick(self, now: float | None) -> int:
        if self.state != "running":
            return 0
        now = self.clock.now() if now is None else now
        due = set(self._dirty)
        self._dirty.clear()
        while self._heap and self._heap[0][0] <= now:
            wake, schedule_id = heapq.heappop(self._heap)
            if self._wake_at.get(schedule_id) == wake:
                del self._wake_at[schedule_id]
                due.add(schedule_id)
        recorded = 0
        try:
            for schedule_id in sorted(due):
                recorded += await self._admit(schedule_id, now)
        except BaseException:
            # Taken off the heap above: keep them due, or a store failure would
            # silence them for good (a pass over one already admitted finds nothing).
            self._dirty.update(due)
            raise
        await self._dispatch()
        return recorded

    # ---------------------------------------------------------- admission

    async def _admit(self, schedule_id: str, now: float) -> int:
        recorded = 0
        async with self.api.locks[schedule_id]:
            armed = self._armed.pop(schedule_id, None)
            # Taken out while in use: if a step fails half-way, the next pass reads
            # the stored record instead of this partly advanced copy.
            schedule = self._schedules.pop(schedule_id, None)
            if schedule is None:
                schedule = await self._read(schedule_id)
                if schedule is None:
                    return 0
            if schedule.deleted:
                return 0
            if schedule.paused or schedule_id in self.blocked:
                self._schedules[schedule_id] = schedule
                return 0
            unfinished = len(self._unfinished[schedule_id])
            if armed is not None and not self._still_valid(armed, schedule, unfinished, now):
                self.armed_discarded += 1
                armed = None
            while self.state == "running":
                prepared: tuple[Run, Plan] | None = None
                if armed is not None:
                    schedule, step = armed.schedule, armed.step
                    prepared = (_created_at(armed.run, now), armed.plan)
                    armed = None
                    self.armed_used += 1
                else:
                    maybe = next_step(
                        schedule,
                        now,
                        unfinished=len(self._unfinished[schedule_id]),
                        allowance_s=self.allowance(schedule),
                    )
                    if maybe is None:
                        break
                    step = maybe
                base = schedule.fence
                schedule.fence = base + 1
                schedule.updated_at = now
                await self._store_step(schedule, base, step, now, prepared)
                recorded += len(step.record)
            if self.state == "running" and _finishes(schedule):
                base = schedule.fence
                schedule.finished_at = now
                schedule.fence = base + 1
                schedule.updated_at = now
                await self.api.store.put_schedule(schedule_row(schedule), expected_revision=base)
            self._schedules[schedule_id] = schedule
            self._plan_wake(schedule)
        return recorded

    async def _read(self, schedule_id: str) -> Schedule | None:
        """The stored schedule; ``None`` if absent or blocked as corrupt."""
        row = await self.api.store.get_schedule(schedule_id)
        if row is None:
            return None
        try:
            return schedule_from_row(row)
        except CorruptRecord as exc:
            self.blocked[schedule_id] = exc.message
            log.error("schedule %s blocked: %s", schedule_id, exc.message)
            return None

    # ------------------------------------------------------ armed admissions

    async def arm(self, horizon: float) -> int:
        """Prepare the admissions of schedules due by ``horizon`` (see the module doc).

        Returns how many were armed. Only the loop calls it, ``ARM_LEAD_S`` ahead;
        a preparation is used at the instant only if nothing it read has changed."""
        async with self._pass:
            return await self._arm(horizon)

    async def _arm(self, horizon: float) -> int:
        if self.state != "running":
            return 0
        due: list[tuple[float, str]] = []
        while self._heap and self._heap[0][0] <= horizon and len(due) < ARM_MAX:
            entry = heapq.heappop(self._heap)
            if self._wake_at.get(entry[1]) == entry[0]:
                due.append(entry)
        for entry in due:
            heapq.heappush(self._heap, entry)
        armed = 0
        for wake, schedule_id in due:
            if self.clock.now() >= due[0][0] - ARM_MARGIN_S:
                break  # the instant itself has priority
            current = self._armed.get(schedule_id)
            if current is not None and current.instant == wake:
                continue
            if await self._arm_one(schedule_id, wake):
                armed += 1
        return armed

    async def _arm_one(self, schedule_id: str, instant: float) -> bool:
        schedule = self._schedules.get(schedule_id)
        if schedule is None or schedule.paused or schedule.deleted or schedule_id in self.blocked:
            return False
        unfinished = len(self._unfinished[schedule_id])
        writes = self.api.workflow.deployment_writes
        copy = _copy(schedule)
        allowance = self.allowance(schedule)
        step = next_step(copy, instant, unfinished=unfinished, allowance_s=allowance)
        if step is None or step.admit is None:
            return False  # nothing to admit then: the instant's own pass records it
        try:
            run, plan = await self._prepare(copy, step.admit)
        except WfError:
            return False  # the instant's own pass records the rejection
        following = next_instant_after(schedule.trigger, instant)
        limit = instant + allowance
        self._armed[schedule_id] = _Armed(
            instant=instant,
            fence=schedule.fence,
            unfinished=unfinished,
            deployment_writes=writes,
            valid_until=limit if following is None else min(following, limit),
            schedule=copy,
            step=step,
            run=run,
            plan=plan,
        )
        return True

    def _still_valid(self, armed: _Armed, schedule: Schedule, unfinished: int, now: float) -> bool:
        """Whether ``next_step`` at ``now`` would decide what ``armed`` decided then."""
        return (
            armed.fence == schedule.fence
            and armed.unfinished == unfinished
            and armed.deployment_writes == self.api.workflow.deployment_writes
            and armed.instant <= now < armed.valid_until
        )

    def allowance(self, schedule: Schedule) -> float:
        """The misfire allowance of ``schedule``: its own, else the server's."""
        if schedule.misfire_lateness_s is not None:
            return schedule.misfire_lateness_s
        return self.config.misfire_lateness_s

    async def _prepare(self, schedule: Schedule, instant: float) -> tuple[Run, Plan]:
        return await self.api.workflow.prepare_run(
            schedule.deployment_id,
            schedule.inputs,
            caller=_SYSTEM,
            max_steps=schedule.max_steps,
            trigger=RunTrigger(
                kind="schedule", schedule_id=schedule.schedule_id, occurrence=instant
            ),
        )

    async def _store_step(
        self,
        schedule: Schedule,
        base: int,
        step: Step,
        now: float,
        prepared: tuple[Run, Plan] | None = None,
    ) -> None:
        run = plan = None
        record = list(step.record)
        if step.admit is not None:
            try:
                run, plan = prepared or await self._prepare(schedule, step.admit)
                self.engine.node.reads.admit_new_workflow(now)
            except WfError as exc:  # Overloaded (backpressure) included
                record = [
                    Occurrence(o.instant, "preflight-rejected", f"{exc.code}: {exc.message}")
                    if o.status == "admitted"
                    else o
                    for o in record
                ]
                run = plan = None
        stored = await self.api.store.record_occurrences(
            schedule_row(schedule),
            expected_revision=base,
            occurrences=[occurrence_row(schedule.schedule_id, o, now) for o in record],
            run=None if run is None else run_row(run, seq=0, updated_at=now),
        )
        for o in record:
            if o.status == "skipped-overlap":
                self.skipped[(schedule.schedule_id, "overlap")] += 1
            elif o.status == "skipped-misfire":
                self.skipped[(schedule.schedule_id, "misfire")] += 1
        if stored is not None and plan is not None and step.admit is not None:
            self.admitted_total += 1
            # Measured once the admission is durable, not from the tick's start.
            self.lateness_s.append(max(0.0, self.clock.now() - step.admit))
            self.engine.adopt(stored, plan)

    def _plan_wake(self, schedule: Schedule) -> None:
        sid = schedule.schedule_id
        self._wake_at.pop(sid, None)
        if schedule.deleted or schedule.paused:
            return
        wake = next_wake(schedule)
        if wake is not None:
            self._wake_at[sid] = wake
            heapq.heappush(self._heap, (wake, sid))
            if len(self._heap) > 2 * len(self._wake_at) + 64:
                self._heap = [(w, s) for s, w in self._wake_at.items()]
                heapq.heapify(self._heap)

    # ------------------------------------------------------------- slots

    def _startable(self) -> bool:
        return (
            self.state == "running"
            and bool(self._waiting)
            and len(self._running) + len(self._resuming) < self.config.max_concurrent_runs
        )

    async def _dispatch(self) -> None:
        while self._startable():
            run_id = next(iter(self._waiting))
            schedule_id = self._waiting.pop(run_id)
            try:
                await self.engine.begin(run_id)
            except (Conflict, NotFound):
                pass
            except BaseException:
                if run_id not in self._running:  # not begun: first in line on the next pass
                    self._waiting = {run_id: schedule_id, **self._waiting}
                raise

    @contextlib.asynccontextmanager
    async def resume_gate(self, run: Run) -> AsyncIterator[None]:
        """Hold an execution slot for a scheduled run's resume (see the module docstring)."""
        if run.trigger.kind != "schedule":
            yield
            return
        if self.state != "running":
            raise Draining(
                "the server is draining: scheduled resumes are refused until it restarts",
                run_id=run.run_id,
            )
        if len(self._running) + len(self._resuming) >= self.config.max_concurrent_runs:
            raise Overloaded(
                f"all {self.config.max_concurrent_runs} execution slots are taken; resume later",
                retry_after_s=self.config.poll_interval_s,
                run_id=run.run_id,
            )
        task = asyncio.current_task()
        assert task is not None
        self._resuming.add(task)
        try:
            yield
        finally:
            self._resuming.discard(task)
            self._changed.set()
            self._wake.set()

    # ---------------------------------------------------------- listeners

    def _track(self, run: Run) -> None:
        schedule_id = run.trigger.schedule_id
        if run.trigger.kind != "schedule" or schedule_id is None:
            return
        unfinished = self._unfinished[schedule_id]
        if run.final:
            unfinished.pop(run.run_id, None)
            self._dirty.add(schedule_id)  # overlap may have room for a held candidate
        else:
            unfinished[run.run_id] = run.status
        if run.status is RunStatus.ADMITTED:
            self._waiting.setdefault(run.run_id, schedule_id)
        else:
            self._waiting.pop(run.run_id, None)
        if run.status is RunStatus.RUNNING:
            self._running.add(run.run_id)
        else:
            self._running.discard(run.run_id)

    def _on_run(self, run: Run) -> None:
        if self._heard is not None:
            self._heard.add(run.run_id)
        self._track(run)
        self._changed.set()
        self._wake.set()

    def _on_schedule(self, schedule: Schedule) -> None:
        self._schedules[schedule.schedule_id] = _copy(schedule)
        self._armed.pop(schedule.schedule_id, None)
        self._plan_wake(schedule)
        self._dirty.add(schedule.schedule_id)
        self._wake.set()

    # ------------------------------------------------------------ reading

    def unfinished_runs(self, schedule_id: str) -> int:
        """Admitted, running and interrupted runs of a schedule (its overlap count)."""
        return len(self._unfinished.get(schedule_id, {}))

    def slots_in_use(self) -> int:
        """Execution slots taken (running scheduled runs plus resumes in progress)."""
        return len(self._running) + len(self._resuming)


_encoder: Final = msgspec.json.Encoder()
_decoder: Final = msgspec.json.Decoder(Schedule)


def _copy(schedule: Schedule) -> Schedule:
    """A deep copy (admission decisions change a schedule in place)."""
    return _decoder.decode(_encoder.encode(schedule))


def _finishes(schedule: Schedule) -> bool:
    """Whether ``schedule`` has just run out of instants (see "Finished"). Only a
    one-shot can: a valid cron expression always has a next instant (and asking
    croniter on every admission would double its cost)."""
    return (
        isinstance(schedule.trigger, OneShotTrigger)
        and schedule.finished_at is None
        and not schedule.deleted
        and not schedule.paused
        and schedule.candidate is None
        and next_wake(schedule) is None
    )


def _created_at(run: Run, now: float) -> Run:
    """A run prepared ahead of time as if prepared at ``now`` (its creation and deadline)."""
    deadline = None if run.deadline is None else run.deadline - run.created_at + now
    return msgspec.structs.replace(run, created_at=now, deadline=deadline)


class _ServerSection(Protocol):
    @property
    def scheduler(self) -> ScheduleServiceConfig: ...


class _ServerConfig(Protocol):
    @property
    def server(self) -> _ServerSection: ...


class ScheduleHost(Protocol):
    """What :func:`build_scheduler_service` needs of a server (a
    :class:`~wf.server.app.WfServer` is one); typed here, since the schedules layer
    may not import the server."""

    @property
    def config(self) -> _ServerConfig:
        """Its configuration; ``config.server.scheduler`` is the service's default."""
        ...

    @property
    def schedules(self) -> ScheduleAPI | None:
        """Its schedules API (``None``: built without schedules)."""
        ...

    @property
    def engine(self) -> RunEngine:
        """Its run engine, which starts the admitted runs."""
        ...

    schedule_service: ScheduleService | None
    """The service its metrics show and its ``stop()`` drains first."""


@runtime_checkable
class ScheduleHostWrapper(Protocol):
    """A server wrapping a :class:`ScheduleHost` (``wf.server.local.LocalStaticServer``)."""

    @property
    def server(self) -> ScheduleHost:
        """The wrapped server."""
        ...


def build_scheduler_service(
    server: ScheduleHost | ScheduleHostWrapper,
    config: ScheduleServiceConfig | None = None,
    *,
    clock: Clock | None = None,
) -> ScheduleService:
    """The admission service of ``server`` (a :class:`~wf.server.app.WfServer` or a local
    server), not started yet. ``config`` defaults to the server's ``server.scheduler``.

    If the server has no service of its own it adopts this one: its metrics show it
    and stopping the server stops (drains) it first."""
    wf_server = server.server if isinstance(server, ScheduleHostWrapper) else server
    api = wf_server.schedules
    if api is None:
        raise Conflict("this server was built without deployment schedules (schedules=True)")
    settings = config or wf_server.config.server.scheduler
    service = ScheduleService(api, wf_server.engine, settings, clock=clock)
    if wf_server.schedule_service is None:
        # The server's metrics and its stop() (which drains it first) see this service.
        wf_server.schedule_service = service
    return service


SchedulerServiceConfig = ScheduleServiceConfig
"""004's name for the service settings (:class:`wf.server.config.ScheduleServiceConfig`)."""
