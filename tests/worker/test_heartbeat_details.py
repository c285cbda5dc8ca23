"""Heartbeat details leave the worker (issue 17): coalesced and bounded on the worker,
sent with lease renewals, kept with the activity by the server, shown by
``runs.inspect`` and handed to the next attempt (``last_heartbeat_details``).

The in-process tests run a real :class:`~wf.worker.Worker` against a real
``WfServer`` over HTTP, with a short lease TTL so that renewals come every
0.2 s; the whole path with a failed attempt and ``wf runs inspect`` is in
``tests/e2e/test_e2e_failures.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import msgspec
import pytest

from wf.client.rpc_client import RpcClient
from wf.errors import InvalidArgument, StaleLease
from wf.scheduler.config import SchedulerConfig
from wf.scheduler.outputs import Lease, LeaseGranted
from wf.server.app import WfServer
from wf.server.config import ServerConfig, ServerSection, StoreConfig
from wf.wire.bounds import DETAILS_BYTES_MAX
from wf.worker import Worker, activity, heartbeat
from wf.worker.activity import ActivityContext, ActivityInfo
from wf.worker.leases import HeldLease

TEST_TIMEOUT_S = 30.0
WAIT_S = 10.0


# ------------------------------------------------------------ worker side


def _held() -> HeldLease:
    lease = Lease(
        lease_id="lease-7",
        worker_id="w1",
        activity_id="a1",
        token=7,
        granted_at=0.0,
        expires_at=30.0,
        renewable=True,
        attempt=1,
    )
    grant = LeaseGranted(
        lease=lease, activity_type="t", workflow_id="", correlation_id="", payload=b""
    )
    info = ActivityInfo(
        activity_id="a1", activity_type="t", attempt=1, token=7, worker_id="w1",
        workflow_id="", correlation_id="",
    )  # fmt: skip
    return HeldLease(grant=grant, context=ActivityContext(info=info))


def test_only_the_latest_details_go_and_only_once() -> None:
    held = _held()
    assert held.renewal().details is None  # never heartbeated: a bare renewal
    held.context.heartbeat({"step": 1})
    held.context.heartbeat({"step": 2})
    first = held.renewal()
    assert (first.activity_id, first.token) == ("a1", 7)
    assert first.details is not None
    assert msgspec.json.decode(first.details) == {"step": 2}
    assert held.renewal().details is None  # nothing new since
    held.context.heartbeat({"step": 3})
    later = held.renewal().details
    assert later is not None
    assert msgspec.json.decode(later) == {"step": 3}


def test_details_out_of_bounds_are_dropped_and_said() -> None:
    held = _held()
    held.context.heartbeat("x" * DETAILS_BYTES_MAX)
    assert held.renewal().details is None
    assert held.details_refused is not None
    assert "larger than" in held.details_refused
    held.context.heartbeat(object())  # not JSON
    assert held.renewal().details is None
    assert "not JSON-serializable" in (held.details_refused or "")
    held.context.heartbeat({"ok": True})
    assert held.renewal().details == b'{"ok":true}'
    assert held.details_refused is None


# ------------------------------------------------------------ server side


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(TEST_TIMEOUT_S):
            await main()

    asyncio.run(bounded())


async def eventually(check: Callable[[], Any], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while True:
        ok = check()
        if asyncio.iscoroutine(ok):
            ok = await ok
        if ok:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def server_and_admin(tmp_path: Path) -> AsyncIterator[tuple[WfServer, RpcClient]]:
    config = ServerConfig(
        server=ServerSection(
            port=0, store=StoreConfig(root=str(tmp_path / "store"), durability="process")
        ),
        dispatch=SchedulerConfig(lease_ttl_s=0.6),
    )
    server = WfServer(config)
    await server.start()
    admin = RpcClient(f"http://127.0.0.1:{server.port}")
    try:
        yield server, admin
    finally:
        await admin.close()
        await server.stop()


def test_renewals_carry_the_details_to_the_store(tmp_path: Path) -> None:
    gate = asyncio.Event()

    @activity(name="steps")
    async def steps() -> str:
        heartbeat({"step": 1})
        heartbeat({"step": 2})
        await gate.wait()
        return "done"

    async def main() -> None:
        async with server_and_admin(tmp_path) as (server, admin):
            worker = Worker(
                f"http://127.0.0.1:{server.port}",
                [steps],
                heartbeat_interval_s=0.2,
                poll_wait_s=0.5,
            )
            task = asyncio.create_task(worker.run())
            try:
                await admin.call(
                    "scheduler.activities.submit",
                    {"activities": [{"activity_id": "s1", "activity_type": "steps"}]},
                )

                async def stored() -> bool:
                    return await server.node.store.heartbeat_details("s1") == b'{"step":2}'

                await eventually(stored, "the details in the store")
                # The worker's own call for them is fenced: a stale token is refused.
                context = worker.context_of("s1")
                assert context is not None
                token = context.info.token
                with pytest.raises(StaleLease):
                    await admin.call(
                        "scheduler.leases.details", {"activity_id": "s1", "token": token + 1}
                    )
                answer = await admin.call(
                    "scheduler.leases.details", {"activity_id": "s1", "token": token}
                )
                assert answer["details"] is not None
                # Details that are not one JSON document are refused at the edge.
                with pytest.raises(InvalidArgument):
                    await admin.call(
                        "scheduler.leases.renew",
                        {"activity_id": "s1", "token": token, "details": "bm90IGpzb24="},
                    )
            finally:
                gate.set()
                await worker.shutdown()
                await task

    run(main)
