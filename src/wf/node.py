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
*fails stop*: it refuses every further command with
:class:`~wf.errors.StoreUnavailable` until :meth:`restart` reloads the core
from the store, which is the only state anyone was ever told about. The
store itself is fenced by the failure, so appends already queued behind the
failed one (computed from state that included it) are refused as well.

Start-up is WF-005 §23 recovery: load the durable state, rebuild the core
(:func:`wf.store.loader.build_snapshot`), give every worker a fresh
heartbeat grace period, then one tick that expires stale leases and requeues
abandoned activities; its records are committed before dispatch resumes.
The background loop only calls :meth:`tick` at the instant the core asks for
(:meth:`SchedulerCore.next_wake_at`), bounded by ``tick_interval_max_s``.
"""

from __future__ import annotations

import asyncio
import gc
import os
import socket
import time
from collections.abc import Callable
from datetime import UTC

import msgspec

from wf.clock import Clock, SystemClock, sleep_until
from wf.errors import StoreUnavailable, WfError
from wf.scheduler import commands as cmd
from wf.scheduler.config import SchedulerConfig
from wf.scheduler.dispatcher import SchedulerCore
from wf.scheduler.outputs import Outcome
from wf.scheduler.recovery import durable_digest, recover, restore
from wf.store.loader import build_snapshot
from wf.store.protocol import Diagnostic, OwnerInfo, Store

TICK_INTERVAL_MAX_S = 1.0
"""Longest the background loop sleeps without ticking (bounds clock drift effects)."""


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
        store: Store,
        config: SchedulerConfig | None = None,
        *,
        clock: Clock | None = None,
        owner: OwnerInfo | None = None,
        digest_on_recovery: bool = False,
    ) -> None:
        self.store = store
        self.config = config or SchedulerConfig()
        self.clock: Clock = clock or SystemClock()
        self.owner = owner or default_owner(self.clock)
        self.digest_on_recovery = digest_on_recovery
        self.core = SchedulerCore(self.config)
        self._broken: BaseException | None = None
        self._loop_task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._asleep_until: float | None = None
        """Where the tick loop sleeps until (``None`` while it is awake)."""
        self._last_commit: asyncio.Future[None] | None = None
        self.listeners: list[Callable[[Outcome], None]] = []
        """Called with every committed outcome (the server routes decisions with it)."""

    async def start(self, *, background: bool = True) -> RecoveryReport:
        """Open the store, take ownership, recover, and (optionally) start ticking."""
        await self.store.open()
        try:
            await self.store.acquire_ownership(self.owner)
            report = await self._recover()
        except BaseException:
            await self.store.close()
            raise
        if background:
            self._loop_task = asyncio.create_task(self._run(), name="wf-scheduler-ticks")
        return report

    async def _recover(self) -> RecoveryReport:
        # Recovery builds millions of objects that all stay alive: the collector's
        # passes over them find nothing and cost ~0.25 s per 10^6 activities.
        collecting = gc.isenabled()
        gc.disable()
        try:
            return await self._recover_all()
        finally:
            if collecting:
                gc.enable()

    async def _recover_all(self) -> RecoveryReport:
        started = time.perf_counter()
        stored = await self.store.load()
        now = self.clock.now()
        snapshot, diagnostics = build_snapshot(stored, self.config, now)
        core, outcome = recover(snapshot, now, adopt=not self.digest_on_recovery)
        # Optional: it rebuilds the core a second time, which doubles recovery time.
        digest = durable_digest(restore(snapshot)) if self.digest_on_recovery else None
        if outcome.records:
            await self.store.append(outcome.records)
        self.core = core
        self._broken = None
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
        """Reload the core from the store (after a failed commit); resume ticking."""
        # Appends queued behind the failed one are refused by the store's fence;
        # once they are settled the fence is lifted and the store is the truth.
        await self.store.clear_write_fence()
        report = await self._recover()
        if self._loop_task is not None and self._loop_task.done():
            # The loop ends when a tick finds the node stopped; start it again.
            self._loop_task = asyncio.create_task(self._run(), name="wf-scheduler-ticks")
        return report

    async def stop(self) -> None:
        """Stop ticking, flush, release ownership and close the store."""
        task, self._loop_task = self._loop_task, None
        if task is not None:
            task.cancel()
            # asyncio.wait, not suppress(CancelledError): a cancellation of the
            # caller of stop() must propagate, not be taken for the loop's.
            await asyncio.wait({task})
            if not task.cancelled():
                task.result()
        await self.store.close()

    async def execute(self, make: Callable[[float], cmd.Command]) -> Outcome:
        """Run one command built for the current instant; durable before it returns.

        Raises the core's typed errors unchanged (nothing was changed), or
        :class:`StoreUnavailable` if the node cannot commit.
        """
        if self._broken is not None:
            raise StoreUnavailable(
                "the scheduler node lost its store and must restart", cause=str(self._broken)
            )
        now = self.clock.now()
        outcome = self.core.handle(make(now))
        if outcome.records:
            await self._commit(outcome)
        self._notify(outcome)
        asleep_until = self._asleep_until
        if asleep_until is not None:
            # Wake the tick loop only if this command brought its next tick forward:
            # waking it for every command costs more than the command itself.
            wake = self.core.next_wake_at(now)
            if wake is not None and wake < asleep_until:
                self._wake.set()
        return outcome

    async def _commit(self, outcome: Outcome) -> None:
        """Append ``outcome``'s records and await the commit.

        The append runs as a task of its own: a caller cancelled mid-commit (a
        client that went away) must neither cancel an append that may already be
        committing nor leave the node unsure whether the store kept up with the
        core. The commit goes on; its failure still stops the node, and its
        success still reaches the listeners.
        """
        commit = asyncio.ensure_future(self.store.append(outcome.records))
        commit.add_done_callback(self._settled)
        self._last_commit = commit
        try:
            await asyncio.shield(commit)
        except asyncio.CancelledError:
            if not commit.done():
                commit.add_done_callback(
                    lambda c: None if c.cancelled() or c.exception() else self._notify(outcome)
                )
            raise
        except WfError:
            raise
        except Exception as exc:
            raise StoreUnavailable("commit failed", cause=repr(exc)) from exc

    async def durable(self) -> None:
        """Wait until every command executed so far is committed (or failed).

        The core changes as soon as a command is handled and the commit follows;
        a reader that must not report state the store may never hold (a read of
        the core answered to a client) awaits this first. Commits land in order,
        so waiting for the latest is waiting for all.
        """
        # Loop: commands handled while we waited have commits of their own.
        while (commit := self._last_commit) is not None and not commit.done():
            await asyncio.wait({commit})

    def _settled(self, commit: asyncio.Future[None]) -> None:
        """A commit ended: a failed or cancelled one stops the node (fail-stop)."""
        failure = asyncio.CancelledError() if commit.cancelled() else commit.exception()
        if failure is not None and self._broken is None:
            self._broken = failure

    def _notify(self, outcome: Outcome) -> None:
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
                return
