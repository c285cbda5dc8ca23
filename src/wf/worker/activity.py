"""Activity definitions, the payload convention, and the context activity code sees.

Theory of operation
-------------------
``@activity`` turns a plain function (sync or ``async``) into an
:class:`ActivityDefinition`: the function plus the name workers advertise
and submissions name as ``activity_type``, whether it is idempotent (safe to
rerun after a lost worker), and the capabilities a worker needs to run it.
A worker serving the type declares its ``idempotent`` and ``retry`` when it
registers, and the server applies them to every submission of the type that
leaves them unsaid (``idempotent=None``, the default retry policy): a plain
``Activity(activity_type=...)`` submitted by any client gets the semantics the
code declares (docs/server.md, "Declared defaults").

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
worker renews the lease on its own, whether or not the code heartbeats, and
sends the latest details (JSON, at most 64 KiB) with the next renewal; the
server keeps them with the activity, shows them in ``runs.inspect`` and hands
them to the next attempt (:func:`last_heartbeat_details`), so that long work
can resume where it stopped.
Cancellation (the lease was revoked or lost) cancels an ``async`` activity's
task; sync code runs in a thread and cannot be interrupted, so it should
poll :func:`is_cancelled` (or :meth:`ActivityContext.raise_if_cancelled`)
between steps; its result is discarded either way.
"""

from __future__ import annotations

import contextvars
import inspect
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Generic, ParamSpec, TypeVar, overload

from wf.errors import InvalidArgument
from wf.scheduler.model import Activity, ActivityDefaults, RetryPolicy
from wf.wire.bounds import DURATION_MAX_S
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
    schedule_to_start_s: float | None = None
    """Most seconds a submission of the type may wait in the ready queue each time it
    is queued before the wait counts as a failed attempt (``None``: unbounded)."""
    start_to_close_s: float | None = None
    """Most seconds one attempt may execute before the server revokes its lease and
    counts it as failed (``None``: unbounded)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function directly (no worker, no context): handy in unit tests."""
        return self.fn(*args, **kwargs)

    def declared(self) -> ActivityDefaults:
        """The defaults a worker serving this type declares when it registers: the
        server applies them to submissions of the type that leave them unsaid."""
        return ActivityDefaults(
            idempotent=self.idempotent,
            retry=self.retry,
            schedule_to_start_s=self.schedule_to_start_s,
            start_to_close_s=self.start_to_close_s,
        )

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
        if self.schedule_to_start_s is not None:
            spec["schedule_to_start_s"] = self.schedule_to_start_s
        if self.start_to_close_s is not None:
            spec["start_to_close_s"] = self.start_to_close_s
        spec.update(fields)
        return Activity(
            activity_id=activity_id,
            activity_type=self.name,
            payload=encode_payload(*args, **dict(kwargs or {})),
            **spec,
        )


P = ParamSpec("P")
R_co = TypeVar("R_co", covariant=True)
R = TypeVar("R")


class TypedActivity(ActivityDefinition, Generic[P, R_co]):
    """What ``@activity`` returns: an :class:`ActivityDefinition` that keeps its
    function's parameters and return type for type checkers (calling it is calling
    the function; :func:`wf.flow.call` reads the return type)."""

    __slots__ = ()

    if TYPE_CHECKING:

        def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R_co: ...


def _seconds_or_none(name: str, value: object) -> float | None:
    """A timeout of ``@activity`` as seconds, or :class:`InvalidArgument` naming it."""
    if value is None:
        return None
    if (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 < value <= DURATION_MAX_S
    ):
        return float(value)
    raise InvalidArgument(
        f"{name} must be a number of seconds in (0, {DURATION_MAX_S:g}]", field=name
    )


@overload
def activity(fn: Callable[P, R], /) -> TypedActivity[P, R]: ...


@overload
def activity(
    *,
    name: str | None = None,
    idempotent: bool = False,
    capabilities: Iterable[str] = (),
    retry: RetryPolicy | None = None,
    schedule_to_start_s: float | None = None,
    start_to_close_s: float | None = None,
) -> Callable[[Callable[P, R]], TypedActivity[P, R]]: ...


def activity(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    idempotent: bool = False,
    capabilities: Iterable[str] = (),
    retry: RetryPolicy | None = None,
    schedule_to_start_s: float | None = None,
    start_to_close_s: float | None = None,
) -> TypedActivity[Any, Any] | Callable[[Callable[..., Any]], TypedActivity[Any, Any]]:
    """Declare an activity: ``@activity`` or ``@activity(name=..., idempotent=..., ...)``.

    ``name`` defaults to the function's ``__qualname__``. ``idempotent``: the
    activity may run again after its worker was lost mid-execution.
    ``capabilities``: what a worker must advertise to run it.

    ``retry`` is declared to the server with the worker's registration and
    applies to submissions of the type that leave their own unsaid. Without
    one the server's default applies, ``RetryPolicy()``: **3 attempts in all,
    the first retry after 1 s, each later delay doubled (x2), no delay above
    300 s**, each shortened by a deterministic jitter of up to 10 %. An
    exception fails the attempt (its type, message and formatted stack trace
    are reported and kept with the attempt); :class:`NonRetryableError` fails
    the activity at once. See docs/server.md, "Failures and retries".

    ``schedule_to_start_s`` bounds each wait in the ready queue: past it, the wait
    counts as a failed attempt (``ScheduleToStartTimeout``, retried by the policy).
    It is declared too, and written into submissions of the type that the server
    accepts while a worker declaring it is live (docs/server.md, "Declared defaults").

    ``start_to_close_s`` bounds each attempt's execution: past it, the server
    revokes the lease (async code is cancelled; sync code sees
    :func:`is_cancelled`) and the attempt fails with ``StartToCloseTimeout``,
    retried by the policy. Declared too, for the leases of the declaring worker.
    """
    start_s = _seconds_or_none("schedule_to_start_s", schedule_to_start_s)
    run_s = _seconds_or_none("start_to_close_s", start_to_close_s)

    def wrap(f: Callable[..., Any]) -> TypedActivity[Any, Any]:
        if isinstance(f, ActivityDefinition):
            raise InvalidArgument(f"{f.name!r} is already an activity")
        if not callable(f):
            raise InvalidArgument("@activity decorates a function")
        type_name = name if name is not None else f.__qualname__
        if not type_name or len(type_name) > ACTIVITY_NAME_MAX:
            raise InvalidArgument(
                f"activity name must be 1..{ACTIVITY_NAME_MAX} characters", field="name"
            )
        return TypedActivity(
            name=type_name,
            fn=f,
            is_async=inspect.iscoroutinefunction(f),
            idempotent=idempotent,
            capabilities=frozenset(capabilities),
            retry=retry,
            schedule_to_start_s=start_s,
            start_to_close_s=run_s,
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
    last_heartbeat_details: Any = None
    """The details an earlier attempt of this activity last sent to the server (see
    :func:`last_heartbeat_details`); ``None`` on a first attempt or when none did."""
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


def last_heartbeat_details() -> Any:
    """The heartbeat details an earlier attempt of the running activity last sent, so
    that long work can resume where it stopped (``None`` on the first attempt, or when
    no earlier attempt heartbeated). Details reach the server with the lease renewals
    (every third of the lease TTL) and before a failure is reported: the last ones an
    attempt recorded before its worker died may not have."""
    return current_context().last_heartbeat_details


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
