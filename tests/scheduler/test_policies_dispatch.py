"""WF-005 §9–§10 scheduling policies through ``SchedulerCore.handle``: order, hard rules
that priority never bypasses, the starvation bound, weighted fairness and plugins."""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest
from _core_helpers import Driver, act, of_type
from hypothesis import given, settings
from hypothesis import strategies as st

from wf.errors import InvalidArgument, UnknownPolicy
from wf.scheduler import commands as cmd
from wf.scheduler import policies as policies_module
from wf.scheduler.config import PolicyConfig, SchedulerConfig
from wf.scheduler.dispatcher import SchedulerCore
from wf.scheduler.model import Activity, ActivityState, Priority
from wf.scheduler.outputs import LeaseGranted
from wf.scheduler.policies import (
    BUILTIN_POLICIES,
    DEFAULT_STARVATION_LIMITS,
    ENTRY_POINT_GROUP,
    LaneFilter,
    make_policy,
)
from wf.scheduler.queue import Lane

S = ActivityState
C, H, N, L = Priority.CRITICAL, Priority.HIGH, Priority.NORMAL, Priority.LOW
ALL_POLICIES = sorted(BUILTIN_POLICIES)
GUARDED_POLICIES = [p for p in ALL_POLICIES if p != "fifo"]


def config_for(policy: str, **options: Any) -> SchedulerConfig:
    return SchedulerConfig(policies={"default": PolicyConfig(policy=policy, options=options)})


def dispatch_order(d: Driver, worker_id: str = "w1") -> list[str]:
    """Lease, start and complete one activity at a time until the worker gets nothing."""
    order: list[str] = []
    while True:
        leases = d.lease(worker_id)
        if not leases:
            return order
        (lease,) = leases.values()
        order.append(lease.activity_id)
        d.start(lease)
        d.complete(lease)


# --- orderings --------------------------------------------------------------------------------


def _mixed() -> tuple[Activity, ...]:
    return (
        act("low-1", priority=L, deadline=400.0),
        act("crit-1", priority=C, deadline=300.0),
        act("norm-1", priority=N),
        act("crit-2", priority=C, deadline=100.0),
        act("low-2", priority=L, deadline=100.0),
        act("high-1", priority=H, deadline=200.0),
    )


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("fifo", ["low-1", "crit-1", "norm-1", "crit-2", "low-2", "high-1"]),
        ("priority", ["crit-1", "crit-2", "high-1", "norm-1", "low-1", "low-2"]),
        # Earliest deadline first; equal deadlines by priority; no deadline last.
        ("deadline_first", ["crit-2", "low-2", "high-1", "crit-1", "low-1", "norm-1"]),
    ],
)
def test_policy_orders_dispatch(policy: str, expected: list[str]) -> None:
    d = Driver(config_for(policy))
    d.register("w1", max_concurrency=1)
    d.submit(*_mixed())
    assert dispatch_order(d) == expected


def test_tenant_aware_serves_tenants_in_turn() -> None:
    d = Driver(config_for("tenant_aware"))
    d.register("w1", max_concurrency=1)
    d.submit(*(act(f"big-{i}", tenant="big") for i in range(5)))
    d.submit(act("small-0", tenant="small"), act("small-1", tenant="small"))
    order = dispatch_order(d)
    assert order == ["big-0", "small-0", "big-1", "small-1", "big-2", "big-3", "big-4"]


def test_tenant_aware_respects_priority_within_a_tenant() -> None:
    d = Driver(config_for("tenant_aware"))
    d.register("w1", max_concurrency=1)
    d.submit(act("a-low", tenant="a", priority=L), act("a-crit", tenant="a", priority=C))
    d.submit(act("b-norm", tenant="b"))
    assert dispatch_order(d) == ["a-crit", "b-norm", "a-low"]


def test_weighted_fair_fills_running_slots_by_weight() -> None:
    d = Driver(config_for("weighted_fair", weights={"a": 1, "b": 3}))
    d.register("w1", max_concurrency=8)
    d.submit(*(act(f"{t}{i}", tenant=t) for t in "ab" for i in range(10)))
    leases = d.lease(n=8)
    tenants = Counter(d.core.activities[aid].tenant for aid in leases)
    assert tenants == {"a": 2, "b": 6}


