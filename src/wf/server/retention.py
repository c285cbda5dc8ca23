"""The server's side of retention: what a run's document links, and the periodic pass.

Theory of operation
-------------------
:mod:`wf.store.retention` prunes in bounded batches but cannot read a run's
document; :class:`RuntimeLinks` reads it for the store (the activity ids its
nodes name; the run an activity id belongs to). ``wf store prune`` uses the
same links.

:class:`RetentionTask` runs on the active server only (started when it
becomes active, stopped when it stops or steps down), every
``server.store.retention.interval_s``, and only when
``older_than_s`` is set. A pass prunes everything older than ``now -
older_than_s`` in batches of ``batch`` rows, pausing ``batch_pause_s``
between batches: each batch is one short write transaction that queues
between group commits, so dispatch never waits on a whole backlog. A pass
that fails (the store unreachable) is logged and tried again at the next
interval; nothing is lost by skipping one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from wf.clock import Clock
from wf.errors import CorruptRecord
from wf.runtime.runs import node_of_activity, run_from_row
from wf.server.config import RetentionConfig
from wf.server.periodic import Periodic
from wf.store.driven_catalog import DrivenCatalog
from wf.store.protocol import RunRow
from wf.store.retention import PruneCounts

log = logging.getLogger("wf.server.retention")


class RuntimeLinks:
    """:class:`~wf.store.retention.RunLinks` from the runtime's run documents."""

    def activities_of(self, run: RunRow) -> Sequence[str] | None:
        """The activity ids of ``run``'s nodes; ``None`` if its document does not decode."""
        try:
            document = run_from_row(run)
        except CorruptRecord:
            return None
        states = [s for n in document.nodes.values() for s in [n, *(n.items or ())]]
        return [s.activity_id for s in states if s.activity_id]  # map items' too

    def run_of(self, activity_id: str) -> str | None:
        """The run ``activity_id`` belongs to (``None``: a standalone activity)."""
        found = node_of_activity(activity_id)
        return None if found is None else found[0]


class RetentionTask:
    """Prunes the store every ``interval_s`` while started (see the module docstring)."""

    def __init__(self, store: object, config: RetentionConfig, clock: Clock) -> None:
        self.store = store if isinstance(store, DrivenCatalog) else None
        """The store to prune (``None``: a store retention cannot drive, e.g. a test's)."""
        self.config = config
        self.clock = clock
        self.passes = 0
        """Passes completed so far."""
        self.pruned = PruneCounts()
        """Everything pruned since start."""
        self._periodic = Periodic(
            "wf-retention", clock, lambda: self.config.interval_s, self._pass_logged
        )

    @property
    def enabled(self) -> bool:
        """Whether retention is configured and the store supports it."""
        return self.config.older_than_s > 0 and self.store is not None

    def start(self) -> None:
        """Begin the periodic passes (nothing if retention is off)."""
        if self.enabled:
            self._periodic.start()

    async def stop(self) -> None:
        """End the passes; a batch in flight is cancelled (its transaction rolls back)."""
        await self._periodic.stop()

    async def run_pass(self) -> PruneCounts:
        """One pass now: everything older than ``older_than_s`` (see the module docstring)."""
        store = self.store
        if store is None or self.config.older_than_s <= 0:
            return PruneCounts()
        cutoff = self.clock.now() - self.config.older_than_s
        counts = await store.prune(
            RuntimeLinks(),
            cutoff=cutoff,
            batch=self.config.batch,
            pause=self._pause,
        )
        self.passes += 1
        self.pruned.add(counts)
        if counts.total():
            log.info(
                "retention pruned %d runs, %d activities, %d transitions, %d occurrences",
                counts.runs,
                counts.activities,
                counts.transitions,
                counts.occurrences,
                extra={"action": "store.pruned", "cutoff": cutoff, **counts.as_dict()},
            )
        return counts

    async def _pause(self) -> None:
        if self.config.batch_pause_s > 0:
            await asyncio.sleep(self.config.batch_pause_s)

    async def _pass_logged(self) -> None:
        try:
            await self.run_pass()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the next interval tries again; nothing is lost
            log.warning(
                "retention pass failed (%s: %s); the next interval tries again",
                type(exc).__name__,
                exc,
                extra={"action": "store.prune_failed", "error": type(exc).__name__},
            )
