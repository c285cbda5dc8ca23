"""The workflow runtime: plans, artifacts, deployments (runs and the DAG engine next)."""

from wf.runtime.api import WorkflowAPI
from wf.runtime.artifacts import Artifact
from wf.runtime.deployments import Deployment, DeploymentSpec
from wf.runtime.plan import ActivityNode, InterruptNode, Plan, TimerNode, validate_plan

__all__ = [
    "ActivityNode",
    "Artifact",
    "Deployment",
    "DeploymentSpec",
    "InterruptNode",
    "Plan",
    "TimerNode",
    "WorkflowAPI",
    "validate_plan",
]
