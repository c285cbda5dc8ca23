"""The wire contract: what may cross the boundary between wf processes.

The server, the ``App`` client and the worker SDK all import this package,
so a value is refused at the edge of the process that produced it as well
as at the server, and the three cannot disagree on a method:

- :mod:`~wf.wire.methods`, :mod:`~wf.wire.contract`: how a method is
  declared, and every method wf serves;
- :mod:`~wf.wire.scheduler_methods`, :mod:`~wf.wire.workflow_methods`,
  :mod:`~wf.wire.schedule_methods`: each family's parameters, results and
  declarations;
- :mod:`~wf.wire.workflow`, :mod:`~wf.wire.triggers`,
  :mod:`~wf.wire.scheduler`: the documents that travel (plans, artifacts,
  deployments, triggers, bounded activities);
- :mod:`~wf.wire.bounds`, :mod:`~wf.wire.paging`, :mod:`~wf.wire.payloads`:
  the bounds on every value, page cursors, the payload convention.

- :mod:`~wf.wire.views`, :mod:`~wf.wire.run_views`, :mod:`~wf.wire.schedule_views`:
  the typed results every method returns (:class:`~wf.wire.views.View` and its
  subclasses), exported here by name (``from wf.wire import RunView``; for
  static types import them from their modules, or from :mod:`wf.client`).

It imports :mod:`wf.errors` and the scheduler core's value modules (model,
outputs, timer) and nothing of the server, the store, the node, the runtime
or the schedules layer (``tests/test_import_layers.py``). This file imports
nothing, not even for type checkers (its exports load on first use), so the core
may use :mod:`~wf.wire.bounds` without loading the rest.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any, Final

_HOMES: Final = {
    **dict.fromkeys(
        (
            "ArtifactRef",
            "AttemptView",
            "AwaitingInput",
            "CheckpointView",
            "MapItemView",
            "NodeTrace",
            "ResumeMarkView",
            "RunErrorView",
            "RunPage",
            "RunSummary",
            "RunTrigger",
            "RunView",
        ),
        "wf.wire.run_views",
    ),
    **dict.fromkeys(
        ("OccurrencePage", "OccurrenceView", "PreviewInstant", "SchedulePage", "ScheduleView"),
        "wf.wire.schedule_views",
    ),
    **dict.fromkeys(
        ("Artifact", "ArtifactPage", "Deployment", "DeploymentPage"), "wf.wire.workflow"
    ),
    "RunCounts": "wf.wire.workflow_methods",
    "View": "wf.wire.views",
}
"""Where each exported name lives."""

__all__ = [
    "Artifact",
    "ArtifactPage",
    "ArtifactRef",
    "AttemptView",
    "AwaitingInput",
    "CheckpointView",
    "Deployment",
    "DeploymentPage",
    "MapItemView",
    "NodeTrace",
    "OccurrencePage",
    "OccurrenceView",
    "PreviewInstant",
    "ResumeMarkView",
    "RunCounts",
    "RunErrorView",
    "RunPage",
    "RunSummary",
    "RunTrigger",
    "RunView",
    "SchedulePage",
    "ScheduleView",
    "View",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(home), name)
