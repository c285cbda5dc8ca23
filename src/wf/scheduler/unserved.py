"""Which activity types wait with no registered worker able to take them.

An activity no active worker may run (its type, tenant, partition or
capabilities match no registration) stays queued with nothing anywhere saying
why. :func:`unserved_types` finds them: a read of the core's ready queue and
worker registry, for the shell to warn about (``wf.server.unserved``), export
(``wf_activities_unserved``) and show in ``runs.inspect``. It is a pure read:
no state changes, no clock. Its cost is one pass over the lanes that hold
work times the distinct worker signatures, so callers run it now and then
(a periodic check, a scrape, an inspect), never per command.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from wf.scheduler.model import WorkerState, WorkerStatus
from wf.scheduler.queue import Lane, worker_signature


def unserved_types(lanes: Iterable[Lane], workers: Mapping[str, WorkerState]) -> dict[str, int]:
    """Activity type -> queued activities of that type that no *active* worker may take
    (a draining worker takes nothing new; a failed or departed one is gone)."""
    signatures = {
        worker_signature(w.info) for w in workers.values() if w.status is WorkerStatus.ACTIVE
    }
    found: dict[str, int] = {}
    for lane in lanes:
        if lane.size > 0 and not any(lane.eligible_for(s) for s in signatures):
            found[lane.activity_type] = found.get(lane.activity_type, 0) + lane.size
    return found
