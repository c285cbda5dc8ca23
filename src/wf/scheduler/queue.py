"""The ready queue (WF-005 §8) and its partitions (§21).

Theory of operation
-------------------
Queued activities live in *lanes*. A lane holds the activities that share
everything a dispatch rule looks at: policy group, tenant, activity type,
required capabilities, priority level and region. Because a lane is
homogeneous, a worker is either eligible for a whole lane or for none of it,
so "the best activity this worker may run" is "the best head among its
eligible lanes", and priority can never bypass a capability or tenant rule.

Each lane is a binary heap (``heapq``) of entries ``(rank, seq, ticket,
activity)``: ``rank`` comes from the lane's policy (0 for FIFO and priority,
the deadline for deadline-first, anything comparable for a plugin), ``seq``
is the activity's creation sequence (the deterministic tie-break), and
``ticket`` identifies this particular insertion. Insertion is O(log N).
Removing an arbitrary activity (cancel, expiry of an ordering hold, work
stealing) bumps nothing but the activity's state: the entry becomes stale
because the activity is no longer ``QUEUED`` with that ticket, and it is
discarded when it reaches the top; a lane rebuilds itself when stale entries
outnumber live ones, so removal is amortised O(log N) and memory stays
bounded by twice the live size.

Partitions are named groups of lanes, derived from the configured
partition keys (tenant, workflow type, priority, region, capability); they
scope queue-depth metrics and per-partition rate limits, and are the unit a
multi-node deployment shards by.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Iterator, Sequence
from typing import Any, Final

from wf.scheduler.model import Activity, ActivityState, Priority, WorkerInfo

_QUEUED: Final = ActivityState.QUEUED


class PartitionKey(enum.StrEnum):
    """What a queue partition is keyed by (WF-005 §21)."""

    TENANT = "tenant"
    """One partition per tenant."""
    WORKFLOW_TYPE = "workflow_type"
    """One partition per activity (workflow step) type."""
    PRIORITY = "priority"
    """One partition per priority level."""
    REGION = "region"
    """One partition per region."""
    CAPABILITY = "capability"
    """One partition per required-capability set."""


LaneKey = tuple[str, str, str, frozenset[str], Priority, str | None]
"""(policy group, tenant, activity type, capabilities, priority, region)."""

Entry = tuple[Any, int, int, Activity]
"""A heap entry: (rank, seq, ticket, activity)."""

WorkerSignature = tuple[
    frozenset[str], frozenset[str] | None, frozenset[str] | None, frozenset[str] | None
]
"""What decides a worker's eligibility: (capabilities, types, tenants, partitions)."""


def worker_signature(info: WorkerInfo) -> WorkerSignature:
    """The eligibility signature of a worker registration."""
    return (info.capabilities, info.activity_types, info.tenants, info.partitions)


def partition_name(
    keys: Sequence[PartitionKey],
    *,
    tenant: str,
    activity_type: str,
    priority: Priority,
    region: str | None,
    capabilities: frozenset[str],
) -> str:
    """The partition an activity with these attributes belongs to (``default`` if unkeyed)."""
    if not keys:
        return "default"
    parts: list[str] = []
    for key in keys:
        if key is PartitionKey.TENANT:
            parts.append(f"tenant={tenant}")
        elif key is PartitionKey.WORKFLOW_TYPE:
            parts.append(f"type={activity_type}")
        elif key is PartitionKey.PRIORITY:
            parts.append(f"priority={priority.name.lower()}")
        elif key is PartitionKey.REGION:
            parts.append(f"region={region or '-'}")
        else:
            parts.append(f"capability={'+'.join(sorted(capabilities)) or '-'}")
    return ",".join(parts)


class Lane:
    """A homogeneous heap of queued activities (see the module docstring)."""

    __slots__ = (
        "activity_type",
        "capabilities",
        "group",
        "heap",
        "key",
        "partition",
        "priority",
        "region",
        "size",
        "tenant",
    )

    def __init__(self, key: LaneKey, partition: str) -> None:
        self.key = key
        self.group, self.tenant, self.activity_type, self.capabilities = key[:4]
        self.priority: Priority = key[4]
        self.region: str | None = key[5]
        self.partition = partition
        self.heap: list[Entry] = []
        self.size = 0
        """Live (non-stale) entries."""

    def head(self) -> Entry | None:
        """The best live entry, discarding stale ones on the way; ``None`` if empty."""
        heap = self.heap
        while heap:
            entry = heap[0]
            activity = entry[3]
            if activity.state is _QUEUED and activity.queue_ticket == entry[2]:
                return entry
            heapq.heappop(heap)
        return None

    def eligible_for(self, signature: WorkerSignature) -> bool:
        """Whether a worker with this signature may run this lane's activities."""
        capabilities, types, tenants, partitions = signature
        return (
            self.capabilities <= capabilities
            and (types is None or self.activity_type in types)
            and (tenants is None or self.tenant in tenants)
            and (partitions is None or self.partition in partitions)
        )

    def compact(self) -> None:
        """Drop stale entries when they outnumber live ones (bounds memory)."""
        if len(self.heap) > 2 * self.size + 64:
            self.heap = [
                e for e in self.heap if e[3].state is _QUEUED and e[3].queue_ticket == e[2]
            ]
            heapq.heapify(self.heap)


