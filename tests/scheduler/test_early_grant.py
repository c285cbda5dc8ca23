"""Early grants: a delayed activity joins the queue ``early_grant_s`` before its instant,
and a grant made before the instant carries it (``LeaseGranted.not_before``)."""

from __future__ import annotations

import math

import pytest
from _core_helpers import T0, Driver, act, of_type

from wf.errors import InvalidArgument
from wf.scheduler import commands as cmd
from wf.scheduler.config import SchedulerConfig, StealingConfig
from wf.scheduler.dispatcher import START_AHEAD_MAX_S
from wf.scheduler.model import ActivityState as S
from wf.scheduler.model import RetryPolicy
from wf.scheduler.outputs import LeaseGranted, Transition

LEAD = SchedulerConfig().early_grant_s


def granted(out_decisions: list[object]) -> dict[str, LeaseGranted]:
    return {g.lease.activity_id: g for g in of_type(out_decisions, LeaseGranted)}


def test_the_default_lead_is_a_small_positive_fraction_of_a_second() -> None:
    assert 0 < LEAD <= 0.1


def test_a_waiting_worker_gets_a_delayed_activity_early_with_its_instant() -> None:
    d = Driver()
    d.register("w1", max_concurrency=2)
    due = T0 + 10
    d.submit(act("a", not_before=due, idempotent=True))
    d.do(cmd.Poll, worker_id="w1", max_items=2, start=2)
    assert d.core.next_wake_at(d.now) == due - LEAD
    assert d.tick(due - LEAD - 0.001).decisions == []
    assert d.state("a") is S.DELAYED
    out = d.tick(due - LEAD)
    (grant,) = granted(out.decisions).values()
    assert grant.not_before == due
    assert grant.may_restart is True
    # The poll offered starts: the grant is committed as the start, and the worker
    # begins the activity at not_before on its own timer (no start round trip then).
    assert grant.started is True
    assert d.state("a") is S.EXECUTING
    assert [(r.from_state, r.to_state, r.reason) for r in of_type(out.records, Transition)] == [
        (S.DELAYED, S.QUEUED, "timer"),
        (S.QUEUED, S.LEASED, "granted"),
        (S.LEASED, S.EXECUTING, "started"),
    ]


def test_an_early_grant_due_further_ahead_than_the_bound_waits_leased() -> None:
    lead = START_AHEAD_MAX_S * 2
    d = Driver(SchedulerConfig(early_grant_s=lead))
    d.register("w1", max_concurrency=1)
    due = T0 + 10
    d.submit(act("a", not_before=due))
    d.do(cmd.Poll, worker_id="w1", max_items=1, start=1)
    (grant,) = granted(d.tick(due - lead).decisions).values()
    # Too far ahead to be committed as the start: the worker reports it at the instant.
    assert (grant.not_before, grant.started) == (due, False)
    assert d.state("a") is S.LEASED
    assert "w1" not in d.core.waiting  # the slot is taken all the same


def test_an_early_grant_without_start_demand_waits_leased_for_its_instant() -> None:
    d = Driver()
    d.register("w1", max_concurrency=2)
    due = T0 + 10
    d.submit(act("a", not_before=due))
    d.do(cmd.Poll, worker_id="w1", max_items=2, start=0)
    (grant,) = granted(d.tick(due - LEAD).decisions).values()
    assert (grant.not_before, grant.started) == (due, False)
    assert d.state("a") is S.LEASED


def test_zero_lead_queues_at_the_instant_and_grants_without_not_before() -> None:
    d = Driver(SchedulerConfig(early_grant_s=0))
    d.register("w1", max_concurrency=1)
    due = T0 + 10
    d.submit(act("a", not_before=due))
    d.do(cmd.Poll, worker_id="w1", max_items=1)
    assert d.core.next_wake_at(d.now) == due
    assert d.tick(due - 0.001).decisions == []
    (grant,) = granted(d.tick(due).decisions).values()
    assert grant.not_before is None


def test_a_grant_after_the_instant_carries_no_not_before_and_may_start_on_grant() -> None:
    d = Driver()
    d.register("w1", max_concurrency=1)
    due = T0 + 10
    d.submit(act("a", not_before=due, idempotent=True))
    d.tick(due - LEAD)
    assert d.state("a") is S.QUEUED  # early, but nobody was waiting
    d.now = due + 1
    (grant,) = granted(d.do(cmd.Poll, worker_id="w1", max_items=1, start=1).decisions).values()
    assert grant.not_before is None
    assert grant.started is True
    assert d.state("a") is S.EXECUTING


def test_an_early_queued_activity_keeps_its_fifo_place_and_its_instant() -> None:
    d = Driver()
    d.register("w1", max_concurrency=1)
    due = T0 + 10
    d.submit(act("later", not_before=due))
    d.tick(due - LEAD)
    d.submit(act("now"))
    (grant,) = granted(d.do(cmd.Poll, worker_id="w1", max_items=1).decisions).values()
    # FIFO within a priority: the early one was queued first, and it is taken first.
    assert grant.lease.activity_id == "later"
    assert grant.not_before == due


def test_a_retry_backoff_is_granted_early_too() -> None:
    d = Driver()
    d.register("w1", max_concurrency=1)
    d.submit(act("a", retry=RetryPolicy(max_attempts=2, initial_backoff_s=2.0)))
    (lease,) = d.lease("w1").values()
    d.start(lease)
    d.fail(lease, error_type="Boom", message="no")
    due = d.core.activities["a"].not_before
    assert due is not None
    assert due > d.now
    d.do(cmd.Poll, worker_id="w1", max_items=1)
    (grant,) = granted(d.tick(due - LEAD).decisions).values()
    assert (grant.not_before, grant.lease.attempt) == (due, 2)


def test_an_early_grant_waiting_for_its_instant_is_never_stolen() -> None:
    d = Driver(SchedulerConfig(stealing=StealingConfig(enabled=True)))
    d.register("victim", max_concurrency=3)
    due = T0 + 10
    d.submit(*(act(f"a{i}", not_before=due) for i in range(3)))
    d.do(cmd.Poll, worker_id="victim", max_items=3)
    first = granted(d.tick(due - LEAD).decisions)
    assert set(first) == {"a0", "a1", "a2"}
    d.register("thief", max_concurrency=1)
    # Before the instant the victim holds them to start on time: nothing moves.
    assert granted(d.do(cmd.Poll, worker_id="thief", max_items=1).decisions) == {}
    assert d.core.activities["a2"].worker_id == "victim"
    # Past the instant an unstarted one is ordinary backlog again, and may move.
    d.now = due + 1
    (grant,) = granted(d.do(cmd.Poll, worker_id="thief", max_items=1).decisions).values()
    assert grant.lease.worker_id == "thief"
    assert grant.not_before is None


@pytest.mark.parametrize("lead", [-0.1, math.nan, math.inf, 61.0])
def test_an_out_of_range_lead_is_refused(lead: float) -> None:
    with pytest.raises(InvalidArgument) as err:
        SchedulerConfig(early_grant_s=lead)
    assert err.value.code == "invalid_argument"
    assert err.value.details["field"] == "early_grant_s"


def test_a_lead_as_long_as_the_lease_ttl_is_refused() -> None:
    with pytest.raises(InvalidArgument) as err:
        SchedulerConfig(lease_ttl_s=1.0, early_grant_s=1.0)
    assert err.value.details["field"] == "early_grant_s"
