"""WF-005 §20 backpressure: a three-level controller with hysteresis.

Theory of operation
-------------------
The core calls :meth:`BackpressureController.update` with the ready-queue
depth and the worker utilisation (busy slots / total slots, 0..1) whenever it
wants the level re-evaluated, typically on every tick. The level is:

* :attr:`BackpressureLevel.CRITICAL` once the depth reaches
  ``critical_queue_depth``;
* :attr:`BackpressureLevel.ELEVATED` once the depth reaches
  ``elevated_queue_depth`` or the utilisation reaches ``elevated_utilization``
  (saturated workers make even a short queue a warning sign);
* :attr:`BackpressureLevel.NORMAL` otherwise.

Entering a level happens at its threshold; leaving it needs the signal to fall
below ``recovery_fraction`` × threshold (the utilisation threshold included).
That band keeps a queue hovering at a threshold from flapping between levels,
and with it from flooding operators with notifications. Leaving CRITICAL lands
on ELEVATED if the ELEVATED condition (with its own band) still holds.

The four behaviours of §20, and how each is configured:

1. **Slow dispatch.** While ELEVATED or CRITICAL, every dispatch needs a token
   from a bucket refilling at ``elevated_dispatch_per_s`` (burst
   ``max(1, rate)``); :meth:`~BackpressureController.allow_dispatch` takes it and
   :meth:`~BackpressureController.next_dispatch_at` says when the next one is
   due. ``None`` disables the slowdown. At NORMAL dispatch is never slowed.
2. **Queue additional work.** Nothing here refuses an activity of a workflow
   that is already running: it is always accepted and queued, and slow
   dispatch drains the queue at the configured pace. At ELEVATED new workflow
   starts are queued too.
3. **Reject new workflow starts.** While CRITICAL and ``reject_new_workflows``
   is set, :meth:`~BackpressureController.admit_new_workflow` raises
   :class:`~wf.errors.Overloaded` carrying ``retry_after_s``; the caller may
   retry after that many seconds. With the flag off they are queued instead.
4. **Notify operators.** :meth:`~BackpressureController.update` returns a
   :class:`LevelChange` exactly when the level changes (never while it holds);
   the shell turns it into an operator notification event and a metric.

The controller is pure: no clock, no I/O. :meth:`~BackpressureController.snapshot`
and :meth:`~BackpressureController.restore` round-trip its whole state (level,
last inputs, slow-dispatch bucket) exactly.
"""

from __future__ import annotations

import enum
import math
from typing import Final

import msgspec

from wf.errors import CorruptRecord, InvalidArgument, Overloaded
from wf.scheduler.rate_limiter import BucketState, TokenBucket

SNAPSHOT_VERSION: Final = 1
"""Version of :class:`BackpressureSnapshot`'s serialized form."""


class BackpressureLevel(enum.StrEnum):
    """How saturated the scheduler is."""

    NORMAL = "normal"
    """No pressure: dispatch at full speed, admit everything."""
    ELEVATED = "elevated"
    """Queue or workers near saturation: dispatch is slowed; new workflows still queue."""
    CRITICAL = "critical"
    """Saturated: dispatch is slowed and new workflow starts may be refused."""


_NORMAL: Final = BackpressureLevel.NORMAL
_ELEVATED: Final = BackpressureLevel.ELEVATED
_CRITICAL: Final = BackpressureLevel.CRITICAL


