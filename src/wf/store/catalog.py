"""Every catalog operation, written once, as a transaction body that does no I/O.

Theory of operation
-------------------
The catalog (artifacts, deployments, runs, schedules, occurrences; see
:class:`~wf.store.protocol.Catalog`) is the same algorithm on every backend:
an idempotent insert compared by content hash, a compare-and-set on a
revision, a run numbered from a counter inside the transaction that stores
it, a schedule, its occurrences and the run they admit stored together. Each
operation here is a function that checks its arguments at once (a caller bug
is refused before any transaction begins, so nothing changes) and returns a
*transaction body* (:data:`~wf.store.query.Body`): a generator that yields the
named queries it needs and is sent their rows. The body decides; it never
touches a connection, a thread or an event loop, the way h11 keeps its
protocol free of sockets.

A backend only *drives* bodies (``_run_write`` and ``_run_read`` in
:mod:`wf.store.sqlite` and :mod:`wf.store.postgres`; the port's methods that
hand each body to them are :class:`wf.store.driven_catalog.DrivenCatalog`): it runs every query a
body yields on one connection inside one transaction, and an error the body
raises (:class:`~wf.errors.Conflict`, :class:`~wf.errors.NotFound`, ...)
rolls that transaction back. SQLite drives writes on its writer thread's
connection, between group commits; PostgreSQL on the writer's session behind
the write fence. Both stores therefore refuse, number and compare exactly
alike, and ``tests/store/test_catalog_bodies.py`` holds each body to its
queries with a scripted driver.

A *read* body yields exactly one query (PostgreSQL runs it on a pooled
session in autocommit: one statement is its own consistent snapshot), then
decodes the rows with :mod:`wf.store.rows`. The activity-history reads that
both ports share (:class:`~wf.store.protocol.History`) are written here the
same way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar

import msgspec

from wf.errors import AlreadyExists, Conflict, CorruptRecord, Internal, InvalidArgument, NotFound
from wf.scheduler.model import Activity
from wf.scheduler.outputs import Transition
from wf.store import pages, rows
from wf.store.protocol import ArtifactRow, DeploymentRow, OccurrenceRow, RunRow, ScheduleRow
from wf.store.query import Body, Query, Row, done

_T = TypeVar("_T")

RUN_FILTER_VALUES_MAX: Final = 1_000
"""Most statuses or tenants one ``list_runs`` call may filter by (one bound
parameter each)."""


# -------------------------------------------------------------- artifacts


def put_artifact(row: ArtifactRow) -> Body[ArtifactRow]:
    """Store an artifact version, idempotent by content: the same content again returns
    the *stored* row; other content is :class:`~wf.errors.AlreadyExists`."""
    inserted = yield Query("insert_artifact", _artifact_params(row))
    if inserted.rowcount == 1:
        return row
    key = {"artifact_id": row.artifact_id, "version": row.version}
    found = (yield Query("select_artifact", key)).one()
    if found is None:  # the conflicting row is visible inside the same transaction
        raise Internal("artifact insert conflicted but no row was found")
    existing = rows.artifact_from_row(found)
    if existing.content_hash != row.content_hash:
        raise AlreadyExists(
            f"artifact {row.artifact_id!r} version {row.version} already exists with other "
            f"content ({existing.content_hash}, not {row.content_hash})",
            artifact_id=row.artifact_id,
            version=row.version,
            content_hash=existing.content_hash,
        )
    return existing


def get_artifact(artifact_id: str, version: int | None) -> Body[ArtifactRow | None]:
    """One artifact version (``None``: the highest), or ``None``."""
    if version is None:
        query = Query("select_latest_artifact", {"artifact_id": artifact_id})
    else:
        query = Query("select_artifact", {"artifact_id": artifact_id, "version": version})
    found = (yield query).one()
    return None if found is None else rows.artifact_from_row(found)


def list_artifacts(artifact_id: str | None) -> Body[list[ArtifactRow]]:
    """Every version of ``artifact_id`` (or of every artifact), by id then version."""
    if artifact_id is None:
        query = Query("select_artifacts")
    else:
        query = Query("select_artifact_versions", {"artifact_id": artifact_id})
    return [rows.artifact_from_row(r) for r in (yield query).rows]


def artifacts_page(
    *, after: tuple[str, int] | None, artifact_id: str | None, limit: int
) -> Body[list[ArtifactRow]]:
    """A keyset page of artifact versions (page arguments checked at once)."""
    return _decoded(
        pages.artifacts_page(after=after, artifact_id=artifact_id, limit=limit),
        rows.artifact_from_row,
    )


# ------------------------------------------------------------ deployments


def put_deployment(row: DeploymentRow, expected_revision: int) -> Body[None]:
    """Store a deployment's next revision if it is still at ``expected_revision`` (0:
    create); a stale revision is :class:`~wf.errors.Conflict`. Revisions that do not
    follow are refused at once (:class:`~wf.errors.InvalidArgument`)."""
    if expected_revision < 0 or row.revision != expected_revision + 1:
        raise InvalidArgument(
            f"deployment {row.deployment_id!r}: revision {row.revision} does not follow "
            f"expected revision {expected_revision}",
            deployment_id=row.deployment_id,
            field="revision",
        )
    return _put_deployment(row, expected_revision)


def _put_deployment(row: DeploymentRow, expected_revision: int) -> Body[None]:
    params: dict[str, Any] = {
        "deployment_id": row.deployment_id,
        "body": row.body,
        "revision": row.revision,
        "updated_at": row.updated_at,
    }
    if expected_revision == 0:
        query = Query("insert_deployment", params)
    else:
        query = Query("update_deployment", {**params, "expected_revision": expected_revision})
    if (yield query).rowcount == 1:
        return
    key = {"deployment_id": row.deployment_id}
    found = (yield Query("select_deployment_revision", key)).one()
    raise revision_conflict(row, expected_revision, 0 if found is None else int(found[0]))


def revision_conflict(row: DeploymentRow, expected: int, current: int) -> Conflict:
    """The refusal of a deployment save based on a stale revision (0: none stored)."""
    what = "does not exist" if current == 0 else f"is at revision {current}"
    return Conflict(
        f"deployment {row.deployment_id!r} {what}, not at the expected revision {expected}",
        deployment_id=row.deployment_id,
        expected_revision=expected,
        current_revision=current,
    )


def get_deployment(deployment_id: str) -> Body[DeploymentRow | None]:
    """One deployment, or ``None``."""
    found = (yield Query("select_deployment", {"deployment_id": deployment_id})).one()
    return None if found is None else rows.deployment_from_row(found)


def list_deployments() -> Body[list[DeploymentRow]]:
    """Every deployment, by id."""
    return [rows.deployment_from_row(r) for r in (yield Query("select_deployments")).rows]


def deployments_page(*, after: str, limit: int) -> Body[list[DeploymentRow]]:
    """A keyset page of deployments (page arguments checked at once)."""
    return _decoded(pages.deployments_page(after=after, limit=limit), rows.deployment_from_row)


# ------------------------------------------------------------------- runs


def run_id_for(seq: int) -> str:
    """The id of run number ``seq``: ``run-`` and the number, at least six digits."""
    if seq < 1:
        raise Internal(f"run numbers start at 1, not {seq}")
    return f"run-{seq:06d}"


def insert_run(row: RunRow) -> Body[RunRow]:
    """Store a new run under the next ``run_seq`` number; returns it numbered, at
    revision 1. The counter is raised in the insert's own transaction, so it moves
    with the insert or not at all (a number is never handed out twice). A
    ``request_id`` its tenant already used is :class:`~wf.errors.AlreadyExists`
    naming that run, decided by the database's unique key in this transaction (the
    refusal rolls the counter back with everything else)."""
    found = (yield Query("next_run_seq")).one()
    if found is None or type(found[0]) is not int:
        raise CorruptRecord(
            f"counter 'run_seq' is {'missing' if found is None else repr(found[0])}",
            table="counters",
            key="run_seq",
        )
    seq = found[0]
    stored = msgspec.structs.replace(row, seq=seq, run_id=run_id_for(seq), revision=1)
    params = {
        "run_id": stored.run_id,
        "seq": stored.seq,
        "deployment_id": stored.deployment_id,
        "tenant": stored.tenant,
        "status": stored.status,
        "schedule_id": stored.schedule_id,
        "body": stored.body,
        "created_at": stored.created_at,
        "updated_at": stored.updated_at,
    }
    if stored.request_id is None:
        yield Query("insert_run", params)
        return stored
    params["request_id"] = stored.request_id
    if (yield Query("insert_requested_run", params)).rowcount == 1:
        return stored
    key = {"tenant": stored.tenant, "request_id": stored.request_id}
    taken = (yield Query("select_run_by_request", key)).one()
    if taken is None:
        # Nothing else may conflict: run_id and seq come from the counter just raised.
        raise CorruptRecord(
            f"run {stored.run_id!r} could not be inserted: the 'run_seq' counter is "
            "behind the stored runs",
            table="counters",
            key="run_seq",
        )
    raise request_taken(stored.request_id, str(taken[0]))


def request_taken(request_id: str, run_id: str) -> AlreadyExists:
    """The refusal of a request id already used for run ``run_id``."""
    return AlreadyExists(
        f"request id {request_id!r} already started run {run_id!r}",
        request_id=request_id,
        run_id=run_id,
    )


def run_for_request(tenant: str, request_id: str) -> Body[RunRow | None]:
    """The run ``tenant``'s ``request_id`` started, or ``None``."""
    key = {"tenant": tenant, "request_id": request_id}
    found = (yield Query("select_run_by_request", key)).one()
    return None if found is None else rows.run_from_row(found)


