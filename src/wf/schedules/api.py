"""The schedule administration surface (``server.api.schedules``, ``workflow.schedules.*``).

Theory of operation
-------------------
:class:`ScheduleAPI` validates completely before it writes, so a refused call
changes nothing (004: "A bad edit is rejected without touching the running
definition"). Every change to a schedule happens under that schedule's lock,
which the admission service (:mod:`wf.schedules.service`) takes too, and is
written under the schedule's fence (the store row's compare-and-set
revision), so an edit and an admission never interleave. Edits (update,
pause, resume, delete) raise the ``revision`` callers pass back as
``expected_revision``; admissions raise only the fence, so a get-then-update
never races the scheduler. Edits consume time up to now (the watermark moves
to ``now``): they affect only future admissions. Pause,
resume and delete are idempotent. Dropping a held ``misfire="latest"``
candidate (pause, delete, an edit that leaves ``latest``) records it as
``superseded`` in the same transaction.

The API works whether or not the admission service runs (it is the store's
face); when one runs it is told of every change and reconsiders the schedule
at once.
"""

from __future__ import annotations

import asyncio
import base64
import functools
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

import msgspec

from wf.clock import Clock
from wf.errors import Conflict, CorruptRecord, Forbidden, InvalidArgument, NotFound
from wf.runtime.api import Scope, WorkflowAPI, check_request_id
from wf.runtime.deployments import MAX_STEPS_MAX
from wf.runtime.runs import Trigger as RunTrigger
from wf.runtime.runs import request_digest
from wf.schedules.admission import Occurrence, drop_candidate
from wf.schedules.model import (
    CronTrigger,
    OneShotTrigger,
    Schedule,
    check_schedule_id,
    next_instant_after,
    oneshot_instant,
    parse_trigger,
    schedule_from_row,
    schedule_row,
)
from wf.store.protocol import Catalog, OccurrenceRow, ScheduleRow
from wf.tenancy import require_namespace
from wf.wire.bounds import check_text
from wf.wire.paging import (
    PAGE_LIMIT_DEFAULT,
    check_limit,
    decode_cursor,
    encode_cursor,
    views_in_slices,
)
from wf.wire.run_views import RunView
from wf.wire.schedule_views import (
    CorruptScheduleView,
    OccurrencePage,
    OccurrenceView,
    PreviewInstant,
    SchedulePage,
    ScheduleView,
)

OCCURRENCES_LIMIT_MAX: Final = 100
"""Largest occurrence page."""
PREVIEW_MAX: Final = 100
"""Most instants :meth:`ScheduleAPI.preview_schedule` returns."""
MAX_ACTIVE_RUNS_MAX: Final = 10_000
"""Largest ``max_active_runs`` (far beyond any execution-slot bound)."""
NOTE_MAX: Final = 1_000
"""Longest note or pause reason."""
NEXT_INSTANT_CACHE_MAX: Final = 16_384
"""Next-instant answers :func:`schedule_view` remembers (a page walk of 10,000 schedules
views each once; later walks of unchanged schedules find every answer here)."""
MISFIRE_LATENESS_MAX_S: Final = 7 * 24 * 3600.0
"""Largest per-schedule misfire allowance (a week)."""
SCHEDULE_VIEW_STATUSES: Final = ("active", "paused", "finished", "blocked", "deleted")
"""What a schedule view's ``status`` says (and ``list_schedules(status=)`` filters by):
the stored ``active``/``paused``/``deleted``, plus ``finished`` (its trigger has no
further instant: a one-shot that was dealt with) and ``blocked`` (admission refused
because a record of it or of one of its runs is corrupt; ``blocked`` says why)."""
FILTER_SCAN_MAX: Final = 1_000
"""Most schedules one filtered ``list_schedules`` page examines (it may then hold
fewer than ``limit``, with a ``next_cursor`` to go on from)."""
_FILTER_BATCH: Final = 100
_UNSET: Final[Any] = None
_SCHEDULES: Final = "schedules"
"""Cursor kind of :meth:`ScheduleAPI.list_schedules`."""


