"""The one error tree of wf.

Every error wf raises on purpose is a :class:`WfError`. Each class carries a
stable string ``code`` (never renamed once published), a JSON-RPC error number
``rpc_code`` (the server maps them one to one), and its classification: is it
the caller's fault, and may the same call succeed if retried unchanged?

::

    WfError
    ├── InvalidArgument            caller   bad input, nothing changed
    │   ├── InvalidCronExpression  caller
    │   ├── InvalidTimezone        caller
    │   ├── NaiveDatetime          caller
    │   └── UnknownPolicy          caller
    ├── NotFound                   caller   unknown id
    ├── AlreadyExists              caller   id taken with other content
    ├── Conflict                   caller   state does not allow the call
    │   ├── IllegalTransition      caller   lifecycle table refuses it
    │   ├── StaleLease             caller   fencing token superseded
    │   ├── LeaseExpired           caller   lease ran out before the call
    │   └── WorkerNotActive        caller   worker failed, drained or gone
    ├── Unauthorized               caller   no valid credential
    ├── Forbidden                  caller   credential lacks the scope
    ├── OwnershipConflict          server   another scheduler owns the store
    ├── Overloaded                 server   backpressure; retry after ``retry_after_s``
    ├── StoreUnavailable           server   the store could not commit; retryable
    │   └── OwnershipLost          server   another writer may have written since; reload
    ├── Draining                   server   shutting down: no new scheduled work; retryable
    ├── NotLeader                  server   a standby node: retry at the active (``leader_url``)
    ├── RpcUnavailable             server   (client side) no server reachable; retryable
    ├── RpcProtocolError           caller   (client side) a JSON-RPC protocol error
    └── Internal                   server   a bug or an unexpected state
        └── CorruptRecord          server   stored data failed validation (fail closed)

The JSON-RPC numbers sit in the implementation-defined server range
``-32000..-32099`` so that they never collide with JSON-RPC's own codes.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

Fault = Literal["caller", "server"]


class WfError(Exception):
    """Base of every deliberate wf error.

    ``details`` carries machine-readable context (ids, limits, the offending
    field) and is sent on the wire as JSON-RPC ``error.data``.
    """

    code: ClassVar[str] = "wf.error"
    rpc_code: ClassVar[int] = -32000
    fault: ClassVar[Fault] = "server"
    retryable: ClassVar[bool] = False

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = details

    def to_dict(self) -> dict[str, Any]:
        """The wire form: code, message, classification and details."""
        return {
            "code": self.code,
            "message": self.message,
            "fault": self.fault,
            "retryable": self.retryable,
            "details": dict(self.details),
        }


class InvalidArgument(WfError):
    """The input is malformed or out of range; nothing was changed."""

    code = "invalid_argument"
    rpc_code = -32001
    fault = "caller"


class InvalidCronExpression(InvalidArgument):
    """A cron expression is not a valid five-field Unix expression."""

    code = "invalid_cron_expression"
    rpc_code = -32002


class InvalidTimezone(InvalidArgument):
    """A time zone is not a known IANA zone name."""

    code = "invalid_timezone"
    rpc_code = -32003


class NaiveDatetime(InvalidArgument):
    """A timestamp has no UTC offset; wf never guesses a zone."""

    code = "naive_datetime"
    rpc_code = -32004


class UnknownPolicy(InvalidArgument):
    """A scheduling policy or load-balancing strategy name is not registered."""

    code = "unknown_policy"
    rpc_code = -32005


class NotFound(WfError):
    """The named object does not exist."""

    code = "not_found"
    rpc_code = -32010
    fault = "caller"


class AlreadyExists(WfError):
    """The id is already taken by an object with other content."""

    code = "already_exists"
    rpc_code = -32011
    fault = "caller"


class Conflict(WfError):
    """The object's current state does not allow the call."""

    code = "conflict"
    rpc_code = -32020
    fault = "caller"


class IllegalTransition(Conflict):
    """The lifecycle transition table refuses the transition."""

    code = "illegal_transition"
    rpc_code = -32021


class StaleLease(Conflict):
    """The lease's fencing token was superseded; the caller no longer owns the work."""

    code = "stale_lease"
    rpc_code = -32022


