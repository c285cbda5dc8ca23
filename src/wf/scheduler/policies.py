"""Scheduling policies (WF-005 §9, §10): which queued activity a worker gets next.

Theory of operation
-------------------
A policy answers two questions. ``rank(activity)`` is the within-lane order
key (lanes are homogeneous, see :mod:`wf.scheduler.queue`), fixed when the
activity is queued so the heap stays valid. ``pick(lanes, usable)`` chooses,
among the non-empty lanes a polling worker is eligible for, the lane whose
head is dispatched next. The dispatcher filters lanes for capability, tenant,
type and partition before a policy sees them, so no policy can bypass those
rules; ``usable`` further hides lanes blocked by a rate or concurrency limit.

Every built-in policy that honours priority shares :class:`StarvationGuard`:
when a priority level has had queued work through ``limit`` consecutive
dispatches of other levels in the same policy group, the next dispatch that
can serve that level does. Hence the documented bound for ``priority`` and
``deadline_first``: **while an eligible worker keeps polling, the oldest
activity of a waiting level is dispatched within ``limit[level] + 3``
dispatches** (the 3 covers the other levels falling due at the same moment).
Critical work is otherwise strictly first. ``weighted_fair`` and
``tenant_aware`` pick the tenant first and apply the guard inside the chosen
tenant, so there the bound counts that tenant's dispatches; across tenants
the fair share itself guarantees every backlogged tenant its turn.

Weighted fair scheduling counts *running* work (leased or executing), not
dispatches: the tenant whose running count divided by its weight is lowest
gets the next slot, so long activities cannot take more than their share.
Under saturation each tenant's share of the running slots stays within one
slot of its weight's share.

Custom policies are classes registered in the ``wf.policies`` entry-point
group (``name = "package.module:Class"``); the class is called with the
policy's options (a dict) and must satisfy :class:`SchedulingPolicy`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import entry_points
from typing import Any, Protocol, runtime_checkable

from wf.errors import InvalidArgument, UnknownPolicy
from wf.scheduler.model import Activity, Priority
from wf.scheduler.queue import Lane

LaneFilter = Callable[[Lane], bool]

DEFAULT_STARVATION_LIMITS: dict[Priority, int] = {
    Priority.HIGH: 8,
    Priority.NORMAL: 16,
    Priority.LOW: 32,
}
"""Dispatches of other levels a waiting level tolerates before it is served."""


@runtime_checkable
class SchedulingPolicy(Protocol):
    """The contract every policy (built-in or plugin) satisfies."""

    name: str
    """Registry name, as used in configuration."""

    def rank(self, activity: Activity) -> Any:
        """Within-lane order key; smaller first; ties fall to the creation sequence."""
        ...

    def pick(self, lanes: Sequence[Lane], usable: LaneFilter | None) -> Lane | None:
        """The lane (among ``lanes``, skipping empty and unusable ones) dispatched next."""
        ...

    def on_dispatch(self, activity: Activity) -> None:
        """An activity of this group was leased (it now counts as running)."""
        ...

    def record_dispatch(self, lane: Lane, queued_by_level: Sequence[int]) -> None:
        """After ``lane``'s head was leased; ``queued_by_level`` counts what is left."""
        ...

    def on_release(self, activity: Activity) -> None:
        """A running activity of this group finished, failed, or was requeued."""
        ...

    def snapshot(self) -> dict[str, Any]:
        """JSON-able state that :meth:`restore` turns back into identical behaviour."""
        ...

    def restore(self, state: dict[str, Any]) -> None:
        """Restore the state :meth:`snapshot` returned."""
        ...


class StarvationGuard:
    """Counts, per priority level, dispatches that passed a waiting level by."""

    __slots__ = ("limits", "passed")

    def __init__(self, limits: Mapping[Priority, int] | None = None) -> None:
        limits = DEFAULT_STARVATION_LIMITS if limits is None else limits
        for level, limit in limits.items():
            if limit < 1:
                raise InvalidArgument(
                    "starvation limits must be at least 1", level=level.name, limit=limit
                )
        # Index = level value; Critical is never passed over, so it has no limit.
        self.limits = [0] + [limits.get(Priority(v), 1 << 30) for v in (1, 2, 3)]
        self.passed = [0, 0, 0, 0]

    def due_level(self) -> int:
        """The lowest-priority level that is due now, or -1."""
        passed, limits = self.passed, self.limits
        for level in (3, 2, 1):
            if passed[level] >= limits[level]:
                return level
        return -1

    def record(self, served: int, queued_by_level: Sequence[int]) -> None:
        """Account one dispatch at level ``served`` given the remaining queued counts."""
        passed = self.passed
        passed[served] = 0
        for level in (1, 2, 3):
            if level == served:
                continue
            if queued_by_level[level] > 0:
                if level > served:
                    passed[level] += 1
            else:
                passed[level] = 0


