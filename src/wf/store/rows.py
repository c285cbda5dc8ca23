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

import math
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeAlias, TypeVar

import msgspec

from wf.errors import AlreadyExists, Conflict, CorruptRecord, Internal, InvalidArgument, NotFound
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


# ------------------------------------------------------------------- runs

RUN_FILTER_VALUES_MAX: Final = 1_000
"""Most statuses or tenants one ``list_runs`` call may filter by (one bound
parameter each)."""
_RUN_FILTERS_MARK: Final = "/* filters */"
"""Where ``select_runs`` takes its filters."""


def run_id_for(seq: int) -> str:
    """The id of run number ``seq``: ``run-`` and the number, at least six digits."""
    if seq < 1:
        raise Internal(f"run numbers start at 1, not {seq}")
    return f"run-{seq:06d}"


def numbered_run(row: RunRow, seq: int) -> RunRow:
    """``row`` as ``insert_run`` stores it: number ``seq``, its id, revision 1."""
    return msgspec.structs.replace(row, seq=seq, run_id=run_id_for(seq), revision=1)


def run_params(row: RunRow) -> dict[str, Any]:
    """``insert_run`` parameters (of a row from :func:`numbered_run`)."""
    return {
        "run_id": row.run_id,
        "seq": row.seq,
        "deployment_id": row.deployment_id,
        "tenant": row.tenant,
        "status": row.status,
        "schedule_id": row.schedule_id,
        "body": row.body,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    }


def run_update_params(row: RunRow, expected_revision: int) -> dict[str, Any]:
    """``update_run`` parameters: only the mutable columns and the key."""
    return {
        "run_id": row.run_id,
        "status": row.status,
        "body": row.body,
        "revision": row.revision,
        "updated_at": row.updated_at,
        "expected_revision": expected_revision,
    }


def check_run_revision(row: RunRow, expected_revision: int) -> None:
    """Refuse an ``update_run`` whose revisions do not follow (a caller bug); runs
    start at revision 1, so ``expected_revision`` is at least 1."""
    if expected_revision < 1 or row.revision != expected_revision + 1:
        raise InvalidArgument(
            f"run {row.run_id!r}: revision {row.revision} does not follow "
            f"expected revision {expected_revision}",
            run_id=row.run_id,
            field="revision",
        )


def run_revision_conflict(row: RunRow, expected: int, current: int) -> Conflict:
    """The refusal of a run update based on a stale revision."""
    return Conflict(
        f"run {row.run_id!r} is at revision {current}, not at the expected revision {expected}",
        run_id=row.run_id,
        expected_revision=expected,
        current_revision=current,
    )


def run_not_found(run_id: str) -> NotFound:
    """The refusal of an update to a run that does not exist."""
    return NotFound(f"run {run_id!r} does not exist", run_id=run_id)


