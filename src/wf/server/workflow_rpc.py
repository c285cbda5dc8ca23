"""``workflow.*`` JSON-RPC methods: the wire face of :class:`wf.runtime.api.WorkflowAPI`.

Plans and deployment bodies travel as plain JSON objects (``dict``) rather
than typed Structs, so that a malformed plan is answered by the runtime's own
validation (:class:`~wf.errors.InvalidArgument` naming the node and field,
exactly as the Python API answers) instead of a generic ``Invalid params``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from wf.runtime.api import ArtifactPage, DeploymentPage, WorkflowAPI
from wf.runtime.artifacts import Artifact
from wf.runtime.deployments import Deployment
from wf.server.rpc import Caller, Registry
from wf.wire.bounds import (
    Cursor,
    Id,
    Name,
    NonNegI64,
    Positive64,
    Text,
    check_json_value,
)
from wf.wire.paging import PAGE_LIMIT_DEFAULT, Limit


class CreateArtifactParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``workflow.artifacts.create``."""

    artifact_id: Id
    """Artifact id."""
    version: Positive64
    """Version to create."""
    plan: dict[str, Any]
    """The plan (see docs/workflows.md)."""

    def __post_init__(self) -> None:
        """Bound the free-form plan (depth, size, strings, integers)."""
        check_json_value(self.plan, "plan")


class GetArtifactParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``workflow.artifacts.get``."""

    artifact_id: Id
    """Artifact id."""
    version: Positive64 | None = None
    """Version; ``None``: the highest."""


class ListArtifactsParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``workflow.artifacts.list``."""

    artifact_id: Id | None = None
    """Only this artifact's versions; ``None``: every artifact."""
    limit: Limit = PAGE_LIMIT_DEFAULT
    """Page size, 1-100."""
    cursor: Cursor | None = None
    """``next_cursor`` of the previous page."""


class SaveDeploymentParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``workflow.deployments.save``."""

    body: dict[str, Any]
    """The deployment (fields of ``DeploymentSpec``)."""
    expected_revision: NonNegI64 | None = None
    """Revision the change is based on (0: new); ``None``: the current one."""

    def __post_init__(self) -> None:
        """Bound the free-form body (depth, size, strings, integers)."""
        check_json_value(self.body, "body")


class ListDeploymentsParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``workflow.deployments.list``."""

    limit: Limit = PAGE_LIMIT_DEFAULT
    """Page size, 1-100."""
    cursor: Cursor | None = None
    """``next_cursor`` of the previous page."""


class DeploymentIdParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``workflow.deployments.get``."""

    deployment_id: Id
    """``<artifact_id>.<name>``."""


class StartRunParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``workflow.runs.start``."""

    deployment_id: Id
    """The deployment to run."""
    inputs: dict[str, Any] | None = None
    """Inputs overlaid on the deployment's defaults."""

    def __post_init__(self) -> None:
        """Bound the free-form inputs (depth, size, strings, integers)."""
        check_json_value(self.inputs, "inputs")


class RunIdParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``workflow.runs.inspect``."""

    run_id: Id
    """``run-000001`` style id."""


class ListRunsParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``workflow.runs.list``."""

    deployment_id: Id | None = None
    """Only runs of this deployment."""
    schedule_id: Id | None = None
    """Only runs this schedule admitted."""
    status: Name | None = None
    """Only runs with this status."""
    limit: Limit = PAGE_LIMIT_DEFAULT
    """Page size, 1-100."""
    cursor: Cursor | None = None
    """``next_cursor`` of the previous page."""


class ResumeRunParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``workflow.runs.resume``."""

    run_id: Id
    """The interrupted run."""
    answer: Any
    """The answer (checked against the interrupt's input schema; may be ``null``)."""
    node_id: Id | None = None
    """The interrupt node (optional when only one waits)."""

    def __post_init__(self) -> None:
        """Bound the free-form answer (depth, size, strings, integers)."""
        check_json_value(self.answer, "answer")


class CancelRunParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``workflow.runs.cancel``."""

    run_id: Id
    """The run to cancel."""
    reason: Text = ""
    """Why (kept in the run's error)."""


def register_workflow_methods(api: WorkflowAPI, registry: Registry) -> None:
    """Add every ``workflow.artifacts.*``, ``.deployments.*`` and ``.runs.*`` method."""

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

    async def start_run(p: StartRunParams, c: Caller) -> dict[str, Any]:
        return await api.start_run(p.deployment_id, p.inputs, caller=c)

    async def inspect_run(p: RunIdParams, c: Caller) -> dict[str, Any]:
        return await api.inspect_run(p.run_id, caller=c)

    async def list_runs(p: ListRunsParams, c: Caller) -> dict[str, Any]:
        return await api.list_runs(
            caller=c,
            deployment_id=p.deployment_id,
            schedule_id=p.schedule_id,
            status=p.status,
            limit=p.limit,
            cursor=p.cursor,
        )

    async def resume_run(p: ResumeRunParams, c: Caller) -> dict[str, Any]:
        return await api.resume_run(p.run_id, p.answer, p.node_id, caller=c)

    async def cancel_run(p: CancelRunParams, c: Caller) -> dict[str, Any]:
        return await api.cancel_run(p.run_id, p.reason, caller=c)

    add = registry.add
    add(
        "workflow.runs.start",
        StartRunParams,
        start_run,
        access="operate",
        summary="Start a run of a deployment; returns its view.",
    )
    add(
        "workflow.runs.inspect",
        RunIdParams,
        inspect_run,
        access="read",
        summary="A run's status, inputs, per-node trace, output and checkpoint.",
    )
    add(
        "workflow.runs.list",
        ListRunsParams,
        list_runs,
        access="read",
        summary="A page of runs, oldest first, with a next_cursor.",
    )
    add(
        "workflow.runs.resume",
        ResumeRunParams,
        resume_run,
        access="operate",
        summary="Answer a run's interrupt node.",
    )
    add(
        "workflow.runs.cancel",
        CancelRunParams,
        cancel_run,
        access="operate",
        summary="Cancel a run that has not stopped.",
    )
    add(
        "workflow.artifacts.create",
        CreateArtifactParams,
        create,
        access="operate",
        summary="Create an immutable artifact version from a plan (idempotent by content).",
    )
    add(
        "workflow.artifacts.get",
        GetArtifactParams,
        get,
        access="read",
        summary="One artifact version (default: the highest).",
    )
    add(
        "workflow.artifacts.list",
        ListArtifactsParams,
        list_,
        access="read",
        summary="A page of artifact versions, by id then version, with a next_cursor.",
    )
    add(
        "workflow.deployments.save",
        SaveDeploymentParams,
        save,
        access="operate",
        summary="Create or update a deployment (optimistic revision check).",
    )
    add(
        "workflow.deployments.get",
        DeploymentIdParams,
        get_dep,
        access="read",
        summary="One deployment.",
    )
    add(
        "workflow.deployments.list",
        ListDeploymentsParams,
        list_dep,
        access="read",
        summary="A page of the deployments the caller may see, by id, with a next_cursor.",
    )