class ReadyQueue:
    """All queued activities, in lanes, with per-signature eligibility caches."""

    def __init__(self, partition_keys: Sequence[PartitionKey] = ()) -> None:
        self.partition_keys: tuple[PartitionKey, ...] = tuple(partition_keys)
        self.lanes: dict[LaneKey, Lane] = {}
        self.depth = 0
        """Live queued activities in all lanes."""
        self.depth_by_partition: dict[str, int] = {}
        self.depth_by_level: dict[str, list[int]] = {}
        """Per policy group: live queued count per priority level."""
        self._ticket = 0
        self._eligible: dict[tuple[str, WorkerSignature], list[Lane]] = {}

    def lane_for(self, activity: Activity, group: str) -> Lane:
        """The lane an activity belongs to in a policy group, created on first use."""
        key: LaneKey = (
            group,
            activity.tenant,
            activity.activity_type,
            activity.capabilities,
            activity.priority,
            activity.region,
        )
        lane = self.lanes.get(key)
        if lane is None:
            lane = self._new_lane(key)
        return lane

    def _new_lane(self, key: LaneKey) -> Lane:
        partition = partition_name(
            self.partition_keys,
            tenant=key[1],
            activity_type=key[2],
            capabilities=key[3],
            priority=key[4],
            region=key[5],
        )
        lane = Lane(key, partition)
        self.lanes[key] = lane
        self.depth_by_partition.setdefault(partition, 0)
        self.depth_by_level.setdefault(key[0], [0, 0, 0, 0])
        for (group, signature), lanes in self._eligible.items():
            if group == key[0] and lane.eligible_for(signature):
                lanes.append(lane)
        return lane

    def push(self, lane: Lane, activity: Activity, rank: Any) -> None:
        """Insert a ``QUEUED`` activity into its lane: O(log N)."""
        self._ticket += 1
        activity.queue_ticket = self._ticket
        heapq.heappush(lane.heap, (rank, activity.seq, self._ticket, activity))
        lane.size += 1
        self.depth += 1
        self.depth_by_partition[lane.partition] += 1
        self.depth_by_level[lane.group][lane.priority] += 1

    def pop(self, lane: Lane) -> Activity:
        """Remove and return the lane's head (the caller changes its state next)."""
        entry = lane.head()
        assert entry is not None, "pop from an empty lane"
        heapq.heappop(lane.heap)
        activity = entry[3]
        activity.queue_ticket = 0
        self._account_removal(lane)
        return activity

    def discard(self, lane: Lane, activity: Activity) -> None:
        """Remove a queued activity that is not at the head (lazy; O(1) now)."""
        assert activity.queue_ticket != 0, "discard of an activity not in the queue"
        activity.queue_ticket = 0
        self._account_removal(lane)
        lane.compact()

    def _account_removal(self, lane: Lane) -> None:
        lane.size -= 1
        self.depth -= 1
        self.depth_by_partition[lane.partition] -= 1
        self.depth_by_level[lane.group][lane.priority] -= 1

    def eligible_lanes(self, group: str, signature: WorkerSignature) -> list[Lane]:
        """Every lane of ``group`` a worker with ``signature`` may serve (cached)."""
        cache_key = (group, signature)
        lanes = self._eligible.get(cache_key)
        if lanes is None:
            lanes = [
                lane
                for lane in self.lanes.values()
                if lane.group == group and lane.eligible_for(signature)
            ]
            self._eligible[cache_key] = lanes
        return lanes

    def groups(self) -> Iterator[str]:
        """Policy groups that have lanes, in creation order."""
        return iter(self.depth_by_level)

    def queued(self) -> Iterator[Activity]:
        """Every live queued activity (any order)."""
        for lane in self.lanes.values():
            for entry in lane.heap:
                activity = entry[3]
                if activity.state is _QUEUED and activity.queue_ticket == entry[2]:
                    yield activity