def _best_priority_lane(
    lanes: Sequence[Lane],
    usable: LaneFilter | None,
    guard: StarvationGuard,
    rank_first: bool,
    tenant: str | None = None,
) -> Lane | None:
    """Best head by (priority, rank, seq) -- or (rank, priority, seq) -- honouring the guard.

    With ``tenant``, only that tenant's lanes are considered.
    """
    due = guard.due_level()
    best: Lane | None = None
    best_key: tuple[Any, ...] = ()
    due_best: Lane | None = None
    due_key: tuple[Any, ...] = ()
    for lane in lanes:
        if not lane.size or (tenant is not None and lane.tenant != tenant):
            continue
        entry = lane.head()
        if entry is None or (usable is not None and not usable(lane)):
            continue
        if rank_first:
            key: tuple[Any, ...] = (entry[0], lane.priority, entry[1])
        else:
            key = (lane.priority, entry[0], entry[1])
        if best is None or key < best_key:
            best, best_key = lane, key
        if lane.priority == due and (due_best is None or key < due_key):
            due_best, due_key = lane, key
    return due_best if due_best is not None else best


class _PolicyBase:
    """Shared plumbing: starvation guard and running counts per tenant."""

    name: str = ""

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        options = dict(options or {})
        limits = options.pop("starvation_limits", None)
        self.guard = StarvationGuard(
            None if limits is None else {Priority[k.upper()]: int(v) for k, v in limits.items()}
        )
        self.running: dict[str, int] = {}
        self._configure(options)

    def _configure(self, options: dict[str, Any]) -> None:
        if options:
            raise InvalidArgument(
                f"policy {self.name!r} has no options {sorted(options)}", policy=self.name
            )

    def rank(self, activity: Activity) -> Any:
        return 0

    def pick(self, lanes: Sequence[Lane], usable: LaneFilter | None) -> Lane | None:
        raise NotImplementedError

    def on_dispatch(self, activity: Activity) -> None:
        self.running[activity.tenant] = self.running.get(activity.tenant, 0) + 1

    def on_release(self, activity: Activity) -> None:
        left = self.running[activity.tenant] - 1
        assert left >= 0, "release without a matching dispatch"
        if left:
            self.running[activity.tenant] = left
        else:
            del self.running[activity.tenant]

    def record_dispatch(self, lane: Lane, queued_by_level: Sequence[int]) -> None:
        """Called by the dispatcher after it popped ``lane``'s head."""
        self.guard.record(lane.priority, queued_by_level)

    def snapshot(self) -> dict[str, Any]:
        # Running counts are derived from the live leases on restore, not stored.
        return {"passed": list(self.guard.passed)}

    def restore(self, state: dict[str, Any]) -> None:
        self.guard.passed = [int(v) for v in state["passed"]]


class FifoPolicy(_PolicyBase):
    """Strict creation order across every eligible lane; priority is ignored."""

    name = "fifo"

    def pick(self, lanes: Sequence[Lane], usable: LaneFilter | None) -> Lane | None:
        best: Lane | None = None
        best_seq = 0
        for lane in lanes:
            if not lane.size:
                continue
            entry = lane.head()
            if entry is None or (usable is not None and not usable(lane)):
                continue
            if best is None or entry[1] < best_seq:
                best, best_seq = lane, entry[1]
        return best

    def record_dispatch(self, lane: Lane, queued_by_level: Sequence[int]) -> None:
        return None


class PriorityPolicy(_PolicyBase):
    """Highest priority level first, FIFO within a level, with the starvation guard."""

    name = "priority"

    def pick(self, lanes: Sequence[Lane], usable: LaneFilter | None) -> Lane | None:
        return _best_priority_lane(lanes, usable, self.guard, rank_first=False)


