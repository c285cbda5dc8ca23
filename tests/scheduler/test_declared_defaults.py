"""Declared defaults: ``@activity(idempotent=..., retry=..., schedule_to_start_s=...)``
travels with the worker's registration (``WorkerInfo.declared``) and applies to
submissions that leave the field unsaid: idempotency and retry resolved against the
worker holding the lease, the schedule-to-start timeout written into the activity when
it is accepted (docs/server.md, "Declared defaults"). Precedence: submission field >
declared default > server default.
"""

from __future__ import annotations

from typing import Any

from _core_helpers import T0, Driver, act, of_type

from wf.scheduler import commands as cmd
from wf.scheduler.config import SchedulerConfig
from wf.scheduler.model import ActivityDefaults, ActivityState, RetryPolicy
from wf.scheduler.outputs import (
    ActivityFailed,
    ActivitySubmitted,
    LeaseGranted,
    RetryScheduled,
    Transition,
)
from wf.scheduler.recovery import restore, snapshot

S = ActivityState
TTL = 30.0
IDEMPOTENT = {"t": ActivityDefaults(idempotent=True)}


def grant_to(d: Driver, worker_id: str, start: int = 0) -> LeaseGranted:
    out = d.do(cmd.Poll, worker_id=worker_id, max_items=1, start=start)
    (grant,) = of_type(out.decisions, LeaseGranted)
    return grant


def lose_lease(d: Driver, grant: LeaseGranted) -> list[Any]:
    """The started lease lapses (its worker went silent); returns the tick's decisions."""
    d.now = T0 + TTL + 1
    return d.do(cmd.Tick).decisions


def test_an_unsaid_submission_inherits_the_holders_declared_idempotency() -> None:
    d = Driver(SchedulerConfig(lease_ttl_s=TTL))
    d.register("w1", declared=IDEMPOTENT)
    d.submit(act("a"))
    assert d.core.activities["a"].idempotent is None
    grant = grant_to(d, "w1", start=1)
    assert (grant.started, grant.may_restart) == (True, True)
    decisions = lose_lease(d, grant)
    # Idempotent by declaration: the lost execution is requeued, not failed closed.
    assert not of_type(decisions, ActivityFailed)
    assert d.state("a") is S.QUEUED


def test_the_submission_field_wins_over_the_declaration() -> None:
    d = Driver(SchedulerConfig(lease_ttl_s=TTL))
    d.register("w1", declared=IDEMPOTENT)
    d.submit(act("a", idempotent=False))
    grant = grant_to(d, "w1", start=1)
    assert grant.may_restart is False
    (failed,) = of_type(lose_lease(d, grant), ActivityFailed)
    assert failed.may_have_executed


def test_without_a_declaration_the_server_default_is_not_idempotent() -> None:
    d = Driver(SchedulerConfig(lease_ttl_s=TTL))
    d.register("w1")  # an older worker: declares nothing
    d.submit(act("a"))
    grant = grant_to(d, "w1", start=1)
    assert grant.may_restart is False
    (failed,) = of_type(lose_lease(d, grant), ActivityFailed)
    assert failed.may_have_executed


def test_a_submission_before_any_worker_registered_gets_the_declared_semantics() -> None:
    # Resolution happens against the lease holder, so a submission accepted while no
    # worker (and no declaration) was known still runs with the declared semantics.
    d = Driver(SchedulerConfig(lease_ttl_s=TTL))
    d.submit(act("a"))
    d.register("w1", declared=IDEMPOTENT)
    grant = grant_to(d, "w1", start=1)
    assert grant.may_restart is True
    assert not of_type(lose_lease(d, grant), ActivityFailed)


def test_conflicting_declarations_each_apply_to_their_own_workers_leases() -> None:
    d = Driver(SchedulerConfig(lease_ttl_s=TTL))
    d.register("safe", declared={"t": ActivityDefaults(idempotent=False)})
    d.register("rerun", declared=IDEMPOTENT)
    d.submit(act("a"), act("b"))
    on_safe = grant_to(d, "safe", start=1)
    on_rerun = grant_to(d, "rerun", start=1)
    assert (on_safe.may_restart, on_rerun.may_restart) == (False, True)
    decisions = lose_lease(d, on_safe)
    failed = of_type(decisions, ActivityFailed)
    assert [(f.activity_id, f.may_have_executed) for f in failed] == [
        (on_safe.lease.activity_id, True)
    ]
    assert d.state(on_rerun.lease.activity_id) is S.QUEUED


def test_a_declared_retry_policy_applies_when_the_submission_keeps_the_default() -> None:
    d = Driver()
    once = RetryPolicy(max_attempts=1)
    d.register("w1", declared={"t": ActivityDefaults(retry=once)})
    d.submit(act("a"), act("b", retry=RetryPolicy(max_attempts=2, initial_backoff_s=0.0)))
    first = grant_to(d, "w1", start=1)
    out = d.fail(first.lease, error_type="Boom")
    # "a" keeps the default policy: the declared one (one attempt) applies.
    (failed,) = of_type(out.decisions, ActivityFailed)
    assert (failed.activity_id, failed.reason) == ("a", "retries_exhausted")
    second = grant_to(d, "w1", start=1)
    out = d.fail(second.lease, error_type="Boom")
    # "b" says its own policy: it is retried although the declaration says one attempt.
    assert [r.activity_id for r in of_type(out.decisions, RetryScheduled)] == ["b"]


