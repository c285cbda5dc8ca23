"""``scheduler.dispatch.stats``: the figures the operator console's overview draws.

Read on the event loop between commands, from the node's read port (the same
figures and counters ``GET /metrics`` exposes) plus one pass over the ready
queue's lanes (:meth:`~wf.node_reads.NodeReads.deepest_lanes`). It is a read:
nothing here is on the dispatch path, and its cost is one dictionary walk per
call (the console calls it every few seconds).
"""

from __future__ import annotations

from wf.errors import Forbidden
from wf.node import SchedulerNode
from wf.scheduler.metrics import LATENCY_BUCKETS_S
from wf.server.rpc import Caller
from wf.wire.scheduler_methods import LANES_SHOWN_MAX, DispatchStats, LaneDepth


def dispatch_stats(node: SchedulerNode, caller: Caller) -> DispatchStats:
    """The dispatch figures now (cluster-wide: unscoped callers only, like
    ``scheduler.queue.stats``)."""
    if caller.tenants is not None:
        raise Forbidden(
            "dispatch figures are cluster-wide; a tenant-scoped credential may not read them",
            method="scheduler.dispatch.stats",
        )
    reads = node.reads
    figures = reads.figures()
    counters = reads.counters()
    deepest, lanes_total = reads.deepest_lanes(LANES_SHOWN_MAX)
    return DispatchStats(
        at=node.clock.now(),
        depth=figures.depth,
        depth_by_partition=figures.depth_by_partition,
        lanes=[
            LaneDepth(
                partition=lane.partition,
                tenant=lane.tenant,
                activity_type=lane.activity_type,
                priority=lane.priority.name.lower(),
                region=lane.region,
                depth=lane.depth,
            )
            for lane in deepest
        ],
        lanes_total=lanes_total,
        running=figures.running,
        capacity=figures.capacity,
        delayed=figures.delayed,
        backpressure=figures.backpressure.value,
        workers_by_status={str(k.value): v for k, v in figures.workers_by_status.items()},
        submitted=counters.submitted,
        dispatched=counters.dispatched,
        completed=counters.completed,
        failed=counters.failed,
        retries=counters.retries,
        requeued=counters.requeued,
        expired_leases=counters.expired_leases,
        latency_bounds_s=list(LATENCY_BUCKETS_S),
        latency_buckets=list(counters.latency_buckets),
        latency_sum_s=counters.latency_sum_s,
        latency_count=counters.latency_count,
    )
