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

import functools
import typing
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
_R = TypeVar("_R", bound=msgspec.Struct)


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
     steals, token, worker_id, lease_expires_at, not_before, error, result,
     stack_trace) = row  # fmt: skip
    if isinstance(result, memoryview):
        result = result.tobytes()
    if result is not None and type(result) is not bytes:
        raise CorruptRecord(
            f"transition of activity {activity_id!r} has a {type(result).__name__} result",
            activity_id=activity_id,
        )
    if stack_trace is not None and type(stack_trace) is not str:
        raise CorruptRecord(
            f"transition of activity {activity_id!r} has a {type(stack_trace).__name__} trace",
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
            stack_trace=stack_trace,
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


def catalog_row(kind: type[_R], table: str, row: Sequence[Any], key_columns: int = 1) -> _R:
    """``row``'s columns (in the order of ``kind``'s fields; absent trailing ones take
    their defaults; extra ones are ignored) as a ``kind``.

    A blob column PostgreSQL reads as a memoryview becomes bytes. A column whose type
    is not its field's (SQLite is dynamically typed) raises
    :class:`~wf.errors.CorruptRecord`, keyed by the first ``key_columns`` columns.
    """
    values: dict[str, Any] = {}
    for (name, allowed), value in zip(_fields(kind), row, strict=False):
        if type(value) is memoryview:
            value = value.tobytes()
        if type(value) not in allowed:
            key = "@".join(map(str, row[:key_columns]))
            raise CorruptRecord(
                f"{table} row {key!r} has a mistyped {name} column ({type(value).__name__})",
                table=table,
                key=key,
            )
        values[name] = value
    return kind(**values)


@functools.cache
def _fields(kind: type[msgspec.Struct]) -> tuple[tuple[str, tuple[type, ...]], ...]:
    """Each field's name and the exact types its column may hold (a union's members)."""
    return tuple(
        (f.name, typing.get_args(f.type) or (f.type,)) for f in msgspec.structs.fields(kind)
    )


def artifact_from_row(row: Sequence[Any]) -> ArtifactRow:
    """``select_artifact*`` columns to an :class:`ArtifactRow` (see :func:`catalog_row`)."""
    return catalog_row(ArtifactRow, "artifacts", row, key_columns=2)


def deployment_from_row(row: Sequence[Any]) -> DeploymentRow:
    """``select_deployment*`` columns to a :class:`DeploymentRow` (see :func:`catalog_row`)."""
    return catalog_row(DeploymentRow, "deployments", row)


# ------------------------------------------------------------------- runs


def run_from_row(row: Sequence[Any]) -> RunRow:
    """``select_run*`` columns to a :class:`RunRow` (see :func:`catalog_row`); a query
    that also selects ``request_id`` (``select_run_by_request``) has it last."""
    return catalog_row(RunRow, "runs", row)


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
    """``select_schedule*`` columns to a :class:`ScheduleRow` (see :func:`catalog_row`)."""
    return catalog_row(ScheduleRow, "schedules", row)


def occurrence_from_row(row: Sequence[Any]) -> OccurrenceRow:
    """``select_occurrences`` columns to an :class:`OccurrenceRow` (see :func:`catalog_row`)."""
    return catalog_row(OccurrenceRow, "occurrences", row, key_columns=2)
