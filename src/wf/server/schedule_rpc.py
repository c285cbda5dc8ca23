"""``workflow.schedules.*`` JSON-RPC methods: the wire face of the schedules API.

:class:`wf.schedules.api.ScheduleAPI` does the work; this module only decodes.

Triggers travel as plain JSON objects so a bad one is answered by the
schedules layer's own checks (``InvalidCronExpression``, ``InvalidTimezone``,
``NaiveDatetime``, ``InvalidArgument`` naming the field), exactly as the
Python API answers. On a server without schedules every method answers
:class:`~wf.errors.Conflict` saying how to enable them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from wf.errors import Conflict
from wf.schedules.api import ScheduleAPI
from wf.server.rpc import Caller, Registry
from wf.wire.bounds import I64, Cursor, Id, Name, Text, check_json_value
from wf.wire.paging import PAGE_LIMIT_DEFAULT, Limit


class _Params(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class CreateScheduleParams(_Params, frozen=True, kw_only=True):
    """``workflow.schedules.create``."""

    schedule_id: Id
    """Caller-chosen id (never reused)."""
    deployment_id: Id
    """The deployment its occurrences run."""
    trigger: dict[str, Any]
    """``{"kind": "oneshot", "at": ...}`` or
    ``{"kind": "cron", "expression": ..., "timezone": ...}``."""
    inputs: dict[str, Any] | None = None
    """Run inputs overlaid on the deployment's defaults."""
    overlap: Name = "skip"
    """``skip`` or ``parallel``."""
    max_active_runs: I64 | None = None
    """Required with ``parallel``."""
    misfire: Name = "skip"
    """``skip`` or ``latest``."""
    max_steps: I64 | None = None
    """Budget of node starts per run."""
    note: Text | None = None
    """Free text."""

    def __post_init__(self) -> None:
        """Bound the free-form trigger and inputs (depth, size, strings, integers)."""
        check_json_value(self.trigger, "trigger")
        check_json_value(self.inputs, "inputs")


class ScheduleIdParams(_Params, frozen=True, kw_only=True):
    """``workflow.schedules.get|resume|delete|trigger``."""

    schedule_id: Id
    """The schedule."""


class ListSchedulesParams(_Params, frozen=True, kw_only=True):
    """``workflow.schedules.list``."""

    include_deleted: bool = False
    """Also list deleted schedules."""
    limit: Limit = PAGE_LIMIT_DEFAULT
    """Page size, 1-100."""
    cursor: Cursor | None = None
    """``next_cursor`` of the previous page."""


class UpdateScheduleParams(_Params, frozen=True, kw_only=True):
    """``workflow.schedules.update``: only the given fields change (``null``: unchanged)."""

    schedule_id: Id
    """The schedule."""
    expected_revision: I64
    """The revision the edit is based on (required)."""
    deployment_id: Id | None = None
    """New deployment."""
    trigger: dict[str, Any] | None = None
    """New trigger."""
    inputs: dict[str, Any] | None = None
    """New inputs."""
    overlap: Name | None = None
    """New overlap policy."""
    max_active_runs: I64 | None = None
    """New limit."""
    misfire: Name | None = None
    """New misfire policy."""
    max_steps: I64 | None = None
    """New budget (cannot be cleared once set)."""
    note: Text | None = None
    """New note."""

    def __post_init__(self) -> None:
        """Bound the free-form trigger and inputs (depth, size, strings, integers)."""
        check_json_value(self.trigger, "trigger")
        check_json_value(self.inputs, "inputs")


class PauseScheduleParams(_Params, frozen=True, kw_only=True):
    """``workflow.schedules.pause``."""

    schedule_id: Id
    """The schedule."""
    reason: Text | None = None
    """Why (shown by get and list)."""


class OccurrencesParams(_Params, frozen=True, kw_only=True):
    """``workflow.schedules.occurrences.list``."""

    schedule_id: Id
    """The schedule."""
    limit: Limit = PAGE_LIMIT_DEFAULT
    """Page size, 1-100."""
    cursor: Cursor | None = None
    """``next_cursor`` of the previous page."""


