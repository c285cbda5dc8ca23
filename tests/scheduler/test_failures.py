"""WF-005 §13–§14 failure detection and requeueing through ``SchedulerCore.handle``:
missed heartbeats, expired leases, graceful shutdown, infrastructure failure, retries."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from _core_helpers import T0, Driver, act, fingerprint, of_type

from wf.errors import WorkerNotActive
from wf.scheduler import commands as cmd
from wf.scheduler.backpressure import BackpressureConfig
from wf.scheduler.config import SchedulerConfig
from wf.scheduler.dispatcher import retry_delay_s
from wf.scheduler.model import ActivityState, Lease, RetryPolicy, WorkerStatus
from wf.scheduler.outputs import (
    ActivityCompleted,
    ActivityFailed,
    LeaseGranted,
    LeaseRevoked,
    RetryScheduled,
    Transition,
    WorkerFailed,
    WorkerUpserted,
)

S = ActivityState
TTL = 30.0
NO_JITTER = RetryPolicy(jitter_fraction=0.0)


def driver(config: SchedulerConfig | None = None, **workers: int) -> Driver:
    d = Driver(config or SchedulerConfig(lease_ttl_s=TTL))
    for worker_id, max_concurrency in workers.items():
        d.register(worker_id, max_concurrency=max_concurrency)
    return d


def counters(d: Driver, activity_id: str) -> tuple[int, int, int]:
    a = d.core.activities[activity_id]
    return a.attempt, a.failures, a.infra_requeues


def worker_status(d: Driver, worker_id: str) -> WorkerStatus:
    return d.core.registry.workers[worker_id].status


# --- missed heartbeats ------------------------------------------------------------------------


@pytest.mark.parametrize(("interval", "misses"), [(5.0, 3), (2.0, 1), (10.0, 4)])
def test_worker_is_failed_after_heartbeat_interval_times_misses_max(
    interval: float, misses: int
) -> None:
    d = Driver(SchedulerConfig(heartbeat_misses_max=misses))
    d.register("w1", heartbeat_interval_s=interval)
    limit = interval * misses
    assert of_type(d.tick(T0 + limit - 0.001).decisions, WorkerFailed) == []
    assert worker_status(d, "w1") is WorkerStatus.ACTIVE
    out = d.tick(T0 + limit)
    assert of_type(out.decisions, WorkerFailed) == [
        WorkerFailed(worker_id="w1", reason="missed_heartbeats")
    ]
    (record,) = of_type(out.records, WorkerUpserted)
    assert record.status is WorkerStatus.FAILED
    assert of_type(d.tick(T0 + 10 * limit).decisions, WorkerFailed) == []  # reported once


def test_each_heartbeat_pushes_the_failure_deadline_forward() -> None:
    d = Driver(SchedulerConfig(heartbeat_misses_max=3))
    d.register("w1", heartbeat_interval_s=5.0)
    d.now = T0 + 10
    d.do(cmd.Heartbeat, worker_id="w1")
    assert of_type(d.tick(T0 + 24.9).decisions, WorkerFailed) == []
    assert of_type(d.tick(T0 + 25).decisions, WorkerFailed) != []


def test_leases_of_a_silent_worker_are_revoked_and_requeued() -> None:
    d = Driver(SchedulerConfig(heartbeat_misses_max=2, lease_ttl_s=3600))
    d.register("w1", heartbeat_interval_s=5.0)
    d.submit(act("a"))
    (lease,) = d.lease().values()
    out = d.tick(T0 + 10)
    assert of_type(out.decisions, LeaseRevoked) == [
        LeaseRevoked(worker_id="w1", activity_id="a", token=lease.token, reason="missed_heartbeats")
    ]
    assert d.state("a") is S.QUEUED
    assert counters(d, "a") == (0, 0, 1)


def test_failed_worker_is_refused_until_it_registers_again() -> None:
    d = Driver(SchedulerConfig(heartbeat_misses_max=1))
    d.register("w1", heartbeat_interval_s=5.0)
    d.tick(T0 + 5)
    before = fingerprint(d.core)
    with pytest.raises(WorkerNotActive):
        d.core.handle(cmd.Poll(now=d.now, worker_id="w1"))
    with pytest.raises(WorkerNotActive):
        d.core.handle(cmd.Heartbeat(now=d.now, worker_id="w1"))
    assert fingerprint(d.core) == before
    d.register("w1", heartbeat_interval_s=5.0)
    assert worker_status(d, "w1") is WorkerStatus.ACTIVE
    d.submit(act("a"))
    assert list(d.lease()) == ["a"]


# --- expired leases ---------------------------------------------------------------------------


def test_expired_unstarted_lease_is_requeued_and_counted_as_infra_requeue() -> None:
    d = driver(w1=1)
    d.submit(act("a"))
    (lease,) = d.lease().values()
    assert d.tick(T0 + TTL - 0.001).decisions == []
    out = d.tick(T0 + TTL)
    assert of_type(out.decisions, LeaseRevoked) == [
        LeaseRevoked(worker_id="w1", activity_id="a", token=lease.token, reason="lease_expired")
    ]
    (transition,) = of_type(out.records, Transition)
    assert (transition.from_state, transition.to_state) == (S.LEASED, S.QUEUED)
    assert transition.reason == "lease_expired"
    assert counters(d, "a") == (0, 0, 1)
    assert d.core.registry.workers["w1"].leases == {}


# --- graceful shutdown ------------------------------------------------------------------------


def _busy_w1() -> tuple[Driver, dict[str, Lease]]:
    d = driver(w1=3, w2=2)
    d.submit(act("run"), act("u1"), act("u2"))
    leases = d.lease("w1", n=3)
    d.start(leases["run"])
    return d, leases


def test_shutdown_returns_unstarted_leases_at_once_to_other_workers() -> None:
    d, leases = _busy_w1()
    d.do(cmd.Poll, worker_id="w2", max_items=2)
    d.now = T0 + 1
    out = d.do(cmd.ShutdownWorker, worker_id="w1")
    revoked = of_type(out.decisions, LeaseRevoked)
    assert {(r.activity_id, r.token, r.reason) for r in revoked} == {
        ("u1", leases["u1"].token, "returned"),
        ("u2", leases["u2"].token, "returned"),
    }
    regranted = {
        g.lease.activity_id: g.lease.worker_id for g in of_type(out.decisions, LeaseGranted)
    }
    assert regranted == {"u1": "w2", "u2": "w2"}
    # A graceful return is neither a failure nor a lost-worker requeue.
    assert counters(d, "u1") == (0, 0, 0)
    assert counters(d, "u2") == (0, 0, 0)
    statuses = [r.status for r in of_type(out.records, WorkerUpserted)]
    assert statuses == [WorkerStatus.DRAINING]
    assert d.core.registry.workers["w1"].leases == {"run": leases["run"].token}


def test_draining_worker_finishes_executing_work_then_is_gone() -> None:
    d, leases = _busy_w1()
    d.do(cmd.ShutdownWorker, worker_id="w1")
    before = fingerprint(d.core)
    with pytest.raises(WorkerNotActive):
        d.core.handle(cmd.Poll(now=d.now, worker_id="w1"))
    assert fingerprint(d.core) == before
    # Its executing lease still works: renew, then complete.
    d.now = T0 + 20
    d.do(cmd.RenewLease, activity_id="run", token=leases["run"].token)
    d.now = T0 + 40
    out = d.complete(leases["run"], result=b"r")
    assert of_type(out.decisions, ActivityCompleted)[0].result == b"r"
    (gone,) = of_type(out.records, WorkerUpserted)
    assert (gone.status, gone.at) == (WorkerStatus.GONE, T0 + 40)
    assert worker_status(d, "w1") is WorkerStatus.GONE


def test_shutdown_of_a_worker_without_executing_work_is_gone_at_once_with_one_record() -> None:
    d = driver(w1=2)
    d.submit(act("a"), act("b"))
    d.lease("w1", n=2)
    out = d.do(cmd.ShutdownWorker, worker_id="w1")
    statuses = [r.status for r in of_type(out.records, WorkerUpserted)]
    assert statuses == [WorkerStatus.DRAINING, WorkerStatus.GONE]
    assert worker_status(d, "w1") is WorkerStatus.GONE
    assert d.state("a") is S.QUEUED
    assert d.state("b") is S.QUEUED


def test_shutdown_of_a_busy_worker_while_others_stay_registered_is_accepted() -> None:
    # Its executing work still runs but its slots leave the capacity: running (2) then
    # exceeds capacity (1), which must not break the backpressure utilisation input.
    config = SchedulerConfig(backpressure=BackpressureConfig(elevated_utilization=0.9))
    d = driver(config, w1=2, w2=1)
    d.submit(act("a"), act("b"))
    leases = d.lease("w1", n=2)
    for lease in leases.values():
        d.start(lease)
    d.do(cmd.ShutdownWorker, worker_id="w1")
    assert worker_status(d, "w1") is WorkerStatus.DRAINING
    assert d.core.backpressure.utilization == 1.0
    assert d.core.backpressure.level == "elevated"
    for lease in leases.values():
        d.complete(lease)
    assert worker_status(d, "w1") is WorkerStatus.GONE


def test_reregistration_with_less_concurrency_than_held_leases_is_accepted() -> None:
    d = driver(w1=2)
    d.submit(act("a"), act("b"), act("c"))
    d.lease("w1", n=2)
    d.register("w1", max_concurrency=1)
    assert d.core.capacity == 1
    assert d.poll("w1") == {}  # over its new limit: nothing more
    assert d.state("c") is S.QUEUED


def test_lowering_max_concurrency_shrinks_an_outstanding_poll() -> None:
    d = driver(w1=2)
    d.submit(act("a"))
    d.poll("w1", n=2)  # one lease, one more wanted
    d.register("w1", max_concurrency=1)
    d.submit(act("b"))
    assert d.state("b") is S.QUEUED
    assert d.core.registry.workers["w1"].leases.keys() == {"a"}
    assert "w1" not in d.core.waiting


def test_reregistering_a_draining_worker_adds_no_capacity() -> None:
    d, leases = _busy_w1()
    d.do(cmd.ShutdownWorker, worker_id="w1")
    assert d.core.capacity == 2  # w2 only
    d.register("w1", max_concurrency=3)  # a periodic registration renewal
    assert worker_status(d, "w1") is WorkerStatus.DRAINING
    assert d.core.capacity == 2
    d.complete(leases["run"])
    assert worker_status(d, "w1") is WorkerStatus.GONE
    assert d.core.capacity == 2
    d.register("w1", max_concurrency=3)  # back for real
    assert worker_status(d, "w1") is WorkerStatus.ACTIVE
    assert d.core.capacity == 5


# --- infrastructure failure -------------------------------------------------------------------


def test_workers_lost_fails_each_worker_and_requeues_its_work() -> None:
    d = driver(w1=2, w2=2, w3=1)
    d.submit(act("a"), act("b", idempotent=True), act("c"))
    leases = d.lease("w1", n=2)
    leases |= d.lease("w2", n=1)
    d.start(leases["b"])
    d.now = T0 + 3
    out = d.do(cmd.WorkersLost, worker_ids=("w1", "w2"))
    assert of_type(out.decisions, WorkerFailed) == [
        WorkerFailed(worker_id="w1", reason="infrastructure_failure"),
        WorkerFailed(worker_id="w2", reason="infrastructure_failure"),
    ]
    assert {r.activity_id for r in of_type(out.decisions, LeaseRevoked)} == {"a", "b", "c"}
    assert [worker_status(d, w) for w in ("w1", "w2", "w3")] == [
        WorkerStatus.FAILED,
        WorkerStatus.FAILED,
        WorkerStatus.ACTIVE,
    ]
    assert all(d.state(aid) is S.QUEUED for aid in ("a", "b", "c"))
    assert counters(d, "b") == (1, 0, 1)  # the attempt that started is kept
    assert counters(d, "a") == (0, 0, 1)
    assert d.core.capacity == 1
    assert d.core.running == 0


def test_requeue_preserves_attempt_and_failures_and_counts_infra_apart() -> None:
    retry = RetryPolicy(max_attempts=2, initial_backoff_s=0.0)
    d = driver(w1=1, w2=1)
    d.submit(act("a", idempotent=True, retry=retry))
    (lease,) = d.lease("w1").values()
    d.start(lease)
    d.fail(lease, error_type="Boom")  # failures 1, retried at once
    assert counters(d, "a") == (1, 1, 0)
    for lost in ("w1", "w2"):
        (lease,) = d.lease(lost).values()
        d.start(lease)
        d.do(cmd.WorkersLost, worker_ids=(lost,))
        d.register(lost, max_concurrency=1)
    assert counters(d, "a") == (3, 1, 2)
    assert d.state("a") is S.QUEUED
    (lease,) = d.lease("w1").values()
    assert lease.attempt == 4
    d.start(lease)
    # Two lost workers did not eat the retry budget: this is only the second failure.
    out = d.fail(lease, error_type="Boom")
    (failed,) = of_type(out.decisions, ActivityFailed)
    assert (failed.reason, failed.attempt, failed.may_have_executed) == (
        "retries_exhausted",
        4,
        False,
    )


# --- lost while executing ---------------------------------------------------------------------


def _silence_w1(d: Driver) -> Any:
    """Every worker but w1 heartbeats; then w1's liveness deadline passes."""
    deadline = T0 + 3600 * 3  # Driver.register: 3600 s interval; 3 misses by default
    d.now = deadline - 1
    for worker_id in d.core.registry.workers:
        if worker_id != "w1":
            d.do(cmd.Heartbeat, worker_id=worker_id)
    return d.tick(deadline)