class ScheduleAPI:
    """Create, read, edit, pause, resume and delete schedules; page occurrences."""

    def __init__(self, store: Catalog, workflow: WorkflowAPI, clock: Clock) -> None:
        self.store = store
        self.workflow = workflow
        self.clock = clock
        self.locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        """Per-schedule locks shared with the admission service."""
        self.listeners: list[Callable[[Schedule], None]] = []
        """Told of every stored change (the admission service listens)."""
        self.blocked: dict[str, str] = {}
        """Schedules the admission service refuses to admit, and why (the service
        fills it: :attr:`wf.schedules.service.ScheduleService.blocked` is this dict);
        the views say so."""

    # ------------------------------------------------------------- create

    async def create_schedule(
        self,
        schedule_id: str,
        deployment_id: str,
        trigger: dict[str, Any] | OneShotTrigger | CronTrigger,
        *,
        caller: Scope,
        inputs: dict[str, Any] | None = None,
        overlap: str = "skip",
        max_active_runs: int | None = None,
        misfire: str = "skip",
        max_steps: int | None = None,
        note: str | None = None,
        misfire_lateness_s: float | None = None,
    ) -> ScheduleView:
        """Create a schedule (caller-chosen id, never reused); returns its definition.

        Checks the id, the trigger (InvalidCronExpression, InvalidTimezone,
        NaiveDatetime, a one-shot instant in the past), the deployment (NotFound,
        Forbidden), the policies, and that a run admitted now would get valid
        inputs (the deployment's defaults overlaid with ``inputs``, checked
        against the pinned plan's input schema). AlreadyExists if the id was
        ever used. Creation never backfills: the watermark starts now.
        """
        check_schedule_id(schedule_id)
        now = self.clock.now()
        schedule = Schedule(
            schedule_id=schedule_id,
            deployment_id=deployment_id,
            tenant="",
            trigger=parse_trigger(trigger),
            inputs=_inputs(inputs),
            overlap=_choice(overlap, ("skip", "parallel"), "overlap"),  # type: ignore[arg-type]
            max_active_runs=max_active_runs,
            misfire=_choice(misfire, ("skip", "latest"), "misfire"),  # type: ignore[arg-type]
            max_steps=max_steps,
            misfire_lateness_s=_lateness(misfire_lateness_s),
            note=_note(note, "note"),
            revision=1,
            fence=1,
            created_at=now,
            updated_at=now,
            watermark=now,
        )
        _check_policies(schedule)
        _check_future(schedule, now)
        schedule.tenant = await self._preflight(schedule, caller)
        # Before the id is looked up: the answer never depends on other tenants' ids.
        require_namespace(
            schedule_id,
            schedule.tenant,
            caller.tenants,
            kind="schedule",
            field="schedule_id",
            separators=".-_",
        )
        await self.store.put_schedule(schedule_row(schedule), expected_revision=0)
        self._notify(schedule)
        return self.view(schedule)

    # --------------------------------------------------------------- read

    async def get_schedule(self, schedule_id: str, *, caller: Scope) -> ScheduleView:
        """The full definition, admission state and counters (deleted ones too)."""
        return self.view(await self.load(schedule_id, caller))

    def view(self, schedule: Schedule) -> ScheduleView:
        """:func:`schedule_view` with what the admission service knows (blocked), typed
        (the same keys, so it encodes to the same bytes)."""
        built = schedule_view(schedule, blocked=self.blocked.get(schedule.schedule_id))
        return msgspec.convert(built, ScheduleView)

    async def list_schedules(
        self,
        *,
        caller: Scope,
        include_deleted: bool = False,
        limit: int = PAGE_LIMIT_DEFAULT,
        cursor: str | None = None,
        status: str | None = None,
    ) -> SchedulePage:
        """One page of the visible schedules by id: ``schedules`` and ``next_cursor``.

        ``limit`` is 1-100; ``next_cursor`` is ``None`` on the last page (pass it
        back to get the next one). Deleted schedules only when asked. The store
        reads the page through its index with the tenant filter in the same
        statement, so a page costs ``limit`` rows however many schedules exist.
        A schedule whose record does not decode is listed as ``{"schedule_id",
        "corrupt", "status": "blocked"}``.

        ``status`` (one of :data:`SCHEDULE_VIEW_STATUSES`) lists only schedules in
        that state (``deleted`` implies ``include_deleted``). A filtered page examines
        at most :data:`FILTER_SCAN_MAX` schedules, so it may hold fewer than ``limit``
        (even none) with a ``next_cursor``: follow it until it is ``None``.
        """
        limit = check_limit(limit)
        after = "" if cursor is None else decode_cursor(cursor, _SCHEDULES, (str,))[0]
        if status is not None:
            _choice(status, SCHEDULE_VIEW_STATUSES, "status")
            return await self._filtered_page(
                status, after, limit, include_deleted or status == "deleted", caller
            )
        stored = await self.store.schedules_page(
            after=after,
            limit=limit + 1,
            include_deleted=include_deleted,
            tenants=None if caller.tenants is None else sorted(caller.tenants),
        )
        page = stored[:limit]
        views = await views_in_slices(page, self._listed_view)
        more = len(stored) > limit
        return SchedulePage(
            schedules=views,
            next_cursor=encode_cursor(_SCHEDULES, page[-1].schedule_id) if more else None,
        )

    async def _filtered_page(
        self, status: str, after: str, limit: int, include_deleted: bool, caller: Scope
    ) -> SchedulePage:
        """A page of the schedules whose view status is ``status`` (see list_schedules)."""
        views: list[ScheduleView] = []
        scanned = 0
        while True:
            stored = await self.store.schedules_page(
                after=after,
                limit=_FILTER_BATCH + 1,
                include_deleted=include_deleted,
                tenants=None if caller.tenants is None else sorted(caller.tenants),
            )
            batch = stored[:_FILTER_BATCH]
            more = len(stored) > _FILTER_BATCH
            batch_views = await views_in_slices(batch, self._listed_view)
            for i, (row, view) in enumerate(zip(batch, batch_views, strict=True)):
                after = row.schedule_id
                if view.status == status:
                    views.append(view)
                if len(views) == limit:
                    rest = more or i + 1 < len(batch)
                    return _page(views, after if rest else None)
            scanned += len(batch)
            if not more:
                return _page(views, None)
            if scanned >= FILTER_SCAN_MAX:
                return _page(views, after)

    def _listed_view(self, row: ScheduleRow) -> ScheduleView:
        try:
            return self.view(schedule_from_row(row))
        except CorruptRecord as exc:
            return CorruptScheduleView(
                schedule_id=row.schedule_id, corrupt=exc.message, status="blocked"
            )

    async def load(self, schedule_id: str, caller: Scope) -> Schedule:
        """A schedule the caller may see (NotFound otherwise; CorruptRecord if unreadable)."""
        row = await self.store.get_schedule(schedule_id)
        if row is None or (caller.tenants is not None and row.tenant not in caller.tenants):
            raise NotFound(f"schedule {schedule_id!r} does not exist", schedule_id=schedule_id)
        return schedule_from_row(row)

    # --------------------------------------------------------------- edit

    async def update_schedule(
        self,
        schedule_id: str,
        expected_revision: int,
        *,
        caller: Scope,
        deployment_id: str | None = _UNSET,
        trigger: dict[str, Any] | OneShotTrigger | CronTrigger | None = _UNSET,
        inputs: dict[str, Any] | None = _UNSET,
        overlap: str | None = _UNSET,
        max_active_runs: int | None = _UNSET,
        misfire: str | None = _UNSET,
        max_steps: int | None = _UNSET,
        note: str | None = _UNSET,
        misfire_lateness_s: float | None = _UNSET,
    ) -> ScheduleView:
        """Change the given fields (``None``: unchanged) at ``expected_revision``.

        Everything is checked as on create before anything is written; a stale
        revision is Conflict (with ``current_revision``). The edit affects only
        future admissions: time up to now is consumed. A deleted schedule cannot
        be edited (Conflict). ``max_steps`` cannot be cleared once set (004), nor can
        ``misfire_lateness_s`` (set it to the server's value instead). Admissions never
        move the revision, so a revision read by ``get_schedule`` stays valid until
        another edit. A new trigger makes a ``finished`` schedule active again.
        """
        async with self.locks[schedule_id]:
            current = await self._editable(schedule_id, caller)
            if expected_revision != current.revision:
                raise Conflict(
                    f"schedule {schedule_id!r} is at revision {current.revision}, not "
                    f"{expected_revision}",
                    schedule_id=schedule_id,
                    current_revision=current.revision,
                    expected_revision=expected_revision,
                )
            now = self.clock.now()
            edited = msgspec.structs.replace(current)
            if deployment_id is not None:
                edited.deployment_id = deployment_id
            if trigger is not None:
                edited.trigger = parse_trigger(trigger)
                _check_future(edited, now)
                edited.finished_at = None
            if inputs is not None:
                edited.inputs = _inputs(inputs)
            if overlap is not None:
                edited.overlap = _choice(overlap, ("skip", "parallel"), "overlap")  # type: ignore[assignment]
                if overlap == "skip" and max_active_runs is None:
                    edited.max_active_runs = None
            if max_active_runs is not None:
                edited.max_active_runs = max_active_runs
            if misfire is not None:
                edited.misfire = _choice(misfire, ("skip", "latest"), "misfire")  # type: ignore[assignment]
            if max_steps is not None:
                edited.max_steps = max_steps
            if note is not None:
                edited.note = _note(note, "note")
            if misfire_lateness_s is not None:
                edited.misfire_lateness_s = _lateness(misfire_lateness_s)
            _check_policies(edited)
            tenant = await self._preflight(edited, caller)
            if tenant != current.tenant:
                raise InvalidArgument(
                    f"deployment {edited.deployment_id!r} belongs to tenant {tenant!r}; a "
                    f"schedule stays with its tenant {current.tenant!r}",
                    field="deployment_id",
                )
            if edited == current:
                return self.view(current)  # nothing to change: no new revision
            edited.revision += 1
            edited.fence += 1
            edited.updated_at = now
            edited.watermark = max(edited.watermark, now)
            dropped = (
                drop_candidate(edited, "dropped by an edit") if edited.misfire != "latest" else []
            )
            await self._write(edited, current.fence, dropped)
            return self.view(edited)

    async def pause_schedule(
        self, schedule_id: str, *, caller: Scope, reason: str | None = None
    ) -> ScheduleView:
        """Stop future admission (an active run goes on); clears a held candidate.
        Idempotent: pausing a paused schedule changes nothing."""
        reason = _note(reason, "reason")
        async with self.locks[schedule_id]:
            current = await self._editable(schedule_id, caller)
            if current.paused:
                return self.view(current)
            now = self.clock.now()
            paused = msgspec.structs.replace(
                current,
                paused=True,
                paused_at=now,
                pause_reason=reason,
                revision=current.revision + 1,
                fence=current.fence + 1,
                updated_at=now,
            )
            await self._write(paused, current.fence, drop_candidate(paused, "dropped by pause"))
            return self.view(paused)

    async def resume_schedule(self, schedule_id: str, *, caller: Scope) -> ScheduleView:
        """Allow admission again from the next future instant: the paused span is
        consumed, never replayed. Idempotent."""
        async with self.locks[schedule_id]:
            current = await self._editable(schedule_id, caller)
            if not current.paused:
                return self.view(current)
            now = self.clock.now()
            resumed = msgspec.structs.replace(
                current,
                paused=False,
                paused_at=None,
                pause_reason=None,
                watermark=max(current.watermark, now),
                revision=current.revision + 1,
                fence=current.fence + 1,
                updated_at=now,
            )
            await self._write(resumed, current.fence, [])
            return self.view(resumed)

    async def delete_schedule(self, schedule_id: str, *, caller: Scope) -> ScheduleView:
        """Soft delete: no admission ever again; runs and occurrence history stay with
        the schedule's identity, and the id is never reused. Idempotent."""
        async with self.locks[schedule_id]:
            current = await self.load(schedule_id, caller)
            _require_tenant(caller, current.tenant)
            if current.deleted:
                return self.view(current)
            now = self.clock.now()
            deleted = msgspec.structs.replace(
                current,
                deleted=True,
                deleted_at=now,
                revision=current.revision + 1,
                fence=current.fence + 1,
                updated_at=now,
            )
            await self._write(deleted, current.fence, drop_candidate(deleted, "dropped by delete"))
            return self.view(deleted)

    # -------------------------------------------------------- occurrences

    async def list_schedule_occurrences(
        self,
        schedule_id: str,
        *,
        caller: Scope,
        limit: int = 50,
        cursor: str | None = None,
    ) -> OccurrencePage:
        """One page of occurrences, oldest first: ``occurrences`` and ``next_cursor``.

        On the first page a held (unadmitted) candidate is synthesized as a
        ``pending`` row at the top, within ``limit``; with ``limit=1`` the page
        is that row alone and ``next_cursor`` is an opaque marker that resumes
        the stored history from its first row. Admitted occurrences show their
        run's status.
        """
        if not isinstance(limit, int) or not 1 <= limit <= OCCURRENCES_LIMIT_MAX:
            raise InvalidArgument(
                f"limit must be 1-{OCCURRENCES_LIMIT_MAX}", field="limit", limit=limit
            )
        schedule = await self.load(schedule_id, caller)
        rows: list[dict[str, Any]] = []
        after: float | None = None
        if cursor is None:
            if schedule.candidate is not None:
                rows.append(_pending_view(schedule))
        else:
            after = _decode_cursor(cursor)
        room = limit - len(rows)
        if room == 0:
            return _occurrence_page(rows, _encode_cursor(None))
        stored = await self.store.list_occurrences(schedule_id, after_instant=after, limit=room + 1)
        for row in stored[:room]:
            rows.append(await self._occurrence_view(row))
        more = len(stored) > room
        return _occurrence_page(rows, _encode_cursor(stored[room - 1].instant) if more else None)

    async def preview_schedule(
        self, schedule_id: str, *, caller: Scope, count: int = 5
    ) -> list[PreviewInstant]:
        """The next ``count`` (1-100) instants the trigger yields after now (and after
        the watermark), as UTC and as wall time in the schedule's zone. A preview
        only: pause, overlap and misfire still apply when they come."""
        if not isinstance(count, int) or not 1 <= count <= PREVIEW_MAX:
            raise InvalidArgument(f"count must be 1-{PREVIEW_MAX}", field="count")
        schedule = await self.load(schedule_id, caller)
        found: list[PreviewInstant] = []
        t = next_instant_after(schedule.trigger, max(schedule.watermark, self.clock.now()))
        while t is not None and len(found) < count:
            found.append(msgspec.convert(instant_view(t, schedule), PreviewInstant))
            t = next_instant_after(schedule.trigger, t)
        return found

    async def trigger_schedule(
        self, schedule_id: str, *, caller: Scope, request_id: str | None = None
    ) -> RunView:
        """Start one manual run now through the schedule's bindings and budget.

        It is not an occurrence: it records none, is not limited by overlap or
        capacity, and does not count toward overlap (manual runs never do). The run's
        trigger is ``{"kind": "manual", "schedule_id": <this schedule>}``, so
        ``list_runs(schedule_id=...)`` finds it beside the scheduled runs.

        With a ``request_id`` the call may be retried safely: a retry on the same
        schedule answers the run the first call started (as it stands now) and
        starts nothing, even if the schedule was edited or deleted since; the same
        request id naming another schedule (or used by ``workflow.runs.start``) is
        AlreadyExists naming that run. Request ids are unique per tenant.
        """
        schedule = await self.load(schedule_id, caller)
        _require_tenant(caller, schedule.tenant)
        digest = None
        if request_id is not None:
            check_request_id(request_id)
            digest = request_digest("trigger", schedule_id)
            found = await self.workflow.requested_run(schedule.tenant, request_id, digest)
            if found is not None:
                return await self._triggered_view(found[0].run_id, schedule_id, caller)
        if schedule.deleted:
            raise Conflict(f"schedule {schedule_id!r} is deleted", schedule_id=schedule_id)
        run, plan = await self.workflow.prepare_run(
            schedule.deployment_id,
            schedule.inputs,
            caller=caller,
            max_steps=schedule.max_steps,
            # Linked to the schedule, but ``manual``: never an occurrence, never
            # counted for overlap or capacity (those look at ``kind == "schedule"``).
            trigger=RunTrigger(kind="manual", schedule_id=schedule_id, occurrence=None),
        )
        run.request_id, run.request_digest = request_id, digest
        started, _ = await self.workflow.start_prepared(run, plan)
        return await self._triggered_view(started.run_id, schedule_id, caller)

    async def _triggered_view(self, run_id: str, schedule_id: str, caller: Scope) -> RunView:
        view = await self.workflow.inspect_run(run_id, caller=caller)
        return msgspec.structs.replace(view, triggered_from=schedule_id)

    # ----------------------------------------------------------- internal

    async def _editable(self, schedule_id: str, caller: Scope) -> Schedule:
        """A schedule the caller may change (Forbidden: another tenant; Conflict: deleted)."""
        current = await self.load(schedule_id, caller)
        _require_tenant(caller, current.tenant)
        if current.deleted:
            raise Conflict(f"schedule {schedule_id!r} is deleted", schedule_id=schedule_id)
        return current

    async def _preflight(self, schedule: Schedule, caller: Scope) -> str:
        """Check deployment and inputs as an admission now would; returns the tenant."""
        run, _ = await self.workflow.prepare_run(
            schedule.deployment_id,
            schedule.inputs,
            caller=caller,
            max_steps=schedule.max_steps,
            trigger=RunTrigger(kind="schedule", schedule_id=schedule.schedule_id, occurrence=0.0),
        )
        _require_tenant(caller, run.tenant)
        return run.tenant

    async def _write(self, schedule: Schedule, base: int, dropped: list[Occurrence]) -> None:
        row = schedule_row(schedule)
        if dropped:
            now = self.clock.now()
            await self.store.record_occurrences(
                row,
                expected_revision=base,
                occurrences=[occurrence_row(schedule.schedule_id, o, now) for o in dropped],
            )
        else:
            await self.store.put_schedule(row, expected_revision=base)
        self._notify(schedule)

    def _notify(self, schedule: Schedule) -> None:
        for listener in self.listeners:
            listener(schedule)

    async def _occurrence_view(self, row: OccurrenceRow) -> dict[str, Any]:
        view: dict[str, Any] = {
            "schedule_id": row.schedule_id,
            "instant": _iso(row.instant),
            "instant_s": row.instant,
            "status": row.status,
            "recorded_at": row.recorded_at,
        }
        if row.detail:
            view["detail"] = row.detail
        if row.run_id is not None:
            view["run_id"] = row.run_id
            try:
                engine = self.workflow.engine
                async with engine.reading(row.run_id):
                    run, _ = await engine.get(row.run_id)
                    view["status"] = str(run.status)
            except (NotFound, CorruptRecord) as exc:
                view["status"] = "corrupt"
                view["detail"] = exc.message
        return view


