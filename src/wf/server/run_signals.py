"""Run-level signals every server gives: one log line per run event, and run metrics.

Theory of operation
-------------------
Both are run-engine listeners (:attr:`wf.runtime.engine.RunEngine.listeners`),
called with a run after every stored change, so they see exactly what the
store holds and add nothing to the run path but a dictionary lookup.

:class:`RunProgressLogger` logs one line when a run is admitted
(``run.admitted``, info) and one when it reaches a final status
(``run.completed`` at info; ``run.failed``, ``run.exhausted`` and
``run.cancelled`` at warning), on the ``wf.runs`` logger. A repeated
notification of a finished run logs nothing (the last
:attr:`~RunProgressLogger.FINISHED_KEPT` finished ids are remembered).

:class:`RunMetrics` counts finished runs per deployment and status
(``wf_runs_total``) and observes each finished run's duration, from its
creation (admission) to its end (``wf_run_duration_seconds``). The
``deployment`` label is bounded: the first :data:`DEPLOYMENT_LABELS_MAX`
deployments seen keep their id, later ones share the value ``other``, so a
server with very many deployments cannot grow the scrape without bound.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Histogram

from wf.runtime.runs import Run, RunStatus

RUNS_LOGGER: Final = "wf.runs"
"""The logger of the run lines."""
DEPLOYMENT_LABELS_MAX: Final = 200
"""Distinct ``deployment`` label values; later deployments are counted as ``other``."""
OTHER_LABEL: Final = "other"
"""The label value shared by values past a label's cap."""
RUN_DURATION_BUCKETS_S: Final = (
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
    300.0,
    900.0,
    3600.0,
    4 * 3600.0,
    24 * 3600.0,
)
"""Buckets of ``wf_run_duration_seconds``: a fraction of a second to a day."""
FINISHED_KEPT: Final = 10_000
"""Finished run ids remembered, so that a repeated notification counts nothing."""


class BoundedLabel:
    """Maps raw values to label values: the first ``limit`` distinct ones as they are,
    every later one to :data:`OTHER_LABEL`."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._kept: set[str] = set()

    def __call__(self, value: str) -> str:
        if value in self._kept:
            return value
        if len(self._kept) >= self.limit:
            return OTHER_LABEL
        self._kept.add(value)
        return value


class _Finished:
    """Run ids seen final, the oldest forgotten first."""

    def __init__(self) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()

    def first_time(self, run_id: str) -> bool:
        if run_id in self._ids:
            return False
        self._ids[run_id] = None
        if len(self._ids) > FINISHED_KEPT:
            self._ids.popitem(last=False)
        return True

    def __contains__(self, run_id: str) -> bool:
        return run_id in self._ids


def _iso(instant: float | None) -> str | None:
    if instant is None:
        return None
    return datetime.fromtimestamp(instant, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class RunProgressLogger:
    """An engine listener: a line per admitted run and per finished run (see module doc)."""

    FINISHED_KEPT: Final = FINISHED_KEPT

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.log = logger or logging.getLogger(RUNS_LOGGER)
        self._admitted: set[str] = set()
        self._finished = _Finished()

    def __call__(self, run: Run) -> None:
        run_id = run.run_id
        if run_id in self._finished:
            return
        trigger = run.trigger
        source = f"schedule {trigger.schedule_id}" if trigger.kind == "schedule" else trigger.kind
        common: dict[str, Any] = {
            "run_id": run_id,
            "deployment_id": run.deployment_id,
            "schedule_id": trigger.schedule_id,
            "occurrence": _iso(trigger.occurrence),
        }
        if not run.final:
            if run.status is not RunStatus.ADMITTED or run_id in self._admitted:
                return
            self._admitted.add(run_id)
            when = f" (occurrence {common['occurrence']})" if trigger.occurrence else ""
            self.log.info(
                "run %s admitted from %s%s",
                run_id,
                source,
                when,
                extra={"action": "run.admitted", **common},
            )
            return
        self._admitted.discard(run_id)
        self._finished.first_time(run_id)
        if run.status is RunStatus.COMPLETED:
            self.log.info(
                "run %s completed (%s): output %s",
                run_id,
                source,
                json.dumps(run.output, sort_keys=True, default=str),
                extra={"action": "run.completed", **common, "output": run.output},
            )
        else:
            error = run.error
            self.log.warning(
                "run %s %s (%s): %s",
                run_id,
                run.status,
                source,
                error.message if error is not None else "",
                extra={
                    "action": f"run.{run.status}",
                    **common,
                    "error_code": error.code if error is not None else None,
                    "error_message": error.message if error is not None else None,
                    "node": error.node if error is not None else None,
                },
            )


class RunMetrics:
    """An engine listener feeding ``wf_runs_total`` and ``wf_run_duration_seconds``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.runs = Counter(
            "wf_runs",
            "Runs that reached a final status, per deployment (the first "
            f"{DEPLOYMENT_LABELS_MAX} seen; later ones as 'other') and status.",
            ["deployment", "status"],
            registry=registry,
        )
        self.duration = Histogram(
            "wf_run_duration_seconds",
            "Finished runs' duration, from admission to the final status.",
            ["status"],
            buckets=RUN_DURATION_BUCKETS_S,
            registry=registry,
        )
        self.deployment = BoundedLabel(DEPLOYMENT_LABELS_MAX)
        self._finished = _Finished()

    def __call__(self, run: Run) -> None:
        if not run.final or not self._finished.first_time(run.run_id):
            return
        status = str(run.status)
        self.runs.labels(self.deployment(run.deployment_id), status).inc()
        if run.finished_at is not None:
            self.duration.labels(status).observe(max(0.0, run.finished_at - run.created_at))
