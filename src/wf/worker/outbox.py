"""Batching of lease calls (start, renew, complete, fail) on the wire.

Theory of operation
-------------------
Callers queue a call and await its answer. :data:`OUTBOX_IN_FLIGHT_MAX`
sender tasks take turns: an idle sender is woken by the first call queued,
takes everything queued by the time it runs and sends it as one JSON-RPC
batch (one HTTP request, and on the server one group commit); when its
answer is in, it takes whatever queued up meanwhile, or waits. With one call
at a time this costs nothing extra (one wake-up, one request); under load,
calls coalesce into batches of up to :data:`OUTBOX_BATCH_MAX` by themselves,
with no timer, and while one batch waits for the server's commit the next
is already travelling, so a call never waits a whole round trip just
because an earlier batch is still out. A batch that gets no answer (server
unreachable, timeout) fails every call in it with
:class:`~wf.errors.RpcUnavailable`; retrying is the caller's decision,
because only the caller knows whether a retry is still meaningful.

A batch goes through ``prepare`` (if given) just before it is sent: the worker
folds the next-poll requests its reports carry into one per batch there
(:meth:`~wf.worker.runtime.Worker._one_poll_per_batch`). ``prepare`` rewrites
what goes on the wire only; each caller's own parameters stay as they were, so
a call retried in a later batch is prepared afresh. Answers are handed back
last call first, so the report carrying the folded poll takes its grants
before any other report of its batch gives up its slot reservation.

Batches in flight together are independent: the worker never has two calls
about one lease outstanding whose order matters (a lease's start is answered
before its report is queued; a renewal crossing a report is harmless, since
the fencing token refuses whichever arrives second).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from typing import Any, Final

import msgspec

from wf.client.rpc_client import RpcClient
from wf.errors import Internal, RpcUnavailable, WfError

OUTBOX_BATCH_MAX: Final = 500
"""Most calls in one HTTP request (the server accepts up to 1,000)."""
OUTBOX_TIMEOUT_S: Final = 30.0
"""Longest one batch may take before its calls count as unanswered."""
OUTBOX_IN_FLIGHT_MAX: Final = 4
"""Sender tasks, so batches on the wire at once (some travel while others commit).

Four, not two: with the default four slots, a slot's report no longer waits for
a sender while two others are out, and the server's group commit gets more
reports per commit. The stock W1 of ``bench/stock_w1.py`` (2 x 4 slots), three
A B pairs on one machine: 2,590 / 2,430, 2,431 / 2,323 and 2,614 / 2,517
tasks/s, and about 5 % less CPU per task on both sides (2026-12-07)."""

_Call = tuple[str, msgspec.Struct, "asyncio.Future[Any]"]
Prepare = Callable[[list[tuple[str, msgspec.Struct]]], list[tuple[str, msgspec.Struct]]]
"""Rewrites a batch's calls just before they are sent (same length, same order)."""


class Outbox:
    """See the module docstring."""

    def __init__(
        self,
        client: RpcClient,
        *,
        timeout_s: float = OUTBOX_TIMEOUT_S,
        attempt_timeout_s: float | None = None,
        in_flight_max: int = OUTBOX_IN_FLIGHT_MAX,
        prepare: Prepare | None = None,
    ) -> None:
        self._client = client
        self._prepare = prepare
        self._timeout_s = timeout_s
        self._attempt_timeout_s = attempt_timeout_s
        """Bound of one HTTP attempt of a batch (``None``: the client's default); a
        frozen node is given up within it and the batch moves to the next node."""
        self._senders_max = max(1, in_flight_max)
        self._queue: deque[_Call] = deque()
        self._idle: deque[asyncio.Future[None]] = deque()
        """One future per idle sender; resolving it wakes that sender."""
        self._waking = False
        """A sender was woken and has not taken its batch yet (wake one per burst)."""
        self._sending: dict[asyncio.Task[Any], list[_Call]] = {}
        """The batch each busy sender has on the wire."""
        self.batches_sent = 0
        """HTTP requests made (for tests and statistics)."""
        self.calls_sent = 0
        """Calls carried by them."""

    async def call(self, method: str, params: msgspec.Struct) -> Any:
        """Queue one call; returns its result or raises its typed error."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append((method, params, future))
        if not self._waking:
            while self._idle:
                waiter = self._idle.popleft()
                if not waiter.done():
                    self._waking = True
                    waiter.set_result(None)
                    break
        return await future

    async def run(self) -> None:
        """Run the senders until cancelled; queued and unanswered calls then fail."""
        loop = asyncio.get_running_loop()
        senders = [
            loop.create_task(self._sender(), name=f"wf-outbox-sender-{n}")
            for n in range(self._senders_max)
        ]
        try:
            await asyncio.gather(*senders)
        finally:
            for sender in senders:
                sender.cancel()
            stopping = RpcUnavailable("the worker is stopping")
            for live in self._sending.values():
                _fail(live, stopping)
            self._sending.clear()
            _fail(list(self._queue), stopping)
            self._queue.clear()

    async def _sender(self) -> None:
        loop = asyncio.get_running_loop()
        me = asyncio.current_task()
        assert me is not None
        while True:
            if not self._queue:
                waiter: asyncio.Future[None] = loop.create_future()
                self._idle.append(waiter)
                try:
                    await waiter
                finally:
                    if waiter.done():
                        self._waking = False
                if not self._queue:
                    continue
            count = min(len(self._queue), OUTBOX_BATCH_MAX)
            batch = [self._queue.popleft() for _ in range(count)]
            live = [item for item in batch if not item[2].done()]
            if not live:
                continue
            self._sending[me] = live
            try:
                await self._send(live)
            except Exception as exc:  # a bug, not the network: its calls must not wait forever
                _fail(live, Internal(f"sending lease calls failed: {exc!r}"))
            finally:
                self._sending.pop(me, None)

    async def _send(self, live: list[_Call]) -> None:
        try:
            async with asyncio.timeout(self._timeout_s):
                calls = [(m, p) for m, p, _ in live]
                if self._prepare is not None:
                    calls = self._prepare(calls)
                answers = await self._client.batch(calls, timeout_s=self._attempt_timeout_s)
        except (WfError, TimeoutError) as exc:
            error = (
                exc
                if isinstance(exc, RpcUnavailable)
                else RpcUnavailable(f"lease calls got no answer: {exc!r}")
            )
            _fail(live, error)
            return
        except asyncio.CancelledError:
            _fail(live, RpcUnavailable("the worker is stopping"))
            raise
        self.batches_sent += 1
        self.calls_sent += len(live)
        # Last call first: callers resume in the order their answers are set, and a
        # batch's folded poll rides its last report, whose grants must be taken while
        # the other reports' slot reservations still hold (see ``prepare``).
        for (_, _, future), answer in reversed(list(zip(live, answers, strict=True))):
            if future.done():
                continue
            if isinstance(answer, WfError):
                future.set_exception(answer)
            else:
                future.set_result(answer)


def _fail(calls: list[_Call], error: WfError) -> None:
    for _, _, future in calls:
        if not future.done():
            future.set_exception(error)


async def stop_task(task: asyncio.Task[Any] | None) -> None:
    """Cancel a task and wait for it to end (its own errors are its business)."""
    if task is None or task.done():
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