def update_run(row: RunRow, expected_revision: int) -> Body[None]:
    """Store a run's next revision if it is still at ``expected_revision``: a stale one
    is :class:`~wf.errors.Conflict`, an unknown run :class:`~wf.errors.NotFound`.
    Revisions that do not follow are refused at once (runs start at revision 1)."""
    if expected_revision < 1 or row.revision != expected_revision + 1:
        raise InvalidArgument(
            f"run {row.run_id!r}: revision {row.revision} does not follow "
            f"expected revision {expected_revision}",
            run_id=row.run_id,
            field="revision",
        )
    return _update_run(row, expected_revision)


def _update_run(row: RunRow, expected_revision: int) -> Body[None]:
    # Only the mutable columns move; the rest of a run is fixed when it is inserted.
    params = {
        "run_id": row.run_id,
        "status": row.status,
        "body": row.body,
        "revision": row.revision,
        "updated_at": row.updated_at,
        "expected_revision": expected_revision,
    }
    if (yield Query("update_run", params)).rowcount == 1:
        return
    found = (yield Query("select_run_revision", {"run_id": row.run_id})).one()
    if found is None:
        raise NotFound(f"run {row.run_id!r} does not exist", run_id=row.run_id)
    current = int(found[0])
    raise Conflict(
        f"run {row.run_id!r} is at revision {current}, not at the expected revision "
        f"{expected_revision}",
        run_id=row.run_id,
        expected_revision=expected_revision,
        current_revision=current,
    )


