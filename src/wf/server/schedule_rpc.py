"""``workflow.schedules.*`` JSON-RPC methods: the wire face of the schedules API.

:class:`wf.schedules.api.ScheduleAPI` does the work; the methods' parameters
and declarations are the wire contract's (:mod:`wf.wire.schedule_methods`,
which says why triggers travel as plain JSON objects); this module attaches
a handler to each. On a server without schedules every method answers
:class:`~wf.errors.Conflict` saying how to enable them.
"""

from __future__ import annotations

from collections.abc import Callable

from wf.errors import Conflict
from wf.schedules.api import ScheduleAPI
from wf.server.rpc import Caller, Registry
from wf.wire import schedule_methods as declared
from wf.wire.run_views import RunView
from wf.wire.schedule_methods import (
    CreateScheduleParams,
    ListSchedulesParams,
    OccurrencesParams,
    PauseScheduleParams,
    PreviewParams,
    ScheduleIdParams,
    TriggerScheduleParams,
    UpdateScheduleParams,
)
from wf.wire.schedule_views import OccurrencePage, PreviewInstant, SchedulePage, ScheduleView


def register_schedule_methods(api_of: Callable[[], ScheduleAPI | None], registry: Registry) -> None:
    """Attach a handler to every ``workflow.schedules.*`` method of the wire contract
    (``api_of()`` is ``None`` when schedules are disabled)."""

    def api() -> ScheduleAPI:
        found = api_of()
        if found is None:
            raise Conflict(
                "deployment schedules are not enabled on this server; start it with "
                "--enable-scheduler or server.scheduler.enabled"
            )
        return found

    async def create(p: CreateScheduleParams, c: Caller) -> ScheduleView:
        return await api().create_schedule(
            p.schedule_id,
            p.deployment_id,
            p.trigger,
            caller=c,
            inputs=p.inputs,
            overlap=p.overlap,
            max_active_runs=p.max_active_runs,
            misfire=p.misfire,
            max_steps=p.max_steps,
            note=p.note,
            misfire_lateness_s=p.misfire_lateness_s,
        )

    async def get(p: ScheduleIdParams, c: Caller) -> ScheduleView:
        return await api().get_schedule(p.schedule_id, caller=c)

    async def list_(p: ListSchedulesParams, c: Caller) -> SchedulePage:
        return await api().list_schedules(
            caller=c,
            include_deleted=p.include_deleted,
            limit=p.limit,
            cursor=p.cursor,
            status=p.status,
        )

    async def update(p: UpdateScheduleParams, c: Caller) -> ScheduleView:
        return await api().update_schedule(
            p.schedule_id,
            p.expected_revision,
            caller=c,
            deployment_id=p.deployment_id,
            trigger=p.trigger,
            inputs=p.inputs,
            overlap=p.overlap,
            max_active_runs=p.max_active_runs,
            misfire=p.misfire,
            max_steps=p.max_steps,
            note=p.note,
            misfire_lateness_s=p.misfire_lateness_s,
        )

    async def pause(p: PauseScheduleParams, c: Caller) -> ScheduleView:
        return await api().pause_schedule(p.schedule_id, caller=c, reason=p.reason)

    async def resume(p: ScheduleIdParams, c: Caller) -> ScheduleView:
        return await api().resume_schedule(p.schedule_id, caller=c)

    async def delete(p: ScheduleIdParams, c: Caller) -> ScheduleView:
        return await api().delete_schedule(p.schedule_id, caller=c)

    async def occurrences(p: OccurrencesParams, c: Caller) -> OccurrencePage:
        return await api().list_schedule_occurrences(
            p.schedule_id, caller=c, limit=p.limit, cursor=p.cursor
        )

    async def preview(p: PreviewParams, c: Caller) -> list[PreviewInstant]:
        return await api().preview_schedule(p.schedule_id, caller=c, count=p.count)

    async def trigger(p: TriggerScheduleParams, c: Caller) -> RunView:
        return await api().trigger_schedule(p.schedule_id, caller=c, request_id=p.request_id)

    handle = registry.handle
    handle(declared.CREATE_SCHEDULE, create)
    handle(declared.GET_SCHEDULE, get)
    handle(declared.LIST_SCHEDULES, list_)
    handle(declared.UPDATE_SCHEDULE, update)
    handle(declared.PAUSE_SCHEDULE, pause)
    handle(declared.RESUME_SCHEDULE, resume)
    handle(declared.DELETE_SCHEDULE, delete)
    handle(declared.LIST_OCCURRENCES, occurrences)
    handle(declared.PREVIEW_SCHEDULE, preview)
    handle(declared.TRIGGER_SCHEDULE, trigger)
