"""A worker's result carries its next poll (``poll`` on ``scheduler.leases.complete``
and ``scheduler.leases.fail``), against a real in-process server over loopback.

A busy slot's cycle is then one call and one commit (report + grant) instead of a
report, then a poll: a steady stream is worked through with far fewer
``scheduler.workers.poll`` calls, every activity runs exactly once, and grants into
idle slots are still started on grant. A server that predates the field refuses it
as invalid params: the worker sends the report again without it, and stops sending
it (docs/architecture.md, "A report carries the next poll").
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import msgspec

from wf.client.rpc_client import RpcClient
from wf.server.app import WfServer
from wf.server.config import ServerConfig, ServerSection, StoreConfig
from wf.wire.bounds import Id, NonNegI64, Payload
from wf.wire.scheduler_methods import COMPLETE_ACTIVITY
from wf.worker import Worker, activity, activity_info

STREAM = 60
SLOTS = 2
WAIT_S = 20.0


async def eventually(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def _config(root: Path) -> ServerConfig:
    return ServerConfig(
        server=ServerSection(port=0, store=StoreConfig(root=str(root), durability="process"))
    )


async def _stream(
    tmp_path: Path, prepare: Callable[[WfServer], None] | None = None, *, prefetch: int = 0
) -> tuple[Worker, Counter[str]]:
    """Submit a stream of plain (not idempotent) activities, all ready at once, to one
    worker with ``SLOTS`` slots; wait until all completed; return the worker and how
    often each activity ran. Every activity checks, as it runs, that the worker holds
    no more leases than its capacity and runs no more than its slots."""
    ran: Counter[str] = Counter()
    worker: Worker | None = None

    @activity(name="step")
    async def step(n: int) -> int:
        ran[activity_info().activity_id] += 1
        assert worker is not None
        assert len(worker.held()) <= SLOTS + prefetch, "a lease handed to a full worker"
        assert worker.executing <= SLOTS
        await asyncio.sleep(0)
        return n

    server = WfServer(_config(tmp_path / "store"))
    if prepare is not None:
        prepare(server)
    await server.start()
    url = f"http://127.0.0.1:{server.port}"
    admin = RpcClient(url)
    worker = Worker(
        url, [step], worker_id="w", max_concurrency=SLOTS, prefetch=prefetch, poll_wait_s=1.0
    )
    task = asyncio.create_task(worker.run())
    try:
        await eventually(lambda: worker.connected.is_set(), "registration")
        batch = [step.activity(f"s{i}", [i]) for i in range(STREAM)]
        await admin.call("scheduler.activities.submit", {"activities": msgspec.to_builtins(batch)})
        await eventually(lambda: worker.counters.completed == STREAM, "the stream")
    finally:
        await worker.shutdown()
        await task
        await admin.close()
        await server.stop()
    return worker, ran


def test_a_steady_stream_needs_few_polls_and_runs_everything_once(tmp_path: Path) -> None:
    async def main() -> None:
        worker, ran = await _stream(tmp_path)
        c = worker.counters
        assert ran == Counter({f"s{i}": 1 for i in range(STREAM)}), "each ran exactly once"
        assert c.completed == STREAM
        assert c.lost == 0
        assert c.reports_dropped == 0
        # Most leases came with the result before them, not from a poll of their own.
        assert c.report_polls >= STREAM - SLOTS
        assert c.report_poll_leases >= STREAM - 2 * SLOTS
        assert c.polls <= 2 * SLOTS, f"{c.polls} polls for {STREAM} activities"
        # Those grants went to slots that were idle: started on grant, no start call.
        assert c.started_on_grant == STREAM

    asyncio.run(main())


def test_with_prefetch_the_stream_stays_within_capacity_and_runs_once(tmp_path: Path) -> None:
    async def main() -> None:
        worker, ran = await _stream(tmp_path, prefetch=2)
        c = worker.counters
        assert ran == Counter({f"s{i}": 1 for i in range(STREAM)}), "each ran exactly once"
        assert c.completed == STREAM
        assert c.lost == 0
        assert c.report_poll_leases > 0
        assert c.polls < STREAM // 2, f"{c.polls} polls for {STREAM} activities"

    asyncio.run(main())


class _OldCompleteParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``scheduler.leases.complete`` as a server before ``poll`` decoded it."""

    activity_id: Id
    token: NonNegI64
    result: Payload = b""
    unreported_start: bool = False


def test_a_server_that_refuses_poll_is_detected_once_and_the_worker_polls_apart(
    tmp_path: Path,
) -> None:
    def predate_poll(server: WfServer) -> None:
        # The handler is the real one; only the decoding is the old server's.
        methods = server.registry.methods
        current = methods[COMPLETE_ACTIVITY.name]
        methods[COMPLETE_ACTIVITY.name] = dataclasses.replace(
            current,
            params=_OldCompleteParams,
            handler=lambda p, c: server.scheduler.complete_activity(
                p.activity_id, p.token, p.result, c, unreported_start=p.unreported_start
            ),
        )

    async def main() -> None:
        worker, ran = await _stream(tmp_path, predate_poll)
        c = worker.counters
        assert ran == Counter({f"s{i}": 1 for i in range(STREAM)}), "each ran exactly once"
        assert c.completed == STREAM
        assert c.lost == 0
        assert c.reports_dropped == 0
        # Refused once per slot at most (reports already on the wire), then never sent.
        assert 1 <= c.report_polls <= SLOTS
        assert c.report_poll_leases == 0
        assert c.polls >= STREAM // SLOTS  # the poll loop got every lease

    asyncio.run(main())
