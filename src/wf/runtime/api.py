"""The workflow runtime's Python API: artifacts and deployments (runs come next).

Theory of operation
-------------------
:class:`WorkflowAPI` is the one entry point the server's JSON-RPC methods
(``workflow.artifacts.*``, ``workflow.deployments.*``, registered by
:mod:`wf.server.workflow_rpc`) and the local server's ``server.api`` call.
Every call validates completely before it touches the store, so bad input
never changes state; the store then enforces what validation cannot see
from one process: an artifact version is unique by primary key with a
content-hash comparison in the same transaction, and a deployment save is
applied only at the revision it was based on.

Access: artifacts are a shared catalog (any ``operate`` caller may create,
any ``read`` caller may read). Deployments belong to a tenant: a
tenant-scoped caller may save only deployments of its tenants
(:class:`~wf.errors.Forbidden` otherwise) and sees only those (another
tenant's deployment answers :class:`~wf.errors.NotFound`, like an absent one).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Protocol

from wf.clock import Clock
from wf.errors import Forbidden, InvalidArgument, NotFound, UnknownPolicy
from wf.runtime import deployments as dep
from wf.runtime.artifacts import Artifact, artifact_from_row, artifact_row, check_version
from wf.runtime.plan import Plan, check_id, plan_from_builtins
from wf.runtime.schema import instance_problems
from wf.store import rows
from wf.store.protocol import Store


class Scope(Protocol):
    """What the runtime needs to know of a caller (``wf.server.rpc.Caller`` is one)."""

    @property
    def tenants(self) -> frozenset[str] | None:
        """Tenants it may act for (``None``: all)."""
        ...


class WorkflowAPI:
    """Artifacts and deployments over one store (see the module docstring).

    Usable once the store is open (the server opens it when it starts).
    """

    def __init__(
        self, store: Store, clock: Clock, *, policies: Collection[str] | None = None
    ) -> None:
        self.store = store
        self.clock = clock
        self.policies = None if policies is None else frozenset(policies)
        """Known scheduling policy groups (``None``: any name is accepted)."""

    # ------------------------------------------------------------- artifacts

    async def create_artifact_from_plan(
        self, artifact_id: str, version: int, plan: Plan | dict[str, Any], *, caller: Scope
    ) -> Artifact:
        """Create artifact ``artifact_id`` at ``version`` holding ``plan``.

        Idempotent: the same plan again returns the stored artifact unchanged.
        Raises :class:`~wf.errors.InvalidArgument` for a bad id, version or plan
        (details name ``node`` and ``field``) and :class:`~wf.errors.AlreadyExists`
        when the version exists with another plan.
        """
        check_id(artifact_id, "artifact id", field="artifact_id")
        check_version(version)
        checked = plan_from_builtins(plan)
        row = artifact_row(artifact_id, version, checked, self.clock.now())
        return artifact_from_row(await self.store.put_artifact(row))

    async def get_artifact(
        self, artifact_id: str, version: int | None = None, *, caller: Scope
    ) -> Artifact:
        """One artifact version (``None``: the highest); NotFound if absent."""
        if version is not None:
            check_version(version)
        row = await self.store.get_artifact(artifact_id, version)
        if row is None:
            which = "any version" if version is None else f"version {version}"
            raise NotFound(
                f"artifact {artifact_id!r} has no {which}",
                artifact_id=artifact_id,
                version=version,
            )
        return artifact_from_row(row)

    async def list_artifacts(
        self, artifact_id: str | None = None, *, caller: Scope
    ) -> list[Artifact]:
        """Every version of ``artifact_id`` (or of every artifact), by id then version."""
        return [artifact_from_row(r) for r in await self.store.list_artifacts(artifact_id)]

    # ----------------------------------------------------------- deployments

    async def save_deployment(
        self, body: dict[str, Any], expected_revision: int | None = None, *, caller: Scope
    ) -> dep.Deployment:
        """Create or update the deployment ``body`` describes; returns it as saved.

        ``body`` holds the fields of :class:`~wf.runtime.deployments.DeploymentSpec`.
        ``expected_revision`` is the revision the change is based on (0: must not
        exist yet); ``None`` takes the revision read now, so only a concurrent
        save in between conflicts. Saving the very same settings again changes
        nothing (the revision stays). Raises :class:`~wf.errors.InvalidArgument`
        (bad body or default inputs), :class:`~wf.errors.NotFound` (pinned
        version missing), :class:`~wf.errors.UnknownPolicy`,
        :class:`~wf.errors.Forbidden` (another tenant) and
        :class:`~wf.errors.Conflict` (stale revision).
        """
        spec = dep.spec_from_body(body)
        if expected_revision is not None and expected_revision < 0:
            raise InvalidArgument(
                "expected_revision must not be negative", field="expected_revision"
            )
        _require_tenant(caller, spec.tenant)
        known = self.policies
        if spec.policy is not None and known is not None and spec.policy not in known:
            raise UnknownPolicy(
                f"policy group {spec.policy!r} is not configured (known: {sorted(known)})",
                field="policy",
                policy=spec.policy,
            )
        artifact = await self.store.get_artifact(spec.artifact_id, spec.artifact_version)
        if artifact is None:
            raise NotFound(
                f"artifact {spec.artifact_id!r} version {spec.artifact_version} does not "
                "exist; create it before deploying it",
                artifact_id=spec.artifact_id,
                version=spec.artifact_version,
            )
        plan = artifact_from_row(artifact).plan
        problems = instance_problems(
            plan.input_schema, spec.default_inputs, ignore_top_required=True
        )
        if problems:
            raise InvalidArgument(
                f"default_inputs do not match the input schema of {spec.artifact_id} "
                f"v{spec.artifact_version}: {'; '.join(problems)}",
                field="default_inputs",
                problems=problems,
            )
        deployment_id = dep.deployment_id_of(spec.artifact_id, spec.name)
        stored = await self.store.get_deployment(deployment_id)
        current = None if stored is None else dep.deployment_from_row(stored)
        if current is not None:
            _require_tenant(caller, current.tenant)
        base = 0 if current is None else current.revision
        now = self.clock.now()
        saved = dep.build(
            spec,
            created_at=now if current is None else current.created_at,
            now=now,
            revision=base + 1,
        )
        if expected_revision is not None and expected_revision != base:
            raise rows.revision_conflict(dep.deployment_row(saved), expected_revision, base)
        if current is not None and dep.same_settings(current, saved):
            return current
        await self.store.put_deployment(dep.deployment_row(saved), expected_revision=base)
        return saved

    async def get_deployment(self, deployment_id: str, *, caller: Scope) -> dep.Deployment:
        """One deployment; NotFound if absent or of a tenant the caller may not see."""
        row = await self.store.get_deployment(deployment_id)
        found = None if row is None else dep.deployment_from_row(row)
        if found is None or (caller.tenants is not None and found.tenant not in caller.tenants):
            raise NotFound(
                f"deployment {deployment_id!r} does not exist", deployment_id=deployment_id
            )
        return found

    async def list_deployments(self, *, caller: Scope) -> list[dep.Deployment]:
        """Every deployment the caller may see, by id."""
        found = [dep.deployment_from_row(r) for r in await self.store.list_deployments()]
        if caller.tenants is None:
            return found
        return [d for d in found if d.tenant in caller.tenants]


def _require_tenant(caller: Scope, tenant: str) -> None:
    if caller.tenants is not None and tenant not in caller.tenants:
        raise Forbidden(f"this credential may not act for tenant {tenant!r}", tenant=tenant)