class PreviewParams(_Params, frozen=True, kw_only=True):
    """``workflow.schedules.preview``."""

    schedule_id: Id
    """The schedule."""
    count: I64 = 5
    """How many instants, 1-100."""


def register_schedule_methods(api_of: Callable[[], ScheduleAPI | None], registry: Registry) -> None:
    """Add every ``workflow.schedules.*`` method (``api_of()`` is ``None`` when disabled)."""

    def api() -> ScheduleAPI:
        found = api_of()
        if found is None:
            raise Conflict(
                "deployment schedules are not enabled on this server; start it with "
                "--enable-scheduler or server.scheduler.enabled"
            )
        return found

    async def create(p: CreateScheduleParams, c: Caller) -> dict[str, Any]:
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
        )

    async def get(p: ScheduleIdParams, c: Caller) -> dict[str, Any]:
        return await api().get_schedule(p.schedule_id, caller=c)

    async def list_(p: ListSchedulesParams, c: Caller) -> dict[str, Any]:
        return await api().list_schedules(
            caller=c, include_deleted=p.include_deleted, limit=p.limit, cursor=p.cursor
        )

    async def update(p: UpdateScheduleParams, c: Caller) -> dict[str, Any]:
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
        )

    async def pause(p: PauseScheduleParams, c: Caller) -> dict[str, Any]:
        return await api().pause_schedule(p.schedule_id, caller=c, reason=p.reason)

    async def resume(p: ScheduleIdParams, c: Caller) -> dict[str, Any]:
        return await api().resume_schedule(p.schedule_id, caller=c)

    async def delete(p: ScheduleIdParams, c: Caller) -> dict[str, Any]:
        return await api().delete_schedule(p.schedule_id, caller=c)

    async def occurrences(p: OccurrencesParams, c: Caller) -> dict[str, Any]:
        return await api().list_schedule_occurrences(
            p.schedule_id, caller=c, limit=p.limit, cursor=p.cursor
        )

    async def preview(p: PreviewParams, c: Caller) -> list[dict[str, Any]]:
        return await api().preview_schedule(p.schedule_id, caller=c, count=p.count)

    async def trigger(p: ScheduleIdParams, c: Caller) -> dict[str, Any]:
        return await api().trigger_schedule(p.schedule_id, caller=c)

    add = registry.add
    add("workflow.schedules.create", CreateScheduleParams, create, access="operate",
        summary="Create a deployment schedule (caller-chosen id).")  # fmt: skip
    add("workflow.schedules.get", ScheduleIdParams, get, access="read",
        summary="A schedule's definition, state and counters.")  # fmt: skip
    add("workflow.schedules.list", ListSchedulesParams, list_, access="read",
        summary="A page of schedules by id (deleted only when asked).")  # fmt: skip
    add("workflow.schedules.update", UpdateScheduleParams, update, access="operate",
        summary="Change the given fields at expected_revision.")  # fmt: skip
    add("workflow.schedules.pause", PauseScheduleParams, pause, access="operate",
        summary="Stop future admission (idempotent).")  # fmt: skip
    add("workflow.schedules.resume", ScheduleIdParams, resume, access="operate",
        summary="Admit again from the next future instant (idempotent).")  # fmt: skip
    add("workflow.schedules.delete", ScheduleIdParams, delete, access="operate",
        summary="Soft delete: no admission; history stays.")  # fmt: skip
    add("workflow.schedules.occurrences.list", OccurrencesParams, occurrences, access="read",
        summary="A page of occurrences, oldest first, pending synthesized.")  # fmt: skip
    add("workflow.schedules.preview", PreviewParams, preview, access="read",
        summary="The next instants the trigger yields.")  # fmt: skip
    add("workflow.schedules.trigger", ScheduleIdParams, trigger, access="operate",
        summary="Start one manual run through the schedule's bindings now.")  # fmt: skip
