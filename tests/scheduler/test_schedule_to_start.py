"""The schedule-to-start timeout (issue 17): an activity queued longer than its
``schedule_to_start_s`` fails that attempt (retryable), driven by the core's clock.

Every instant is the command's ``now`` (the virtual time of these tests): the
core never reads a clock, so the timeout fires at exactly its deadline, no
sooner, and survives a snapshot and restore.
"""

from __future__ import annotations

from _core_helpers import T0, Driver, act, of_type

from wf.scheduler import commands as cmd
from wf.scheduler.config import SchedulerConfig
from wf.scheduler.model import ActivityState, RetryPolicy, TransitionReason
from wf.scheduler.outputs import ActivityFailed, RetryScheduled, Transition
from wf.scheduler.recovery import restore, snapshot

S = ActivityState
R = TransitionReason
NO_JITTER = RetryPolicy(max_attempts=2, initial_backoff_s=3.0, jitter_fraction=0.0)


def test_the_attempt_fails_at_its_deadline_and_is_retried_by_its_policy() -> None:
    d = Driver(SchedulerConfig())
    d.submit(act("a", schedule_to_start_s=10.0, retry=NO_JITTER))
    assert d.core.next_wake_at(T0) == T0 + 10.0
    d.now = T0 + 9.999
    assert d.do(cmd.Tick).records == []
    d.now = T0 + 10.0
    out = d.do(cmd.Tick)
    (record,) = of_type(out.records, Transition)
    assert (record.from_state, record.to_state, record.reason) == (
        S.QUEUED,
        S.DELAYED,
        R.SCHEDULE_TO_START_TIMEOUT,
    )
    assert record.failures == 1
    assert record.error == "ScheduleToStartTimeout: not started within 10 s of being queued"
    (retry,) = of_type(out.decisions, RetryScheduled)
    assert retry.not_before == T0 + 13.0
    assert d.core.queue.depth == 0
    # Due again: queued, with a fresh deadline of its own; the last attempt then fails.
    d.now = T0 + 13.0
    d.do(cmd.Tick)
    assert d.state("a") is S.QUEUED
    d.now = T0 + 23.0
    out = d.do(cmd.Tick)
    (failed,) = of_type(out.decisions, ActivityFailed)
    assert (failed.reason, failed.error_type) == (R.RETRIES_EXHAUSTED, "ScheduleToStartTimeout")
    assert d.state("a") is S.FAILED


def test_an_activity_leased_in_time_is_not_timed_out() -> None:
    d = Driver(SchedulerConfig(lease_ttl_s=60.0))
    d.register("w1")
    d.submit(act("a", schedule_to_start_s=10.0))
    d.now = T0 + 9.0
    d.lease()
    d.now = T0 + 30.0
    assert of_type(d.do(cmd.Tick).records, Transition) == []
    assert d.state("a") is S.LEASED


def test_without_the_option_an_activity_waits_for_ever() -> None:
    d = Driver(SchedulerConfig())
    d.submit(act("a"))
    assert d.core.next_wake_at(T0) is None
    d.now = T0 + 86_400.0
    d.do(cmd.Tick)
    assert d.state("a") is S.QUEUED


def test_the_deadline_survives_a_snapshot_and_restore() -> None:
    d = Driver(SchedulerConfig())
    d.submit(act("a", schedule_to_start_s=10.0, retry=NO_JITTER))
    d.now = T0 + 4.0
    d.do(cmd.Tick)
    core = restore(snapshot(d.core))
    assert core.next_wake_at(T0 + 4.0) == T0 + 10.0
    out = core.handle(cmd.Tick(now=T0 + 10.0))
    (record,) = of_type(out.records, Transition)
    assert record.reason == R.SCHEDULE_TO_START_TIMEOUT
