"""From a store's load to a core snapshot: the store's side of §23 recovery.

Theory of operation
-------------------
The core builds its own snapshot from decoded rows
(:func:`wf.scheduler.recovery.snapshot_from_durable`); what stays here is what
only the store can judge. A counter rewound below its data stops recovery
(:func:`wf.store.check.refuse_rewound_counters`): the core would hand out
numbers that are taken, and its first commit would fence the store. A held
activity whose worker is unknown, which the core leaves out (fail closed),
is reported as a store :class:`~wf.store.protocol.Diagnostic` beside the
ones the load found, so the rest of the store keeps working.
"""

from __future__ import annotations

from wf.scheduler.config import SchedulerConfig
from wf.scheduler.recovery import BlockedLease, CoreSnapshot, snapshot_from_durable
from wf.store.check import refuse_rewound_counters
from wf.store.protocol import Diagnostic, StoredState


def build_snapshot(
    stored: StoredState, config: SchedulerConfig, now: float
) -> tuple[CoreSnapshot, list[Diagnostic]]:
    """A core snapshot from stored state (workers count as last seen at ``now``) and
    every diagnostic of the load and of the rebuild.

    Raises :class:`~wf.errors.CorruptRecord` if a counter was rewound below its data
    (:func:`wf.store.check.refuse_rewound_counters`): that store must not start.
    """
    refuse_rewound_counters(stored.diagnostics)
    snapshot, blocked = snapshot_from_durable(stored, config, now)
    return snapshot, [*stored.diagnostics, *map(_unknown_worker, blocked)]


def _unknown_worker(blocked: BlockedLease) -> Diagnostic:
    return Diagnostic(
        kind="unknown_worker",
        table="activities",
        key=blocked.activity_id,
        message=(
            f"activity {blocked.activity_id!r} is {blocked.state.value} by worker "
            f"{blocked.worker_id!r}, which is not registered; blocked"
        ),
        activity_id=blocked.activity_id,
    )
