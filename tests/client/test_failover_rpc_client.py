"""``RpcClient`` and ``App`` follow the active node of a cluster, over real sockets.

The servers are small aiohttp JSON-RPC stand-ins (a fake of the *server*, the
client is the real one): a node either serves (answers every call with
``{"served_by": name, "method": ...}``), is a standby that answers
``not_leader`` naming a leader URL, resets the connection after reading the
request, or never answers. Each stand-in records what it received (bodies and
the ``Authorization`` header), so where a call went, and with which token,
is observed rather than assumed. Budgets and timeouts are short so that no
test waits on a sleep: a call that did not end by itself is caught by the
test's own bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest
from aiohttp import web

from wf.client.app import App
from wf.client.rpc_client import RpcClient
from wf.errors import NotFound, NotLeader, OwnershipLost, RpcUnavailable, WfError
from wf.wire.methods import INSTANCE_HEADER

TOKEN = "s3cret-token"
TEST_BOUND_S = 20.0
"""Bound of one whole test: a call that hangs fails the test instead of the suite."""


@dataclass
class StandIn:
    """One stand-in node; ``mode`` may change while the test runs."""

    name: str
    mode: str = "serve"
    """``serve``, ``standby``, ``reset`` or ``hang``."""
    leader_url: str | None = None
    """What a standby names as the active."""
    resets_left: int | None = None
    """In ``reset`` mode: reset this many requests, then serve (``None``: always)."""
    then: str | None = None
    """The mode to switch to once the first request is answered (a node that dies)."""
    requests: list[list[dict[str, Any]]] = field(default_factory=list)
    """Every JSON-RPC batch received, in order."""
    tokens: list[str | None] = field(default_factory=list)
    """The ``Authorization`` header of every request."""
    url: str = ""
    instance: str | None = None
    """The ``WF-Instance`` header of its answers (``None``: none sent)."""
    released: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the test ends: hung requests return then."""

    def calls(self) -> list[dict[str, Any]]:
        """Every call received, flattened."""
        return [call for batch in self.requests for call in batch]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        batch = msgspec.json.decode(await request.read())
        self.requests.append(batch)
        self.tokens.append(request.headers.get("Authorization"))
        if self.mode == "hang":
            await self.released.wait()
        if self.mode == "reset" and (self.resets_left is None or self.resets_left > 0):
            if self.resets_left is not None:
                self.resets_left -= 1
            assert request.transport is not None
            request.transport.abort()  # the answer is lost after the request arrived
            return web.Response()
        answers = [self.answer(call) for call in batch]
        if self.then is not None:
            self.mode, self.then = self.then, None
        headers = None if self.instance is None else {INSTANCE_HEADER: self.instance}
        return web.json_response(answers, headers=headers)

    def answer(self, call: dict[str, Any]) -> dict[str, Any]:
        error: WfError
        if self.mode == "deposed":
            lost = OwnershipLost("the store refused the write", epoch=3)
            return {
                "jsonrpc": "2.0",
                "id": call["id"],
                "error": {"code": lost.rpc_code, "message": lost.message, "data": lost.to_dict()},
            }
        if self.mode == "standby" or call["params"].get("refuse_at") == self.name:
            error = NotLeader("this node is a standby", leader_url=self.leader_url, epoch=3)
            return {
                "jsonrpc": "2.0",
                "id": call["id"],
                "error": {
                    "code": error.rpc_code,
                    "message": error.message,
                    "data": error.to_dict(),
                },
            }
        if call["method"] in ("workflow.runs.start", "workflow.schedules.trigger"):
            # A run view named after the request id the call carried (what the test
            # checks), with the keys a run view always has.
            request_id = call["params"].get("request_id")
            result: Any = {"run_id": f"run-{request_id}", "status": "admitted"}
        elif call["method"] == "x.missing":
            error = NotFound("no such thing", thing="x")
            return {
                "jsonrpc": "2.0",
                "id": call["id"],
                "error": {
                    "code": error.rpc_code,
                    "message": error.message,
                    "data": error.to_dict(),
                },
            }
        else:
            result = {"served_by": self.name, "method": call["method"]}
        return {"jsonrpc": "2.0", "id": call["id"], "result": result}