# ----------------------------------------------------------------- views


def schedule_view(schedule: Schedule, *, blocked: str | None = None) -> dict[str, Any]:
    """The JSON-ready definition, admission state and counters of a schedule.

    ``status`` is one of :data:`SCHEDULE_VIEW_STATUSES`: ``deleted``, then ``blocked``
    (``blocked``: why, given by the admission service), ``paused``, ``finished`` and
    ``active``. ``next_instant`` is the instant the schedule will next consider, and
    ``None`` when none will be admitted (deleted, blocked, paused, finished).
    """
    view: dict[str, Any] = msgspec.to_builtins(schedule)
    del view["fence"]  # the store's write fence: internal, not a revision to pass back
    why = blocked or schedule.blocked
    view["blocked"] = why
    view["status"] = _view_status(schedule, why)
    view["next_instant"] = None
    if view["status"] == "active":
        t = _next_instant(schedule.trigger, schedule.watermark)
        view["next_instant"] = None if t is None else _iso(t)
    if schedule.candidate is not None:
        view["pending"] = _iso(schedule.candidate)
    return view


def _occurrence_page(rows: list[dict[str, Any]], next_cursor: str | None) -> OccurrencePage:
    """Occurrence rows built as JSON objects (the keys the wire has always carried),
    typed."""
    return OccurrencePage(
        occurrences=msgspec.convert(rows, list[OccurrenceView]), next_cursor=next_cursor
    )


