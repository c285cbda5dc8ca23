"""The run engine: the asyncio shell that makes the DAG engine durable.

Theory of operation
-------------------
:class:`RunEngine` owns the live runs of one server. Every change to a run
follows one order: decide (:mod:`wf.runtime.dag`, pure), **store** the run
(one ``update_run`` under its revision), then carry the effects out (submit
activities to the :class:`~wf.node.SchedulerNode`, cancel activities, arm
timers). A crash between the store and the effects leaves a run that says
more than exists; recovery closes the gap, because every effect is
idempotent by a deterministic id (``run-000001.<node>``, and
``run-000001.<node>.<i>`` for item ``i`` of a map node, matched on its own).

The engine learns of activity results from the node's committed outcomes (a
listener): completions carry the result, failures carry the cause. A node's
``timeout_s`` is its activity's ``start_to_close_s``, which the scheduler
enforces itself (it revokes the lease and fails the attempt), so an attempt
that outlived it arrives as any failed attempt does. Events queue and
one task applies them in order, each under the run's lock, so an API call
(``resume_run``, ``cancel_run``) never interleaves with an event of the same
run. The scheduler persists a completion's result with its transition, so an
event lost to a crash is found again in the activity's history.

Timers (timer nodes, run deadlines) sit in one heap. The
background loop sleeps until the earliest or until an event arrives;
:meth:`RunEngine.poll` does one pass at the clock's current instant, which is
what tests on a virtual clock call.

Recovery (:meth:`RunEngine.start`, after the node recovered): every live run
is read back. Admitted manual runs begin; submitted nodes are matched with
their activities: still live in the scheduler (leased to a remote worker that
keeps going) → wait; finished → apply the stored outcome; never stored →
submit. A non-idempotent activity that was executing in a process that died
is failed by the scheduler itself (``may_have_executed``), and the run fails
closed with that diagnosis. A resume mark without its answer is settled (see
:meth:`RunEngine.resume_run`). Activities of runs that already stopped are
withdrawn. A run whose record does not decode is reported in
:attr:`RunEngine.diagnostics` and left alone (fail closed).

Size (docs/workflows.md, "Limits"): every completion is checked against
:attr:`RunEngine.run_bytes_max` on the run's running size (:mod:`wf.runtime.dag`),
which each write sets to the bytes it stored, an encoding the write pays anyway. A
write that would still exceed the bound is stored without the checkpoint's copy of
the outputs, or else dropped: the run as stored is read back and fails closed with
``run_too_large`` (:meth:`RunEngine._commit`), so the store never holds more.

When the store fails under it (the node stopped writing, or a run write
failed), the loop does not give up: the event it was applying may be lost,
so it waits until the node accepts writes again (the node reloads by itself
and tells the engine through ``reload_listeners``) and then reconciles every
live run with the reloaded core the way recovery does, which finds a lost
completion in the activity's history and submits again what never reached
the scheduler.

Why one module of about 950 lines: the live path (events, timers, API
calls) and the recovery path (:meth:`RunEngine._recover`, ``reconcile``)
change runs under the same per-run lock, through the same decide-store-carry
order and the same private timer heap; split apart, each half would have to
reach into the other's locks and heap. The pure decisions already live
elsewhere (:mod:`wf.runtime.dag`); what is here is only the shell.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import heapq
import logging
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from wf.clock import Clock, sleep_until
from wf.errors import Conflict, CorruptRecord, InvalidArgument, NotFound, StoreUnavailable, WfError
from wf.node import SchedulerNode
from wf.runtime import dag
from wf.runtime.artifacts import artifact_from_row
from wf.runtime.plan import ActivityNode, MapNode, Plan
from wf.runtime.runs import (
    FINAL_STATUSES,
    RUN_BYTES_MAX,
    RUN_TOO_LARGE,
    NodeStatus,
    ResumeMark,
    Run,
    RunError,
    RunStatus,
    node_of_activity,
    run_from_row,
    run_row,
    run_seq,
)
from wf.runtime.schema import instance_problems
from wf.scheduler import commands as cmd
from wf.scheduler.model import ActivityState, CancelOrigin, TransitionReason
from wf.scheduler.outputs import (
    ActivityCancelled,
    ActivityCompleted,
    ActivityFailed,
    Outcome,
    Transition,
)
from wf.store.protocol import Catalog, Diagnostic, RunRow
from wf.wire.bounds import check_json_bytes

log = logging.getLogger("wf.runtime")

WAKE_INTERVAL_MAX_S: Final = 1.0
"""Longest the loop sleeps without looking at the clock."""


@dataclass(frozen=True, slots=True, order=True)
class _Timer:
    due: float
    seq: int
    kind: str  # "node" (timer node), "deadline" (run)
    run_id: str
    node_id: str = ""


@dataclass(frozen=True, slots=True)
class _Event:
    kind: str  # "completed", "failed", "cancelled"
    activity_id: str
    result: bytes = b""
    error: RunError | None = None


class RunEngine:
    """Live runs over one store and scheduler node (see the module docstring)."""

    def __init__(self, store: Catalog, node: SchedulerNode, clock: Clock) -> None:
        self.store = store
        self.node = node
        self.clock = clock
        self.diagnostics: list[Diagnostic] = []
        """Runs left alone at recovery because their records are corrupt."""
        self.listeners: list[Callable[[Run], None]] = []
        """Called with a run after every stored change (schedules watch them)."""
        self.run_bytes_max = RUN_BYTES_MAX
        """Largest stored run document (see :data:`~wf.runtime.runs.RUN_BYTES_MAX`; tests
        set a small one)."""
        self._live: dict[str, tuple[Run, Plan]] = {}
        self._plans: dict[tuple[str, int], Plan] = {}
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._events: asyncio.Queue[_Event] = asyncio.Queue()
        self._timers: list[_Timer] = []
        self._timer_seq = 0
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._polling = asyncio.Lock()
        self._reconcile_due = False
        """Set when live runs must be matched with the core again (see _loop)."""
        node.listeners.append(self._on_outcome)
        node.reload_listeners.append(self._on_reload)

    # ----------------------------------------------------------- lifecycle

    async def start(self, *, background: bool = True) -> None:
        """Recover the live runs (the node must be started), then follow events.

        A cluster node starts the engine again each time it becomes the active node:
        what it held from an earlier term is forgotten, the store is the truth."""
        self._live.clear()
        self._timers.clear()
        self._events = asyncio.Queue()
        self._reconcile_due = False
        await self._recover()
        if background:
            self._task = asyncio.create_task(self._loop(), name="wf-run-engine")

    async def stop(self) -> None:
        """Stop following events (runs stay as stored; the next start recovers them)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})

    # ------------------------------------------------------------ reading

    async def get(self, run_id: str) -> tuple[Run, Plan]:
        """A run and its plan (live ones from memory); NotFound if there is none."""
        held = self._live.get(run_id)
        if held is not None:
            return held
        row = await self.store.get_run(run_id)
        if row is None:
            raise NotFound(f"run {run_id!r} does not exist", run_id=run_id)
        run = run_from_row(row)
        return run, await self.plan_of(run)

    @contextlib.asynccontextmanager
    async def reading(self, run_id: str) -> AsyncIterator[None]:
        """Hold off changes to a live run while a reader looks at it.

        A change mutates the live run, then stores it, under the run's lock; a
        reader inside this block sees only states the store holds, never one
        whose write is still in flight (nor one that changes under its feet).
        Final and unknown runs never change, so they take no lock."""
        if run_id not in self._live:
            yield
            return
        async with self._locks[run_id]:
            yield

    async def plan_of(self, run: Run) -> Plan:
        """The run's pinned plan; CorruptRecord if the artifact no longer matches it."""
        key = (run.artifact_id, run.artifact_version)
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        row = await self.store.get_artifact(*key)
        if row is None:
            raise CorruptRecord(
                f"run {run.run_id!r}: pinned artifact {key[0]} v{key[1]} is missing",
                table="artifacts",
                key=f"{key[0]}:{key[1]}",
            )
        artifact = artifact_from_row(row)
        if artifact.content_hash != run.content_hash:
            raise CorruptRecord(
                f"run {run.run_id!r} pinned {run.content_hash}, artifact {key[0]} v{key[1]} "
                f"holds {artifact.content_hash}",
                table="artifacts",
                key=f"{key[0]}:{key[1]}",
            )
        self._plans[key] = artifact.plan
        return artifact.plan

    # ------------------------------------------------------------ changes

    async def admit(self, run: Run, plan: Plan) -> Run:
        """Store a new admitted run (its id and number come from the store)."""
        row = await self.store.insert_run(run_row(run, seq=0, updated_at=self.clock.now()))
        return self.adopt(row, plan)

    def adopt(self, row: RunRow, plan: Plan) -> Run:
        """Take charge of a run just inserted (by :meth:`admit` or by a schedule's
        admission transaction); its body's empty id is the row's."""
        run = run_from_row(row)
        self._plans.setdefault((run.artifact_id, run.artifact_version), plan)
        if not run.final:
            self._live[run.run_id] = (run, plan)
        self._notify(run)
        return run

    async def begin(self, run_id: str) -> Run:
        """Start an admitted run (Conflict if it is not admitted)."""
        async with self._locks[run_id]:
            run, plan = await self.get(run_id)
            if run.status is not RunStatus.ADMITTED:
                raise Conflict(
                    f"run {run_id!r} is {run.status}, not admitted",
                    run_id=run_id,
                    status=run.status,
                )
            now = self.clock.now()
            effects = dag.begin(run, plan, now)
            if run.deadline is not None:
                self._arm(_Timer(run.deadline, 0, "deadline", run_id))
            await self._commit(run, plan, effects)
            return run

    async def resume_run(self, run_id: str, answer: Any, node_id: str | None) -> Run:
        """Answer an interrupt node.

        A resume first stores a :class:`~wf.runtime.runs.ResumeMark` (``started``),
        then applies the validated answer and marks it ``applied`` in one write,
        so the store always tells whether an answer took effect: a ``started``
        mark on top of which nothing was written means it did not (recovery marks
        it ``abandoned`` and the run stays resumable); anything else is
        contradictory and fails the run closed (``resume_ambiguous``).
        """
        async with self._locks[run_id]:
            run, plan = await self.get(run_id)
            waiting = dag.awaiting(run, plan)
            if run.final or not waiting:
                raise Conflict(
                    f"run {run_id!r} is {run.status} and awaits no input",
                    run_id=run_id,
                    status=run.status,
                )
            if node_id is None:
                if len(waiting) > 1:
                    raise InvalidArgument(
                        f"run {run_id!r} awaits several interrupts; name one with node_id",
                        field="node_id",
                        awaiting=[n.id for n in waiting],
                    )
                target = waiting[0]
            else:
                found = [n for n in waiting if n.id == node_id]
                if not found:
                    raise InvalidArgument(
                        f"node {node_id!r} of run {run_id!r} awaits no input",
                        field="node_id",
                        awaiting=[n.id for n in waiting],
                    )
                target = found[0]
            # Refused before anything is stored: an answer the run cannot hold must
            # not fail the run (the caller may send a smaller one).
            answer_bytes = len(msgspec.json.encode(answer))
            if run.size + answer_bytes > self.run_bytes_max:
                raise InvalidArgument(
                    f"the answer to {target.id!r} ({answer_bytes} bytes) would take run "
                    f"{run_id!r} past its {self.run_bytes_max}-byte bound",
                    field="answer",
                    node=target.id,
                )
            now = self.clock.now()
            mark = ResumeMark(
                attempt=len(run.resumes) + 1, node=target.id, at=now, base_revision=run.revision
            )
            run.resumes.append(mark)
            await self._save(run)
            problems = instance_problems(target.input_schema, answer)
            if problems:
                mark.state = "rejected"
                mark.finished_at = now
                await self._save(run)
                raise InvalidArgument(
                    f"the answer to {target.id!r} does not match its input schema: "
                    f"{'; '.join(problems)}",
                    field="answer",
                    node=target.id,
                    problems=problems,
                )
            effects = dag.answered(run, plan, target.id, answer, now)
            mark.state = "applied"
            mark.finished_at = now
            await self._commit(run, plan, effects)
            return run

    async def cancel_run(self, run_id: str, reason: str) -> Run:
        """Cancel a run that has not stopped (a stopped one answers Conflict)."""
        async with self._locks[run_id]:
            run, plan = await self.get(run_id)
            if run.final:
                raise Conflict(
                    f"run {run_id!r} already {run.status}", run_id=run_id, status=run.status
                )
            now = self.clock.now()
            error = RunError(code="cancelled", message=reason or "cancelled")
            effects = dag.stop(run, RunStatus.CANCELLED, error, now)
            await self._commit(run, plan, effects)
            return run

    # ------------------------------------------------------------ internals

    async def _save(self, run: Run, *, bounded: bool = False) -> None:
        """Store ``run`` as its next revision; ``bounded``: :class:`_TooLarge` instead
        when its document is larger than :attr:`run_bytes_max` (see :meth:`_commit`)."""
        run.revision += 1
        try:
            row = run_row(run, seq=run_seq(run.run_id), updated_at=self.clock.now())
            if bounded and len(row.body) > self.run_bytes_max:
                row = self._lighter(run, row)
            await self.store.update_run(row, expected_revision=run.revision - 1)
        except _TooLarge:
            run.revision -= 1
            raise
        except BaseException:
            run.revision -= 1
            self._live.pop(run.run_id, None)  # re-read from the store next time
            raise
        run.size = len(row.body)

    def _lighter(self, run: Run, row: RunRow) -> RunRow:
        """``run``'s row within :attr:`run_bytes_max`: its checkpoint without the outputs
        it repeats from the nodes, or :class:`_TooLarge` when even that does not fit.
        Only a document already over the bound pays this second encoding."""
        if run.checkpoint is not None and run.checkpoint.completed:
            run.checkpoint = msgspec.structs.replace(run.checkpoint, completed={})
            row = run_row(run, seq=run_seq(run.run_id), updated_at=self.clock.now())
        # The write that fails a run as too large is stored whatever its size: it is
        # the stored document (within the bound) with a few fields more.
        too_large = run.error is not None and run.error.code == RUN_TOO_LARGE
        if len(row.body) > self.run_bytes_max and not too_large:
            raise _TooLarge(len(row.body))
        return row

    async def _shrink(self, run: Run, size: int) -> dag.Effects:
        """A decision would store ``run`` larger than :attr:`run_bytes_max`: drop it, and
        fail the run as stored closed (``run_too_large``). The caller's ``run`` becomes
        that failed run, and the effects returned replace the dropped decision's."""
        row = await self.store.get_run(run.run_id)
        if row is None:
            raise NotFound(f"run {run.run_id!r} does not exist", run_id=run.run_id)
        stored = run_from_row(row)
        message = (
            f"the run's stored document would have been {size} bytes, more than the "
            f"{self.run_bytes_max} allowed"
        )
        effects = dag.fail_too_large(stored, None, message, self.clock.now())
        for name in Run.__struct_fields__:
            setattr(run, name, getattr(stored, name))
        log.warning(
            "run %s failed closed: %s",
            run.run_id,
            message,
            extra={"action": "run.too_large", "run_id": run.run_id},
        )
        return effects

    async def _commit(self, run: Run, plan: Plan, effects: dag.Effects) -> None:
        """Store the run, then carry out ``effects`` (see the module docstring); a run
        that would outgrow :attr:`run_bytes_max` fails closed instead (:meth:`_shrink`)."""
        try:
            await self._save(run, bounded=True)
        except _TooLarge as exc:
            effects = await self._shrink(run, exc.size)
            await self._save(run)
        if run.final:
            self._live.pop(run.run_id, None)
            # A final run never changes again (every mutation checks ``final`` after
            # reading), so its lock need not outlive the current holder.
            self._locks.pop(run.run_id, None)
        else:
            self._live[run.run_id] = (run, plan)
        self._notify(run)
        await self._carry_out(run, plan, effects)

    async def _carry_out(self, run: Run, plan: Plan, effects: dag.Effects) -> None:
        for due, node_id in effects.timers:
            self._arm(_Timer(due, 0, "node", run.run_id, node_id))
        reads = self.node.reads
        for activity_id in effects.cancel:
            if reads.holds(activity_id):
                await self._cancel_activity(activity_id, f"run {run.run_id} {run.status}")
        if not effects.submit:
            return
        # Submissions are idempotent by id: an id in use (live, finished, or only
        # stored) was submitted before, and is skipped (NodeReads.ids_in_use).
        used = await reads.ids_in_use(a.activity_id for a in effects.submit)
        batch = tuple(a for a in effects.submit if a.activity_id not in used)
        if not batch:
            return
        try:
            await self.node.execute(lambda now: cmd.Submit(now=now, activities=batch))
        except StoreUnavailable:
            raise
        except WfError as exc:
            # The scheduler refused the activities (a tenant limit, an unknown
            # policy group): the run cannot go on, and says why.
            error = RunError(code="submit_refused", message=exc.message)
            more = dag.stop(run, RunStatus.FAILED, error, self.clock.now())
            await self._commit(run, plan, more)

    def _notify(self, run: Run) -> None:
        for listener in self.listeners:
            listener(run)

    def _arm(self, timer: _Timer) -> None:
        self._timer_seq += 1
        heapq.heappush(self._timers, dataclasses.replace(timer, seq=self._timer_seq))
        self._wake.set()

    def _on_outcome(self, outcome: Outcome) -> None:
        """Node listener: queue what concerns runs (called after each commit)."""
        queued = self._events.qsize()
        for d in outcome.decisions:
            if type(d) is ActivityCompleted and node_of_activity(d.activity_id) is not None:
                self._events.put_nowait(_Event("completed", d.activity_id, result=d.result))
            elif type(d) is ActivityFailed and node_of_activity(d.activity_id) is not None:
                self._events.put_nowait(
                    _Event("failed", d.activity_id, error=_failure(d, d.activity_id))
                )
            elif (
                type(d) is ActivityCancelled
                # The engine's own cancels withdraw work of runs that already stopped.
                and d.origin is not CancelOrigin.RUN
                and node_of_activity(d.activity_id) is not None
            ):
                self._events.put_nowait(_Event("cancelled", d.activity_id))
        if self._events.qsize() != queued:
            # Only news wakes the loop: most outcomes concern no run at all.
            self._wake.set()

    def idle(self) -> bool:
        """Whether no event waits to be applied and none is being applied."""
        return self._events.empty() and not self._polling.locked()

    def run_being_changed(self) -> str | None:
        """A run whose start, resume or cancel is under way (its lock held), if any."""
        for run_id, lock in self._locks.items():
            if lock.locked():
                return run_id
        return None

    def next_timer_at(self) -> float | None:
        """The earliest armed timer (timer node, run deadline)."""
        return self._timers[0].due if self._timers else None

    async def poll(self) -> int:
        """Apply every queued event and every timer due at the clock's instant.

        Returns how many were applied. The background loop calls it; tests on a
        virtual clock call it after advancing the clock.
        """
        # One pass at a time: the loop and a test's explicit poll never interleave.
        async with self._polling:
            done = 0
            while not self._events.empty():
                event = self._events.get_nowait()
                try:
                    await self._apply_event(event)
                except (StoreUnavailable, asyncio.CancelledError):
                    raise
                except Exception as exc:  # one run's poison never stops the others
                    await self._fail_closed(event.activity_id, exc)
                done += 1
            now = self.clock.now()
            while self._timers and self._timers[0].due <= now:
                await self._apply_timer(heapq.heappop(self._timers), now)
                done += 1
            return done

    def _on_reload(self) -> None:
        """Node reload listener: the core was rebuilt from the store; reconcile."""
        self._reconcile_due = True
        self._wake.set()

    async def _loop(self) -> None:
        while True:
            try:
                if self._reconcile_due:
                    self._reconcile_due = False
                    await self.reconcile()
                await self.poll()
            except StoreUnavailable as exc:
                # The event being applied may be lost with the failed write: once
                # writes work again, every live run is matched with the core anew.
                self._reconcile_due = True
                log.warning(
                    "run engine: store unavailable (%s); runs wait for writes to resume",
                    exc.message,
                    extra={"action": "runs.paused", "error": exc.message},
                )
                await self._pause()
                continue
            except WfError:
                log.exception("run engine: an event could not be applied")
            if not self._events.empty():
                continue
            now = self.clock.now()
            delay = WAKE_INTERVAL_MAX_S
            if self._timers:
                delay = max(0.0, min(self._timers[0].due - now, delay))
            self._wake.clear()
            if self._events.empty():
                await sleep_until(self.clock, now + delay, self._wake)

    async def _pause(self) -> None:
        """Wait a retry interval, and for as long as the node refuses writes (its reload
        wakes this at once)."""
        while True:
            self._wake.clear()
            await sleep_until(self.clock, self.clock.now() + WAKE_INTERVAL_MAX_S, self._wake)
            if not self.node.writes_stopped:
                return

    async def reconcile(self) -> None:
        """Match every live run with the node's core again, as recovery does at start.

        The loop calls it once writes resume after a store failure (and after every
        reload of the node). Each run is re-read under its lock, so a change an API
        call stored meanwhile is never overwritten; an admitted run the engine
        already holds is left to whoever is beginning it. Raises StoreUnavailable
        if the store fails again (the loop then waits and tries once more).
        """
        for row in await self.store.live_runs():
            async with self._locks[row.run_id]:
                held = self._live.get(row.run_id)
                if held is not None and held[0].status is RunStatus.ADMITTED:
                    continue
                fresh = await self.store.get_run(row.run_id)
                try:
                    if fresh is None:
                        continue
                    run = run_from_row(fresh)
                    if run.final:
                        self._live.pop(run.run_id, None)
                        continue
                    await self._recover_run(run, await self.plan_of(run))
                except StoreUnavailable:
                    raise
                except Exception as exc:  # one run's trouble never holds up the others
                    detail = exc.message if isinstance(exc, WfError) else repr(exc)
                    log.error(
                        "run %s could not be reconciled: %s",
                        row.run_id,
                        detail,
                        extra={"action": "run.reconcile_failed", "run_id": row.run_id},
                    )
        await self._withdraw_orphans()

    async def _apply_event(self, event: _Event) -> None:
        parsed = node_of_activity(event.activity_id)
        if parsed is None:
            return
        run_id, node_id = parsed
        async with self._locks[run_id]:
            try:
                run, plan = await self.get(run_id)
            except NotFound:
                return  # an activity someone else submitted under a run-like id
            if run.final:
                return
            now = self.clock.now()
            state = dag.activity_state(run, node_id)  # a node's, or a map item's
            if state is None or state.status is not NodeStatus.SUBMITTED:
                return  # already applied (recovery found it first) or not ours
            if event.kind == "completed":
                output, bad = _decode_result(event.result, node_id)
                if bad is not None:
                    effects = dag.activity_failed(run, node_id, bad, now)
                else:
                    effects = dag.activity_completed(
                        run,
                        plan,
                        node_id,
                        output,
                        now,
                        output_bytes=len(event.result or b""),
                        bytes_max=self.run_bytes_max,
                    )
            elif event.kind == "failed":
                assert event.error is not None
                effects = dag.activity_failed(run, node_id, event.error, now)
            else:
                error = RunError(
                    code="activity_cancelled",
                    message=f"activity {event.activity_id} was cancelled outside the run",
                    node=node_id,
                )
                effects = dag.activity_failed(run, node_id, error, now)
            await self._commit(run, plan, effects)

    async def _fail_closed(self, activity_id: str, exc: Exception) -> None:
        """Fail the run an event could not be applied to, as ``corrupt_record``; if even
        that cannot be stored, leave the run as stored (blocked) and log it."""
        parsed = node_of_activity(activity_id)
        run_id, node_id = parsed if parsed is not None else (None, None)
        log.error(
            "run %s: the outcome of %s could not be applied (%s: %s); the run fails closed",
            run_id,
            activity_id,
            type(exc).__name__,
            exc,
            extra={"action": "run.corrupt_record", "run_id": run_id},
        )
        if run_id is None:
            return
        try:
            async with self._locks[run_id]:
                run, plan = await self.get(run_id)
                if run.final:
                    return
                error = RunError(
                    code=CorruptRecord.code,
                    message=f"the outcome of {activity_id} could not be applied: "
                    f"{type(exc).__name__}",
                    node=node_id,
                )
                await self._commit(
                    run, plan, dag.stop(run, RunStatus.FAILED, error, self.clock.now())
                )
        except StoreUnavailable:
            raise
        except Exception:
            log.exception(
                "run %s could not be failed closed; it is left as stored",
                run_id,
                extra={"action": "run.corrupt_record", "run_id": run_id},
            )
            self._live.pop(run_id, None)

    async def _apply_timer(self, timer: _Timer, now: float) -> None:
        async with self._locks[timer.run_id]:
            held = self._live.get(timer.run_id)
            if held is None:
                return
            run, plan = held
            if timer.kind == "deadline":
                error = RunError(
                    code="deadline_exceeded",
                    message=f"the run's deadline passed at {timer.due:.3f}",
                )
                effects = dag.stop(run, RunStatus.FAILED, error, now)
            else:
                state = run.nodes.get(timer.node_id)
                if state is None or state.status is not NodeStatus.WAITING:
                    return
                effects = dag.timer_fired(run, plan, timer.node_id, now)
            await self._commit(run, plan, effects)

    # ------------------------------------------------------------ recovery

    async def _recover(self) -> None:
        self.diagnostics = []
        for row in await self.store.live_runs():
            try:
                run = run_from_row(row)
                plan = await self.plan_of(run)
            except CorruptRecord as exc:
                self.diagnostics.append(
                    Diagnostic(
                        kind="corrupt_run",
                        table="runs",
                        key=row.run_id,
                        message=f"{exc.message}; the run is left as stored (blocked)",
                    )
                )
                log.error("run %s not recovered: %s", row.run_id, exc.message)
                continue
            try:
                async with self._locks[run.run_id]:
                    await self._recover_run(run, plan)
            except (StoreUnavailable, asyncio.CancelledError):
                raise
            except Exception as exc:  # one run's damage never stops recovery of the others
                self._live.pop(run.run_id, None)
                self.diagnostics.append(
                    Diagnostic(
                        kind="corrupt_run",
                        table="runs",
                        key=row.run_id,
                        message=f"recovery failed ({type(exc).__name__}: {exc}); "
                        "the run is left as stored (blocked)",
                    )
                )
                log.exception(
                    "run %s not recovered; left as stored",
                    row.run_id,
                    extra={"action": "run.corrupt_record", "run_id": row.run_id},
                )
        await self._withdraw_orphans()

    async def _recover_run(self, run: Run, plan: Plan) -> None:
        now = self.clock.now()
        before = msgspec.json.encode(run)
        effects = dag.Effects()
        self._settle_marks(run, plan, now, effects)
        if run.status is RunStatus.ADMITTED:
            self._live[run.run_id] = (run, plan)
            if run.trigger.kind == "manual":
                effects.extend(dag.begin(run, plan, now))
        elif not run.final:
            # What was submitted as stored, listed before any is matched: matching one
            # may start the next (a completion found in history), and that one is only
            # in ``effects`` yet, so it must not be taken for one lost before a crash.
            submitted: list[str] = []
            for node_id, state in run.nodes.items():
                if state.status is NodeStatus.SUBMITTED and state.items is not None:
                    # A map node: each item is matched with its own activity.
                    submitted += [
                        dag.item_key(node_id, index)
                        for index, item in enumerate(state.items)
                        if item.status is NodeStatus.SUBMITTED
                    ]
                elif state.status is NodeStatus.SUBMITTED:
                    submitted.append(node_id)
                elif state.status is NodeStatus.WAITING and state.wake_at is not None:
                    effects.timers.append((state.wake_at, node_id))
            for key in submitted:
                found = dag.activity_state(run, key)
                if run.final or found is None or found.status is not NodeStatus.SUBMITTED:
                    continue
                effects.extend(await self._reconcile(run, plan, key, now))
            effects.extend(dag.advance(run, plan, now))
        if run.deadline is not None and not run.final:
            self._arm(_Timer(run.deadline, 0, "deadline", run.run_id))
        if msgspec.json.encode(run) != before:
            await self._commit(run, plan, effects)
        else:
            if not run.final:
                self._live[run.run_id] = (run, plan)
            await self._carry_out(run, plan, effects)

    def _settle_marks(self, run: Run, plan: Plan, now: float, effects: dag.Effects) -> None:
        for mark in run.resumes:
            if mark.state != "started":
                continue
            state = run.nodes.get(mark.node)
            unanswered = state is not None and state.status is NodeStatus.AWAITING_INPUT
            if unanswered and run.revision == mark.base_revision + 1:
                mark.state = "abandoned"
                mark.finished_at = now
                continue
            mark.state = "ambiguous"
            mark.finished_at = now
            error = RunError(
                code="resume_ambiguous",
                message=f"resume attempt {mark.attempt} of node {mark.node!r} has no recorded "
                "outcome but the run changed after it; failing closed rather than guessing",
                node=mark.node,
            )
            effects.extend(dag.stop(run, RunStatus.FAILED, error, now))

    async def _reconcile(self, run: Run, plan: Plan, node_id: str, now: float) -> dag.Effects:
        """Match a submitted node (or map item, ``<node>.<i>``) with its activity after a
        restart."""
        state = dag.activity_state(run, node_id)
        assert state is not None
        activity_id = state.activity_id or f"{run.run_id}.{node_id}"
        if self.node.reads.attempt(activity_id) is not None:
            return dag.Effects()
        history = await self.store.history(activity_id)
        if not history:
            state.status = NodeStatus.PENDING  # never reached the scheduler: start it again
            if dag.split_key(node_id)[1] is None:
                run.steps_used -= 1  # a map item is part of its node's one step
            return dag.Effects()
        last = history[-1]
        if last.to_state is ActivityState.COMPLETED:
            output, bad = _decode_result(last.result, node_id)
            if bad is not None:
                return dag.activity_failed(run, node_id, bad, now)
            return dag.activity_completed(
                run,
                plan,
                node_id,
                output,
                now,
                output_bytes=len(last.result or b""),
                bytes_max=self.run_bytes_max,
            )
        if last.to_state is ActivityState.FAILED:
            return dag.activity_failed(run, node_id, _stored_failure(last, node_id), now)
        error = RunError(
            code="activity_cancelled",
            message=f"activity {activity_id} was cancelled outside the run",
            node=node_id,
        )
        return dag.activity_failed(run, node_id, error, now)

    async def _withdraw_orphans(self) -> None:
        """Cancel scheduler activities of runs that already stopped."""
        for activity_id in self.node.reads.held_ids():
            parsed = node_of_activity(activity_id)
            if parsed is None or parsed[0] in self._live:
                continue
            row = await self.store.get_run(parsed[0])
            if row is None or row.status not in FINAL_STATUSES:
                continue
            await self._cancel_activity(activity_id, f"run {parsed[0]} {row.status}")

    async def _cancel_activity(self, activity_id: str, reason: str) -> None:
        """Withdraw an activity as the engine (origin ``run``: see ``_on_outcome``)."""

        def make(now: float) -> cmd.Command:
            return cmd.Cancel(
                now=now, activity_id=activity_id, reason=reason, origin=CancelOrigin.RUN
            )

        with contextlib.suppress(NotFound, Conflict):
            await self.node.execute(make)