def test_policy_groups_are_chosen_per_activity() -> None:
    config = SchedulerConfig(
        policies={"default": PolicyConfig(policy="priority"), "batch": PolicyConfig(policy="fifo")}
    )
    d = Driver(config)
    d.register("w1", max_concurrency=1)
    d.submit(
        act("b-low", priority=L, policy="batch"),
        act("b-crit", priority=C, policy="batch"),
        act("d-low", priority=L),
        act("d-crit", priority=C),
    )
    order = dispatch_order(d)
    batch = [aid for aid in order if aid.startswith("b-")]
    default = [aid for aid in order if aid.startswith("d-")]
    assert batch == ["b-low", "b-crit"]  # FIFO group ignores priority
    assert default == ["d-crit", "d-low"]  # priority group honours it


# --- priority never bypasses capability, tenant, activity-type or ordering rules ---------------


@pytest.mark.parametrize("policy", ALL_POLICIES)
def test_critical_gpu_work_never_goes_to_a_worker_without_gpu(policy: str) -> None:
    d = Driver(config_for(policy))
    d.register("cpu", max_concurrency=50)
    d.submit(*(act(f"gpu-{i}", priority=C, capabilities=frozenset({"gpu"})) for i in range(20)))
    d.submit(act("plain", priority=L))
    leases = d.poll("cpu", n=50)
    assert list(leases) == ["plain"]
    assert all(d.state(f"gpu-{i}") is S.QUEUED for i in range(20))
    # The same with several workers waiting (the balancer's path).
    d.register("gpu", max_concurrency=5, capabilities=frozenset({"gpu", "ssd"}))
    leases = d.poll("gpu", n=5)
    granted = of_type(d.decisions, LeaseGranted)
    assert {g.lease.worker_id for g in granted if g.lease.activity_id.startswith("gpu-")} == {"gpu"}
    assert len(leases) == 5


@pytest.mark.parametrize("policy", ALL_POLICIES)
def test_priority_never_bypasses_tenant_or_activity_type_rules(policy: str) -> None:
    d = Driver(config_for(policy))
    d.register("w-a", max_concurrency=10, tenants=frozenset({"a"}))
    d.register("w-x", max_concurrency=10, activity_types=frozenset({"x"}))
    d.do(cmd.Poll, worker_id="w-a", max_items=10)
    d.do(cmd.Poll, worker_id="w-x", max_items=10)
    d.submit(
        act("b-crit", tenant="b", priority=C),
        act("a-low-y", tenant="a", priority=L, activity_type="y"),
        act("b-low-x", tenant="b", priority=L, activity_type="x"),
    )
    holder = {g.lease.activity_id: g.lease.worker_id for g in of_type(d.decisions, LeaseGranted)}
    assert holder == {"a-low-y": "w-a", "b-low-x": "w-x"}
    assert d.state("b-crit") is S.QUEUED


@pytest.mark.parametrize("policy", ALL_POLICIES)
def test_priority_never_bypasses_ordering_key(policy: str) -> None:
    d = Driver(config_for(policy))
    d.register("w1", max_concurrency=5)
    d.submit(
        act("first", priority=L, ordering_key="k"), act("second", priority=C, ordering_key="k")
    )
    assert list(d.lease(n=5)) == ["first"]


# --- starvation bound -------------------------------------------------------------------------


def _grants_until(d: Driver, activity_id: str, flood: Sequence[Priority], steps: int) -> int:
    """Flood ``flood`` per step with one single-slot worker; return the number of grants
    from the moment ``activity_id`` was queued up to and including its own."""
    for step in range(steps):
        d.submit(*(act(f"f{step}-{i}", priority=p) for i, p in enumerate(flood)))
        (lease,) = d.lease().values()
        if lease.activity_id == activity_id:
            return step + 1
        d.start(lease)
        d.complete(lease)
    raise AssertionError(f"{activity_id} not dispatched within {steps} dispatches")


@pytest.mark.parametrize("policy", GUARDED_POLICIES)
@pytest.mark.parametrize("level", [H, N, L])
def test_starved_level_is_dispatched_within_documented_bound(policy: str, level: Priority) -> None:
    bound = DEFAULT_STARVATION_LIMITS[level] + 3
    d = Driver(config_for(policy))
    d.register("w1", max_concurrency=1)
    d.submit(*(act(f"pre-{i}", priority=C) for i in range(3)))
    d.submit(act("victim", priority=level))
    taken = _grants_until(d, "victim", [C, C], steps=10 * bound)
    assert taken <= bound
    # ... and not before the guard's limit: Critical work is otherwise strictly first.
    assert taken > DEFAULT_STARVATION_LIMITS[level]


