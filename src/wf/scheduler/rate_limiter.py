"""WF-005 §19 rate limiting: token buckets and concurrency caps for dispatch.

Theory of operation
-------------------
A :class:`TokenBucket` holds up to ``burst`` tokens and gains ``rate_per_s``
tokens per second of scheduler time. Its whole state is two floats: the level
at the last refill and the instant of that refill. The level at any later
``now`` is ``min(burst, tokens + (now - last_refill_at) * rate_per_s)``, so a
read never has to mutate the bucket, and two buckets with the same state and
the same calls make bit-identical decisions. An instant at or before the last
refill adds nothing: time going backwards never creates tokens. A new bucket is
full and unanchored until its first refill.

A :class:`RateLimiter` combines, for one dispatch, every limit that applies:

* ``max_concurrent_activities``: activities leased or executing, in total;
* ``max_activities_per_second``: one global bucket;
* ``max_tenant_concurrency`` / ``tenant_concurrency``: leased or executing
  activities per tenant;
* ``partition_per_second`` / ``default_partition_per_second``: one bucket per
  queue partition key;
* ``activity_type_per_second``: one bucket per activity type.

The dispatcher asks :meth:`RateLimiter.blocked` (a pure query) before it
leases; when that returns ``None`` it leases and calls
:meth:`RateLimiter.acquire`, which takes one token from every applicable
bucket and counts the activity as running. Every lease end (complete, fail,
requeue, cancel) calls :meth:`RateLimiter.release`. Limits are checked from the
broadest to the narrowest (see :class:`BlockReason`) so that the first reason
tells the dispatcher how much of the queue it may skip: a global reason stops
the pass, a tenant, partition or type reason skips only matching work.

Partition and activity-type buckets are created on first :meth:`acquire`; an
absent bucket behaves exactly like a full one, which is what a new bucket is,
so queries never allocate. For the same reason a bucket that is full again
can be dropped without changing any decision: the core's every tick calls
:meth:`RateLimiter.prune`, which looks at a bounded number of buckets, in
turn, and drops the full ones, so memory follows the keys in recent use, not
every key ever seen. With nothing configured every call is a single
attribute test, plus the running counts that :meth:`RateLimiter.running`
reports.

:meth:`RateLimiter.snapshot` captures every bucket level, last-refill instant
and running count; :meth:`RateLimiter.restore` with the same configuration
rebuilds a limiter whose later decisions are byte-identical.
"""

from __future__ import annotations

import enum
import math
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

import msgspec

from wf.errors import CorruptRecord, Internal, InvalidArgument

EPSILON_TOKENS: Final = 1e-9
"""Slack in every "is a token there" test.

Refill arithmetic rounds; without slack a take scheduled for the exact instant
a token is due could miss it by one ulp. The slack never lets the level fall
below ``-EPSILON_TOKENS``, so the long-run bound is unchanged.
"""

PRUNE_BATCH: Final = 64
"""Buckets of each kind (partition, activity type) one :meth:`RateLimiter.prune` looks at."""

_NUDGES_MAX: Final = 64
"""Bound on the ulp steps :meth:`TokenBucket.next_available_at` takes past a rounded instant."""

SNAPSHOT_VERSION: Final = 1
"""Version of :class:`RateLimiterSnapshot`'s serialized form."""


def _require_rate(field: str, value: float) -> None:
    """A rate must be finite and strictly positive (a zero rate would block forever)."""
    if not (math.isfinite(value) and value > 0.0):
        raise InvalidArgument(
            f"{field} must be a finite number above zero, got {value!r}", field=field
        )


def _require_count(field: str, value: int) -> None:
    """A concurrency cap must be at least one (zero would block forever)."""
    if value < 1:
        raise InvalidArgument(f"{field} must be at least 1, got {value!r}", field=field)


