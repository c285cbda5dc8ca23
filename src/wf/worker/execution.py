"""Running one attempt of an activity and classifying how it ended.

:func:`execute` decodes the payload, binds the :class:`ActivityContext`,
runs the function (``async`` ones as their own task, sync ones on the
worker's activity threads, :mod:`wf.worker.threads`) and returns what the worker must report: a
:class:`Succeeded` with the encoded result, a :class:`Failed` with the
error type (the exception's class name) and whether it is retryable (not a
:class:`~wf.worker.activity.NonRetryableError`), or :class:`Abandoned` when
the attempt was cancelled because its lease was lost (nothing is reported
then: the lease is no longer the worker's to report on). A failure carries
its formatted stack trace, bounded (:func:`bounded_stack_trace`), so the
server can keep it with the attempt.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sys
import traceback
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from wf.errors import InvalidArgument
from wf.wire.bounds import NAME_LENGTH_MAX, TEXT_LENGTH_MAX, check_json_bytes
from wf.worker.activity import (
    ActivityCancelled,
    ActivityContext,
    ActivityDefinition,
    InvalidPayload,
    NonRetryableError,
    bind_context,
    decode_payload,
    encode_result,
    unbind_context,
)
from wf.worker.threads import ActivityThreads

ERROR_MESSAGE_MAX: Final = 4_000
"""Longest error message reported (longer ones are cut)."""
STACK_TRACE_MAX: Final = TEXT_LENGTH_MAX
"""Longest stack trace reported, in characters (longer ones lose their middle)."""


@dataclass(frozen=True, slots=True)
class Succeeded:
    """Report ``scheduler.leases.complete`` with this result."""

    result: bytes


@dataclass(frozen=True, slots=True)
class Failed:
    """Report ``scheduler.leases.fail``."""

    error_type: str
    message: str
    retryable: bool
    stack_trace: str = ""
    """The formatted stack trace (bounded), or empty when there is none."""


@dataclass(frozen=True, slots=True)
class Abandoned:
    """The lease was lost; report nothing."""

    reason: str


Ending = Succeeded | Failed | Abandoned


_CONTROL: Final = dict.fromkeys([*range(0x20), 0x7F], "?")


def bounded_stack_trace(text: str, length_max: int = STACK_TRACE_MAX) -> str:
    """``text`` as the server accepts it: valid UTF-8 (lone surrogates escaped), no
    NUL, and at most ``length_max`` characters, trimmed in the middle so that both the
    outermost frames and the innermost frame with the exception survive."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\0")
    if len(text) <= length_max:
        return text
    keep = max(0, length_max - 64)  # 64: room for the marker below
    marker = f"\n... {len(text) - keep} characters trimmed ...\n"[:length_max]
    # A trace lists the innermost frames and the exception's line last: the tail
    # keeps two thirds, the outermost frames the rest.
    head = keep // 3
    return text[:head] + marker + text[len(text) - (keep - head) :]


_RUNNER_DIRS: Final = tuple(
    os.path.dirname(module.__file__ or "") + os.sep
    for module in (sys.modules[__name__], concurrent.futures, asyncio)
)
"""Where the frames that run an activity live, not the activity itself: this package
(the executor), the stdlib's thread pool and asyncio. ``concurrent.futures``' folder
is ``concurrent/futures/``, which holds ``thread.py``."""


def _from_the_activity_inward(stack: traceback.StackSummary) -> traceback.StackSummary:
    """``stack`` without its leading frames of the machinery that ran the activity: the
    user's trace starts at their own function. A stack of nothing else (the worker's
    own failure, e.g. a payload it could not decode) is kept whole."""
    for index, frame in enumerate(stack):
        if not frame.filename.startswith(_RUNNER_DIRS):
            return traceback.StackSummary.from_list(list(stack)[index:]) if index else stack
    return stack


def format_activity_trace(exc: BaseException) -> str:
    """``exc``'s trace as Python prints it, chained causes and contexts included, but
    each exception's stack starting at the activity's own frames (see
    :func:`_from_the_activity_inward`); not bounded."""
    top = traceback.TracebackException.from_exception(exc)
    pending = [top]
    seen: set[int] = set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        current.stack = _from_the_activity_inward(current.stack)
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return "".join(top.format())


def _format_trace(exc: BaseException) -> str:
    try:
        return bounded_stack_trace(format_activity_trace(exc))
    except Exception:  # a hostile __str__ or __repr__: the failure is still reported
        return ""


