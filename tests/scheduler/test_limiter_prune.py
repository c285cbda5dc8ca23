"""The core trims idle rate-limit buckets on its ticks (bounded work per tick), and a
trim never changes a dispatch decision."""

from __future__ import annotations

import math

from _core_helpers import T0, Driver, act, of_type

from wf.scheduler.config import SchedulerConfig
from wf.scheduler.outputs import LeaseGranted
from wf.scheduler.queue import PartitionKey
from wf.scheduler.rate_limiter import PRUNE_BATCH, RateLimitConfig, RateLimiter

HOUR = 3600.0
TENANTS = 2 * PRUNE_BATCH + 10
"""More partitions than one tick looks at, so trimming them takes several ticks."""
LIMITS = RateLimitConfig(default_partition_per_second=1.0)


class _NeverPrunes(RateLimiter):
    """A limiter that keeps every bucket: the reference a trimmed one must agree with."""

    def prune(self, now: float, batch: int = PRUNE_BATCH) -> int:
        return 0


def per_tenant_partitions(limiter: RateLimiter | None = None) -> Driver:
    """A core with one partition per tenant, each limited to one dispatch a second,
    and a worker polling for more than it will ever be given."""
    d = Driver(
        SchedulerConfig(partition_by=(PartitionKey.TENANT,), limits=LIMITS, lease_ttl_s=HOUR)
    )
    if limiter is not None:
        d.core.limiter = limiter
    d.register("w1", max_concurrency=1000)
    d.poll("w1", n=1000)
    return d


def bucket_keys(d: Driver) -> list[str]:
    return list(d.core.limiter.snapshot().partition_buckets)


def grant_times(d: Driver, tenant: str) -> list[float]:
    return [
        g.lease.granted_at
        for g in of_type(d.decisions, LeaseGranted)
        if d.core.activities[g.lease.activity_id].tenant == tenant
    ]


def test_idle_full_buckets_are_trimmed_a_bounded_batch_per_tick() -> None:
    d = per_tenant_partitions()
    d.submit(*(act(f"a{i}", tenant=f"t{i}") for i in range(TENANTS)))
    assert len(bucket_keys(d)) == TENANTS  # one dispatch each: every bucket is empty
    d.tick(T0 + 0.5)
    assert len(bucket_keys(d)) == TENANTS  # half full: nothing may go
    d.tick(T0 + 1.0)
    assert len(bucket_keys(d)) == TENANTS - PRUNE_BATCH  # full again: one batch goes
    for _ in range(math.ceil(TENANTS / PRUNE_BATCH)):
        d.tick()
    assert bucket_keys(d) == []


def test_a_busy_bucket_is_kept_while_idle_ones_go() -> None:
    d = per_tenant_partitions()
    d.submit(*(act(f"a{i}", tenant=f"t{i}") for i in range(3)))
    d.submit(*(act(f"busy{i}", tenant="t1") for i in range(5)))  # paced at 1 a second
    d.tick(T0 + 1.0)
    d.tick(T0 + 1.5)
    assert bucket_keys(d) == ["tenant=t1"]


def test_limits_hold_after_a_trim_exactly_as_without_one() -> None:
    trimmed, kept = per_tenant_partitions(), per_tenant_partitions(_NeverPrunes(LIMITS))
    for d in (trimmed, kept):
        d.submit(*(act(f"a{i}", tenant=f"t{i}") for i in range(TENANTS)))
        d.tick(T0 + 5.0)
        d.tick(T0 + 5.0)
        d.tick(T0 + 5.0)
        d.tick(T0 + 5.0)
    assert bucket_keys(trimmed) == []
    assert len(bucket_keys(kept)) == TENANTS
    for d in (trimmed, kept):
        d.submit(*(act(f"b{i}", tenant="t0") for i in range(3)))
        while (wake := d.core.next_wake_at(d.now)) is not None and wake < T0 + HOUR:
            d.tick(wake)
    # The burst of one, then one a second: a trimmed bucket is a full one.
    assert grant_times(trimmed, "t0") == [T0, T0 + 5.0, T0 + 6.0, T0 + 7.0]
    assert trimmed.decisions == kept.decisions