def run_from_row(row: Sequence[Any]) -> RunRow:
    """``select_run*`` columns to a :class:`RunRow` (mistyped: CorruptRecord)."""
    (run_id, seq, deployment_id, tenant, status, schedule_id, body, revision,
     created_at, updated_at) = row  # fmt: skip
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
    ):
        raise CorruptRecord(
            f"runs row {run_id!r} has mistyped columns", table="runs", key=str(run_id)
        )
    return RunRow(
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


def list_runs_query(
    *,
    postgres: bool,
    after_seq: int,
    limit: int,
    deployment_id: str | None,
    schedule_id: str | None,
    statuses: Sequence[str] | None,
    tenants: Sequence[str] | None,
) -> tuple[str, dict[str, Any]] | None:
    """``select_runs`` narrowed by the given filters, and its parameters; ``None`` if
    an empty status or tenant list leaves nothing to match.

    The SQL added is fixed text per filter (a column test, one generated
    placeholder name per list item); every value is a bound parameter, so no
    input ever reaches the statement text.
    """
    if limit < 0:
        raise InvalidArgument(f"limit must not be negative, not {limit}", field="limit")
    mark = "%({})s".format if postgres else ":{}".format
    clauses: list[str] = []
    params: dict[str, Any] = {"after_seq": after_seq, "limit": limit}
    for column, value in (("deployment_id", deployment_id), ("schedule_id", schedule_id)):
        if value is not None:
            clauses.append(f"{column} = {mark(column)}")
            params[column] = value
    for column, field, values in (("status", "statuses", statuses), ("tenant", "tenants", tenants)):
        if values is None:
            continue
        if (
            isinstance(values, str)
            or len(values) > RUN_FILTER_VALUES_MAX
            or not all(type(v) is str for v in values)
        ):
            raise InvalidArgument(
                f"{column} filter must be a list of at most {RUN_FILTER_VALUES_MAX} strings",
                field=field,
            )
        if not values:
            return None
        names = [f"{column}_{i}" for i in range(len(values))]
        clauses.append(f"{column} IN ({', '.join(mark(n) for n in names)})")
        params.update(zip(names, values, strict=True))
    template = (codec.postgres_queries() if postgres else codec.queries())["select_runs"]
    if template.count(_RUN_FILTERS_MARK) != 1:
        raise Internal(f"select_runs must hold {_RUN_FILTERS_MARK!r} once")
    filters = "".join(f" AND {clause}" for clause in clauses)
    return template.replace(_RUN_FILTERS_MARK, filters), params


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


def check_schedule_revision(row: ScheduleRow, expected_revision: int) -> None:
    """Refuse a schedule write whose revisions do not follow or whose status is
    unknown (a caller bug)."""
    if expected_revision < 0 or row.revision != expected_revision + 1:
        raise InvalidArgument(
            f"schedule {row.schedule_id!r}: revision {row.revision} does not follow "
            f"expected revision {expected_revision}",
            schedule_id=row.schedule_id,
            field="revision",
        )
    if row.status not in SCHEDULE_STATUSES:
        raise InvalidArgument(
            f"schedule {row.schedule_id!r}: status {row.status!r} is not one of "
            f"{', '.join(SCHEDULE_STATUSES)}",
            schedule_id=row.schedule_id,
            field="status",
        )


def schedule_params(row: ScheduleRow) -> dict[str, Any]:
    """``insert_schedule`` parameters (the stored revision is 1)."""
    return {
        "schedule_id": row.schedule_id,
        "tenant": row.tenant,
        "deployment_id": row.deployment_id,
        "status": row.status,
        "body": row.body,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    }


def schedule_update_params(row: ScheduleRow, expected_revision: int) -> dict[str, Any]:
    """``update_schedule`` parameters: only the mutable columns and the key."""
    return {
        "schedule_id": row.schedule_id,
        "status": row.status,
        "body": row.body,
        "revision": row.revision,
        "updated_at": row.updated_at,
        "expected_revision": expected_revision,
    }


def schedule_exists(schedule_id: str) -> AlreadyExists:
    """The refusal of a create whose id is taken (ids are never reused)."""
    return AlreadyExists(
        f"schedule {schedule_id!r} already exists (schedule ids are never reused)",
        schedule_id=schedule_id,
    )


def schedule_not_found(schedule_id: str) -> NotFound:
    """The refusal of an update to a schedule that does not exist."""
    return NotFound(f"schedule {schedule_id!r} does not exist", schedule_id=schedule_id)


def schedule_revision_conflict(row: ScheduleRow, expected: int, current: int) -> Conflict:
    """The refusal of a schedule write based on a stale revision."""
    return Conflict(
        f"schedule {row.schedule_id!r} is at revision {current}, not at the expected "
        f"revision {expected}",
        schedule_id=row.schedule_id,
        expected_revision=expected,
        current_revision=current,
    )


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


def check_occurrences(
    schedule: ScheduleRow,
    expected_revision: int,
    occurrences: Sequence[OccurrenceRow],
    run: RunRow | None,
) -> RunRow | None:
    """Refuse a ``record_occurrences`` call that breaks its contract (a caller bug:
    :class:`~wf.errors.InvalidArgument`); returns the run to insert, its
    ``schedule_id`` set to the schedule's.

    The schedule must already exist (``expected_revision`` at least 1). Every
    occurrence belongs to ``schedule``, has a known status and a finite instant,
    and leaves ``run_id`` to the store. With a run exactly one occurrence is
    ``admitted`` (it gets the run's id); without one none is.
    """
    sid = schedule.schedule_id
    if expected_revision < 1:
        raise InvalidArgument(
            f"schedule {sid!r}: occurrences are recorded on an existing schedule "
            f"(expected revision {expected_revision})",
            schedule_id=sid,
            field="expected_revision",
        )
    check_schedule_revision(schedule, expected_revision)
    for occurrence in occurrences:
        problem = _occurrence_problem(sid, occurrence)
        if problem is not None:
            raise InvalidArgument(
                f"schedule {sid!r}: occurrence at {occurrence.instant!r} {problem}",
                schedule_id=sid,
                field="occurrences",
            )
    admitted = sum(o.status == "admitted" for o in occurrences)
    if admitted != (0 if run is None else 1):
        raise InvalidArgument(
            f"schedule {sid!r}: {admitted} admitted occurrences "
            + ("without a run (none may be)" if run is None else "with a run (one must be)"),
            schedule_id=sid,
            field="occurrences",
        )
    if run is None:
        return None
    if run.schedule_id not in (None, sid):
        raise InvalidArgument(
            f"schedule {sid!r}: its run names schedule {run.schedule_id!r}",
            schedule_id=sid,
            field="run",
        )
    return msgspec.structs.replace(run, schedule_id=sid)


def _occurrence_problem(schedule_id: str, occurrence: OccurrenceRow) -> str | None:
    """What is wrong with one occurrence handed to ``record_occurrences``, if anything."""
    instant: object = occurrence.instant
    if occurrence.schedule_id != schedule_id:
        return f"belongs to schedule {occurrence.schedule_id!r}"
    if occurrence.status not in OCCURRENCE_STATUSES:
        return f"has an unknown status {occurrence.status!r}"
    if type(instant) not in (int, float) or not math.isfinite(occurrence.instant):
        return "needs a finite instant"
    if occurrence.run_id is not None:
        return "names a run (the store fills run_id in)"
    return None


def occurrence_params(occurrence: OccurrenceRow, run: RunRow | None) -> dict[str, Any]:
    """``insert_occurrence`` parameters; the admitted occurrence takes ``run``'s id
    (``run`` as the store numbered it)."""
    return {
        "schedule_id": occurrence.schedule_id,
        "instant": float(occurrence.instant),
        "status": occurrence.status,
        "run_id": run.run_id if run is not None and occurrence.status == "admitted" else None,
        "detail": occurrence.detail,
        "recorded_at": occurrence.recorded_at,
    }


def occurrence_exists(occurrence: OccurrenceRow) -> AlreadyExists:
    """The refusal of an occurrence recorded twice (``(schedule_id, instant)`` is unique)."""
    return AlreadyExists(
        f"schedule {occurrence.schedule_id!r} already has an occurrence at {occurrence.instant!r}",
        schedule_id=occurrence.schedule_id,
        instant=occurrence.instant,
    )


def occurrence_page_params(
    schedule_id: str, after_instant: float | None, limit: int
) -> dict[str, Any]:
    """``select_occurrences`` parameters (no ``after_instant``: from the first one)."""
    if limit < 0:
        raise InvalidArgument(f"limit must not be negative, not {limit}", field="limit")
    if after_instant is not None and math.isnan(after_instant):
        raise InvalidArgument("after_instant must be a number, not NaN", field="after_instant")
    return {
        "schedule_id": schedule_id,
        "after_instant": -math.inf if after_instant is None else float(after_instant),
        "limit": limit,
    }


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
