"""Starts without a round trip: ``Poll.start`` and ``unreported_start``.

A worker with idle execution slots says how many of its grants it starts on
receipt. The core then records ``LEASED`` and ``EXECUTING`` in the same
outcome, for every activity, so one commit holds both and the
``StartActivity`` round trip disappears. A started grant that never reaches
its worker is lost while ``EXECUTING``: an activity that may run again is
requeued, any other fails with ``may_have_executed`` and never runs twice
(docs/architecture.md, "Start on grant").
"""

from __future__ import annotations

import pytest
from _core_helpers import T0, Driver, act, fingerprint, of_type

from wf.errors import IllegalTransition, InvalidArgument
from wf.scheduler import commands as cmd
from wf.scheduler.config import SchedulerConfig
from wf.scheduler.model import ActivityState, RetryPolicy
from wf.scheduler.outputs import ActivityFailed, LeaseGranted, LeaseRevoked, Transition

S = ActivityState
TTL = 30.0


def granted(d: Driver, n: int, start: int) -> list[LeaseGranted]:
    out = d.do(cmd.Poll, worker_id="w1", max_items=n, start=start)
    return of_type(out.decisions, LeaseGranted)


def test_an_idempotent_grant_is_its_start_in_one_outcome() -> None:
    d = Driver()
    d.register("w1", max_concurrency=2)
    d.submit(act("a", idempotent=True))
    out = d.do(cmd.Poll, worker_id="w1", max_items=1, start=1)
    (grant,) = of_type(out.decisions, LeaseGranted)
    assert grant.started
    steps = [(r.from_state, r.to_state, r.reason) for r in of_type(out.records, Transition)]
    assert steps[-2:] == [(S.QUEUED, S.LEASED, "granted"), (S.LEASED, S.EXECUTING, "started")]
    a = d.core.activities["a"]
    assert (a.state, a.attempt) == (S.EXECUTING, 1)
    # The worker never sends StartActivity for it; one that arrives anyway is refused.
    with pytest.raises(IllegalTransition):
        d.core.handle(cmd.StartActivity(now=d.now, activity_id="a", token=grant.lease.token))
    d.complete(grant.lease, result=b"ok")
    assert d.core.finished["a"] is S.COMPLETED


def test_restart_on_abandon_counts_as_safe_to_start_on_grant() -> None:
    d = Driver()
    d.register("w1")
    d.submit(act("a", retry=RetryPolicy(restart_on_abandon=True)))
    (grant,) = granted(d, 1, start=1)
    assert grant.started


def test_a_non_idempotent_grant_for_an_idle_slot_is_its_start_too() -> None:
    d = Driver()
    d.register("w1")
    d.submit(act("a"))
    out = d.do(cmd.Poll, worker_id="w1", max_items=1, start=1)
    (grant,) = of_type(out.decisions, LeaseGranted)
    assert (grant.started, grant.may_restart) == (True, False)
    steps = [(r.from_state, r.to_state, r.reason) for r in of_type(out.records, Transition)]
    assert steps[-2:] == [(S.QUEUED, S.LEASED, "granted"), (S.LEASED, S.EXECUTING, "started")]
    assert (d.core.activities["a"].state, d.core.activities["a"].attempt) == (S.EXECUTING, 1)
    d.complete(grant.lease, result=b"ok")
    assert d.core.finished["a"] is S.COMPLETED


def test_a_non_idempotent_grant_without_start_keeps_the_explicit_start() -> None:
    d = Driver()
    d.register("w1")
    d.submit(act("a"))
    (grant,) = granted(d, 1, start=0)
    assert not grant.started
    assert d.core.activities["a"].state is S.LEASED
    d.start(grant.lease)
    assert d.core.activities["a"].state is S.EXECUTING


