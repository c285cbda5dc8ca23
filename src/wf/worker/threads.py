"""The threads a worker runs its sync (``def``) activities on.

Theory of operation
-------------------
A sync activity may block, so it runs off the event loop, on a thread of its
own. ``loop.run_in_executor`` with a :class:`~concurrent.futures.ThreadPoolExecutor`
does that through two futures per call: the executor's, which takes a lock
and a condition to set, and the asyncio future chained to it, each with its
callbacks; in a py-spy profile of the stock W1 of ``bench/stock_w1.py`` that
machinery held the GIL for about a tenth of a worker's time per activity, for
a body that does nothing (no A/B of the two has been run yet).

:class:`ActivityThreads` keeps only what the worker needs: a job (the loop,
the asyncio future, the function and its arguments) goes into one
:class:`queue.SimpleQueue`; an idle thread takes it, runs the function and
hands the result or the exception back with one ``call_soon_threadsafe``.
Threads start on demand, one per job running at once, at most
``max_threads`` (the worker's slots), and are daemons: like the executor's
threads after ``shutdown(wait=False)``, one still running a body that never
returns does not keep the process alive.

Cancelling the awaited future does not stop a body that has started (no
thread can be stopped from outside); the body's outcome is then dropped. A
job still queued when :meth:`ActivityThreads.shutdown` is called is never
run: its future is cancelled, as ``cancel_futures=True`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, Final

_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]
_STOP: Final = None


class ActivityThreads:
    """See the module docstring."""

    def __init__(self, max_threads: int, *, name_prefix: str = "wf-activity") -> None:
        self.max_threads = max(1, max_threads)
        self._name_prefix = name_prefix
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._running = 0
        """Jobs handed out and not settled yet (counted on the loop's thread only)."""
        self._closed = False

    def run(
        self, loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any
    ) -> asyncio.Future[Any]:
        """Run ``fn(*args)`` on one of the threads; the future settles with its outcome.
        Called on ``loop``'s thread."""
        future: asyncio.Future[Any] = loop.create_future()
        if self._closed:
            future.cancel()
            return future
        self._running += 1
        future.add_done_callback(self._settled)
        self._jobs.put((loop, future, fn, args))
        if self._running > len(self._threads) and len(self._threads) < self.max_threads:
            thread = threading.Thread(
                target=self._serve,
                name=f"{self._name_prefix}_{len(self._threads)}",
                daemon=True,
            )
            self._threads.append(thread)
            thread.start()
        return future

    def shutdown(self) -> None:
        """Run no job not started yet (their futures are cancelled) and let every idle
        thread end; a body still running finishes on its daemon thread."""
        self._closed = True
        for _ in self._threads:
            self._jobs.put(_STOP)

    def _settled(self, _: asyncio.Future[Any]) -> None:
        self._running -= 1

    def _serve(self) -> None:
        jobs = self._jobs
        while True:
            job = jobs.get()
            if job is _STOP:
                return
            loop, future, fn, args = job
            if self._closed:
                with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                    loop.call_soon_threadsafe(_cancel, future)
                continue
            try:
                value = fn(*args)
            except BaseException as exc:  # the body's own failure, whatever its type
                outcome: tuple[Any, BaseException | None] = (None, exc)
            else:
                outcome = (value, None)
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
                loop.call_soon_threadsafe(_settle, future, outcome)


def _settle(future: asyncio.Future[Any], outcome: tuple[Any, BaseException | None]) -> None:
    if future.done():  # its caller stopped waiting: the outcome is dropped
        return
    value, error = outcome
    if error is None:
        future.set_result(value)
    elif isinstance(error, StopIteration):
        # A future refuses StopIteration (it would end the awaiting coroutine as if
        # it had returned): the attempt fails with it as the cause instead.
        wrapped = RuntimeError(f"the activity raised StopIteration: {error!r}")
        wrapped.__cause__ = error
        future.set_exception(wrapped)
    else:
        future.set_exception(error)


def _cancel(future: asyncio.Future[Any]) -> None:
    if not future.done():
        future.cancel()
