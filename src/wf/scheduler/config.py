"""Configuration of the scheduler core: one frozen, validated value.

Every section is optional; the defaults give a FIFO-free priority scheduler
with least-loaded balancing, 30-second renewable leases, three missed
heartbeats before a worker is declared lost, no rate limits, no
backpressure, and work stealing off.
"""

from __future__ import annotations

import math
from typing import Any, Final, Literal

import msgspec

from wf.errors import InvalidArgument
from wf.scheduler.backpressure import BackpressureConfig
from wf.scheduler.load_balancer import BalancingStrategy
from wf.scheduler.queue import PartitionKey
from wf.scheduler.rate_limiter import RateLimitConfig

DEPARTED_WORKER_RETENTION_MAX_S: Final = 10 * 365 * 86_400.0
"""Longest configurable retention of departed workers (ten years; ``0`` means for ever)."""


class PolicyConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A named policy group: which policy orders it and with what options."""

    policy: str = "priority"
    """Registered policy name (built-in or ``wf.policies`` plugin)."""
    options: dict[str, Any] = msgspec.field(default_factory=dict)
    """Policy options (e.g. ``weights`` for ``weighted_fair``)."""


class StealingConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Work stealing (WF-005 §16)."""

    enabled: bool = False
    """Let idle workers take leased-but-unstarted work from overloaded ones."""
    min_victim_backlog: int = 1
    """A victim must hold at least this many unstarted leases."""
    max_steals_per_activity: int = 3
    """An activity is moved at most this often (no ping-pong, no starvation)."""

    def __post_init__(self) -> None:
        if self.min_victim_backlog < 1 or self.max_steals_per_activity < 1:
            raise InvalidArgument("stealing bounds must be at least 1")


class SchedulerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Everything that shapes the core's decisions."""

    default_policy: str = "default"
    """Policy group used by activities that name none."""
    policies: dict[str, PolicyConfig] = msgspec.field(
        default_factory=lambda: {"default": PolicyConfig()}
    )
    """Policy groups by name; deployments select one through ``Activity.policy``."""
    balancer: BalancingStrategy = BalancingStrategy.LEAST_LOADED
    """Load-balancing strategy (WF-005 §15)."""
    partition_by: tuple[PartitionKey, ...] = ()
    """Queue partition keys (WF-005 §21); empty = one partition."""
    lease_ttl_s: float = 30.0
    """A lease lapses this long after its grant or last renewal."""
    heartbeat_misses_max: int = 3
    """Missed heartbeat intervals before a worker is declared lost."""
    infra_requeues_max: int = 100
    """Bound on requeues caused by lost workers before the activity fails."""
    limits: RateLimitConfig = msgspec.field(default_factory=RateLimitConfig)
    """Rate and concurrency limits (WF-005 §19)."""
    backpressure: BackpressureConfig = msgspec.field(default_factory=BackpressureConfig)
    """Backpressure thresholds (WF-005 §20)."""
    stealing: StealingConfig = msgspec.field(default_factory=StealingConfig)
    """Work stealing (WF-005 §16)."""
    submit_batch_max: int = 10_000
    """Most activities one Submit may carry."""
    poll_items_max: int = 1_000
    """Most leases one Poll may ask for."""
    early_grant_s: float = 0.05
    """How long before its ``not_before`` a delayed activity joins the ready queue.

    A grant made before that instant carries it (``LeaseGranted.not_before``) and
    the worker starts the activity then, on its own timer: delayed work does not
    wait for the dispatch hop after its instant. The price is a slot held idle for
    at most this long. ``0`` queues each delayed activity at its instant."""
    start_on_grant: Literal["any", "may_restart"] | None = None
    """Which grants into a slot the worker starts on receipt are committed as the
    activity's start (docs/architecture.md, "Start on grant"): ``"any"``, every one
    (no start round trip; an activity that must not run twice and whose grant's answer
    is lost fails with ``may_have_executed``); ``"may_restart"``, only those of
    activities that may run again (the others keep the acknowledged start, and a lost
    grant is requeued). ``None``: ``"any"`` on SQLite, ``"may_restart"`` on
    PostgreSQL, whose clusters fail over, which loses answers (the server decides)."""
    departed_worker_retention_s: float = 86_400.0
    """How long a worker that failed or left (``failed``/``gone``) stays known.

    After that the core forgets it at a tick and the store deletes its row, so
    departed workers do not pile up for ever; one that comes back later simply
    registers afresh. ``0`` keeps departed workers for ever."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.lease_ttl_s) and self.lease_ttl_s > 0):
            raise InvalidArgument("lease_ttl_s must be a positive number", field="lease_ttl_s")
        if self.heartbeat_misses_max < 1:
            raise InvalidArgument("heartbeat_misses_max must be >= 1")
        if self.infra_requeues_max < 0:
            raise InvalidArgument("infra_requeues_max must be >= 0")
        if self.default_policy not in self.policies:
            raise InvalidArgument(
                f"default_policy {self.default_policy!r} is not a configured policy group",
                field="default_policy",
            )
        if not (math.isfinite(self.early_grant_s) and 0 <= self.early_grant_s <= 60):
            raise InvalidArgument(
                "early_grant_s must be within 0..60 seconds", field="early_grant_s"
            )
        if self.early_grant_s >= self.lease_ttl_s:
            raise InvalidArgument(
                "early_grant_s must be shorter than lease_ttl_s", field="early_grant_s"
            )
        if self.submit_batch_max < 1 or self.poll_items_max < 1:
            raise InvalidArgument("batch bounds must be at least 1")
        if not (
            math.isfinite(self.departed_worker_retention_s)
            and 0 <= self.departed_worker_retention_s <= DEPARTED_WORKER_RETENTION_MAX_S
        ):
            raise InvalidArgument(
                "departed_worker_retention_s must be within "
                f"0..{DEPARTED_WORKER_RETENTION_MAX_S:.0f} seconds (0 keeps them for ever)",
                field="departed_worker_retention_s",
            )