def get_run(run_id: str) -> Body[RunRow | None]:
    """One run, or ``None``."""
    found = (yield Query("select_run", {"run_id": run_id})).one()
    return None if found is None else rows.run_from_row(found)


def list_runs(
    *,
    after_seq: int,
    limit: int,
    deployment_id: str | None,
    schedule_id: str | None,
    statuses: Sequence[str] | None,
    tenants: Sequence[str] | None,
    before_seq: int | None = None,
    created_after: float | None = None,
    created_before: float | None = None,
) -> Body[list[RunRow]]:
    """Up to ``limit`` runs after ``after_seq`` matching every given filter, oldest
    first; with ``before_seq``, runs below it, newest first (``after_seq`` is then
    unused). ``created_after`` (inclusive) and ``created_before`` (exclusive) bound
    the creation instant. An empty status or tenant list matches nothing (no query
    at all).

    The filters are fixed column tests with one generated placeholder per list
    item; every value is a bound parameter, so no input reaches the statement."""
    if limit < 0:
        raise InvalidArgument(f"limit must not be negative, not {limit}", field="limit")
    filters: list[str] = []
    params: dict[str, Any] = {"limit": limit}
    if before_seq is None:
        query_name = "select_runs"
        params["after_seq"] = after_seq
    else:
        query_name = "select_runs_newest"
        params["before_seq"] = before_seq
    for test, key, instant in (
        ("created_at >= :created_after", "created_after", created_after),
        ("created_at < :created_before", "created_before", created_before),
    ):
        if instant is not None:
            filters.append(test)
            params[key] = float(instant)
    for column, value in (("deployment_id", deployment_id), ("schedule_id", schedule_id)):
        if value is not None:
            filters.append(f"{column} = :{column}")
            params[column] = value
    for column, name, values in (("status", "statuses", statuses), ("tenant", "tenants", tenants)):
        if values is None:
            continue
        if (
            isinstance(values, str)
            or len(values) > RUN_FILTER_VALUES_MAX
            or not all(type(v) is str for v in values)
        ):
            raise InvalidArgument(
                f"{column} filter must be a list of at most {RUN_FILTER_VALUES_MAX} strings",
                field=name,
            )
        if not values:
            return done([])
        marks = [f"{column}_{i}" for i in range(len(values))]
        filters.append(f"{column} IN ({', '.join(f':{m}' for m in marks)})")
        params.update(zip(marks, values, strict=True))
    return _decoded(Query(query_name, params, tuple(filters)), rows.run_from_row)