def test_a_declared_restart_on_abandon_counts_as_may_restart() -> None:
    d = Driver(SchedulerConfig(lease_ttl_s=TTL))
    d.register("w1", declared={"t": ActivityDefaults(retry=RetryPolicy(restart_on_abandon=True))})
    d.submit(act("a"))
    grant = grant_to(d, "w1", start=1)
    assert grant.may_restart is True
    assert not of_type(lose_lease(d, grant), ActivityFailed)


def test_declarations_apply_only_to_their_own_type() -> None:
    d = Driver(SchedulerConfig(lease_ttl_s=TTL))
    d.register("w1", declared={"other": ActivityDefaults(idempotent=True)})
    d.submit(act("a"))
    grant = grant_to(d, "w1", start=1)
    assert grant.may_restart is False


def test_an_unsaid_result_with_unreported_start_follows_the_declaration() -> None:
    d = Driver()
    d.register("w1", declared=IDEMPOTENT)
    d.submit(act("a"))
    grant = grant_to(d, "w1", start=0)  # prefetched: begins before its start is known
    assert (grant.started, grant.may_restart) == (False, True)
    d.do(
        cmd.Complete,
        activity_id="a",
        token=grant.lease.token,
        result=b"1",
        unreported_start=True,
    )
    assert d.core.finished["a"] is S.COMPLETED


def start_timeout(seconds: float) -> dict[str, ActivityDefaults]:
    return {"t": ActivityDefaults(schedule_to_start_s=seconds)}


def test_a_declared_schedule_to_start_timeout_bounds_an_unsaid_submissions_wait() -> None:
    d = Driver()
    d.register("w1", declared=start_timeout(5.0))
    out = d.submit(act("a"))
    # Written into the accepted activity and its submission record: what bounds the
    # wait is in the store, not in whichever fleet is live at recovery.
    (submitted,) = of_type(out.records, ActivitySubmitted)
    assert submitted.activity.schedule_to_start_s == 5.0
    assert d.core.next_wake_at(T0) == T0 + 5.0
    d.now = T0 + 5.0
    (record,) = of_type(d.do(cmd.Tick).records, Transition)
    assert (record.from_state, record.to_state) == (S.QUEUED, S.DELAYED)
    assert record.error == "ScheduleToStartTimeout: not started within 5 s of being queued"


def test_the_submissions_own_schedule_to_start_wins_over_the_declaration() -> None:
    d = Driver()
    d.register("w1", declared=start_timeout(5.0))
    d.submit(act("a", schedule_to_start_s=60.0))
    assert d.core.activities["a"].schedule_to_start_s == 60.0


def test_of_disagreeing_live_declarers_the_shortest_timeout_applies() -> None:
    d = Driver()
    d.register("slow", declared=start_timeout(30.0))
    d.register("fast", declared=start_timeout(2.0))
    d.submit(act("a"))
    assert d.core.activities["a"].schedule_to_start_s == 2.0


def test_a_departed_workers_declaration_no_longer_applies_to_new_submissions() -> None:
    d = Driver()
    d.register("w1", declared=start_timeout(5.0))
    d.submit(act("before"))
    d.do(cmd.ShutdownWorker, worker_id="w1")
    d.submit(act("after"))
    # What was accepted keeps its bound; the wait of a later one is unbounded.
    assert d.core.activities["before"].schedule_to_start_s == 5.0
    assert d.core.activities["after"].schedule_to_start_s is None


def test_a_changed_registration_applies_to_submissions_accepted_after_it() -> None:
    d = Driver()
    d.register("w1", declared=start_timeout(5.0))
    d.submit(act("a"))
    d.register("w1", declared=start_timeout(9.0))
    d.submit(act("b"))
    assert [d.core.activities[x].schedule_to_start_s for x in "ab"] == [5.0, 9.0]


def test_a_declaration_for_a_type_the_worker_does_not_serve_is_ignored() -> None:
    d = Driver()
    d.register("w1", activity_types=frozenset({"other"}), declared=start_timeout(5.0))
    d.submit(act("a"))
    assert d.core.activities["a"].schedule_to_start_s is None


def test_a_declared_timeout_survives_a_restore_without_its_declarer() -> None:
    d = Driver()
    d.register("w1", declared=start_timeout(10.0))
    d.submit(act("a"))
    d.do(cmd.ShutdownWorker, worker_id="w1")
    core = restore(snapshot(d.core))
    assert core.next_wake_at(T0) == T0 + 10.0
    (record,) = of_type(core.handle(cmd.Tick(now=T0 + 10.0)).records, Transition)
    assert record.to_state is S.DELAYED
