"""An in-process cluster: the real scheduler core, scripted workers, virtual time.

Theory of operation
-------------------
:class:`InProcessCluster` is a small shell around :class:`SchedulerCore`
that behaves like the real server and workers would, but in one process and
on a :class:`~wf.testing.clock.VirtualClock`: every command carries the
virtual ``now``; each worker heartbeats on its interval, polls for as many
leases as it has free slots, starts what it is granted, renews long
activities at a third of the lease TTL, and completes or fails them when its
handler says so. The cluster ticks the core exactly when
:meth:`SchedulerCore.next_wake_at` asks, so delayed work, cron, lease expiry
and failure detection happen at their true virtual instants. A crashed
worker simply stops acting; the core notices through missed heartbeats.

Handlers are plain functions ``(LeaseGranted) -> Step``: how long the work
takes and whether it succeeds. Nothing here sleeps or reads a real clock, so
a day of scheduling runs in milliseconds, deterministically.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from wf.errors import WfError
from wf.scheduler import commands as cmd
from wf.scheduler.config import SchedulerConfig
from wf.scheduler.dispatcher import SchedulerCore
from wf.scheduler.model import Activity, WorkerInfo
from wf.scheduler.outputs import (
    ActivityCompleted,
    ActivityFailed,
    CronFired,
    Decision,
    LeaseGranted,
    LeaseRevoked,
    Record,
    RetryScheduled,
    WorkerFailed,
)
from wf.testing.clock import TimerHandle, VirtualClock


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """What a scripted worker does with one lease."""

    duration_s: float
    """Virtual seconds of work."""
    error: str | None = None
    """Fail with this error type instead of completing."""
    retryable: bool = True
    """Whether the failure may be retried."""
    result: bytes = b""
    """Result on success."""


Handler = Callable[[LeaseGranted], Step]


@dataclass(slots=True)
class _Worker:
    info: WorkerInfo
    handler: Handler
    alive: bool = True
    running: dict[str, tuple[int, list[TimerHandle]]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Event:
    """One line of the cluster's timeline."""

    at: float
    text: str


