"""Dispatch features wired into ``SchedulerCore.handle``: load balancing (§15), work
stealing (§16), ordering keys, delayed execution (§17), cron (§18), rate limits (§19),
backpressure (§20) and cancellation."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from _core_helpers import T0, Driver, act, fingerprint, grants, of_type

from wf.errors import (
    NotFound,
    Overloaded,
    StaleLease,
)
from wf.scheduler import commands as cmd
from wf.scheduler.backpressure import BackpressureConfig
from wf.scheduler.config import SchedulerConfig, StealingConfig
from wf.scheduler.dispatcher import SchedulerCore
from wf.scheduler.load_balancer import BalancingStrategy
from wf.scheduler.model import (
    ActivityState,
    CancelOrigin,
    HeartbeatStats,
    Priority,
    RetryPolicy,
    TransitionReason,
)
from wf.scheduler.outputs import (
    ActivityCancelled,
    BackpressureChanged,
    LeaseGranted,
    LeaseRevoked,
    Transition,
)
from wf.scheduler.rate_limiter import RateLimitConfig
from wf.scheduler.timer import CalendarSchedule

S = ActivityState
HOUR = 3600.0


def holders(d: Driver, decisions: list[Any] | None = None) -> dict[str, str]:
    """Activity id -> worker id of every grant (in ``decisions``, or all so far)."""
    items = d.decisions if decisions is None else decisions
    return {g.lease.activity_id: g.lease.worker_id for g in of_type(items, LeaseGranted)}


# --- load balancing ---------------------------------------------------------------------------


def balanced(strategy: BalancingStrategy, **worker_kw: dict[str, Any]) -> Driver:
    """A core whose workers (in registration order) all wait for work."""
    d = Driver(SchedulerConfig(balancer=strategy))
    for worker_id, kw in worker_kw.items():
        d.register(worker_id, **{"max_concurrency": 4, **kw})
    for worker_id in worker_kw:
        d.do(cmd.Poll, worker_id=worker_id, max_items=4)
    return d


def test_least_loaded_spreads_work_and_breaks_ties_by_registration_order() -> None:
    d = balanced(BalancingStrategy.LEAST_LOADED, w1={}, w2={}, w3={})
    out = d.submit(*(act(f"a{i}") for i in range(4)))
    assert holders(d, out.decisions) == {"a0": "w1", "a1": "w2", "a2": "w3", "a3": "w1"}


def test_least_loaded_prefers_the_emptier_worker() -> None:
    d = Driver(SchedulerConfig(balancer=BalancingStrategy.LEAST_LOADED))
    d.register("w1", max_concurrency=4)
    d.register("w2", max_concurrency=4)
    d.submit(act("busy-1"), act("busy-2"))
    d.lease("w1", n=2)
    d.do(cmd.Poll, worker_id="w1", max_items=2)
    d.do(cmd.Poll, worker_id="w2", max_items=2)
    out = d.submit(act("a"), act("b"), act("c"))
    assert holders(d, out.decisions) == {"a": "w2", "b": "w2", "c": "w1"}


def test_round_robin_rotates_over_waiting_workers() -> None:
    d = balanced(BalancingStrategy.ROUND_ROBIN, w1={}, w2={}, w3={})
    out = d.submit(*(act(f"a{i}") for i in range(5)))
    assert list(holders(d, out.decisions).values()) == ["w1", "w2", "w3", "w1", "w2"]


def test_capability_aware_keeps_special_workers_for_special_work() -> None:
    d = balanced(
        BalancingStrategy.CAPABILITY_AWARE,
        gpu={"capabilities": frozenset({"gpu"})},
        plain={},
    )
    out = d.submit(act("cpu-job"), act("gpu-job", capabilities=frozenset({"gpu"})))
    assert holders(d, out.decisions) == {"cpu-job": "plain", "gpu-job": "gpu"}


def test_resource_aware_avoids_the_worker_reporting_high_cpu() -> None:
    d = Driver(SchedulerConfig(balancer=BalancingStrategy.RESOURCE_AWARE))
    d.register("hot", max_concurrency=4)
    d.register("cool", max_concurrency=4)
    d.do(cmd.Heartbeat, worker_id="hot", stats=HeartbeatStats(cpu_fraction=0.9))
    d.do(cmd.Heartbeat, worker_id="cool", stats=HeartbeatStats(cpu_fraction=0.1))
    d.do(cmd.Poll, worker_id="hot", max_items=4)
    d.do(cmd.Poll, worker_id="cool", max_items=4)
    out = d.submit(act("a"), act("b"))
    assert holders(d, out.decisions) == {"a": "cool", "b": "cool"}


def test_locality_aware_prefers_a_worker_with_the_matching_label() -> None:
    d = balanced(
        BalancingStrategy.LOCALITY_AWARE,
        us={"labels": {"locality": "us"}},
        eu={"labels": {"locality": "eu"}},
    )
    out = d.submit(act("eu-job", locality="eu"), act("any-job"), act("asia-job", locality="asia"))
    assert holders(d, out.decisions) == {"eu-job": "eu", "any-job": "us", "asia-job": "us"}


@pytest.mark.parametrize("strategy", list(BalancingStrategy))
def test_balancing_is_deterministic(strategy: BalancingStrategy) -> None:
    def run() -> bytes:
        d = balanced(strategy, w1={}, w2={"labels": {"locality": "x"}}, w3={})
        d.submit(*(act(f"a{i}", locality="x" if i % 2 else None) for i in range(9)))
        return msgspec.json.encode(d.decisions)

    assert run() == run()


# --- work stealing ----------------------------------------------------------------------------


def stealing(**kw: Any) -> Driver:
    return Driver(SchedulerConfig(lease_ttl_s=30.0, stealing=StealingConfig(enabled=True, **kw)))


def _victim_with_backlog(d: Driver) -> dict[str, Any]:
    d.register("victim", max_concurrency=4)
    d.submit(*(act(f"a{i}") for i in range(4)))
    leases = d.lease("victim", n=4)
    d.start(leases["a0"])
    return leases


def test_idle_worker_steals_only_unstarted_leases_newest_first() -> None:
    d = stealing()
    leases = _victim_with_backlog(d)
    d.register("thief", max_concurrency=4)
    mark = len(d.decisions)
    d.poll("thief", n=4)
    new = d.decisions[mark:]
    revoked = of_type(new, LeaseRevoked)
    assert [(r.worker_id, r.activity_id, r.token, r.reason) for r in revoked] == [
        ("victim", f"a{i}", leases[f"a{i}"].token, "stolen") for i in (3, 2, 1)
    ]
    assert holders(d, new) == {"a3": "thief", "a2": "thief", "a1": "thief"}
    assert d.state("a0") is S.EXECUTING
    assert d.core.activities["a0"].worker_id == "victim"
    assert d.core.registry.workers["victim"].leases == {"a0": leases["a0"].token}
    reasons = [r.reason for r in of_type(d.records, Transition) if r.activity_id == "a3"]
    assert reasons[-2:] == ["stolen", "stolen_from:victim"]


def test_victims_start_with_the_stolen_token_is_refused() -> None:
    d = stealing()
    leases = _victim_with_backlog(d)
    d.register("thief", max_concurrency=1)
    stolen = d.poll("thief")
    assert list(stolen) == ["a3"]
    before = fingerprint(d.core)
    with pytest.raises(StaleLease):
        d.core.handle(cmd.StartActivity(now=d.now, activity_id="a3", token=leases["a3"].token))
    with pytest.raises(StaleLease):
        d.core.handle(cmd.Complete(now=d.now, activity_id="a3", token=leases["a3"].token))
    assert fingerprint(d.core) == before
    d.start(stolen["a3"])
    d.complete(stolen["a3"])


def test_executing_work_is_never_stolen() -> None:
    d = stealing()
    d.register("victim", max_concurrency=3)
    d.submit(act("a"), act("b"), act("c"))
    for lease in d.lease("victim", n=3).values():
        d.start(lease)
    d.register("thief", max_concurrency=3)
    assert d.poll("thief", n=3) == {}
    assert of_type(d.decisions, LeaseRevoked) == []


def test_an_activity_is_stolen_at_most_max_steals_per_activity_times() -> None:
    d = stealing(max_steals_per_activity=1)
    d.register("w1", max_concurrency=1)
    d.submit(act("a"))
    d.lease("w1")
    d.register("w2", max_concurrency=1)
    assert list(d.lease("w2")) == ["a"]
    d.register("w3", max_concurrency=1)
    assert d.poll("w3") == {}
    assert d.core.activities["a"].steals == 1
    assert d.core.activities["a"].worker_id == "w2"


def test_min_victim_backlog_is_respected() -> None:
    d = stealing(min_victim_backlog=2)
    d.register("victim", max_concurrency=2)
    d.submit(act("a"), act("b"))
    d.lease("victim", n=2)
    d.register("thief", max_concurrency=2)
    assert list(d.poll("thief", n=2)) == ["b"]  # then only one is left: below the backlog


def test_stealing_is_off_by_default() -> None:
    d = Driver()
    _victim_with_backlog(d)
    d.register("thief", max_concurrency=4)
    assert d.poll("thief", n=4) == {}


def test_stealing_never_takes_ordered_or_ineligible_work() -> None:
    d = stealing()
    d.register("victim", max_concurrency=3, capabilities=frozenset({"gpu"}))
    d.submit(
        act("k1", ordering_key="k"),
        act("other-key", ordering_key="j"),
        act("gpu", capabilities=frozenset({"gpu"})),
    )
    d.lease("victim", n=3)
    d.register("thief", max_concurrency=3)
    assert d.poll("thief", n=3) == {}


# --- ordering keys ----------------------------------------------------------------------------


def test_activities_sharing_an_ordering_key_are_leased_one_at_a_time_in_order() -> None:
    d = Driver()
    d.register("w1", max_concurrency=5)
    d.submit(*(act(f"k{i}", ordering_key="k") for i in range(3)), act("free"))
    d.submit(act("j0", ordering_key="j"))
    order: list[str] = []
    while True:
        leases = d.lease(n=5)
        keyed = sorted(aid for aid in leases if aid.startswith("k"))
        assert len(keyed) <= 1
        order += keyed
        if not leases:
            break
        for lease in leases.values():
            d.start(lease)
            d.complete(lease)
    assert order == ["k0", "k1", "k2"]
    assert holders(d).keys() == {"k0", "k1", "k2", "free", "j0"}


def test_ordering_key_holds_successors_while_the_head_retries() -> None:
    d = Driver()
    d.register("w1", max_concurrency=5)
    retry = RetryPolicy(initial_backoff_s=10.0, jitter_fraction=0.0)
    d.submit(act("k0", ordering_key="k", retry=retry), act("k1", ordering_key="k"))
    (lease,) = d.lease(n=5).values()
    d.start(lease)
    d.fail(lease)
    assert d.state("k0") is S.DELAYED
    assert d.lease(n=5) == {}  # k1 waits behind its retrying predecessor
    d.tick(T0 + 10)
    assert list(d.lease(n=5)) == ["k0"]


def test_ordering_key_head_lost_with_its_worker_keeps_its_place() -> None:
    d = Driver()
    d.register("w1", max_concurrency=5)
    d.register("w2", max_concurrency=5)
    d.submit(act("k0", ordering_key="k"), act("k1", ordering_key="k"))
    d.lease("w1", n=5)
    d.do(cmd.WorkersLost, worker_ids=("w1",))
    assert list(d.lease("w2", n=5)) == ["k0"]


def test_cancelling_a_held_activity_skips_it_in_the_key_order() -> None:
    d = Driver()
    d.register("w1", max_concurrency=5)
    d.submit(*(act(f"k{i}", ordering_key="k") for i in range(3)))
    (lease,) = d.lease(n=5).values()
    d.do(cmd.Cancel, activity_id="k1")
    d.start(lease)
    d.complete(lease)
    assert list(d.lease(n=5)) == ["k2"]


# --- rate limits ------------------------------------------------------------------------------


def limited(**limits: Any) -> Driver:
    d = Driver(SchedulerConfig(limits=RateLimitConfig(**limits), lease_ttl_s=HOUR))
    d.register("w1", max_concurrency=100)
    d.do(cmd.Poll, worker_id="w1", max_items=100)
    return d


def grant_times(d: Driver) -> list[float]:
    return [g.lease.granted_at for g in of_type(d.decisions, LeaseGranted)]


def test_max_activities_per_second_paces_dispatch_over_ticks() -> None:
    d = limited(max_activities_per_second=2.0)
    d.submit(*(act(f"a{i}") for i in range(10)))
    assert grant_times(d) == [T0, T0]  # the burst
    assert d.core.next_wake_at(d.now) == T0 + 0.5
    d.tick(T0 + 0.25)
    assert len(grant_times(d)) == 2
    t = T0
    while len(grant_times(d)) < 10:
        wake = d.core.next_wake_at(d.now)
        assert wake is not None
        assert wake > t
        t = wake
        d.tick(wake)
    assert grant_times(d) == [T0, T0] + [T0 + 0.5 * k for k in range(1, 9)]


def test_activity_type_rate_limits_only_that_type() -> None:
    d = limited(activity_type_per_second={"slow": 1.0})
    d.submit(*(act(f"s{i}", activity_type="slow") for i in range(3)))
    d.submit(*(act(f"f{i}", activity_type="fast") for i in range(3)))
    assert sorted(holders(d)) == ["f0", "f1", "f2", "s0"]
    d.tick(T0 + 1)
    assert "s1" in holders(d)
    assert "s2" not in holders(d)


def test_max_concurrent_activities_caps_running_work() -> None:
    d = limited(max_concurrent_activities=2)
    d.submit(*(act(f"a{i}") for i in range(5)))
    leases = grants_of(d)
    assert list(leases) == ["a0", "a1"]
    d.start(leases["a0"])
    d.complete(leases["a0"])
    assert list(grants_of(d)) == ["a0", "a1", "a2"]


def test_max_tenant_concurrency_caps_each_tenant() -> None:
    d = limited(max_tenant_concurrency=1, tenant_concurrency={"vip": 2})
    d.submit(*(act(f"{t}{i}", tenant=t) for t in ("a", "b", "vip") for i in range(3)))
    assert sorted(holders(d)) == ["a0", "b0", "vip0", "vip1"]
    leases = grants_of(d)
    d.start(leases["a0"])
    d.complete(leases["a0"])
    assert sorted(holders(d)) == ["a0", "a1", "b0", "vip0", "vip1"]


def grants_of(d: Driver) -> dict[str, Any]:
    return {g.lease.activity_id: g.lease for g in of_type(d.decisions, LeaseGranted)}


# --- backpressure -----------------------------------------------------------------------------

BACKPRESSURE = BackpressureConfig(elevated_queue_depth=3, critical_queue_depth=5, retry_after_s=7.5)


def pressured(config: BackpressureConfig = BACKPRESSURE) -> Driver:
    return Driver(SchedulerConfig(backpressure=config))


def levels(d: Driver) -> list[tuple[str, str, int]]:
    return [(c.previous, c.level, c.queue_depth) for c in of_type(d.decisions, BackpressureChanged)]


def test_backpressure_changes_are_reported_when_depth_crosses_thresholds() -> None:
    d = pressured()
    for i in range(6):
        d.submit(act(f"a{i}"))
    assert levels(d) == [("normal", "elevated", 3), ("elevated", "critical", 5)]
    d.register("w1", max_concurrency=1)
    for _ in range(6):
        (lease,) = d.lease().values()
        d.start(lease)
        d.complete(lease)
    # Leaving a level needs the depth below recovery_fraction (0.8) x its threshold.
    assert levels(d)[2:] == [("critical", "elevated", 3), ("elevated", "normal", 2)]


def test_new_workflow_start_is_refused_at_critical_with_retry_after_and_nothing_stored() -> None:
    d = pressured()
    d.submit(*(act(f"a{i}") for i in range(5)))
    assert d.core.backpressure.level == "critical"
    before = fingerprint(d.core)
    with pytest.raises(Overloaded) as info:
        d.core.handle(cmd.Submit(now=d.now, activities=(act("start", new_workflow=True),)))
    assert info.value.retry_after_s == 7.5
    assert info.value.details["retry_after_s"] == 7.5
    # A batch holding one new workflow start is refused as a whole.
    with pytest.raises(Overloaded):
        d.core.handle(
            cmd.Submit(now=d.now, activities=(act("step"), act("start", new_workflow=True)))
        )
    assert fingerprint(d.core) == before
    assert "start" not in d.core.activities
    # Activities of running workflows are still accepted and queued.
    d.submit(act("step", workflow_id="running"))
    assert d.state("step") is S.QUEUED


def test_new_workflow_starts_are_queued_when_rejection_is_off() -> None:
    d = pressured(msgspec.structs.replace(BACKPRESSURE, reject_new_workflows=False))
    d.submit(*(act(f"a{i}") for i in range(5)))
    d.submit(act("start", new_workflow=True))
    assert d.state("start") is S.QUEUED


def test_new_workflow_starts_are_accepted_again_after_recovery() -> None:
    d = pressured()
    d.submit(*(act(f"a{i}") for i in range(5)))
    d.register("w1", max_concurrency=5)
    d.lease(n=5)
    assert d.core.backpressure.level == "normal"
    d.submit(act("start", new_workflow=True))
    assert d.state("start") in (S.QUEUED, S.LEASED)


def test_elevated_backpressure_slows_dispatch() -> None:
    config = BackpressureConfig(elevated_queue_depth=3, elevated_dispatch_per_s=1.0)
    d = pressured(config)
    d.submit(*(act(f"a{i}") for i in range(6)))
    d.register("w1", max_concurrency=10)
    d.do(cmd.Poll, worker_id="w1", max_items=10)
    assert len(grant_times(d)) == 1
    d.tick(T0 + 0.5)
    assert len(grant_times(d)) == 1
    for k in (1, 2, 3):
        d.tick(T0 + k)
    # Depth fell to 2 (< 0.8 x 3): back to normal, so the rest goes at full speed.
    assert levels(d)[-1] == ("elevated", "normal", 2)
    d.tick(T0 + 3.5)
    assert grant_times(d) == [T0, T0 + 1, T0 + 2, T0 + 3, T0 + 3.5, T0 + 3.5]


def test_saturated_workers_raise_backpressure_by_utilization() -> None:
    d = pressured(BackpressureConfig(elevated_utilization=1.0))
    d.register("w1", max_concurrency=2)
    d.submit(act("a"), act("b"))
    d.lease(n=2)
    (change,) = of_type(d.decisions, BackpressureChanged)
    assert (change.previous, change.level, change.utilization) == ("normal", "elevated", 1.0)


# --- delayed activities -----------------------------------------------------------------------


def test_delayed_activity_stays_dormant_until_a_tick_at_its_instant() -> None:
    d = Driver(SchedulerConfig(early_grant_s=0))
    d.register("w1", max_concurrency=5)
    d.do(cmd.Poll, worker_id="w1", max_items=5)
    d.submit(act("later", not_before=T0 + 10), act("now", not_before=T0))
    assert list(holders(d)) == ["now"]
    assert d.state("later") is S.DELAYED
    assert d.core.next_wake_at(d.now) == T0 + 10
    d.tick(T0 + 9.999)
    assert d.state("later") is S.DELAYED
    out = d.tick(T0 + 10)
    assert [(r.from_state, r.to_state, r.reason) for r in of_type(out.records, Transition)] == [
        (S.DELAYED, S.QUEUED, "timer"),
        (S.QUEUED, S.LEASED, "granted"),
    ]


def test_delayed_activities_due_together_wake_in_submission_order() -> None:
    d = Driver()
    d.register("w1", max_concurrency=1)
    d.submit(*(act(f"a{i}", not_before=T0 + 5, priority=Priority.NORMAL) for i in range(3)))
    d.tick(T0 + 60)
    order = []
    for _ in range(3):
        (lease,) = d.lease().values()
        order.append(lease.activity_id)
        d.start(lease)
        d.complete(lease)
    assert order == ["a0", "a1", "a2"]


# --- calendar delays --------------------------------------------------------------------------


def test_a_calendar_delay_sleeps_until_the_next_instant_of_its_expression_in_its_zone() -> None:
    # The core keeps no recurring triggers (deployment schedules do); a calendar delay
    # resolves one cron instant against the submission's ``now``.
    d = Driver(SchedulerConfig(early_grant_s=0))
    nightly = CalendarSchedule(cron="0 9 * * *", timezone="America/New_York")
    out = d.submit(act("report", delay=nightly))
    (transition,) = of_type(out.records, Transition)
    # 09:00 EST is 14:00 UTC in January.
    assert (transition.to_state, transition.not_before) == (S.DELAYED, T0 + 14 * HOUR)
    assert d.tick(T0 + 14 * HOUR - 1).records == []
    assert d.state("report") is S.DELAYED
    d.tick(T0 + 14 * HOUR)
    assert d.state("report") is S.QUEUED


def test_calendar_delays_resolve_identically_across_cores() -> None:
    def run() -> bytes:
        d = Driver()
        d.submit(act("a", delay=CalendarSchedule(cron="0 */6 * * *")))
        for hours in (6, 7, 30):
            d.tick(T0 + hours * HOUR)
        return msgspec.json.encode([d.decisions, d.records])

    assert run() == run()


# --- cancellation -----------------------------------------------------------------------------


def test_cancel_of_a_queued_activity_removes_it_from_the_queue() -> None:
    d = Driver()
    d.register("w1")
    d.submit(act("a"), act("b"))
    out = d.do(cmd.Cancel, activity_id="a", reason="user")
    (transition,) = of_type(out.records, Transition)
    assert (transition.from_state, transition.to_state, transition.reason) == (
        S.QUEUED,
        S.CANCELLED,
        "user",
    )
    assert d.core.queue.depth == 1
    assert list(d.lease(n=5)) == ["b"]


@pytest.mark.parametrize("origin", list(CancelOrigin))
def test_cancel_reports_its_origin_with_the_text_left_as_text(origin: CancelOrigin) -> None:
    d = Driver()
    d.submit(act("a", workflow_id="wf-1", correlation_id="c-1"))
    # Text that reads like another origin's changes nothing: listeners go by origin.
    out = d.do(cmd.Cancel, activity_id="a", reason="run 7 is obsolete", origin=origin)
    assert out.decisions == [
        ActivityCancelled(
            activity_id="a",
            workflow_id="wf-1",
            correlation_id="c-1",
            origin=origin,
            reason="run 7 is obsolete",
        )
    ]
    (transition,) = of_type(out.records, Transition)
    assert transition.reason == "run 7 is obsolete"


def test_a_cancel_without_an_origin_is_an_operators() -> None:
    d = Driver()
    d.submit(act("a"))
    (decision,) = d.do(cmd.Cancel, activity_id="a").decisions
    assert decision == ActivityCancelled(
        activity_id="a",
        workflow_id="",
        correlation_id="",
        origin=CancelOrigin.OPERATOR,
        reason=TransitionReason.CANCELLED,
    )
    # An input log written before origins existed decodes to the same command.
    old = msgspec.json.decode(
        b'{"cmd":"cancel","now":1.0,"activity_id":"a","reason":"x"}', type=cmd.Command
    )
    assert old == cmd.Cancel(now=1.0, activity_id="a", reason="x", origin=CancelOrigin.OPERATOR)


def test_cancel_of_a_delayed_activity_means_it_never_wakes() -> None:
    d = Driver()
    d.register("w1")
    d.submit(act("a", not_before=T0 + 5))
    d.do(cmd.Cancel, activity_id="a")
    assert d.core.next_wake_at(d.now) != T0 + 5
    out = d.tick(T0 + 5)
    assert of_type(out.records, Transition) == []
    assert d.lease() == {}
    assert d.state("a") is S.CANCELLED


@pytest.mark.parametrize("started", [False, True], ids=["leased", "executing"])
def test_cancel_of_a_held_activity_revokes_the_lease_and_fences_the_worker(
    started: bool,
) -> None:
    d = Driver()
    d.register("w1", max_concurrency=1)
    d.submit(act("a"), act("b"))
    (lease,) = d.lease().values()
    if started:
        d.start(lease)
    out = d.do(cmd.Cancel, activity_id="a", reason="user")
    assert of_type(out.decisions, LeaseRevoked) == [
        LeaseRevoked(worker_id="w1", activity_id="a", token=lease.token, reason="user")
    ]
    assert d.core.registry.workers["w1"].leases == {}
    with pytest.raises(StaleLease):
        d.core.handle(cmd.Complete(now=d.now, activity_id="a", token=lease.token))
    # The freed slot takes the next activity.
    assert list(grants(d.do(cmd.Poll, worker_id="w1"))) == ["b"]


def test_cancel_of_an_unknown_activity_raises_not_found() -> None:
    d = Driver()
    with pytest.raises(NotFound):
        d.do(cmd.Cancel, activity_id="ghost")


def test_core_without_commands_has_nothing_to_wake_for() -> None:
    assert SchedulerCore().next_wake_at(T0) is None