class _TooLarge(Exception):
    """A run's document would be larger than the engine's bound (``size`` bytes)."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


def _node(plan: Plan, key: str) -> ActivityNode | MapNode | None:
    """The node whose activity ``key`` names (a map item's is its map node)."""
    node_id = dag.split_key(key)[0]
    for node in plan.nodes:
        if node.id == node_id and isinstance(node, ActivityNode | MapNode):
            return node
    return None


def _lost(node: str | None, cause: str) -> RunError:
    """A non-idempotent node whose execution died with its process (one wording whether
    the engine hears of it live or reads it back from history after a restart)."""
    return RunError(
        code="may_have_executed",
        message=f"{cause}; the process running it stopped mid-execution and the activity "
        "is not idempotent, so it was not retried: external effects may already have "
        "occurred",
        node=node,
        error_type="LeaseLost",
        may_have_executed=True,
    )


def _failure(d: ActivityFailed, activity_id: str) -> RunError:
    parsed = node_of_activity(activity_id)
    node = parsed[1] if parsed else None
    if d.may_have_executed:
        return _lost(node, d.message)
    return RunError(
        code="activity_failed",
        # The type is error_type's to say: the message starting with it again made
        # every renderer (CLI, console, JSON) show it twice.
        message=" ".join(filter(None, [d.message, f"({d.reason}, attempt {d.attempt})"])),
        node=node,
        error_type=d.error_type,
    )


def _decode_result(result: bytes | None, node_id: str) -> tuple[Any, RunError | None]:
    """An activity's result as the run engine uses it, or the ``bad_result`` error that
    fails its node: not UTF-8 JSON, or outside :mod:`wf.wire.bounds` (the server
    refuses such results at the edge; this guards what is already stored)."""
    if not result:
        return None, None
    try:
        check_json_bytes(result, "result")
        return msgspec.json.decode(result), None
    except InvalidArgument as exc:
        return None, RunError(code="bad_result", message=exc.message, node=node_id)


def _stored_failure(last: Transition, node_id: str) -> RunError:
    if last.reason == TransitionReason.MAY_HAVE_EXECUTED:
        return _lost(node_id, last.error or "lease lost while executing")
    return RunError(
        code="activity_failed",
        message=f"{last.error or last.reason} ({last.reason}, attempt {last.attempt})",
        node=node_id,
    )