def _view_status(schedule: Schedule, blocked: str | None) -> str:
    if schedule.deleted:
        return "deleted"
    if blocked:
        return "blocked"
    if schedule.paused:
        return "paused"
    if schedule.finished_at is not None:
        return "finished"
    return "active"


def _page(views: list[ScheduleView], after: str | None) -> SchedulePage:
    return SchedulePage(
        schedules=views,
        next_cursor=None if after is None else encode_cursor(_SCHEDULES, after),
    )


@functools.lru_cache(maxsize=NEXT_INSTANT_CACHE_MAX)
def _next_instant(trigger: CronTrigger | OneShotTrigger, watermark: float) -> float | None:
    """:func:`next_instant_after`, remembered: it is pure (a trigger and an instant give
    one answer) and costs about 0.2 ms for a cron trigger, which would dominate listing
    pages of schedules that did not change since the last listing."""
    return next_instant_after(trigger, watermark)


def instant_view(t: float, schedule: Schedule) -> dict[str, Any]:
    """An instant as UTC and as wall time in the schedule's zone."""
    zone = schedule.trigger.timezone if isinstance(schedule.trigger, CronTrigger) else "UTC"
    from wf.scheduler.cron import resolve_zone

    local = datetime.fromtimestamp(t, tz=UTC).astimezone(resolve_zone(zone))
    return {"instant": _iso(t), "instant_s": t, "local": local.isoformat(), "timezone": zone}