LossCause = Callable[[Driver], Any]
LOSS_CAUSES: dict[str, LossCause] = {
    "workers_lost": lambda d: d.do(cmd.WorkersLost, worker_ids=("w1",)),
    "lease_expired": lambda d: d.tick(T0 + TTL),
    "missed_heartbeats": _silence_w1,
}


@pytest.mark.parametrize("cause", list(LOSS_CAUSES), ids=list(LOSS_CAUSES))
def test_non_idempotent_executing_activity_of_a_lost_worker_fails_may_have_executed(
    cause: str,
) -> None:
    d = Driver(SchedulerConfig(lease_ttl_s=TTL if cause != "missed_heartbeats" else 10**6))
    d.register("w1", max_concurrency=1)
    d.register("w2", max_concurrency=1)
    d.submit(act("a", workflow_id="wf", correlation_id="c"))
    (lease,) = d.lease("w1").values()
    d.start(lease)
    d.do(cmd.Poll, worker_id="w2")  # another worker waits: nothing must be rerun on it
    d.decisions.clear()
    LOSS_CAUSES[cause](d)
    (failed,) = of_type(d.decisions, ActivityFailed)
    assert failed.activity_id == "a"
    assert failed.reason == "may_have_executed"
    assert failed.may_have_executed is True
    assert (failed.workflow_id, failed.correlation_id, failed.attempt) == ("wf", "c", 1)
    assert of_type(d.decisions, LeaseGranted) == []
    assert worker_status(d, "w2") is WorkerStatus.ACTIVE
    assert "w2" in d.core.waiting
    assert d.state("a") is S.FAILED
    (transition,) = [r for r in of_type(d.records, Transition) if r.to_state is S.FAILED]
    assert transition.from_state is S.EXECUTING


