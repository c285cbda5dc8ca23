"""Tests of WF-005 §19 rate limiting: token buckets and the rate limiter."""

from __future__ import annotations

import math

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wf.errors import CorruptRecord, Internal, InvalidArgument
from wf.scheduler.rate_limiter import (
    EPSILON_TOKENS,
    BlockReason,
    BucketState,
    RateLimitConfig,
    RateLimiter,
    RateLimiterSnapshot,
    TokenBucket,
)

T0 = 1_700_000_000.0
"""A realistic POSIX instant: floats there have an ulp of about 2.4e-7 s."""

KW = {"activity_type": "email", "partition": "p1", "tenant": "acme"}


def dispatch(limiter: RateLimiter, now: float, **overrides: str) -> str | None:
    """Acquire if allowed; return the block reason (None when it dispatched)."""
    kw = {**KW, **overrides}
    reason = limiter.blocked(
        now, activity_type=kw["activity_type"], partition=kw["partition"], tenant=kw["tenant"]
    )
    if reason is None:
        limiter.acquire(
            now, activity_type=kw["activity_type"], partition=kw["partition"], tenant=kw["tenant"]
        )
    return reason


# --- TokenBucket -----------------------------------------------------------------------------


def test_bucket_starts_full_and_empties() -> None:
    bucket = TokenBucket(2.0, 3.0)
    assert bucket.available(T0) == 3.0
    assert bucket.last_refill_at is None
    assert [bucket.try_take(T0) for _ in range(4)] == [True, True, True, False]
    assert bucket.available(T0) == 0.0


def test_bucket_refills_over_time_up_to_burst() -> None:
    bucket = TokenBucket(2.0, 3.0)
    for _ in range(3):
        assert bucket.try_take(10.0)
    assert bucket.available(10.25) == 0.5
    assert not bucket.try_take(10.25)
    assert bucket.available(10.5) == 1.0
    assert bucket.try_take(10.5)
    assert bucket.available(100.0) == 3.0  # capped at burst


def test_bucket_fractional_takes() -> None:
    bucket = TokenBucket(1.0, 1.0)
    assert bucket.try_take(0.0, 0.5)
    assert bucket.try_take(0.0, 0.5)
    assert not bucket.try_take(0.0, 0.5)
    assert bucket.try_take(0.5, 0.5)


def test_bucket_time_going_backwards_adds_nothing() -> None:
    bucket = TokenBucket(1.0, 2.0)
    assert bucket.try_take(100.0, 2.0)
    bucket.refill(50.0)
    assert bucket.last_refill_at == 100.0
    assert bucket.available(50.0) == 0.0
    assert not bucket.try_take(99.0)
    assert bucket.available(100.0) == 0.0
    assert bucket.available(101.0) == 1.0


def test_bucket_queries_do_not_mutate() -> None:
    bucket = TokenBucket(1.0, 2.0)
    bucket.try_take(0.0)
    before = bucket.snapshot()
    bucket.available(5.0)
    bucket.next_available_at(5.0, 2.0)
    assert bucket.snapshot() == before


def test_bucket_next_available_at() -> None:
    bucket = TokenBucket(4.0, 2.0)
    assert bucket.next_available_at(0.0) == 0.0
    assert bucket.try_take(0.0, 2.0)
    assert bucket.next_available_at(0.0) == 0.25
    assert bucket.next_available_at(0.0, 2.0) == 0.5
    assert bucket.next_available_at(0.1) == 0.25
    assert bucket.next_available_at(0.0, 3.0) == math.inf
    # Asked about an instant before the last refill: tokens accrue only after it.
    assert bucket.try_take(1.0, 2.0)
    assert bucket.next_available_at(0.5) == 1.25


