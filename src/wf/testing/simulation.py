"""Deterministic simulation of the scheduler core, its workers and their faults.

Theory of operation
-------------------
:func:`simulate` runs one world from one seed. Every random choice comes
from ``random.Random(seed)`` and time is a
:class:`~wf.testing.clock.VirtualClock` that the simulation alone moves, so
a seed *is* its run: the same seed gives the same commands, the same
decisions and the same :attr:`SimulationResult.digest`.

The world is an event loop on the virtual clock. Events are callbacks
registered at instants; the loop jumps to the next one
(:meth:`VirtualClock.run_next`). Each event may hand commands to a
:class:`~wf.scheduler.dispatcher.SchedulerCore`, and every command is one
*step*: the :class:`~wf.testing.invariants.InvariantChecker` checks every
invariant after it, and the run stops after ``steps`` of them.

* **The shell** ticks the core at its :meth:`~SchedulerCore.next_wake_at`
  (and at least every ``TICK_PERIOD_S``), a little late at random.
* **Submitters** send batches of random activities (tenants, priorities,
  capabilities, idempotency, ordering keys, ``not_before`` delays, calendar
  (cron expression) delays in some worlds, retry policies, policy groups,
  new-workflow flags), now and then a burst that backlogs every tenant.
* **Workers** behave like the worker SDK: register, heartbeat every
  interval, long-poll for their free slots (and re-poll, sometimes after a
  ``CancelPoll``); on ``LeaseGranted`` they start the activity after a
  short delay, renew every third of the TTL, and finish after a random
  duration with ``Complete`` or ``Fail``; on ``LeaseRevoked`` or a refused
  call they drop the activity; when the core says ``worker_not_active`` they
  register again.
* **Faults** arrive at random: worker crashes (the process stops acting and
  heartbeating; the core must notice through missed heartbeats on a Tick)
  and later revivals that register again and act as *stale actors*
  (completing, failing or renewing with a token from before the crash);
  heartbeat gaps that may or may not outlast detection; slow renewals that
  let leases expire; graceful shutdowns; infrastructure failures of a whole
  host (``WorkersLost``); cancellations; and scheduler restarts:
  ``recover(decode(encode(snapshot(core))), now)``, with the snapshot
  round-tripped through JSON and compared with the original to prove it is
  a complete durable value.

Typed refusals of stale, expired or late calls are expected and counted;
any other exception out of the core, or a refusal the simulation could not
have provoked, is a violation. A violation is re-raised with the step, the
command and a one-line reproduction command.

The input log is kept per *segment*: the first starts from an empty core,
each restart begins a new one from the snapshot taken right after recovery.
Replaying a segment (:func:`wf.scheduler.replay.replay`) must give exactly
the lines the simulation saw; without restarts the one segment is the whole
run.

Why one module of about a thousand lines: the world (shell, submitters,
workers, faults) shares one random stream and one virtual clock, and the
order of its draws is what makes a seed its run; the checks live in
:mod:`wf.testing.invariants`.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

import msgspec

from wf.errors import WfError
from wf.scheduler import commands as cmd
from wf.scheduler.backpressure import BackpressureConfig
from wf.scheduler.config import PolicyConfig, SchedulerConfig, StealingConfig
from wf.scheduler.dispatcher import SchedulerCore
from wf.scheduler.load_balancer import BalancingStrategy
from wf.scheduler.model import (
    Activity,
    HeartbeatStats,
    Priority,
    RetryPolicy,
    TransitionReason,
    WorkerInfo,
)
from wf.scheduler.outputs import (
    ActivityCompleted,
    ActivityFailed,
    ActivitySubmitted,
    LeaseGranted,
    LeaseRevoked,
    Outcome,
    RetryScheduled,
    Transition,
    WorkerFailed,
)
from wf.scheduler.queue import PartitionKey
from wf.scheduler.rate_limiter import RateLimitConfig
from wf.scheduler.recovery import CoreSnapshot, recover, restore, snapshot, state_digest
from wf.scheduler.replay import LogHeader, encode_log
from wf.scheduler.timer import CalendarSchedule
from wf.testing.clock import DEFAULT_START, TimerHandle, VirtualClock
from wf.testing.invariants import (
    InvariantChecker,
    InvariantViolation,
    believed_leases,
    policy_oracle_applies,
)

STEPS_DEFAULT: Final = 2000
"""Commands per run unless told otherwise."""
TICK_PERIOD_S: Final = 2.0
"""The shell ticks at least this often, whatever ``next_wake_at`` says."""
TICK_LAG_MAX_S: Final = 0.25
"""A tick may come this much after the instant the core asked for."""
ARRIVAL_MEAN_S: Final = 2.0
"""Mean time between submissions."""
FAULT_MEAN_S: Final = 3.0
"""Mean time between injected faults."""
BURST_SIZE_MAX: Final = 16
"""Largest burst of submissions (backlogs every tenant)."""
REPRO_COMMAND: Final = "uv run wf simulate --seed {seed} --steps {steps}"
"""The one-line reproduction command a violation carries."""

_TENANTS: Final = ("acme", "globex", "initech", "umbrella")
_TYPES: Final = ("etl", "email", "render", "train")
_CAPABILITIES: Final = ("gpu", "ssd")
_KEYS: Final = ("order-1", "order-2", "order-3")
_EXPECTED_REFUSALS: Final = frozenset(
    {"stale_lease", "lease_expired", "worker_not_active", "conflict", "illegal_transition"}
)
"""Refusals a well-behaved but unlucky worker gets; ``overloaded`` only for new workflows."""
_ENCODER: Final = msgspec.json.Encoder()


class _Done(Exception):
    """The step budget is spent."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulationCounts:
    """What happened in one run."""

    commands: int = 0
    """Commands handed to the core (the steps), recovery ticks included."""
    submitted: int = 0
    """Activities accepted."""
    dispatched: int = 0
    """Leases granted from the queue."""
    completed: int = 0
    """``ActivityCompleted`` decisions."""
    failed: int = 0
    """``ActivityFailed`` decisions."""
    cancelled: int = 0
    """Activities cancelled."""
    retries: int = 0
    """``RetryScheduled`` decisions."""
    requeued: int = 0
    """Leases lost and their activity requeued (expiry, worker loss, return)."""
    expired: int = 0
    """Leases that expired."""
    steals: int = 0
    """Leases moved by work stealing."""
    workers_failed: int = 0
    """Workers declared lost."""
    crashes: int = 0
    """Worker processes crashed (host failures included)."""
    revivals: int = 0
    """Crashed workers that came back."""
    heartbeat_gaps: int = 0
    """Heartbeat gaps injected."""
    slow_renewals: int = 0
    """Workers made to renew too slowly."""
    shutdowns: int = 0
    """Graceful shutdowns."""
    reconfigurations: int = 0
    """Workers that registered again with other concurrency or capabilities."""
    host_failures: int = 0
    """Infrastructure failures (``WorkersLost``)."""
    restarts: int = 0
    """Scheduler restarts (snapshot, JSON round trip, recover)."""
    stale_attempts: int = 0
    """Calls by revived workers with tokens from before their crash."""
    lost_grants: int = 0
    """Leases granted to a worker whose process had already died."""
    calendar_delays: int = 0
    """Activities sent with a calendar (cron expression) delay."""
    refusals: int = 0
    """Commands refused with a typed error (see ``SimulationResult.refusals``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Segment:
    """Commands between two restarts, with the decision stream they produced."""

    start: CoreSnapshot | None
    """State the segment starts from (``None``: an empty core)."""
    commands: tuple[cmd.Command, ...]
    """Every command of the segment, refused ones included."""
    lines: tuple[bytes, ...]
    """One line per command, exactly as :func:`wf.scheduler.replay.replay` prints it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulationResult:
    """The outcome of one :func:`simulate` run."""

    seed: int
    """The seed."""
    steps: int
    """The step budget."""
    config: SchedulerConfig
    """The configuration the core ran with."""
    policy_oracle: bool
    """Whether the policy oracle checked every dispatch (uniform workers, one group)."""
    counts: SimulationCounts
    """What happened."""
    refusals: dict[str, int]
    """Typed refusals by error code."""
    segments: tuple[Segment, ...]
    """The input log, split at restarts."""
    digest: str
    """SHA-256 of the whole decision stream (recoveries included)."""
    end_time: float
    """Virtual time at the end."""
    starvation_passes_max: int
    """Largest starvation counter the policy oracle saw (0 without the oracle)."""
    checks: dict[str, int]
    """How often each conditional invariant check had something to check."""

    @property
    def commands(self) -> list[cmd.Command]:
        """Every command handed to the core, in order (recovery ticks excluded)."""
        return [c for segment in self.segments for c in segment.commands]

    def log(self) -> bytes:
        """The last segment as an input log (the whole run if there was no restart)."""
        last = self.segments[-1]
        return encode_log(LogHeader(config=self.config, snapshot=last.start), last.commands)

    def summary(self) -> str:
        """One line for humans."""
        c = self.counts
        policies = "+".join(sorted({p.policy for p in self.config.policies.values()}))
        return (
            f"seed={self.seed} steps={c.commands} policy={policies} "
            f"oracle={'yes' if self.policy_oracle else 'no'} submitted={c.submitted} "
            f"completed={c.completed} failed={c.failed} cancelled={c.cancelled} "
            f"requeued={c.requeued} expired={c.expired} steals={c.steals} "
            f"crashes={c.crashes} restarts={c.restarts} refusals={c.refusals} "
            f"digest={self.digest[:16]}"
        )


