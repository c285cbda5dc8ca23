"""The workflow runtime: plans, artifacts, deployments, runs and the DAG engine."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from wf.runtime.api import WorkflowAPI
    from wf.runtime.artifacts import Artifact
    from wf.runtime.deployments import Deployment, DeploymentSpec
    from wf.runtime.plan import (
        ActivityNode,
        ConditionNode,
        InterruptNode,
        MapNode,
        Plan,
        TimerNode,
        validate_plan,
    )
    from wf.wire.run_views import RunPage, RunSummary, RunView

__all__ = [
    "ActivityNode",
    "Artifact",
    "ConditionNode",
    "Deployment",
    "DeploymentSpec",
    "InterruptNode",
    "MapNode",
    "Plan",
    "RunPage",
    "RunSummary",
    "RunView",
    "TimerNode",
    "WorkflowAPI",
    "validate_plan",
]

_HOMES: Final = {
    "ActivityNode": "wf.runtime.plan",
    "Artifact": "wf.runtime.artifacts",
    "ConditionNode": "wf.runtime.plan",
    "Deployment": "wf.runtime.deployments",
    "DeploymentSpec": "wf.runtime.deployments",
    "InterruptNode": "wf.runtime.plan",
    "MapNode": "wf.runtime.plan",
    "Plan": "wf.runtime.plan",
    "RunPage": "wf.wire.run_views",
    "RunSummary": "wf.wire.run_views",
    "RunView": "wf.wire.run_views",
    "TimerNode": "wf.runtime.plan",
    "WorkflowAPI": "wf.runtime.api",
    "validate_plan": "wf.runtime.plan",
}
"""Where each exported name lives."""


def __getattr__(name: str) -> Any:
    # Lazy: importing a pure module (wf.runtime.dag, wf.runtime.plan) runs this file
    # first, and WorkflowAPI would bring the run engine, the node and the store.
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(home), name)