def recent_run_statuses(
    *, limit: int, tenants: Sequence[str] | None
) -> Body[list[tuple[str, float]]]:
    """``(status, created_at)`` of the newest ``limit`` runs (of ``tenants`` when
    given), newest first: a bounded scan of the seq index, whatever the store's size.
    An empty tenant list matches nothing (no query at all)."""
    if limit < 0:
        raise InvalidArgument(f"limit must not be negative, not {limit}", field="limit")
    params: dict[str, Any] = {"limit": limit}
    filters: tuple[str, ...] = ()
    if tenants is not None:
        if len(tenants) > RUN_FILTER_VALUES_MAX or not all(type(t) is str for t in tenants):
            raise InvalidArgument(
                f"tenant filter must be a list of at most {RUN_FILTER_VALUES_MAX} strings",
                field="tenants",
            )
        if not tenants:
            return done([])
        marks = [f"tenant_{i}" for i in range(len(tenants))]
        filters = (f"tenant IN ({', '.join(f':{m}' for m in marks)})",)
        params.update(zip(marks, tenants, strict=True))
    return _decoded(Query("select_recent_run_statuses", params, filters), _status_and_instant)


def _status_and_instant(row: Row) -> tuple[str, float]:
    return str(row[0]), float(row[1])


def live_runs() -> Body[list[RunRow]]:
    """Every run whose status is live (``RUN_LIVE_STATUSES``), oldest first."""
    return [rows.run_from_row(r) for r in (yield Query("select_live_runs")).rows]


# -------------------------------------------------------------- schedules


def _check_schedule(row: ScheduleRow, expected_revision: int) -> None:
    """Refuse a schedule write whose revisions do not follow or whose status is
    unknown (a caller bug)."""
    if expected_revision < 0 or row.revision != expected_revision + 1:
        raise InvalidArgument(
            f"schedule {row.schedule_id!r}: revision {row.revision} does not follow "
            f"expected revision {expected_revision}",
            schedule_id=row.schedule_id,
            field="revision",
        )
    if row.status not in rows.SCHEDULE_STATUSES:
        raise InvalidArgument(
            f"schedule {row.schedule_id!r}: status {row.status!r} is not one of "
            f"{', '.join(rows.SCHEDULE_STATUSES)}",
            schedule_id=row.schedule_id,
            field="status",
        )


def put_schedule(row: ScheduleRow, expected_revision: int) -> Body[None]:
    """Create (``expected_revision`` 0; an id ever used is
    :class:`~wf.errors.AlreadyExists`) or update a schedule under optimistic
    concurrency (stale: :class:`~wf.errors.Conflict`, unknown:
    :class:`~wf.errors.NotFound`)."""
    _check_schedule(row, expected_revision)
    if expected_revision == 0:
        return _insert_schedule(row)
    return _update_schedule(row, expected_revision)


