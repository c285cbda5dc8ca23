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

from wf.errors import CorruptRecord
from wf.scheduler.model import Activity, ActivityState, WorkerStatus
from wf.scheduler.outputs import Transition
from wf.store import codec
from wf.store.protocol import (
    ArtifactRow,
    DeploymentRow,
    Diagnostic,
    OccurrenceRow,
    RunRow,
    ScheduleRow,
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


def submission_from_row(row: Row) -> Activity | None:
    """An activity's submission as accepted, from ``(activity_id, spec)`` (``None``
    if the blob does not decode or names another id: nobody can match it)."""
    activity_id, spec = row
    if isinstance(spec, memoryview):
        spec = spec.tobytes()
    try:
        submission = codec.activity_decoder.decode(spec)
    except _DECODE_ERRORS:
        return None
    return submission if submission.activity_id == activity_id else None


def worker_from_row(row: Row) -> StoredWorker | Diagnostic:
    worker_id, seq, info, status, registered_at, updated_at = row
    try:
        decoded = codec.worker_info_decoder.decode(info)
        worker_status = WorkerStatus(status)
        if decoded.worker_id != worker_id:
            raise ValueError(f"info names worker {decoded.worker_id!r}")
    except _DECODE_ERRORS as exc:
        return _malformed("workers", worker_id, "cannot decode", exc, None)
    return StoredWorker(
        info=decoded,
        seq=seq,
        status=worker_status,
        registered_at=registered_at,
        updated_at=updated_at,
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
     steals, token, worker_id, lease_expires_at, not_before, error, result) = row  # fmt: skip
    if isinstance(result, memoryview):
        result = result.tobytes()
    if result is not None and type(result) is not bytes:
        raise CorruptRecord(
            f"transition of activity {activity_id!r} has a {type(result).__name__} result",
            activity_id=activity_id,
        )
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
            result=result,
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
    # SQLite columns are dynamically typed: a non-integer counter is behind, not a crash.
    if type(value) is int and type(observed) is int and value >= observed:
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


# ------------------------------------------------------------------- runs


def run_from_row(row: Sequence[Any]) -> RunRow:
    """``select_run*`` columns to a :class:`RunRow` (mistyped: CorruptRecord); a query
    that also selects ``request_id`` (``select_run_by_request``) has it last."""
    (run_id, seq, deployment_id, tenant, status, schedule_id, body, revision,
     created_at, updated_at) = row[:10]  # fmt: skip
    request_id = row[10] if len(row) > 10 else None
    if isinstance(body, memoryview):
        body = body.tobytes()
    if not (
        type(run_id) is str
        and type(seq) is int
        and type(deployment_id) is str
        and type(tenant) is str
        and type(status) is str
        and (schedule_id is None or type(schedule_id) is str)
        and type(body) is bytes
        and type(revision) is int
        and type(created_at) is float
        and type(updated_at) is float
        and (request_id is None or type(request_id) is str)
    ):
        raise CorruptRecord(
            f"runs row {run_id!r} has mistyped columns", table="runs", key=str(run_id)
        )
    return RunRow(
        request_id=request_id,
        run_id=run_id,
        seq=seq,
        deployment_id=deployment_id,
        tenant=tenant,
        status=status,
        schedule_id=schedule_id,
        body=body,
        revision=revision,
        created_at=created_at,
        updated_at=updated_at,
    )


# -------------------------------------------------------------- schedules

SCHEDULE_STATUSES: Final = ("active", "paused", "deleted")
"""Schedule statuses (the ``schedules.status`` CHECK lists the same)."""
OCCURRENCE_STATUSES: Final = (
    "admitted",
    "coalesced",
    "superseded",
    "skipped-overlap",
    "skipped-misfire",
    "preflight-rejected",
)
"""Occurrence statuses (the ``occurrences.status`` CHECK lists the same)."""


def schedule_from_row(row: Sequence[Any]) -> ScheduleRow:
    """``select_schedule*`` columns to a :class:`ScheduleRow` (mistyped: CorruptRecord)."""
    (schedule_id, tenant, deployment_id, status, body, revision, created_at,
     updated_at) = row  # fmt: skip
    if isinstance(body, memoryview):
        body = body.tobytes()
    if not (
        type(schedule_id) is str
        and type(tenant) is str
        and type(deployment_id) is str
        and type(status) is str
        and type(body) is bytes
        and type(revision) is int
        and type(created_at) is float
        and type(updated_at) is float
    ):
        raise CorruptRecord(
            f"schedules row {schedule_id!r} has mistyped columns",
            table="schedules",
            key=str(schedule_id),
        )
    return ScheduleRow(
        schedule_id=schedule_id,
        tenant=tenant,
        deployment_id=deployment_id,
        status=status,
        body=body,
        revision=revision,
        created_at=created_at,
        updated_at=updated_at,
    )


def occurrence_from_row(row: Sequence[Any]) -> OccurrenceRow:
    """``select_occurrences`` columns to an :class:`OccurrenceRow` (mistyped: CorruptRecord)."""
    schedule_id, instant, status, run_id, detail, recorded_at = row
    if not (
        type(schedule_id) is str
        and type(instant) is float
        and type(status) is str
        and (run_id is None or type(run_id) is str)
        and (detail is None or type(detail) is str)
        and type(recorded_at) is float
    ):
        raise CorruptRecord(
            f"occurrences row {schedule_id!r} at {instant!r} has mistyped columns",
            table="occurrences",
            key=f"{schedule_id}@{instant}",
        )
    return OccurrenceRow(
        schedule_id=schedule_id,
        instant=instant,
        status=status,
        run_id=run_id,
        detail=detail,
        recorded_at=recorded_at,
    )
