"""Activity types that wait with no worker able to take them: a warning and a gauge.

Theory of operation
-------------------
A run whose activity type no registered worker serves stays ``running`` with
its node ``submitted`` for ever (with overlap ``skip``, every later
occurrence of its schedule is skipped). :func:`wf.scheduler.unserved.unserved_types`
finds such types in the core (read through the node's read port,
:meth:`~wf.node_reads.NodeReads.unserved_types`); this module makes them visible:

* :class:`UnservedWatch` checks every :data:`CHECK_INTERVAL_S` while the
  server is active and logs ``activities.unserved`` (warning) for each type
  that has queued work no active worker may take: when the type is first
  found so, then at most once per :data:`WARN_INTERVAL_S` while it stays so;
  and ``activities.served`` (info) once a warned type is taken again.
* :class:`UnservedCollector` exports ``wf_activities_unserved{activity_type}``
  at scrape time: the queued activities of each unserved type. The label is
  bounded: the :data:`TYPES_SHOWN_MAX` types with the most waiting work keep
  their name, the rest are summed under ``other``.

``runs.inspect`` marks a waiting node whose type is unserved (``unserved``
in its trace entry; :mod:`wf.runtime.api`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Final

from prometheus_client.core import GaugeMetricFamily, Metric

from wf.clock import Clock
from wf.node import SchedulerNode
from wf.server.periodic import Periodic

CHECK_INTERVAL_S: Final = 5.0
"""How often the watch looks (a type is reported within this of having no worker)."""
WARN_INTERVAL_S: Final = 60.0
"""Least time between two warnings about one type."""
TYPES_SHOWN_MAX: Final = 100
"""Most ``activity_type`` label values of ``wf_activities_unserved`` (then ``other``)."""

log = logging.getLogger("wf.server.unserved")


def unserved_now(node: SchedulerNode) -> dict[str, int]:
    """Activity type -> queued activities no active worker may take, read now."""
    return node.reads.unserved_types()


class UnservedWatch:
    """Warns about unserved activity types while started (see the module docstring)."""

    def __init__(
        self,
        node: SchedulerNode,
        clock: Clock,
        *,
        check_interval_s: float = CHECK_INTERVAL_S,
        warn_interval_s: float = WARN_INTERVAL_S,
    ) -> None:
        self.node = node
        self.clock = clock
        self.check_interval_s = check_interval_s
        self.warn_interval_s = warn_interval_s
        self.warned: dict[str, float] = {}
        """Unserved type -> when it was last warned about (bounded by the core's lanes)."""
        self._periodic = Periodic(
            "wf-unserved-watch", clock, lambda: self.check_interval_s, self._check_async
        )

    def start(self) -> None:
        """Begin checking (idempotent)."""
        self._periodic.start()

    async def stop(self) -> None:
        """Stop checking."""
        await self._periodic.stop()

    def check(self) -> dict[str, int]:
        """One check now: log what changed; returns the unserved types found."""
        now = self.clock.now()
        found = unserved_now(self.node)
        for activity_type, waiting in sorted(found.items()):
            last = self.warned.get(activity_type)
            if last is not None and now - last < self.warn_interval_s:
                continue
            self.warned[activity_type] = now
            log.warning(
                "%d activities of type %r wait with no registered worker able to take them",
                waiting,
                activity_type,
                extra={
                    "action": "activities.unserved",
                    "activity_type": activity_type,
                    "waiting": waiting,
                },
            )
        for activity_type in sorted(set(self.warned) - set(found)):
            del self.warned[activity_type]
            log.info(
                "activities of type %r are taken by a worker again",
                activity_type,
                extra={"action": "activities.served", "activity_type": activity_type},
            )
        return found

    async def _check_async(self) -> None:
        self.check()


class UnservedCollector:
    """``wf_activities_unserved`` at scrape time (see the module docstring)."""

    def __init__(self, node: SchedulerNode) -> None:
        self.node = node

    def describe(self) -> Iterator[Metric]:
        """The family (lets the registry refuse duplicate names at registration)."""
        return self.collect()

    def collect(self) -> Iterator[Metric]:
        """The family, read now."""
        family = GaugeMetricFamily(
            "wf_activities_unserved",
            "Queued activities no active worker may take, per activity type (the "
            f"{TYPES_SHOWN_MAX} with the most; the rest as 'other').",
            labels=["activity_type"],
        )
        ranked = sorted(unserved_now(self.node).items(), key=lambda item: (-item[1], item[0]))
        for activity_type, waiting in ranked[:TYPES_SHOWN_MAX]:
            family.add_metric([activity_type], waiting)
        rest = sum(waiting for _, waiting in ranked[TYPES_SHOWN_MAX:])
        if rest:
            family.add_metric(["other"], rest)
        yield family