def _insert_schedule(row: ScheduleRow) -> Body[None]:
    params = {
        "schedule_id": row.schedule_id,
        "tenant": row.tenant,
        "deployment_id": row.deployment_id,
        "status": row.status,
        "body": row.body,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    }
    if (yield Query("insert_schedule", params)).rowcount != 1:
        raise AlreadyExists(
            f"schedule {row.schedule_id!r} already exists (schedule ids are never reused)",
            schedule_id=row.schedule_id,
        )


def _update_schedule(row: ScheduleRow, expected_revision: int) -> Body[None]:
    """A schedule's compare-and-set inside the caller's transaction; why it matched
    nothing is NotFound or Conflict. On PostgreSQL the row stays locked until commit,
    so a concurrent writer of the same schedule waits, then finds the revision moved."""
    params = {
        "schedule_id": row.schedule_id,
        "status": row.status,
        "body": row.body,
        "revision": row.revision,
        "updated_at": row.updated_at,
        "expected_revision": expected_revision,
    }
    if (yield Query("update_schedule", params)).rowcount == 1:
        return
    key = {"schedule_id": row.schedule_id}
    found = (yield Query("select_schedule_revision", key)).one()
    if found is None:
        raise NotFound(f"schedule {row.schedule_id!r} does not exist", schedule_id=row.schedule_id)
    current = int(found[0])
    raise Conflict(
        f"schedule {row.schedule_id!r} is at revision {current}, not at the expected "
        f"revision {expected_revision}",
        schedule_id=row.schedule_id,
        expected_revision=expected_revision,
        current_revision=current,
    )


def get_schedule(schedule_id: str) -> Body[ScheduleRow | None]:
    """One schedule (deleted ones included), or ``None``."""
    found = (yield Query("select_schedule", {"schedule_id": schedule_id})).one()
    return None if found is None else rows.schedule_from_row(found)


def list_schedules(include_deleted: bool) -> Body[list[ScheduleRow]]:
    """Every schedule by id (deleted ones only when asked)."""
    name = "select_all_schedules" if include_deleted else "select_schedules"
    return [rows.schedule_from_row(r) for r in (yield Query(name)).rows]


def schedules_page(
    *, after: str, limit: int, include_deleted: bool, tenants: Sequence[str] | None
) -> Body[list[ScheduleRow]]:
    """A keyset page of schedules, filtered in the statement (page arguments checked at
    once; an empty tenant list matches nothing, with no query at all)."""
    query = pages.schedules_page(
        after=after, limit=limit, include_deleted=include_deleted, tenants=tenants
    )
    if query is None:
        return done([])
    return _decoded(query, rows.schedule_from_row)


# ------------------------------------------------------------ occurrences


def record_occurrences(
    schedule: ScheduleRow,
    expected_revision: int,
    occurrences: Sequence[OccurrenceRow],
    run: RunRow | None,
) -> Body[RunRow | None]:
    """Update the schedule, insert the occurrences and (optionally) the run they admit,
    in the caller's one transaction; returns the stored run. A call that breaks the
    contract (:meth:`~wf.store.protocol.Catalog.record_occurrences`) is refused at
    once; an occurrence recorded before is :class:`~wf.errors.AlreadyExists`."""
    to_insert = _check_occurrences(schedule, expected_revision, occurrences, run)
    return _record_occurrences(schedule, expected_revision, tuple(occurrences), to_insert)


def _record_occurrences(
    schedule: ScheduleRow,
    expected_revision: int,
    occurrences: tuple[OccurrenceRow, ...],
    run: RunRow | None,
) -> Body[RunRow | None]:
    yield from _update_schedule(schedule, expected_revision)
    stored = None if run is None else (yield from insert_run(run))
    for occurrence in occurrences:
        params = {
            "schedule_id": occurrence.schedule_id,
            "instant": float(occurrence.instant),
            "status": occurrence.status,
            # The admitted occurrence takes the id the store just gave the run.
            "run_id": (
                stored.run_id if stored is not None and occurrence.status == "admitted" else None
            ),
            "detail": occurrence.detail,
            "recorded_at": occurrence.recorded_at,
        }
        if (yield Query("insert_occurrence", params)).rowcount != 1:
            raise AlreadyExists(
                f"schedule {occurrence.schedule_id!r} already has an occurrence at "
                f"{occurrence.instant!r}",
                schedule_id=occurrence.schedule_id,
                instant=occurrence.instant,
            )
    return stored


