"""Deployments: a pinned artifact version plus how its runs are started.

A deployment's id is ``<artifact_id>.<name>`` (``scheduled_hello.default``),
so it names its artifact. It pins one artifact *version*: publishing a new
version changes nothing until the deployment is saved again with it. Its
``default_inputs`` are checked against the pinned plan's ``input_schema``
when saved, except for the schema's top-level ``required`` list, since a run
may supply the rest; a run's merged inputs are checked in full when it
starts.

Saves are optimistic: every save raises ``revision`` by one, and a save that
names an ``expected_revision`` other than the stored one is
:class:`~wf.errors.Conflict` (the caller re-reads and retries).

:class:`Deployment` itself is declared in the wire contract (:mod:`wf.wire.workflow`)
and re-exported here.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Final

import msgspec

from wf.errors import CorruptRecord, InvalidArgument
from wf.runtime.plan import check_id
from wf.runtime.stored import decode_body
from wf.scheduler.model import Priority
from wf.store.protocol import DeploymentRow
from wf.wire.workflow import Deployment as Deployment

MAX_STEPS_MAX: Final = 1_000_000
"""Largest ``max_steps`` budget."""
RUN_DEADLINE_MAX_S: Final = 366 * 86_400.0
"""Longest run deadline: a year, in seconds."""
TENANT_MAX: Final = 128
"""Longest tenant name."""


class DeploymentSpec(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, forbid_unknown_fields=True
):
    """What a caller saves (the body of ``save_deployment``)."""

    artifact_id: str
    """The artifact deployed."""
    artifact_version: int
    """The pinned version (must exist)."""
    name: str = "default"
    """Deployment name; the id is ``<artifact_id>.<name>``."""
    deployment_id: str | None = None
    """Optional; when given it must equal ``<artifact_id>.<name>``."""
    default_inputs: dict[str, Any] = msgspec.field(default_factory=dict)
    """Inputs a run gets unless it names them itself."""
    tenant: Annotated[str, msgspec.Meta(min_length=1, max_length=TENANT_MAX)] = "default"
    """Tenant its runs' activities belong to."""
    priority: Priority = Priority.NORMAL
    """Default priority of its activities (a node may override it)."""
    policy: str | None = None
    """Scheduling policy group of its activities (``None``: the server's default)."""
    max_steps: int | None = None
    """Most node executions one run may take (``None``: unbounded)."""
    run_deadline_s: float | None = None
    """Seconds a run may take from its start (``None``: no deadline)."""


_spec_fields: Final = frozenset(DeploymentSpec.__struct_fields__)
_body_decoder: Final = msgspec.json.Decoder(Deployment)
_encoder: Final = msgspec.json.Encoder(order="sorted")


def deployment_id_of(artifact_id: str, name: str) -> str:
    """``<artifact_id>.<name>``."""
    return f"{artifact_id}.{name}"


def spec_from_body(body: object) -> DeploymentSpec:
    """Decode and check a ``save_deployment`` body (not yet the inputs: see the API)."""
    if isinstance(body, DeploymentSpec):
        spec = body
    else:
        if not isinstance(body, dict):
            raise InvalidArgument(
                f"a deployment is an object, not {type(body).__name__}", field="body"
            )
        unknown = sorted(set(body) - _spec_fields)
        if unknown:
            raise InvalidArgument(
                f"unknown deployment field(s) {unknown}; known: {sorted(_spec_fields)}",
                field=unknown[0],
            )
        try:
            spec = msgspec.convert(body, DeploymentSpec, strict=True)
        except msgspec.ValidationError as exc:
            raise InvalidArgument(f"invalid deployment: {exc}", field=_field_of(exc)) from None
    check_id(spec.artifact_id, "artifact id", field="artifact_id")
    check_id(spec.name, "deployment name", field="name")
    expected = deployment_id_of(spec.artifact_id, spec.name)
    if spec.deployment_id is not None and spec.deployment_id != expected:
        raise InvalidArgument(
            f"deployment_id {spec.deployment_id!r} must be <artifact_id>.<name> = {expected!r}",
            field="deployment_id",
        )
    if spec.max_steps is not None and not 1 <= spec.max_steps <= MAX_STEPS_MAX:
        raise InvalidArgument(
            f"max_steps must be in 1..{MAX_STEPS_MAX} or null, got {spec.max_steps}",
            field="max_steps",
        )
    deadline = spec.run_deadline_s
    if deadline is not None and not (
        math.isfinite(deadline) and 0 < deadline <= RUN_DEADLINE_MAX_S
    ):
        raise InvalidArgument(
            f"run_deadline_s must be positive, finite and at most {RUN_DEADLINE_MAX_S:.0f}, "
            f"got {deadline!r}",
            field="run_deadline_s",
        )
    return spec


def _field_of(exc: msgspec.ValidationError) -> str | None:
    text = str(exc)
    marker = "at `$."
    if marker not in text:
        return None
    return text.split(marker, 1)[1].split("`", 1)[0].split("[", 1)[0].split(".", 1)[0]


def build(spec: DeploymentSpec, *, created_at: float, now: float, revision: int) -> Deployment:
    """The deployment a checked spec describes, at ``revision``."""
    return Deployment(
        deployment_id=deployment_id_of(spec.artifact_id, spec.name),
        artifact_id=spec.artifact_id,
        artifact_version=spec.artifact_version,
        name=spec.name,
        default_inputs=spec.default_inputs,
        tenant=spec.tenant,
        priority=spec.priority,
        policy=spec.policy,
        max_steps=spec.max_steps,
        run_deadline_s=spec.run_deadline_s,
        created_at=created_at,
        updated_at=now,
        revision=revision,
    )


def same_settings(a: Deployment, b: Deployment) -> bool:
    """Whether two deployments differ only in bookkeeping (times, revision)."""
    keep = {"created_at": 0.0, "updated_at": 0.0, "revision": 0}
    return msgspec.structs.replace(a, **keep) == msgspec.structs.replace(b, **keep)


def deployment_row(deployment: Deployment) -> DeploymentRow:
    """The store row of a deployment."""
    return DeploymentRow(
        deployment_id=deployment.deployment_id,
        body=_encoder.encode(deployment),
        revision=deployment.revision,
        updated_at=deployment.updated_at,
    )


def deployment_from_row(row: DeploymentRow) -> Deployment:
    """The deployment a store row holds (undecodable or contradictory: CorruptRecord)."""
    deployment = decode_body(_body_decoder.decode, row.body, "deployments", row.deployment_id)
    if deployment.deployment_id != row.deployment_id or deployment.revision != row.revision:
        raise CorruptRecord(
            f"deployment {row.deployment_id!r}: body names {deployment.deployment_id!r} "
            f"revision {deployment.revision}, row revision {row.revision}",
            table="deployments",
            key=row.deployment_id,
        )
    return deployment
