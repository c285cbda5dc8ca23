"""The typed results of the ``workflow.schedules.*`` methods.

The schedules layer builds each answer as a JSON object
(:func:`wf.schedules.api.schedule_view` and its neighbours) and its Python API
returns it as these :class:`~wf.wire.views.View` structs, whose fields are
declared in the order the server writes the keys (so a view encodes to the bytes
the server sends). Keys sent only in some states are :data:`msgspec.UNSET` when
absent, or ``None`` in an ``omit_defaults`` view when they are never ``null``
when sent (see :mod:`wf.wire.run_views`). ``trigger_schedule`` answers a
:class:`~wf.wire.run_views.RunView` (with ``triggered_from``).
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from wf.wire.views import View


class ScheduleView(View, frozen=True, kw_only=True):
    """A schedule's definition, admission state and counters.

    A schedule whose stored record does not decode is listed with ``corrupt``
    (why), ``schedule_id`` and ``status`` (``blocked``) only; its other fields keep
    their defaults here.
    """

    schedule_id: str
    """The caller-chosen id."""
    corrupt: str | UnsetType = UNSET
    """Only for a record that does not decode: why."""
    deployment_id: str = ""
    """The deployment its occurrences run."""
    tenant: str = ""
    """Owning tenant (the deployment's)."""
    trigger: dict[str, Any] = msgspec.field(default_factory=dict)
    """``{"kind": "oneshot", "at": ...}`` or
    ``{"kind": "cron", "expression": ..., "timezone": ...}``."""
    inputs: dict[str, Any] = msgspec.field(default_factory=dict)
    """Run inputs overlaid on the deployment's defaults."""
    overlap: str = "skip"
    """``skip`` or ``parallel``."""
    max_active_runs: int | None = None
    """With ``parallel``: most runs at once."""
    misfire: str = "skip"
    """``skip`` or ``latest``."""
    max_steps: int | None = None
    """Budget of node starts per run."""
    misfire_lateness_s: float | None = None
    """Its own misfire allowance (``None``: the server's)."""
    note: str | None = None
    """Free text."""
    revision: int = 0
    """Pass back as ``expected_revision`` to edit it."""
    finished_at: float | None = None
    """When its last instant was dealt with (it is then ``finished``)."""
    created_at: float = 0.0
    """When it was created."""
    updated_at: float = 0.0
    """When it was last changed."""
    watermark: float = 0.0
    """Instants up to here are decided."""
    candidate: float | None = None
    """A held ``misfire="latest"`` instant waiting for room."""
    candidate_since: float | None = None
    """Since when it is held."""
    paused: bool = False
    """Paused by ``pause_schedule``."""
    paused_at: float | None = None
    """When it was paused."""
    pause_reason: str | None = None
    """Why (the pause's ``reason``)."""
    deleted: bool = False
    """Deleted (never admits again)."""
    deleted_at: float | None = None
    """When it was deleted."""
    blocked: str | None = None
    """Why admission refuses it (a corrupt record), if it does."""
    skipped_overlap: int = 0
    """Instants skipped because a run was still active."""
    skipped_misfire: int = 0
    """Instants skipped because they were too late."""
    format: int = 1
    """Record format version."""
    status: str = "active"
    """``active``, ``paused``, ``finished``, ``blocked`` or ``deleted``."""
    next_instant: str | None = None
    """The next instant it will consider (ISO 8601 UTC); ``None`` unless active."""
    pending: str | UnsetType = UNSET
    """Only while a candidate is held: its instant (ISO 8601 UTC)."""


class CorruptScheduleView(ScheduleView, frozen=True, kw_only=True, omit_defaults=True):
    """What the server lists for a schedule whose record does not decode: a
    :class:`ScheduleView` that travels as ``schedule_id``, ``corrupt`` and ``status``
    (``blocked``) only (a client decodes it as a :class:`ScheduleView`)."""


class SchedulePage(View, frozen=True, kw_only=True):
    """One page of ``list_schedules``."""

    schedules: list[ScheduleView]
    """Schedules, by id."""
    next_cursor: str | None
    """Pass back to get the next page; ``None`` on the last one."""


class OccurrenceView(View, frozen=True, kw_only=True, omit_defaults=True):
    """One occurrence of a schedule: an instant and what became of it."""

    schedule_id: str
    """The schedule."""
    instant: str
    """The instant, ISO 8601 UTC."""
    instant_s: float
    """The instant, epoch seconds."""
    status: str
    """``pending`` (held, first page only), the admitted run's status, or how it was
    dealt with (``skipped_overlap``, ``skipped_misfire``, ``superseded``, ...)."""
    recorded_at: float | None = None
    """When it was recorded (absent for the synthesized ``pending`` row)."""
    held_since: float | UnsetType | None = UNSET
    """Only on the ``pending`` row: since when the candidate is held."""
    detail: str | None = None
    """More on the status, when there is more."""
    run_id: str | None = None
    """The run it admitted, if it did."""


class OccurrencePage(View, frozen=True, kw_only=True):
    """One page of ``list_schedule_occurrences``."""

    occurrences: list[OccurrenceView]
    """Occurrences, oldest first (a held candidate first, as ``pending``)."""
    next_cursor: str | None
    """Pass back to get the next page; ``None`` on the last one."""


class PreviewInstant(View, frozen=True, kw_only=True):
    """One instant ``preview_schedule`` foresees."""

    instant: str
    """ISO 8601 UTC."""
    instant_s: float
    """Epoch seconds."""
    local: str
    """ISO 8601 wall time in the schedule's zone."""
    timezone: str
    """The schedule's zone (``UTC`` for a one-shot)."""