def _check_occurrences(
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
    _check_schedule(schedule, expected_revision)
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
    if occurrence.status not in rows.OCCURRENCE_STATUSES:
        return f"has an unknown status {occurrence.status!r}"
    if type(instant) not in (int, float) or not math.isfinite(occurrence.instant):
        return "needs a finite instant"
    if occurrence.run_id is not None:
        return "names a run (the store fills run_id in)"
    return None


def list_occurrences(
    schedule_id: str, *, after_instant: float | None, limit: int
) -> Body[list[OccurrenceRow]]:
    """Up to ``limit`` occurrences of a schedule after ``after_instant`` (``None``: from
    the first), oldest first."""
    if limit < 0:
        raise InvalidArgument(f"limit must not be negative, not {limit}", field="limit")
    if after_instant is not None and math.isnan(after_instant):
        raise InvalidArgument("after_instant must be a number, not NaN", field="after_instant")
    params = {
        "schedule_id": schedule_id,
        "after_instant": -math.inf if after_instant is None else float(after_instant),
        "limit": limit,
    }
    return _decoded(Query("select_occurrences", params), rows.occurrence_from_row)


# ------------------------------------- activity history (both ports read it)


def history(activity_id: str) -> Body[list[Transition]]:
    """The activity's transitions, oldest first."""
    found = yield Query("select_history", {"activity_id": activity_id})
    return [rows.transition_from_row(r) for r in found.rows]


def heartbeat_details(activity_id: str) -> Body[bytes | None]:
    """The latest heartbeat details any attempt of the activity sent (``None``: none,
    or no such activity); a mistyped value is CorruptRecord."""
    found = yield Query("select_heartbeat_details", {"activity_id": activity_id})
    if not found.rows:
        return None
    (details,) = found.rows[0]
    if isinstance(details, memoryview):
        details = details.tobytes()
    if details is not None and type(details) is not bytes:
        raise CorruptRecord(
            f"activity {activity_id!r} has {type(details).__name__} heartbeat details",
            activity_id=activity_id,
        )
    return details


def history_page(activity_id: str, *, after: int, limit: int) -> Body[list[tuple[int, Transition]]]:
    """A keyset page of the activity's transitions, each with its position (page
    arguments checked at once)."""
    query = pages.history_page(activity_id=activity_id, after=after, limit=limit)
    return _decoded(query, pages.positioned_transition)


SPECS_PER_QUERY_MAX: Final = 500
"""Most ids one ``submitted_activities`` body asks for (one bound parameter each)."""


def submitted_activities(ids: Sequence[str]) -> Body[dict[str, Activity]]:
    """The stored submissions of ``ids`` (at most :data:`SPECS_PER_QUERY_MAX`), by id;
    one whose blob does not decode is left out."""
    unique = list(dict.fromkeys(ids))
    if len(unique) > SPECS_PER_QUERY_MAX or not all(type(i) is str for i in unique):
        raise InvalidArgument(
            f"submitted_activities takes at most {SPECS_PER_QUERY_MAX} ids a query",
            field="ids",
        )
    if not unique:
        return done({})
    marks = [f"id_{i}" for i in range(len(unique))]
    query = Query(
        "select_activity_specs",
        dict(zip(marks, unique, strict=True)),
        (f"activity_id IN ({', '.join(f':{m}' for m in marks)})",),
    )
    return _submissions(query)


def _submissions(query: Query) -> Body[dict[str, Activity]]:
    found: dict[str, Activity] = {}
    for r in (yield query).rows:
        submission = rows.submission_from_row(r)
        if submission is not None:
            found[submission.activity_id] = submission
    return found


# ---------------------------------------------------------------- helpers


def _decoded(query: Query, decode: Callable[[Row], _T]) -> Body[list[_T]]:
    """The read body of one query whose every row ``decode`` turns into a value."""
    return [decode(r) for r in (yield query).rows]


def _artifact_params(row: ArtifactRow) -> dict[str, Any]:
    return {
        "artifact_id": row.artifact_id,
        "version": row.version,
        "plan": row.plan,
        "content_hash": row.content_hash,
        "created_at": row.created_at,
    }