class DeadlineFirstPolicy(_PolicyBase):
    """Earliest workflow deadline first; no deadline sorts last; then priority, then age."""

    name = "deadline_first"

    def rank(self, activity: Activity) -> Any:
        return float("inf") if activity.deadline is None else activity.deadline

    def pick(self, lanes: Sequence[Lane], usable: LaneFilter | None) -> Lane | None:
        return _best_priority_lane(lanes, usable, self.guard, rank_first=True)


class WeightedFairPolicy(_PolicyBase):
    """Running slots shared between tenants in proportion to their weights.

    Options: ``weights`` (tenant -> positive number) and ``default_weight``
    (for tenants not listed; 1.0).
    """

    name = "weighted_fair"

    def _configure(self, options: dict[str, Any]) -> None:
        weights = options.pop("weights", {})
        default = options.pop("default_weight", 1.0)
        super()._configure(options)
        self.weights: dict[str, float] = {str(k): float(v) for k, v in weights.items()}
        self.default_weight = float(default)
        if self.default_weight <= 0 or any(w <= 0 for w in self.weights.values()):
            raise InvalidArgument("tenant weights must be positive", policy=self.name)
        self.served: dict[str, int] = {}
        self._served_seq = 0

    def _tenant_order(self, tenant: str) -> tuple[float, int, str]:
        share = self.running.get(tenant, 0) / self.weights.get(tenant, self.default_weight)
        return (share, self.served.get(tenant, 0), tenant)

    def pick(self, lanes: Sequence[Lane], usable: LaneFilter | None) -> Lane | None:
        best_tenant: str | None = None
        best_order: tuple[float, int, str] = (0.0, 0, "")
        tenant_order = self._tenant_order
        ranked: set[str] = set()
        for lane in lanes:
            # ``size`` counts live entries only, so a sized lane has a head.
            tenant = lane.tenant
            if not lane.size or tenant in ranked:
                continue
            if usable is not None and not usable(lane):
                continue
            ranked.add(tenant)
            order = tenant_order(tenant)
            if best_tenant is None or order < best_order:
                best_tenant, best_order = tenant, order
        if best_tenant is None:
            return None
        return _best_priority_lane(lanes, usable, self.guard, False, best_tenant)

    def on_dispatch(self, activity: Activity) -> None:
        super().on_dispatch(activity)
        self._served_seq += 1
        self.served[activity.tenant] = self._served_seq

    def snapshot(self) -> dict[str, Any]:
        state = super().snapshot()
        state["served"] = dict(self.served)
        state["served_seq"] = self._served_seq
        return state

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        self.served = {str(k): int(v) for k, v in state["served"].items()}
        self._served_seq = int(state["served_seq"])


class TenantAwarePolicy(WeightedFairPolicy):
    """Tenants isolated and served in turn (equal weights); priority within a tenant.

    Pair it with ``max_tenant_concurrency`` (rate limits) so that one tenant's
    flood can neither take every slot nor delay another tenant's first dispatch
    by more than one turn.
    """

    name = "tenant_aware"

    def _tenant_order(self, tenant: str) -> tuple[float, int, str]:
        # Round robin: the tenant served longest ago goes first.
        return (0.0, self.served.get(tenant, 0), tenant)


BUILTIN_POLICIES: dict[str, type[_PolicyBase]] = {
    cls.name: cls
    for cls in (
        FifoPolicy,
        PriorityPolicy,
        DeadlineFirstPolicy,
        WeightedFairPolicy,
        TenantAwarePolicy,
    )
}

ENTRY_POINT_GROUP = "wf.policies"


def make_policy(name: str, options: Mapping[str, Any] | None = None) -> SchedulingPolicy:
    """Instantiate a policy by name: built-ins first, then the ``wf.policies`` plugins."""
    builtin = BUILTIN_POLICIES.get(name)
    if builtin is not None:
        return builtin(options)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            factory = ep.load()
            policy = factory(dict(options or {}))
            if not isinstance(policy, SchedulingPolicy):
                raise UnknownPolicy(
                    f"plugin {name!r} does not implement SchedulingPolicy", policy=name
                )
            return policy
    known = sorted(BUILTIN_POLICIES) + sorted(
        ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)
    )
    raise UnknownPolicy(f"unknown scheduling policy {name!r}; known: {known}", policy=name)