@pytest.mark.parametrize("cause", list(LOSS_CAUSES), ids=list(LOSS_CAUSES))
@pytest.mark.parametrize(
    "spec",
    [
        {"idempotent": True},
        {"retry": RetryPolicy(restart_on_abandon=True)},
    ],
    ids=["idempotent", "restart_on_abandon"],
)
def test_abandoned_executing_activity_is_requeued_when_safe_or_allowed(
    cause: str, spec: dict[str, Any]
) -> None:
    d = Driver(SchedulerConfig(lease_ttl_s=TTL if cause != "missed_heartbeats" else 10**6))
    d.register("w1", max_concurrency=1)
    d.submit(act("a", **spec))
    (lease,) = d.lease("w1").values()
    d.start(lease)
    d.decisions.clear()
    LOSS_CAUSES[cause](d)
    assert of_type(d.decisions, ActivityFailed) == []
    assert d.state("a") is S.QUEUED
    assert counters(d, "a") == (1, 0, 1)


def test_non_idempotent_unstarted_activity_of_a_lost_worker_is_requeued() -> None:
    d = driver(w1=1)
    d.submit(act("a"))
    d.lease("w1")
    d.do(cmd.WorkersLost, worker_ids=("w1",))
    assert d.state("a") is S.QUEUED
    assert counters(d, "a") == (0, 0, 1)


