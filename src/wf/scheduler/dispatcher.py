"""The scheduler core: a deterministic state machine over commands (WF-005 §3–§23).

Theory of operation
-------------------
:class:`SchedulerCore` takes one :mod:`command <wf.scheduler.commands>` at a
time and returns an :class:`~wf.scheduler.outputs.Outcome`: the decisions
the shell must carry out and the records it must persist first. The core
never reads a clock (each command carries ``now``), never does I/O and never
uses randomness; ties are broken by sequence numbers. The same commands from
the same state therefore give the same outcomes, byte for byte.

Each handler validates everything first and mutates only once nothing can
fail, so a refused command (a typed :class:`~wf.errors.WfError`) leaves the
state exactly as it was.

The data walk: ``Submit`` creates activities (``READY``), which go dormant in
the timer heap (``DELAYED``) or into the ready queue (``QUEUED``). Workers
``Poll`` to announce demand (and how many grants they will start on receipt:
such a grant is its start too, ``LEASED`` then ``EXECUTING`` in one commit,
whether or not the activity may run again). After every command a *dispatch
pass* matches queued work to waiting workers: when one worker waits, it gets
the policy's best activity among its eligible lanes; when several wait, the
policy picks the best activity any of them may run and the load balancer
picks which of them gets it. Each grant is a ``LEASED`` transition with a
fresh fencing token. The worker reports ``StartActivity`` (``EXECUTING``)
unless the grant was its start, renews, and
finishes with ``Complete`` or ``Fail``; a failure is retried with backoff
(``DELAYED``) while its retry budget lasts. ``Cancel`` withdraws unfinished
work and reports ``ActivityCancelled`` with the cancel's origin. ``Tick``
fires due timers, expires lapsed leases, declares silent workers lost and
forgets workers departed longer than ``departed_worker_retention_s``. A
timer fires ``early_grant_s`` before its instant: a grant made before the
instant carries it as ``not_before``, and the worker starts the activity at
that instant on its own timer (a grant into a slot the poll starts on receipt
is committed as the start at once), so delayed work does not wait for the
dispatch hop, nor a start round trip, after its instant.

Lost work is requeued with its counters: a lease lost before the start is
simply requeued; an activity lost while ``EXECUTING`` is requeued only if
it is idempotent or its retry policy says ``restart_on_abandon``; otherwise
it fails with ``may_have_executed`` rather than silently running twice.
Requeues caused by lost workers count in ``infra_requeues``, never against
the retry budget.

Why one module of about a thousand lines: the handlers are one state machine
over one set of private structures (queue, leases, registry, ordering lines,
waiting workers), and ``_to``, the only place a state changes, must stay the
only one. The pieces with a life of their own are already modules (queue,
policies, leases, registry, timers, limits, backpressure, stealing).
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any, Final

import msgspec

from wf.errors import (
    AlreadyExists,
    Conflict,
    IllegalTransition,
    InvalidArgument,
    NotFound,
    WorkerNotActive,
)
from wf.scheduler import commands as cmd
from wf.scheduler.backpressure import (
    BackpressureConfig,
    BackpressureController,
    BackpressureLevel,
)
from wf.scheduler.config import SchedulerConfig
from wf.scheduler.lease import LeaseTable
from wf.scheduler.load_balancer import LoadBalancer, make_load_balancer
from wf.scheduler.metrics import CoreMetrics
from wf.scheduler.model import (
    DEFAULT_RETRY,
    LIVE_WORKER_STATUSES,
    TRANSITIONS,
    Activity,
    ActivityDefaults,
    ActivityState,
    Priority,
    RetryPolicy,
    TransitionReason,
    WorkerState,
    WorkerStatus,
)
from wf.scheduler.outputs import (
    ActivityCancelled,
    ActivityCompleted,
    ActivityFailed,
    ActivitySubmitted,
    BackpressureChanged,
    Decision,
    LeaseGranted,
    LeaseRenewed,
    LeaseRevoked,
    Outcome,
    Record,
    RetryScheduled,
    Transition,
    WorkerFailed,
    WorkerRemoved,
    WorkerUpserted,
)
from wf.scheduler.policies import SchedulingPolicy, make_policy
from wf.scheduler.queue import Lane, ReadyQueue, WorkerSignature, worker_signature
from wf.scheduler.rate_limiter import RateLimitConfig, RateLimiter
from wf.scheduler.stealing import choose_steal
from wf.scheduler.timer import DelayedTimers, resolve_not_before
from wf.scheduler.worker_registry import (
    WorkerRegistry,
    declared_start_timeouts,
    declares_run_limits,
)

S = ActivityState
R = TransitionReason
_QUEUED: Final = S.QUEUED
_LEASED: Final = S.LEASED
_EXECUTING: Final = S.EXECUTING
_ACTIVE: Final = WorkerStatus.ACTIVE

_PRIORITY_VALUES: Final = frozenset(int(p) for p in Priority)

FINISHED_MEMORY_MAX: Final = 100_000
"""Terminal activities remembered (so late calls get StaleLease, not NotFound)."""
ID_LENGTH_MAX: Final = 256
"""Longest activity or worker id accepted."""
HELD_LEASES_MAX: Final = 10_000
"""Most held leases one registration may list (a worker's concurrency bound)."""
START_AHEAD_MAX_S: Final = 0.1
"""An early grant is committed as its start only when its instant is at most this far
ahead (the default ``early_grant_s``, 0.05 s, always is): it bounds the time a started
activity waits on its worker, so a graceful shutdown waits for it at most this long,
and a worker lost meanwhile costs a ``may_have_executed`` only in this window. A grant
further ahead stays ``LEASED`` and its worker reports the start at the instant."""


class SchedulerCore:
    """The WF-005 scheduler as a pure state machine; see the module docstring."""

    def __init__(self, config: SchedulerConfig | None = None) -> None:
        self.config = config = config or SchedulerConfig()
        self.seq = 0
        """Creation sequence of activities (deterministic tie-break)."""
        self.activities: dict[str, Activity] = {}
        """Every unfinished activity, by id."""
        # An OrderedDict, because evicting the oldest entry of a plain dict leaves
        # dead slots that every later next(iter(...)) scans past.
        self.finished: OrderedDict[str, ActivityState] = OrderedDict()
        """Recently finished activity ids and their terminal state (bounded)."""
        self.queue = ReadyQueue(config.partition_by)
        self.policies: dict[str, SchedulingPolicy] = {
            name: make_policy(pc.policy, pc.options) for name, pc in config.policies.items()
        }
        self._group_items = list(self.policies.items())
        self.leases = LeaseTable(config.lease_ttl_s)
        self._start_any = config.start_on_grant != "may_restart"
        self.registry = WorkerRegistry(
            config.heartbeat_misses_max, config.departed_worker_retention_s
        )
        self.balancer: LoadBalancer = make_load_balancer(config.balancer)
        self.limiter = RateLimiter(config.limits)
        self._limited = config.limits != RateLimitConfig()
        self.backpressure = BackpressureController(config.backpressure)
        self._bp_enabled = config.backpressure != BackpressureConfig()
        self.timers = DelayedTimers()
        self._start_declared: dict[str, float] = {}
        self._declares_run_limits = False
        self._start_declared_generation = -1
        self.start_deadlines: list[tuple[float, int, str, float]] = []
        """Heap of ``(deadline, seq, activity id, queued_at)``: when an activity queued at
        ``queued_at`` with a ``schedule_to_start_s`` times out if still queued since
        then. Entries of activities that were leased (or queued again) meanwhile are
        stale and dropped when they come up; recovery rebuilds the heap."""
        self.run_deadlines: list[tuple[float, int, str, float]] = []
        """Heap of ``(deadline, token, activity id, limit)``: when the attempt holding
        lease ``token`` exceeds its ``start_to_close_s`` (``limit``). Entries of
        attempts that ended meanwhile are stale and dropped when they come up."""
        self.key_lines: dict[str, deque[Activity]] = {}
        """Ordering key -> every unfinished activity with that key, in creation order.

        Only the line's head may be in the ready queue or in flight; the others
        wait (``QUEUED`` without a queue entry, or ``DELAYED``). The lines are a
        pure function of the activities, so recovery rebuilds them exactly."""
        self.waiting: dict[str, WorkerState] = {}
        """Workers with outstanding poll demand."""
        self._signatures: dict[str, WorkerSignature] = {}
        self.capacity = 0
        """Sum of max_concurrency over active workers."""
        self.running = 0
        """Leases currently held (leased or executing)."""
        self._decisions: list[Decision] = []
        self._records: list[Record] = []
        self.metrics = CoreMetrics()
        """Counters for observability (WF-005 §25)."""
        self.log: list[cmd.Command] | None = None
        """When a list, every command handed to :meth:`handle` is appended (the input log)."""

    # ------------------------------------------------------------------ entry

    def handle(self, command: cmd.Command) -> Outcome:
        """Apply one command; returns decisions and records, or raises a WfError unchanged."""
        decisions: list[Decision] = []
        records: list[Record] = []
        self._decisions = decisions
        self._records = records
        if self.log is not None:
            # Refused commands are logged too: a refusal is part of the decision stream.
            self.log.append(command)
        _HANDLERS[type(command)](self, command)
        return Outcome(decisions=decisions, records=records)

    def next_wake_at(self, now: float) -> float | None:
        """The earliest instant at which a Tick would have something to do."""
        due = self.timers.next_due_at()
        candidates = [
            None if due is None else due - self.config.early_grant_s,
            self.leases.next_expiry_at(),
            self.registry.next_deadline_at(),
            self.registry.next_purge_at(),
        ]
        if self.start_deadlines:
            candidates.append(self.start_deadlines[0][0])
        if self.run_deadlines:
            candidates.append(self.run_deadlines[0][0])
        if self.waiting and self.queue.depth:
            candidates.append(self._blocked_until(now))
        times = [t for t in candidates if t is not None]
        return min(times) if times else None

    # ------------------------------------------------------------ activities

    def _submit(self, c: cmd.Submit) -> None:
        now = c.now
        batch = c.activities
        if not batch:
            raise InvalidArgument("submit needs at least one activity", field="activities")
        if len(batch) > self.config.submit_batch_max:
            raise InvalidArgument(
                f"submit batch exceeds {self.config.submit_batch_max}",
                field="activities",
                size=len(batch),
            )
        seen: set[str] = set()
        for spec in batch:
            self._validate_activity(spec, seen)
        # Resolve delay specs before anything changes: a bad spec refuses the batch.
        if any(spec.delay is not None for spec in batch):
            batch = tuple(self._resolve_delay(spec, now) for spec in batch)
        if any(spec.new_workflow for spec in batch):
            self.backpressure.admit_new_workflow(now)
        for spec in batch:
            self._accept(spec, now)
        self._after(now)

    @staticmethod
    def _resolve_delay(spec: Activity, now: float) -> Activity:
        if spec.delay is None:
            return spec
        due = resolve_not_before(spec.delay, now)
        if spec.not_before is not None:
            due = max(due, spec.not_before)
        return msgspec.structs.replace(spec, not_before=due)

    def _validate_activity(self, a: Activity, seen: set[str]) -> None:
        aid = a.activity_id
        if not aid or len(aid) > ID_LENGTH_MAX:
            raise InvalidArgument("activity_id must be 1..256 characters", field="activity_id")
        if aid in seen or aid in self.activities or aid in self.finished:
            raise AlreadyExists(f"activity {aid!r} already exists", activity_id=aid)
        seen.add(aid)
        # Wire input is validated by msgspec; in-process callers may pass raw ints.
        if type(a.priority) is not Priority and a.priority not in _PRIORITY_VALUES:
            raise InvalidArgument(
                "priority must be 0 (critical) .. 3 (low)", activity_id=aid, field="priority"
            )
        if not a.activity_type:
            raise InvalidArgument("activity_type must not be empty", activity_id=aid)
        group = a.policy or self.config.default_policy
        if group not in self.policies:
            raise InvalidArgument(
                f"unknown policy group {group!r}", activity_id=aid, field="policy"
            )
        if a.deadline is not None and not math.isfinite(a.deadline):
            raise InvalidArgument("deadline must be finite", activity_id=aid, field="deadline")
        if a.not_before is not None and not math.isfinite(a.not_before):
            raise InvalidArgument("not_before must be finite", activity_id=aid, field="not_before")
        for name, limit in (
            ("schedule_to_start_s", a.schedule_to_start_s),
            ("start_to_close_s", a.start_to_close_s),
        ):
            if limit is not None and not (math.isfinite(limit) and limit > 0):
                raise InvalidArgument(
                    f"{name} must be a positive number of seconds", activity_id=aid, field=name
                )
        r = a.retry
        if r is DEFAULT_RETRY:
            return  # The shared default is valid; most submissions use it.
        if not all(
            math.isfinite(v) for v in (r.initial_backoff_s, r.backoff_coefficient, r.max_backoff_s)
        ):
            raise InvalidArgument("invalid retry policy", activity_id=aid, field="retry")
        if r.max_attempts < 1 or r.initial_backoff_s < 0 or r.backoff_coefficient < 1:
            raise InvalidArgument("invalid retry policy", activity_id=aid, field="retry")
        if r.max_backoff_s < 0 or not 0 <= r.jitter_fraction <= 1:
            raise InvalidArgument("invalid retry policy", activity_id=aid, field="retry")

    def _accept(self, spec: Activity, now: float) -> None:
        self.seq += 1
        retry = spec.retry
        if retry is not DEFAULT_RETRY and retry == DEFAULT_RETRY:
            # The shared object, as the store keeps it: an equal copy would encode
            # differently (omit_defaults compares by identity) and change the digest.
            retry = DEFAULT_RETRY
        start_s = spec.schedule_to_start_s
        if start_s is None:
            start_s = self._declared_start_s(spec.activity_type)
        a = msgspec.structs.replace(
            spec,
            retry=retry,
            schedule_to_start_s=start_s,
            state=S.READY,
            seq=self.seq,
            attempt=0,
            failures=0,
            infra_requeues=0,
            steals=0,
            token=0,
            worker_id=None,
            lease_expires_at=0.0,
            submitted_at=now,
            queued_at=0.0,
            queue_ticket=0,
            last_error=None,
        )
        self.activities[a.activity_id] = a
        if a.ordering_key is not None:
            self.key_lines.setdefault(a.ordering_key, deque()).append(a)
        self.metrics.submitted += 1
        # A copy: the live activity keeps changing after the record is handed out.
        self._records.append(ActivitySubmitted(at=now, activity=msgspec.structs.replace(a)))
        if a.not_before is not None and a.not_before > now:
            self._to(a, S.DELAYED, R.DELAYED, now, not_before=a.not_before)
            self.timers.add(a.activity_id, a.not_before, a.seq)
        else:
            self._enqueue(a, R.SUBMITTED, now)

    def _to(
        self,
        a: Activity,
        target: ActivityState,
        reason: str,
        now: float,
        *,
        not_before: float | None = None,
        error: str | None = None,
        result: bytes | None = None,
        stack_trace: str | None = None,
    ) -> None:
        """The one place an activity changes state: table check, then a record.

        ``reason`` is a :class:`TransitionReason`, or the record's text where one
        carries more (a cancel's own text, ``stolen_from:<victim>``).

        Invariant kept here: ``worker_id`` and ``lease_expires_at`` describe the
        current lease, so they are cleared when the activity leaves the held
        states (the record still names the worker involved); a ``DELAYED``
        activity's ``not_before`` is its due instant.
        """
        current = a.state
        if target not in TRANSITIONS[current]:
            raise IllegalTransition(
                f"activity {a.activity_id!r} cannot go from {current.value} to {target.value}",
                activity_id=a.activity_id,
                current=current.value,
                target=target.value,
            )
        assert result is None or target is S.COMPLETED, "only a completion carries a result"
        a.state = target
        self._records.append(
            Transition(
                at=now,
                activity_id=a.activity_id,
                from_state=current,
                to_state=target,
                reason=reason,
                attempt=a.attempt,
                failures=a.failures,
                infra_requeues=a.infra_requeues,
                steals=a.steals,
                token=a.token,
                worker_id=a.worker_id,
                lease_expires_at=a.lease_expires_at,
                not_before=not_before,
                error=error,
                result=result,
                stack_trace=stack_trace,
            )
        )
        if target is not _LEASED and target is not _EXECUTING:
            a.worker_id = None
            a.lease_expires_at = 0.0
        if not_before is not None:
            a.not_before = not_before

    def _group(self, a: Activity) -> str:
        return a.policy or self.config.default_policy

    def _enqueue(
        self,
        a: Activity,
        reason: TransitionReason,
        now: float,
        error: str | None = None,
        stack_trace: str | None = None,
    ) -> None:
        """Into the ready queue, or behind the in-flight activity of its ordering key.

        Activities sharing an ordering key start strictly in creation order: a
        later one waits while an earlier one is unfinished, even a delayed one.
        """
        self._to(a, _QUEUED, reason, now, error=error, stack_trace=stack_trace)
        a.queued_at = now
        if a.schedule_to_start_s is not None:
            self.watch_start(a)
        key = a.ordering_key
        if key is not None and self.key_lines[key][0] is not a:
            return
        self._push(a)

    def _push(self, a: Activity) -> None:
        group = self._group(a)
        lane = self.queue.lane_for(a, group)
        self.queue.push(lane, a, self.policies[group].rank(a))

    def _finish(self, a: Activity) -> None:
        """Forget a terminal activity and let the next of its ordering key go."""
        del self.activities[a.activity_id]
        finished = self.finished
        finished[a.activity_id] = a.state
        if len(finished) > FINISHED_MEMORY_MAX:
            finished.popitem(last=False)
        key = a.ordering_key
        if key is not None:
            line = self.key_lines[key]
            if line[0] is a:
                line.popleft()
                if line and line[0].state is _QUEUED:
                    self._push(line[0])
            else:
                line.remove(a)  # Only cancellation finishes a waiting member.
            if not line:
                del self.key_lines[key]

    def _get(self, activity_id: str) -> Activity:
        a = self.activities.get(activity_id)
        if a is None:
            state = self.finished.get(activity_id)
            if state is not None:
                raise Conflict(
                    f"activity {activity_id!r} already finished ({state.value})",
                    activity_id=activity_id,
                    state=state.value,
                )
            raise NotFound(f"unknown activity {activity_id!r}", activity_id=activity_id)
        return a

    def _get_fenced(self, activity_id: str, token: int, now: float) -> Activity:
        """The activity if ``token`` is its live lease; StaleLease/LeaseExpired otherwise."""
        a = self.activities.get(activity_id)
        if a is None:
            if activity_id in self.finished:
                from wf.errors import StaleLease

                raise StaleLease(
                    f"activity {activity_id!r} already finished; token {token} is stale",
                    activity_id=activity_id,
                    token=token,
                )
            raise NotFound(f"unknown activity {activity_id!r}", activity_id=activity_id)
        self.leases.check(a, token, now)
        return a

    def _cancel(self, c: cmd.Cancel) -> None:
        now = c.now
        a = self._get(c.activity_id)
        self._now = now
        state = a.state
        if state is _QUEUED:
            self._unqueue(a)
        elif state is S.DELAYED:
            self.timers.cancel(a.activity_id)
        elif state is _LEASED or state is _EXECUTING:
            self._revoke(a, c.reason)
        self._to(a, S.CANCELLED, c.reason, now)
        self.metrics.cancelled += 1
        self._decisions.append(
            ActivityCancelled(
                activity_id=a.activity_id,
                workflow_id=a.workflow_id,
                correlation_id=a.correlation_id,
                origin=c.origin,
                reason=c.reason,
            )
        )
        self._finish(a)
        self._after(now)

    def watch_start(self, a: Activity) -> None:
        """Arm the schedule-to-start deadline of a queued activity (recovery too)."""
        assert a.schedule_to_start_s is not None
        entry = (a.queued_at + a.schedule_to_start_s, a.seq, a.activity_id, a.queued_at)
        heapq.heappush(self.start_deadlines, entry)

    def _start_timeouts(self, now: float) -> None:
        """Fail the attempt of every activity queued past its ``schedule_to_start_s``:
        retryable, so it is retried by its policy (``queued -> delayed``), or fails for
        good once that was its last attempt (``queued -> failed``)."""
        heap = self.start_deadlines
        while heap and heap[0][0] <= now:
            _, _, activity_id, queued_at = heapq.heappop(heap)
            a = self.activities.get(activity_id)
            if a is None or a.state is not _QUEUED or a.queued_at != queued_at:
                continue  # leased, finished or queued again since: a stale entry
            self._unqueue(a)
            self._attempt_failed(
                a,
                self._retry_of(a, None),
                now,
                "ScheduleToStartTimeout",
                f"not started within {a.schedule_to_start_s:g} s of being queued",
                R.SCHEDULE_TO_START_TIMEOUT,
                wait_at_least_a_tick=True,
            )

    def _run_limit(self, a: Activity) -> float | None:
        """The attempt's ``start_to_close_s``: the submission's, else the holder's."""
        limit = a.start_to_close_s
        if limit is None:
            declared = self._declared(a, a.worker_id)
            if declared is not None:
                limit = declared.start_to_close_s
        return limit

    def _watch_run(self, a: Activity, now: float) -> None:
        """Arm the execution timeout of an attempt that starts at ``now`` (if it has one)."""
        if a.start_to_close_s is None:
            self._refresh_declared()
            if not self._declares_run_limits:
                return  # the hot path: nothing to bound
        limit = self._run_limit(a)
        if limit is not None:
            heapq.heappush(self.run_deadlines, (now + limit, a.token, a.activity_id, limit))

    def _run_timeouts(self, now: float) -> None:
        """Time out every attempt executing past its ``start_to_close_s``: the lease is
        revoked (its holder cancels the code) and the attempt counts as failed,
        retried by the policy in force for it or failed for good. Its outcome is
        unknown (the code may have had effects, and code that ignores cancellation
        may still run), so a final failure says ``may_have_executed``."""
        heap = self.run_deadlines
        while heap and heap[0][0] <= now:
            _, token, activity_id, limit = heapq.heappop(heap)
            a = self.activities.get(activity_id)
            if a is None or a.token != token or a.state is not _EXECUTING:
                continue  # the attempt ended (or its lease did) since: a stale entry
            retry = self._retry_of(a, a.worker_id)
            self._revoke(a, R.START_TO_CLOSE_TIMEOUT)
            self._attempt_failed(
                a,
                retry,
                now,
                "StartToCloseTimeout",
                f"not finished within {limit:g} s of starting",
                R.START_TO_CLOSE_TIMEOUT,
                may_have_executed=True,
            )

    def _watch_runs(self, now: float) -> None:
        """Arm the execution timeout of every executing attempt that has none armed
        (after recovery from the store, which keeps no start instant: the limit then
        counts from ``now``, the recovery, as a recovered worker's heartbeat grace does)."""
        armed = {token for _, token, _, _ in self.run_deadlines}
        for worker in self.registry.workers.values():
            for activity_id, token in worker.leases.items():
                a = self.activities[activity_id]
                if a.state is _EXECUTING and token not in armed:
                    limit = self._run_limit(a)
                    if limit is not None:
                        heapq.heappush(self.run_deadlines, (now + limit, token, activity_id, limit))

    def _unqueue(self, a: Activity) -> None:
        """Take a QUEUED activity out of its lane."""
        # A waiting member of an ordering line has no queue entry; _finish
        # takes it out of its line.
        if a.queue_ticket:
            self.queue.discard(self.queue.lane_for(a, self._group(a)), a)

    # ----------------------------------------------------------------- leases

    def _start(self, c: cmd.StartActivity) -> None:
        a = self._get_fenced(c.activity_id, c.token, c.now)
        if a.state is not _LEASED:
            raise IllegalTransition(
                f"activity {a.activity_id!r} already started", activity_id=a.activity_id
            )
        a.attempt += 1
        self._to(a, _EXECUTING, R.STARTED, c.now)
        self._watch_run(a, c.now)

    def _renew(self, c: cmd.RenewLease) -> None:
        a = self._get_fenced(c.activity_id, c.token, c.now)
        expires_at = self.leases.renew(a, c.token, c.now)
        self.metrics.lease_renewals += 1
        self._records.append(
            LeaseRenewed(
                at=c.now,
                activity_id=a.activity_id,
                token=c.token,
                expires_at=expires_at,
                details=c.details,
            )
        )

    def _get_executing(
        self, activity_id: str, token: int, now: float, unreported_start: bool = False
    ) -> Activity:
        """The fenced activity, which must have been started (results need a start).

        With ``unreported_start`` a still leased activity that may run again is
        started here (the caller then finishes it in the same command)."""
        a = self._get_fenced(activity_id, token, now)
        if unreported_start and a.state is _LEASED and self._may_restart(a, a.worker_id):
            a.attempt += 1
            self._to(a, _EXECUTING, R.STARTED, now)
        if a.state is not _EXECUTING:
            raise IllegalTransition(
                f"activity {a.activity_id!r} was never started", activity_id=a.activity_id
            )
        self._now = now
        return a

    def _complete(self, c: cmd.Complete) -> None:
        now = c.now
        a = self._get_executing(c.activity_id, c.token, now, c.unreported_start)
        self._release(a)
        self._to(a, S.COMPLETED, R.COMPLETED, now, result=c.result)
        self.metrics.completed += 1
        self._decisions.append(
            ActivityCompleted(
                activity_id=a.activity_id,
                workflow_id=a.workflow_id,
                correlation_id=a.correlation_id,
                attempt=a.attempt,
                result=c.result,
            )
        )
        self._finish(a)
        self._after(now)

    def _fail(self, c: cmd.Fail) -> None:
        now = c.now
        a = self._get_executing(c.activity_id, c.token, now, c.unreported_start)
        retry = self._retry_of(a, a.worker_id)
        self._release(a)
        self._attempt_failed(
            a,
            retry,
            now,
            c.error_type,
            c.message,
            R.RETRY,
            retryable=c.retryable,
            stack_trace=c.stack_trace or None,
        )
        self._after(now)

    def _attempt_failed(
        self,
        a: Activity,
        retry: RetryPolicy,
        now: float,
        error_type: str,
        message: str,
        retry_reason: TransitionReason,
        *,
        retryable: bool = True,
        may_have_executed: bool = False,
        stack_trace: str | None = None,
        wait_at_least_a_tick: bool = False,
    ) -> None:
        """An attempt failed (the activity holds no lease any more): fail it for good
        (not retryable, or its last attempt), or schedule the next by ``retry``.

        The next attempt is queued at once when its delay is 0, unless
        ``wait_at_least_a_tick`` (a queued activity cannot be queued again: it goes
        through ``delayed``, due at once)."""
        a.failures += 1
        error = f"{error_type}: {message}" if message else error_type
        a.last_error = error
        final: TransitionReason | None = None
        if not retryable or error_type in retry.non_retryable_errors:
            final = R.NON_RETRYABLE
        elif a.failures >= retry.max_attempts:
            final = R.RETRIES_EXHAUSTED
        if final is not None:
            self._fail_for_good(
                a, final, now, error_type, message, may_have_executed, stack_trace=stack_trace
            )
            return
        delay = retry_delay_s(a, retry)
        due = now + delay
        if delay > 0 or wait_at_least_a_tick:
            self._to(
                a,
                S.DELAYED,
                retry_reason,
                now,
                not_before=due,
                error=error,
                stack_trace=stack_trace,
            )
            self.timers.add(a.activity_id, due, a.seq)
        else:
            self._enqueue(a, retry_reason, now, error, stack_trace)
        self.metrics.retries += 1
        self._decisions.append(
            RetryScheduled(activity_id=a.activity_id, attempt=a.attempt + 1, not_before=due)
        )

    def _fail_for_good(
        self,
        a: Activity,
        reason: TransitionReason,
        now: float,
        error_type: str,
        message: str,
        may_have_executed: bool,
        *,
        stack_trace: str | None = None,
    ) -> None:
        self._to(a, S.FAILED, reason, now, error=a.last_error, stack_trace=stack_trace)
        self.metrics.failed += 1
        self._decisions.append(
            ActivityFailed(
                activity_id=a.activity_id,
                workflow_id=a.workflow_id,
                correlation_id=a.correlation_id,
                attempt=a.attempt,
                reason=reason,
                error_type=error_type,
                message=message,
                may_have_executed=may_have_executed,
            )
        )
        self._finish(a)

    def _release(self, a: Activity) -> None:
        """The activity's lease ends: free the worker's slot and the limits."""
        worker_id = a.worker_id
        assert worker_id is not None
        worker = self.registry.workers[worker_id]
        del worker.leases[a.activity_id]
        self.running -= 1
        if self._limited:
            self.limiter.release(a.tenant)
        self.policies[self._group(a)].on_release(a)
        if worker.status is WorkerStatus.DRAINING and not worker.leases:
            self.registry.depart(worker, WorkerStatus.GONE, self._now)
            self._worker_record(worker, self._now)

    def _declared(self, a: Activity, worker_id: str | None) -> ActivityDefaults | None:
        """What the lease holder declares for the activity's type, if anything."""
        worker = self.registry.workers.get(worker_id) if worker_id is not None else None
        declared = worker.info.declared if worker is not None else None
        return declared.get(a.activity_type) if declared else None

    def _declared_start_s(self, activity_type: str) -> float | None:
        """The shortest schedule-to-start timeout a live worker serving the type
        declares, if any. Written into the activity when it is accepted, so the
        record says what bounds its waits and recovery reads it back, whatever the
        fleet looks like by then (docs/server.md, "Declared defaults")."""
        self._refresh_declared()
        return self._start_declared.get(activity_type)

    def _refresh_declared(self) -> None:
        """Bring what is derived from the workers' declarations up to date."""
        registry = self.registry
        if self._start_declared_generation != registry.generation:
            workers = registry.workers.values()
            self._start_declared = declared_start_timeouts(workers)
            self._declares_run_limits = declares_run_limits(workers)
            self._start_declared_generation = registry.generation

    def _retry_of(self, a: Activity, worker_id: str | None) -> RetryPolicy:
        """The retry policy in force for the attempt ``worker_id`` holds: the
        submission's, unless it left the default and the holder declares one."""
        retry = a.retry
        if retry is DEFAULT_RETRY:
            declared = self._declared(a, worker_id)
            if declared is not None and declared.retry is not None:
                return declared.retry
        return retry

    def _may_restart(self, a: Activity, worker_id: str | None) -> bool:
        """Whether the attempt ``worker_id`` holds may run again if lost: idempotent
        (as submitted, else as the holder declares) or ``restart_on_abandon``.

        Resolved against the holder because its code is what runs: two workers that
        declare a type differently each have their own declaration apply to the leases
        they hold, a pure function of the state, so replay and recovery agree."""
        idempotent = a.idempotent
        if idempotent is None or a.retry is DEFAULT_RETRY:
            declared = self._declared(a, worker_id)
            if declared is not None:
                if idempotent is None:
                    idempotent = declared.idempotent
                if a.retry is DEFAULT_RETRY and declared.retry is not None:
                    return bool(idempotent) or declared.retry.restart_on_abandon
        return bool(idempotent) or a.retry.restart_on_abandon

    def _revoke(self, a: Activity, reason: str) -> None:
        """End the activity's lease and tell its holder (who may still be running it)."""
        worker_id = a.worker_id
        assert worker_id is not None
        self._decisions.append(
            LeaseRevoked(
                worker_id=worker_id, activity_id=a.activity_id, token=a.token, reason=reason
            )
        )
        self._release(a)

    def _abandon(
        self, a: Activity, reason: TransitionReason, now: float, *, count: bool = True
    ) -> None:
        """The lease is lost: requeue, or fail closed if it may have run (see module doc)."""
        executing = a.state is _EXECUTING
        may_restart = executing and self._may_restart(a, a.worker_id)
        self._revoke(a, reason)
        if executing and not may_restart:
            a.last_error = f"lease lost while executing ({reason}); external effects may exist"
            self._fail_for_good(a, R.MAY_HAVE_EXECUTED, now, "LeaseLost", a.last_error, True)
            return
        if count:
            a.infra_requeues += 1
            if a.infra_requeues > self.config.infra_requeues_max:
                a.last_error = f"requeued {a.infra_requeues - 1} times after lost leases"
                self._fail_for_good(
                    a, R.INFRA_REQUEUES_EXHAUSTED, now, "LeaseLost", a.last_error, executing
                )
                return
        self.metrics.requeued += 1
        self._enqueue(a, reason, now)

    # ---------------------------------------------------------------- workers

    def _worker_record(self, worker: WorkerState, now: float) -> None:
        self._records.append(
            WorkerUpserted(
                at=now,
                info=worker.info,
                seq=worker.seq,
                status=worker.status,
                registered_at=worker.registered_at,
            )
        )

    def _register_worker(self, c: cmd.RegisterWorker) -> None:
        now = c.now
        self._now = now
        if c.held is not None:
            self._check_held(c.held)
        old = self.registry.workers.get(c.info.worker_id)
        was_active = old is not None and old.status is _ACTIVE
        old_capacity = old.info.max_concurrency if was_active and old is not None else 0
        worker, changed = self.registry.register(c.info, now)
        self._signatures[worker.info.worker_id] = worker_signature(worker.info)
        new_capacity = worker.info.max_concurrency if worker.status is _ACTIVE else 0
        self.capacity += new_capacity - old_capacity
        if worker.demand > worker.free_slots:
            # A lowered max_concurrency shrinks an outstanding poll's demand too.
            worker.demand = max(0, worker.free_slots)
            if not worker.demand:
                self.waiting.pop(worker.info.worker_id, None)
        if changed:
            self._worker_record(worker, now)
        if c.held is not None:
            self._reconcile_held(worker, c.held, now)
        self._after(now)

    def _check_held(self, held: tuple[tuple[str, int], ...]) -> None:
        """Refuse a malformed held-lease list before anything changes."""
        if len(held) > HELD_LEASES_MAX:
            raise InvalidArgument(
                f"a registration lists at most {HELD_LEASES_MAX} held leases",
                field="held",
                size=len(held),
            )
        for pair in held:
            if (
                type(pair) is not tuple
                or len(pair) != 2
                or type(pair[0]) is not str
                or type(pair[1]) is not int
                or pair[1] < 0
            ):
                raise InvalidArgument("held leases are (activity_id, token) pairs", field="held")

    def _reconcile_held(
        self, worker: WorkerState, held: tuple[tuple[str, int], ...], now: float
    ) -> None:
        """Keep (with a fresh grace) the worker's leases it lists; abandon the others."""
        listed = set(held)
        until = now + self.leases.ttl_s
        for aid, token in list(worker.leases.items()):
            a = self.activities[aid]
            if (aid, token) in listed:
                self._grace(a, until, now)
            else:
                self._abandon(a, R.LEASE_ABANDONED, now)

    def _grace(self, a: Activity, until: float, now: float) -> None:
        """A held lease's expiry becomes at least ``until``, recorded as a renewal."""
        if self.leases.extend(a, until):
            self._records.append(
                LeaseRenewed(at=now, activity_id=a.activity_id, token=a.token, expires_at=until)
            )

    def _heartbeat(self, c: cmd.Heartbeat) -> None:
        worker = self.registry.get(c.worker_id)
        if worker.status not in LIVE_WORKER_STATUSES:
            raise WorkerNotActive(
                f"worker {c.worker_id!r} is {worker.status.value}; register again",
                worker_id=c.worker_id,
                status=worker.status.value,
            )
        self.registry.heartbeat(c.worker_id, c.stats, c.now)

    def _active_worker(self, worker_id: str) -> WorkerState:
        worker = self.registry.get(worker_id)
        if worker.status is not _ACTIVE:
            raise WorkerNotActive(
                f"worker {worker_id!r} is {worker.status.value}",
                worker_id=worker_id,
                status=worker.status.value,
            )
        return worker

    def _poll(self, c: cmd.Poll) -> None:
        if not 1 <= c.max_items <= self.config.poll_items_max:
            raise InvalidArgument(
                f"max_items must be 1..{self.config.poll_items_max}", field="max_items"
            )
        if not 0 <= c.start <= c.max_items:
            raise InvalidArgument(f"start must be 0..max_items ({c.max_items})", field="start")
        worker = self._active_worker(c.worker_id)
        self.registry.touch(worker, c.now)
        # free_slots is negative after a re-registration lowered max_concurrency.
        worker.demand = max(0, min(c.max_items, worker.free_slots))
        worker.start_demand = min(c.start, worker.demand)
        if worker.demand > 0:
            self.waiting[worker.info.worker_id] = worker
        else:
            self.waiting.pop(worker.info.worker_id, None)
        self._after(c.now)

    def _cancel_poll(self, c: cmd.CancelPoll) -> None:
        worker = self.registry.get(c.worker_id)
        worker.demand = 0
        self.waiting.pop(c.worker_id, None)

    def _shutdown_worker(self, c: cmd.ShutdownWorker) -> None:
        now = c.now
        self._now = now
        worker = self._active_worker(c.worker_id)
        worker.status = WorkerStatus.DRAINING
        worker.demand = 0
        self.waiting.pop(c.worker_id, None)
        self.capacity -= worker.info.max_concurrency
        self._worker_record(worker, now)
        for aid in list(worker.leases):
            a = self.activities[aid]
            if a.state is _LEASED:
                self._abandon(a, R.RETURNED, now, count=False)
        if not worker.leases and worker.status is WorkerStatus.DRAINING:
            self.registry.depart(worker, WorkerStatus.GONE, now)
            self._worker_record(worker, now)
        self._after(now)

    def _workers_lost(self, c: cmd.WorkersLost) -> None:
        workers = [self.registry.get(wid) for wid in c.worker_ids]
        self._now = c.now
        for worker in workers:
            if worker.status in LIVE_WORKER_STATUSES:
                self._lose_worker(worker, c.reason, c.now)
        self._after(c.now)

    def _lose_worker(self, worker: WorkerState, reason: TransitionReason, now: float) -> None:
        if worker.status is _ACTIVE:
            self.capacity -= worker.info.max_concurrency
        worker.status = WorkerStatus.FAILED
        worker.demand = 0
        self.waiting.pop(worker.info.worker_id, None)
        self._worker_record(worker, now)
        self.metrics.workers_lost += 1
        self._decisions.append(WorkerFailed(worker_id=worker.info.worker_id, reason=reason))
        for aid in list(worker.leases):
            self._abandon(self.activities[aid], reason, now)
        self.registry.depart(worker, WorkerStatus.FAILED, now)

    def _forget_worker(self, worker: WorkerState, now: float) -> None:
        """A departed worker's retention ended (the registry dropped it): forget the rest."""
        worker_id = worker.info.worker_id
        del self._signatures[worker_id]
        self._records.append(WorkerRemoved(at=now, worker_id=worker_id))

    # ------------------------------------------------------------------- tick

    def _tick(self, c: cmd.Tick) -> None:
        now = c.now
        self._now = now
        # Early by early_grant_s: a grant made before the instant carries it, and the
        # worker starts the activity then (see SchedulerConfig.early_grant_s).
        for activity_id in self.timers.pop_due(now + self.config.early_grant_s):
            self._enqueue(self.activities[activity_id], R.TIMER, now)
        if self.start_deadlines:
            self._start_timeouts(now)
        if self.run_deadlines:
            self._run_timeouts(now)
        for activity_id, token, expires_at in self.leases.pop_expired(now):
            a = self.activities.get(activity_id)
            if (
                a is not None
                and a.token == token
                and a.lease_expires_at == expires_at
                and (a.state is _LEASED or a.state is _EXECUTING)
            ):
                self.metrics.expired_leases += 1
                holder = self.registry.workers.get(a.worker_id or "")
                self._abandon(a, R.LEASE_EXPIRED, now)
                if holder is not None and holder.demand:
                    # A worker that let a lease lapse has most likely died with a poll
                    # still open on the server; granting it more (the requeued activity
                    # first of all) would only wait for another expiry. A live one polls
                    # again when its poll answers.
                    holder.demand = holder.start_demand = 0
                    self.waiting.pop(holder.info.worker_id, None)
        for worker in self.registry.pop_dead(now):
            self._lose_worker(worker, R.MISSED_HEARTBEATS, now)
        for worker in self.registry.pop_purgeable(now):
            self._forget_worker(worker, now)
        if self._limited:
            # Bounded work: a few buckets per tick, so idle keys' buckets do not pile up.
            self.limiter.prune(now)
        self._after(now)

    def _recover(self, c: cmd.Recover) -> None:
        now = c.now
        self._now = now
        registry = self.registry
        until = now + self.leases.ttl_s
        activities = self.activities
        # Registration order, then each worker's grant order: the same in every replay.
        for worker in registry.workers.values():
            worker.demand = worker.start_demand = 0
            if worker.status in LIVE_WORKER_STATUSES:
                registry.touch(worker, max(now, worker.last_seen_at))
            for aid in worker.leases:
                self._grace(activities[aid], until, now)
        self._watch_runs(now)
        self.waiting.clear()
        self._tick(cmd.Tick(now=now))

    # --------------------------------------------------------------- dispatch

    def _after(self, now: float) -> None:
        """Every state-changing command ends here: dispatch, then backpressure."""
        self._now = now
        if self.waiting and self.queue.depth:
            self._dispatch(now)
        if self.waiting and self.config.stealing.enabled:
            self._steal(now)
        if not self._bp_enabled:
            return
        change = self.backpressure.update(
            now,
            queue_depth=self.queue.depth,
            # Draining workers' running work is not in capacity: clamp to 1.
            utilization=min(1.0, self.running / self.capacity) if self.capacity else 0.0,
        )
        if change is not None:
            self.metrics.backpressure_changes += 1
            self._decisions.append(
                BackpressureChanged(
                    previous=change.previous.value,
                    level=change.level.value,
                    queue_depth=change.queue_depth,
                    utilization=change.utilization,
                )
            )

    def _usable_filter(self, now: float) -> Callable[[Lane], bool] | None:
        if not self._limited:
            return None
        blocked = self.limiter.blocked

        def usable(lane: Lane) -> bool:
            return (
                blocked(
                    now,
                    activity_type=lane.activity_type,
                    partition=lane.partition,
                    tenant=lane.tenant,
                )
                is None
            )

        return usable

    def _dispatch(self, now: float) -> None:
        """Match queued work to waiting workers until one side runs out."""
        usable = self._usable_filter(now)
        queue = self.queue
        slowed = self.backpressure.level is not BackpressureLevel.NORMAL
        while self.waiting and queue.depth:
            if len(self.waiting) == 1:
                worker = next(iter(self.waiting.values()))
                choice = self._pick(worker, usable)
                if choice is None:
                    return
                lane, policy = choice
            else:
                found = self._pick_for_many(usable)
                if found is None:
                    return
                lane, policy, candidates = found
                head = lane.head()
                assert head is not None
                worker = (
                    candidates[0]
                    if len(candidates) == 1
                    else self.balancer.choose(head[3], candidates)
                )
            if slowed and not self.backpressure.allow_dispatch(now):
                return
            a = queue.pop(lane)
            self._grant(worker, a, now, lane, policy)
            policy.record_dispatch(lane, queue.depth_by_level[lane.group])

    def _pick(
        self, worker: WorkerState, usable: Callable[[Lane], bool] | None
    ) -> tuple[Lane, SchedulingPolicy] | None:
        signature = self._signatures[worker.info.worker_id]
        for group, policy in self._groups_in_turn():
            lanes = self.queue.eligible_lanes(group, signature)
            lane = policy.pick(lanes, usable)
            if lane is not None:
                return lane, policy
        return None

    def _groups_in_turn(self) -> list[tuple[str, SchedulingPolicy]]:
        """Policy groups, rotated so that several groups share workers in turn."""
        items = self._group_items
        if len(items) > 1:
            shift = self.leases.token % len(items)
            items = items[shift:] + items[:shift]
        return items

    def _pick_for_many(
        self, usable: Callable[[Lane], bool] | None
    ) -> tuple[Lane, SchedulingPolicy, list[WorkerState]] | None:
        waiting = sorted(self.waiting.values(), key=lambda w: w.seq)
        # A dict, not a set: its order (waiting workers by seq) is the same in every
        # process, so a plugin policy that looks at lane order stays deterministic.
        signatures = dict.fromkeys(self._signatures[w.info.worker_id] for w in waiting)
        for group, policy in self._groups_in_turn():
            seen: set[int] = set()
            lanes: list[Lane] = []
            for signature in signatures:
                for lane in self.queue.eligible_lanes(group, signature):
                    if id(lane) not in seen:
                        seen.add(id(lane))
                        lanes.append(lane)
            picked = policy.pick(lanes, usable)
            if picked is not None:
                candidates = [
                    w for w in waiting if picked.eligible_for(self._signatures[w.info.worker_id])
                ]
                return picked, policy, candidates
        return None

    def _grant(
        self, worker: WorkerState, a: Activity, now: float, lane: Lane, policy: SchedulingPolicy
    ) -> None:
        lease = self.leases.grant(a, worker.info.worker_id, now)
        self._to(a, _LEASED, R.GRANTED, now)
        not_before = _not_yet(a, now)
        # A grant for a slot the worker starts on receipt is its start, for every
        # activity: the worker runs it without a StartActivity round trip (an early
        # grant due soon at its not_before, on the worker's own timer, so a burst due
        # at one instant starts then on every slot). If the worker never runs it (the
        # answer is lost, or the worker dies before the instant), the lease is lost
        # while EXECUTING, so an activity that may not run twice fails closed with
        # may_have_executed (never a second run); that window is the price
        # (docs/architecture.md, "Start on grant").
        may_restart = self._may_restart(a, worker.info.worker_id)
        started = (
            worker.start_demand > 0
            and (not_before is None or not_before - now <= START_AHEAD_MAX_S)
            and (may_restart or self._start_any)
        )
        if started:
            # Both transitions land in this command's one commit, so the store never
            # holds a started activity whose grant it lacks.
            worker.start_demand -= 1
            a.attempt += 1
            self._to(a, _EXECUTING, R.STARTED, now)
            self._watch_run(a, now)
        worker.leases[a.activity_id] = lease.token
        worker.demand -= 1
        if worker.demand <= 0 or worker.free_slots <= 0:
            worker.demand = 0
            del self.waiting[worker.info.worker_id]
        self.running += 1
        metrics = self.metrics
        metrics.dispatched += 1
        metrics.observe_latency(now - a.queued_at)
        if self._limited:
            self.limiter.acquire(
                now, activity_type=a.activity_type, partition=lane.partition, tenant=a.tenant
            )
        policy.on_dispatch(a)
        self._decisions.append(
            LeaseGranted(
                lease=lease,
                activity_type=a.activity_type,
                workflow_id=a.workflow_id,
                correlation_id=a.correlation_id,
                payload=a.payload,
                started=started,
                may_restart=may_restart,
                not_before=not_before,
            )
        )

    def _eligible(self, worker: WorkerState, a: Activity) -> bool:
        lane = self.queue.lane_for(a, self._group(a))
        return lane.eligible_for(self._signatures[worker.info.worker_id])

    def _steal(self, now: float) -> None:
        """Idle waiting workers take unstarted leases from overloaded ones (bounded)."""
        for thief in sorted(self.waiting.values(), key=lambda w: w.seq):
            while thief.demand > 0:
                found = choose_steal(
                    thief,
                    self.registry.workers.values(),
                    self.activities,
                    self._eligible,
                    self.config.stealing,
                    now,
                )
                if found is None:
                    break
                victim, a = found
                self._decisions.append(
                    LeaseRevoked(
                        worker_id=victim.info.worker_id,
                        activity_id=a.activity_id,
                        token=a.token,
                        reason=R.STOLEN,
                    )
                )
                del victim.leases[a.activity_id]
                a.steals += 1
                self.metrics.steals += 1
                self._to(a, _QUEUED, R.STOLEN, now)
                lease = self.leases.grant(a, thief.info.worker_id, now)
                self._to(a, _LEASED, f"{R.STOLEN_FROM}:{victim.info.worker_id}", now)
                thief.leases[a.activity_id] = lease.token
                thief.demand -= 1
                self._decisions.append(
                    LeaseGranted(
                        lease=lease,
                        activity_type=a.activity_type,
                        workflow_id=a.workflow_id,
                        correlation_id=a.correlation_id,
                        payload=a.payload,
                        may_restart=self._may_restart(a, thief.info.worker_id),
                    )
                )
            if thief.demand <= 0:
                thief.demand = 0
                self.waiting.pop(thief.info.worker_id, None)

    def _blocked_until(self, now: float) -> float | None:
        """When rate limits or slow dispatch will next let a waiting worker be served."""
        times: list[float] = []
        if self.backpressure.level is not BackpressureLevel.NORMAL:
            t = self.backpressure.next_dispatch_at(now)
            if t is not None:
                times.append(t)
        if self._limited:
            for lane in self.queue.lanes.values():
                if lane.size:
                    t = self.limiter.next_eligible_at(
                        now, activity_type=lane.activity_type, partition=lane.partition
                    )
                    if t is not None:
                        times.append(t)
        return min(times) if times else None

    _now: float = 0.0


_HANDLERS: Final[dict[type[Any], Callable[[SchedulerCore, Any], None]]] = {
    cmd.Submit: SchedulerCore._submit,
    cmd.Cancel: SchedulerCore._cancel,
    cmd.RegisterWorker: SchedulerCore._register_worker,
    cmd.Heartbeat: SchedulerCore._heartbeat,
    cmd.Poll: SchedulerCore._poll,
    cmd.CancelPoll: SchedulerCore._cancel_poll,
    cmd.StartActivity: SchedulerCore._start,
    cmd.RenewLease: SchedulerCore._renew,
    cmd.Complete: SchedulerCore._complete,
    cmd.Fail: SchedulerCore._fail,
    cmd.ShutdownWorker: SchedulerCore._shutdown_worker,
    cmd.WorkersLost: SchedulerCore._workers_lost,
    cmd.Tick: SchedulerCore._tick,
    cmd.Recover: SchedulerCore._recover,
}
"""Command type -> its handler. Unbound and outside the core: a table of bound
methods kept on the core would tie it in a reference cycle, so a core a node
drops (a reload, a step-down) would wait for the cyclic collector, and one
frozen out of its reach (``wf.tuning``) would never be freed."""


def _not_yet(a: Activity, now: float) -> float | None:
    """The activity's due instant if a grant at ``now`` comes before it (early grant)."""
    not_before = a.not_before
    return not_before if not_before is not None and not_before > now else None


def retry_delay_s(a: Activity, policy: RetryPolicy | None = None) -> float:
    """Backoff before the next attempt, with deterministic jitter from id and attempt
    (``policy``: the one in force, by default the activity's own)."""
    r = a.retry if policy is None else policy
    try:
        grown = r.initial_backoff_s * r.backoff_coefficient ** (a.failures - 1)
    except OverflowError:  # many attempts: the delay is capped by max_backoff_s anyway
        grown = math.inf if r.initial_backoff_s > 0 else 0.0
    base = min(grown, r.max_backoff_s)
    if r.jitter_fraction == 0 or base == 0:
        return float(base)
    # A stable hash (not Python's salted hash) keeps replays byte-identical.
    h = 2166136261
    for byte in f"{a.activity_id}:{a.failures}".encode():
        h = ((h ^ byte) * 16777619) & 0xFFFFFFFF
    return float(base * (1 - r.jitter_fraction * (h / 0xFFFFFFFF)))
