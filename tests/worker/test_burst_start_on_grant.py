"""A burst of delayed activities due at one instant, on a virtual clock: the due-soon
grants reach the workers ahead of the instant, already committed as their starts, and
every slot begins its activity exactly at the instant, with no start round trip
(docs/architecture.md, "Start on grant"; ``SchedulerConfig.early_grant_s``).

A real in-process server and two real workers over loopback share one
:class:`~wf.testing.clock.VirtualClock`: the node's timers and the workers'
``not_before`` waits sleep on it, so the instant is reached only when the test moves
the clock there, and a start is exactly on time or it is not.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from wf.client.rpc_client import RpcClient
from wf.scheduler.config import SchedulerConfig
from wf.server.app import WfServer
from wf.server.config import ServerConfig, ServerSection, StoreConfig
from wf.testing.clock import VirtualClock
from wf.worker import Worker, activity, activity_info

SLOTS = 4
WORKERS = 2
BURST = 3 * SLOTS * WORKERS
"""More activities than slots: the first ``SLOTS * WORKERS`` go out ahead."""
LEAD_S = SchedulerConfig().early_grant_s
AHEAD_S = 5.0
WAIT_S = 10.0
TEST_TIMEOUT_S = 40.0


async def eventually(check: Callable[[], Awaitable[bool] | bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while True:
        ok = check()
        if not isinstance(ok, bool):
            ok = await ok
        if ok:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def test_a_burst_starts_on_every_slot_at_its_instant(tmp_path: Path) -> None:
    clock = VirtualClock(start=1_800_000_000.0)
    starts: dict[str, float] = {}

    @activity(name="burst")  # a plain activity: not idempotent
    async def burst(n: int) -> int:
        starts[activity_info().activity_id] = clock.now()
        return n

    async def main() -> None:
        config = ServerConfig(
            server=ServerSection(
                port=0, store=StoreConfig(root=str(tmp_path / "store"), durability="process")
            ),
            dispatch=SchedulerConfig(),
        )
        server = WfServer(config, clock=clock)
        await server.start()
        admin = RpcClient(f"http://127.0.0.1:{server.port}")
        workers = [
            Worker(
                f"http://127.0.0.1:{server.port}",
                [burst],
                worker_id=f"w{i}",
                max_concurrency=SLOTS,
                # Virtual time jumps seconds while heartbeats take real time: a long
                # interval keeps the liveness deadline beyond the jumps.
                heartbeat_interval_s=600.0,
                poll_wait_s=0.5,
                clock=clock,
            )
            for i in range(WORKERS)
        ]
        runs = [asyncio.create_task(w.run()) for w in workers]
        try:
            await eventually(lambda: all(w.connected.is_set() for w in workers), "registered")

            async def states() -> dict[str, str]:
                """Activity id -> state, for every lease the workers hold."""
                page = await admin.call("scheduler.workers.list", {"limit": 100})
                held = [aid for w in page["workers"] for aid in w["leases"]]
                views = await admin.batch(
                    [("scheduler.activities.get", {"activity_id": aid}) for aid in held]
                )
                return {aid: v["activity"]["state"] for aid, v in zip(held, views, strict=True)}

            due = clock.now() + AHEAD_S
            ids = [f"b-{i:02d}" for i in range(BURST)]
            await admin.call(
                "scheduler.activities.submit",
                {"activities": [burst.activity(a, args=(i,), not_before=due) for i, a in
                                enumerate(ids)]},
            )  # fmt: skip
            # The early timer's instant: one grant per slot goes out, each its own start.
            clock.advance_to(due - LEAD_S)
            ahead = SLOTS * WORKERS
            await eventually(
                lambda: sum(w.counters.early_grants for w in workers) == ahead, "early grants"
            )
            held = await states()
            assert len(held) == ahead
            assert set(held.values()) == {"executing"}  # committed as started
            assert starts == {}  # and nothing runs before the instant
            assert clock.now() < due
            # The instant: every slot begins at once, on the workers' own timers.
            clock.advance_to(due)
            await eventually(lambda: len(starts) == BURST, "the whole burst started")
            first = [starts[a] for a in held]
            assert first == [due] * ahead
            assert min(starts.values()) == due
            # Every start was its grant's own commit: no scheduler.leases.start at all.
            assert sum(w.counters.started_on_grant for w in workers) == BURST
        finally:
            for w in workers:
                await w.shutdown()
            for task in runs:
                await task
            await admin.close()
            await server.stop()

    async def bounded() -> None:
        async with asyncio.timeout(TEST_TIMEOUT_S):
            await main()

    asyncio.run(bounded())
