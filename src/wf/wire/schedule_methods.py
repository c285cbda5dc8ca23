"""The ``workflow.schedules.*`` methods: parameters and declarations.

Triggers travel as plain JSON objects so a bad one is answered by the
schedules layer's own checks (``InvalidCronExpression``, ``InvalidTimezone``,
``NaiveDatetime``, ``InvalidArgument`` naming the field), exactly as the
Python API answers; :mod:`wf.wire.triggers` holds their typed forms. The
schedules layer's :class:`~wf.schedules.api.ScheduleAPI` is the Python API
behind them (each declaration's ``python_name`` is its method).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from wf.wire.bounds import I64, Cursor, Id, Name, Seconds, Text, check_json_value
from wf.wire.methods import MethodSpec
from wf.wire.paging import PAGE_LIMIT_DEFAULT, Limit
from wf.wire.run_views import RunView
from wf.wire.schedule_views import (
    OccurrencePage,
    PreviewInstant,
    SchedulePage,
    ScheduleView,
)


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
    misfire_lateness_s: Seconds | None = None
    """This schedule's misfire allowance in seconds, 0-604800 (``null``: the server's
    ``server.scheduler.misfire_lateness_s``)."""

    def __post_init__(self) -> None:
        """Bound the free-form trigger and inputs (depth, size, strings, integers)."""
        check_json_value(self.trigger, "trigger")
        check_json_value(self.inputs, "inputs")


class ScheduleIdParams(_Params, frozen=True, kw_only=True):
    """``workflow.schedules.get|resume|delete``."""

    schedule_id: Id
    """The schedule."""


class TriggerScheduleParams(_Params, frozen=True, kw_only=True):
    """``workflow.schedules.trigger``."""

    schedule_id: Id
    """The schedule."""
    request_id: Id | None = None
    """The client's id for this request, so that it may be retried safely: a retry on
    the same schedule answers the run the first call started and starts nothing; the
    same id naming another schedule (or used to start a run) is ``already_exists``
    naming that run. Unique per tenant (docs/schedules.md)."""


class ListSchedulesParams(_Params, frozen=True, kw_only=True):
    """``workflow.schedules.list``."""

    include_deleted: bool = False
    """Also list deleted schedules."""
    limit: Limit = PAGE_LIMIT_DEFAULT
    """Page size, 1-100."""
    cursor: Cursor | None = None
    """``next_cursor`` of the previous page."""
    status: Name | None = None
    """Only schedules in this state: ``active``, ``paused``, ``finished``, ``blocked``
    or ``deleted`` (a page may then hold fewer than ``limit``; follow ``next_cursor``)."""


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
    misfire_lateness_s: Seconds | None = None
    """New misfire allowance in seconds (cannot be cleared once set)."""

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


# ------------------------------------------------------------- declarations

CREATE_SCHEDULE: Final = MethodSpec(
    name="workflow.schedules.create",
    python_name="create_schedule",
    params=CreateScheduleParams,
    result=ScheduleView,
    access="operate",
    summary="Create a deployment schedule (caller-chosen id).",
)
GET_SCHEDULE: Final = MethodSpec(
    name="workflow.schedules.get",
    python_name="get_schedule",
    params=ScheduleIdParams,
    result=ScheduleView,
    access="read",
    summary="A schedule's definition, state and counters.",
)
LIST_SCHEDULES: Final = MethodSpec(
    name="workflow.schedules.list",
    python_name="list_schedules",
    params=ListSchedulesParams,
    result=SchedulePage,
    access="read",
    summary="A page of schedules by id (deleted only when asked).",
)
UPDATE_SCHEDULE: Final = MethodSpec(
    name="workflow.schedules.update",
    python_name="update_schedule",
    params=UpdateScheduleParams,
    result=ScheduleView,
    access="operate",
    summary="Change the given fields at expected_revision.",
)
PAUSE_SCHEDULE: Final = MethodSpec(
    name="workflow.schedules.pause",
    python_name="pause_schedule",
    params=PauseScheduleParams,
    result=ScheduleView,
    access="operate",
    summary="Stop future admission (idempotent).",
)
RESUME_SCHEDULE: Final = MethodSpec(
    name="workflow.schedules.resume",
    python_name="resume_schedule",
    params=ScheduleIdParams,
    result=ScheduleView,
    access="operate",
    summary="Admit again from the next future instant (idempotent).",
)
DELETE_SCHEDULE: Final = MethodSpec(
    name="workflow.schedules.delete",
    python_name="delete_schedule",
    params=ScheduleIdParams,
    result=ScheduleView,
    access="operate",
    summary="Soft delete: no admission; history stays.",
)
LIST_OCCURRENCES: Final = MethodSpec(
    name="workflow.schedules.occurrences.list",
    python_name="list_schedule_occurrences",
    params=OccurrencesParams,
    result=OccurrencePage,
    access="read",
    summary="A page of occurrences, oldest first, pending synthesized.",
)
PREVIEW_SCHEDULE: Final = MethodSpec(
    name="workflow.schedules.preview",
    python_name="preview_schedule",
    params=PreviewParams,
    result=list[PreviewInstant],
    access="read",
    summary="The next instants the trigger yields.",
)
TRIGGER_SCHEDULE: Final = MethodSpec(
    name="workflow.schedules.trigger",
    python_name="trigger_schedule",
    params=TriggerScheduleParams,
    result=RunView,
    access="operate",
    summary="Start one manual run through the schedule's bindings now.",
)

METHODS: Final[tuple[MethodSpec[Any], ...]] = (
    CREATE_SCHEDULE,
    GET_SCHEDULE,
    LIST_SCHEDULES,
    UPDATE_SCHEDULE,
    PAUSE_SCHEDULE,
    RESUME_SCHEDULE,
    DELETE_SCHEDULE,
    LIST_OCCURRENCES,
    PREVIEW_SCHEDULE,
    TRIGGER_SCHEDULE,
)
"""Every ``workflow.schedules.*`` method."""