class LeaseExpired(Conflict):
    """The lease expired before the call; the work may be reassigned."""

    code = "lease_expired"
    rpc_code = -32023


class WorkerNotActive(Conflict):
    """The worker is failed, draining or deregistered and may not take new work."""

    code = "worker_not_active"
    rpc_code = -32024


class Unauthorized(WfError):
    """No valid credential was presented."""

    code = "unauthorized"
    rpc_code = -32030
    fault = "caller"


class Forbidden(WfError):
    """The credential is valid but its scope does not cover the call."""

    code = "forbidden"
    rpc_code = -32031
    fault = "caller"


class OwnershipConflict(WfError):
    """Another scheduler instance owns the store; ``details`` name the holder."""

    code = "ownership_conflict"
    rpc_code = -32041
    fault = "server"


class StoreUnavailable(WfError):
    """The store could not commit; nothing of the call was stored.

    Retryable because a server whose writes stopped reloads from its store by
    itself, or exits for its supervisor to restart it when it cannot
    (docs/server.md); ``details`` may carry ``retry_after_s``."""

    code = "store_unavailable"
    rpc_code = -32042
    fault = "server"
    retryable = True


class OwnershipLost(StoreUnavailable):
    """The store refused a write because this node can no longer prove that nobody else
    wrote since its last commit (its ownership epoch or commit sequence moved: another
    scheduler took the store over, or its session was lost in doubt). Nothing of the
    write was stored; the node stops writing, takes ownership again and reloads from
    the store, after which the same call may be retried."""

    code = "ownership_lost"
    rpc_code = -32044


class RpcUnavailable(WfError):
    """Client side: no server could be reached, or it answered out of protocol."""

    code = "rpc_unavailable"
    rpc_code = -32050
    fault = "server"
    retryable = True


class RpcProtocolError(WfError):
    """Client side: the server answered with a JSON-RPC protocol error."""

    code = "rpc_protocol_error"
    rpc_code = -32051
    fault = "caller"


class Overloaded(WfError):
    """Backpressure refused new work; retry after ``retry_after_s`` seconds."""

    code = "overloaded"
    rpc_code = -32040
    fault = "server"
    retryable = True

    def __init__(self, message: str, *, retry_after_s: float, **details: Any) -> None:
        super().__init__(message, retry_after_s=retry_after_s, **details)
        self.retry_after_s = retry_after_s


class Draining(WfError):
    """The server is draining for shutdown and takes no new scheduled work; retry later
    (against the next instance)."""

    code = "draining"
    rpc_code = -32043
    fault = "server"
    retryable = True


class NotLeader(WfError):
    """This server is a standby (or was just deposed): it serves no reads or writes.

    ``details`` carry ``leader_url`` (the active's advertised URL, or ``None`` while
    no node is active, for example during a takeover) and ``epoch``. Retryable:
    the clients follow ``leader_url`` or rotate through their list of servers
    (docs/ha.md)."""

    code = "not_leader"
    rpc_code = -32045
    fault = "server"
    retryable = True


class Internal(WfError):
    """An unexpected internal state; a bug to report."""

    code = "internal"
    rpc_code = -32090
    fault = "server"


class CorruptRecord(Internal):
    """A stored record failed validation; the affected object is blocked (fail closed)."""

    code = "corrupt_record"
    rpc_code = -32091


ALL_ERRORS: tuple[type[WfError], ...] = (
    WfError,
    InvalidArgument,
    InvalidCronExpression,
    InvalidTimezone,
    NaiveDatetime,
    UnknownPolicy,
    NotFound,
    AlreadyExists,
    Conflict,
    IllegalTransition,
    StaleLease,
    LeaseExpired,
    WorkerNotActive,
    Unauthorized,
    Forbidden,
    OwnershipConflict,
    StoreUnavailable,
    OwnershipLost,
    RpcUnavailable,
    RpcProtocolError,
    Overloaded,
    Draining,
    NotLeader,
    Internal,
    CorruptRecord,
)
"""Every error class, for the wire mapping and the test that codes are unique."""