def occurrence_row(schedule_id: str, o: Occurrence, now: float) -> OccurrenceRow:
    """The store row of a decided occurrence."""
    return OccurrenceRow(
        schedule_id=schedule_id,
        instant=o.instant,
        status=o.status,
        detail=o.detail,
        recorded_at=now,
    )


def _pending_view(schedule: Schedule) -> dict[str, Any]:
    assert schedule.candidate is not None
    return {
        "schedule_id": schedule.schedule_id,
        "instant": _iso(schedule.candidate),
        "instant_s": schedule.candidate,
        "status": "pending",
        "held_since": schedule.candidate_since,
        "detail": "held until overlap and capacity allow (misfire=latest)",
    }


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).isoformat()


_CURSOR_PREFIX: Final = b"occ:"
_START: Final = b"start"


def _encode_cursor(after: float | None) -> str:
    """``None``: the marker that resumes the stored history from its first row."""
    body = _START if after is None else repr(after).encode()
    return base64.urlsafe_b64encode(_CURSOR_PREFIX + body).decode().rstrip("=")


def _decode_cursor(cursor: object) -> float | None:
    try:
        if not isinstance(cursor, str):
            raise ValueError("not a string")
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        if not raw.startswith(_CURSOR_PREFIX):
            raise ValueError("foreign cursor")
        body = raw[len(_CURSOR_PREFIX) :]
        return None if body == _START else float(body.decode())
    except (ValueError, UnicodeDecodeError):
        raise InvalidArgument(
            f"cursor {cursor!r} is not an occurrences cursor", field="cursor"
        ) from None