@pytest.mark.parametrize("bound", [0, 1, 3])
def test_infra_requeues_are_bounded_by_infra_requeues_max(bound: int) -> None:
    d = Driver(SchedulerConfig(lease_ttl_s=TTL, infra_requeues_max=bound))
    d.submit(act("a"))
    for n in range(bound + 1):
        d.register("w1", max_concurrency=1)
        assert list(d.lease("w1")) == ["a"]
        d.do(cmd.WorkersLost, worker_ids=("w1",))
        if n < bound:
            assert d.state("a") is S.QUEUED
            assert counters(d, "a") == (0, 0, n + 1)
    (failed,) = of_type(d.decisions, ActivityFailed)
    assert (failed.reason, failed.may_have_executed) == ("infra_requeues_exhausted", False)
    assert d.state("a") is S.FAILED


# --- retries ----------------------------------------------------------------------------------


def test_retry_with_backoff_is_delayed_then_queued_on_tick() -> None:
    retry = RetryPolicy(
        max_attempts=4, initial_backoff_s=2.0, backoff_coefficient=3.0, jitter_fraction=0.0
    )
    d = driver(w1=1)
    d.submit(act("a", retry=retry))
    expected_delays = [2.0, 6.0, 18.0]
    for attempt, delay in enumerate(expected_delays, start=1):
        (lease,) = d.lease().values()
        assert lease.attempt == attempt
        d.start(lease)
        out = d.fail(lease, error_type="Boom", message="no")
        assert of_type(out.decisions, RetryScheduled) == [
            RetryScheduled(activity_id="a", attempt=attempt + 1, not_before=d.now + delay)
        ]
        (transition,) = of_type(out.records, Transition)
        assert (transition.to_state, transition.not_before) == (S.DELAYED, d.now + delay)
        assert transition.error == "Boom: no"
        due = d.now + delay
        d.tick(due - d.core.config.early_grant_s - 0.001)
        assert d.state("a") is S.DELAYED
        assert d.lease() == {}
        out = d.tick(due)
        assert d.state("a") is S.QUEUED
        assert [r.reason for r in of_type(out.records, Transition)] == ["timer"]
    assert counters(d, "a") == (3, 3, 0)


