"""Stored rows to values and integrity-check rows to diagnostics, for every backend.

Theory of operation
-------------------
Both backends run the same named queries (``sql/queries.sql``), so a row has
the same columns in the same order whichever database produced it; this module
is the one place that turns them back into the core's types. An activity is
its submission blob (msgpack, decoded and type-checked by msgspec) with the
lifecycle columns applied on top. A row that fails to decode, names a state
that does not exist, or whose blob names another id becomes a
``malformed_row`` :class:`~wf.store.protocol.Diagnostic` instead of a value:
the caller leaves it out (fail closed) and reports it.

:data:`CHECKS` maps each ``check_*`` query to the diagnostic its rows mean.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final, TypeAlias, TypeVar

import msgspec

from wf.errors import AlreadyExists, Conflict, CorruptRecord, InvalidArgument
from wf.scheduler.model import Activity, ActivityState, WorkerStatus
from wf.scheduler.outputs import Transition
from wf.store import codec
from wf.store.protocol import (
    ArtifactRow,
    DeploymentRow,
    Diagnostic,
    StoredCron,
    StoredWorker,
)

Row: TypeAlias = tuple[Any, ...]
"""One result row, columns in the order of its named query."""
_T = TypeVar("_T")


_DECODE_ERRORS: Final = (msgspec.DecodeError, ValueError, TypeError)


def _malformed(
    table: str, key: str, what: str, exc: Exception, activity_id: str | None
) -> Diagnostic:
    return Diagnostic(
        kind="malformed_row",
        table=table,
        key=key,
        message=f"{table} row {key!r}: {what}: {exc}; left out (blocked)",
        activity_id=activity_id,
    )


def activity_from_row(row: Row) -> Activity | Diagnostic:
    """An activity from its submission blob with the lifecycle columns applied."""
    (activity_id, seq, spec, state, attempt, failures, infra_requeues, steals, token,
     worker_id, lease_expires_at, not_before, queued_at, last_error, submitted_at,
     ) = row  # fmt: skip
    try:
        submission = codec.activity_decoder.decode(spec)
        lifecycle_state = ActivityState(state)
        if submission.activity_id != activity_id or submission.seq != seq:
            raise ValueError(
                f"spec names activity {submission.activity_id!r} seq {submission.seq}, "
                f"row seq {seq}"
            )
    except _DECODE_ERRORS as exc:
        return _malformed("activities", activity_id, "cannot decode", exc, activity_id)
    return msgspec.structs.replace(
        submission,
        state=lifecycle_state,
        attempt=attempt,
        failures=failures,
        infra_requeues=infra_requeues,
        steals=steals,
        token=token,
        worker_id=worker_id,
        lease_expires_at=lease_expires_at,
        not_before=not_before,
        queued_at=queued_at,
        last_error=last_error,
        submitted_at=submitted_at,
    )


def worker_from_row(row: Row) -> StoredWorker | Diagnostic:
    worker_id, seq, info, status, registered_at = row
    try:
        decoded = codec.worker_info_decoder.decode(info)
        worker_status = WorkerStatus(status)
        if decoded.worker_id != worker_id:
            raise ValueError(f"info names worker {decoded.worker_id!r}")
    except _DECODE_ERRORS as exc:
        return _malformed("workers", worker_id, "cannot decode", exc, None)
    return StoredWorker(info=decoded, seq=seq, status=worker_status, registered_at=registered_at)


def cron_from_row(row: Row) -> StoredCron | Diagnostic:
    cron_id, expression, timezone, next_fire_at, template = row
    try:
        decoded = codec.activity_decoder.decode(template)
    except _DECODE_ERRORS as exc:
        return _malformed("crons", cron_id, "cannot decode template", exc, None)
    return StoredCron(
        cron_id=cron_id,
        expression=expression,
        timezone=timezone,
        next_fire_at=next_fire_at,
        template=decoded,
    )


COUNTERS: Final = ("seq", "token", "worker_seq")
"""The counters a store keeps (rows of ``counters``)."""


def counters_from_rows(rows: list[Row], diagnostics: list[Diagnostic]) -> dict[str, int]:
    """Every counter; a missing or non-integer one reads 0 and is reported."""
    found = {str(name): value for name, value in rows}
    counters: dict[str, int] = {}
    for name in COUNTERS:
        value = found.get(name)
        if type(value) is not int:
            diagnostics.append(
                _malformed("counters", name, "bad counter", ValueError(repr(value)), None)
            )
            value = 0
        counters[name] = value
    return counters


def decode_all(
    rows: list[Row], decode: Callable[[Row], _T | Diagnostic], diagnostics: list[Diagnostic]
) -> list[_T]:
    """Decoded rows; malformed ones go to ``diagnostics`` instead."""
    values: list[_T] = []
    for row in rows:
        value = decode(row)
        if isinstance(value, Diagnostic):
            diagnostics.append(value)
        else:
            values.append(value)
    return values


def transition_from_row(row: Row) -> Transition:
    (activity_id, at, from_state, to_state, reason, attempt, failures, infra_requeues,
     steals, token, worker_id, lease_expires_at, not_before, error) = row  # fmt: skip
    try:
        return Transition(
            at=at,
            activity_id=activity_id,
            from_state=ActivityState(from_state),
            to_state=ActivityState(to_state),
            reason=reason,
            attempt=attempt,
            failures=failures,
            infra_requeues=infra_requeues,
            steals=steals,
            token=token,
            worker_id=worker_id,
            lease_expires_at=lease_expires_at,
            not_before=not_before,
            error=error,
        )
    except ValueError as exc:
        raise CorruptRecord(
            f"transition of activity {activity_id!r} has an unknown state: {exc}",
            activity_id=activity_id,
        ) from exc


# -- integrity checks: named query -> diagnostic per row ------------------------------


def _orphan_transition(row: Row) -> Diagnostic:
    transition_id, activity_id = row
    return Diagnostic(
        kind="unknown_activity",
        table="transitions",
        key=str(transition_id),
        message=f"transition {transition_id} names activity {activity_id!r}, which does not exist",
        activity_id=activity_id,
    )


def _unknown_holder(row: Row) -> Diagnostic:
    activity_id, worker_id = row
    return Diagnostic(
        kind="unknown_worker",
        table="activities",
        key=activity_id,
        message=(
            f"activity {activity_id!r} is held by worker {worker_id!r}, which is not registered"
        ),
        activity_id=activity_id,
    )


def _held_without_worker(row: Row) -> Diagnostic:
    activity_id, state = row
    return Diagnostic(
        kind="state_mismatch",
        table="activities",
        key=activity_id,
        message=f"activity {activity_id!r} is {state} but has no worker or no fencing token",
        activity_id=activity_id,
    )


def _last_transition_mismatch(row: Row) -> Diagnostic:
    activity_id, state, last = row
    return Diagnostic(
        kind="state_mismatch",
        table="activities",
        key=activity_id,
        message=f"activity {activity_id!r} is {state} but its last transition went to {last}",
        activity_id=activity_id,
    )


def _counter_behind(row: Row) -> Diagnostic | None:
    name, value, observed = row
    if value is not None and value >= observed:
        return None
    return Diagnostic(
        kind="counter_behind",
        table="counters",
        key=name,
        message=f"counter {name!r} is {value}, behind the highest stored value {observed}",
    )


def _lifecycle_without_lease(row: Row) -> Diagnostic:
    aid, state = row[0], row[1]
    return Diagnostic(
        kind="state_mismatch",
        table="activities",
        key=str(aid),
        message=(
            f"activity {aid!r} ({state}) has lease-driven columns set "
            "but was never leased (token 0)"
        ),
        activity_id=str(aid),
    )


CHECKS: Final[tuple[tuple[str, Callable[[Row], Diagnostic | None]], ...]] = (
    ("check_orphan_transitions", _orphan_transition),
    ("check_unknown_lease_holders", _unknown_holder),
    ("check_held_without_worker", _held_without_worker),
    ("check_last_transition_mismatch", _last_transition_mismatch),
    ("check_counters_behind", _counter_behind),
    ("check_lifecycle_without_lease", _lifecycle_without_lease),
)


# -------------------------------------------------------- runtime catalog


def artifact_from_row(row: Sequence[Any]) -> ArtifactRow:
    """``select_artifact*`` columns to an :class:`ArtifactRow`; a mistyped column
    (SQLite is dynamically typed) raises :class:`~wf.errors.CorruptRecord`."""
    artifact_id, version, plan, content_hash, created_at = row
    if isinstance(plan, memoryview):
        plan = plan.tobytes()
    if not (
        type(artifact_id) is str
        and type(version) is int
        and type(plan) is bytes
        and type(content_hash) is str
        and type(created_at) is float
    ):
        raise CorruptRecord(
            f"artifacts row {artifact_id!r} v{version!r} has mistyped columns",
            table="artifacts",
            key=f"{artifact_id}@{version}",
        )
    return ArtifactRow(
        artifact_id=artifact_id,
        version=version,
        plan=plan,
        content_hash=content_hash,
        created_at=created_at,
    )


def deployment_from_row(row: Sequence[Any]) -> DeploymentRow:
    """``select_deployment*`` columns to a :class:`DeploymentRow` (mistyped: CorruptRecord)."""
    deployment_id, body, revision, updated_at = row
    if isinstance(body, memoryview):
        body = body.tobytes()
    if not (
        type(deployment_id) is str
        and type(body) is bytes
        and type(revision) is int
        and type(updated_at) is float
    ):
        raise CorruptRecord(
            f"deployments row {deployment_id!r} has mistyped columns",
            table="deployments",
            key=str(deployment_id),
        )
    return DeploymentRow(
        deployment_id=deployment_id, body=body, revision=revision, updated_at=updated_at
    )


def artifact_params(row: ArtifactRow) -> dict[str, Any]:
    """``insert_artifact`` parameters."""
    return {
        "artifact_id": row.artifact_id,
        "version": row.version,
        "plan": row.plan,
        "content_hash": row.content_hash,
        "created_at": row.created_at,
    }


def deployment_params(row: DeploymentRow, expected_revision: int) -> dict[str, Any]:
    """``insert_deployment`` / ``update_deployment`` parameters."""
    return {
        "deployment_id": row.deployment_id,
        "body": row.body,
        "revision": row.revision,
        "updated_at": row.updated_at,
        "expected_revision": expected_revision,
    }


def check_deployment_revision(row: DeploymentRow, expected_revision: int) -> None:
    """Refuse a ``put_deployment`` whose revisions do not follow (a caller bug)."""
    if expected_revision < 0 or row.revision != expected_revision + 1:
        raise InvalidArgument(
            f"deployment {row.deployment_id!r}: revision {row.revision} does not follow "
            f"expected revision {expected_revision}",
            deployment_id=row.deployment_id,
            field="revision",
        )


def artifact_exists_elsewise(existing: ArtifactRow, row: ArtifactRow) -> AlreadyExists:
    """The refusal of a version re-created with other content."""
    return AlreadyExists(
        f"artifact {row.artifact_id!r} version {row.version} already exists with other "
        f"content ({existing.content_hash}, not {row.content_hash})",
        artifact_id=row.artifact_id,
        version=row.version,
        content_hash=existing.content_hash,
    )


def revision_conflict(row: DeploymentRow, expected: int, current: int) -> Conflict:
    """The refusal of a deployment save based on a stale revision."""
    what = "does not exist" if current == 0 else f"is at revision {current}"
    return Conflict(
        f"deployment {row.deployment_id!r} {what}, not at the expected revision {expected}",
        deployment_id=row.deployment_id,
        expected_revision=expected,
        current_revision=current,
    )