def _require_depth(field: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise InvalidArgument(f"{field} must be at least 1, got {value!r}", field=field)


def _require_positive(field: str, value: float | None) -> None:
    if value is not None and not (math.isfinite(value) and value > 0.0):
        raise InvalidArgument(
            f"{field} must be a finite number above zero, got {value!r}", field=field
        )


def _require_fraction(field: str, value: float | None) -> None:
    # ``not (0 < v <= 1)`` also catches NaN.
    if value is not None and not (0.0 < value <= 1.0):
        raise InvalidArgument(f"{field} must be in (0, 1], got {value!r}", field=field)


class BackpressureConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """WF-005 §20 backpressure policy; ``None`` thresholds are never reached."""

    elevated_queue_depth: int | None = None
    """Queue depth at or above which the level is at least ELEVATED."""
    critical_queue_depth: int | None = None
    """Queue depth at or above which the level is CRITICAL."""
    elevated_utilization: float | None = None
    """Worker utilisation (0..1) at or above which ELEVATED holds even with a short queue."""
    recovery_fraction: float = 0.8
    """Hysteresis: a level is left only when its signal falls below this × its threshold."""
    elevated_dispatch_per_s: float | None = None
    """Dispatch rate while ELEVATED or CRITICAL (a token bucket); ``None`` = no slowdown."""
    reject_new_workflows: bool = True
    """Refuse new workflow starts while CRITICAL (else they are queued)."""
    retry_after_s: float = 5.0
    """The ``retry_after_s`` a refused caller is told to wait."""

    def __post_init__(self) -> None:
        _require_depth("elevated_queue_depth", self.elevated_queue_depth)
        _require_depth("critical_queue_depth", self.critical_queue_depth)
        if (
            self.elevated_queue_depth is not None
            and self.critical_queue_depth is not None
            and self.elevated_queue_depth > self.critical_queue_depth
        ):
            raise InvalidArgument(
                "elevated_queue_depth must not be above critical_queue_depth "
                f"({self.elevated_queue_depth} > {self.critical_queue_depth})",
                field="elevated_queue_depth",
            )
        _require_fraction("elevated_utilization", self.elevated_utilization)
        _require_fraction("recovery_fraction", self.recovery_fraction)
        _require_positive("elevated_dispatch_per_s", self.elevated_dispatch_per_s)
        _require_positive("retry_after_s", self.retry_after_s)


class LevelChange(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A backpressure level transition, for an operator notification and a metric."""

    previous: BackpressureLevel
    """The level before."""
    level: BackpressureLevel
    """The level now."""
    queue_depth: int
    """The queue depth that caused it."""
    utilization: float
    """The worker utilisation at the time."""
    at: float
    """When it happened (scheduler time)."""


class BackpressureSnapshot(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Everything a :class:`BackpressureController` holds besides its configuration."""

    version: int = SNAPSHOT_VERSION
    """Serialized-form version."""
    level: BackpressureLevel = BackpressureLevel.NORMAL
    """The current level (it is the hysteresis memory)."""
    queue_depth: int = 0
    """The last queue depth passed to ``update``."""
    utilization: float = 0.0
    """The last utilisation passed to ``update``."""
    changed_at: float | None = None
    """When the level last changed; ``None`` if it never did."""
    dispatch_bucket: BucketState | None = None
    """The slow-dispatch bucket, if ``elevated_dispatch_per_s`` is configured."""


class BackpressureController:
    """Tracks the backpressure level and applies its policy; see the module docstring."""

    __slots__ = (
        "_bucket",
        "_changed_at",
        "_config",
        "_critical_enter",
        "_critical_leave",
        "_elevated_enter",
        "_elevated_leave",
        "_level",
        "_queue_depth",
        "_slowed",
        "_utilization",
        "_utilization_enter",
        "_utilization_leave",
    )

    def __init__(self, config: BackpressureConfig) -> None:
        self._config: Final = config
        fraction = config.recovery_fraction
        # Thresholds as floats, with +inf for "never", so update() has no None tests.
        self._critical_enter: Final = _or_inf(config.critical_queue_depth)
        self._critical_leave: Final = self._critical_enter * fraction
        self._elevated_enter: Final = _or_inf(config.elevated_queue_depth)
        self._elevated_leave: Final = self._elevated_enter * fraction
        self._utilization_enter: Final = _or_inf(config.elevated_utilization)
        self._utilization_leave: Final = self._utilization_enter * fraction
        rate = config.elevated_dispatch_per_s
        self._bucket: TokenBucket | None = (
            None if rate is None else TokenBucket(rate, rate if rate > 1.0 else 1.0)
        )
        self._level = _NORMAL
        self._slowed = False
        self._queue_depth = 0
        self._utilization = 0.0
        self._changed_at: float | None = None

    @property
    def config(self) -> BackpressureConfig:
        """The policy this controller applies."""
        return self._config

    @property
    def level(self) -> BackpressureLevel:
        """The current level."""
        return self._level

    @property
    def queue_depth(self) -> int:
        """The queue depth of the last :meth:`update`."""
        return self._queue_depth

    @property
    def utilization(self) -> float:
        """The utilisation of the last :meth:`update`."""
        return self._utilization

    @property
    def changed_at(self) -> float | None:
        """When the level last changed, ``None`` if it never did."""
        return self._changed_at

    def update(self, now: float, *, queue_depth: int, utilization: float) -> LevelChange | None:
        """Re-evaluate the level; return the change if the level changed, else ``None``.

        Raises :class:`~wf.errors.InvalidArgument` for a negative depth or a
        utilisation outside 0..1 (NaN included); nothing changes then.
        """
        if queue_depth < 0:
            raise InvalidArgument(
                f"queue_depth must not be negative, got {queue_depth}", field="queue_depth"
            )
        if not (0.0 <= utilization <= 1.0):
            raise InvalidArgument(
                f"utilization must be in [0, 1], got {utilization!r}", field="utilization"
            )
        self._queue_depth = queue_depth
        self._utilization = utilization
        previous = self._level
        level = self._evaluate(previous, queue_depth, utilization)
        if level is previous:
            return None
        self._level = level
        self._slowed = level is not _NORMAL and self._bucket is not None
        self._changed_at = now
        return LevelChange(
            previous=previous,
            level=level,
            queue_depth=queue_depth,
            utilization=utilization,
            at=now,
        )

    def _evaluate(
        self, current: BackpressureLevel, depth: int, utilization: float
    ) -> BackpressureLevel:
        """The level the inputs call for, given the current one (the hysteresis memory)."""
        if depth >= self._critical_enter or (
            current is _CRITICAL and depth >= self._critical_leave
        ):
            return _CRITICAL
        if depth >= self._elevated_enter or utilization >= self._utilization_enter:
            return _ELEVATED
        if current is not _NORMAL and (
            depth >= self._elevated_leave or utilization >= self._utilization_leave
        ):
            return _ELEVATED
        return _NORMAL

    def admit_new_workflow(self, now: float) -> None:
        """Return if a new workflow may start at ``now``; else raise :class:`~wf.errors.Overloaded`.

        Only new workflow starts are ever refused; activities of running
        workflows are always accepted. ``now`` is taken for symmetry with the
        rest of the core; the decision depends only on the level.
        """
        if self._level is _CRITICAL and self._config.reject_new_workflows:
            raise Overloaded(
                "the scheduler is overloaded; new workflow starts are refused",
                retry_after_s=self._config.retry_after_s,
                level=self._level.value,
                queue_depth=self._queue_depth,
            )

    def allow_dispatch(self, now: float) -> bool:
        """Whether one dispatch may happen at ``now``; takes a slow-dispatch token if so.

        Always ``True`` at NORMAL or without ``elevated_dispatch_per_s``. Call it
        only when a dispatch will follow: a ``True`` spends the token.
        """
        if not self._slowed:
            return True
        bucket = self._bucket
        assert bucket is not None
        return bucket.try_take(now)

    def next_dispatch_at(self, now: float) -> float | None:
        """When slow dispatch next allows a dispatch; ``None`` if it allows one at ``now``."""
        if not self._slowed:
            return None
        bucket = self._bucket
        assert bucket is not None
        at = bucket.next_available_at(now)
        return None if at == now else at

    def snapshot(self) -> BackpressureSnapshot:
        """The whole state, for :meth:`restore`."""
        return BackpressureSnapshot(
            level=self._level,
            queue_depth=self._queue_depth,
            utilization=self._utilization,
            changed_at=self._changed_at,
            dispatch_bucket=None if self._bucket is None else self._bucket.snapshot(),
        )

    @classmethod
    def restore(
        cls, config: BackpressureConfig, snapshot: BackpressureSnapshot
    ) -> BackpressureController:
        """A controller for ``config`` in the state of ``snapshot``.

        With the configuration the snapshot was taken under, it decides exactly
        as the original would. The level is kept as is even under a changed
        configuration; the next :meth:`update` re-evaluates it. Raises
        :class:`~wf.errors.CorruptRecord` for an unknown version or bad values.
        """
        if snapshot.version != SNAPSHOT_VERSION:
            raise CorruptRecord(
                f"unsupported backpressure snapshot version {snapshot.version}",
                version=snapshot.version,
            )
        if snapshot.queue_depth < 0 or not (0.0 <= snapshot.utilization <= 1.0):
            raise CorruptRecord(
                "backpressure snapshot holds out-of-range inputs",
                queue_depth=snapshot.queue_depth,
                utilization=snapshot.utilization,
            )
        controller = cls(config)
        bucket = controller._bucket
        if bucket is not None and snapshot.dispatch_bucket is not None:
            controller._bucket = bucket = TokenBucket.restore(
                bucket.rate_per_s, bucket.burst, snapshot.dispatch_bucket
            )
        controller._level = snapshot.level
        controller._slowed = snapshot.level is not _NORMAL and bucket is not None
        controller._queue_depth = snapshot.queue_depth
        controller._utilization = snapshot.utilization
        controller._changed_at = snapshot.changed_at
        return controller


def _or_inf(threshold: float | None) -> float:
    """A threshold as a float; ``None`` (never reached) becomes +inf."""
    return math.inf if threshold is None else float(threshold)
