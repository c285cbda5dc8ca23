"""``workflow.*`` JSON-RPC methods: the wire face of :class:`wf.runtime.api.WorkflowAPI`.

The methods' parameters and declarations are the wire contract's
(:mod:`wf.wire.workflow_methods`, which says why plans and deployment bodies
travel as plain JSON objects); this module attaches a handler to each.
"""

from __future__ import annotations

from wf.runtime.api import WorkflowAPI
from wf.server.rpc import Caller, Registry
from wf.wire import workflow_methods as declared
from wf.wire.run_views import RunPage, RunView
from wf.wire.workflow import Artifact, ArtifactPage, Deployment, DeploymentPage
from wf.wire.workflow_methods import (
    CancelRunParams,
    CountRunsParams,
    CreateArtifactParams,
    DeploymentIdParams,
    GetArtifactParams,
    ListArtifactsParams,
    ListDeploymentsParams,
    ListRunsParams,
    ResumeRunParams,
    RunCounts,
    RunIdParams,
    SaveDeploymentParams,
    StartRunParams,
)


def register_workflow_methods(api: WorkflowAPI, registry: Registry) -> None:
    """Attach a handler to every ``workflow.artifacts.*``, ``.deployments.*`` and
    ``.runs.*`` method of the wire contract."""

    async def create(p: CreateArtifactParams, c: Caller) -> Artifact:
        return await api.create_artifact_from_plan(p.artifact_id, p.version, p.plan, caller=c)

    async def get(p: GetArtifactParams, c: Caller) -> Artifact:
        return await api.get_artifact(p.artifact_id, p.version, caller=c)

    async def list_(p: ListArtifactsParams, c: Caller) -> ArtifactPage:
        return await api.list_artifacts(p.artifact_id, caller=c, limit=p.limit, cursor=p.cursor)

    async def save(p: SaveDeploymentParams, c: Caller) -> Deployment:
        return await api.save_deployment(p.body, p.expected_revision, caller=c)

    async def get_dep(p: DeploymentIdParams, c: Caller) -> Deployment:
        return await api.get_deployment(p.deployment_id, caller=c)

    async def list_dep(p: ListDeploymentsParams, c: Caller) -> DeploymentPage:
        return await api.list_deployments(caller=c, limit=p.limit, cursor=p.cursor)

    async def start_run(p: StartRunParams, c: Caller) -> RunView:
        return await api.start_run(p.deployment_id, p.inputs, caller=c, request_id=p.request_id)

    async def inspect_run(p: RunIdParams, c: Caller) -> RunView:
        return await api.inspect_run(p.run_id, caller=c)

    async def list_runs(p: ListRunsParams, c: Caller) -> RunPage:
        return await api.list_runs(
            caller=c,
            deployment_id=p.deployment_id,
            schedule_id=p.schedule_id,
            status=p.status,
            limit=p.limit,
            cursor=p.cursor,
            newest_first=p.newest_first,
            created_after=p.created_after,
            created_before=p.created_before,
        )

    async def count_runs(p: CountRunsParams, c: Caller) -> RunCounts:
        return await api.count_runs(p.window_s, caller=c)

    async def resume_run(p: ResumeRunParams, c: Caller) -> RunView:
        return await api.resume_run(p.run_id, p.answer, p.node_id, caller=c)

    async def cancel_run(p: CancelRunParams, c: Caller) -> RunView:
        return await api.cancel_run(p.run_id, p.reason, caller=c)

    handle = registry.handle
    handle(declared.START_RUN, start_run)
    handle(declared.INSPECT_RUN, inspect_run)
    handle(declared.LIST_RUNS, list_runs)
    handle(declared.COUNT_RUNS, count_runs)
    handle(declared.RESUME_RUN, resume_run)
    handle(declared.CANCEL_RUN, cancel_run)
    handle(declared.CREATE_ARTIFACT, create)
    handle(declared.GET_ARTIFACT, get)
    handle(declared.LIST_ARTIFACTS, list_)
    handle(declared.SAVE_DEPLOYMENT, save)
    handle(declared.GET_DEPLOYMENT, get_dep)
    handle(declared.LIST_DEPLOYMENTS, list_dep)