def test_a_started_non_idempotent_grant_that_never_arrived_fails_closed() -> None:
    d = Driver(SchedulerConfig(lease_ttl_s=TTL))
    d.register("w1")
    d.submit(act("a"))
    (grant,) = granted(d, 1, start=1)
    assert grant.started
    # The window: committed as started, the answer never reached the worker. The
    # core cannot tell that from a worker that ran it and died, so it discloses.
    d.now = T0 + TTL + 1
    out = d.do(cmd.Tick)
    (failed,) = of_type(out.decisions, ActivityFailed)
    assert (failed.activity_id, failed.may_have_executed) == ("a", True)
    assert not of_type(out.decisions, LeaseGranted)
    assert d.core.finished["a"] is S.FAILED


def test_a_started_non_idempotent_grant_is_never_returned_by_a_graceful_shutdown() -> None:
    d = Driver()
    d.register("w1", max_concurrency=2)
    d.submit(act("a"), act("b"))
    grants = granted(d, 2, start=1)
    assert [g.started for g in grants] == [True, False]
    out = d.do(cmd.ShutdownWorker, worker_id="w1")
    # Only the unstarted lease goes back; the started one is the worker's to run.
    revoked = [r.activity_id for r in of_type(out.decisions, LeaseRevoked)]
    assert revoked == [grants[1].lease.activity_id]
    assert d.core.activities[grants[0].lease.activity_id].state is S.EXECUTING


def test_only_start_many_grants_are_started_the_rest_wait_for_a_slot() -> None:
    d = Driver()
    d.register("w1", max_concurrency=4)
    d.submit(*(act(f"a{i}", idempotent=True) for i in range(3)))
    grants = granted(d, 3, start=2)
    assert [g.started for g in grants] == [True, True, False]
    states = [d.core.activities[g.lease.activity_id].state for g in grants]
    assert states == [S.EXECUTING, S.EXECUTING, S.LEASED]


def test_without_start_nothing_changes() -> None:
    d = Driver()
    d.register("w1")
    d.submit(act("a", idempotent=True))
    (grant,) = granted(d, 1, start=0)
    assert not grant.started
    assert d.core.activities["a"].state is S.LEASED


def test_start_demand_lasts_for_the_poll_that_gave_it() -> None:
    d = Driver()
    d.register("w1", max_concurrency=4)
    assert granted(d, 2, start=1) == []  # nothing queued: the demand waits
    d.submit(act("a", idempotent=True))
    d.submit(act("b", idempotent=True))
    started = [g.started for g in of_type(d.decisions, LeaseGranted)]
    assert started == [True, False]


@pytest.mark.parametrize("start", [-1, 2])
def test_start_out_of_range_is_refused_and_changes_nothing(start: int) -> None:
    d = Driver()
    d.register("w1")
    d.submit(act("a", idempotent=True))
    before = fingerprint(d.core)
    with pytest.raises(InvalidArgument) as info:
        d.core.handle(cmd.Poll(now=d.now, worker_id="w1", max_items=1, start=start))
    assert info.value.details["field"] == "start"
    assert fingerprint(d.core) == before


def test_a_started_grant_that_never_arrived_expires_and_is_requeued() -> None:
    d = Driver(SchedulerConfig(lease_ttl_s=TTL))
    d.register("w1")
    d.submit(act("a", idempotent=True))
    (grant,) = granted(d, 1, start=1)
    assert grant.started
    # The answer carrying it is lost: no renewal, no result.
    d.now = T0 + TTL + 1
    out = d.do(cmd.Tick)
    assert not of_type(out.decisions, ActivityFailed)
    a = d.core.activities["a"]
    assert a.state in (S.QUEUED, S.DELAYED, S.READY)


def test_a_worker_whose_lease_lapsed_gets_nothing_more_until_it_polls_again() -> None:
    d = Driver(SchedulerConfig(lease_ttl_s=TTL))
    d.register("w1", max_concurrency=2)
    d.submit(act("a", idempotent=True))
    (grant,) = granted(d, 2, start=2)  # one grant, one more slot still asked for
    assert grant.started
    # w1 dies with its poll open: the lease lapses and the requeued activity must
    # not go back to the same stale poll (a start that would never happen).
    d.now = T0 + TTL + 1
    out = d.do(cmd.Tick)
    assert not of_type(out.decisions, LeaseGranted)
    assert d.core.activities["a"].state is S.QUEUED
    assert "w1" not in d.core.waiting
    # A live w1 polls again and gets it.
    (again,) = granted(d, 1, start=1)
    assert (again.lease.activity_id, again.started) == ("a", True)