@contextlib.asynccontextmanager
async def nodes(*names: str) -> AsyncIterator[list[StandIn]]:
    """Stand-ins on loopback ports of their own, all serving at first."""
    stand_ins = [StandIn(name) for name in names]
    runners: list[web.AppRunner] = []
    try:
        for stand_in in stand_ins:
            app = web.Application()
            app.router.add_post("/rpc", stand_in.handle)
            runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            runners.append(runner)
            port = runner.addresses[0][1]
            stand_in.url = f"http://127.0.0.1:{port}"
        yield stand_ins
    finally:
        for stand_in in stand_ins:
            stand_in.released.set()
        for runner in runners:
            await runner.cleanup()


def closed_port_url() -> str:
    """A loopback URL nothing listens on (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


async def until(check: Callable[[], bool]) -> None:
    """Poll ``check`` (the test's own bound ends a wait that never comes true)."""
    while not check():  # noqa: ASYNC110 - the stand-ins' records are plain lists
        await asyncio.sleep(0.01)


def run(main: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(TEST_BOUND_S):
            await main()

    asyncio.run(bounded())


# ------------------------------------------------------------- not_leader


def test_a_standby_sends_the_call_to_the_configured_leader_it_names() -> None:
    async def main() -> None:
        async with nodes("a", "b", "c") as (a, b, c):
            a.mode = "standby"
            # Named with a trailing slash and upper-case host: the same URL, normalised.
            a.leader_url = c.url.replace("http://", "HTTP://") + "/"
            async with RpcClient([a.url, b.url, c.url], token=TOKEN) as client:
                assert await client.call("x.ping") == {"served_by": "c", "method": "x.ping"}
                assert client.url == c.url
                assert client.failovers == 1
                # The next call goes straight to the active.
                await client.call("x.ping")
            assert len(a.requests) == 1
            assert b.requests == []  # followed, not rotated
            assert len(c.requests) == 2
            assert c.tokens == [f"Bearer {TOKEN}"] * 2

    run(main)


def test_the_token_is_never_sent_to_a_leader_url_that_was_not_configured() -> None:
    async def main() -> None:
        async with nodes("standby", "configured", "stranger") as (standby, configured, stranger):
            standby.mode = "standby"
            standby.leader_url = stranger.url
            async with RpcClient([standby.url, configured.url], token=TOKEN) as client:
                answer = await client.call("x.ping")
            # Rotated to the next configured URL instead of following the stranger.
            assert answer["served_by"] == "configured"
            assert stranger.requests == []
            assert stranger.tokens == []
            # Only standbys configured: it gives up with not_leader, still sending nothing
            # to the stranger.
            async with RpcClient(standby.url, token=TOKEN, failover_timeout_s=0.3) as client:
                with pytest.raises(NotLeader) as refused:
                    await client.call("x.ping")
            assert refused.value.details["leader_url"] == stranger.url
            assert stranger.requests == []
            assert len(standby.requests) > 2  # retried within the budget

    run(main)


def test_the_call_gives_up_with_not_leader_once_the_failover_budget_is_spent() -> None:
    async def main() -> None:
        async with nodes("a", "b") as (a, b):
            for node in (a, b):
                node.mode = "standby"  # a takeover: nobody is active, leader_url is None
            async with RpcClient([a.url, b.url], failover_timeout_s=0.5) as client:
                with pytest.raises(NotLeader) as refused:
                    await client.call("x.ping")
            assert refused.value.details == {"leader_url": None, "epoch": 3}
            assert len(a.requests) >= 2
            assert len(b.requests) >= 2

    run(main)


def test_a_call_that_meets_only_standbys_succeeds_once_one_of_them_becomes_active() -> None:
    async def main() -> None:
        async with nodes("a", "b") as (a, b):
            a.mode = b.mode = "standby"
            async with RpcClient([a.url, b.url], failover_timeout_s=10.0) as client:
                call = asyncio.create_task(client.call("x.ping"))
                await until(lambda: len(a.requests) + len(b.requests) >= 4)
                b.mode = "serve"  # the takeover is over
                assert (await call)["served_by"] == "b"
                assert client.url == b.url

    run(main)


def test_a_batch_sends_again_only_the_calls_answered_not_leader() -> None:
    async def main() -> None:
        async with nodes("deposed", "leader") as (deposed, leader):
            deposed.leader_url = leader.url
            async with RpcClient([deposed.url, leader.url]) as client:
                results = await client.batch(
                    [("x.one", {}), ("x.two", {"refuse_at": "deposed"}), ("x.three", {})]
                )
            assert [r["served_by"] for r in results] == ["deposed", "leader", "deposed"]
            (sent_again,) = leader.requests
            first_try = deposed.requests[0]
            # Only the refused call, with the id it had.
            assert [c["method"] for c in sent_again] == ["x.two"]
            assert sent_again[0]["id"] == first_try[1]["id"]

    run(main)


def test_a_batch_keeps_the_answers_it_got_when_the_rest_finds_no_active() -> None:
    async def main() -> None:
        async with nodes("deposed", "leader") as (deposed, leader):
            deposed.leader_url = leader.url
            deposed.then = "reset"  # answers this batch, then dies
            leader.mode = "reset"
            urls = [deposed.url, leader.url]
            async with RpcClient(urls, failover_timeout_s=0.3) as client:
                applied, lost = await client.batch(
                    [("x.one", {}), ("x.two", {"refuse_at": "deposed"})]
                )
            assert applied == {"served_by": "deposed", "method": "x.one"}
            assert isinstance(lost, RpcUnavailable)
            assert all(c["method"] == "x.two" for c in leader.calls())

    run(main)


def test_errors_other_than_not_leader_are_answers_not_reasons_to_move() -> None:
    async def main() -> None:
        async with nodes("a", "b") as (a, b):
            async with RpcClient([a.url, b.url]) as client:
                with pytest.raises(NotFound):
                    await client.call("x.missing")
                assert client.failovers == 0
            assert b.requests == []

    run(main)


def test_another_server_instance_at_the_same_url_counts_as_a_move() -> None:
    """A server restarted between two calls fails none of them; its new
    ``WF-Instance`` is what tells the client (and so a worker: register again)."""

    async def main() -> None:
        async with nodes("a") as (a,), RpcClient([a.url]) as client:
            a.instance = "first"
            await client.call("x.ping")
            await client.call("x.ping")
            assert client.failovers == 0
            a.instance = "second"  # the same address, a new server process
            await client.call("x.ping")
            assert client.failovers == 1
            await client.call("x.ping")
            assert client.failovers == 1
            a.instance = None  # a server that names no instance tells nothing
            await client.call("x.ping")
            assert client.failovers == 1

    run(main)


# ------------------------------------------------------- transport failures


def test_a_refused_connection_rotates_to_the_next_configured_server() -> None:
    async def main() -> None:
        async with nodes("live") as (live,), RpcClient([closed_port_url(), live.url]) as client:
            assert (await client.call("x.ping"))["served_by"] == "live"
            assert client.url == live.url
            assert client.failovers == 1

    run(main)


def test_a_reset_after_the_request_arrived_is_retried_at_the_next_server() -> None:
    async def main() -> None:
        async with nodes("resetting", "live") as (resetting, live):
            resetting.mode = "reset"
            async with RpcClient([resetting.url, live.url]) as client:
                assert (await client.call("x.ping"))["served_by"] == "live"
            assert len(resetting.requests) == 1
            assert len(live.requests) == 1

    run(main)


def test_the_call_gives_up_with_rpc_unavailable_once_the_failover_budget_is_spent() -> None:
    async def main() -> None:
        async with nodes("resetting") as (resetting,):
            resetting.mode = "reset"
            urls = [closed_port_url(), resetting.url]
            async with RpcClient(urls, failover_timeout_s=0.5) as client:
                with pytest.raises(RpcUnavailable) as unavailable:
                    await client.call("x.ping")
            assert unavailable.value.details["urls"] == urls
            assert len(resetting.requests) >= 2  # retried, not given up at the first pass

    run(main)


def test_a_single_url_is_retried_until_its_server_is_back() -> None:
    async def main() -> None:
        async with nodes("flaky") as (flaky,):
            flaky.mode = "reset"
            flaky.resets_left = 3
            async with RpcClient(flaky.url, failover_timeout_s=10.0) as client:
                assert (await client.call("x.ping"))["served_by"] == "flaky"
                assert client.failovers == 3
            assert len(flaky.requests) == 4

    run(main)


def test_a_hung_server_does_not_hold_a_call_past_its_timeout() -> None:
    async def main() -> None:
        async with nodes("frozen", "live") as (frozen, live):
            frozen.mode = "hang"  # a SIGSTOPped node: accepts, never answers
            async with RpcClient(frozen.url, failover_timeout_s=0) as client:
                with pytest.raises(RpcUnavailable, match="no answer"):
                    await client.call("x.ping", timeout_s=0.3)
            assert not frozen.released.is_set()  # ended by its own timeout
            async with RpcClient([frozen.url, live.url], failover_timeout_s=0) as client:
                answer = await client.call("x.ping", timeout_s=0.3)
                assert answer["served_by"] == "live"
            # A long poll's attempt lasts its wait plus a margin, not the default bound.
            async with RpcClient(frozen.url, failover_timeout_s=0) as client:
                assert client._timeout_for([("scheduler.workers.poll", {"wait_s": 30})]) > 30

    run(main)


def test_a_server_that_left_a_call_unanswered_is_tried_last_for_a_while() -> None:
    async def main() -> None:
        async with nodes("frozen", "standby", "active") as (frozen, standby, active):
            frozen.mode = "hang"
            standby.mode = "standby"  # a take-over in progress: it names nobody yet
            urls = [frozen.url, standby.url, active.url]
            async with RpcClient(urls, failover_timeout_s=5) as client:
                first = await client.call("x.ping", timeout_s=0.3)
                assert first["served_by"] == "active"
                assert len(frozen.requests) == 1
                # The active goes away; the standby answers not_leader naming nobody.
                # The next server in line is the frozen one, but it held a call to its
                # timeout a moment ago: the call goes to the others first.
                active.mode = "standby"
                standby.mode = "serve"
                second = await client.call("x.ping", timeout_s=0.3)
                assert second["served_by"] == "standby"
                assert len(frozen.requests) == 1

    run(main)


def test_a_node_answering_ownership_lost_is_left_for_the_next_one() -> None:
    async def main() -> None:
        async with nodes("deposed", "active") as (deposed, active):
            deposed.mode = "deposed"  # its fence moved: it stored nothing
            async with RpcClient([deposed.url, active.url]) as client:
                answer = await client.call("x.ping")
            assert answer["served_by"] == "active"
            assert len(deposed.requests) == 1

    run(main)


def test_client_sockets_carry_tcp_keepalive() -> None:
    async def main() -> None:
        async with nodes("live") as (live,), RpcClient(live.url) as client:
            await client.call("x.ping")
            pool = client._pool
            assert pool is not None
            (conn,) = pool._open
            assert conn.transport is not None
            sock = conn.transport.get_extra_info("socket")
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            if hasattr(socket, "TCP_KEEPIDLE"):
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) <= 10
            if hasattr(socket, "TCP_USER_TIMEOUT"):
                assert 0 < sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) <= 30_000

    run(main)