class BucketState(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The persisted state of one :class:`TokenBucket`."""

    tokens: float
    """Level at ``last_refill_at`` (slightly negative at most by ``EPSILON_TOKENS``)."""
    last_refill_at: float | None
    """Instant of the last refill; ``None`` for a bucket never used (it is full)."""


class TokenBucket:
    """A deterministic token bucket: ``burst`` capacity, ``rate_per_s`` refill, starts full."""

    __slots__ = ("_last_refill_at", "_tokens", "burst", "rate_per_s")

    def __init__(self, rate_per_s: float, burst: float) -> None:
        _require_rate("rate_per_s", rate_per_s)
        _require_rate("burst", burst)
        self.rate_per_s: Final = float(rate_per_s)
        """Tokens gained per second."""
        self.burst: Final = float(burst)
        """Capacity: the most tokens the bucket holds."""
        self._tokens = self.burst
        self._last_refill_at: float | None = None

    @property
    def last_refill_at(self) -> float | None:
        """Instant of the last refill, ``None`` until the bucket is first used."""
        return self._last_refill_at

    def _level(self, now: float) -> float:
        """The level at ``now`` without changing anything."""
        last = self._last_refill_at
        if last is None or now <= last:
            return self._tokens
        level = self._tokens + (now - last) * self.rate_per_s
        return level if level < self.burst else self.burst

    def refill(self, now: float) -> None:
        """Credit the tokens earned up to ``now``; a ``now`` not after the last refill adds none."""
        last = self._last_refill_at
        if last is None or now > last:
            self._tokens = self._level(now)
            self._last_refill_at = now

    def available(self, now: float) -> float:
        """Tokens available at ``now`` (never negative); does not change the bucket."""
        level = self._level(now)
        return level if level > 0.0 else 0.0

    def try_take(self, now: float, n: float = 1.0) -> bool:
        """Refill to ``now``, then take ``n`` tokens if they are there; return whether it did."""
        assert n > 0.0, n
        self.refill(now)
        if self._tokens + EPSILON_TOKENS >= n:
            self._tokens -= n
            return True
        return False

    def _force_take(self, now: float, n: float) -> None:
        """Refill and take ``n`` even if that leaves a debt (callers checked first).

        :meth:`refill` inlined, with the same arithmetic: this runs on every dispatch.
        """
        last = self._last_refill_at
        if last is None:
            self._last_refill_at = now
        elif now > last:
            level = self._tokens + (now - last) * self.rate_per_s
            self._tokens = level if level < self.burst else self.burst
            self._last_refill_at = now
        self._tokens -= n

    def next_available_at(self, now: float, n: float = 1.0) -> float:
        """The first instant, not before ``now``, at which ``n`` tokens are there.

        ``now`` itself when they already are; ``math.inf`` when ``n`` exceeds
        the burst. A :meth:`try_take` at the returned instant succeeds (unless
        something else takes first).
        """
        level = self._level(now)
        if level + EPSILON_TOKENS >= n:
            return now
        if n > self.burst + EPSILON_TOKENS:
            return math.inf
        last = self._last_refill_at
        # A short level means the bucket was used, so it is anchored; tokens
        # accrue only after the later of ``now`` and the last refill.
        base = now if last is None or now > last else last
        at = base + (n - level) / self.rate_per_s
        # The division and the addition round; step forward to the first float
        # at which the level really reaches ``n`` so that a wake-up there works.
        for _ in range(_NUDGES_MAX):
            if self._level(at) + EPSILON_TOKENS >= n:
                break
            at = math.nextafter(at, math.inf)
        return at

    def snapshot(self) -> BucketState:
        """The bucket's state, for :meth:`restore`."""
        return BucketState(tokens=self._tokens, last_refill_at=self._last_refill_at)

    @classmethod
    def restore(cls, rate_per_s: float, burst: float, state: BucketState) -> TokenBucket:
        """A bucket with the given parameters and state; a level above ``burst`` is capped.

        Raises :class:`~wf.errors.CorruptRecord` if the state holds non-finite numbers.
        """
        last = state.last_refill_at
        if not math.isfinite(state.tokens) or (last is not None and not math.isfinite(last)):
            raise CorruptRecord(
                "token bucket state holds a non-finite number",
                tokens=state.tokens,
                last_refill_at=last,
            )
        bucket = cls(rate_per_s, burst)
        bucket._tokens = state.tokens if state.tokens < bucket.burst else bucket.burst
        bucket._last_refill_at = last
        return bucket

    def __repr__(self) -> str:
        return (
            f"TokenBucket(rate_per_s={self.rate_per_s!r}, burst={self.burst!r}, "
            f"tokens={self._tokens!r}, last_refill_at={self._last_refill_at!r})"
        )


class BlockReason(enum.StrEnum):
    """Why :meth:`RateLimiter.blocked` refuses a dispatch; checked in this order."""

    MAX_CONCURRENT = "max_concurrent"
    """``max_concurrent_activities`` are running; wait for a :meth:`RateLimiter.release`."""
    GLOBAL_RATE = "global_rate"
    """The global bucket is empty; see :meth:`RateLimiter.next_eligible_at`."""
    TENANT_CONCURRENCY = "tenant_concurrency"
    """The tenant runs its cap of activities; other tenants may still dispatch."""
    PARTITION_RATE = "partition_rate"
    """The partition's bucket is empty; other partitions may still dispatch."""
    ACTIVITY_TYPE_RATE = "activity_type_rate"
    """The activity type's bucket is empty; other types may still dispatch."""


# Bound once so the hot path does no enum class attribute lookups.
_MAX_CONCURRENT: Final = BlockReason.MAX_CONCURRENT
_GLOBAL_RATE: Final = BlockReason.GLOBAL_RATE
_TENANT_CONCURRENCY: Final = BlockReason.TENANT_CONCURRENCY
_PARTITION_RATE: Final = BlockReason.PARTITION_RATE
_ACTIVITY_TYPE_RATE: Final = BlockReason.ACTIVITY_TYPE_RATE


class RateLimitConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """WF-005 §19 limits; every ``None`` or empty field means "no such limit"."""

    max_activities_per_second: float | None = None
    """Global dispatch rate (``maxActivitiesPerSecond``)."""
    burst: float | None = None
    """Capacity of the global bucket; default ``max(1, max_activities_per_second)``."""
    partition_per_second: dict[str, float] = msgspec.field(default_factory=dict)
    """Dispatch rate per queue partition key (bucket burst ``max(1, rate)``)."""
    default_partition_per_second: float | None = None
    """Dispatch rate of each partition not named in ``partition_per_second``."""
    activity_type_per_second: dict[str, float] = msgspec.field(default_factory=dict)
    """Dispatch rate per activity type (bucket burst ``max(1, rate)``)."""
    max_concurrent_activities: int | None = None
    """Activities leased or executing at once, in total (``maxConcurrentActivities``)."""
    max_tenant_concurrency: int | None = None
    """Activities leased or executing at once per tenant (``maxTenantConcurrency``)."""
    tenant_concurrency: dict[str, int] = msgspec.field(default_factory=dict)
    """Per-tenant overrides of ``max_tenant_concurrency``."""

    def __post_init__(self) -> None:
        if self.max_activities_per_second is not None:
            _require_rate("max_activities_per_second", self.max_activities_per_second)
        if self.burst is not None:
            if self.max_activities_per_second is None:
                raise InvalidArgument(
                    "burst is set but max_activities_per_second is not", field="burst"
                )
            # Every dispatch takes one whole token: a smaller burst would never allow one.
            if not (math.isfinite(self.burst) and self.burst >= 1.0):
                raise InvalidArgument(
                    f"burst must be a finite number of at least 1, got {self.burst!r}",
                    field="burst",
                )
        for key, rate in self.partition_per_second.items():
            _require_rate(f"partition_per_second[{key!r}]", rate)
        if self.default_partition_per_second is not None:
            _require_rate("default_partition_per_second", self.default_partition_per_second)
        for key, rate in self.activity_type_per_second.items():
            _require_rate(f"activity_type_per_second[{key!r}]", rate)
        if self.max_concurrent_activities is not None:
            _require_count("max_concurrent_activities", self.max_concurrent_activities)
        if self.max_tenant_concurrency is not None:
            _require_count("max_tenant_concurrency", self.max_tenant_concurrency)
        for key, cap in self.tenant_concurrency.items():
            _require_count(f"tenant_concurrency[{key!r}]", cap)

    def global_burst(self) -> float | None:
        """The global bucket's capacity, or ``None`` without a global rate."""
        rate = self.max_activities_per_second
        if rate is None:
            return None
        return self.burst if self.burst is not None else _default_burst(rate)

    def partition_rate(self, partition: str) -> float | None:
        """The rate limiting ``partition``, or ``None`` if it is not limited."""
        return self.partition_per_second.get(partition, self.default_partition_per_second)


def _default_burst(rate_per_s: float) -> float:
    """One second's worth of tokens, but never less than one dispatch."""
    return rate_per_s if rate_per_s > 1.0 else 1.0


class RateLimiterSnapshot(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Everything a :class:`RateLimiter` holds besides its configuration."""

    version: int = SNAPSHOT_VERSION
    """Serialized-form version."""
    global_bucket: BucketState | None = None
    """The global bucket, if a global rate is configured."""
    partition_buckets: dict[str, BucketState] = msgspec.field(default_factory=dict)
    """Partition key -> bucket, for partitions used so far."""
    activity_type_buckets: dict[str, BucketState] = msgspec.field(default_factory=dict)
    """Activity type -> bucket, for types used so far."""
    running: int = 0
    """Activities leased or executing."""
    running_by_tenant: dict[str, int] = msgspec.field(default_factory=dict)
    """Tenant -> activities leased or executing (only tenants with some)."""


class RateLimiter:
    """Applies a :class:`RateLimitConfig` to dispatches; see the module docstring."""

    __slots__ = (
        "_config",
        "_default_tenant_cap",
        "_global",
        "_max_concurrent",
        "_partition_buckets",
        "_partition_limited",
        "_running",
        "_running_by_tenant",
        "_tenant_caps",
        "_tenant_limited",
        "_type_buckets",
        "_type_limited",
        "_type_rates",
        "_unlimited",
    )

    def __init__(self, config: RateLimitConfig) -> None:
        self._config: Final = config
        global_rate = config.max_activities_per_second
        global_burst = config.global_burst()
        self._global: TokenBucket | None = (
            TokenBucket(global_rate, global_burst)
            if global_rate is not None and global_burst is not None
            else None
        )
        self._partition_limited: Final = bool(
            config.partition_per_second or config.default_partition_per_second is not None
        )
        self._type_rates: Final = dict(config.activity_type_per_second)
        self._type_limited: Final = bool(self._type_rates)
        self._max_concurrent: Final = config.max_concurrent_activities
        self._default_tenant_cap: Final = config.max_tenant_concurrency
        self._tenant_caps: Final = dict(config.tenant_concurrency)
        self._tenant_limited: Final = bool(
            self._tenant_caps or self._default_tenant_cap is not None
        )
        self._unlimited: Final = not (
            self._global is not None
            or self._partition_limited
            or self._type_limited
            or self._max_concurrent is not None
            or self._tenant_limited
        )
        # Ordered: prune() looks at the front and sends survivors to the back, a
        # round robin in O(1) per bucket (a plain dict's deleted front slots would
        # be scanned past by every later next(iter(...))).
        self._partition_buckets: OrderedDict[str, TokenBucket] = OrderedDict()
        self._type_buckets: OrderedDict[str, TokenBucket] = OrderedDict()
        self._running = 0
        self._running_by_tenant: dict[str, int] = {}

    @property
    def config(self) -> RateLimitConfig:
        """The limits this limiter applies."""
        return self._config

    def blocked(
        self, now: float, *, activity_type: str, partition: str, tenant: str
    ) -> BlockReason | None:
        """``None`` if one more dispatch is allowed at ``now``, else the first reason it is not.

        A pure query: it neither takes tokens nor creates buckets.
        """
        if self._unlimited:
            return None
        cap = self._max_concurrent
        if cap is not None and self._running >= cap:
            return _MAX_CONCURRENT
        bucket = self._global
        if bucket is not None and bucket._level(now) + EPSILON_TOKENS < 1.0:
            return _GLOBAL_RATE
        if self._tenant_limited:
            tenant_cap = self._tenant_caps.get(tenant, self._default_tenant_cap)
            if tenant_cap is not None and self._running_by_tenant.get(tenant, 0) >= tenant_cap:
                return _TENANT_CONCURRENCY
        if self._partition_limited:
            bucket = self._partition_buckets.get(partition)
            if bucket is not None and bucket._level(now) + EPSILON_TOKENS < 1.0:
                return _PARTITION_RATE
        if self._type_limited:
            bucket = self._type_buckets.get(activity_type)
            if bucket is not None and bucket._level(now) + EPSILON_TOKENS < 1.0:
                return _ACTIVITY_TYPE_RATE
        return None

    def acquire(self, now: float, *, activity_type: str, partition: str, tenant: str) -> None:
        """Record one dispatch: take a token from each applicable bucket, count it running.

        Call only right after :meth:`blocked` returned ``None`` for the same
        arguments. That is asserted; with assertions off a misuse leaves the
        buckets in debt, so later dispatches wait it out instead of overrunning.
        """
        assert (
            self.blocked(now, activity_type=activity_type, partition=partition, tenant=tenant)
            is None
        ), "acquire() while blocked"
        self._running += 1
        by_tenant = self._running_by_tenant
        by_tenant[tenant] = by_tenant.get(tenant, 0) + 1
        if self._unlimited:
            return
        bucket = self._global
        if bucket is not None:
            bucket._force_take(now, 1.0)
        if self._partition_limited:
            _take_one(self._partition_buckets, partition, self._config.partition_rate, now)
        if self._type_limited:
            _take_one(self._type_buckets, activity_type, self._type_rates.get, now)

    def release(self, tenant: str) -> None:
        """Record the end of a lease of ``tenant`` (complete, fail, requeue or cancel).

        Raises :class:`~wf.errors.Internal` if the tenant has nothing running:
        counts never go below zero, even with assertions off.
        """
        by_tenant = self._running_by_tenant
        count = by_tenant.get(tenant, 0)
        if count <= 0:
            raise Internal(f"release() for tenant {tenant!r} with nothing running", tenant=tenant)
        if count == 1:
            # Drop idle tenants so the map stays bounded by the running tenants.
            del by_tenant[tenant]
        else:
            by_tenant[tenant] = count - 1
        self._running -= 1

    def running(self, tenant: str | None = None) -> int:
        """Activities leased or executing, in total or for ``tenant``."""
        if tenant is None:
            return self._running
        return self._running_by_tenant.get(tenant, 0)

    def next_eligible_at(self, now: float, *, activity_type: str, partition: str) -> float | None:
        """When the rate limits alone next allow a dispatch of this kind.

        ``None`` if they allow one at ``now`` (or none applies); concurrency
        caps are ignored, since only a :meth:`release` lifts them.
        """
        if self._unlimited:
            return None
        at = now
        bucket = self._global
        if bucket is not None:
            at = max(at, bucket.next_available_at(now))
        bucket = self._partition_buckets.get(partition)
        if bucket is not None:
            at = max(at, bucket.next_available_at(now))
        bucket = self._type_buckets.get(activity_type)
        if bucket is not None:
            at = max(at, bucket.next_available_at(now))
        # Each bucket only fills up over time, so once the latest one is ready
        # all of them are.
        return None if at == now else at

    def prune(self, now: float, batch: int = PRUNE_BATCH) -> int:
        """Look at up to ``batch`` partition and ``batch`` type buckets and drop those
        full at ``now``; return how many were dropped.

        Buckets are looked at in turn (the least recently looked at first), so
        repeated calls visit every bucket. A full bucket decides exactly like an
        absent one, so pruning never changes a decision; it bounds memory when
        partition keys come and go.
        """
        dropped = 0
        for buckets in (self._partition_buckets, self._type_buckets):
            for _ in range(min(batch, len(buckets))):
                key, bucket = next(iter(buckets.items()))
                if bucket._level(now) >= bucket.burst:
                    del buckets[key]
                    dropped += 1
                else:
                    buckets.move_to_end(key)
        return dropped

    def snapshot(self) -> RateLimiterSnapshot:
        """Every bucket and count, for :meth:`restore`."""
        return RateLimiterSnapshot(
            global_bucket=None if self._global is None else self._global.snapshot(),
            partition_buckets={k: b.snapshot() for k, b in self._partition_buckets.items()},
            activity_type_buckets={k: b.snapshot() for k, b in self._type_buckets.items()},
            running=self._running,
            running_by_tenant=dict(self._running_by_tenant),
        )

    @classmethod
    def restore(cls, config: RateLimitConfig, snapshot: RateLimiterSnapshot) -> RateLimiter:
        """A limiter for ``config`` in the state of ``snapshot``.

        With the configuration the snapshot was taken under, the result makes
        the same decisions as the original would. Under a changed
        configuration, buckets of limits no longer configured are dropped and
        levels above a lowered burst are capped; running counts carry over.
        Raises :class:`~wf.errors.CorruptRecord` for an unknown version or
        inconsistent counts.
        """
        if snapshot.version != SNAPSHOT_VERSION:
            raise CorruptRecord(
                f"unsupported rate limiter snapshot version {snapshot.version}",
                version=snapshot.version,
            )
        counts = snapshot.running_by_tenant
        if any(c <= 0 for c in counts.values()) or sum(counts.values()) != snapshot.running:
            raise CorruptRecord(
                "rate limiter snapshot running counts are inconsistent",
                running=snapshot.running,
                running_by_tenant=dict(counts),
            )
        limiter = cls(config)
        global_bucket = limiter._global
        if global_bucket is not None and snapshot.global_bucket is not None:
            limiter._global = TokenBucket.restore(
                global_bucket.rate_per_s, global_bucket.burst, snapshot.global_bucket
            )
        for buckets, states, rate_of in (
            (limiter._partition_buckets, snapshot.partition_buckets, config.partition_rate),
            (limiter._type_buckets, snapshot.activity_type_buckets, limiter._type_rates.get),
        ):
            for key, state in states.items():
                rate = rate_of(key)
                if rate is not None:
                    buckets[key] = TokenBucket.restore(rate, _default_burst(rate), state)
        limiter._running = snapshot.running
        limiter._running_by_tenant = dict(counts)
        return limiter


def _take_one(
    buckets: dict[str, TokenBucket], key: str, rate_of: Callable[[str], float | None], now: float
) -> None:
    """Take a token from ``key``'s bucket, made on its first use (none: ``key`` is not
    limited)."""
    bucket = buckets.get(key)
    if bucket is None:
        rate = rate_of(key)
        if rate is None:
            return
        bucket = buckets[key] = TokenBucket(rate, _default_burst(rate))
    bucket._force_take(now, 1.0)
