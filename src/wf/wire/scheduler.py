"""Bounded wire forms of the scheduler's own value types.

The core's :class:`~wf.scheduler.model.Activity` is decoded by the store a
million rows at a time during recovery, so it carries no per-field checks of
its own; what arrives over the wire is decoded as :class:`WireActivity`
instead: the same struct (a subclass with the same fields and layout, so the
core takes it as it is), with every field bounded by :mod:`wf.wire.bounds`.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from wf.errors import InvalidArgument
from wf.scheduler.model import Activity, NameSet
from wf.wire.bounds import (
    DURATION_MAX_S,
    ID_LENGTH_MAX,
    Id,
    Instant,
    Name,
    NonNegI64,
    Payload,
    Text,
    check_json_bytes,
)

_IdText = Annotated[
    str,
    msgspec.Meta(max_length=ID_LENGTH_MAX, pattern=r"^[^\x00-\x1f\x7f]*$"),
]
"""An id that may be empty (``workflow_id``, ``correlation_id``)."""


class WireActivity(Activity, kw_only=True, gc=False, forbid_unknown_fields=True):
    """An :class:`Activity` as a submission carries it, every field bounded."""

    activity_id: Id
    activity_type: Annotated[Name, msgspec.Meta(min_length=1)]
    workflow_id: _IdText = ""
    tenant: Annotated[Name, msgspec.Meta(min_length=1)] = "default"
    deadline: Instant | None = None
    capabilities: NameSet = frozenset()
    locality: Name | None = None
    region: Name | None = None
    correlation_id: _IdText = ""
    ordering_key: Id | None = None
    policy: Name | None = None
    not_before: Instant | None = None
    payload: Payload = b""
    schedule_to_start_s: Annotated[float, msgspec.Meta(gt=0.0, le=DURATION_MAX_S)] | None = None
    start_to_close_s: Annotated[float, msgspec.Meta(gt=0.0, le=DURATION_MAX_S)] | None = None
    seq: NonNegI64 = 0
    attempt: NonNegI64 = 0
    failures: NonNegI64 = 0
    infra_requeues: NonNegI64 = 0
    steals: NonNegI64 = 0
    token: NonNegI64 = 0
    worker_id: Id | None = None
    lease_expires_at: Instant = 0.0
    submitted_at: Instant = 0.0
    queued_at: Instant = 0.0
    queue_ticket: NonNegI64 = 0
    last_error: Text | None = None

    def __post_init__(self) -> None:
        """Refuse arguments that are not one bounded UTF-8 JSON document."""
        if self.payload:
            try:
                check_json_bytes(self.payload, "payload")
            except InvalidArgument as exc:
                exc.details["activity_id"] = self.activity_id
                raise


def as_core(activities: list[WireActivity]) -> list[Activity]:
    """The same activities as the core's own type, in place and without a copy.

    The core keeps what it accepts and compares, encodes and digests it as an
    :class:`Activity`; a ``WireActivity`` adds no field, so its layout is the
    parent's and only the class pointer changes.
    """
    core: list[Activity] = []
    for activity in activities:
        plain: Activity = activity
        plain.__class__ = Activity
        core.append(plain)
    return core