# --- a result that carries its own start ------------------------------------------------------


def test_a_may_restart_grant_says_so_and_its_result_may_carry_the_start() -> None:
    d = Driver()
    d.register("w1")
    d.submit(act("a", idempotent=True))
    (grant,) = granted(d, 1, start=0)
    assert (grant.started, grant.may_restart) == (False, True)
    out = d.do(
        cmd.Complete,
        activity_id="a",
        token=grant.lease.token,
        result=b"ok",
        unreported_start=True,
    )
    steps = [(r.from_state, r.to_state, r.reason) for r in of_type(out.records, Transition)]
    assert steps == [
        (S.LEASED, S.EXECUTING, "started"),
        (S.EXECUTING, S.COMPLETED, "completed"),
    ]
    assert d.core.finished["a"] is S.COMPLETED


def test_a_failure_may_carry_the_start_and_counts_one_attempt() -> None:
    d = Driver()
    d.register("w1")
    d.submit(act("a", idempotent=True, retry=RetryPolicy(max_attempts=3, jitter_fraction=0.0)))
    (grant,) = granted(d, 1, start=0)
    d.do(
        cmd.Fail,
        activity_id="a",
        token=grant.lease.token,
        error_type="Boom",
        unreported_start=True,
    )
    a = d.core.activities["a"]
    assert (a.attempt, a.failures) == (1, 1)
    assert a.state in (S.DELAYED, S.QUEUED)


def test_a_result_after_a_reported_start_may_still_say_unreported() -> None:
    # The deferred report and the result crossed: the start is simply already there.
    d = Driver()
    d.register("w1")
    d.submit(act("a", idempotent=True))
    (grant,) = granted(d, 1, start=0)
    d.start(grant.lease)
    out = d.do(cmd.Complete, activity_id="a", token=grant.lease.token, unreported_start=True)
    steps = [(r.from_state, r.to_state) for r in of_type(out.records, Transition)]
    assert steps == [(S.EXECUTING, S.COMPLETED)]
    assert d.core.finished["a"] is S.COMPLETED


def test_an_activity_that_must_not_run_twice_cannot_skip_its_start() -> None:
    d = Driver()
    d.register("w1")
    d.submit(act("a"))
    (grant,) = granted(d, 1, start=0)
    assert not grant.may_restart
    before = fingerprint(d.core)
    with pytest.raises(IllegalTransition):
        d.core.handle(
            cmd.Complete(now=d.now, activity_id="a", token=grant.lease.token, unreported_start=True)
        )
    assert fingerprint(d.core) == before


# --- start_on_grant="may_restart": the acknowledged start for the others -------------------


def test_may_restart_mode_keeps_the_explicit_start_for_non_idempotent_grants() -> None:
    d = Driver(SchedulerConfig(lease_ttl_s=TTL, start_on_grant="may_restart"))
    d.register("w1", max_concurrency=2)
    d.submit(act("plain"), act("safe", idempotent=True))
    grants = {g.lease.activity_id: g for g in granted(d, 2, start=2)}
    assert (grants["plain"].started, grants["safe"].started) == (False, True)
    assert d.core.activities["plain"].state is S.LEASED
    # Its answer lost, the unstarted grant is simply requeued: nothing to disclose.
    d.now = T0 + TTL + 1
    out = d.do(cmd.Tick)
    assert not of_type(out.decisions, ActivityFailed)
    assert d.state("plain") is S.QUEUED


def test_the_core_default_is_start_on_grant_for_any_activity() -> None:
    assert SchedulerConfig().start_on_grant is None
    d = Driver()
    d.register("w1")
    d.submit(act("a"))
    (grant,) = granted(d, 1, start=1)
    assert grant.started
