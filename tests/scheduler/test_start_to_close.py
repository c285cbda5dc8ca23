"""The execution timeout: an attempt executing longer than its ``start_to_close_s``
(the submission's, else the lease holder's declaration) has its lease revoked and
counts as a failed attempt, retried by its policy (docs/server.md, "Execution
timeout").

Every instant is the command's ``now`` (virtual time): the timeout fires at exactly
its deadline, survives a snapshot and restore, and counts again from the recovery
instant after a recovery from the store, which keeps no start instant.
"""

from __future__ import annotations

import pytest
from _core_helpers import T0, Driver, act, of_type

from wf.errors import InvalidArgument, StaleLease
from wf.scheduler import commands as cmd
from wf.scheduler.config import SchedulerConfig
from wf.scheduler.model import ActivityDefaults, ActivityState, RetryPolicy, TransitionReason
from wf.scheduler.outputs import (
    ActivityFailed,
    LeaseGranted,
    LeaseRevoked,
    RetryScheduled,
    Transition,
)
from wf.scheduler.recovery import restore, snapshot

S = ActivityState
R = TransitionReason
TTL = 600.0
"""Longer than every limit here: what ends an attempt is its timeout, not its lease."""
NO_JITTER = RetryPolicy(max_attempts=2, initial_backoff_s=3.0, jitter_fraction=0.0)


def started(d: Driver, worker_id: str = "w1") -> LeaseGranted:
    """Grant one activity as its start (an idle slot: start on grant)."""
    out = d.do(cmd.Poll, worker_id=worker_id, max_items=1, start=1)
    (grant,) = of_type(out.decisions, LeaseGranted)
    assert grant.started
    return grant


def driver() -> Driver:
    d = Driver(SchedulerConfig(lease_ttl_s=TTL))
    d.register("w1")
    return d


def test_the_attempt_times_out_at_its_deadline_and_is_retried_by_its_policy() -> None:
    d = driver()
    d.submit(act("a", start_to_close_s=10.0, retry=NO_JITTER))
    grant = started(d)
    assert d.core.next_wake_at(T0) == T0 + 10.0
    assert d.tick(T0 + 9.999).records == []
    out = d.tick(T0 + 10.0)
    (revoked,) = of_type(out.decisions, LeaseRevoked)
    assert (revoked.worker_id, revoked.token, revoked.reason) == (
        "w1",
        grant.lease.token,
        "start_to_close_timeout",
    )
    (record,) = of_type(out.records, Transition)
    assert (record.from_state, record.to_state, record.reason) == (
        S.EXECUTING,
        S.DELAYED,
        R.START_TO_CLOSE_TIMEOUT,
    )
    assert record.failures == 1
    assert record.error == "StartToCloseTimeout: not finished within 10 s of starting"
    (retry,) = of_type(out.decisions, RetryScheduled)
    assert (retry.attempt, retry.not_before) == (2, T0 + 13.0)
    # The slot is free again, and the late result of the timed-out attempt is fenced.
    assert not d.core.registry.workers["w1"].leases
    with pytest.raises(StaleLease):
        d.complete(grant.lease)


def test_the_last_attempt_fails_for_good_saying_it_may_have_executed() -> None:
    d = driver()
    d.submit(act("a", start_to_close_s=5.0, retry=RetryPolicy(max_attempts=1)))
    started(d)
    out = d.tick(T0 + 5.0)
    (failed,) = of_type(out.decisions, ActivityFailed)
    assert (failed.reason, failed.error_type, failed.may_have_executed) == (
        "retries_exhausted",
        "StartToCloseTimeout",
        True,
    )
    assert d.state("a") is S.FAILED


def test_an_attempt_that_ends_in_time_leaves_a_stale_entry_that_does_nothing() -> None:
    d = driver()
    d.submit(act("a", start_to_close_s=5.0), act("b", start_to_close_s=5.0))
    first = started(d)
    d.now = T0 + 1.0
    d.complete(first.lease)
    # The second starts later, in the slot the first freed: its own deadline counts.
    d.do(cmd.Poll, worker_id="w1", max_items=1, start=1)
    assert d.tick(T0 + 5.0).decisions == []
    assert d.state("b") is S.EXECUTING
    (revoked,) = of_type(d.tick(T0 + 6.0).decisions, LeaseRevoked)
    assert revoked.activity_id == "b"


def test_a_start_reported_by_the_worker_arms_the_timeout_from_that_instant() -> None:
    d = driver()
    d.submit(act("a", start_to_close_s=5.0))
    (lease,) = d.lease("w1").values()  # a grant that is not its start
    assert d.core.next_wake_at(T0) != T0 + 5.0
    d.now = T0 + 2.0
    d.start(lease)
    assert d.tick(T0 + 6.999).decisions == []
    assert of_type(d.tick(T0 + 7.0).decisions, LeaseRevoked)


def test_the_holders_declaration_applies_when_the_submission_leaves_it_unsaid() -> None:
    d = Driver(SchedulerConfig(lease_ttl_s=TTL))
    d.register("w1", declared={"t": ActivityDefaults(start_to_close_s=4.0)})
    d.submit(act("unsaid"), act("own", start_to_close_s=60.0))
    started(d)
    started(d)
    out = d.tick(T0 + 4.0)
    assert [r.activity_id for r in of_type(out.decisions, LeaseRevoked)] == ["unsaid"]
    assert d.state("own") is S.EXECUTING


def test_without_any_limit_an_attempt_runs_as_long_as_its_lease_lives() -> None:
    d = driver()
    d.submit(act("a"))
    started(d)
    assert d.core.run_deadlines == []
    assert d.tick(T0 + TTL - 1.0).decisions == []
    assert d.state("a") is S.EXECUTING


def test_the_deadline_survives_a_snapshot_and_restore() -> None:
    d = driver()
    d.submit(act("a", start_to_close_s=10.0, retry=NO_JITTER))
    started(d)
    d.tick(T0 + 4.0)
    core = restore(snapshot(d.core))
    assert core.next_wake_at(T0 + 4.0) == T0 + 10.0
    out = core.handle(cmd.Tick(now=T0 + 10.0))
    assert of_type(out.decisions, LeaseRevoked)


def test_after_a_recovery_from_the_store_the_limit_counts_from_the_recovery() -> None:
    d = driver()
    d.submit(act("a", start_to_close_s=10.0, retry=NO_JITTER))
    started(d)
    # A store keeps no armed deadline (nor any start instant): recovery arms it anew.
    core = restore(snapshot(d.core))
    core.run_deadlines.clear()
    core.handle(cmd.Recover(now=T0 + 30.0))
    assert core.next_wake_at(T0 + 30.0) == T0 + 40.0
    assert not of_type(core.handle(cmd.Tick(now=T0 + 39.0)).decisions, LeaseRevoked)
    assert of_type(core.handle(cmd.Tick(now=T0 + 40.0)).decisions, LeaseRevoked)


def test_a_limit_that_is_not_a_positive_number_is_refused() -> None:
    d = driver()
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(InvalidArgument, match="start_to_close_s") as refused:
            d.submit(act("a", start_to_close_s=bad))
        assert refused.value.details["field"] == "start_to_close_s"
    assert "a" not in d.core.activities
