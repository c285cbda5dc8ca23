"""A scheduler node: the asyncio shell that makes the pure core durable.

Theory of operation
-------------------
A :class:`SchedulerNode` owns one store (exclusive ownership, see
:meth:`wf.store.protocol.Store.acquire_ownership`) and one
:class:`~wf.scheduler.dispatcher.SchedulerCore`. Every command goes through
:meth:`SchedulerNode.execute`: the core decides synchronously, the node
appends the resulting records to the store and awaits the commit, and only
then returns the decisions to the caller ("persist before acknowledging").
Because the core runs synchronously and appends are queued in call order,
records reach the store in exactly the order the core produced them, and
concurrent callers share one group commit.

If a commit fails, the in-memory core is ahead of the store. The node then
*stops writing* (fail stop): it logs the cause once at ERROR
(``node.writes_stopped``), refuses every further command *and every read of
the core* (:meth:`durable`) with :class:`~wf.errors.StoreUnavailable`, and
answers :meth:`readiness` with the reason, until :meth:`restart` reloads the
core from the store, which is the only state anyone was ever told about. The
store itself is fenced by the failure, so appends already queued behind the
failed one (computed from state that included it) are refused as well. A
store that finds it lost ownership outside an append (PostgreSQL's write
fence refused a catalog write: :attr:`Store.on_ownership_lost`) stops the
node the same way.

A node started with its background loop *recovers by itself*: a recovery
task calls :meth:`restart` (release the store's fence, take ownership again,
commit an empty write, reload, commit the recovery tick) after
:data:`RECOVERY_BACKOFF_INITIAL_S`, then
with exponential backoff up to ``recovery_backoff_max_s``, until it succeeds;
the backoff is carried over to a following stop until a commit succeeds, so a
store that keeps refusing right after each reload is not hammered. Listeners
in :attr:`SchedulerNode.reload_listeners` hear of every reload (the run
engine reconciles its runs with the reloaded core). If writes do not resume
within ``recovery_deadline_s`` the node gives up: it logs
``node.recovery_gave_up`` and sets :attr:`SchedulerNode.unrecoverable`, and
the process exits non-zero so that a supervisor starts it afresh.
:class:`~wf.errors.StoreUnavailable` is therefore ``retryable``: a retry
reaches either this node recovered or its successor.

Start-up is WF-005 §23 recovery: load the durable state, rebuild the core
(:func:`wf.store.loader.build_snapshot`), give every worker a fresh
heartbeat grace period, then one tick that expires stale leases and requeues
abandoned activities; its records are committed before dispatch resumes.
The background loop only calls :meth:`tick` at the instant the core asks for
(:meth:`SchedulerCore.next_wake_at`), bounded by ``tick_interval_max_s``.

Reads. Nothing outside the node reads the core's internals: the shell reads
through :attr:`SchedulerNode.reads` (:class:`~wf.node_reads.NodeReads`),
whose reads answer from committed state (see :mod:`wf.node_reads`). The node
keeps it current: every commit that lands updates its activity facts before
anyone awaiting that commit resumes, and every reload rebuilds them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from datetime import UTC
from typing import Final, Literal

import msgspec

from wf.clock import Clock, SystemClock, sleep_until
from wf.errors import (
    InvalidArgument,
    OwnershipConflict,
    OwnershipLost,
    StoreUnavailable,
    WfError,
)
from wf.node_reads import NodeReads
from wf.scheduler import commands as cmd
from wf.scheduler.config import SchedulerConfig
from wf.scheduler.dispatcher import SchedulerCore
from wf.scheduler.outputs import Outcome
from wf.scheduler.recovery import durable_digest, recover, restore
from wf.store.loader import build_snapshot
from wf.store.protocol import Diagnostic, Journal, OwnerInfo, StoredState
from wf.tuning import recovered_heap

log = logging.getLogger("wf.node")

TICK_INTERVAL_MAX_S = 1.0
"""Longest the background loop sleeps without ticking (bounds clock drift effects)."""
RECOVERY_BACKOFF_INITIAL_S: Final = 0.1
"""Pause before the first reload after writes stopped (then doubled per attempt)."""
RECOVERY_BACKOFF_MAX_S: Final = 10.0
"""Default longest pause between two reload attempts."""
RECOVERY_DEADLINE_S: Final = 300.0
"""Default time writes may stay stopped before the node gives up (the process exits)."""

ReadinessReason = Literal[
    "ready", "starting", "standby", "writes_stopped", "recovering", "unrecoverable", "stopping"
]


class Readiness(msgspec.Struct, frozen=True, kw_only=True):
    """Whether the node accepts writes, and if not why (``GET /readyz``)."""

    ready: bool
    """The node accepts commands (and so writes)."""
    reason: ReadinessReason
    """``ready``; ``starting`` (recovering at start); ``standby`` (a cluster node that
    does not own the store, docs/ha.md); ``writes_stopped`` (a commit
    failed, a reload is due); ``recovering`` (a reload is under way);
    ``unrecoverable`` (gave up, the process is exiting); ``stopping``."""
    cause: str | None = None
    """What stopped writes: the error code (``store_unavailable``, ``ownership_lost``)
    or the exception type; never its message (which may name hosts or paths)."""
    stopped_for_s: float | None = None
    """How long writes have been stopped."""
    recovery_attempts: int = 0
    """Reloads tried since writes stopped."""


class RecoveryReport(msgspec.Struct, frozen=True, kw_only=True):
    """What start-up recovery found and did."""

    duration_s: float
    """Wall time from the start of loading to dispatch resuming."""
    activities: int
    """Unfinished activities restored."""
    leases: int
    """Leases restored."""
    workers: int
    """Workers restored."""
    expired_leases: int
    """Leases expired by the recovery tick."""
    requeued: int
    """Activities requeued by the recovery tick."""
    diagnostics: list[Diagnostic]
    """Corrupt or contradictory records (their activities are blocked)."""
    digest: str | None
    """Durable-state digest right after loading (before the recovery tick), if asked for."""


def default_owner(clock: Clock) -> OwnerInfo:
    """This process as a store owner."""
    return OwnerInfo(
        host=socket.gethostname(),
        pid=os.getpid(),
        since=clock.wall().astimezone(UTC).isoformat(timespec="seconds"),
    )


class SchedulerNode:
    """The durable scheduler: core + store + clock (see the module docstring)."""

    def __init__(
        self,
        store: Journal,
        config: SchedulerConfig | None = None,
        *,
        clock: Clock | None = None,
        owner: OwnerInfo | None = None,
        digest_on_recovery: bool = False,
        recovery_deadline_s: float = RECOVERY_DEADLINE_S,
        recovery_backoff_max_s: float = RECOVERY_BACKOFF_MAX_S,
    ) -> None:
        if not recovery_deadline_s > 0 or not recovery_backoff_max_s > 0:
            raise InvalidArgument(
                "recovery_deadline_s and recovery_backoff_max_s must be positive",
                recovery_deadline_s=recovery_deadline_s,
                recovery_backoff_max_s=recovery_backoff_max_s,
            )
        self.store = store
        self.config = config or SchedulerConfig()
        self.clock: Clock = clock or SystemClock()
        self.owner = owner or default_owner(self.clock)
        self.digest_on_recovery = digest_on_recovery
        self.recovery_deadline_s = recovery_deadline_s
        """Longest writes may stay stopped before the node gives up."""
        self.recovery_backoff_max_s = recovery_backoff_max_s
        """Longest pause between two reload attempts."""
        self.core = SchedulerCore(self.config)
        self.reads = NodeReads(self)
        """The read port: what the shell may know of the scheduler (see :mod:`wf.node_reads`)."""
        self._phase: Literal["new", "starting", "standby", "running", "stopping"] = "new"
        self._broken: BaseException | None = None
        """Why writes stopped (``None`` while the node accepts writes)."""
        self._stopped_at: float | None = None
        """When writes stopped (on :attr:`clock`)."""
        self._backoff_s = RECOVERY_BACKOFF_INITIAL_S
        """Pause before the next reload attempt; reset once a commit succeeds."""
        self._attempts = 0
        self._reloading = False
        self._recovery: asyncio.Task[None] | None = None
        self._restarting = asyncio.Lock()
        self.unrecoverable = asyncio.Event()
        """Set when writes stayed stopped past ``recovery_deadline_s`` (the process exits)."""
        self.yields = False
        """A cluster node (docs/ha.md): when another node holds ownership as this one
        tries to take it back, stop recovering and set :attr:`deposed` at once."""
        self.deposed = asyncio.Event()
        """Set when another node owns the store (only when :attr:`yields`)."""
        self.reload_listeners: list[Callable[[], None]] = []
        """Called after every reload from the store (the core was replaced)."""
        self._loop_task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._asleep_until: float | None = None
        """Where the tick loop sleeps until (``None`` while it is awake)."""
        self._last_commit: asyncio.Future[None] | None = None
        self._untold = 0
        """Commands handled whose listeners have not been told yet (see quiescent())."""
        self.listeners: list[Callable[[Outcome], None]] = []
        """Called with every committed outcome that decided or recorded something (the
        server routes decisions with it)."""

    async def start(self, *, background: bool = True) -> RecoveryReport:
        """Open the store, take ownership, recover, and (optionally) start ticking and
        recovering by itself after a failed commit."""
        self._phase = "starting"
        await self.store.open()
        try:
            await self.store.acquire_ownership(self.owner)
            report = await self._recover()
        except BaseException:
            self._phase = "new"
            await self.store.close()
            raise
        self.store.on_ownership_lost = self._ownership_lost
        self._phase = "running"
        if background:
            self._loop_task = asyncio.create_task(self._run(), name="wf-scheduler-ticks")
        return report

    async def open(self) -> None:
        """Open the store without taking ownership: a standby of a cluster, which
        refuses commands until :meth:`take_over` wins."""
        self._phase = "standby"
        self._broken = _STANDBY
        await self.store.open()

    async def take_over(
        self, load: Callable[[], Awaitable[StoredState]] | None = None
    ) -> RecoveryReport:
        """Take ownership (a new epoch) and recover from the store, then tick: a
        standby's campaign. ``load`` answers what the store holds once ownership is
        taken (a warm copy brought up to date; default: the store's full load).
        Raises :class:`~wf.errors.OwnershipConflict` while another node owns the
        store, and leaves the node a standby on any failure."""
        async with self._restarting:
            await self.store.clear_write_fence()
            await self.store.acquire_ownership(self.owner)
            self._phase = "starting"
            try:
                report = await self._recover(load)
            except BaseException:
                self._phase = "standby"
                self._broken = _STANDBY
                await self.store.release_ownership()
                raise
        self.store.on_ownership_lost = self._ownership_lost
        self.deposed.clear()
        self.unrecoverable.clear()
        self._backoff_s = RECOVERY_BACKOFF_INITIAL_S
        self._phase = "running"
        self._loop_task = asyncio.create_task(self._run(), name="wf-scheduler-ticks")
        return report

    async def step_down(self) -> None:
        """Stop acting as the owner: stop ticking and recovering, refuse commands,
        and give ownership up (the store stays open for the next :meth:`take_over`).
        What the core held is dropped at the next take-over's reload."""
        self._phase = "standby"
        if self._broken is None:
            self._broken = _STANDBY
        await self._cancel_tasks()
        self.store.on_ownership_lost = None
        await self.store.release_ownership()

    async def _cancel_tasks(self) -> None:
        for task in (self._loop_task, self._recovery):
            if task is None or task is asyncio.current_task():
                continue
            task.cancel()
            # asyncio.wait, not suppress(CancelledError): a cancellation of the
            # caller must propagate, not be taken for the loop's.
            await asyncio.wait({task})
            if not task.cancelled() and task.exception() is not None:
                log.warning("task %s ended with %r", task.get_name(), task.exception())
        self._loop_task = self._recovery = None

    async def _recover(
        self, load: Callable[[], Awaitable[StoredState]] | None = None
    ) -> RecoveryReport:
        # Recovery builds millions of objects that all stay alive: the collector's
        # passes over them find nothing and cost ~0.3 s per 10^6 activities.
        with recovered_heap():
            return await self._recover_all(load or self.store.load)

    async def _recover_all(self, load: Callable[[], Awaitable[StoredState]]) -> RecoveryReport:
        started = time.perf_counter()
        stored = await load()
        now = self.clock.now()
        snapshot, diagnostics = build_snapshot(stored, self.config, now)
        adopt = not self.digest_on_recovery
        core, outcome = recover(snapshot, now, adopt=adopt, by_id=stored.by_id if adopt else None)
        # Optional: it rebuilds the core a second time, which doubles recovery time.
        digest = durable_digest(restore(snapshot)) if self.digest_on_recovery else None
        if outcome.records:
            await self.store.append(outcome.records)
            self._backoff_s = RECOVERY_BACKOFF_INITIAL_S  # the store took a commit
        self.core = core
        self.reads.reset(core)  # loaded from the store and its tick committed: committed state
        if self._last_commit is not None and self._last_commit.done():
            self._last_commit = None  # settled before the reload: durable() looks no further
        self._broken = None
        self._stopped_at = None
        self._notify(outcome)
        return RecoveryReport(
            duration_s=time.perf_counter() - started,
            activities=len(snapshot.activities),
            leases=sum(len(w.leases) for w in snapshot.workers),
            workers=len(snapshot.workers),
            expired_leases=core.metrics.expired_leases,
            requeued=core.metrics.requeued,
            diagnostics=diagnostics,
            digest=digest,
        )

    async def restart(self) -> RecoveryReport:
        """Reload the core from the store (after a failed commit); resume ticking.

        Takes ownership again first (a no-op while it is held; after a loss of the
        write fence, a new epoch), so that what is loaded is all anyone wrote, and
        commits an empty write (:meth:`Store.prove_writable`), so that the node
        accepts commands again only once the store takes writes.
        """
        async with self._restarting:
            # Appends queued behind the failed one are refused by the store's fence;
            # once they are settled the fence is lifted and the store is the truth.
            await self.store.clear_write_fence()
            await self.store.acquire_ownership(self.owner)
            # Reloading only reads: first make sure the store takes writes again.
            await self.store.prove_writable()
            report = await self._recover()
        if self._loop_task is not None and self._loop_task.done():
            # The loop ends when a tick finds the node stopped; start it again.
            self._loop_task = asyncio.create_task(self._run(), name="wf-scheduler-ticks")
        for listener in self.reload_listeners:
            listener()
        return report

    async def stop(self) -> None:
        """Stop ticking and recovering, flush, release ownership and close the store."""
        self._phase = "stopping"
        await self._cancel_tasks()
        await self.store.close()

    @property
    def ownership_lost(self) -> bool:
        """Whether writes stopped because another node may own the store (the fence
        moved, or this node is a standby): a cluster sends callers to the active."""
        return isinstance(self._broken, OwnershipLost)

    @property
    def writes_stopped(self) -> bool:
        """Whether writes are stopped (a commit failed and no reload succeeded since)."""
        return self._broken is not None

    def readiness(self) -> Readiness:
        """Whether the node accepts writes, and if not why (see :class:`Readiness`)."""
        if self._phase in ("new", "starting"):
            return Readiness(ready=False, reason="starting")
        if self._phase == "standby":
            return Readiness(ready=False, reason="standby")
        if self._phase == "stopping":
            return Readiness(ready=False, reason="stopping")
        broken = self._broken
        if broken is None:
            return Readiness(ready=True, reason="ready")
        reason: ReadinessReason = "writes_stopped"
        if self.unrecoverable.is_set():
            reason = "unrecoverable"
        elif self._reloading:
            reason = "recovering"
        stopped_at = self._stopped_at
        return Readiness(
            ready=False,
            reason=reason,
            cause=_cause_code(broken),
            stopped_for_s=None if stopped_at is None else max(0.0, self.clock.now() - stopped_at),
            recovery_attempts=self._attempts,
        )

    def refuse_if_stopped(self) -> None:
        """Raise :class:`StoreUnavailable` while writes are stopped (the core may hold a
        change whose commit failed)."""
        if self._broken is not None:
            raise self._refusal()

    def _refusal(self) -> StoreUnavailable:
        """The error for a command or read while writes are stopped."""
        broken = self._broken
        assert broken is not None
        return StoreUnavailable(
            "the scheduler node stopped writing after a failed commit and must restart "
            "from the store; it is recovering by itself, retry shortly",
            cause=_cause_code(broken),
            retry_after_s=self._backoff_s,
        )

    async def execute(self, make: Callable[[float], cmd.Command]) -> Outcome:
        """Run one command built for the current instant; durable before it returns.

        Raises the core's typed errors unchanged (nothing was changed), or
        :class:`StoreUnavailable` if the node cannot commit (this command's commit
        failed, or writes stopped earlier and the node has not reloaded yet).
        """
        if self._broken is not None:
            raise self._refusal()
        now = self.clock.now()
        outcome = self.core.handle(make(now))
        if outcome.records:
            # Counted until told: nothing is awaited between the finally and _notify,
            # and a cancelled caller's outcome stays counted by _commit until told.
            self._untold += 1
            try:
                await self._commit(outcome)
            finally:
                self._untold -= 1
        self._notify(outcome)
        self._wake_if_sooner(now)
        return outcome

    async def execute_then(
        self, make: Callable[[float], cmd.Command], then: Callable[[float], cmd.Command]
    ) -> tuple[Outcome, Outcome | WfError]:
        """Run two commands for the same instant back to back and commit both in ONE
        append (so one commit); durable before it returns.

        ``make`` is :meth:`execute`'s: its typed refusal is raised and nothing changed.
        ``then`` runs only if ``make`` was accepted, right after it with nothing in
        between; its typed refusal is returned in place of its outcome (it changed
        nothing, and ``make``'s change is committed all the same). Listeners hear of
        the two as one outcome, ``make``'s decisions and records first: one commit,
        one notification (each listener's fixed cost paid once per report, not twice).
        A report that carries the worker's next poll uses it
        (``scheduler.leases.complete`` with ``poll``).
        """
        if self._broken is not None:
            raise self._refusal()
        now = self.clock.now()
        first = self.core.handle(make(now))
        second: Outcome | WfError
        try:
            second = self.core.handle(then(now))
        except WfError as exc:
            second = exc
        told = first
        if not isinstance(second, WfError) and (second.decisions or second.records):
            told = Outcome(
                decisions=[*first.decisions, *second.decisions],
                records=[*first.records, *second.records],
            )
        if told.records:
            self._untold += 1
            try:
                await self._commit(told)
            finally:
                self._untold -= 1
        self._notify(told)
        self._wake_if_sooner(now)
        return first, second

    def _wake_if_sooner(self, now: float) -> None:
        asleep_until = self._asleep_until
        if asleep_until is not None:
            # Wake the tick loop only if this command brought its next tick forward:
            # waking it for every command costs more than the command itself.
            wake = self.core.next_wake_at(now)
            if wake is not None and wake < asleep_until:
                self._wake.set()

    async def _commit(self, outcome: Outcome) -> None:
        """Append ``outcome``'s records and await the commit.

        The append runs as a task of its own: a caller cancelled mid-commit (a
        client that went away) must neither cancel an append that may already be
        committing nor leave the node unsure whether the store kept up with the
        core. The commit goes on; its failure still stops the node, and its
        success still reaches the listeners.
        """
        commit = asyncio.ensure_future(self.store.append(outcome.records))
        # The first callback of the commit: it runs before anyone awaiting the commit
        # (a caller, durable()) resumes, so they all find the read port up to date.
        commit.add_done_callback(lambda c: self._settled(c, outcome))
        self._last_commit = commit
        try:
            await asyncio.shield(commit)
        except asyncio.CancelledError:
            if not commit.done():
                self._untold += 1
                commit.add_done_callback(lambda c: self._tell_late(c, outcome))
            raise
        except WfError:
            raise
        except Exception as exc:
            raise StoreUnavailable("commit failed", cause=repr(exc)) from exc

    async def durable(self) -> None:
        """Wait until every command executed so far is committed, then make sure the
        core holds nothing but committed state.

        The core changes as soon as a command is handled and the commit follows;
        a reader that must not report state the store may never hold (a read of
        the core answered to a client) awaits this first. Commits land in order,
        so waiting for the latest is waiting for all. Raises
        :class:`StoreUnavailable` while writes are stopped: the core may then hold
        a change whose commit failed, and only a reload removes it.
        """
        # Loop: commands handled while we waited have commits of their own.
        while (commit := self._last_commit) is not None and not commit.done():
            await asyncio.wait({commit})
        if commit is not None and self._broken is None:
            # A commit that has just failed is done before its callback (_settled) has
            # run: stop writes now rather than answer from the change it lost. (The
            # last commit fails whenever an earlier one did: the store's fence.)
            failure = asyncio.CancelledError() if commit.cancelled() else commit.exception()
            if failure is not None:
                self._stop_writes(failure)
        if self._broken is not None:
            raise self._refusal()

    def _tell_late(self, commit: asyncio.Future[None], outcome: Outcome) -> None:
        """A cancelled caller's commit ended: tell the listeners if it held."""
        self._untold -= 1
        if not commit.cancelled() and commit.exception() is None:
            self._notify(outcome)

    def quiescent(self) -> bool:
        """Whether every command handled so far is committed and its listeners told.

        The core changes before its commit lands, and the listeners (the run engine)
        hear of the change only after: in between, neither shows it as work in
        flight. A time-skipping test moves its clock only while this holds
        (:mod:`wf.testing.timeskip`).
        """
        commit = self._last_commit
        return self._untold == 0 and (commit is None or commit.done())

    def rearm_liveness(self) -> None:
        """Count every live worker's liveness deadline from the clock's instant.

        For a virtual clock that just jumped (:mod:`wf.testing.timeskip`): no worker
        can heartbeat across an interval that took no real time. Start-up recovery
        does the same. Not a command: liveness deadlines are soft state, never stored.
        """
        self.core.registry.rearm_live(self.clock.now())

    def _settled(self, commit: asyncio.Future[None], outcome: Outcome) -> None:
        """A commit ended: a committed outcome reaches the read port; a failed or
        cancelled one stops writes (fail-stop)."""
        failure = asyncio.CancelledError() if commit.cancelled() else commit.exception()
        if failure is not None:
            self._stop_writes(failure)
            return
        self.reads.committed(outcome)
        if self._backoff_s != RECOVERY_BACKOFF_INITIAL_S:
            self._backoff_s = RECOVERY_BACKOFF_INITIAL_S  # writes work: a fresh backoff

    def _ownership_lost(self, lost: OwnershipLost) -> None:
        """The store's write fence moved: what the core holds may be stale."""
        self._stop_writes(lost)

    def _stop_writes(self, cause: BaseException) -> None:
        """Stop accepting commands (once per failure) and, if the node runs in the
        background, start recovering by itself."""
        if self._broken is not None:
            return
        self._broken = cause
        self._stopped_at = self.clock.now()
        self._attempts = 0
        detail = cause.message if isinstance(cause, WfError) else repr(cause)
        log.error(
            "writes stopped: %s; commands and reads of the scheduler state are refused "
            "until the node reloads from the store",
            detail,
            extra={"action": "node.writes_stopped", "cause": _cause_code(cause), "error": detail},
        )
        if self._phase == "running" and self._loop_task is not None:
            self._recovery = asyncio.get_running_loop().create_task(
                self._recover_by_itself(), name="wf-node-recovery"
            )

    async def _recover_by_itself(self) -> None:
        """Reload with backoff until writes resume, or give up at the deadline."""
        stopped_at = self._stopped_at
        assert stopped_at is not None
        deadline = stopped_at + self.recovery_deadline_s
        while True:
            now = self.clock.now()
            await sleep_until(self.clock, min(now + self._backoff_s, deadline))
            self._backoff_s = min(self._backoff_s * 2, self.recovery_backoff_max_s)
            if not self.writes_stopped:
                break  # someone called restart() meanwhile
            self._attempts += 1
            self._reloading = True
            try:
                await self.restart()
                break  # reloaded; a later stop starts a recovery of its own
            except OwnershipConflict as exc:
                if not self.yields:
                    self._recovery_failed(exc)
                else:
                    log.warning(
                        "another node owns the store: %s",
                        exc.message,
                        extra={"action": "node.deposed", "error": exc.message},
                    )
                    self.deposed.set()
                    return
            except Exception as exc:  # any failure: the store still refuses; try again
                self._recovery_failed(exc)
            finally:
                self._reloading = False
            if self.writes_stopped and self.clock.now() >= deadline:
                log.error(
                    "writes stayed stopped for %g s (recovery_deadline_s) after %d "
                    "reload attempts; giving up so that the process is restarted",
                    self.recovery_deadline_s,
                    self._attempts,
                    extra={"action": "node.recovery_gave_up", "attempts": self._attempts},
                )
                self.unrecoverable.set()
                return
        log.info(
            "writes resumed: reloaded from the store after %.3f s",
            self.clock.now() - stopped_at,
            extra={"action": "node.writes_resumed", "attempts": self._attempts},
        )

    def _recovery_failed(self, exc: Exception) -> None:
        detail = exc.message if isinstance(exc, WfError) else repr(exc)
        log.warning(
            "reload attempt %d failed: %s",
            self._attempts,
            detail,
            extra={"action": "node.recovery_failed", "error": detail},
        )

    def _notify(self, outcome: Outcome) -> None:
        """Tell every listener of ``outcome``; an outcome that decided and recorded
        nothing (a poll that found no work, a withdrawn poll) is news to none of them."""
        if not (outcome.decisions or outcome.records):
            return
        for listener in self.listeners:
            listener(outcome)

    async def tick(self) -> Outcome:
        """One Tick at the current instant (what the background loop calls)."""
        return await self.execute(lambda now: cmd.Tick(now=now))

    async def _run(self) -> None:
        while True:
            now = self.clock.now()
            wake = self.core.next_wake_at(now)
            delay = TICK_INTERVAL_MAX_S if wake is None else min(wake - now, TICK_INTERVAL_MAX_S)
            if delay > 0:
                self._wake.clear()
                self._asleep_until = now + delay
                try:
                    # On the clock, so a virtual clock drives the node like everything else.
                    await sleep_until(self.clock, now + delay, self._wake)
                finally:
                    self._asleep_until = None
                continue
            try:
                await self.tick()
            except StoreUnavailable:
                return  # writes stopped; restart() starts the loop again


_STANDBY: Final = OwnershipLost("this node is a standby: another node owns the store")
"""Why a standby's node refuses commands (the server answers ``not_leader`` first)."""


def _cause_code(cause: BaseException) -> str:
    """A failure's stable name: its wf error code, or its exception type."""
    return cause.code if isinstance(cause, WfError) else type(cause).__name__