@pytest.mark.parametrize(
    ("rate_per_s", "burst", "field"),
    [
        (0.0, 1.0, "rate_per_s"),
        (-1.0, 1.0, "rate_per_s"),
        (math.nan, 1.0, "rate_per_s"),
        (math.inf, 1.0, "rate_per_s"),
        (1.0, 0.0, "burst"),
        (1.0, math.nan, "burst"),
    ],
)
def test_bucket_rejects_bad_parameters(rate_per_s: float, burst: float, field: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        TokenBucket(rate_per_s, burst)
    assert info.value.details["field"] == field


def test_bucket_restore_round_trips_and_rejects_garbage() -> None:
    bucket = TokenBucket(3.0, 5.0)
    bucket.try_take(T0, 4.5)
    state = msgspec.json.decode(msgspec.json.encode(bucket.snapshot()), type=BucketState)
    copy = TokenBucket.restore(3.0, 5.0, state)
    assert copy.snapshot() == bucket.snapshot()
    # A level above a lowered burst is capped.
    assert TokenBucket.restore(3.0, 0.25, state).available(T0) == 0.25
    with pytest.raises(CorruptRecord):
        TokenBucket.restore(3.0, 5.0, BucketState(tokens=math.nan, last_refill_at=T0))
    with pytest.raises(CorruptRecord):
        TokenBucket.restore(3.0, 5.0, BucketState(tokens=1.0, last_refill_at=math.inf))


@st.composite
def take_schedules(draw: st.DrawFn) -> tuple[float, float, list[tuple[float, float]]]:
    rate_per_s = draw(st.floats(0.01, 1000.0))
    burst = draw(st.floats(0.5, 50.0))
    start = draw(st.sampled_from([0.0, T0]))
    steps = draw(
        st.lists(
            st.tuples(
                st.one_of(st.just(0.0), st.floats(0.0, 2.0)),  # gap before the attempt
                st.floats(0.05, 3.0),  # tokens asked for
            ),
            min_size=1,
            max_size=60,
        )
    )
    attempts = []
    now = start
    for gap, n in steps:
        now += gap
        attempts.append((now, n))
    return rate_per_s, burst, attempts


@settings(max_examples=300, deadline=None)
@given(take_schedules())
def test_bucket_never_exceeds_burst_plus_rate_times_window(
    schedule: tuple[float, float, list[tuple[float, float]]],
) -> None:
    rate_per_s, burst, attempts = schedule
    bucket = TokenBucket(rate_per_s, burst)
    taken = [(now, n) for now, n in attempts if bucket.try_take(now, n)]
    for i, (t0, _) in enumerate(taken):
        total = 0.0
        for t1, n in taken[i:]:
            total += n
            bound = burst + rate_per_s * (t1 - t0)
            # Slack: the documented take epsilon plus float rounding of the sums.
            assert total <= bound + EPSILON_TOKENS + 1e-9 * (1.0 + bound)


@settings(max_examples=300, deadline=None)
@given(
    rate_per_s=st.floats(0.001, 100_000.0),
    burst=st.floats(1.0, 100.0),
    taken=st.floats(0.0, 1.0),
    n=st.floats(0.01, 1.0),
    later_s=st.floats(0.0, 10.0),
    start=st.sampled_from([0.0, 1.0, T0, 4.0e9]),
)
def test_bucket_next_available_at_is_never_early(
    rate_per_s: float, burst: float, taken: float, n: float, later_s: float, start: float
) -> None:
    bucket = TokenBucket(rate_per_s, burst)
    bucket.try_take(start, burst * taken if burst * taken > 0.0 else burst)
    now = start + later_s
    at = bucket.next_available_at(now, n)
    assert at >= now
    assert bucket.try_take(at, n)


# --- RateLimitConfig -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_activities_per_second": 0.0}, "max_activities_per_second"),
        ({"max_activities_per_second": -5.0}, "max_activities_per_second"),
        ({"max_activities_per_second": math.nan}, "max_activities_per_second"),
        ({"max_activities_per_second": math.inf}, "max_activities_per_second"),
        ({"burst": 5.0}, "burst"),
        ({"max_activities_per_second": 5.0, "burst": 0.5}, "burst"),
        ({"max_activities_per_second": 5.0, "burst": math.nan}, "burst"),
        ({"partition_per_second": {"eu": 0.0}}, "partition_per_second['eu']"),
        ({"default_partition_per_second": -1.0}, "default_partition_per_second"),
        ({"activity_type_per_second": {"x": math.nan}}, "activity_type_per_second['x']"),
        ({"max_concurrent_activities": 0}, "max_concurrent_activities"),
        ({"max_tenant_concurrency": -1}, "max_tenant_concurrency"),
        ({"tenant_concurrency": {"acme": 0}}, "tenant_concurrency['acme']"),
    ],
)
def test_config_rejects_bad_values(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        RateLimitConfig(**kwargs)  # type: ignore[arg-type]
    assert info.value.details["field"] == field


def test_config_is_validated_when_decoded() -> None:
    with pytest.raises(InvalidArgument):
        msgspec.json.decode(b'{"max_concurrent_activities": 0}', type=RateLimitConfig)
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(b'{"max_activities_per_sec": 1}', type=RateLimitConfig)


def test_config_global_burst_defaults() -> None:
    assert RateLimitConfig().global_burst() is None
    assert RateLimitConfig(max_activities_per_second=0.5).global_burst() == 1.0
    assert RateLimitConfig(max_activities_per_second=20.0).global_burst() == 20.0
    assert RateLimitConfig(max_activities_per_second=20.0, burst=3.0).global_burst() == 3.0


# --- RateLimiter: each limit and reason ------------------------------------------------------


def test_unlimited_never_blocks_but_counts_running() -> None:
    limiter = RateLimiter(RateLimitConfig())
    for _ in range(1000):
        assert dispatch(limiter, T0) is None
    assert limiter.running() == 1000
    assert limiter.running("acme") == 1000
    assert limiter.next_eligible_at(T0, activity_type="email", partition="p1") is None
    assert limiter.snapshot().partition_buckets == {}


def test_global_rate() -> None:
    limiter = RateLimiter(RateLimitConfig(max_activities_per_second=2.0, burst=2.0))
    assert dispatch(limiter, T0) is None
    assert dispatch(limiter, T0, partition="other", tenant="t2") is None
    assert dispatch(limiter, T0, activity_type="x") == "global_rate"
    assert dispatch(limiter, T0) is BlockReason.GLOBAL_RATE
    assert limiter.next_eligible_at(T0, activity_type="email", partition="p1") == T0 + 0.5
    assert dispatch(limiter, T0 + 0.5) is None
    assert dispatch(limiter, T0 + 0.5) == "global_rate"


def test_partition_rate_and_default_partition_rate() -> None:
    limiter = RateLimiter(
        RateLimitConfig(partition_per_second={"eu": 1.0}, default_partition_per_second=2.0)
    )
    assert dispatch(limiter, 0.0, partition="eu") is None
    assert dispatch(limiter, 0.0, partition="eu") == "partition_rate"
    # Other partitions have their own (default-rate) buckets.
    assert dispatch(limiter, 0.0, partition="us") is None
    assert dispatch(limiter, 0.0, partition="us") is None
    assert dispatch(limiter, 0.0, partition="us") == "partition_rate"
    assert dispatch(limiter, 0.0, partition="ap") is None
    assert limiter.next_eligible_at(0.0, activity_type="email", partition="eu") == 1.0
    assert limiter.next_eligible_at(0.0, activity_type="email", partition="us") == 0.5
    assert limiter.next_eligible_at(0.0, activity_type="email", partition="ap") is None
    assert dispatch(limiter, 0.5, partition="us") is None
    assert dispatch(limiter, 0.5, partition="eu") == "partition_rate"
    assert dispatch(limiter, 1.0, partition="eu") is None


def test_named_partition_only() -> None:
    limiter = RateLimiter(RateLimitConfig(partition_per_second={"eu": 1.0}))
    for _ in range(10):
        assert dispatch(limiter, 0.0, partition="us") is None
    assert set(limiter.snapshot().partition_buckets) == set()
    assert dispatch(limiter, 0.0, partition="eu") is None
    assert dispatch(limiter, 0.0, partition="eu") == "partition_rate"


def test_activity_type_rate() -> None:
    limiter = RateLimiter(RateLimitConfig(activity_type_per_second={"email": 10.0}))
    for _ in range(10):
        assert dispatch(limiter, 0.0) is None
    assert dispatch(limiter, 0.0) == "activity_type_rate"
    assert dispatch(limiter, 0.0, activity_type="sms") is None
    assert limiter.next_eligible_at(0.0, activity_type="email", partition="p1") == 0.1
    assert dispatch(limiter, 0.1) is None
    assert dispatch(limiter, 0.1) == "activity_type_rate"


def test_max_concurrent() -> None:
    limiter = RateLimiter(RateLimitConfig(max_concurrent_activities=2))
    assert dispatch(limiter, 0.0) is None
    assert dispatch(limiter, 0.0, tenant="t2") is None
    assert dispatch(limiter, 0.0, tenant="t3") == "max_concurrent"
    assert limiter.running() == 2
    # Concurrency is not a rate limit: no instant helps, only a release.
    assert limiter.next_eligible_at(5.0, activity_type="email", partition="p1") is None
    limiter.release("t2")
    assert dispatch(limiter, 0.0, tenant="t3") is None


def test_tenant_concurrency_default_and_override() -> None:
    limiter = RateLimiter(RateLimitConfig(max_tenant_concurrency=1, tenant_concurrency={"big": 3}))
    assert dispatch(limiter, 0.0, tenant="acme") is None
    assert dispatch(limiter, 0.0, tenant="acme") == "tenant_concurrency"
    for _ in range(3):
        assert dispatch(limiter, 0.0, tenant="big") is None
    assert dispatch(limiter, 0.0, tenant="big") == "tenant_concurrency"
    assert limiter.running() == 4
    assert limiter.running("big") == 3
    assert limiter.running("acme") == 1
    assert limiter.running("nobody") == 0
    limiter.release("acme")
    assert limiter.running("acme") == 0
    assert dispatch(limiter, 0.0, tenant="acme") is None


def test_tenant_override_without_default_limits_only_that_tenant() -> None:
    limiter = RateLimiter(RateLimitConfig(tenant_concurrency={"small": 1}))
    assert dispatch(limiter, 0.0, tenant="small") is None
    assert dispatch(limiter, 0.0, tenant="small") == "tenant_concurrency"
    for _ in range(5):
        assert dispatch(limiter, 0.0, tenant="other") is None


def test_reasons_are_reported_broadest_first() -> None:
    limiter = RateLimiter(
        RateLimitConfig(
            max_activities_per_second=1.0,
            partition_per_second={"p1": 1.0},
            activity_type_per_second={"email": 1.0},
            max_concurrent_activities=1,
            max_tenant_concurrency=1,
        )
    )
    assert dispatch(limiter, 0.0) is None
    # Everything is exhausted now; the broadest reason wins, then the next.
    assert dispatch(limiter, 0.0) == "max_concurrent"
    limiter.release("acme")
    assert dispatch(limiter, 0.0) == "global_rate"
    assert dispatch(limiter, 1.0) is None
    assert dispatch(limiter, 2.0) == "max_concurrent"
    assert [r.value for r in BlockReason] == [
        "max_concurrent",
        "global_rate",
        "tenant_concurrency",
        "partition_rate",
        "activity_type_rate",
    ]


def test_reason_order_tenant_partition_type() -> None:
    limiter = RateLimiter(
        RateLimitConfig(
            partition_per_second={"p1": 1.0},
            activity_type_per_second={"email": 1.0},
            max_tenant_concurrency=1,
        )
    )
    assert dispatch(limiter, 0.0) is None
    assert dispatch(limiter, 0.0) == "tenant_concurrency"
    assert dispatch(limiter, 0.0, tenant="t2") == "partition_rate"
    assert dispatch(limiter, 0.0, tenant="t2", partition="p2") == "activity_type_rate"
    assert dispatch(limiter, 0.0, tenant="t2", partition="p2", activity_type="sms") is None


def test_blocked_consumes_nothing() -> None:
    limiter = RateLimiter(
        RateLimitConfig(
            max_activities_per_second=1.0,
            default_partition_per_second=1.0,
            activity_type_per_second={"email": 1.0},
            max_concurrent_activities=1,
            max_tenant_concurrency=1,
        )
    )
    before = limiter.snapshot()
    for now in (0.0, 1.0, 2.0):
        for _ in range(5):
            assert limiter.blocked(now, **KW) is None
    assert limiter.snapshot() == before


def test_buckets_are_created_lazily_on_first_acquire() -> None:
    limiter = RateLimiter(
        RateLimitConfig(default_partition_per_second=5.0, activity_type_per_second={"a": 5.0})
    )
    assert limiter.snapshot().partition_buckets == {}
    assert limiter.blocked(0.0, activity_type="a", partition="x", tenant="t") is None
    assert limiter.snapshot().partition_buckets == {}
    limiter.acquire(0.0, activity_type="a", partition="x", tenant="t")
    limiter.acquire(0.0, activity_type="b", partition="y", tenant="t")
    snap = limiter.snapshot()
    assert list(snap.partition_buckets) == ["x", "y"]
    assert list(snap.activity_type_buckets) == ["a"]
    assert snap.partition_buckets["x"] == BucketState(tokens=4.0, last_refill_at=0.0)


def test_prune_drops_only_full_buckets_and_changes_no_decision() -> None:
    config = RateLimitConfig(default_partition_per_second=1.0)
    limiter = RateLimiter(config)
    twin = RateLimiter(config)
    for lim in (limiter, twin):
        dispatch(lim, 0.0, partition="a")
        dispatch(lim, 0.5, partition="b")
    assert limiter.prune(1.0) == 1  # "a" is full again at 1.0, "b" is not
    assert list(limiter.snapshot().partition_buckets) == ["b"]
    for now in (1.0, 1.2, 1.5, 1.5, 2.0, 2.0, 2.0):
        for key in ("a", "b"):
            assert dispatch(limiter, now, partition=key) == dispatch(twin, now, partition=key)


def test_prune_looks_at_a_bounded_batch_in_turn_and_keeps_the_rest() -> None:
    limiter = RateLimiter(RateLimitConfig(default_partition_per_second=1.0))
    for i, key in enumerate("abcde"):
        dispatch(limiter, i * 0.25, partition=key)  # "a" used at 0.0 ... "e" at 1.0
    # At 1.3 "a" and "b" are full again; "c" (used at 0.5) is not.
    assert limiter.prune(1.3, batch=2) == 2
    assert list(limiter.snapshot().partition_buckets) == ["c", "d", "e"]
    # The next batch starts where this one stopped; a bucket not full goes to the back.
    assert limiter.prune(1.3, batch=2) == 0
    assert list(limiter.snapshot().partition_buckets) == ["e", "c", "d"]
    assert limiter.prune(2.0, batch=2) == 2  # "e" (used at 1.0) and "c" are full at 2.0
    assert list(limiter.snapshot().partition_buckets) == ["d"]
    assert limiter.prune(2.0, batch=2) == 1
    assert limiter.snapshot().partition_buckets == {}


def test_release_never_goes_below_zero() -> None:
    limiter = RateLimiter(RateLimitConfig())
    with pytest.raises(Internal):
        limiter.release("acme")
    dispatch(limiter, 0.0)
    limiter.release("acme")
    with pytest.raises(Internal):
        limiter.release("acme")
    assert limiter.running() == 0
    assert limiter.snapshot().running_by_tenant == {}


def test_acquire_while_blocked_is_asserted() -> None:
    limiter = RateLimiter(RateLimitConfig(max_concurrent_activities=1))
    dispatch(limiter, 0.0)
    with pytest.raises(AssertionError):
        limiter.acquire(0.0, **KW)


def test_next_eligible_at_is_the_latest_bucket() -> None:
    limiter = RateLimiter(
        RateLimitConfig(
            max_activities_per_second=10.0,
            partition_per_second={"p1": 1.0},
            activity_type_per_second={"email": 4.0},
        )
    )
    assert dispatch(limiter, 0.0) is None
    at = limiter.next_eligible_at(0.0, activity_type="email", partition="p1")
    assert at == 1.0
    assert dispatch(limiter, 0.999) == "partition_rate"
    assert dispatch(limiter, at) is None


@settings(max_examples=100, deadline=None)
@given(
    rate_per_s=st.floats(0.5, 5000.0),
    gaps=st.lists(st.floats(0.0, 0.01), min_size=1, max_size=200),
)
def test_waking_at_next_eligible_at_always_dispatches(rate_per_s: float, gaps: list[float]) -> None:
    limiter = RateLimiter(RateLimitConfig(max_activities_per_second=rate_per_s))
    now = T0
    for gap in gaps:
        now += gap
        if dispatch(limiter, now) is not None:
            at = limiter.next_eligible_at(now, activity_type="email", partition="p1")
            assert at is not None
            assert at > now
            assert dispatch(limiter, at) is None
            now = at


# --- Snapshot and restore --------------------------------------------------------------------

FULL_CONFIG = RateLimitConfig(
    max_activities_per_second=50.0,
    burst=5.0,
    partition_per_second={"p1": 7.0},
    default_partition_per_second=20.0,
    activity_type_per_second={"email": 9.0, "sms": 3.0},
    max_concurrent_activities=12,
    max_tenant_concurrency=4,
    tenant_concurrency={"big": 8},
)


def drive(limiter: RateLimiter, start: float, steps: int) -> list[str | None]:
    """A deterministic but irregular workload; returns every decision."""
    decisions: list[str | None] = []
    running: list[str] = []
    now = start
    for i in range(steps):
        now += (i * 7919 % 13) / 97.0
        kw = {
            "activity_type": ("email", "sms", "pdf")[i % 3],
            "partition": ("p1", "p2", "p3", "p4")[i * 5 % 4],
            "tenant": ("acme", "big", "small")[i * 11 % 3],
        }
        reason = dispatch(limiter, now, **kw)
        decisions.append(reason)
        if reason is None:
            running.append(kw["tenant"])
        if running and i % 4 == 0:
            limiter.release(running.pop(0))
        next_at = limiter.next_eligible_at(now, activity_type="email", partition="p1")
        decisions.append(repr(next_at))
    return decisions


def test_snapshot_restore_round_trips_exactly() -> None:
    original = RateLimiter(FULL_CONFIG)
    drive(original, T0, 300)
    snap = original.snapshot()
    wire = msgspec.json.encode(snap)
    decoded = msgspec.json.decode(wire, type=RateLimiterSnapshot)
    assert decoded == snap
    restored = RateLimiter.restore(FULL_CONFIG, decoded)
    assert msgspec.json.encode(restored.snapshot()) == wire
    later = T0 + 1000.0
    assert drive(restored, later, 500) == drive(original, later, 500)
    assert msgspec.json.encode(restored.snapshot()) == msgspec.json.encode(original.snapshot())


def test_restore_of_fresh_snapshot_is_fresh() -> None:
    snap = RateLimiter(FULL_CONFIG).snapshot()
    assert snap.global_bucket == BucketState(tokens=5.0, last_refill_at=None)
    restored = RateLimiter.restore(FULL_CONFIG, snap)
    assert drive(restored, T0, 100) == drive(RateLimiter(FULL_CONFIG), T0, 100)


def test_restore_under_changed_config_drops_and_caps() -> None:
    original = RateLimiter(FULL_CONFIG)
    drive(original, T0, 50)
    snap = original.snapshot()
    smaller = RateLimitConfig(partition_per_second={"p1": 0.5})
    restored = RateLimiter.restore(smaller, snap)
    new = restored.snapshot()
    assert new.global_bucket is None
    assert set(new.partition_buckets) == {"p1"}
    assert new.partition_buckets["p1"].tokens <= 1.0
    assert new.activity_type_buckets == {}
    assert new.running == snap.running
    assert new.running_by_tenant == snap.running_by_tenant


@pytest.mark.parametrize(
    "snapshot",
    [
        RateLimiterSnapshot(version=2),
        RateLimiterSnapshot(running=1),
        RateLimiterSnapshot(running=1, running_by_tenant={"a": 2}),
        RateLimiterSnapshot(running=0, running_by_tenant={"a": 0}),
        RateLimiterSnapshot(global_bucket=BucketState(tokens=math.inf, last_refill_at=None)),
    ],
)
def test_restore_rejects_corrupt_snapshots(snapshot: RateLimiterSnapshot) -> None:
    with pytest.raises(CorruptRecord):
        RateLimiter.restore(FULL_CONFIG, snapshot)