def test_urls_may_be_comma_separated() -> None:
    client = RpcClient("http://a:1, http://b:2,,")
    assert client.urls == ["http://a:1", "http://b:2"]
    app = App(["http://a:1,http://b:2", "http://c:3"])
    assert app.rpc.urls == ["http://a:1", "http://b:2", "http://c:3"]


# ------------------------------------------------------------- request ids


def _request_ids(*stand_ins: StandIn, method: str) -> list[str]:
    return [
        call["params"]["request_id"]
        for stand_in in stand_ins
        for call in stand_in.calls()
        if call["method"] == method
    ]


def test_app_keeps_one_request_id_across_the_retries_of_a_run_start() -> None:
    async def main() -> None:
        async with nodes("old", "new") as (old, new):
            old.mode = "reset"  # the start reached the old active; its answer was lost
            async with App([old.url, new.url]) as app:
                view = await app.start_run("d1", {"x": 1})
                again = await app.start_run("d1", {"x": 1})
            first, second = _request_ids(old, new, method="workflow.runs.start")[:2]
            assert view.run_id == f"run-{first}"
            assert first == second
            assert len(first) == 32
            int(first, 16)
            # Another logical call draws another id.
            assert again.run_id != f"run-{first}"
            # The caller's own id is sent as given.
            async with App(new.url) as app:
                assert (await app.start_run("d1", request_id="mine-1")).run_id == "run-mine-1"

    run(main)


def test_app_keeps_one_request_id_across_the_retries_of_a_schedule_trigger() -> None:
    async def main() -> None:
        async with nodes("standby", "active") as (standby, active):
            standby.mode = "standby"
            standby.leader_url = active.url
            async with App([standby.url, active.url]) as app:
                view = await app.trigger_schedule("s1")
            ids = _request_ids(standby, active, method="workflow.schedules.trigger")
            assert [f"run-{i}" for i in ids] == [view.run_id] * 2

    run(main)
