"""Deployment schedules: the durable definition, triggers, occurrences (contract 004).

Theory of operation
-------------------
A :class:`Schedule` is a durable definition: the deployment it runs, a
trigger (one-shot instant or cron expression with an IANA zone), input
bindings, overlap and misfire policies (with an optional per-schedule misfire
allowance), an optional ``max_steps`` budget and a ``revision`` that only an
operator's change raises (update, pause, resume, delete): admissions never do,
so a get-then-update with ``expected_revision`` does not race the scheduler.
Every stored write, admissions included, raises the internal ``fence``
instead, which is the store row's compare-and-set revision. Besides the definition it holds the
admission state the service needs across restarts: the consumed
``watermark`` (every instant at or before it has been dealt with, so nothing
is ever replayed), the held ``candidate`` of ``misfire="latest"``, pause and
delete marks, a ``blocked`` diagnosis when its records contradict each other,
and the skipped-occurrence counters.

An *occurrence* is one resolved UTC instant of a schedule, unique on
``(schedule_id, instant)`` in the store. Stored statuses are in
:data:`wf.store.rows.OCCURRENCE_STATUSES`; an ``admitted`` occurrence shows the
status of its run when listed (``running``, ``interrupted``, ``completed``,
``failed``, ``exhausted``, ``cancelled``), and a held candidate is listed as
``pending`` without being stored.

Instants are POSIX seconds in UTC; the trigger keeps the zone name and the
offset the caller wrote.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Final, Literal

import msgspec

from wf.errors import CorruptRecord, InvalidArgument, NaiveDatetime
from wf.runtime.stored import decode_body
from wf.scheduler.cron import next_fire_after, require_aware, resolve_zone, validate_cron
from wf.store.protocol import ScheduleRow
from wf.wire.triggers import CronTrigger as CronTrigger
from wf.wire.triggers import OneShotTrigger as OneShotTrigger
from wf.wire.triggers import Trigger as Trigger

SCHEDULE_FORMAT: Final = 1
"""Version of the stored schedule document."""
SCHEDULE_ID_RE: Final = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,127}$")
"""Schedule ids: lower-case letters, digits, ``_``, ``.`` and ``-``; 1-128 characters."""
CATCHUP_MAX: Final = 1_000
"""Most due instants one admission step handles (one transaction); a longer catch-up
takes several steps."""


class Schedule(msgspec.Struct, kw_only=True):
    """A schedule's definition and admission state (see the module docstring)."""

    schedule_id: str
    """Caller-chosen id; never reused."""
    deployment_id: str
    """The deployment its occurrences run."""
    tenant: str
    """The deployment's tenant (fixed at creation)."""
    trigger: Trigger
    """When it fires."""
    inputs: dict[str, Any] = msgspec.field(default_factory=dict)
    """Run inputs overlaid on the deployment's defaults."""
    overlap: Literal["skip", "parallel"] = "skip"
    """``skip``: an unfinished scheduled run of this schedule blocks the next occurrence;
    ``parallel``: up to ``max_active_runs`` at once."""
    max_active_runs: int | None = None
    """Required (positive) with ``overlap="parallel"``; admitted, running and interrupted
    runs count."""
    misfire: Literal["skip", "latest"] = "skip"
    """``skip``: starts later than the allowance are dropped; ``latest``: hold one latest
    candidate and run it as soon as overlap and capacity allow."""
    max_steps: int | None = None
    """Budget of node starts per run (overrides the deployment's); once set, an update
    cannot clear it (004 limitation)."""
    misfire_lateness_s: float | None = None
    """This schedule's misfire allowance in seconds (``None``: the server's
    ``server.scheduler.misfire_lateness_s``); applies to ``misfire="skip"``."""
    note: str | None = None
    """Free text."""
    revision: int = 0
    """Raised by one on every operator change (update, pause, resume, delete), never
    by an admission."""
    fence: int = 0
    """Raised by one on every stored write (admissions included): the store row's
    compare-and-set revision. Left out (``0``) it is the revision: a body written
    before the fence existed, when every write raised the revision, or a new one."""
    finished_at: float | None = None
    """When a trigger with no further instant (a one-shot that fired, was skipped or
    rejected) was dealt with: the schedule is ``finished``, nothing more is admitted."""
    created_at: float = 0.0
    """When it was created."""
    updated_at: float = 0.0
    """When it last changed."""
    watermark: float = 0.0
    """Every instant at or before this has been dealt with (starts at creation)."""
    candidate: float | None = None
    """The held unadmitted instant (``misfire="latest"``)."""
    candidate_since: float | None = None
    """When the candidate was first held."""
    paused: bool = False
    """No admission while set."""
    paused_at: float | None = None
    """When it was paused."""
    pause_reason: str | None = None
    """The operator's note given to pause."""
    deleted: bool = False
    """Soft-deleted: no admission, ever again."""
    deleted_at: float | None = None
    """When it was deleted."""
    blocked: str | None = None
    """Why admission is blocked (contradictory or corrupt records: fail closed)."""
    skipped_overlap: int = 0
    """Occurrences skipped because of overlap."""
    skipped_misfire: int = 0
    """Occurrences skipped because they were too late."""
    format: int = SCHEDULE_FORMAT
    """Document version."""

    def __post_init__(self) -> None:
        if self.fence == 0:
            self.fence = self.revision

    @property
    def status(self) -> str:
        """``deleted``, ``paused`` or ``active`` (the store row's status; the views add
        ``finished`` and ``blocked``: :func:`wf.schedules.api.schedule_view`)."""
        if self.deleted:
            return "deleted"
        return "paused" if self.paused else "active"


