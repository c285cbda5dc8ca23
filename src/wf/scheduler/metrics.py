"""Counters the core keeps about itself (WF-005 §25), for the shell to export.

The core stays free of I/O and of any metrics library: it only increments
plain integers and fills a fixed-bucket latency histogram. The server
(a later layer) reads them and exposes them through Prometheus. Gauges
(queue depth per partition, worker utilisation) are derived on read from the
core's own state, so nothing can drift.
"""

from __future__ import annotations

import bisect
from typing import Final

LATENCY_BUCKETS_S: Final = (
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
"""Upper bounds of the scheduling-latency histogram (queued -> leased)."""


class CoreMetrics:
    """Monotonic counters and the scheduling-latency histogram."""

    __slots__ = (
        "backpressure_changes",
        "cancelled",
        "completed",
        "dispatched",
        "expired_leases",
        "failed",
        "latency_buckets",
        "latency_count",
        "latency_sum_s",
        "lease_renewals",
        "requeued",
        "retries",
        "steals",
        "submitted",
        "workers_lost",
    )

    def __init__(self) -> None:
        self.submitted = 0
        """Activities accepted."""
        self.dispatched = 0
        """Leases granted (dispatch rate is its derivative)."""
        self.lease_renewals = 0
        """Successful renewals."""
        self.expired_leases = 0
        """Leases that lapsed without renewal."""
        self.requeued = 0
        """Activities returned to the queue after a lost lease."""
        self.retries = 0
        """Failed attempts scheduled for another try."""
        self.completed = 0
        """Activities completed."""
        self.failed = 0
        """Activities failed for good."""
        self.cancelled = 0
        """Activities cancelled."""
        self.steals = 0
        """Leases moved by work stealing."""
        self.workers_lost = 0
        """Workers declared lost."""
        self.backpressure_changes = 0
        """Backpressure level changes (operator notifications)."""
        self.latency_buckets = [0] * (len(LATENCY_BUCKETS_S) + 1)
        """Non-cumulative counts per bucket; the last one is +Inf."""
        self.latency_sum_s = 0.0
        """Sum of observed scheduling latencies."""
        self.latency_count = 0
        """Number of observed scheduling latencies."""

    def observe_latency(self, seconds: float) -> None:
        """Record one queued -> leased latency."""
        self.latency_buckets[bisect.bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
        self.latency_sum_s += seconds
        self.latency_count += 1

    def as_dict(self) -> dict[str, float | list[int]]:
        """Every counter by name (for export and tests)."""
        return {name: getattr(self, name) for name in self.__slots__}
