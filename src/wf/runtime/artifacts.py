"""Artifacts: immutable, versioned plans.

An artifact version is created once and never changes: ``(artifact_id,
version)`` names exactly one plan, identified by its content hash. Creating
the same version again with the same plan (same hash) is a no-op that returns
the stored artifact; with another plan it is :class:`~wf.errors.AlreadyExists`.
Runs and deployments pin a version, so what a run executes never moves under
it.

:class:`Artifact` itself is declared in the wire contract (:mod:`wf.wire.workflow`)
and re-exported here.
"""

from __future__ import annotations

from wf.errors import CorruptRecord, InvalidArgument
from wf.runtime.plan import Plan, canonical_plan, check_id, content_hash, decode_canonical
from wf.runtime.stored import decode_body
from wf.store.protocol import ArtifactRow
from wf.wire.workflow import VERSION_MAX as VERSION_MAX
from wf.wire.workflow import Artifact as Artifact


def check_version(version: object) -> int:
    """``version`` if it is a valid artifact version, else InvalidArgument."""
    if type(version) is not int or not 1 <= version <= VERSION_MAX:
        raise InvalidArgument(
            f"an artifact version is an integer in 1..{VERSION_MAX}, got {version!r}",
            field="version",
        )
    return version


def artifact_row(artifact_id: str, version: int, plan: Plan, created_at: float) -> ArtifactRow:
    """The store row of a new artifact version (ids and version checked)."""
    check_id(artifact_id, "artifact id", field="artifact_id")
    check_version(version)
    return ArtifactRow(
        artifact_id=artifact_id,
        version=version,
        plan=canonical_plan(plan),
        content_hash=content_hash(plan),
        created_at=created_at,
    )


def artifact_from_row(row: ArtifactRow) -> Artifact:
    """The artifact a store row holds; a plan whose bytes do not match the stored hash,
    or do not decode, is :class:`~wf.errors.CorruptRecord` (fail closed)."""
    key = f"{row.artifact_id}@{row.version}"
    plan = decode_body(decode_canonical, row.plan, "artifacts", key, "plan")
    if content_hash(plan) != row.content_hash:
        raise CorruptRecord(
            f"artifact {key}: stored plan does not match its content hash",
            table="artifacts",
            key=key,
        )
    return Artifact(
        artifact_id=row.artifact_id,
        version=row.version,
        plan=plan,
        content_hash=row.content_hash,
        created_at=row.created_at,
    )