def test_starvation_limits_are_configurable() -> None:
    d = Driver(config_for("priority", starvation_limits={"low": 4}))
    d.register("w1", max_concurrency=1)
    d.submit(act("pre", priority=C), act("victim", priority=L))
    taken = _grants_until(d, "victim", [C, C], steps=100)
    assert 4 < taken <= 4 + 3


@settings(max_examples=60, deadline=None)
@given(
    policy=st.sampled_from(GUARDED_POLICIES),
    limit=st.integers(1, 40),
    warmup=st.integers(0, 30),
    flood=st.lists(st.lists(st.sampled_from([C, C, C, H, N]), max_size=5), min_size=1),
    workers=st.integers(1, 3),
    max_items=st.integers(1, 3),
    together=st.booleans(),
)
def test_low_work_under_any_flood_is_dispatched_within_limit_plus_three(
    policy: str,
    limit: int,
    warmup: int,
    flood: list[list[Priority]],
    workers: int,
    max_items: int,
    together: bool,
) -> None:
    d = Driver(config_for(policy, starvation_limits={"low": limit}))
    names = [f"w{i}" for i in range(workers)]
    for name in names:
        d.register(name, max_concurrency=max_items)
    d.submit(*(act(f"pre-{i}", priority=C) for i in range(warmup + 1)))
    d.submit(act("low", priority=L))
    dispatched = 0
    for step in range(20 * (limit + 3)):
        mark = len(d.decisions)
        batch = [act(f"s{step}-{i}", priority=p) for i, p in enumerate(flood[step % len(flood)])]
        if together:  # every worker waits, then the flood arrives: the balancer's path
            for name in names:
                d.do(cmd.Poll, worker_id=name, max_items=max_items)
            if batch:
                d.submit(*batch)
            for name in names:
                d.do(cmd.CancelPoll, worker_id=name)
        else:  # the flood arrives, then the workers poll one by one
            if batch:
                d.submit(*batch)
            for name in names:
                d.lease(name, n=max_items)
        for granted in of_type(d.decisions[mark:], LeaseGranted):
            dispatched += 1
            if granted.lease.activity_id == "low":
                assert dispatched <= limit + 3
                return
            d.start(granted.lease)
            d.complete(granted.lease)
    raise AssertionError("low never dispatched")


# --- weighted fair under saturation -----------------------------------------------------------


@pytest.mark.parametrize(
    ("weights", "durations", "workers", "slots"),
    [
        ({"a": 1, "b": 2, "c": 5}, {"a": 3.0, "b": 5.0, "c": 2.0}, 8, 5),
        ({"a": 1, "b": 2, "c": 5}, {"a": 7.0, "b": 1.0, "c": 4.0}, 10, 4),
        ({"x": 1, "y": 1, "z": 2}, {"x": 1.0, "y": 9.0, "z": 3.0}, 5, 6),
    ],
)
def test_weighted_fair_running_share_stays_within_five_percent_of_weight(
    weights: dict[str, int], durations: dict[str, float], workers: int, slots: int
) -> None:
    d = Driver(config_for("weighted_fair", weights=weights))
    names = [f"w{i}" for i in range(workers)]
    for name in names:
        d.register(name, max_concurrency=slots)
    capacity = workers * slots
    backlog = dict.fromkeys(weights, 0)
    serial = 0

    def top_up() -> None:
        nonlocal serial
        batch = []
        for tenant in weights:
            while backlog[tenant] < capacity:
                serial += 1
                backlog[tenant] += 1
                batch.append(act(f"{tenant}-{serial}", tenant=tenant))
        if batch:
            d.submit(*batch)

    running: list[tuple[float, str, Any]] = []  # (ends_at, activity id, lease)
    total_weight = sum(weights.values())
    worst = 0.0
    for step in range(300):
        d.now += 1.0
        while running and running[0][0] <= d.now:
            _, _, lease = heapq.heappop(running)
            d.complete(lease)
        top_up()
        for name in names:
            for aid, lease in d.lease(name, n=slots).items():
                tenant = d.core.activities[aid].tenant
                backlog[tenant] -= 1
                d.start(lease)
                heapq.heappush(running, (d.now + durations[tenant], aid, lease))
        assert len(running) == capacity  # saturated
        if step < 20:
            continue
        counts = Counter(d.core.activities[aid].tenant for _, aid, _ in running)
        for tenant, weight in weights.items():
            error = abs(counts[tenant] / capacity - weight / total_weight)
            worst = max(worst, error)
    assert worst <= 0.05