# --------------------------------------------------------------- the world


@dataclass(slots=True)
class _Task:
    """An activity a simulated worker believes it holds."""

    activity_id: str
    token: int
    duration_s: float
    started: bool = False


@dataclass(slots=True)
class _Worker:
    """A simulated worker process (the SDK's view of itself)."""

    info: WorkerInfo
    up: bool = False
    """Its process runs."""
    known: bool = False
    """It registered at least once (the infrastructure knows it)."""
    incarnation: int = 0
    """Bumped whenever the process stops, so its pending events are dropped."""
    draining: bool = False
    exited: bool = False
    hb_gap_until: float = 0.0
    slow_renew_until: float = 0.0
    tasks: dict[str, _Task] = field(default_factory=dict)
    ghosts: list[tuple[str, int]] = field(default_factory=list)
    """Leases it held before its last crash (a stale actor's tokens)."""

    @property
    def wid(self) -> str:
        return self.info.worker_id

    @property
    def free(self) -> int:
        return self.info.max_concurrency - len(self.tasks)


def random_config(rng: random.Random, *, uniform: bool) -> SchedulerConfig:
    """A random configuration; with ``uniform`` the policy oracle stays sound."""
    policy = rng.choice(("priority", "weighted_fair", "deadline_first", "fifo", "tenant_aware"))
    options: dict[str, Any] = {}
    if policy == "weighted_fair":
        options["weights"] = {t: rng.choice((1, 2, 3)) for t in _TENANTS[:3]}
    if policy in ("priority", "deadline_first", "weighted_fair") and rng.random() < 0.5:
        options["starvation_limits"] = {
            "high": rng.randint(2, 6),
            "normal": rng.randint(2, 8),
            "low": rng.randint(2, 10),
        }
    policies = {"default": PolicyConfig(policy=policy, options=options)}
    if not uniform and rng.random() < 0.3:
        policies["batch"] = PolicyConfig(policy=rng.choice(("fifo", "priority", "weighted_fair")))
    partition_by: tuple[PartitionKey, ...] = ()
    limits = RateLimitConfig()
    if rng.random() < 0.6:
        rate = rng.choice((1.0, 2.0, 4.0))
        extra: dict[str, Any] = {}
        if not uniform:
            if rng.random() < 0.5:
                extra["max_tenant_concurrency"] = rng.randint(2, 5)
                extra["tenant_concurrency"] = {_TENANTS[0]: rng.randint(1, 3)}
            if rng.random() < 0.4:
                partition_by = (PartitionKey.TENANT,)
                extra["default_partition_per_second"] = rng.choice((0.5, 1.0, 2.0))
            if rng.random() < 0.3:
                extra["activity_type_per_second"] = {_TYPES[0]: rng.choice((0.5, 1.0))}
        elif rng.random() < 0.3:
            extra["default_partition_per_second"] = rng.choice((1.0, 3.0))
        limits = RateLimitConfig(
            max_activities_per_second=rate,
            burst=rng.choice((None, 1.0, 3.0)),
            max_concurrent_activities=rng.choice((None, rng.randint(3, 12))),
            **extra,
        )
    if not uniform and not partition_by and rng.random() < 0.2:
        partition_by = (PartitionKey.PRIORITY,)
    backpressure = BackpressureConfig()
    if rng.random() < 0.25:
        backpressure = BackpressureConfig(
            elevated_queue_depth=rng.randint(8, 20),
            critical_queue_depth=rng.randint(25, 40),
            elevated_utilization=rng.choice((None, 0.9)),
            elevated_dispatch_per_s=rng.choice((None, 2.0, 5.0)),
            reject_new_workflows=rng.random() < 0.7,
        )
    stealing = StealingConfig()
    if rng.random() < 0.4:
        stealing = StealingConfig(
            enabled=True,
            min_victim_backlog=rng.randint(1, 2),
            max_steals_per_activity=rng.randint(1, 3),
        )
    return SchedulerConfig(
        policies=policies,
        balancer=rng.choice(list(BalancingStrategy)),
        partition_by=partition_by,
        lease_ttl_s=rng.choice((4.0, 8.0, 15.0, 30.0)),
        heartbeat_misses_max=rng.randint(2, 4),
        infra_requeues_max=rng.choice((2, 5, 100)),
        limits=limits,
        backpressure=backpressure,
        stealing=stealing,
    )