def _choice(value: object, allowed: tuple[str, ...], field: str) -> str:
    if value not in allowed:
        raise InvalidArgument(f"{field} must be one of {list(allowed)}, not {value!r}", field=field)
    return str(value)


def _inputs(value: object) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidArgument("inputs must be a JSON object", field="inputs")
    return dict(value)


def _lateness(value: object) -> float | None:
    """A per-schedule misfire allowance: seconds, 0 to :data:`MISFIRE_LATENESS_MAX_S`."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value <= MISFIRE_LATENESS_MAX_S  # NaN fails this too
    ):
        raise InvalidArgument(
            f"misfire_lateness_s must be a number of seconds from 0 to "
            f"{MISFIRE_LATENESS_MAX_S:g}, not {value!r}",
            field="misfire_lateness_s",
        )
    return float(value)


def _note(value: object, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > NOTE_MAX:
        raise InvalidArgument(
            f"{field} must be a string of at most {NOTE_MAX} characters", field=field
        )
    return check_text(value, field)


def _check_future(schedule: Schedule, now: float) -> None:
    """A one-shot instant must lie ahead: time up to now is consumed, so it would never fire."""
    trigger = schedule.trigger
    if isinstance(trigger, OneShotTrigger) and oneshot_instant(trigger) <= now:
        raise InvalidArgument(
            f"the one-shot instant {trigger.at} is not in the future; time up to now is "
            "consumed (no backfill), so it would never fire",
            field="trigger.at",
        )


def _check_policies(schedule: Schedule) -> None:
    if schedule.overlap == "parallel":
        n = schedule.max_active_runs
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_ACTIVE_RUNS_MAX:
            raise InvalidArgument(
                f"overlap='parallel' requires max_active_runs between 1 and {MAX_ACTIVE_RUNS_MAX}",
                field="max_active_runs",
            )
    elif schedule.max_active_runs is not None:
        raise InvalidArgument(
            "max_active_runs applies only to overlap='parallel'", field="max_active_runs"
        )
    m = schedule.max_steps
    if m is not None and (
        not isinstance(m, int) or isinstance(m, bool) or not 1 <= m <= MAX_STEPS_MAX
    ):
        raise InvalidArgument(f"max_steps must be 1-{MAX_STEPS_MAX}", field="max_steps")


def _require_tenant(caller: Scope, tenant: str) -> None:
    if caller.tenants is not None and tenant not in caller.tenants:
        raise Forbidden(f"this credential may not act for tenant {tenant!r}", tenant=tenant)