# --- custom policies from the wf.policies entry-point group -----------------------------------


class NewestFirstPolicy:
    """A plugin: the most recently created activity first, whatever its priority."""

    name = "newest_first"

    def __init__(self, options: dict[str, Any]) -> None:
        self.options = options
        self.dispatched: list[str] = []

    def rank(self, activity: Activity) -> Any:
        return -activity.seq

    def pick(self, lanes: Sequence[Lane], usable: LaneFilter | None) -> Lane | None:
        best: Lane | None = None
        best_key: tuple[Any, int] | None = None
        for lane in lanes:
            entry = lane.head() if lane.size else None
            if entry is None or (usable is not None and not usable(lane)):
                continue
            if best_key is None or (entry[0], entry[1]) < best_key:
                best, best_key = lane, (entry[0], entry[1])
        return best

    def on_dispatch(self, activity: Activity) -> None:
        self.dispatched.append(activity.activity_id)

    def record_dispatch(self, lane: Lane, queued_by_level: Sequence[int]) -> None:
        return None

    def on_release(self, activity: Activity) -> None:
        return None

    def snapshot(self) -> dict[str, Any]:
        return {}

    def restore(self, state: dict[str, Any]) -> None:
        return None


class NotAPolicy:
    def __init__(self, options: dict[str, Any]) -> None:
        self.options = options


class FakeEntryPoint:
    def __init__(self, name: str, target: type[Any]) -> None:
        self.name = name
        self.group = ENTRY_POINT_GROUP
        self.target = target
        self.loads = 0

    def load(self) -> type[Any]:
        self.loads += 1
        return self.target


@pytest.fixture
def plugins(monkeypatch: pytest.MonkeyPatch) -> list[FakeEntryPoint]:
    registered: list[FakeEntryPoint] = []

    def entry_points(*, group: str) -> list[FakeEntryPoint]:
        return [ep for ep in registered if ep.group == group]

    monkeypatch.setattr(policies_module, "entry_points", entry_points)
    return registered


def test_custom_policy_plugin_is_loaded_from_entry_points_and_drives_dispatch(
    plugins: list[FakeEntryPoint],
) -> None:
    plugins.append(FakeEntryPoint("newest_first", NewestFirstPolicy))
    core = SchedulerCore(config_for("newest_first", flavour="test"))
    policy = core.policies["default"]
    assert isinstance(policy, NewestFirstPolicy)
    assert policy.options == {"flavour": "test"}
    assert plugins[0].loads == 1
    d = Driver(config_for("newest_first"))
    d.register("w1", max_concurrency=1)
    d.submit(act("old", priority=C), act("mid"), act("new", priority=L))
    assert dispatch_order(d) == ["new", "mid", "old"]


def test_builtin_policy_names_take_precedence_over_plugins(
    plugins: list[FakeEntryPoint],
) -> None:
    plugins.append(FakeEntryPoint("fifo", NewestFirstPolicy))
    assert type(make_policy("fifo")).__name__ == "FifoPolicy"
    assert plugins[0].loads == 0


def test_plugin_that_does_not_implement_the_protocol_is_refused(
    plugins: list[FakeEntryPoint],
) -> None:
    plugins.append(FakeEntryPoint("broken", NotAPolicy))
    with pytest.raises(UnknownPolicy):
        SchedulerCore(config_for("broken"))


def test_unknown_policy_raises_unknown_policy_listing_known_names(
    plugins: list[FakeEntryPoint],
) -> None:
    plugins.append(FakeEntryPoint("newest_first", NewestFirstPolicy))
    with pytest.raises(UnknownPolicy) as info:
        SchedulerCore(config_for("no_such_policy"))
    assert info.value.details == {"policy": "no_such_policy"}
    assert "newest_first" in info.value.message
    assert all(name in info.value.message for name in BUILTIN_POLICIES)


def test_unknown_option_of_a_builtin_policy_is_refused() -> None:
    with pytest.raises(InvalidArgument):
        SchedulerCore(config_for("fifo", weights={"a": 1}))
    with pytest.raises(InvalidArgument):
        SchedulerCore(config_for("weighted_fair", weights={"a": 0}))
