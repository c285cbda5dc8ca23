"""Unit tests for one activity: run it with a fake context, no server, no worker.

Theory of operation
-------------------
:class:`ActivityEnvironment` (Temporal's ``ActivityEnvironment`` idea) runs an
``@activity`` function the way a worker runs one attempt, minus the network:
it binds an :class:`~wf.worker.activity.ActivityContext` (so
:func:`~wf.worker.heartbeat`, :func:`~wf.worker.activity_info`,
:func:`~wf.worker.is_cancelled` and :func:`~wf.worker.last_heartbeat_details`
work inside the code), runs ``async`` functions as their own task and sync ones
in a thread, and records every heartbeat's details in order.

Cancellation is the worker's: :meth:`ActivityEnvironment.cancel` marks the
context cancelled and cancels an ``async`` activity's task, so ``async`` code
sees :class:`asyncio.CancelledError` at its next ``await`` and sync code sees
:func:`~wf.worker.is_cancelled` (or :meth:`~wf.worker.ActivityContext.raise_if_cancelled`
raising :class:`~wf.worker.ActivityCancelled`). As on a worker, a cancelled
attempt's result is discarded: :meth:`~ActivityEnvironment.run` raises
:class:`~wf.worker.ActivityCancelled` however the code ended.

Two ways to run:

- :meth:`~ActivityEnvironment.run` calls the function with the arguments as
  given and returns its value or raises its exception: for asserting on what the
  code does;
- :meth:`~ActivityEnvironment.execute` goes through the worker's own path
  (:func:`wf.worker.execution.execute`): the arguments become the JSON payload a
  run would send, and the answer is what the worker would report, a
  ``Succeeded`` with the JSON result, a ``Failed`` with error type, message and
  whether it is retried, or ``Abandoned`` when cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final

from wf.worker import (
    ActivityCancelled,
    ActivityContext,
    ActivityDefinition,
    ActivityInfo,
    activity,
    encode_payload,
)
from wf.worker.activity import bind_context, unbind_context
from wf.worker.execution import Ending, execute

DEFAULT_CANCEL_REASON: Final = "cancelled"
"""The reason :meth:`ActivityEnvironment.cancel` gives unless told otherwise."""
HEARTBEAT_WAIT_S: Final = 10.0
"""Longest (real) wait of :meth:`ActivityEnvironment.wait_for_heartbeats`."""
_POLL_S: Final = 0.001


@dataclass(slots=True, kw_only=True)
class _RecordingContext(ActivityContext):
    """An activity context that also tells the environment of every heartbeat."""

    on_heartbeat: Callable[[Any], None] = field(default=lambda details: None, repr=False)

    def heartbeat(self, details: Any = None) -> None:
        # Explicit base call: a slots dataclass cannot use zero-argument super().
        ActivityContext.heartbeat(self, details)
        self.on_heartbeat(details)


class ActivityEnvironment:
    """Runs one activity at a time with a fake context (see the module docstring).

    The attempt's :class:`~wf.worker.ActivityInfo` is made from the arguments
    (``attempt`` 2 and ``last_heartbeat_details`` test resuming a retried attempt);
    ``on_heartbeat`` is called with each heartbeat's details, in the activity's
    thread (a sync activity's is not the event loop's). One environment may run
    several activities one after the other; :attr:`heartbeats` restarts with each.
    """

    def __init__(
        self,
        *,
        attempt: int = 1,
        last_heartbeat_details: Any = None,
        activity_id: str = "activity-1",
        workflow_id: str = "test-workflow",
        correlation_id: str = "test-correlation",
        worker_id: str = "test-worker",
        token: int = 1,
        on_heartbeat: Callable[[Any], None] | None = None,
    ) -> None:
        self.attempt = attempt
        self.last_heartbeat_details = last_heartbeat_details
        self.activity_id = activity_id
        self.workflow_id = workflow_id
        self.correlation_id = correlation_id
        self.worker_id = worker_id
        self.token = token
        self.on_heartbeat = on_heartbeat
        self.heartbeats: list[Any] = []
        """Every heartbeat's details of the current (or last) run, oldest first."""
        self.context: ActivityContext | None = None
        """The current (or last) run's context: ``cancel_reason``, ``details`` ..."""
        self._lock = threading.Lock()
        self._cancel_reason: str | None = None
        self._task: asyncio.Task[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running = False
        self._runs = 0
        """Runs begun so far: tells a run's heartbeats from an earlier run's."""

    # ------------------------------------------------------------ running

    async def run(
        self, fn: ActivityDefinition | Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` as one attempt; return its value or raise its
        exception (:class:`~wf.worker.ActivityCancelled` if it was cancelled).

        ``fn`` is an ``@activity`` (or a plain function, declared on the fly).
        """
        defn = _definition(fn)
        context = self._begin(defn)
        self._loop = asyncio.get_running_loop()
        try:
            if defn.is_async:
                value = await self._run_async(defn, context, args, kwargs)
            else:
                try:
                    value = await self._loop.run_in_executor(
                        None, _call_sync, defn, context, args, kwargs
                    )
                except ActivityCancelled:
                    raise ActivityCancelled(context.cancel_reason or "cancelled") from None
                except Exception as exc:
                    if context.cancelled:
                        raise ActivityCancelled(context.cancel_reason or "cancelled") from exc
                    raise
        finally:
            self._end()
        if context.cancelled:
            # As on a worker: the result of a cancelled attempt is discarded.
            raise ActivityCancelled(context.cancel_reason or "cancelled")
        return value

    def run_sync(
        self, fn: ActivityDefinition | Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        """:meth:`run` in a fresh event loop, for tests without an asyncio plugin (not
        inside a running loop)."""
        return asyncio.run(self.run(fn, *args, **kwargs))

    async def execute(
        self, fn: ActivityDefinition | Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Ending:
        """Run one attempt through the worker's own path and return what the worker
        would report (``Succeeded``, ``Failed`` or ``Abandoned``, from
        :mod:`wf.worker.execution`); the arguments go through the JSON payload."""
        defn = _definition(fn)
        payload = encode_payload(*args, **kwargs)
        context = self._begin(defn)
        self._loop = asyncio.get_running_loop()

        def keep(task: asyncio.Task[Any]) -> None:
            with self._lock:
                self._task = task
            if context.cancelled:
                task.cancel()

        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wf-activity-env")
        try:
            return await execute(defn, context, payload, executor, keep)
        finally:
            self._end()
            executor.shutdown(wait=False)

    # ------------------------------------------------------------ cancelling

    def cancel(self, reason: str = DEFAULT_CANCEL_REASON) -> None:
        """Cancel the running attempt as a worker does when its lease is lost: the
        context is marked cancelled (sync code sees it) and an ``async`` activity's
        task is cancelled. Safe from any thread (an ``on_heartbeat`` callback
        included); before a run, the next run starts cancelled."""
        with self._lock:
            self._cancel_reason = self._cancel_reason or reason
            context, task, loop = self.context, self._task, self._loop
        if context is not None:
            context.cancel(reason)
        if task is not None and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(task.cancel)

    async def wait_for_heartbeats(
        self, count: int = 1, timeout_s: float = HEARTBEAT_WAIT_S
    ) -> None:
        """Wait (in real time, at most ``timeout_s``) until the running activity, or
        the next one to run, has heartbeated ``count`` times; :class:`TimeoutError`
        otherwise. For cancelling mid-run from the test: start :meth:`run` as a
        task, wait, :meth:`cancel`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        with self._lock:
            run = self._runs if self._running else self._runs + 1
        while self._runs < run or len(self.heartbeats) < count:
            if loop.time() > deadline:
                raise TimeoutError(
                    f"{len(self.heartbeats)} heartbeats of {count} within {timeout_s} s"
                )
            await asyncio.sleep(_POLL_S)

    # ------------------------------------------------------------ internals

    def _begin(self, defn: ActivityDefinition) -> ActivityContext:
        info = ActivityInfo(
            activity_id=self.activity_id,
            activity_type=defn.name,
            attempt=self.attempt,
            token=self.token,
            worker_id=self.worker_id,
            workflow_id=self.workflow_id,
            correlation_id=self.correlation_id,
        )
        context = _RecordingContext(
            info=info,
            last_heartbeat_details=self.last_heartbeat_details,
            on_heartbeat=self._heartbeated,
        )
        with self._lock:
            if self._running:
                raise RuntimeError("an ActivityEnvironment runs one activity at a time")
            self._running = True
            self._runs += 1
            self.heartbeats = []
            self.context = context
            if self._cancel_reason is not None:
                context.cancel(self._cancel_reason)
        return context

    def _end(self) -> None:
        with self._lock:
            self._task = None
            self._cancel_reason = None
            self._running = False

    def _heartbeated(self, details: Any) -> None:
        self.heartbeats.append(details)
        if self.on_heartbeat is not None:
            self.on_heartbeat(details)

    async def _run_async(
        self,
        defn: ActivityDefinition,
        context: ActivityContext,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        async def call() -> Any:
            # A task runs in its own copy of the context: binding touches nothing else.
            bind_context(context)
            return await defn.fn(*args, **kwargs)

        task = asyncio.create_task(call(), name=f"wf-activity-env-{self.activity_id}")
        with self._lock:
            self._task = task
        if context.cancelled:
            task.cancel()
        try:
            return await task
        except asyncio.CancelledError:
            if not task.done():  # the test itself was cancelled: so is the activity
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
                raise
            if context.cancelled:
                raise ActivityCancelled(context.cancel_reason or "cancelled") from None
            raise
        except Exception as exc:
            if context.cancelled:
                raise ActivityCancelled(context.cancel_reason or "cancelled") from exc
            raise


def _definition(fn: ActivityDefinition | Callable[..., Any]) -> ActivityDefinition:
    return fn if isinstance(fn, ActivityDefinition) else activity(fn)


def _call_sync(
    defn: ActivityDefinition,
    context: ActivityContext,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    token = bind_context(context)
    try:
        return defn.fn(*args, **kwargs)
    finally:
        unbind_context(token)
