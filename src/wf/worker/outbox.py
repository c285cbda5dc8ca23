"""Batching of lease calls (start, renew, complete, fail) on the wire.

Theory of operation
-------------------
Callers queue a call and await its answer. One sender task sends whatever
is queued as one JSON-RPC batch (one HTTP request, and on the server one
group commit), waits for the answer, then sends whatever queued up in the
meantime. With one call at a time this costs nothing extra; under load,
calls coalesce into batches of up to :data:`OUTBOX_BATCH_MAX` by
themselves, with no timer. A batch that gets no answer (server unreachable,
timeout) fails every call in it with :class:`~wf.errors.RpcUnavailable`;
retrying is the caller's decision, because only the caller knows whether a
retry is still meaningful.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import Any, Final

from wf.client.rpc_client import RpcClient
from wf.errors import RpcUnavailable, WfError

OUTBOX_BATCH_MAX: Final = 500
"""Most calls in one HTTP request (the server accepts up to 1,000)."""
OUTBOX_TIMEOUT_S: Final = 30.0
"""Longest one batch may take before its calls count as unanswered."""


class Outbox:
    """See the module docstring."""

    def __init__(self, client: RpcClient, *, timeout_s: float = OUTBOX_TIMEOUT_S) -> None:
        self._client = client
        self._timeout_s = timeout_s
        self._queue: deque[tuple[str, dict[str, Any], asyncio.Future[Any]]] = deque()
        self._wake = asyncio.Event()
        self.batches_sent = 0
        """HTTP requests made (for tests and statistics)."""
        self.calls_sent = 0
        """Calls carried by them."""

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        """Queue one call; returns its result or raises its typed error."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append((method, params, future))
        self._wake.set()
        return await future

    async def run(self) -> None:
        """The sender loop (runs until cancelled; queued calls then fail)."""
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._queue:
                    await self._send_one_batch()
        finally:
            while self._queue:
                _, _, future = self._queue.popleft()
                if not future.done():
                    future.set_exception(RpcUnavailable("the worker is stopping"))

    async def _send_one_batch(self) -> None:
        count = min(len(self._queue), OUTBOX_BATCH_MAX)
        batch = [self._queue.popleft() for _ in range(count)]
        live = [item for item in batch if not item[2].done()]
        if not live:
            return
        try:
            async with asyncio.timeout(self._timeout_s):
                answers = await self._client.batch([(m, p) for m, p, _ in live])
        except (WfError, TimeoutError) as exc:
            error = (
                exc
                if isinstance(exc, RpcUnavailable)
                else RpcUnavailable(f"lease calls got no answer: {exc!r}")
            )
            for _, _, future in live:
                if not future.done():
                    future.set_exception(error)
            return
        except asyncio.CancelledError:
            for _, _, future in live:
                if not future.done():
                    future.set_exception(RpcUnavailable("the worker is stopping"))
            raise
        self.batches_sent += 1
        self.calls_sent += len(live)
        for (_, _, future), answer in zip(live, answers, strict=True):
            if future.done():
                continue
            if isinstance(answer, WfError):
                future.set_exception(answer)
            else:
                future.set_result(answer)


async def stop_task(task: asyncio.Task[Any] | None) -> None:
    """Cancel a task and wait for it to end (its own errors are its business)."""
    if task is None or task.done():
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
