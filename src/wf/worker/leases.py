"""What a worker knows about the leases it holds, and what it has done.

A :class:`HeldLease` goes ``leased`` (received, waiting for an execution
slot) -> ``executing`` (start reported, code running) -> ``reporting``
(result on its way); ``lost`` is set, once, when the lease stops being the
worker's (revoked, stale, expired, returned), after which nothing more is
reported on it.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from wf.errors import InvalidArgument
from wf.scheduler.outputs import LeaseGranted
from wf.wire.bounds import DETAILS_BYTES_MAX, check_json_bytes
from wf.wire.scheduler_methods import FencedParams, RenewParams
from wf.worker.activity import ActivityContext, encode_result


class LeaseStatus(enum.StrEnum):
    """Where a held lease is, as the worker sees it."""

    LEASED = "leased"
    """Received, waiting for an execution slot (not started)."""
    EXECUTING = "executing"
    """Started (or being started) and running."""
    REPORTING = "reporting"
    """Finished; its result is on the way to the server."""


@dataclass(slots=True, kw_only=True)
class HeldLease:
    """One lease the worker holds."""

    grant: LeaseGranted
    context: ActivityContext
    status: LeaseStatus = LeaseStatus.LEASED
    lost: str | None = None
    """Why the lease was lost (``None`` while it is ours)."""
    activity_task: asyncio.Task[Any] | None = None
    """An ``async`` activity's task, to cancel it."""
    start_reported: bool = False
    """The server knows it started (on grant, or a ``leases.start`` it acknowledged)."""
    start_calling: bool = False
    """A deferred ``leases.start`` is on the wire (it must land before the result)."""
    due_wake: asyncio.Event | None = None
    """Set while an early grant waits in its slot for ``not_before``; losing the
    lease sets it, so the wait ends at once."""
    details_sent: int = 0
    """``context.heartbeats`` when heartbeat details were last sent (coalescing: only
    the latest details of those recorded since go with the next renewal)."""
    details_refused: str | None = None
    """Why the latest details could not be sent (not JSON, larger than 64 KiB)."""
    confirm_after: int = 0
    """A grant answered after registration number ``confirm_after`` began (0: none):
    its first lease call waits for that registration's answer, and a started one runs
    only once a renewal confirms it (``Worker._after_registration``)."""

    @property
    def token(self) -> int:
        """The fencing token."""
        return self.grant.lease.token

    @property
    def activity_id(self) -> str:
        """The leased activity."""
        return self.grant.lease.activity_id

    def fenced(self) -> FencedParams:
        """The parameters of ``scheduler.leases.start`` (and of a bare renewal)."""
        return FencedParams(activity_id=self.activity_id, token=self.token)

    def unsent_details(self) -> bool:
        """Whether the code heartbeated since details were last sent."""
        return self.context.heartbeats != self.details_sent

    def renewal(self) -> RenewParams:
        """The parameters of ``scheduler.leases.renew``: with the latest heartbeat
        details when the code heartbeated since the last renewal (coalesced: only the
        latest go), encoded as JSON and bounded (64 KiB). Details that cannot be sent
        are dropped and said in :attr:`details_refused` (the renewal still goes)."""
        details: bytes | None = None
        if self.unsent_details():
            self.details_sent = self.context.heartbeats
            try:
                details = check_json_bytes(
                    encode_result(self.context.details), "details", bytes_max=DETAILS_BYTES_MAX
                )
                self.details_refused = None
            except InvalidArgument as exc:
                self.details_refused = exc.message
            except (TypeError, ValueError, RecursionError, msgspec.EncodeError) as exc:
                self.details_refused = f"details are not JSON-serializable: {exc}"
        return RenewParams(activity_id=self.activity_id, token=self.token, details=details)


@dataclass(slots=True)
class WorkerCounters:
    """What the worker did (for tests, logs and operators)."""

    received: int = 0
    """Leases received."""
    started: int = 0
    """Activities begun (after an acknowledged start, on grant, or unreported)."""
    started_on_grant: int = 0
    """Leases whose grant was also their start (no ``scheduler.leases.start`` sent)."""
    registration_waits: int = 0
    """Grants answered while a registration was begun: their first lease call waited
    for its answer (a started one's is a renewal that must succeed before it runs; a
    refused lease is dropped unrun and counted in ``lost``)."""
    early_grants: int = 0
    """Leases granted before their ``not_before``, started by the worker's own timer."""
    unreported_starts: int = 0
    """Results that carried their own start (``unreported_start``; a ``may_restart``
    activity that finished before its start was reported)."""
    completed: int = 0
    """Completions the server acknowledged."""
    failed: int = 0
    """Failed attempts the server acknowledged."""
    lost: int = 0
    """Leases lost (revoked, stale, expired, returned)."""
    reports_dropped: int = 0
    """Results the server refused as stale, expired or already finished (for
    example a completion retried across a failover that the first try applied)."""
    registrations: int = 0
    """Successful registrations (1 + re-registrations)."""
    polls: int = 0
    """Long polls sent (``scheduler.workers.poll``)."""
    report_polls: int = 0
    """Results sent with the worker's next poll (``poll`` on complete/fail)."""
    report_poll_leases: int = 0
    """Leases received in the answers of those results."""
    connection_losses: int = 0
    """Times a call found the server unreachable."""
    acknowledged: list[tuple[str, int]] = field(default_factory=list)
    """``(activity_id, token)`` of every acknowledged completion, oldest first
    (bounded by :data:`ACKNOWLEDGED_MAX`)."""


ACKNOWLEDGED_MAX: Final = 10_000
"""Most acknowledged completions :class:`WorkerCounters` remembers."""
