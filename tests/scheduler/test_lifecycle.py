"""WF-005 §5 lifecycle through ``SchedulerCore.handle``: the transition table,
one record per transition, and refused commands that change nothing."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from typing import Any

import msgspec
import pytest
from _core_helpers import T0, Driver, act, fingerprint, grants
from hypothesis import given, settings
from hypothesis import strategies as st

from wf.errors import (
    AlreadyExists,
    Conflict,
    IllegalTransition,
    InvalidArgument,
    NotFound,
    WfError,
)
from wf.scheduler import commands as cmd
from wf.scheduler.backpressure import BackpressureConfig
from wf.scheduler.config import PolicyConfig, SchedulerConfig, StealingConfig
from wf.scheduler.dispatcher import SchedulerCore
from wf.scheduler.model import (
    TERMINAL_STATES,
    TRANSITIONS,
    Activity,
    ActivityState,
    Lease,
    Priority,
    RetryPolicy,
    WorkerInfo,
    WorkerStatus,
    check_transition,
)
from wf.scheduler.outputs import Transition
from wf.scheduler.rate_limiter import RateLimitConfig

S = ActivityState
NO_JITTER = RetryPolicy(jitter_fraction=0.0)


# --- the table itself ------------------------------------------------------------------------

ALL_PAIRS = list(itertools.product(ActivityState, repeat=2))


@pytest.mark.parametrize(("current", "target"), ALL_PAIRS)
def test_check_transition_allows_exactly_the_table(
    current: ActivityState, target: ActivityState
) -> None:
    if target in TRANSITIONS[current]:
        check_transition("a", current, target)
    else:
        with pytest.raises(IllegalTransition) as info:
            check_transition("a", current, target)
        assert info.value.details == {
            "activity_id": "a",
            "current": current.value,
            "target": target.value,
        }


def test_terminal_states_have_no_way_out() -> None:
    assert {s for s, out in TRANSITIONS.items() if not out} == set(TERMINAL_STATES)


# --- every transition through the core yields a record ----------------------------------------


def _drive_every_path() -> set[tuple[ActivityState, ActivityState]]:
    edges: set[tuple[ActivityState, ActivityState]] = set()

    d = Driver(SchedulerConfig(lease_ttl_s=30.0))
    d.register("w1")
    d.register("w2")
    # Ready -> Queued -> Leased -> Executing -> Completed.
    d.submit(act("done"))
    (lease,) = d.lease().values()
    d.start(lease)
    d.do(cmd.Complete, activity_id="done", token=lease.token, result=b"ok")
    # Ready -> Delayed -> Queued (timer) ; Delayed -> Cancelled.
    d.submit(act("later", not_before=T0 + 10), act("never", not_before=T0 + 10))
    d.do(cmd.Cancel, activity_id="never")
    d.now = T0 + 10
    d.do(cmd.Tick)
    # Queued -> Cancelled (nobody polls for it).
    d.do(cmd.Cancel, activity_id="later")
    # Leased -> Cancelled and Executing -> Cancelled.
    d.submit(act("lc"), act("ec"))
    leases = d.lease(n=2)
    d.start(leases["ec"])
    d.do(cmd.Cancel, activity_id="lc")
    d.do(cmd.Cancel, activity_id="ec")
    # Executing -> Delayed (retry with backoff), Executing -> Queued (retry without),
    # Executing -> Failed (non-retryable).
    d.submit(
        act("slow", retry=NO_JITTER),
        act("fast", retry=RetryPolicy(initial_backoff_s=0.0)),
        act("bad"),
    )
    leases = d.lease(n=3)
    for lease in leases.values():
        d.start(lease)
    d.do(cmd.Fail, activity_id="slow", token=leases["slow"].token)
    d.do(cmd.Fail, activity_id="fast", token=leases["fast"].token)
    d.do(cmd.Fail, activity_id="bad", token=leases["bad"].token, retryable=False)
    # Leased -> Queued (the graceful return of an unstarted lease).
    d.submit(act("ret"))
    d.lease("w2")
    d.do(cmd.ShutdownWorker, worker_id="w2")
    edges |= d.edges

    # Leased -> Failed: the infrastructure requeue budget (0 here) runs out.
    d = Driver(SchedulerConfig(lease_ttl_s=30.0, infra_requeues_max=0))
    d.register("w1")
    d.submit(act("lost"))
    d.lease()
    d.now += 30
    d.do(cmd.Tick)
    edges |= d.edges

    # Queued -> Delayed (its schedule-to-start timeout, retried), Queued -> Failed
    # (the same on its last attempt): no worker ever polls here.
    d = Driver(SchedulerConfig(lease_ttl_s=30.0))
    d.submit(
        act("waits", schedule_to_start_s=5.0, retry=NO_JITTER),
        act("gives_up", schedule_to_start_s=5.0, retry=RetryPolicy(max_attempts=1)),
    )
    d.now += 5
    d.do(cmd.Tick)
    edges |= d.edges
    return edges


def test_every_lifecycle_edge_reachable_through_commands_yields_one_record() -> None:
    edges = _drive_every_path()
    table = {(a, b) for a, targets in TRANSITIONS.items() for b in targets}
    # Every edge of the table is taken by some command: the table has no dead edge.
    assert edges == table


def test_transition_records_carry_the_counters_after_the_change() -> None:
    d = Driver()
    d.register("w1")
    d.submit(act("a", retry=NO_JITTER, correlation_id="c"))
    (lease,) = d.lease().values()
    start = d.start(lease)
    (record,) = start.records
    assert isinstance(record, Transition)
    assert (record.from_state, record.to_state, record.reason) == (S.LEASED, S.EXECUTING, "started")
    assert (record.attempt, record.failures, record.infra_requeues) == (1, 0, 0)
    assert (record.token, record.worker_id) == (lease.token, "w1")
    assert record.lease_expires_at == lease.expires_at
    fail = d.do(cmd.Fail, activity_id="a", token=lease.token, error_type="Boom", message="x")
    (record,) = [r for r in fail.records if isinstance(r, Transition)]
    assert (record.from_state, record.to_state, record.reason) == (S.EXECUTING, S.DELAYED, "retry")
    assert (record.attempt, record.failures) == (1, 1)
    assert record.error == "Boom: x"
    assert record.not_before == d.now + NO_JITTER.initial_backoff_s


def test_submit_records_the_activity_then_its_first_transition() -> None:
    d = Driver()
    out = d.submit(act("a"), act("b", not_before=T0 + 5))
    kinds = [(type(r).__name__, getattr(r, "to_state", None)) for r in out.records]
    assert kinds == [
        ("ActivitySubmitted", None),
        ("Transition", S.QUEUED),
        ("ActivitySubmitted", None),
        ("Transition", S.DELAYED),
    ]
    delayed = out.records[3]
    assert isinstance(delayed, Transition)
    assert delayed.not_before == T0 + 5


# --- illegal transitions raise and change nothing ---------------------------------------------


def _leased_and_executing() -> tuple[Driver, Lease, Lease]:
    d = Driver()
    d.register("w1")
    d.submit(act("leased"), act("executing"))
    leases = d.lease(n=2)
    d.start(leases["executing"])
    return d, leases["leased"], leases["executing"]


@pytest.mark.parametrize(
    ("which", "command_type", "extra"),
    [
        ("executing", cmd.StartActivity, {}),
        ("leased", cmd.Complete, {"result": b"r"}),
        ("leased", cmd.Fail, {"error_type": "E"}),
    ],
    ids=["start-twice", "complete-unstarted", "fail-unstarted"],
)
def test_illegal_transition_raises_and_leaves_state_unchanged(
    which: str, command_type: type[Any], extra: dict[str, Any]
) -> None:
    d, leased, executing = _leased_and_executing()
    lease = leased if which == "leased" else executing
    before = fingerprint(d.core)
    with pytest.raises(IllegalTransition):
        d.core.handle(
            command_type(now=d.now, activity_id=lease.activity_id, token=lease.token, **extra)
        )
    assert fingerprint(d.core) == before


def test_commands_on_a_finished_activity_raise_and_change_nothing() -> None:
    d = Driver()
    d.register("w1")
    d.submit(act("a"))
    (lease,) = d.lease().values()
    d.start(lease)
    d.do(cmd.Complete, activity_id="a", token=lease.token)
    before = fingerprint(d.core)
    with pytest.raises(Conflict):
        d.core.handle(cmd.Cancel(now=d.now, activity_id="a"))
    with pytest.raises(Conflict):
        d.core.handle(cmd.Complete(now=d.now, activity_id="a", token=lease.token))
    with pytest.raises(NotFound):
        d.core.handle(cmd.Cancel(now=d.now, activity_id="nope"))
    assert fingerprint(d.core) == before


# --- bad input raises a typed error and changes nothing ---------------------------------------


def _populated() -> Driver:
    d = Driver()
    d.register("w1", max_concurrency=2)
    d.submit(act("done"))
    (lease,) = d.lease().values()
    d.start(lease)
    d.do(cmd.Complete, activity_id="done", token=lease.token)
    d.submit(act("queued"), act("delayed", not_before=T0 + 60), act("keyed", ordering_key="k"))
    return d


BAD_SUBMISSIONS: list[tuple[str, tuple[Activity, ...], type[WfError]]] = [
    ("empty-batch", (), InvalidArgument),
    ("empty-id", (act(""),), InvalidArgument),
    ("id-too-long", (act("x" * 257),), InvalidArgument),
    ("empty-type", (act("n", activity_type=""),), InvalidArgument),
    ("duplicate-in-batch", (act("n"), act("n")), AlreadyExists),
    ("duplicate-of-queued", (act("queued"),), AlreadyExists),
    ("duplicate-of-finished", (act("done"),), AlreadyExists),
    ("unknown-policy-group", (act("n", policy="nope"),), InvalidArgument),
    ("nan-deadline", (act("n", deadline=math.nan),), InvalidArgument),
    ("inf-deadline", (act("n", deadline=math.inf),), InvalidArgument),
    ("nan-not-before", (act("n", not_before=math.nan),), InvalidArgument),
    ("zero-attempts", (act("n", retry=RetryPolicy(max_attempts=0)),), InvalidArgument),
    ("negative-backoff", (act("n", retry=RetryPolicy(initial_backoff_s=-1)),), InvalidArgument),
    ("nan-backoff", (act("n", retry=RetryPolicy(initial_backoff_s=math.nan)),), InvalidArgument),
    ("shrinking-backoff", (act("n", retry=RetryPolicy(backoff_coefficient=0.5)),), InvalidArgument),
    (
        "nan-coefficient",
        (act("n", retry=RetryPolicy(backoff_coefficient=math.nan)),),
        InvalidArgument,
    ),
    ("negative-max-backoff", (act("n", retry=RetryPolicy(max_backoff_s=-1)),), InvalidArgument),
    ("inf-max-backoff", (act("n", retry=RetryPolicy(max_backoff_s=math.inf)),), InvalidArgument),
    ("jitter-above-one", (act("n", retry=RetryPolicy(jitter_fraction=1.5)),), InvalidArgument),
    ("nan-jitter", (act("n", retry=RetryPolicy(jitter_fraction=math.nan)),), InvalidArgument),
    # One bad activity refuses the whole batch: the good one is not stored either.
    ("good-then-bad", (act("good"), act("bad", deadline=math.nan)), InvalidArgument),
]


@pytest.mark.parametrize(
    ("batch", "error"),
    [(batch, error) for _, batch, error in BAD_SUBMISSIONS],
    ids=[name for name, _, _ in BAD_SUBMISSIONS],
)
def test_bad_submission_raises_typed_error_and_changes_nothing(
    batch: tuple[Activity, ...], error: type[WfError]
) -> None:
    d = _populated()
    before = fingerprint(d.core)
    with pytest.raises(error):
        d.core.handle(cmd.Submit(now=d.now, activities=batch))
    assert fingerprint(d.core) == before


def test_oversized_submit_batch_is_refused_and_changes_nothing() -> None:
    d = Driver(SchedulerConfig(submit_batch_max=2))
    before = fingerprint(d.core)
    with pytest.raises(InvalidArgument):
        d.core.handle(cmd.Submit(now=d.now, activities=(act("a"), act("b"), act("c"))))
    assert fingerprint(d.core) == before


@pytest.mark.parametrize("max_items", [0, -1, 1_001, 10**9])
def test_poll_with_max_items_out_of_range_raises_and_changes_nothing(max_items: int) -> None:
    d = _populated()
    before = fingerprint(d.core)
    with pytest.raises(InvalidArgument) as info:
        d.core.handle(cmd.Poll(now=d.now + 1, worker_id="w1", max_items=max_items))
    assert info.value.details["field"] == "max_items"
    assert fingerprint(d.core) == before


@pytest.mark.parametrize(
    "info",
    [
        WorkerInfo(worker_id=""),
        WorkerInfo(worker_id="w9", max_concurrency=0),
        WorkerInfo(worker_id="w9", heartbeat_interval_s=math.nan),
        WorkerInfo(worker_id="w1", max_concurrency=2, heartbeat_interval_s=0.0),
    ],
    ids=["empty-id", "zero-concurrency", "nan-heartbeat", "renewal-with-zero-heartbeat"],
)
def test_bad_worker_registration_raises_and_changes_nothing(info: WorkerInfo) -> None:
    d = _populated()
    before = fingerprint(d.core)
    with pytest.raises(InvalidArgument):
        d.core.handle(cmd.RegisterWorker(now=d.now + 1, info=info))
    assert fingerprint(d.core) == before


@pytest.mark.parametrize(
    "command",
    [
        cmd.Poll(now=T0, worker_id="ghost"),
        cmd.Heartbeat(now=T0, worker_id="ghost"),
        cmd.StartActivity(now=T0, activity_id="ghost", token=1),
        cmd.RenewLease(now=T0, activity_id="ghost", token=1),
        cmd.WorkersLost(now=T0, worker_ids=("w1", "ghost")),
    ],
    ids=lambda c: type(c).__name__,
)
def test_unknown_ids_raise_not_found_and_change_nothing(command: cmd.Command) -> None:
    d = _populated()
    before = fingerprint(d.core)
    with pytest.raises(NotFound):
        d.core.handle(command)
    assert fingerprint(d.core) == before


# --- property: random command streams ----------------------------------------------------------

WORKER_IDS = ("w1", "w2", "w3")


def _check_accounting(core: SchedulerCore) -> None:
    """Cross-structure invariants that every accepted command must preserve."""
    workers = core.registry.workers
    held = [a for a in core.activities.values() if a.state in (S.LEASED, S.EXECUTING)]
    assert core.running == len(held) == sum(len(w.leases) for w in workers.values())
    for a in held:
        assert a.worker_id is not None
        assert workers[a.worker_id].leases[a.activity_id] == a.token
        assert workers[a.worker_id].status in (WorkerStatus.ACTIVE, WorkerStatus.DRAINING)
    active = [w for w in workers.values() if w.status is WorkerStatus.ACTIVE]
    assert core.capacity == sum(w.info.max_concurrency for w in active)
    queued = [a for a in core.activities.values() if a.state is S.QUEUED]
    in_lanes = [a for a in queued if a.queue_ticket]
    waiting_in_lines = {
        a.activity_id
        for line in core.key_lines.values()
        for a in list(line)[1:]
        if a.state is S.QUEUED
    }
    assert core.queue.depth == len(in_lanes)
    assert {a.activity_id for a in queued if not a.queue_ticket} == waiting_in_lines
    assert {a.activity_id for a in core.queue.queued()} == {a.activity_id for a in in_lanes}
    delayed = {a.activity_id for a in core.activities.values() if a.state is S.DELAYED}
    assert {aid for _, _, aid in core.timers.snapshot()} == delayed
    by_tenant = Counter(a.tenant for a in held)
    policy_running: Counter[str] = Counter()
    for policy in core.policies.values():
        policy_running.update(policy.running)
    assert policy_running == by_tenant
    if core._limited:
        assert core.limiter.running() == core.running
    for worker_id, w in core.waiting.items():
        assert w is workers[worker_id]
        assert w.status is WorkerStatus.ACTIVE
        assert 0 < w.demand <= w.free_slots
    for key, line in core.key_lines.items():
        seqs = [a.seq for a in line]
        assert seqs == sorted(seqs)
        assert all(core.activities[a.activity_id] is a and a.ordering_key == key for a in line)


command_step = st.one_of(
    st.tuples(
        st.just("submit"),
        st.integers(0, 3),  # priority
        st.sampled_from(["a", "b"]),  # tenant
        st.sampled_from([None, None, "k"]),  # ordering key
        st.sampled_from([None, None, 3.0]),  # delay
        st.booleans(),  # idempotent
        st.booleans(),  # new workflow
    ),
    st.tuples(st.just("cancel"), st.integers(0, 30)),
    st.tuples(st.just("register"), st.sampled_from(WORKER_IDS), st.integers(1, 3)),
    st.tuples(st.just("poll"), st.sampled_from(WORKER_IDS), st.integers(0, 4)),
    st.tuples(st.just("cancel_poll"), st.sampled_from(WORKER_IDS)),
    st.tuples(st.just("heartbeat"), st.sampled_from(WORKER_IDS)),
    *[
        st.tuples(st.just(name), st.integers(0, 50))
        for name in ("start", "start", "complete", "complete", "fail", "renew", "fail_fatal")
    ],
    st.tuples(st.just("shutdown"), st.sampled_from(WORKER_IDS)),
    st.tuples(st.just("lost"), st.sampled_from(WORKER_IDS)),
    st.tuples(st.just("tick"), st.sampled_from([0.5, 2.0, 4.0, 20.0])),
)


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(command_step, min_size=10, max_size=80),
    policy=st.sampled_from(["fifo", "priority", "deadline_first", "weighted_fair", "tenant_aware"]),
    stealing=st.booleans(),
    limits=st.booleans(),
    pressure=st.booleans(),
)
def test_random_command_streams_keep_records_accounting_and_refusals_consistent(
    steps: list[tuple[Any, ...]], policy: str, stealing: bool, limits: bool, pressure: bool
) -> None:
    config = SchedulerConfig(
        policies={"default": PolicyConfig(policy=policy)},
        lease_ttl_s=10.0,
        heartbeat_misses_max=2,
        infra_requeues_max=2,
        stealing=StealingConfig(enabled=stealing, max_steals_per_activity=2),
        limits=RateLimitConfig(max_activities_per_second=2.0, max_tenant_concurrency=2)
        if limits
        else RateLimitConfig(),
        backpressure=BackpressureConfig(
            elevated_queue_depth=3, critical_queue_depth=6, elevated_dispatch_per_s=1.0
        )
        if pressure
        else BackpressureConfig(),
    )
    d = Driver(config)
    tokens: list[tuple[str, int]] = []
    serial = 0
    prefix: list[tuple[Any, ...]] = [("register", w, 2) for w in WORKER_IDS]
    prefix += [("submit", i % 4, "ab"[i % 2], None, None, i % 3 == 0, False) for i in range(6)]
    for step in prefix + steps:
        name = step[0]
        command: cmd.Command
        if name == "submit":
            _, priority, tenant, key, delay, idempotent, new = step
            serial += 1
            command = cmd.Submit(
                now=d.now,
                activities=(
                    act(
                        f"a{serial}",
                        priority=Priority(priority),
                        tenant=tenant,
                        ordering_key=key,
                        not_before=None if delay is None else d.now + delay,
                        idempotent=idempotent,
                        new_workflow=new,
                        deadline=float(serial % 4),
                        retry=RetryPolicy(max_attempts=2, initial_backoff_s=1.0),
                    ),
                ),
            )
        elif name == "cancel":
            command = cmd.Cancel(now=d.now, activity_id=f"a{step[1]}")
        elif name == "register":
            command = cmd.RegisterWorker(
                now=d.now,
                info=WorkerInfo(
                    worker_id=step[1], max_concurrency=step[2], heartbeat_interval_s=15.0
                ),
            )
        elif name == "poll":
            command = cmd.Poll(now=d.now, worker_id=step[1], max_items=step[2])
        elif name == "cancel_poll":
            command = cmd.CancelPoll(now=d.now, worker_id=step[1])
        elif name == "heartbeat":
            command = cmd.Heartbeat(now=d.now, worker_id=step[1])
        elif name == "shutdown":
            command = cmd.ShutdownWorker(now=d.now, worker_id=step[1])
        elif name == "lost":
            command = cmd.WorkersLost(now=d.now, worker_ids=(step[1],))
        elif name == "tick":
            command = cmd.Tick(now=d.now + step[1])
        else:
            if not tokens:
                continue
            aid, token = tokens[step[1] % len(tokens)]
            if name == "start":
                command = cmd.StartActivity(now=d.now, activity_id=aid, token=token)
            elif name == "complete":
                command = cmd.Complete(now=d.now, activity_id=aid, token=token)
            elif name == "renew":
                command = cmd.RenewLease(now=d.now, activity_id=aid, token=token)
            else:
                command = cmd.Fail(
                    now=d.now, activity_id=aid, token=token, retryable=name == "fail"
                )
        before = fingerprint(d.core)
        fields = msgspec.structs.asdict(command)
        d.now = fields.pop("now")
        try:
            out = d.do(type(command), **fields)
        except WfError:
            assert fingerprint(d.core) == before
            continue
        for lease in grants(out).values():
            tokens.append((lease.activity_id, lease.token))
            worker = d.core.registry.workers[lease.worker_id]
            assert len(worker.leases) <= worker.info.max_concurrency
        _check_accounting(d.core)