_encoder: Final = msgspec.json.Encoder(order="sorted")
_decoder: Final = msgspec.json.Decoder(Schedule)


def check_schedule_id(value: object) -> str:
    """A valid schedule id, or InvalidArgument."""
    if not isinstance(value, str) or not SCHEDULE_ID_RE.match(value):
        raise InvalidArgument(
            f"schedule id {value!r} must match {SCHEDULE_ID_RE.pattern}", field="schedule_id"
        )
    return value


def parse_trigger(value: object) -> Trigger:
    """A checked trigger from its JSON form.

    Refuses unknown kinds and fields (InvalidArgument), naive one-shot times
    (NaiveDatetime), bad cron expressions (InvalidCronExpression) and unknown
    zones (InvalidTimezone).
    """
    if isinstance(value, OneShotTrigger | CronTrigger):
        trigger: Trigger = value
    else:
        if not isinstance(value, dict):
            raise InvalidArgument("trigger must be an object", field="trigger")
        if value.get("kind") not in ("oneshot", "cron"):
            raise InvalidArgument(
                f"trigger kind must be 'oneshot' or 'cron', not {value.get('kind')!r}",
                field="trigger.kind",
            )
        try:
            trigger = msgspec.convert(value, Trigger, strict=True)
        except msgspec.ValidationError as exc:
            raise InvalidArgument(f"invalid trigger: {exc}", field="trigger") from None
    if isinstance(trigger, OneShotTrigger):
        oneshot_instant(trigger)
        return trigger
    expression = validate_cron(trigger.expression)
    resolve_zone(trigger.timezone)
    return CronTrigger(expression=expression, timezone=trigger.timezone)


def oneshot_instant(trigger: OneShotTrigger) -> float:
    """The one-shot instant in POSIX seconds (refusing naive or malformed times)."""
    try:
        parsed = datetime.fromisoformat(trigger.at)
    except ValueError:
        raise InvalidArgument(
            f"trigger.at {trigger.at!r} is not an ISO 8601 timestamp", field="trigger.at"
        ) from None
    if parsed.tzinfo is None:
        raise NaiveDatetime(
            f"trigger.at {trigger.at!r} has no UTC offset; write one (e.g. +00:00)",
            field="trigger.at",
            value=trigger.at,
        )
    return require_aware(parsed, "trigger.at").timestamp()


def next_instant_after(trigger: Trigger, after: float) -> float | None:
    """The trigger's first instant strictly after ``after`` (``None``: no more)."""
    if isinstance(trigger, OneShotTrigger):
        at = oneshot_instant(trigger)
        return at if at > after else None
    return next_fire_after(trigger.expression, trigger.timezone, after)


def schedule_row(schedule: Schedule) -> ScheduleRow:
    """The store row of ``schedule`` at ``schedule.fence`` (the row's revision)."""
    return ScheduleRow(
        schedule_id=schedule.schedule_id,
        tenant=schedule.tenant,
        deployment_id=schedule.deployment_id,
        status=schedule.status,
        body=_encoder.encode(schedule),
        revision=schedule.fence,
        created_at=schedule.created_at,
        updated_at=schedule.updated_at,
    )


def schedule_from_row(row: ScheduleRow) -> Schedule:
    """The schedule a row holds; CorruptRecord if it does not decode or contradicts it."""
    schedule = decode_body(_decoder.decode, row.body, "schedules", row.schedule_id)
    if (
        schedule.schedule_id != row.schedule_id
        or schedule.fence != row.revision
        or schedule.status != row.status
    ):
        raise CorruptRecord(
            f"schedule {row.schedule_id!r}: body names {schedule.schedule_id!r} fence "
            f"{schedule.fence} ({schedule.status}), row revision {row.revision} ({row.status})",
            table="schedules",
            key=row.schedule_id,
        )
    return schedule
