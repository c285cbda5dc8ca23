"""The worker follows the active node of a cluster and keeps its leases across the move.

Two aiohttp stand-ins play two nodes of one cluster (a fake of the *server*;
the worker, its client and its sockets are the real ones). They share one
scripted scheduler: a single lease to grant, and the record of every call
each node received. A node either serves or is a standby answering
``not_leader`` that names the other; a test flips a node's role while the
worker runs, as a takeover does, and then reads what the worker sent where:
the ``held`` leases of each registration, the polls, the reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest
from aiohttp import web

from wf.errors import NotLeader, StaleLease, WfError, WorkerNotActive
from wf.scheduler.model import Lease
from wf.scheduler.outputs import LeaseGranted
from wf.wire.scheduler_methods import PollResult, RegisterResult
from wf.worker import Worker, activity

TEST_BOUND_S = 20.0
"""Bound of one whole test's event loop."""
WAIT_S = 10.0
"""Bound of one ``eventually`` wait."""
TOKEN = 7
ACTIVITY_ID = "slow-1"


@dataclass
class Cluster:
    """What the two stand-ins share: the lease to grant and the calls received."""

    grant_on: str = "a"
    """The node whose first poll gets the lease."""
    granted: bool = False
    calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    """``(node, method, params)`` of every call, in arrival order."""
    refuse: dict[tuple[str, str], WfError] = field(default_factory=dict)
    """``(node, method)`` -> an error that node answers once."""
    reset: set[tuple[str, str]] = field(default_factory=set)
    """``(node, method)``: the node drops the connection once, after reading the call,
    and becomes a standby (it died with the call applied or not)."""
    long_poll_release: asyncio.Event = field(default_factory=asyncio.Event)

    def received(self, node: str, method: str) -> list[dict[str, Any]]:
        return [p for n, m, p in self.calls if n == node and m == method]