class Simulation:
    """One seeded world; :func:`simulate` is the usual entry point."""

    def __init__(self, seed: int, *, steps: int, config: SchedulerConfig | None) -> None:
        if steps < 1:
            raise ValueError("steps must be at least 1")
        self.seed = seed
        self.steps = steps
        self.rng = rng = random.Random(seed)
        self.uniform = rng.random() < 0.4
        self.custom_config = config is not None
        if config is None:
            config = random_config(rng, uniform=self.uniform)
        self.config = config
        self.clock = VirtualClock(DEFAULT_START)
        self.core = SchedulerCore(config)
        self.checker = InvariantChecker(config, policy_oracle=self._oracle_sound(config))
        self.counts: Counter[str] = Counter()
        self.refusals: Counter[str] = Counter()
        self.digest = hashlib.sha256()
        self.segments: list[Segment] = []
        self._segment_start: CoreSnapshot | None = None
        self._commands: list[cmd.Command] = []
        self._lines: list[bytes] = []
        self.step = 0
        self.last_command: cmd.Command | None = None
        self.next_activity = 0
        self.groups = sorted(config.policies)
        self.workers: dict[str, _Worker] = {}
        self.hosts = 1
        self.calendar = False
        """Whether this world submits some activities with a calendar delay."""
        self.open: dict[str, None] = {}
        """Unfinished activities (insertion ordered), from the records."""
        self._tick_handle: TimerHandle | None = None
        self._tick_at: float | None = None
        self.deadline_span_s = rng.choice((30.0, 120.0))

    def _oracle_sound(self, config: SchedulerConfig) -> bool:
        return self.uniform and policy_oracle_applies(config)

    # -------------------------------------------------------------- running

    def run(self) -> SimulationResult:
        """Run until the step budget is spent; raises InvariantViolation on a broken rule."""
        try:
            self._bootstrap()
            while self.clock.run_next():
                pass
        except _Done:
            pass
        try:
            self.checker.check_final(self.core)
        except InvariantViolation as exc:
            raise self._violation(exc.invariant, exc.message) from exc
        self._close_segment()
        c = SimulationCounts(**dict(self.counts))
        return SimulationResult(
            seed=self.seed,
            steps=self.steps,
            config=self.config,
            policy_oracle=self.checker.oracle is not None,
            counts=c,
            refusals=dict(sorted(self.refusals.items())),
            segments=tuple(self.segments),
            digest=self.digest.hexdigest(),
            end_time=self.clock.now(),
            starvation_passes_max=self.checker.stats.starvation_passes_max,
            checks=dict(sorted(self.checker.stats.engaged.items())),
        )

    def _at(self, delay_s: float, callback: Callable[[], object]) -> None:
        self.clock.call_at(self.clock.now() + max(0.0, delay_s), callback)

    def _bootstrap(self) -> None:
        rng = self.rng
        self.hosts = rng.randint(2, 3)
        for _ in range(rng.randint(3, 6)):
            self._new_worker(rng.uniform(0.0, 0.5))
        self.calendar = rng.random() < 0.25
        self._at(rng.uniform(0.2, 1.0), self._arrival)
        self._at(rng.expovariate(1 / FAULT_MEAN_S) + 2.0, self._fault)
        self._arm_tick()

    def _new_worker(self, delay_s: float) -> None:
        """A worker with a fresh id joins after ``delay_s`` (at start, or as a replacement)."""
        w = _Worker(info=self._worker_info(len(self.workers), self.hosts))
        self.workers[w.wid] = w
        self._at(delay_s, lambda: self._boot_worker(w))

    def _worker_info(self, n: int, hosts: int) -> WorkerInfo:
        rng = self.rng
        caps = frozenset(c for c in _CAPABILITIES if rng.random() < 0.4)
        types: frozenset[str] | None = None
        tenants: frozenset[str] | None = None
        partitions: frozenset[str] | None = None
        if not self.uniform:
            if rng.random() < 0.3:
                types = frozenset(rng.sample(_TYPES, 3))
            if rng.random() < 0.3:
                tenants = frozenset(rng.sample(_TENANTS, 2))
            if self.config.partition_by == (PartitionKey.TENANT,) and rng.random() < 0.3:
                partitions = frozenset(f"tenant={t}" for t in rng.sample(_TENANTS, 3))
        return WorkerInfo(
            worker_id=f"w{n}",
            hostname=f"host-{n % hosts}",
            capabilities=caps,
            max_concurrency=rng.randint(1, 4),
            labels={"locality": rng.choice(("eu", "us"))},
            heartbeat_interval_s=rng.choice((1.0, 2.0, 3.0, 5.0)),
            activity_types=types,
            tenants=tenants,
            partitions=partitions,
        )

    # -------------------------------------------------------------- commands

    def _send(self, command: cmd.Command) -> Outcome | WfError:
        if self.step >= self.steps:
            raise _Done
        self.step += 1
        self.counts["commands"] += 1
        self.last_command = command
        index = len(self._commands)
        self._commands.append(command)
        try:
            outcome = self.core.handle(command)
        except WfError as exc:
            expected = exc.code in _EXPECTED_REFUSALS or (
                exc.code == "overloaded"
                and isinstance(command, cmd.Submit)
                and any(a.new_workflow for a in command.activities)
            )
            if not expected:
                raise self._violation(
                    "unexpected_refusal", f"{type(exc).__name__}: {exc.message}"
                ) from exc
            self.refusals[exc.code] += 1
            self.counts["refusals"] += 1
            self._line({"i": index, "error": {"code": exc.code, "message": exc.message}})
            self._check(command, None, exc)
            return exc
        except Exception as exc:
            raise self._violation("core_crashed", f"{type(exc).__name__}: {exc}") from exc
        self._line({"i": index, "decisions": outcome.decisions, "records": len(outcome.records)})
        self._account(outcome)
        self._deliver(outcome)
        self._check(command, outcome, None)
        self._arm_tick()
        return outcome

    def _line(self, entry: dict[str, Any], *, in_segment: bool = True) -> None:
        line = _ENCODER.encode(entry)
        if in_segment:
            self._lines.append(line)
        self.digest.update(line)
        self.digest.update(b"\n")

    def _check(self, command: cmd.Command, outcome: Outcome | None, error: WfError | None) -> None:
        holders = believed_leases(
            (w.wid, t.activity_id, t.token)
            for w in self.workers.values()
            if w.up
            for t in w.tasks.values()
        )
        try:
            self.checker.observe(self.core, command, outcome, error, holders=holders)
        except InvariantViolation as exc:
            raise self._violation(exc.invariant, exc.message) from exc

    def _violation(self, invariant: str, message: str) -> InvariantViolation:
        shown = repr(self.last_command)
        if len(shown) > 400:
            shown = shown[:400] + "..."
        repro = REPRO_COMMAND.format(seed=self.seed, steps=self.steps)
        if self.custom_config:
            repro += "  (with the custom config passed to simulate())"
        return InvariantViolation(
            invariant,
            f"{message}\n  at step {self.step} (t={self.clock.now():.6f}), command {shown}\n"
            f"  reproduce: {repro}",
        )

    def _account(self, outcome: Outcome) -> None:
        counts = self.counts
        for rec in outcome.records:
            if isinstance(rec, ActivitySubmitted):
                counts["submitted"] += 1
                self.open[rec.activity.activity_id] = None
            elif isinstance(rec, Transition):
                to, reason = rec.to_state.value, rec.reason
                if to in ("completed", "failed", "cancelled"):
                    self.open.pop(rec.activity_id, None)
                    if to == "cancelled":
                        counts["cancelled"] += 1
                elif to == "leased":
                    if reason == TransitionReason.GRANTED:
                        counts["dispatched"] += 1
                    else:
                        counts["steals"] += 1
                elif (
                    to == "queued"
                    and rec.from_state.value in ("leased", "executing")
                    and reason != TransitionReason.STOLEN
                ):
                    counts["requeued"] += 1
                if reason == TransitionReason.LEASE_EXPIRED:
                    counts["expired"] += 1
        for d in outcome.decisions:
            if isinstance(d, ActivityCompleted):
                counts["completed"] += 1
            elif isinstance(d, ActivityFailed):
                counts["failed"] += 1
            elif isinstance(d, RetryScheduled):
                counts["retries"] += 1
            elif isinstance(d, WorkerFailed):
                counts["workers_failed"] += 1

    def _deliver(self, outcome: Outcome) -> None:
        """Hand decisions to the simulated workers, as the shell would."""
        for d in outcome.decisions:
            if isinstance(d, LeaseGranted):
                w = self.workers[d.lease.worker_id]
                if not w.up:
                    self.counts["lost_grants"] += 1
                    continue
                aid = d.lease.activity_id
                task = _Task(activity_id=aid, token=d.lease.token, duration_s=self._duration())
                w.tasks[aid] = task
                inc = w.incarnation
                delay = self.rng.uniform(0.0, 1.0)
                if d.not_before is not None:
                    # An early grant: the worker never starts it before its instant.
                    delay = max(delay, d.not_before - self.clock.now())
                self._at(delay, partial(self._start, w, task, inc))
            elif isinstance(d, LeaseRevoked):
                holder = self.workers[d.worker_id]
                held = holder.tasks.get(d.activity_id)
                if holder.up and held is not None and held.token == d.token:
                    del holder.tasks[d.activity_id]
                    self._poll_soon(holder)

    def _duration(self) -> float:
        rng = self.rng
        roll = rng.random()
        if roll < 0.6:
            return rng.uniform(0.2, 3.0)
        if roll < 0.9:
            return rng.uniform(3.0, 10.0)
        return rng.uniform(10.0, 40.0)

    # ----------------------------------------------------------------- shell

    def _arm_tick(self) -> None:
        now = self.clock.now()
        wake = self.core.next_wake_at(now)
        target = now + TICK_PERIOD_S if wake is None else min(wake, now + TICK_PERIOD_S)
        target = max(target, now) + self.rng.uniform(0.0, TICK_LAG_MAX_S)
        if self._tick_at is not None and self._tick_at <= target:
            return
        if self._tick_handle is not None:
            self.clock.cancel(self._tick_handle)
        self._tick_at = target
        self._tick_handle = self.clock.call_at(target, self._tick)

    def _tick(self) -> None:
        self._tick_handle = None
        self._tick_at = None
        self._send(cmd.Tick(now=self.clock.now()))

    # ------------------------------------------------------------ submitters

    def _activity_spec(self, aid: str) -> Activity:
        rng = self.rng
        now = self.clock.now()
        caps: frozenset[str] = frozenset()
        if not self.uniform and rng.random() < 0.2:
            caps = frozenset({rng.choice(_CAPABILITIES)})
        key = None
        if not self.uniform and rng.random() < 0.15:
            key = rng.choice(_KEYS)
        not_before = None
        delay: CalendarSchedule | None = None
        if self.calendar and rng.random() < 0.1:
            # Dormant until the next instant of a cron expression (the core resolves it).
            delay = CalendarSchedule(
                cron=rng.choice(("* * * * *", "*/2 * * * *")),
                timezone=rng.choice(("UTC", "Europe/Paris")),
            )
            self.counts["calendar_delays"] += 1
        elif rng.random() < 0.2:
            not_before = now + rng.uniform(0.0, 20.0)
        retry = RetryPolicy(
            max_attempts=rng.randint(1, 4),
            initial_backoff_s=rng.choice((0.0, 0.5, 2.0)),
            jitter_fraction=rng.choice((0.0, 0.1)),
            non_retryable_errors=frozenset({"Fatal"}),
            restart_on_abandon=rng.random() < 0.2,
        )
        return Activity(
            activity_id=aid,
            activity_type=rng.choice(_TYPES),
            workflow_id=f"wf-{rng.randint(1, 20)}",
            tenant=rng.choice(_TENANTS),
            priority=rng.choice((Priority.CRITICAL, Priority.HIGH, Priority.NORMAL, Priority.LOW)),
            deadline=now + rng.uniform(0.0, self.deadline_span_s) if rng.random() < 0.7 else None,
            capabilities=caps,
            locality=rng.choice((None, "eu", "us")),
            region=rng.choice((None, "eu-west")),
            idempotent=rng.random() < 0.5,
            correlation_id=f"corr-{aid}",
            ordering_key=key,
            policy=rng.choice(self.groups) if len(self.groups) > 1 else None,
            new_workflow=rng.random() < 0.3,
            not_before=not_before,
            delay=delay,
            retry=retry,
            payload=b"x" * rng.randint(0, 8),
        )

    def _arrival(self) -> None:
        rng = self.rng
        size = rng.randint(1, 3) if rng.random() < 0.93 else rng.randint(8, BURST_SIZE_MAX)
        batch = []
        for _ in range(size):
            self.next_activity += 1
            batch.append(self._activity_spec(f"a{self.next_activity}"))
        self._at(rng.expovariate(1 / ARRIVAL_MEAN_S), self._arrival)
        self._send(cmd.Submit(now=self.clock.now(), activities=tuple(batch)))

    # --------------------------------------------------------------- workers

    def _boot_worker(self, w: _Worker) -> None:
        w.up, w.draining, w.exited = True, False, False
        w.incarnation += 1
        w.tasks.clear()
        self._register(w)
        inc = w.incarnation
        self._at(w.info.heartbeat_interval_s, lambda: self._heartbeat(w, inc))
        self._at(self.rng.uniform(3.0, 8.0), lambda: self._repoll(w, inc))

    def _register(self, w: _Worker) -> None:
        w.known = True
        self._send(cmd.RegisterWorker(now=self.clock.now(), info=w.info))
        self._poll_soon(w)

    def _alive(self, w: _Worker, inc: int) -> bool:
        return w.up and w.incarnation == inc

    def _heartbeat(self, w: _Worker, inc: int) -> None:
        if not self._alive(w, inc):
            return
        rng = self.rng
        self._at(
            w.info.heartbeat_interval_s * rng.uniform(0.8, 1.0), lambda: self._heartbeat(w, inc)
        )
        now = self.clock.now()
        if now < w.hb_gap_until:
            return
        started = [t for t in w.tasks.values() if t.started]
        stats = HeartbeatStats(
            workload=len(started),
            memory_fraction=round(rng.random(), 3),
            cpu_fraction=round(rng.random(), 3),
            queue_depth=len(w.tasks) - len(started),
            lease_status={
                t.activity_id: "executing" if t.started else "leased" for t in w.tasks.values()
            },
        )
        result = self._send(cmd.Heartbeat(now=now, worker_id=w.wid, stats=stats))
        if isinstance(result, WfError):
            self._not_active(w)

    def _not_active(self, w: _Worker) -> None:
        """The core no longer knows this worker as live: drop everything, join again."""
        w.tasks.clear()
        if w.draining:
            self._exit(w)
        else:
            self._register(w)

    def _poll_soon(self, w: _Worker) -> None:
        inc = w.incarnation
        self._at(self.rng.uniform(0.0, 0.3), lambda: self._poll(w, inc))

    def _poll(self, w: _Worker, inc: int) -> None:
        if not self._alive(w, inc) or w.draining or w.free <= 0:
            return
        result = self._send(cmd.Poll(now=self.clock.now(), worker_id=w.wid, max_items=w.free))
        if isinstance(result, WfError):
            self._not_active(w)

    def _repoll(self, w: _Worker, inc: int) -> None:
        """The long poll timed out: maybe cancel it, then poll again."""
        if not self._alive(w, inc):
            return
        self._at(self.rng.uniform(3.0, 8.0), lambda: self._repoll(w, inc))
        if w.draining:
            return
        if self.rng.random() < 0.3:
            self._send(cmd.CancelPoll(now=self.clock.now(), worker_id=w.wid))
        self._poll(w, inc)

    def _renew_period(self, w: _Worker) -> float:
        ttl = self.config.lease_ttl_s
        if self.clock.now() < w.slow_renew_until:
            return ttl * self.rng.uniform(1.05, 1.6)
        return ttl / 3 * self.rng.uniform(0.8, 1.0)

    def _holds(self, w: _Worker, task: _Task, inc: int) -> bool:
        return self._alive(w, inc) and w.tasks.get(task.activity_id) is task

    def _drop(self, w: _Worker, task: _Task) -> None:
        w.tasks.pop(task.activity_id, None)
        if w.draining and not w.tasks:
            self._exit(w)
        else:
            self._poll_soon(w)

    def _start(self, w: _Worker, task: _Task, inc: int) -> None:
        if not self._holds(w, task, inc):
            return
        result = self._send(
            cmd.StartActivity(now=self.clock.now(), activity_id=task.activity_id, token=task.token)
        )
        if isinstance(result, WfError):
            self._drop(w, task)
            return
        task.started = True
        self._at(self._renew_period(w), lambda: self._renew(w, task, inc))
        self._at(task.duration_s, lambda: self._finish(w, task, inc))

    def _renew(self, w: _Worker, task: _Task, inc: int) -> None:
        if not self._holds(w, task, inc):
            return
        result = self._send(
            cmd.RenewLease(now=self.clock.now(), activity_id=task.activity_id, token=task.token)
        )
        if isinstance(result, WfError):
            self._drop(w, task)  # The SDK cancels an activity whose lease it lost.
            return
        self._at(self._renew_period(w), lambda: self._renew(w, task, inc))

    def _finish(self, w: _Worker, task: _Task, inc: int) -> None:
        if not self._holds(w, task, inc):
            return
        rng = self.rng
        now = self.clock.now()
        if rng.random() < 0.75:
            command: cmd.Command = cmd.Complete(
                now=now, activity_id=task.activity_id, token=task.token, result=b"ok"
            )
        else:
            error_type = rng.choice(("Timeout", "Boom", "Fatal"))
            command = cmd.Fail(
                now=now,
                activity_id=task.activity_id,
                token=task.token,
                error_type=error_type,
                message=f"{error_type.lower()} in {task.activity_id}",
                retryable=rng.random() < 0.9,
            )
        # The worker is done with it once it reports, whatever the answer.
        w.tasks.pop(task.activity_id, None)
        self._send(command)
        self._drop(w, task)

    def _exit(self, w: _Worker) -> None:
        """A drained worker leaves; it may join again later."""
        w.up, w.exited, w.draining = False, True, False
        w.incarnation += 1
        w.tasks.clear()
        if self.rng.random() < 0.7:
            self._at(self.rng.uniform(5.0, 30.0), lambda: self._boot_worker(w))
        else:
            self._new_worker(self.rng.uniform(5.0, 30.0))  # The autoscaler replaces it.

    # ---------------------------------------------------------------- faults

    def _fault(self) -> None:
        rng = self.rng
        self._at(rng.expovariate(1 / FAULT_MEAN_S), self._fault)
        kinds: list[tuple[str, Callable[[], None], float]] = [
            ("crash", self._crash, 3.0),
            ("gap", self._heartbeat_gap, 2.0),
            ("slow", self._slow_renewals, 1.5),
            ("shutdown", self._shutdown, 1.0),
            ("host", self._host_failure, 0.6),
            ("cancel", self._cancel, 2.5),
            ("restart", self._restart, 0.7),
            ("reconfigure", self._reconfigure, 0.5),
        ]
        _name, action, _weight = rng.choices(kinds, weights=[k[2] for k in kinds])[0]
        action()

    def _up_workers(self) -> list[_Worker]:
        return [w for w in self.workers.values() if w.up]

    def _crash_one(self, w: _Worker) -> None:
        w.ghosts = [(t.activity_id, t.token) for t in w.tasks.values()]
        w.up = False
        w.incarnation += 1
        w.tasks.clear()
        self.counts["crashes"] += 1
        if self.rng.random() < 0.85:
            self._at(self.rng.uniform(1.0, 40.0), lambda: self._revive(w))
        else:
            self._new_worker(self.rng.uniform(5.0, 30.0))  # The autoscaler replaces it.

    def _crash(self) -> None:
        up = self._up_workers()
        if len(up) > 1:
            self._crash_one(self.rng.choice(up))

    def _revive(self, w: _Worker) -> None:
        if w.up:
            return
        self.counts["revivals"] += 1
        self._boot_worker(w)
        rng = self.rng
        for aid, token in w.ghosts[: rng.randint(1, 3)]:
            self._at(rng.uniform(0.0, 2.0), partial(self._stale_actor, w, aid, token))
        w.ghosts = []

    def _stale_actor(self, w: _Worker, aid: str, token: int) -> None:
        """A zombie thread of the dead incarnation reports with its old token."""
        now = self.clock.now()
        self.counts["stale_attempts"] += 1
        roll = self.rng.random()
        command: cmd.Command
        if roll < 0.6:
            command = cmd.Complete(now=now, activity_id=aid, token=token, result=b"zombie")
        elif roll < 0.8:
            command = cmd.Fail(now=now, activity_id=aid, token=token, error_type="Zombie")
        else:
            command = cmd.RenewLease(now=now, activity_id=aid, token=token)
        self._send(command)

    def _reconfigure(self) -> None:
        """A worker registers again with other concurrency and capabilities (a redeploy)."""
        up = [w for w in self._up_workers() if not w.draining]
        if not up:
            return
        rng = self.rng
        w = rng.choice(up)
        w.info = msgspec.structs.replace(
            w.info,
            max_concurrency=rng.randint(1, 4),
            capabilities=frozenset(c for c in _CAPABILITIES if rng.random() < 0.4),
        )
        self.counts["reconfigurations"] += 1
        self._register(w)

    def _heartbeat_gap(self) -> None:
        up = self._up_workers()
        if up:
            w = self.rng.choice(up)
            span = w.info.heartbeat_interval_s * self.config.heartbeat_misses_max
            w.hb_gap_until = self.clock.now() + span * self.rng.uniform(0.3, 1.6)
            self.counts["heartbeat_gaps"] += 1

    def _slow_renewals(self) -> None:
        up = self._up_workers()
        if up:
            w = self.rng.choice(up)
            w.slow_renew_until = self.clock.now() + self.rng.uniform(10.0, 60.0)
            self.counts["slow_renewals"] += 1

    def _shutdown(self) -> None:
        candidates = [w for w in self._up_workers() if not w.draining]
        if len(candidates) < 2:
            return
        w = self.rng.choice(candidates)
        result = self._send(cmd.ShutdownWorker(now=self.clock.now(), worker_id=w.wid))
        if isinstance(result, WfError):
            self._not_active(w)
            return
        self.counts["shutdowns"] += 1
        w.draining = True
        if not w.tasks:
            self._exit(w)

    def _host_failure(self) -> None:
        hosts = sorted({w.info.hostname for w in self.workers.values()})
        host = self.rng.choice(hosts)
        ids = tuple(
            sorted(w.wid for w in self.workers.values() if w.info.hostname == host and w.known)
        )
        for wid in ids:
            if self.workers[wid].up:
                self._crash_one(self.workers[wid])
        self.counts["host_failures"] += 1
        self._send(cmd.WorkersLost(now=self.clock.now(), worker_ids=ids))

    def _cancel(self) -> None:
        if self.open:
            aid = self.rng.choice(list(self.open))
            self._send(cmd.Cancel(now=self.clock.now(), activity_id=aid, reason="user_cancelled"))

    def _restart(self) -> None:
        """Restart the scheduler: durable snapshot, JSON round trip, recovery."""
        if self.step >= self.steps:
            raise _Done
        now = self.clock.now()
        before = snapshot(self.core)
        data = msgspec.json.encode(before)
        decoded = msgspec.json.decode(data, type=CoreSnapshot)
        if decoded != before:
            raise self._violation("durable_snapshot", "the snapshot changed in a JSON round trip")
        try:
            if state_digest(restore(decoded)) != state_digest(self.core):
                raise self._violation("durable_snapshot", "restore(snapshot) differs from the core")
            self.step += 1
            self.counts["commands"] += 1
            self.last_command = cmd.Tick(now=now)
            core, outcome = recover(decoded, now)
        except InvariantViolation:
            raise
        except Exception as exc:
            raise self._violation("recovery", f"{type(exc).__name__}: {exc}") from exc
        self._close_segment()
        self.counts["restarts"] += 1
        self.core = core
        # Recovery is no command of the log: its decisions go to the digest only.
        restart_line = {"restart": self.counts["restarts"], "decisions": outcome.decisions}
        self._line(restart_line, in_segment=False)
        self._account(outcome)
        self._deliver(outcome)
        self._check(cmd.Tick(now=now), outcome, None)
        self._segment_start = snapshot(core)
        # The long polls died with the old process: every worker polls again.
        for w in self._up_workers():
            self._poll_soon(w)
        self._tick_at = None
        if self._tick_handle is not None:
            self.clock.cancel(self._tick_handle)
            self._tick_handle = None
        self._arm_tick()

    def _close_segment(self) -> None:
        self.segments.append(
            Segment(
                start=self._segment_start, commands=tuple(self._commands), lines=tuple(self._lines)
            )
        )
        self._commands = []
        self._lines = []


def simulate(
    seed: int, *, steps: int = STEPS_DEFAULT, config: SchedulerConfig | None = None
) -> SimulationResult:
    """Run the seeded simulation for ``steps`` commands (see the module docstring).

    Raises :class:`~wf.testing.invariants.InvariantViolation` with a
    reproduction command when an invariant breaks. With ``config`` the core
    runs with it instead of a configuration drawn from the seed.
    """
    return Simulation(seed, steps=steps, config=config).run()
