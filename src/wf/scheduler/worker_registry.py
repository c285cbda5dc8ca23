"""Worker registration, heartbeats and failure detection (WF-005 §6, §7, §13).

Theory of operation
-------------------
A worker registers with its §6 metadata and renews the registration by
registering again or by heartbeating; either counts as "seen". A worker
whose last sign of life is older than ``heartbeat_interval_s ×
heartbeat_misses_max`` is declared lost by :meth:`WorkerRegistry.pop_dead`.
Deadlines sit in a min-heap of ``(deadline, seq, worker_id)`` with at most
one entry per worker: a sign of life only moves ``last_seen_at``, and when an
entry falls due for a worker that was seen since, it is re-armed at the true
deadline. So a heartbeat or poll costs O(1), the heap stays at W entries, and
a tick costs only the entries that fell due.

Heartbeat figures are soft state: they drive resource-aware balancing but
are not persisted. After a restart every recovered worker gets a full grace
period (its deadline counts from the recovery instant) to heartbeat again.

A worker that failed or left (:meth:`WorkerRegistry.depart`) holds nothing
and is kept only so that operators see it and its late calls are answered
``WorkerNotActive``. It is forgotten ``retention_s`` after its departure
(:meth:`WorkerRegistry.pop_purgeable`), so departed workers never pile up;
one that comes back later registers afresh. Purge deadlines sit in a second
heap with the same one-entry-per-worker, re-arm-when-stale discipline. The
departure instant is durable (the store's row of a departed worker was last
written by its departure), so a restart does not start the retention over.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable

from wf.errors import InvalidArgument, NotFound
from wf.scheduler.model import (
    LIVE_WORKER_STATUSES,
    HeartbeatStats,
    WorkerInfo,
    WorkerState,
    WorkerStatus,
)


def validate_worker_info(info: WorkerInfo) -> None:
    """Raise :class:`InvalidArgument` for registration metadata that cannot be honoured."""
    if not info.worker_id:
        raise InvalidArgument("worker_id must not be empty", field="worker_id")
    if info.max_concurrency < 1 or info.max_concurrency > 100_000:
        raise InvalidArgument(
            "max_concurrency must be between 1 and 100000",
            field="max_concurrency",
            value=info.max_concurrency,
        )
    if not (math.isfinite(info.heartbeat_interval_s) and 0 < info.heartbeat_interval_s <= 3600):
        raise InvalidArgument(
            "heartbeat_interval_s must be in (0, 3600]",
            field="heartbeat_interval_s",
            value=info.heartbeat_interval_s,
        )


def declared_start_timeouts(workers: Iterable[WorkerState]) -> dict[str, float]:
    """Activity type -> the shortest ``schedule_to_start_s`` that a live worker
    declares for it: of several bounds on the same wait, the strictest is the one
    every declarer agrees the wait must not exceed."""
    shortest: dict[str, float] = {}
    for worker in workers:
        declared = worker.info.declared
        if not declared or worker.status not in LIVE_WORKER_STATUSES:
            continue
        served = worker.info.activity_types
        for activity_type, defaults in declared.items():
            start_s = defaults.schedule_to_start_s
            if start_s is not None and (served is None or activity_type in served):
                known = shortest.get(activity_type)
                if known is None or start_s < known:
                    shortest[activity_type] = start_s
    return shortest


def declares_run_limits(workers: Iterable[WorkerState]) -> bool:
    """Whether any live worker declares a ``start_to_close_s`` for a type it serves (if
    none does, an attempt without its own limit has none to look up)."""
    return any(
        defaults.start_to_close_s is not None
        for worker in workers
        if worker.info.declared and worker.status in LIVE_WORKER_STATUSES
        for defaults in worker.info.declared.values()
    )


class WorkerRegistry:
    """Every worker the core knows, with liveness deadlines."""

    __slots__ = (
        "_armed",
        "_deadlines",
        "_purge_armed",
        "_purges",
        "generation",
        "misses_max",
        "retention_s",
        "seq",
        "workers",
    )

    def __init__(self, misses_max: int, retention_s: float = 0.0) -> None:
        self.misses_max = misses_max
        self.retention_s = retention_s
        """How long a departed worker is kept; ``0``: for ever."""
        self.workers: dict[str, WorkerState] = {}
        self.seq = 0
        self.generation = 0
        """Grows whenever a worker joins, changes its registration or departs: what
        is derived from the live workers' registrations is stale when it moved."""
        self._deadlines: list[tuple[float, int, str]] = []
        self._armed: set[str] = set()
        self._purges: list[tuple[float, int, str]] = []
        self._purge_armed: set[str] = set()

    def get(self, worker_id: str) -> WorkerState:
        """The worker, or :class:`NotFound`."""
        worker = self.workers.get(worker_id)
        if worker is None:
            raise NotFound(f"unknown worker {worker_id!r}", worker_id=worker_id)
        return worker

    def register(self, info: WorkerInfo, now: float) -> tuple[WorkerState, bool]:
        """Register or renew; returns the worker and whether its record changed."""
        validate_worker_info(info)
        worker = self.workers.get(info.worker_id)
        if worker is None:
            self.seq += 1
            worker = WorkerState(info=info, seq=self.seq, registered_at=now, last_seen_at=now)
            self.workers[info.worker_id] = worker
            changed = True
            self.generation += 1
        else:
            changed = worker.info != info or worker.status not in LIVE_WORKER_STATUSES
            worker.info = info
            if worker.status not in LIVE_WORKER_STATUSES:
                worker.status = WorkerStatus.ACTIVE
                worker.registered_at = now
                worker.departed_at = None
            if changed:
                self.generation += 1
        self.touch(worker, now)
        return worker, changed

    def heartbeat(self, worker_id: str, stats: HeartbeatStats, now: float) -> WorkerState:
        """Record a heartbeat of a live worker."""
        worker = self.get(worker_id)
        worker.stats = stats
        self.touch(worker, now)
        return worker

    def touch(self, worker: WorkerState, now: float) -> None:
        """A sign of life: push the worker's liveness deadline forward."""
        worker.last_seen_at = now
        worker_id = worker.info.worker_id
        if worker_id not in self._armed:
            self._armed.add(worker_id)
            deadline = now + worker.info.heartbeat_interval_s * self.misses_max
            heapq.heappush(self._deadlines, (deadline, worker.seq, worker_id))

    def rearm_live(self, now: float) -> None:
        """Count every live worker's liveness deadline from ``now`` (or its last sign
        of life, if later), as start-up recovery does: for a clock that jumped over an
        interval no worker could heartbeat across. Soft state, so nothing to record."""
        for worker in self.workers.values():
            if worker.status in LIVE_WORKER_STATUSES:
                self.touch(worker, max(now, worker.last_seen_at))

    def pop_dead(self, now: float) -> list[WorkerState]:
        """Live workers whose deadline passed, in (deadline, seq) order."""
        dead: list[WorkerState] = []
        heap = self._deadlines
        while heap and heap[0][0] <= now:
            _deadline, _seq, worker_id = heapq.heappop(heap)
            self._armed.discard(worker_id)
            worker = self.workers.get(worker_id)
            if worker is None or worker.status not in LIVE_WORKER_STATUSES:
                continue
            current = worker.last_seen_at + worker.info.heartbeat_interval_s * self.misses_max
            if current <= now:
                dead.append(worker)
            else:
                # Seen since this entry was armed: re-arm at the true deadline (with
                # its current seq: a worker purged and registered again has a new one).
                self._armed.add(worker_id)
                heapq.heappush(heap, (current, worker.seq, worker_id))
        return dead

    def next_deadline_at(self) -> float | None:
        """The earliest liveness deadline entry (possibly stale)."""
        return self._deadlines[0][0] if self._deadlines else None

    def depart(self, worker: WorkerState, status: WorkerStatus, now: float) -> None:
        """The worker failed or left (it holds no lease): start its retention."""
        assert status not in LIVE_WORKER_STATUSES, "a departure ends in failed or gone"
        assert not worker.leases, "a departed worker holds nothing"
        worker.status = status
        worker.departed_at = now
        self.generation += 1
        self.arm_purge(worker)

    def arm_purge(self, worker: WorkerState) -> None:
        """Schedule forgetting a departed worker (also for workers restored as departed)."""
        departed_at = worker.departed_at
        if departed_at is None or self.retention_s <= 0:
            return
        worker_id = worker.info.worker_id
        if worker_id not in self._purge_armed:
            self._purge_armed.add(worker_id)
            heapq.heappush(self._purges, (departed_at + self.retention_s, worker.seq, worker_id))

    def pop_purgeable(self, now: float) -> list[WorkerState]:
        """Departed workers whose retention ended at ``now``, removed, in (due, seq) order."""
        purged: list[WorkerState] = []
        heap = self._purges
        while heap and heap[0][0] <= now:
            _due, _seq, worker_id = heapq.heappop(heap)
            self._purge_armed.discard(worker_id)
            worker = self.workers.get(worker_id)
            if (
                worker is None
                or worker.status in LIVE_WORKER_STATUSES
                or worker.departed_at is None
            ):
                continue  # Forgotten already, or it came back: nothing to purge.
            due = worker.departed_at + self.retention_s
            if due <= now:
                # A liveness entry it may still have is skipped when it falls due.
                del self.workers[worker_id]
                purged.append(worker)
            else:
                # It came back and departed again since this entry was armed.
                self._purge_armed.add(worker_id)
                heapq.heappush(heap, (due, worker.seq, worker_id))
        return purged

    def next_purge_at(self) -> float | None:
        """The earliest purge entry (possibly stale)."""
        return self._purges[0][0] if self._purges else None
