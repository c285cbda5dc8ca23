"""Activity definitions, the payload convention, and the context activity code sees.

Theory of operation
-------------------
``@activity`` turns a plain function (sync or ``async``) into an
:class:`ActivityDefinition`: the function plus the name workers advertise
and submissions name as ``activity_type``, whether it is idempotent (safe to
rerun after a lost worker), and the capabilities a worker needs to run it.

Payload convention: the scheduler treats ``Activity.payload`` as opaque
bytes; wf's worker SDK reads them as UTF-8 JSON naming the function's
arguments:

==================  ===========================================
payload             call
==================  ===========================================
``b""`` (empty)     ``fn()``
JSON array          ``fn(*array)`` (positional arguments)
JSON object         ``fn(**object)`` (keyword arguments)
anything else       refused: the attempt fails, non-retryable
==================  ===========================================

A function taking one dict therefore gets ``[{...}]``. The convention is the
wire contract's (:mod:`wf.wire.payloads`, which the run engine uses too);
:func:`encode_payload` builds payloads; :meth:`ActivityDefinition.activity`
builds a whole submission. The result a worker reports is the JSON of the return value
(``null`` for ``None``); :func:`decode_result` reads it back.

While an activity runs, a context variable holds its :class:`ActivityContext`.
:func:`heartbeat` records progress details on it: it never blocks, never does
I/O and keeps only the latest details (a tight loop may call it freely). The
worker renews the lease on its own, whether or not the code heartbeats.
Cancellation (the lease was revoked or lost) cancels an ``async`` activity's
task; sync code runs in a thread and cannot be interrupted, so it should
poll :func:`is_cancelled` (or :meth:`ActivityContext.raise_if_cancelled`)
between steps; its result is discarded either way.
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, overload

from wf.errors import InvalidArgument
from wf.scheduler.model import Activity, RetryPolicy
from wf.wire.payloads import decode_result as decode_result
from wf.wire.payloads import encode_payload as encode_payload
from wf.wire.payloads import encode_result as encode_result
from wf.wire.payloads import payload_arguments

ACTIVITY_NAME_MAX: Final = 256
"""Longest activity type name (the core's id bound)."""


class NonRetryableError(Exception):
    """Raise it (or a subclass) from activity code: the failure is reported
    ``retryable=False`` and the activity fails at once, whatever its retry budget.

    ``error_type`` on the wire is the class name, so subclasses name the cause.
    """


class ActivityCancelled(Exception):
    """Raised by :meth:`ActivityContext.raise_if_cancelled` in cancelled sync activity code."""


class InvalidPayload(NonRetryableError):
    """The payload does not follow the convention (see the module docstring)."""


# ----------------------------------------------------------------- payloads


def decode_payload(payload: bytes) -> tuple[list[Any], dict[str, Any]]:
    """``(args, kwargs)`` from a payload; :class:`InvalidPayload` if it breaks the convention."""
    try:
        return payload_arguments(payload)
    except InvalidArgument as exc:
        # Non-retryable for the worker: the same payload would be refused again.
        raise InvalidPayload(exc.message) from None


# -------------------------------------------------------------- definitions


@dataclass(frozen=True, slots=True, kw_only=True)
class ActivityDefinition:
    """A function registered as an activity type."""

    name: str
    """The ``activity_type`` workers advertise and submissions name."""
    fn: Callable[..., Any]
    """The implementation (sync functions run in the worker's thread pool)."""
    is_async: bool
    """Whether ``fn`` is a coroutine function."""
    idempotent: bool = False
    """Safe to rerun: a lost execution is requeued instead of failed closed."""
    capabilities: frozenset[str] = frozenset()
    """Capabilities a worker must advertise to run it."""
    retry: RetryPolicy | None = None
    """Retry policy for submissions built by :meth:`activity` (``None``: the core's default)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function directly (no worker, no context): handy in unit tests."""
        return self.fn(*args, **kwargs)

    def activity(
        self,
        activity_id: str,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> Activity:
        """A submission of this activity type with these arguments.

        ``fields`` are further :class:`~wf.scheduler.model.Activity` fields
        (``workflow_id``, ``tenant``, ``priority``, ``retry`` ...).
        """
        spec: dict[str, Any] = {
            "idempotent": self.idempotent,
            "capabilities": self.capabilities,
        }
        if self.retry is not None:
            spec["retry"] = self.retry
        spec.update(fields)
        return Activity(
            activity_id=activity_id,
            activity_type=self.name,
            payload=encode_payload(*args, **dict(kwargs or {})),
            **spec,
        )


@overload
def activity(fn: Callable[..., Any], /) -> ActivityDefinition: ...


@overload
def activity(
    *,
    name: str | None = None,
    idempotent: bool = False,
    capabilities: Iterable[str] = (),
    retry: RetryPolicy | None = None,
) -> Callable[[Callable[..., Any]], ActivityDefinition]: ...


def activity(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    idempotent: bool = False,
    capabilities: Iterable[str] = (),
    retry: RetryPolicy | None = None,
) -> ActivityDefinition | Callable[[Callable[..., Any]], ActivityDefinition]:
    """Declare an activity: ``@activity`` or ``@activity(name=..., idempotent=..., ...)``.

    ``name`` defaults to the function's ``__qualname__``.
    """

    def wrap(f: Callable[..., Any]) -> ActivityDefinition:
        if isinstance(f, ActivityDefinition):
            raise InvalidArgument(f"{f.name!r} is already an activity")
        if not callable(f):
            raise InvalidArgument("@activity decorates a function")
        type_name = name if name is not None else f.__qualname__
        if not type_name or len(type_name) > ACTIVITY_NAME_MAX:
            raise InvalidArgument(
                f"activity name must be 1..{ACTIVITY_NAME_MAX} characters", field="name"
            )
        return ActivityDefinition(
            name=type_name,
            fn=f,
            is_async=inspect.iscoroutinefunction(f),
            idempotent=idempotent,
            capabilities=frozenset(capabilities),
            retry=retry,
        )

    return wrap(fn) if fn is not None else wrap


# ------------------------------------------------------------------ context


@dataclass(frozen=True, slots=True, kw_only=True)
class ActivityInfo:
    """What activity code may know about the attempt it runs."""

    activity_id: str
    activity_type: str
    attempt: int
    """1 for the first execution; grows with every start, retries and requeues alike."""
    token: int
    """The lease's fencing token."""
    worker_id: str
    workflow_id: str
    correlation_id: str
    """The run's correlation id (put it on your log lines)."""
    traceparent: str | None = None
    """W3C ``traceparent`` of the server's lease span, when the server traces: make
    the activity's own span a child of it to join the activity's trace."""


@dataclass(slots=True, kw_only=True)
class ActivityContext:
    """The running attempt: its info, latest heartbeat details, cancellation flag."""

    info: ActivityInfo
    details: Any = None
    """The latest details passed to :func:`heartbeat`."""
    heartbeats: int = 0
    """How many times the code heartbeated."""
    cancel_reason: str | None = None
    """Why the attempt was cancelled (``None`` while it may go on)."""
    _cancelled: bool = field(default=False, init=False, repr=False)
    """Set once, by the worker's thread; read by activity code in any thread (a plain
    attribute: assignments are atomic and visible across threads)."""

    def heartbeat(self, details: Any = None) -> None:
        """Record progress; keeps only the latest details; never blocks."""
        self.details = details
        self.heartbeats += 1

    @property
    def cancelled(self) -> bool:
        """Whether the lease was lost and the work should stop."""
        return self._cancelled

    def cancel(self, reason: str) -> None:
        """Mark the attempt cancelled (the worker calls it; idempotent)."""
        if self.cancel_reason is None:
            self.cancel_reason = reason
        self._cancelled = True

    def raise_if_cancelled(self) -> None:
        """Raise :class:`ActivityCancelled` if the attempt was cancelled."""
        if self._cancelled:
            raise ActivityCancelled(self.cancel_reason or "cancelled")


_current: Final[contextvars.ContextVar[ActivityContext]] = contextvars.ContextVar(
    "wf_activity_context"
)


def current_context() -> ActivityContext:
    """The context of the running activity; ``RuntimeError`` outside activity code."""
    try:
        return _current.get()
    except LookupError:
        raise RuntimeError("not running inside a wf activity") from None


def heartbeat(details: Any = None) -> None:
    """Record progress details of the running activity (never blocks; latest wins)."""
    current_context().heartbeat(details)


def is_cancelled() -> bool:
    """Whether the running activity's lease was lost (sync code should then stop)."""
    return current_context().cancelled


def activity_info() -> ActivityInfo:
    """The running activity's :class:`ActivityInfo`."""
    return current_context().info


def bind_context(context: ActivityContext) -> contextvars.Token[ActivityContext]:
    """Make ``context`` current in this thread or task (worker internals)."""
    return _current.set(context)


def unbind_context(token: contextvars.Token[ActivityContext]) -> None:
    """Undo :func:`bind_context`."""
    _current.reset(token)