class InProcessCluster:
    """The core plus scripted workers on a virtual clock (see the module docstring)."""

    def __init__(
        self,
        config: SchedulerConfig | None = None,
        clock: VirtualClock | None = None,
        *,
        core: SchedulerCore | None = None,
        persist: Callable[[list[Record]], None] | None = None,
    ):
        """``core`` continues an existing (e.g. recovered) core; ``persist`` receives
        every command's records and must make them durable before returning, so no
        decision is acted on before its records are stored."""
        self.clock = clock or VirtualClock()
        self.core = core if core is not None else SchedulerCore(config)
        self._persist = persist
        self.workers: dict[str, _Worker] = {}
        self.events: list[Event] = []
        self.completed: dict[str, ActivityCompleted] = {}
        self.failed: dict[str, ActivityFailed] = {}
        self._tick_handle: TimerHandle | None = None

    # -------------------------------------------------------------- control

    def add_worker(self, info: WorkerInfo, handler: Handler) -> None:
        """Register a worker and start its heartbeat and polling."""
        self.workers[info.worker_id] = _Worker(info=info, handler=handler)
        self._send(cmd.RegisterWorker(now=self.clock.now(), info=info))
        self._note(f"worker {info.worker_id} registered")
        self._heartbeat_later(info.worker_id)
        self._poll(info.worker_id)

    def submit(self, *activities: Activity) -> None:
        """Submit activities now."""
        self._send(cmd.Submit(now=self.clock.now(), activities=activities))

    def register_cron(self, cron_id: str, expression: str, template: Activity, tz: str) -> None:
        """Register a recurring trigger."""
        self._send(
            cmd.RegisterCron(
                now=self.clock.now(),
                cron_id=cron_id,
                expression=expression,
                timezone=tz,
                template=template,
            )
        )

    def crash(self, worker_id: str) -> None:
        """The worker's process dies: it stops heartbeating and acting."""
        worker = self.workers[worker_id]
        worker.alive = False
        for _token, handles in worker.running.values():
            for handle in handles:
                self.clock.cancel(handle)
        worker.running.clear()
        self._note(f"worker {worker_id} crashed")

    def run_until(self, t: float) -> None:
        """Advance virtual time to ``t``, running everything that falls due."""
        self.clock.run_until(t)

    # ------------------------------------------------------------- plumbing

    def _note(self, text: str) -> None:
        self.events.append(Event(self.clock.now(), text))

    def _send(self, command: cmd.Command) -> bool:
        try:
            outcome = self.core.handle(command)
        except WfError as exc:
            self._note(f"refused {type(command).__name__}: {exc.code}")
            return False
        if self._persist is not None and outcome.records:
            self._persist(outcome.records)
        for decision in outcome.decisions:
            self._apply(decision)
        self._schedule_tick()
        return True

    def _schedule_tick(self) -> None:
        wake = self.core.next_wake_at(self.clock.now())
        if wake is None:
            return
        wake = max(wake, self.clock.now())
        if self._tick_handle is not None:
            if self._tick_handle.deadline <= wake:
                return
            self.clock.cancel(self._tick_handle)
        self._tick_handle = self.clock.call_at(wake, self._tick)

    def _tick(self) -> None:
        self._tick_handle = None
        self._send(cmd.Tick(now=self.clock.now()))

    def _apply(self, d: Decision) -> None:
        if isinstance(d, LeaseGranted):
            self._run(d)
        elif isinstance(d, LeaseRevoked):
            worker = self.workers.get(d.worker_id)
            if worker is not None and worker.alive and d.activity_id in worker.running:
                _token, handles = worker.running.pop(d.activity_id)
                for handle in handles:
                    self.clock.cancel(handle)
            self._note(f"lease on {d.activity_id} revoked from {d.worker_id} ({d.reason})")
        elif isinstance(d, ActivityCompleted):
            self.completed[d.activity_id] = d
            self._note(f"{d.activity_id} completed (attempt {d.attempt})")
        elif isinstance(d, ActivityFailed):
            self.failed[d.activity_id] = d
            self._note(f"{d.activity_id} failed: {d.reason}")
        elif isinstance(d, RetryScheduled):
            self._note(f"{d.activity_id} will retry (attempt {d.attempt})")
        elif isinstance(d, WorkerFailed):
            self._note(f"worker {d.worker_id} declared lost ({d.reason})")
        elif isinstance(d, CronFired):
            self._note(f"cron {d.cron_id} fired -> {d.activity_id}")

    def _run(self, grant: LeaseGranted) -> None:
        lease = grant.lease
        worker = self.workers[lease.worker_id]
        if not worker.alive:
            return
        self._note(f"{lease.activity_id} leased to {lease.worker_id} (token {lease.token})")
        if grant.not_before is not None and grant.not_before > self.clock.now():
            # An early grant: the worker waits for the instant (a revocation cancels it).
            begin = self.clock.call_at(grant.not_before, functools.partial(self._begin, grant))
            worker.running[lease.activity_id] = (lease.token, [begin])
            return
        self._begin(grant)

    def _begin(self, grant: LeaseGranted) -> None:
        lease = grant.lease
        worker = self.workers[lease.worker_id]
        if not worker.alive:
            return
        if not self._send(
            cmd.StartActivity(
                now=self.clock.now(), activity_id=lease.activity_id, token=lease.token
            )
        ):
            return
        step = worker.handler(grant)
        handles: list[TimerHandle] = []
        worker.running[lease.activity_id] = (lease.token, handles)
        renew_every = self.core.config.lease_ttl_s / 3
        t = self.clock.now() + renew_every
        end = self.clock.now() + step.duration_s
        renew = functools.partial(self._renew, lease.activity_id, lease.token)
        while t < end:
            handles.append(self.clock.call_at(t, renew))
            t += renew_every
        handles.append(self.clock.call_at(end, lambda: self._finish(worker, grant, step)))

    def _renew(self, activity_id: str, token: int) -> None:
        self._send(cmd.RenewLease(now=self.clock.now(), activity_id=activity_id, token=token))

    def _finish(self, worker: _Worker, grant: LeaseGranted, step: Step) -> None:
        lease = grant.lease
        worker.running.pop(lease.activity_id, None)
        now = self.clock.now()
        if step.error is None:
            self._send(
                cmd.Complete(
                    now=now, activity_id=lease.activity_id, token=lease.token, result=step.result
                )
            )
        else:
            self._send(
                cmd.Fail(
                    now=now,
                    activity_id=lease.activity_id,
                    token=lease.token,
                    error_type=step.error,
                    retryable=step.retryable,
                )
            )
        self._poll(worker.info.worker_id)

    def _poll(self, worker_id: str) -> None:
        worker = self.workers[worker_id]
        free = worker.info.max_concurrency - len(worker.running)
        if worker.alive and free > 0:
            self._send(cmd.Poll(now=self.clock.now(), worker_id=worker_id, max_items=free))

    def _heartbeat_later(self, worker_id: str) -> None:
        worker = self.workers[worker_id]

        def beat() -> None:
            if not worker.alive:
                return
            self._send(cmd.Heartbeat(now=self.clock.now(), worker_id=worker_id))
            self._heartbeat_later(worker_id)

        self.clock.call_later(worker.info.heartbeat_interval_s, beat)
