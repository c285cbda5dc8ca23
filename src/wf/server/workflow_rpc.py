"""``workflow.*`` JSON-RPC methods: the wire face of :class:`wf.runtime.api.WorkflowAPI`.

Plans and deployment bodies travel as plain JSON objects (``dict``) rather
than typed Structs, so that a malformed plan is answered by the runtime's own
validation (:class:`~wf.errors.InvalidArgument` naming the node and field,
exactly as the Python API answers) instead of a generic ``Invalid params``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from wf.runtime.api import WorkflowAPI
from wf.runtime.artifacts import Artifact
from wf.runtime.deployments import Deployment
from wf.server.rpc import Caller, Registry
from wf.server.scheduler_api import NoParams


class CreateArtifactParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``workflow.artifacts.create``."""

    artifact_id: str
    """Artifact id."""
    version: int
    """Version to create."""
    plan: dict[str, Any]
    """The plan (see docs/workflows.md)."""


class GetArtifactParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``workflow.artifacts.get``."""

    artifact_id: str
    """Artifact id."""
    version: int | None = None
    """Version; ``None``: the highest."""


class ListArtifactsParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``workflow.artifacts.list``."""

    artifact_id: str | None = None
    """Only this artifact's versions; ``None``: every artifact."""


class SaveDeploymentParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``workflow.deployments.save``."""

    body: dict[str, Any]
    """The deployment (fields of ``DeploymentSpec``)."""
    expected_revision: int | None = None
    """Revision the change is based on (0: new); ``None``: the current one."""


class DeploymentIdParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``workflow.deployments.get``."""

    deployment_id: str
    """``<artifact_id>.<name>``."""


def register_workflow_methods(api: WorkflowAPI, registry: Registry) -> None:
    """Add every ``workflow.artifacts.*`` and ``workflow.deployments.*`` method."""

    async def create(p: CreateArtifactParams, c: Caller) -> Artifact:
        return await api.create_artifact_from_plan(p.artifact_id, p.version, p.plan, caller=c)

    async def get(p: GetArtifactParams, c: Caller) -> Artifact:
        return await api.get_artifact(p.artifact_id, p.version, caller=c)

    async def list_(p: ListArtifactsParams, c: Caller) -> list[Artifact]:
        return await api.list_artifacts(p.artifact_id, caller=c)

    async def save(p: SaveDeploymentParams, c: Caller) -> Deployment:
        return await api.save_deployment(p.body, p.expected_revision, caller=c)

    async def get_dep(p: DeploymentIdParams, c: Caller) -> Deployment:
        return await api.get_deployment(p.deployment_id, caller=c)

    async def list_dep(p: NoParams, c: Caller) -> list[Deployment]:
        return await api.list_deployments(caller=c)

    add = registry.add
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
        summary="Artifact versions, by id then version.",
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
        NoParams,
        list_dep,
        access="read",
        summary="Every deployment the caller may see.",
    )
