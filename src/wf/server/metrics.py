"""Prometheus metrics of one server (WF-005 §25), served at ``GET /metrics``.

Theory of operation
-------------------
Each :class:`ServerMetrics` owns its own ``CollectorRegistry`` (never the
process-global one), so several servers in one process, as in the tests,
do not clash. Two kinds of series live in it:

* **The core's figures**, read at scrape time by :class:`CoreCollector`
  through the node's read port (:meth:`~wf.node_reads.NodeReads.figures`
  and :meth:`~wf.node_reads.NodeReads.counters`): gauges derived from the
  core's own state (queue depth per partition, delayed activities, running
  leases, capacity, utilisation, workers by status, backpressure level) and
  the plain counters and latency buckets of
  :class:`~wf.scheduler.metrics.CoreMetrics`. Nothing is counted twice, so
  nothing can drift. They are the core's figures *now*, commits in flight
  included (the read port's one exception to committed reads: a scrape must
  answer while writes are stopped, and cannot wait for a quiet moment). A
  restart replaces the core; its counters then start again from zero, which
  Prometheus treats as a counter reset (``rate()`` handles it).
* **The shell's own observations**: the latency of every JSON-RPC call per
  method and the errors per method and code, fed by the dispatcher's
  call observers (:meth:`ServerMetrics.observe_call`); and the scheduling
  latency (:class:`GrantLatency`, a node listener): from the instant an
  activity entered the ready queue to the instant its grant was committed
  and could be handed to its worker, per activity type (a bounded label).
  The core's own figure of the same span (``wf_queue_wait_seconds``) is
  measured in command time, so it is exactly 0 whenever a worker was
  already waiting: the activity is queued and granted by one command, and
  the commit that makes the grant real comes after it. That is why the
  scheduling latency is observed here, after the commit, with the clock.
* **The deployment-schedule service's figures**, read at scrape time by
  :class:`ScheduleCollector` from whatever service the server holds then
  (``server.schedule_service``; nothing at all while it is ``None``): its
  admission and skip counters, execution slots, blocked schedules, drain
  state, and admission lateness. Lateness is a *summary* whose quantiles
  are computed over the service's bounded window of recent samples (the
  last :data:`~wf.schedules.service.LATENESS_SAMPLES_MAX` admissions). It has
  no ``_count``/``_sum``: those must be cumulative and a window is not (the
  cumulative count is ``wf_schedule_admitted_total``); a histogram rebuilt
  from the window would have buckets that go down, which Prometheus would
  read as counter resets.

Scrapes run on the event loop, between commands, so they see the core in a
consistent state without locks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.process_collector import ProcessCollector

from wf.node import SchedulerNode
from wf.scheduler.backpressure import BackpressureLevel
from wf.scheduler.metrics import LATENCY_BUCKETS_S, CoreMetrics
from wf.scheduler.outputs import LeaseGranted, Outcome
from wf.server.rpc import Caller
from wf.server.run_signals import BoundedLabel
from wf.server.unserved import UnservedCollector

if TYPE_CHECKING:
    from wf.schedules.service import ScheduleService
    from wf.server.cluster import ClusterRole

RPC_LATENCY_BUCKETS_S: Final = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
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
"""RPC latency buckets; the top ones are for long polls, which wait up to 60 s."""

COUNTERS: Final = (
    ("submitted", "wf_activities_submitted", "Activities accepted."),
    (
        "dispatched",
        "wf_activities_dispatched",
        "Leases granted; the dispatch rate is rate() of this counter.",
    ),
    ("lease_renewals", "wf_lease_renewals", "Successful lease renewals."),
    ("expired_leases", "wf_leases_expired", "Leases that lapsed without renewal."),
    ("requeued", "wf_activities_requeued", "Activities returned to the queue after a lost lease."),
    ("retries", "wf_activity_retries", "Failed attempts scheduled for another try."),
    ("completed", "wf_activities_completed", "Activities completed."),
    ("failed", "wf_activities_failed", "Activities failed for good."),
    ("cancelled", "wf_activities_cancelled", "Activities cancelled."),
    ("steals", "wf_leases_stolen", "Leases moved to another worker by work stealing."),
    ("workers_lost", "wf_workers_lost", "Workers declared lost."),
    ("backpressure_changes", "wf_backpressure_changes", "Backpressure level changes."),
)
"""(CoreMetrics attribute, metric name without ``_total``, help) of each core counter."""

LATENESS_QUANTILES: Final = (0.5, 0.9, 0.99, 1.0)
"""Quantiles of ``wf_schedule_admission_lateness_seconds`` (1.0 is the window's maximum)."""
ACTIVITY_TYPE_LABELS_MAX: Final = 100
"""Distinct ``activity_type`` label values; later types are counted as ``other``."""


class CoreCollector:
    """Reads the scheduler core at scrape time (see the module docstring)."""

    def __init__(self, node: SchedulerNode) -> None:
        self.reads = node.reads

    def describe(self) -> Iterator[Metric]:
        """The families (lets the registry refuse duplicate names at registration)."""
        return self.collect()

    def collect(self) -> Iterator[Metric]:
        """Every core-derived family, read now."""
        figures = self.reads.figures()
        counters = self.reads.counters()
        depth = GaugeMetricFamily(
            "wf_queue_depth", "Queued activities per queue partition.", labels=["partition"]
        )
        for partition, count in sorted(figures.depth_by_partition.items()):
            depth.add_metric([partition], count)
        yield depth
        yield GaugeMetricFamily(
            "wf_activities_delayed",
            "Dormant activities (delayed or awaiting retry).",
            figures.delayed,
        )
        yield GaugeMetricFamily(
            "wf_leases_running", "Leases held (leased or executing).", figures.running
        )
        yield GaugeMetricFamily(
            "wf_worker_capacity_slots",
            "Sum of max_concurrency over active workers.",
            figures.capacity,
        )
        yield GaugeMetricFamily(
            "wf_worker_utilization_ratio",
            "Running leases over capacity (0 without capacity).",
            figures.running / figures.capacity if figures.capacity > 0 else 0.0,
        )
        workers = GaugeMetricFamily("wf_workers", "Known workers by status.", labels=["status"])
        for status, count in figures.workers_by_status.items():
            workers.add_metric([status.value], count)
        yield workers
        level = figures.backpressure
        pressure = GaugeMetricFamily(
            "wf_backpressure_level",
            "1 for the current backpressure level, 0 for the others.",
            labels=["level"],
        )
        for candidate in BackpressureLevel:
            pressure.add_metric([candidate.value], 1.0 if candidate is level else 0.0)
        yield pressure
        yield from _counters(counters)
        yield _latency(counters)


def _counters(metrics: CoreMetrics) -> Iterator[Metric]:
    for attribute, name, documentation in COUNTERS:
        yield CounterMetricFamily(name, documentation, value=getattr(metrics, attribute))


def _latency(metrics: CoreMetrics) -> HistogramMetricFamily:
    buckets: list[tuple[str, float]] = []
    cumulative = 0
    for bound, count in zip(LATENCY_BUCKETS_S, metrics.latency_buckets, strict=False):
        cumulative += count
        buckets.append((_bound(bound), cumulative))
    buckets.append(("+Inf", metrics.latency_count))
    return HistogramMetricFamily(
        "wf_queue_wait_seconds",
        "Time from entering the ready queue to being leased, in the core's command time "
        "(0 when a worker was already waiting; see wf_scheduling_latency_seconds).",
        buckets=buckets,
        sum_value=metrics.latency_sum_s,
    )


def _bound(value: float) -> str:
    return repr(float(value))


class ScheduleCollector:
    """Reads the deployment-schedule service at scrape time (see the module docstring).

    ``service`` returns the server's current service, or ``None`` when it has
    none (scheduling disabled): then no schedule family is exposed at all.
    """

    def __init__(self, service: Callable[[], ScheduleService | None]) -> None:
        self.service = service

    def describe(self) -> Iterator[Metric]:
        """Nothing: the families exist only while there is a service to read."""
        return iter(())

    def collect(self) -> Iterator[Metric]:
        """Every schedule family, read now (none without a service)."""
        service = self.service()
        if service is None:
            return
        skipped = CounterMetricFamily(
            "wf_schedule_occurrences_skipped",
            "Occurrences skipped since the service started, per schedule and reason "
            "(overlap: an unfinished run blocked it; misfire: later than the allowance).",
            labels=["schedule", "reason"],
        )
        for (schedule_id, reason), count in sorted(service.skipped.items()):
            skipped.add_metric([schedule_id, reason], count)
        yield skipped
        yield CounterMetricFamily(
            "wf_schedule_admitted",
            "Occurrences admitted as runs since the service started.",
            value=service.admitted_total,
        )
        yield _lateness(list(service.lateness_s))
        yield GaugeMetricFamily(
            "wf_schedule_admission_lateness_window_samples",
            "Admission lateness samples the quantiles are computed over (a bounded window).",
            len(service.lateness_s),
        )
        yield GaugeMetricFamily(
            "wf_schedule_execution_slots_in_use",
            "Execution slots taken: running scheduled runs plus scheduled resumes in progress.",
            service.slots_in_use(),
        )
        yield GaugeMetricFamily(
            "wf_schedule_execution_slots",
            "Execution slots for scheduled runs (server.scheduler.max_concurrent_runs).",
            service.config.max_concurrent_runs,
        )
        yield GaugeMetricFamily(
            "wf_schedule_blocked",
            "Schedules refused admission because a record of theirs does not decode.",
            len(service.blocked),
        )
        yield GaugeMetricFamily(
            "wf_schedule_service_draining",
            "1 while the schedule service drains on shutdown, else 0.",
            1.0 if service.state == "draining" else 0.0,
        )


def _lateness(samples: Sequence[float]) -> SummaryMetricFamily:
    family = SummaryMetricFamily(
        "wf_schedule_admission_lateness_seconds",
        "Admission instant minus occurrence instant; quantiles over the most recent "
        "admissions (a bounded window), NaN before the first.",
    )
    ordered = sorted(samples)
    for q in LATENESS_QUANTILES:
        family.add_sample(family.name, {"quantile": _bound(q)}, _nearest_rank(ordered, q))
    return family


def _nearest_rank(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile of sorted samples by nearest rank (NaN without samples)."""
    if not ordered:
        return math.nan
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


class ClusterCollector:
    """Reads this server's role in its cluster at scrape time (docs/ha.md)."""

    def __init__(self, cluster: ClusterRole) -> None:
        self.cluster = cluster

    def describe(self) -> Iterator[Metric]:
        """The families (lets the registry refuse duplicate names at registration)."""
        return self.collect()

    def collect(self) -> Iterator[Metric]:
        """Role, epoch, take-overs and the gate, read now."""
        cluster = self.cluster
        role = GaugeMetricFamily(
            "wf_cluster_role",
            "1 for this server's current role (active, standby, starting, stopping).",
            labels=["role"],
        )
        for name in ("active", "standby", "starting", "stopping"):
            role.add_metric([name], 1.0 if cluster.role == name else 0.0)
        yield role
        yield GaugeMetricFamily(
            "wf_cluster_epoch",
            "The ownership epoch this server serves (active) or last saw (standby).",
            value=float(cluster.epoch),
        )
        yield CounterMetricFamily(
            "wf_cluster_takeovers",
            "Times this server became the active node.",
            value=float(cluster.takeovers),
        )
        yield GaugeMetricFamily(
            "wf_cluster_gate_closed",
            "1 while the active refuses calls because its writer session went unconfirmed.",
            value=1.0 if cluster.role == "active" and cluster.gate_closed() else 0.0,
        )
        yield GaugeMetricFamily(
            "wf_cluster_standby_lag_commits",
            "Commits the store took since this standby last saw the fence (0 on the active).",
            value=float(cluster.lag_commits()),
        )


class GrantLatency:
    """A node listener: observes ``wf_scheduling_latency_seconds`` for every grant once
    its commit landed (see the module docstring).

    The ready instant is the activity's ``queued_at`` in the core
    (:meth:`~wf.node_reads.NodeReads.queued_at`), read as the listener is told
    (right after the commit, before the grant is handed out, so the activity is
    still held under that lease; a grant whose activity has moved on since is
    skipped rather than mismeasured)."""

    def __init__(self, node: SchedulerNode, histogram: Histogram) -> None:
        self.node = node
        self.histogram = histogram
        self.activity_type = BoundedLabel(ACTIVITY_TYPE_LABELS_MAX)
        self._children: dict[str, Any] = {}
        """Label value -> its histogram child (``labels()`` takes a lock and checks the
        values on every call; the set is bounded by :attr:`activity_type`)."""

    def __call__(self, outcome: Outcome) -> None:
        grants = [d for d in outcome.decisions if type(d) is LeaseGranted]
        if not grants:
            return
        now = self.node.clock.now()
        queued_at = self.node.reads.queued_at
        children = self._children
        for grant in grants:
            ready_at = queued_at(grant.lease.activity_id, grant.lease.token)
            if ready_at is None:
                continue
            label = self.activity_type(grant.activity_type)
            child = children.get(label)
            if child is None:
                child = children[label] = self.histogram.labels(label)
            child.observe(max(0.0, now - ready_at))


class ServerMetrics:
    """One server's registry: the core collector, the RPC series and, given a way to
    find the schedule service (``schedule_service``), the schedule collector."""

    def __init__(
        self,
        node: SchedulerNode,
        *,
        process: bool = True,
        schedule_service: Callable[[], ScheduleService | None] | None = None,
        cluster: ClusterRole | None = None,
    ) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(CoreCollector(node))
        self.registry.register(UnservedCollector(node))
        if cluster is not None:
            self.registry.register(ClusterCollector(cluster))
        if schedule_service is not None:
            self.registry.register(ScheduleCollector(schedule_service))
        if process:
            ProcessCollector(registry=self.registry)
        self.rpc_latency = Histogram(
            "wf_rpc_duration_seconds",
            "JSON-RPC call latency per method (long polls include their wait).",
            ["method"],
            buckets=RPC_LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.rpc_errors = Counter(
            "wf_rpc_errors",
            "JSON-RPC calls answered with an error, per method and error code.",
            ["method", "code"],
            registry=self.registry,
        )
        self._latency_by_method: dict[str, Any] = {}
        self.scheduling_latency = Histogram(
            "wf_scheduling_latency_seconds",
            "Time from entering the ready queue to the grant's commit (the lease can be "
            "handed out), per activity type (the first "
            f"{ACTIVITY_TYPE_LABELS_MAX} seen; later ones as 'other').",
            ["activity_type"],
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        node.listeners.append(GrantLatency(node, self.scheduling_latency))

    def observe_call(
        self, method: str, duration_s: float, error: str | None, caller: Caller
    ) -> None:
        """Record one call (a dispatcher call observer)."""
        child = self._latency_by_method.get(method)
        if child is None:
            child = self._latency_by_method[method] = self.rpc_latency.labels(method)
        child.observe(duration_s)
        if error is not None:
            self.rpc_errors.labels(method, error).inc()

    def render(self, accept: str | None) -> tuple[bytes, str]:
        """The exposition body and its content type (OpenMetrics when asked for)."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type