@dataclass
class Node:
    name: str
    cluster: Cluster
    standby: bool = False
    peer_url: str | None = None
    url: str = ""
    hold_polls: bool = False
    """Keep polls open until the node turns standby (a deposed node answers them then)."""
    role_changed: asyncio.Event = field(default_factory=asyncio.Event)

    def turn_standby(self) -> None:
        self.standby = True
        self.role_changed.set()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        batch = msgspec.json.decode(await request.read())
        answers = []
        for call in batch:
            method, params = call["method"], call["params"]
            self.cluster.calls.append((self.name, method, params))
            if (self.name, method) in self.cluster.reset:
                self.cluster.reset.discard((self.name, method))
                self.turn_standby()
                assert request.transport is not None
                request.transport.abort()
                return web.Response()
            if method == "scheduler.workers.poll" and self.hold_polls and not self.standby:
                await self.role_changed.wait()
            answers.append(await self.answer(call["id"], method, params))
        return web.json_response(answers)

    async def answer(self, call_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        error: WfError | None = self.cluster.refuse.pop((self.name, method), None)
        if self.standby:
            error = NotLeader("standby", leader_url=self.peer_url, epoch=2)
        if error is not None:
            data = error.to_dict()
            return {
                "jsonrpc": "2.0",
                "id": call_id,
                "error": {"code": error.rpc_code, "message": error.message, "data": data},
            }
        return {"jsonrpc": "2.0", "id": call_id, "result": await self.result(method, params)}

    async def result(self, method: str, params: dict[str, Any]) -> Any:
        if method == "scheduler.workers.register":
            return msgspec.to_builtins(
                RegisterResult(
                    worker_id=params["info"]["worker_id"], lease_ttl_s=30.0, heartbeat_misses_max=3
                )
            )
        if method == "scheduler.workers.heartbeat":
            return {"revoked": []}
        if method == "scheduler.workers.poll":
            leases = []
            if self.name == self.cluster.grant_on and not self.cluster.granted:
                self.cluster.granted = True
                leases.append(_grant(params["worker_id"]))
            else:
                await asyncio.sleep(0.02)  # an empty long poll, kept short
            return msgspec.to_builtins(PollResult(leases=leases, revoked=[]))
        if method == "scheduler.leases.renew":
            return {"expires_at": 1e9}
        if method == "scheduler.workers.shutdown":
            return {"returned": 0}
        return None  # leases.start, leases.complete, leases.fail


def _grant(worker_id: str) -> LeaseGranted:
    lease = Lease(
        lease_id=f"lease-{TOKEN}",
        worker_id=worker_id,
        activity_id=ACTIVITY_ID,
        token=TOKEN,
        granted_at=0.0,
        expires_at=1e9,
        renewable=True,
        attempt=1,
    )
    return LeaseGranted(
        lease=lease,
        activity_type="slow",
        workflow_id="",
        correlation_id="c-1",
        payload=b"[]",
    )


@contextlib.asynccontextmanager
async def two_nodes(cluster: Cluster) -> AsyncIterator[tuple[Node, Node]]:
    a, b = Node("a", cluster), Node("b", cluster)
    runners: list[web.AppRunner] = []
    try:
        for node in (a, b):
            app = web.Application()
            app.router.add_post("/rpc", node.handle)
            runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            runners.append(runner)
            node.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        a.peer_url, b.peer_url = b.url, a.url
        yield a, b
    finally:
        for node in (a, b):
            node.role_changed.set()
        for runner in runners:
            await runner.cleanup()


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(TEST_BOUND_S):
            await main()

    asyncio.run(bounded())


async def eventually(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[Worker]:
    task = asyncio.create_task(worker.run())
    try:
        yield worker
    finally:
        await worker.shutdown()
        await task


def slow_activity(gate: asyncio.Event) -> Any:
    @activity(name="slow")
    async def slow() -> str:
        await gate.wait()
        return "done"

    return slow


def make_worker(nodes: tuple[Node, Node], gate: asyncio.Event, **kw: Any) -> Worker:
    settings: dict[str, Any] = {"heartbeat_interval_s": 0.1, "poll_wait_s": 0.5}
    settings.update(kw)
    return Worker([n.url for n in nodes], [slow_activity(gate)], worker_id="w-1", **settings)


def held_of(params: dict[str, Any]) -> list[dict[str, Any]]:
    held: list[dict[str, Any]] = params["held"]
    return held


# ------------------------------------------------------------------- tests


def test_after_following_not_leader_the_worker_registers_at_the_new_node_with_its_leases() -> None:
    async def main() -> None:
        cluster = Cluster()
        gate = asyncio.Event()
        async with two_nodes(cluster) as (a, b):
            worker = make_worker((a, b), gate)
            async with running(worker):
                await eventually(lambda: worker.executing == 1, "the lease running")
                assert [
                    held_of(p) for p in cluster.received("a", "scheduler.workers.register")
                ] == [[]]
                a.turn_standby()  # a takeover: b is the active now
                await eventually(
                    lambda: len(cluster.received("b", "scheduler.workers.register")) == 1,
                    "a registration at b",
                )
                (registration,) = cluster.received("b", "scheduler.workers.register")
                assert held_of(registration) == [{"activity_id": ACTIVITY_ID, "token": TOKEN}]
                # Heartbeats and polls resume at the new node.
                await eventually(
                    lambda: (
                        bool(cluster.received("b", "scheduler.workers.poll"))
                        and bool(cluster.received("b", "scheduler.workers.heartbeat"))
                    ),
                    "polls and heartbeats at b",
                )
                gate.set()
                await eventually(lambda: worker.counters.completed == 1, "the completion")
            (report,) = cluster.received("b", "scheduler.leases.complete")
            assert (report["activity_id"], report["token"]) == (ACTIVITY_ID, TOKEN)
            assert cluster.received("a", "scheduler.leases.complete") == []
            assert worker.counters.lost == 0

    run(main)


def test_a_long_poll_answered_not_leader_is_sent_again_at_once_to_the_new_node() -> None:
    async def main() -> None:
        cluster = Cluster(grant_on="b")
        gate = asyncio.Event()
        gate.set()
        async with two_nodes(cluster) as (a, b):
            a.hold_polls = True
            # A 30 s wait: the lease can only arrive within the test's bound if the
            # refused poll is sent again at once instead of waiting out its wait.
            worker = make_worker((a, b), gate, poll_wait_s=30.0)
            async with running(worker):
                await eventually(
                    lambda: bool(cluster.received("a", "scheduler.workers.poll")), "a poll at a"
                )
                a.turn_standby()  # the deposed node answers its open poll: not_leader
                await eventually(lambda: worker.counters.completed == 1, "the lease from b")
            registrations = cluster.received("b", "scheduler.workers.register")
            assert registrations, "the worker registered again at b"

    run(main)


def test_worker_not_active_makes_the_worker_register_again_listing_its_leases() -> None:
    async def main() -> None:
        cluster = Cluster()
        gate = asyncio.Event()
        async with two_nodes(cluster) as (a, b):
            worker = make_worker((a, b), gate)
            async with running(worker):
                await eventually(lambda: worker.executing == 1, "the lease running")
                cluster.refuse[("a", "scheduler.workers.heartbeat")] = WorkerNotActive(
                    "declared lost", worker_id="w-1"
                )
                await eventually(
                    lambda: len(cluster.received("a", "scheduler.workers.register")) == 2,
                    "a second registration",
                )
                second = cluster.received("a", "scheduler.workers.register")[1]
                assert held_of(second) == [{"activity_id": ACTIVITY_ID, "token": TOKEN}]
                gate.set()
                await eventually(lambda: worker.counters.completed == 1, "the completion")
            assert cluster.received("b", "scheduler.workers.register") == []

    run(main)


def test_a_completion_the_new_active_refuses_as_stale_is_dropped_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        cluster = Cluster()
        gate = asyncio.Event()
        async with two_nodes(cluster) as (a, b):
            # a dies with the completion on the wire; b answers its retry: stale.
            cluster.reset.add(("a", "scheduler.leases.complete"))
            cluster.refuse[("b", "scheduler.leases.complete")] = StaleLease(
                "superseded", activity_id=ACTIVITY_ID, token=TOKEN
            )
            worker = make_worker((a, b), gate)
            async with running(worker):
                await eventually(lambda: worker.executing == 1, "the lease running")
                gate.set()
                await eventually(lambda: worker.counters.reports_dropped == 1, "the drop")
                # The worker goes on: registered at b, polling there.
                await eventually(worker.connected.is_set, "connected again")
                polls_at_b = len(cluster.received("b", "scheduler.workers.poll"))
                await eventually(
                    lambda: len(cluster.received("b", "scheduler.workers.poll")) > polls_at_b,
                    "polls at b",
                )
            assert len(cluster.received("b", "scheduler.leases.complete")) == 1
            assert worker.counters.completed == 0
            assert worker.held() == {}

    caplog.set_level(logging.WARNING, logger="wf.worker")
    run(main)
    dropped = [r for r in caplog.records if getattr(r, "action", None) == "lease.report_dropped"]
    assert len(dropped) == 1
    assert dropped[0].levelno == logging.WARNING
    assert getattr(dropped[0], "reason", None) == "stale_lease"


def test_several_urls_may_be_given_comma_separated() -> None:
    worker = Worker("http://a:1,http://b:2", [slow_activity(asyncio.Event())])
    assert worker.servers == ["http://a:1", "http://b:2"]
    assert worker.replace(max_concurrency=2).servers == worker.servers
