"""Invariants of the scheduler core, checked after every command of a simulation.

Theory of operation
-------------------
An :class:`InvariantChecker` watches one run: after each command it gets the
command, its :class:`~wf.scheduler.outputs.Outcome` (or the typed error it
was refused with) and the core, and raises :class:`InvariantViolation` with
a description at the first broken rule. It keeps its own model of every
activity, built *only* from the records stream (``ActivitySubmitted``,
``Transition``, ``LeaseRenewed``), exactly what a store would persist, and
compares the core with it; it never trusts the core's own counters.

What is checked, precisely (the names are the ``invariant`` of the error):

``records``
    Replaying the records reproduces each unfinished activity's state,
    ``attempt``, ``failures``, ``infra_requeues``, ``steals`` and ``token`` (plus
    ``worker_id`` and ``lease_expires_at`` while leased or executing); every
    ``Transition`` starts from the replayed state and is in the lifecycle
    table; an activity that is not leased or executing names no worker (the
    records keep who held it; the current state does not); worker statuses
    replayed from ``WorkerUpserted`` match. A refused command emits nothing,
    so it must leave every activity as it was.
``monotonic``
    ``attempt``, ``failures``, ``infra_requeues``, ``token`` and ``steals``
    never decrease; granted fencing tokens strictly increase.
``exclusive_lease``
    Every lease a worker holds names a leased or executing activity whose
    ``worker_id`` and ``token`` agree, and every such activity is held by
    exactly that worker; failed or gone workers hold nothing; live tokens are
    distinct; ``running`` and ``capacity`` match the leases and the active
    workers; no lease runs more than ``lease_ttl_s`` ahead of now. Simulated
    workers (``holders``) only believe in leases that are current in the core:
    a revocation is never silent.
``no_lost_activity``
    Every submitted activity is either unfinished and in exactly one
    consistent place -- dormant in the timer heap (``delayed``), in its lane's
    heap with a live ticket, or waiting behind an older unfinished activity
    of its ordering key (``queued``), or held by a live worker
    (``leased``/``executing``) -- or finished, with the terminal state in
    ``core.finished``. ``ready`` is never visible between commands. Queue
    depth and lane sizes match the live entries. Ordering keys: the core's
    key lines equal the records' creation order, only the oldest unfinished
    activity of a key is in a lane or in flight, and a queued oldest one is
    in a lane (a line never stalls).
``exactly_once``
    A ``Complete``, ``Fail``, ``StartActivity`` or ``RenewLease`` is accepted
    only with the replayed current token of an unexpired lease (a
    ``Complete`` only while executing); each activity gets exactly one
    ``ActivityCompleted`` (or ``ActivityFailed``, or ``ActivityCancelled``)
    decision, in the same outcome as its terminal transition, and never two (re-checked over the
    whole run by :meth:`InvariantChecker.check_final`). ``LeaseRevoked``
    only names a lease that was current during the command.
``limits``
    A grant never leaves its worker above its ``max_concurrency`` (a worker
    that registers again with a lower one keeps the leases it has); running <=
    ``max_concurrent_activities``; per tenant <= its concurrency cap; and
    dispatches (``granted`` transitions; steals move a lease without a
    dispatch) conform to every token bucket: a shadow bucket per global,
    partition and activity-type rate (and the backpressure slow-dispatch
    rate while the level is raised) never goes below zero, i.e. in every
    window ``dispatches <= burst + rate * window``.
``detection``
    After a ``Tick`` at ``now`` no lease with ``expires_at <= now`` is still
    held, no live worker is past its heartbeat deadline, and no dormant
    activity is past its ``not_before``.
``work_conserving``
    After a command that ends with a dispatch pass, no waiting worker is
    eligible (capabilities, type, tenant, partition) for a queued activity
    that the rate limits allow at ``now`` (skipped while backpressure slows
    dispatch). Steals only move unstarted, unkeyed leases, at most
    ``max_steals_per_activity`` times.
``policy`` (only with ``policy_oracle=True``: one policy group, every worker
    eligible for every activity, no ordering keys and no per-tenant or
    per-type limits, so that eligibility and rate limits cannot hide one
    queued activity but not another)
    Each dispatch picks what the documented policy prescribes, from a
    replica fed only by records: ``fifo`` the oldest; ``priority`` the best
    level, oldest first; ``deadline_first`` the earliest deadline; a
    starvation-due level first. **Starvation bound** (``priority`` and
    ``deadline_first``): no queued level is passed by more than
    ``limit[level] + 3`` consecutive dispatches of better levels (the
    tenant-first policies apply the guard only within the chosen tenant, so
    for them the bound does not hold across tenants). **Fairness:**
    ``weighted_fair`` gives every slot to a backlogged tenant with the
    lowest ``running / weight`` (so under
    saturation no tenant's share exceeds the lowest backlogged share by more
    than one slot, ``1 / weight``, beyond the slots freed since the last
    dispatch); ``tenant_aware`` to the backlogged tenant served longest ago.

Why one module of about a thousand lines: every family above checks the same
replayed model of the records, built in one pass per command; splitting the
families would split that model or replay the records once per family.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from wf.errors import WfError
from wf.scheduler import commands as cmd
from wf.scheduler.config import SchedulerConfig
from wf.scheduler.dispatcher import SchedulerCore
from wf.scheduler.model import (
    TERMINAL_STATES,
    TRANSITIONS,
    Activity,
    ActivityState,
    Priority,
    TransitionReason,
    WorkerStatus,
)
from wf.scheduler.outputs import (
    ActivityCancelled,
    ActivityCompleted,
    ActivityFailed,
    ActivitySubmitted,
    BackpressureChanged,
    LeaseGranted,
    LeaseRenewed,
    LeaseRevoked,
    Outcome,
    Transition,
    WorkerUpserted,
)
from wf.scheduler.policies import DEFAULT_STARVATION_LIMITS
from wf.scheduler.queue import partition_name
from wf.scheduler.rate_limiter import RateLimitConfig

S = ActivityState
_HELD: Final = frozenset({S.LEASED, S.EXECUTING})
_LIVE_WORKER: Final = frozenset({WorkerStatus.ACTIVE, WorkerStatus.DRAINING})
_FENCED: Final = (cmd.StartActivity, cmd.RenewLease, cmd.Complete, cmd.Fail)
_DISPATCHING: Final = (
    cmd.Submit,
    cmd.Cancel,
    cmd.RegisterWorker,
    cmd.Poll,
    cmd.Complete,
    cmd.Fail,
    cmd.ShutdownWorker,
    cmd.WorkersLost,
    cmd.Tick,
)
"""Commands whose handler ends with the dispatch pass (``SchedulerCore._after``)."""
SLACK_TOKENS: Final = 1e-6
"""Rounding slack of the shadow token buckets (the core's own slack is 1e-9)."""
STARVATION_SLACK: Final = 3
"""The documented starvation bound is ``limit + 3`` dispatches (see policies.py)."""
_STARVATION_BOUNDED: Final = frozenset({"priority", "deadline_first"})
"""Policies whose every dispatch is a guarded priority choice across the whole group.

``weighted_fair`` and ``tenant_aware`` pick the tenant first and apply the
guard only among that tenant's work, so a level can be passed by other
tenants' dispatches beyond the bound; their choice is still checked exactly.
"""

Holders = Mapping[str, Sequence[tuple[str, int]]]
"""Activity id -> (worker id, token) of every simulated worker that believes it holds it."""


class InvariantViolation(AssertionError):
    """An invariant of the scheduler does not hold; ``invariant`` names which one."""

    def __init__(self, invariant: str, message: str) -> None:
        super().__init__(f"[{invariant}] {message}")
        self.invariant = invariant
        """The broken invariant (see the module docstring)."""
        self.message = message
        """What exactly is wrong."""


def _fail(invariant: str, message: str) -> InvariantViolation:
    return InvariantViolation(invariant, message)


@dataclass(slots=True)
class _Replayed:
    """An activity as the records describe it."""

    state: ActivityState
    attempt: int
    failures: int
    infra_requeues: int
    steals: int
    token: int
    worker_id: str | None
    lease_expires_at: float
    tenant: str
    priority: Priority
    seq: int
    group: str
    deadline: float | None
    activity_type: str
    partition: str
    ordering_key: str | None


class _Bucket:
    """A shadow token bucket: dispatches must never overdraw it."""

    __slots__ = ("burst", "last", "level", "name", "rate")

    def __init__(self, name: str, rate: float, burst: float) -> None:
        self.name = name
        self.rate = rate
        self.burst = burst
        self.level = burst
        self.last: float | None = None

    def take(self, now: float, aid: str) -> None:
        if self.last is not None and now > self.last:
            self.level = min(self.burst, self.level + (now - self.last) * self.rate)
        if self.last is None or now > self.last:
            self.last = now
        self.level -= 1.0
        if self.level < -SLACK_TOKENS:
            raise _fail(
                "limits",
                f"dispatch of {aid!r} at t={now:.6f} overdraws the {self.name} rate limit "
                f"(rate {self.rate}/s, burst {self.burst}): level {self.level:.6f}",
            )


class _PolicyOracle:
    """A replica of one policy group's documented choice, fed by records only."""

    def __init__(self, policy: str, options: Mapping[str, Any]) -> None:
        self.kind = policy
        raw = options.get("starvation_limits")
        limits = (
            DEFAULT_STARVATION_LIMITS
            if raw is None
            else {Priority[str(k).upper()]: int(v) for k, v in raw.items()}
        )
        self.limits = [0] + [limits.get(Priority(v), 1 << 30) for v in (1, 2, 3)]
        self.passed = [0, 0, 0, 0]
        self.weights = {str(k): float(v) for k, v in options.get("weights", {}).items()}
        self.default_weight = float(options.get("default_weight", 1.0))
        self.served: dict[str, int] = {}
        self.served_seq = 0
        self.queued: dict[str, _Replayed] = {}
        self.running: dict[str, int] = {}

    def _key(self, r: _Replayed) -> tuple[Any, ...]:
        if self.kind == "deadline_first":
            return (math.inf if r.deadline is None else r.deadline, r.priority, r.seq)
        return (r.priority, r.seq)

    def _guarded_best(self, candidates: list[tuple[str, _Replayed]]) -> str:
        due = next((lv for lv in (3, 2, 1) if self.passed[lv] >= self.limits[lv]), -1)
        pool = [c for c in candidates if c[1].priority == due] or candidates
        return min(pool, key=lambda c: self._key(c[1]))[0]

    def _tenant_order(self, tenant: str) -> tuple[float, int, str]:
        served = self.served.get(tenant, 0)
        if self.kind == "tenant_aware":
            return (0.0, served, tenant)
        weight = self.weights.get(tenant, self.default_weight)
        return (self.running.get(tenant, 0) / weight, served, tenant)

    def expected(self, granted: _Replayed) -> str:
        """The activity the documented policy would dispatch now."""
        candidates = list(self.queued.items())
        if self.kind == "fifo":
            return min(candidates, key=lambda c: c[1].seq)[0]
        if self.kind in ("weighted_fair", "tenant_aware"):
            tenants = {r.tenant for _, r in candidates}
            best = min(tenants, key=self._tenant_order)
            if granted.tenant != best:
                shares = {t: self._tenant_order(t) for t in sorted(tenants)}
                raise _fail(
                    "policy",
                    f"{self.kind}: dispatched tenant {granted.tenant!r} but {best!r} was "
                    f"further behind; (running/weight, last served, tenant): {shares}",
                )
            candidates = [c for c in candidates if c[1].tenant == best]
        return self._guarded_best(candidates)

    def record(self, served: int) -> None:
        """StarvationGuard.record, with the queued counts after the pop."""
        queued = [0, 0, 0, 0]
        for r in self.queued.values():
            queued[r.priority] += 1
        self.passed[served] = 0
        for level in (1, 2, 3):
            if level == served:
                continue
            if queued[level] > 0:
                if level > served:
                    self.passed[level] += 1
                    if (
                        self.kind in _STARVATION_BOUNDED
                        and self.passed[level] > self.limits[level] + STARVATION_SLACK
                    ):
                        raise _fail(
                            "policy",
                            f"starvation: queued {Priority(level).name} work was passed by "
                            f"{self.passed[level]} dispatches (bound "
                            f"{self.limits[level]} + {STARVATION_SLACK})",
                        )
            else:
                self.passed[level] = 0

    def on_transition(self, aid: str, r: _Replayed, rec: Transition) -> None:
        frm, to = rec.from_state, rec.to_state
        granted = frm is S.QUEUED and to is S.LEASED and rec.reason == TransitionReason.GRANTED
        if granted:
            want = self.expected(r)
            if want != aid:
                other = self.queued[want]
                raise _fail(
                    "policy",
                    f"{self.kind}: dispatched {aid!r} (priority {r.priority.name}, seq {r.seq}, "
                    f"deadline {r.deadline}) but the policy prescribes {want!r} "
                    f"(priority {other.priority.name}, seq {other.seq}, deadline "
                    f"{other.deadline}); starvation counters {self.passed[1:]}",
                )
        if frm is S.QUEUED:
            self.queued.pop(aid, None)
        if to is S.QUEUED:
            self.queued[aid] = r
        if frm in _HELD and to not in _HELD:
            left = self.running[r.tenant] - 1
            if left:
                self.running[r.tenant] = left
            else:
                del self.running[r.tenant]
        elif to in _HELD and frm not in _HELD:
            self.running[r.tenant] = self.running.get(r.tenant, 0) + 1
        if granted:
            self.served_seq += 1
            self.served[r.tenant] = self.served_seq
            if self.kind != "fifo":  # FIFO ignores priority: it has no guard.
                self.record(r.priority)


def policy_oracle_applies(config: SchedulerConfig) -> bool:
    """Whether limits leave eligibility uniform, so the policy oracle is sound.

    The caller must also guarantee uniform workers (no capability, type,
    tenant or partition restrictions) and no ordering keys.
    """
    limits = config.limits
    return (
        len(config.policies) == 1
        and not limits.tenant_concurrency
        and limits.max_tenant_concurrency is None
        and not limits.activity_type_per_second
        and (not config.partition_by or limits.partition_per_second == {})
        and (not config.partition_by or limits.default_partition_per_second is None)
    )


@dataclass(slots=True)
class CheckStats:
    """What the checker saw (for reports)."""

    commands: int = 0
    accepted_completions: list[tuple[str, int]] = field(default_factory=list)
    """(activity id, token) of every accepted ``Complete``."""
    starvation_passes_max: int = 0
    """The largest starvation counter seen (policy oracle only)."""
    engaged: dict[str, int] = field(default_factory=dict)
    """How often each conditional check had something to check."""

    def bump(self, name: str) -> None:
        self.engaged[name] = self.engaged.get(name, 0) + 1


class InvariantChecker:
    """Checks every invariant of the module docstring after each command."""

    def __init__(self, config: SchedulerConfig, *, policy_oracle: bool = False) -> None:
        self.config = config
        self.ttl_s = config.lease_ttl_s
        self.model: dict[str, _Replayed] = {}
        self.open: dict[str, _Replayed] = {}
        self.terminal: dict[str, ActivityState] = {}
        self.completed_decisions: dict[str, int] = {}
        self.failed_decisions: dict[str, int] = {}
        self.worker_status: dict[str, WorkerStatus] = {}
        self.steals: dict[str, int] = {}
        self.max_token = 0
        self.stats = CheckStats()
        self.oracle: _PolicyOracle | None = None
        if policy_oracle:
            if not policy_oracle_applies(config):
                raise ValueError("the policy oracle is unsound under this configuration")
            (pc,) = config.policies.values()
            self.oracle = _PolicyOracle(pc.policy, pc.options)
        self._buckets = self._make_buckets(config.limits)
        bp = config.backpressure.elevated_dispatch_per_s
        self._bp_bucket = None if bp is None else _Bucket("backpressure", bp, max(1.0, bp))
        self._bp_level = "normal"

    # ---------------------------------------------------------------- driver

    def observe(
        self,
        core: SchedulerCore,
        command: cmd.Command,
        outcome: Outcome | None,
        error: WfError | None = None,
        *,
        holders: Holders | None = None,
    ) -> None:
        """Check one command's effects; ``outcome`` is ``None`` when it was refused."""
        self.stats.commands += 1
        now = command.now
        if outcome is None:
            assert error is not None
            self._check_refused_unchanged(core, command)
        else:
            self._check_fenced_call(command, outcome)
            self._apply(core, outcome, now)
        granted_to = (
            set()
            if outcome is None
            else {d.lease.worker_id for d in outcome.decisions if isinstance(d, LeaseGranted)}
        )
        self._check_core(core, now, holders, granted_to)
        if outcome is not None:
            if isinstance(command, cmd.Tick):
                self._check_detection(core, now)
            if isinstance(command, _DISPATCHING):
                self._check_work_conserving(core, now, outcome)
        self._bp_level = core.backpressure.level.value

    # --------------------------------------------------------------- records

    def _apply(self, core: SchedulerCore, outcome: Outcome, now: float) -> None:
        current = {(aid, r.token, r.worker_id) for aid, r in self.open.items() if r.state in _HELD}
        finished_here: dict[str, ActivityState] = {}
        slowed = self._bp_bucket is not None and self._bp_level != "normal"
        for rec in outcome.records:
            if isinstance(rec, ActivitySubmitted):
                self._on_submitted(core, rec.activity)
            elif isinstance(rec, Transition):
                r = self._on_transition(rec, slowed)
                if r.state in _HELD:
                    current.add((rec.activity_id, r.token, r.worker_id))
                if r.state in TERMINAL_STATES:
                    finished_here[rec.activity_id] = r.state
            elif isinstance(rec, LeaseRenewed):
                r = self._open(rec.activity_id, "LeaseRenewed")
                if r.state not in _HELD or r.token != rec.token:
                    raise _fail(
                        "records",
                        f"LeaseRenewed for {rec.activity_id!r} token {rec.token} but the "
                        f"records say {r.state.value} with token {r.token}",
                    )
                if rec.expires_at < r.lease_expires_at:
                    raise _fail("monotonic", f"renewal shortened the lease of {rec.activity_id!r}")
                r.lease_expires_at = rec.expires_at
            elif isinstance(rec, WorkerUpserted):
                self.worker_status[rec.info.worker_id] = rec.status
        self._check_decisions(outcome, finished_here, current)

    def _on_submitted(self, core: SchedulerCore, a: Activity) -> None:
        aid = a.activity_id
        if aid in self.model:
            raise _fail("records", f"activity {aid!r} submitted twice")
        if a.state is not S.READY or a.attempt or a.failures or a.infra_requeues or a.token:
            raise _fail("records", f"activity {aid!r} submitted with state {a.state.value}")
        group = a.policy or self.config.default_policy
        r = _Replayed(
            state=S.READY,
            attempt=0,
            failures=0,
            infra_requeues=0,
            steals=0,
            token=0,
            worker_id=None,
            lease_expires_at=0.0,
            tenant=a.tenant,
            priority=a.priority,
            seq=a.seq,
            group=group,
            deadline=a.deadline,
            activity_type=a.activity_type,
            partition=partition_name(
                self.config.partition_by,
                tenant=a.tenant,
                activity_type=a.activity_type,
                priority=a.priority,
                region=a.region,
                capabilities=a.capabilities,
            ),
            ordering_key=a.ordering_key,
        )
        self.model[aid] = r
        self.open[aid] = r

    def _open(self, aid: str, what: str) -> _Replayed:
        r = self.open.get(aid)
        if r is None:
            state = self.terminal.get(aid)
            known = "never submitted" if state is None else f"already {state.value}"
            raise _fail("records", f"{what} for activity {aid!r}, which is {known}")
        return r

    def _on_transition(self, rec: Transition, slowed: bool) -> _Replayed:
        aid = rec.activity_id
        r = self._open(aid, f"Transition {rec.from_state.value}->{rec.to_state.value}")
        if rec.from_state is not r.state:
            raise _fail(
                "records",
                f"Transition of {aid!r} from {rec.from_state.value} but the records left it "
                f"{r.state.value}",
            )
        if rec.to_state not in TRANSITIONS[r.state]:
            raise _fail(
                "records", f"illegal transition {r.state.value}->{rec.to_state.value} of {aid!r}"
            )
        for name, old, new in (
            ("attempt", r.attempt, rec.attempt),
            ("failures", r.failures, rec.failures),
            ("infra_requeues", r.infra_requeues, rec.infra_requeues),
            ("steals", r.steals, rec.steals),
            ("token", r.token, rec.token),
        ):
            if new < old:
                raise _fail("monotonic", f"{name} of {aid!r} went from {old} to {new}")
        if rec.reason == TransitionReason.STOLEN:
            self._check_steal(aid, r, rec)
        if rec.to_state is S.LEASED and rec.from_state is S.QUEUED:
            if rec.token <= self.max_token:
                raise _fail(
                    "monotonic",
                    f"lease of {aid!r} got token {rec.token}, not above {self.max_token}",
                )
            self.max_token = rec.token
            if rec.reason == TransitionReason.GRANTED:
                self._on_dispatch(aid, r, rec.at, slowed)
        if self.oracle is not None:
            if rec.reason == TransitionReason.GRANTED:
                self.stats.bump("policy_choice")
            self.oracle.on_transition(aid, r, rec)
            self.stats.starvation_passes_max = max(
                self.stats.starvation_passes_max, *self.oracle.passed
            )
        r.state = rec.to_state
        r.attempt = rec.attempt
        r.failures = rec.failures
        r.infra_requeues = rec.infra_requeues
        r.steals = rec.steals
        r.token = rec.token
        r.worker_id = rec.worker_id
        r.lease_expires_at = rec.lease_expires_at
        if r.state in TERMINAL_STATES:
            del self.open[aid]
            self.terminal[aid] = r.state
        return r

    def _check_steal(self, aid: str, r: _Replayed, rec: Transition) -> None:
        if rec.from_state is not S.LEASED:
            raise _fail("work_conserving", f"stole {aid!r} while {rec.from_state.value}")
        if r.ordering_key is not None:
            raise _fail("work_conserving", f"stole {aid!r}, which has an ordering key")

    # ---------------------------------------------------------------- limits

    def _make_buckets(self, limits: RateLimitConfig) -> dict[str, _Bucket]:
        buckets: dict[str, _Bucket] = {}
        rate, burst = limits.max_activities_per_second, limits.global_burst()
        if rate is not None and burst is not None:
            buckets["global"] = _Bucket("global", rate, burst)
        return buckets

    def _on_dispatch(self, aid: str, r: _Replayed, now: float, slowed: bool) -> None:
        limits = self.config.limits
        keys: list[tuple[str, float]] = [("global", 0.0)]
        prate = limits.partition_rate(r.partition)
        if prate is not None:
            keys.append((f"partition {r.partition}", prate))
        trate = limits.activity_type_per_second.get(r.activity_type)
        if trate is not None:
            keys.append((f"activity type {r.activity_type}", trate))
        for name, rate in keys:
            bucket = self._buckets.get(name)
            if bucket is None:
                if name == "global":
                    continue
                bucket = self._buckets[name] = _Bucket(name, rate, max(1.0, rate))
            bucket.take(now, aid)
            self.stats.bump("rate_bucket")
        if slowed and self._bp_bucket is not None:
            self._bp_bucket.take(now, aid)
            self.stats.bump("rate_bucket")

    # ------------------------------------------------------- exactly once

    def _check_fenced_call(self, command: cmd.Command, outcome: Outcome) -> None:
        if not isinstance(command, _FENCED):
            return
        aid, token = command.activity_id, command.token
        r = self.open.get(aid)
        if r is None or r.state not in _HELD or r.token != token:
            current = "finished" if r is None else f"{r.state.value}, token {r.token}"
            raise _fail(
                "exactly_once",
                f"{type(command).__name__} of {aid!r} with token {token} was accepted but the "
                f"current lease is {current}",
            )
        if r.lease_expires_at <= command.now:
            raise _fail(
                "exactly_once",
                f"{type(command).__name__} of {aid!r} accepted at t={command.now:.6f} after "
                f"its lease expired at {r.lease_expires_at:.6f}",
            )
        self.stats.bump("fenced_accepted")
        if isinstance(command, cmd.Complete):
            if r.state is not S.EXECUTING:
                raise _fail("exactly_once", f"Complete of {aid!r} accepted while {r.state.value}")
            self.stats.accepted_completions.append((aid, token))

    def _check_decisions(
        self,
        outcome: Outcome,
        finished_here: Mapping[str, ActivityState],
        current: set[tuple[str, int, str | None]],
    ) -> None:
        completed = [d.activity_id for d in outcome.decisions if isinstance(d, ActivityCompleted)]
        failed = [d.activity_id for d in outcome.decisions if isinstance(d, ActivityFailed)]
        for aid in completed:
            self.completed_decisions[aid] = self.completed_decisions.get(aid, 0) + 1
        for aid in failed:
            self.failed_decisions[aid] = self.failed_decisions.get(aid, 0) + 1
        want_completed = sorted(a for a, s in finished_here.items() if s is S.COMPLETED)
        want_failed = sorted(a for a, s in finished_here.items() if s is S.FAILED)
        if sorted(completed) != want_completed:
            raise _fail(
                "exactly_once",
                f"ActivityCompleted decisions {sorted(completed)} do not match the "
                f"completed transitions {want_completed}",
            )
        if sorted(failed) != want_failed:
            raise _fail(
                "exactly_once",
                f"ActivityFailed decisions {sorted(failed)} do not match the failed "
                f"transitions {want_failed}",
            )
        # Listeners (the run engine) learn of a cancel only from this decision.
        cancelled = sorted(d.activity_id for d in outcome.decisions if type(d) is ActivityCancelled)
        want_cancelled = sorted(a for a, s in finished_here.items() if s is S.CANCELLED)
        if cancelled != want_cancelled:
            raise _fail(
                "exactly_once",
                f"ActivityCancelled decisions {cancelled} do not match the cancelled "
                f"transitions {want_cancelled}",
            )
        for aid in completed:
            if self.completed_decisions[aid] != 1:
                raise _fail("exactly_once", f"{aid!r} was reported completed twice")
        for aid in failed:
            if self.failed_decisions[aid] != 1:
                raise _fail("exactly_once", f"{aid!r} was reported failed twice")
        for d in outcome.decisions:
            if isinstance(d, LeaseRevoked) and (d.activity_id, d.token, d.worker_id) not in current:
                raise _fail(
                    "exactly_once",
                    f"LeaseRevoked of {d.activity_id!r} token {d.token} for {d.worker_id!r}, "
                    "which did not hold that lease during the command",
                )
            if isinstance(d, LeaseGranted):
                lease = d.lease
                if not math.isclose(lease.expires_at, lease.granted_at + self.ttl_s):
                    raise _fail("exclusive_lease", f"lease {lease.lease_id} has the wrong TTL")

    def _check_refused_unchanged(self, core: SchedulerCore, command: cmd.Command) -> None:
        aid = getattr(command, "activity_id", None)
        if isinstance(aid, str) and aid in self.open:
            self.stats.bump("refused_unchanged")
            self._compare(aid, self.open[aid], core.activities.get(aid))

    def check_final(self, core: SchedulerCore) -> None:
        """At the end of a run: every finished activity is remembered with its state."""
        for aid, state in self.terminal.items():
            if core.finished.get(aid) is not state or aid in core.activities:
                raise _fail(
                    "no_lost_activity",
                    f"{aid!r} finished {state.value} by the records, but the core remembers "
                    f"{core.finished.get(aid)}",
                )
        for aid, count in self.completed_decisions.items():
            if count != 1 or self.terminal.get(aid) is not S.COMPLETED:
                raise _fail("exactly_once", f"{aid!r} has {count} ActivityCompleted decisions")

    # ----------------------------------------------------------- core state

    def _compare(self, aid: str, r: _Replayed, a: Activity | None) -> None:
        if a is None:
            raise _fail(
                "no_lost_activity",
                f"activity {aid!r} is {r.state.value} by the records but unknown to the core",
            )
        if a.state not in _HELD and a.worker_id is not None:
            raise _fail(
                "records",
                f"activity {aid!r} is {a.state.value} but still names worker {a.worker_id!r} "
                "(worker_id must describe the current lease only)",
            )
        if (a.state, a.attempt, a.failures, a.infra_requeues, a.steals, a.token) != (
            r.state,
            r.attempt,
            r.failures,
            r.infra_requeues,
            r.steals,
            r.token,
        ) or (
            a.state in _HELD
            and (a.worker_id, a.lease_expires_at) != (r.worker_id, r.lease_expires_at)
        ):
            raise _fail(
                "records",
                f"activity {aid!r}: core has state={a.state.value} attempt={a.attempt} "
                f"failures={a.failures} infra_requeues={a.infra_requeues} steals={a.steals} "
                f"token={a.token} "
                f"worker={a.worker_id} expires={a.lease_expires_at}; the records replay to "
                f"state={r.state.value} attempt={r.attempt} failures={r.failures} "
                f"steals={r.steals} "
                f"infra_requeues={r.infra_requeues} token={r.token} worker={r.worker_id} "
                f"expires={r.lease_expires_at}",
            )

    def _check_core(
        self, core: SchedulerCore, now: float, holders: Holders | None, granted_to: set[str]
    ) -> None:
        activities = core.activities
        if len(activities) != len(self.open):
            missing = sorted(set(self.open) - set(activities))[:5]
            extra = sorted(set(activities) - set(self.open))[:5]
            raise _fail(
                "no_lost_activity",
                f"the core has {len(activities)} unfinished activities, the records "
                f"{len(self.open)}; missing from the core {missing}, unknown to the records "
                f"{extra}",
            )
        for aid, r in self.open.items():
            self._compare(aid, r, activities.get(aid))
        self._check_finished(core)
        self._check_workers(core, now, granted_to)
        self._check_placement(core)
        self._check_counters(core)
        if holders is not None:
            self._check_holders(core, holders)

    def _check_finished(self, core: SchedulerCore) -> None:
        # Only the latest finishes are cheap to check on every command.
        for aid, state in list(self.terminal.items())[-16:]:
            if core.finished.get(aid) is not state or aid in core.activities:
                raise _fail(
                    "no_lost_activity",
                    f"{aid!r} finished {state.value} by the records, but the core remembers "
                    f"{core.finished.get(aid)} and has it unfinished: {aid in core.activities}",
                )

    def _check_workers(self, core: SchedulerCore, now: float, granted_to: set[str]) -> None:
        activities = core.activities
        running = 0
        capacity = 0
        tokens: set[int] = set()
        per_tenant: dict[str, int] = {}
        for wid, w in core.registry.workers.items():
            replayed = self.worker_status.get(wid)
            if replayed is not w.status:
                raise _fail(
                    "records",
                    f"worker {wid!r} is {w.status.value}, the records say {replayed}",
                )
            if w.status is WorkerStatus.ACTIVE:
                capacity += w.info.max_concurrency
            if w.status not in _LIVE_WORKER and w.leases:
                raise _fail(
                    "exclusive_lease", f"{w.status.value} worker {wid!r} holds {sorted(w.leases)}"
                )
            if wid in granted_to and len(w.leases) > w.info.max_concurrency:
                raise _fail(
                    "limits",
                    f"worker {wid!r} was granted a lease and now holds {len(w.leases)}, "
                    f"max_concurrency {w.info.max_concurrency}",
                )
            for aid, token in w.leases.items():
                a = activities.get(aid)
                if a is None or a.state not in _HELD or a.worker_id != wid or a.token != token:
                    desc = "missing" if a is None else f"{a.state.value} {a.worker_id} {a.token}"
                    raise _fail(
                        "exclusive_lease",
                        f"worker {wid!r} holds {aid!r} token {token}, the activity is {desc}",
                    )
                if token in tokens:
                    raise _fail("exclusive_lease", f"token {token} is held twice")
                tokens.add(token)
                per_tenant[a.tenant] = per_tenant.get(a.tenant, 0) + 1
                if a.lease_expires_at > now + self.ttl_s + 1e-6:
                    raise _fail(
                        "exclusive_lease", f"lease of {aid!r} runs beyond now + lease_ttl_s"
                    )
                running += 1
            if wid in core.waiting:
                if w.status is not WorkerStatus.ACTIVE or not 0 < w.demand <= w.free_slots:
                    raise _fail(
                        "exclusive_lease",
                        f"waiting worker {wid!r} is {w.status.value} with demand {w.demand} "
                        f"and {w.free_slots} free slots",
                    )
            elif w.demand:
                raise _fail("exclusive_lease", f"worker {wid!r} has demand but is not waiting")
        held = sum(1 for a in activities.values() if a.state in _HELD)
        if held != running or core.running != running:
            raise _fail(
                "exclusive_lease",
                f"{held} activities are leased or executing, workers hold {running} leases, "
                f"core.running is {core.running}",
            )
        if core.capacity != capacity:
            raise _fail("exclusive_lease", f"core.capacity {core.capacity}, workers {capacity}")
        if tokens and max(tokens) > core.leases.token:
            raise _fail("exclusive_lease", "a live token is above the token counter")
        limits = self.config.limits
        if limits.max_concurrent_activities is not None and (
            running > limits.max_concurrent_activities
        ):
            raise _fail(
                "limits",
                f"{running} running, max_concurrent_activities {limits.max_concurrent_activities}",
            )
        for tenant, count in per_tenant.items():
            cap = limits.tenant_concurrency.get(tenant, limits.max_tenant_concurrency)
            if cap is not None and count > cap:
                raise _fail("limits", f"tenant {tenant!r} runs {count}, its cap is {cap}")

    def _check_placement(self, core: SchedulerCore) -> None:
        activities = core.activities
        in_lanes = self._live_lane_entries(core)
        lines = self._check_key_lines(core)
        delayed = 0
        for aid, a in activities.items():
            state = a.state
            if state is S.QUEUED:
                line = lines.get(a.ordering_key) if a.ordering_key is not None else None
                waiting_in_line = line is not None and line[0] != aid
                if (aid in in_lanes) == waiting_in_line:
                    raise _fail(
                        "no_lost_activity",
                        f"{aid!r} is queued but "
                        + (
                            "in a lane while behind its key's head"
                            if waiting_in_line
                            else "in no lane"
                        ),
                    )
            elif state is S.DELAYED:
                delayed += 1
                if aid not in core.timers:
                    raise _fail("no_lost_activity", f"{aid!r} is delayed without a timer")
            elif state is S.READY:
                raise _fail("no_lost_activity", f"{aid!r} was left in state ready")
        if delayed != len(core.timers):
            raise _fail("no_lost_activity", f"{delayed} delayed, {len(core.timers)} timers")

    def _live_lane_entries(self, core: SchedulerCore) -> set[str]:
        """Ids with a live lane entry; checks lane sizes, depth and lane keys on the way."""
        activities = core.activities
        in_lanes: set[str] = set()
        depth = 0
        for lane_key, lane in core.queue.lanes.items():
            live = 0
            for entry in lane.heap:
                a = entry[3]
                if a.state is not S.QUEUED or a.queue_ticket != entry[2]:
                    continue
                aid = a.activity_id
                if activities.get(aid) is not a:
                    raise _fail("no_lost_activity", f"lane entry of {aid!r} is a stale object")
                if aid in in_lanes:
                    raise _fail("no_lost_activity", f"{aid!r} is queued twice")
                group = a.policy or self.config.default_policy
                if lane_key != (
                    group,
                    a.tenant,
                    a.activity_type,
                    a.capabilities,
                    a.priority,
                    a.region,
                ):
                    raise _fail("no_lost_activity", f"{aid!r} is in the wrong lane {lane_key}")
                in_lanes.add(aid)
                live += 1
            if live != lane.size:
                raise _fail(
                    "no_lost_activity", f"lane {lane_key} has size {lane.size}, {live} live"
                )
            depth += live
        if depth != core.queue.depth:
            raise _fail("no_lost_activity", f"queue depth {core.queue.depth}, {depth} live")
        return in_lanes

    def _check_key_lines(self, core: SchedulerCore) -> dict[str, list[str]]:
        """Ordering keys: the records' view of each key, in creation order, against the core.

        Only the oldest unfinished activity of a key may be queued in a lane
        or in flight (activities of one key start strictly in creation order).
        """
        expected: dict[str, list[tuple[int, str]]] = {}
        for aid, r in self.open.items():
            if r.ordering_key is not None:
                expected.setdefault(r.ordering_key, []).append((r.seq, aid))
        lines = {key: [aid for _, aid in sorted(members)] for key, members in expected.items()}
        actual = {
            key: [a.activity_id for a in line] for key, line in core.key_lines.items() if line
        }
        if actual != lines or len(actual) != len(core.key_lines):
            raise _fail(
                "no_lost_activity",
                f"ordering lines {actual} differ from the records' creation order {lines}",
            )
        for key, members in core.key_lines.items():
            for a in members:
                if core.activities.get(a.activity_id) is not a:
                    raise _fail("no_lost_activity", f"line {key!r} holds a stale {a.activity_id!r}")
        for key, ids in lines.items():
            for aid in ids[1:]:
                a = core.activities[aid]
                if a.state in _HELD or a.queue_ticket:
                    raise _fail(
                        "no_lost_activity",
                        f"ordering key {key!r}: {aid!r} is {a.state.value} before the older "
                        f"{ids[0]!r} finished",
                    )
        return lines

    def _check_counters(self, core: SchedulerCore) -> None:
        max_steals = self.config.stealing.max_steals_per_activity
        for aid, a in core.activities.items():
            before = self.steals.get(aid, 0)
            if a.steals < before:
                raise _fail("monotonic", f"steals of {aid!r} went from {before} to {a.steals}")
            if a.steals > max_steals:
                raise _fail("work_conserving", f"{aid!r} was stolen {a.steals} times")
            if a.steals:
                self.steals[aid] = a.steals

    def _check_holders(self, core: SchedulerCore, holders: Holders) -> None:
        for aid, believers in holders.items():
            a = core.activities.get(aid)
            for wid, token in believers:
                if a is None or a.token != token or a.state not in _HELD or a.worker_id != wid:
                    now_is = "finished" if a is None else f"{a.state.value} token {a.token}"
                    raise _fail(
                        "exclusive_lease",
                        f"worker {wid!r} still works on {aid!r} with token {token}, but the "
                        f"core has it {now_is} held by {None if a is None else a.worker_id!r} "
                        "and never revoked it",
                    )
            if len(believers) > 1:
                raise _fail("exclusive_lease", f"{aid!r} is executed by {list(believers)}")

    # ---------------------------------------------------- after Tick/dispatch

    def _check_detection(self, core: SchedulerCore, now: float) -> None:
        for aid, a in core.activities.items():
            if a.state in _HELD and a.lease_expires_at <= now:
                raise _fail(
                    "detection",
                    f"lease of {aid!r} expired at {a.lease_expires_at:.6f} but survived a Tick "
                    f"at {now:.6f}",
                )
        misses = core.config.heartbeat_misses_max
        for wid, w in core.registry.workers.items():
            if w.status in _LIVE_WORKER:
                deadline = w.last_seen_at + w.info.heartbeat_interval_s * misses
                if deadline <= now:
                    raise _fail(
                        "detection",
                        f"worker {wid!r} missed its heartbeat deadline {deadline:.6f} but is "
                        f"still {w.status.value} after a Tick at {now:.6f}",
                    )
        due = core.timers.next_due_at()
        if due is not None and due <= now:
            raise _fail("detection", f"a timer due at {due:.6f} survived a Tick at {now:.6f}")

    def _check_work_conserving(self, core: SchedulerCore, now: float, outcome: Outcome) -> None:
        if not core.waiting or not core.queue.depth:
            return
        if core.config.backpressure.elevated_dispatch_per_s is not None and (
            core.backpressure.level.value != "normal"
            or self._bp_level != "normal"
            or any(isinstance(d, BackpressureChanged) for d in outcome.decisions)
        ):
            return
        self.stats.bump("work_conserving")
        limited = core.config.limits != RateLimitConfig()
        queued = [a for a in core.activities.values() if a.state is S.QUEUED and a.queue_ticket]
        for wid, w in core.waiting.items():
            info = w.info
            for a in queued:
                r = self.open[a.activity_id]
                if not (
                    a.capabilities <= info.capabilities
                    and (info.activity_types is None or a.activity_type in info.activity_types)
                    and (info.tenants is None or a.tenant in info.tenants)
                    and (info.partitions is None or r.partition in info.partitions)
                ):
                    continue
                if limited and (
                    core.limiter.blocked(
                        now, activity_type=a.activity_type, partition=r.partition, tenant=a.tenant
                    )
                    is not None
                ):
                    continue
                raise _fail(
                    "work_conserving",
                    f"worker {wid!r} waits for work while {a.activity_id!r}, which it may run, "
                    "is queued and allowed by every limit",
                )


def believed_leases(entries: Iterable[tuple[str, str, int]]) -> dict[str, list[tuple[str, int]]]:
    """Group (worker id, activity id, token) beliefs by activity, for ``holders``."""
    out: dict[str, list[tuple[str, int]]] = {}
    for wid, aid, token in entries:
        out.setdefault(aid, []).append((wid, token))
    return out
