"""The ``workflow.*`` methods (artifacts, deployments, runs): parameters and declarations.

Plans and deployment bodies travel as plain JSON objects (``dict``) rather
than typed Structs, so that a malformed plan is answered by the runtime's own
validation (:class:`~wf.errors.InvalidArgument` naming the node and field,
exactly as the Python API answers) instead of a generic ``Invalid params``.
The runtime's :class:`~wf.runtime.api.WorkflowAPI` is the Python API behind
them (each declaration's ``python_name`` is its method).
"""

from __future__ import annotations

from typing import Annotated, Any, Final

import msgspec

from wf.wire.bounds import (
    Cursor,
    Id,
    Instant,
    Name,
    NonNegI64,
    Positive64,
    Text,
    check_json_value,
)
from wf.wire.methods import MethodSpec
from wf.wire.paging import PAGE_LIMIT_DEFAULT, Limit
from wf.wire.run_views import RunPage, RunView
from wf.wire.views import View
from wf.wire.workflow import Artifact, ArtifactPage, Deployment, DeploymentPage

RUN_COUNT_WINDOW_MAX_S: Final = 7 * 86_400.0
"""Longest window ``workflow.runs.counts`` counts over."""
RUN_COUNT_SCAN_MAX: Final = 10_000
"""Most runs ``workflow.runs.counts`` reads (the newest): its cost is bounded whatever
the store's size."""


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
    request_id: Id | None = None
    """The client's id for this request, so that it may be retried safely (after a
    lost answer or a server failover): a retry with the same deployment and inputs
    answers the run the first call started and starts nothing; the same id with
    another deployment or other inputs is ``already_exists`` naming that run.
    Unique per tenant (docs/workflows.md)."""

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
    newest_first: bool = False
    """List the newest runs first (the cursor then continues downwards)."""
    created_after: Instant | None = None
    """Only runs created at or after this instant (epoch seconds)."""
    created_before: Instant | None = None
    """Only runs created before this instant (epoch seconds)."""


class CountRunsParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``workflow.runs.counts``."""

    window_s: Annotated[float, msgspec.Meta(gt=0.0, le=RUN_COUNT_WINDOW_MAX_S)] = 3600.0
    """Count runs created within this many seconds before now."""


class RunCounts(View, frozen=True, kw_only=True):
    """Runs created in a recent window, by status (``workflow.runs.counts``)."""

    since: float
    """Start of the window (epoch seconds)."""
    until: float
    """The server's clock when counted."""
    by_status: dict[str, int]
    """Runs created within the window, by current status."""
    complete: bool
    """False when more than :data:`RUN_COUNT_SCAN_MAX` runs were created within the
    window: the counts then cover only the newest of them."""


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


# ------------------------------------------------------------- declarations

START_RUN: Final = MethodSpec(
    name="workflow.runs.start",
    python_name="start_run",
    params=StartRunParams,
    result=RunView,
    access="operate",
    summary="Start a run of a deployment; returns its view.",
)
INSPECT_RUN: Final = MethodSpec(
    name="workflow.runs.inspect",
    python_name="inspect_run",
    params=RunIdParams,
    result=RunView,
    access="read",
    summary="A run's status, inputs, per-node trace, output and checkpoint.",
)
LIST_RUNS: Final = MethodSpec(
    name="workflow.runs.list",
    python_name="list_runs",
    params=ListRunsParams,
    result=RunPage,
    access="read",
    summary="A page of runs, oldest first (or newest_first), with a next_cursor.",
)
COUNT_RUNS: Final = MethodSpec(
    name="workflow.runs.counts",
    python_name="count_runs",
    params=CountRunsParams,
    result=RunCounts,
    access="read",
    summary="Runs created in the last window_s seconds, by status.",
)
RESUME_RUN: Final = MethodSpec(
    name="workflow.runs.resume",
    python_name="resume_run",
    params=ResumeRunParams,
    result=RunView,
    access="operate",
    summary="Answer a run's interrupt node.",
)
CANCEL_RUN: Final = MethodSpec(
    name="workflow.runs.cancel",
    python_name="cancel_run",
    params=CancelRunParams,
    result=RunView,
    access="operate",
    summary="Cancel a run that has not stopped.",
)
CREATE_ARTIFACT: Final = MethodSpec(
    name="workflow.artifacts.create",
    python_name="create_artifact_from_plan",
    params=CreateArtifactParams,
    result=Artifact,
    access="operate",
    summary="Create an immutable artifact version from a plan (idempotent by content).",
)
GET_ARTIFACT: Final = MethodSpec(
    name="workflow.artifacts.get",
    python_name="get_artifact",
    params=GetArtifactParams,
    result=Artifact,
    access="read",
    summary="One artifact version (default: the highest).",
)
LIST_ARTIFACTS: Final = MethodSpec(
    name="workflow.artifacts.list",
    python_name="list_artifacts",
    params=ListArtifactsParams,
    result=ArtifactPage,
    access="read",
    summary="A page of artifact versions, by id then version, with a next_cursor.",
)
SAVE_DEPLOYMENT: Final = MethodSpec(
    name="workflow.deployments.save",
    python_name="save_deployment",
    params=SaveDeploymentParams,
    result=Deployment,
    access="operate",
    summary="Create or update a deployment (optimistic revision check).",
)
GET_DEPLOYMENT: Final = MethodSpec(
    name="workflow.deployments.get",
    python_name="get_deployment",
    params=DeploymentIdParams,
    result=Deployment,
    access="read",
    summary="One deployment.",
)
LIST_DEPLOYMENTS: Final = MethodSpec(
    name="workflow.deployments.list",
    python_name="list_deployments",
    params=ListDeploymentsParams,
    result=DeploymentPage,
    access="read",
    summary="A page of the deployments the caller may see, by id, with a next_cursor.",
)

METHODS: Final[tuple[MethodSpec[Any], ...]] = (
    START_RUN,
    INSPECT_RUN,
    LIST_RUNS,
    COUNT_RUNS,
    RESUME_RUN,
    CANCEL_RUN,
    CREATE_ARTIFACT,
    GET_ARTIFACT,
    LIST_ARTIFACTS,
    SAVE_DEPLOYMENT,
    GET_DEPLOYMENT,
    LIST_DEPLOYMENTS,
)
"""Every ``workflow.*`` method but ``workflow.schedules.*``."""