def test_backoff_is_capped_by_max_backoff() -> None:
    retry = RetryPolicy(
        max_attempts=10,
        initial_backoff_s=4.0,
        backoff_coefficient=10.0,
        max_backoff_s=50.0,
        jitter_fraction=0.0,
    )
    d = driver(w1=1)
    d.submit(act("a", retry=retry))
    delays = []
    for _ in range(3):
        (lease,) = d.lease().values()
        d.start(lease)
        (scheduled,) = of_type(d.fail(lease).decisions, RetryScheduled)
        delays.append(scheduled.not_before - d.now)
        d.tick(scheduled.not_before)
    assert delays == [4.0, 40.0, 50.0]


def test_backoff_that_would_overflow_is_capped_too() -> None:
    retry = RetryPolicy(backoff_coefficient=1e200, max_attempts=5, max_backoff_s=60.0)
    d = driver(w1=1)
    d.submit(act("a", retry=retry))
    for _ in range(3):
        (lease,) = d.lease().values()
        d.start(lease)
        (scheduled,) = of_type(d.fail(lease).decisions, RetryScheduled)
        assert 0 < scheduled.not_before - d.now <= 60.0
        d.tick(scheduled.not_before)
    a = d.core.activities["a"]
    assert a.failures == 3
    assert retry_delay_s(a) <= 60.0


