"""Exclusive, renewable leases with fencing tokens (WF-005 §11, §12).

Theory of operation
-------------------
A lease is the right to execute one activity. Every grant takes the next
*fencing token* from one counter for the whole core, so tokens grow with every
grant and a lease is identified by ``(activity_id, token)``. The activity
remembers the token of its current lease; any start, renewal, completion or
failure must present it. A call with an older token (the lease was revoked,
stolen or expired and granted again) is refused with
:class:`~wf.errors.StaleLease`, so a worker that lost its lease can never
record a second result. A call after ``expires_at`` is refused with
:class:`~wf.errors.LeaseExpired` even before the expiry has been processed:
exclusivity does not depend on when the shell ticks.

Expiries sit in a min-heap of ``(expires_at, token, activity_id)``. A renewal
pushes a new entry and leaves the old one to be skipped when popped (its
expiry no longer matches), which keeps renewal O(log N).
"""

from __future__ import annotations

import heapq

from wf.errors import Conflict, LeaseExpired, StaleLease
from wf.scheduler.model import Activity, ActivityState, Lease, lease_id_for

_HELD = (ActivityState.LEASED, ActivityState.EXECUTING)


class LeaseTable:
    """Token counter and expiry heap of every live lease."""

    __slots__ = ("_expiry", "token", "ttl_s")

    def __init__(self, ttl_s: float, token: int = 0) -> None:
        self.ttl_s = ttl_s
        self.token = token
        """The last token granted (the next grant gets ``token + 1``)."""
        self._expiry: list[tuple[float, int, str]] = []

    def grant(self, activity: Activity, worker_id: str, now: float) -> Lease:
        """Give ``activity`` a new lease for ``worker_id``; returns the lease value."""
        self.token += 1
        token = self.token
        expires_at = now + self.ttl_s
        activity.token = token
        activity.worker_id = worker_id
        activity.lease_expires_at = expires_at
        heapq.heappush(self._expiry, (expires_at, token, activity.activity_id))
        return Lease(
            lease_id=lease_id_for(token),
            worker_id=worker_id,
            activity_id=activity.activity_id,
            token=token,
            granted_at=now,
            expires_at=expires_at,
            renewable=activity.renewable,
            attempt=activity.attempt + 1,
        )

    @staticmethod
    def check(activity: Activity, token: int, now: float) -> None:
        """Raise unless ``token`` is the activity's live, unexpired lease."""
        if activity.token != token or activity.state not in _HELD:
            raise StaleLease(
                f"lease token {token} for activity {activity.activity_id!r} is not current",
                activity_id=activity.activity_id,
                token=token,
                current_token=activity.token,
                state=activity.state.value,
            )
        if activity.lease_expires_at <= now:
            raise LeaseExpired(
                f"lease token {token} for activity {activity.activity_id!r} expired",
                activity_id=activity.activity_id,
                token=token,
                expired_at=activity.lease_expires_at,
            )

    def renew(self, activity: Activity, token: int, now: float) -> float:
        """Extend a live renewable lease by the TTL; returns the new expiry."""
        self.check(activity, token, now)
        if not activity.renewable:
            raise Conflict(
                f"the lease of activity {activity.activity_id!r} is not renewable",
                activity_id=activity.activity_id,
            )
        expires_at = now + self.ttl_s
        activity.lease_expires_at = expires_at
        heapq.heappush(self._expiry, (expires_at, token, activity.activity_id))
        return expires_at

    def extend(self, activity: Activity, until: float) -> bool:
        """Move a held lease's expiry to ``until`` if it is earlier; returns whether it
        moved. A grace, not a renewal: it applies to non-renewable leases too, because
        their holder could not report while no scheduler ran (recovery) and says it
        still holds them (registration)."""
        if activity.lease_expires_at >= until:
            return False
        activity.lease_expires_at = until
        heapq.heappush(self._expiry, (until, activity.token, activity.activity_id))
        return True

    def track(self, activity: Activity) -> None:
        """Re-arm the expiry of a restored live lease (recovery)."""
        heapq.heappush(
            self._expiry, (activity.lease_expires_at, activity.token, activity.activity_id)
        )

    def pop_expired(self, now: float) -> list[tuple[str, int, float]]:
        """Heap entries due at ``now``: (activity id, token, expiry); caller re-checks them."""
        due: list[tuple[str, int, float]] = []
        heap = self._expiry
        while heap and heap[0][0] <= now:
            expires_at, token, activity_id = heapq.heappop(heap)
            due.append((activity_id, token, expires_at))
        return due

    def next_expiry_at(self) -> float | None:
        """The earliest expiry entry (possibly stale: a tick then finds nothing)."""
        return self._expiry[0][0] if self._expiry else None