def _failed(exc: BaseException) -> Failed:
    # The server refuses NUL in text and control characters in names (wf.wire.bounds);
    # an exception's own words must never make its failure unreportable.
    message = str(exc).encode("utf-8", "backslashreplace").decode("utf-8")
    message = message.replace("\x00", "\\0")
    if len(message) > ERROR_MESSAGE_MAX:
        message = message[: ERROR_MESSAGE_MAX - 3] + "..."
    return Failed(
        error_type=type(exc).__name__.translate(_CONTROL)[:NAME_LENGTH_MAX] or "Error",
        message=message,
        retryable=not isinstance(exc, NonRetryableError),
        stack_trace=_format_trace(exc),
    )


def _call_sync(
    defn: ActivityDefinition, context: ActivityContext, args: list[Any], kwargs: dict[str, Any]
) -> Any:
    token = bind_context(context)
    try:
        return defn.fn(*args, **kwargs)
    finally:
        unbind_context(token)


async def _call_async(
    defn: ActivityDefinition, context: ActivityContext, args: list[Any], kwargs: dict[str, Any]
) -> Any:
    # A task runs in its own copy of the context: binding here touches nothing else.
    bind_context(context)
    return await defn.fn(*args, **kwargs)


async def execute(
    defn: ActivityDefinition | None,
    context: ActivityContext,
    payload: bytes,
    executor: ActivityThreads | Executor | None,
    on_task: Callable[[asyncio.Task[Any]], None],
) -> Ending:
    """Run one attempt (see the module docstring).

    ``on_task`` receives an ``async`` activity's task so that the worker can
    cancel it; sync activities are cancelled through ``context`` only.
    """
    info = context.info
    if defn is None:
        return Failed(
            error_type="UnknownActivityType",
            message=f"this worker has no activity {info.activity_type!r}",
            retryable=True,
        )
    try:
        args, kwargs = decode_payload(payload)
    except InvalidPayload as exc:
        return _failed(exc)
    if defn.is_async:
        task = asyncio.create_task(
            _call_async(defn, context, args, kwargs), name=f"wf-activity-{info.activity_id}"
        )
        on_task(task)
        # Awaited directly (no asyncio.wait and its extra future): cancelling the
        # caller cancels the task; a caller that is not itself being cancelled
        # sees CancelledError only because the task alone was cancelled.
        caller = asyncio.current_task()
        try:
            value = await task
        except asyncio.CancelledError:
            if not task.done():
                task.cancel()
                raise
            if caller is not None and caller.cancelling():
                raise
            if context.cancelled:
                return Abandoned(context.cancel_reason or "cancelled")
            return Failed(
                error_type="CancelledError", message="the activity cancelled itself", retryable=True
            )
        except BaseException as error:  # the activity's own failure, whatever its type
            if caller is not None and caller.cancelling():
                raise asyncio.CancelledError() from error
            if context.cancelled:
                return Abandoned(context.cancel_reason or "cancelled")
            return _failed(error)
        if caller is not None and caller.cancelling():
            # The caller was cancelled but the activity swallowed it and returned.
            raise asyncio.CancelledError()
    else:
        assert executor is not None, "sync activities need the worker's thread pool"
        loop = asyncio.get_running_loop()
        try:
            if isinstance(executor, ActivityThreads):
                value = await executor.run(loop, _call_sync, defn, context, args, kwargs)
            else:
                value = await loop.run_in_executor(
                    executor, _call_sync, defn, context, args, kwargs
                )
        except ActivityCancelled:
            return Abandoned(context.cancel_reason or "cancelled")
        except Exception as exc:
            if context.cancelled:
                return Abandoned(context.cancel_reason or "cancelled")
            return _failed(exc)
    if context.cancelled:
        return Abandoned(context.cancel_reason or "cancelled")
    try:
        return Succeeded(check_json_bytes(encode_result(value), "result"))
    except (TypeError, RecursionError, msgspec.EncodeError) as exc:
        return Failed(
            error_type="ResultNotSerializable",
            message=f"the return value is not JSON-serializable: {exc}"[:ERROR_MESSAGE_MAX],
            retryable=False,
        )
    except InvalidArgument as exc:
        # Checked here, at the edge of the process that produced it: the server would
        # refuse the same result, and the attempt would be lost instead of failed.
        return Failed(
            error_type="ResultOutOfBounds",
            message=f"the return value is out of bounds: {exc.message}",
            retryable=False,
        )