def test_jittered_backoff_is_deterministic_and_within_the_fraction() -> None:
    retry = RetryPolicy(initial_backoff_s=10.0, jitter_fraction=0.5, max_attempts=2)

    def first_delay(activity_id: str) -> float:
        d = driver(w1=1)
        d.submit(act(activity_id, retry=retry))
        (lease,) = d.lease().values()
        d.start(lease)
        (scheduled,) = of_type(d.fail(lease).decisions, RetryScheduled)
        return scheduled.not_before - d.now

    delays = [first_delay(f"a{i}") for i in range(20)]
    assert all(5.0 <= delay <= 10.0 for delay in delays)
    assert len(set(delays)) > 1
    assert delays == [first_delay(f"a{i}") for i in range(20)]


def test_zero_backoff_retry_is_queued_at_once() -> None:
    d = driver(w1=1)
    d.submit(act("a", retry=RetryPolicy(initial_backoff_s=0.0)))
    (lease,) = d.lease().values()
    d.start(lease)
    out = d.fail(lease)
    (transition,) = of_type(out.records, Transition)
    assert (transition.from_state, transition.to_state, transition.reason) == (
        S.EXECUTING,
        S.QUEUED,
        "retry",
    )
    assert of_type(out.decisions, RetryScheduled) == [
        RetryScheduled(activity_id="a", attempt=2, not_before=d.now)
    ]


@pytest.mark.parametrize(
    ("error_type", "retryable"),
    [("Fatal", True), ("Boom", False)],
    ids=["listed-in-policy", "reported-not-retryable"],
)
def test_non_retryable_error_fails_at_once(error_type: str, retryable: bool) -> None:
    retry = RetryPolicy(max_attempts=5, non_retryable_errors=frozenset({"Fatal"}))
    d = driver(w1=1)
    d.submit(act("a", retry=retry))
    (lease,) = d.lease().values()
    d.start(lease)
    out = d.fail(lease, error_type=error_type, message="m", retryable=retryable)
    (failed,) = of_type(out.decisions, ActivityFailed)
    assert (failed.reason, failed.error_type, failed.message, failed.attempt) == (
        "non_retryable",
        error_type,
        "m",
        1,
    )
    assert failed.may_have_executed is False
    assert of_type(out.decisions, RetryScheduled) == []
    assert d.state("a") is S.FAILED


def test_retries_exhausted_after_max_attempts() -> None:
    d = driver(w1=1)
    d.submit(act("a", retry=RetryPolicy(max_attempts=2, initial_backoff_s=0.0)))
    for _ in range(2):
        (lease,) = d.lease().values()
        d.start(lease)
        out = d.fail(lease, error_type="Boom")
    (failed,) = of_type(out.decisions, ActivityFailed)
    assert (failed.reason, failed.attempt) == ("retries_exhausted", 2)
    assert d.state("a") is S.FAILED
    assert len(of_type(d.decisions, RetryScheduled)) == 1


def test_single_attempt_policy_never_retries() -> None:
    d = driver(w1=1)
    d.submit(act("a", retry=RetryPolicy(max_attempts=1)))
    (lease,) = d.lease().values()
    d.start(lease)
    (failed,) = of_type(d.fail(lease).decisions, ActivityFailed)
    assert failed.reason == "retries_exhausted"
