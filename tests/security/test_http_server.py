"""Issue 16: the server's own HTTP/1.1 layer (wf.server.http_server) at the byte level.

What tests/security/test_http_edge.py does not already cover: heads over the
line, count and size limits, chunked and compressed bodies bounded by
``request_bytes_max``, ``Expect: 100-continue``, ``HEAD`` and HTTP/1.0,
pipelined requests answered in order on one connection, a client that leaves
in the middle of a long poll (its handler is cancelled and its connection
released at once), and the drain on stop.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import time
from pathlib import Path

from _edge import (
    CLOSE_SLACK_S,
    TOKEN,
    assert_rpc_error,
    edge_config,
    exchange,
    parse,
    read_response,
    read_until_closed,
    request,
    rpc_body,
    serving,
    wait_for,
)

from wf.client.rpc_client import RpcClient
from wf.errors import InvalidArgument
from wf.server.app import WfServer
from wf.server.config import HttpConfig
from wf.server.http_edge import HttpEdge
from wf.server.http_server import (
    HEAD_BYTES_MAX,
    HEADERS_MAX,
    LINE_BYTES_MAX,
    Handler,
    HttpServer,
    Request,
    Response,
    Router,
    cancel_on_disconnect,
)
from wf.wire.methods import INSTANCE_HEADER

INVALID_REQUEST = -32600
BODY_MAX = 4096
LONG_S = 30.0


def _config(tmp_path: Path, **http: float) -> HttpConfig:
    settings: dict[str, float] = {"request_bytes_max": BODY_MAX, **http}
    return HttpConfig(**settings)  # type: ignore[arg-type]


def test_heads_over_the_limits_are_refused_with_json_rpc_errors(tmp_path: Path) -> None:
    many = b"".join(b"X-H%d: v\r\n" % i for i in range(HEADERS_MAX + 1))
    # Each line under the line limit, the count under the header limit, the whole too big.
    big = b"".join(b"X-B%d: %s\r\n" % (i, b"b" * 4000) for i in range(HEAD_BYTES_MAX // 4000 + 2))
    cases = [
        ("too many headers", request(rpc_body(), headers=many), 400),
        ("a head over the size limit", request(rpc_body(), headers=big), 431),
        ("a URL over the line limit", request(path=b"/rpc?" + b"q" * LINE_BYTES_MAX), 400),
        (
            "a header line over the limit",
            request(headers=b"X-Long: " + b"a" * LINE_BYTES_MAX + b"\r\n"),
            400,
        ),
    ]

    async def scenario() -> None:
        async with serving(edge_config(tmp_path, _config(tmp_path))) as server:
            for name, data, status in cases:
                answer = await exchange(server.port, data)  # type: ignore[arg-type]
                assert answer.status == status, name
                error = assert_rpc_error(answer, status, INVALID_REQUEST)
                assert error["data"]["code"] == InvalidArgument.code, name
                assert answer.headers["connection"] == "close", name
            answer = await exchange(server.port, request(rpc_body()))  # type: ignore[arg-type]
            assert answer.status == 200

    asyncio.run(scenario())


def _chunks(data: bytes, size: int) -> bytes:
    pieces = [data[i : i + size] for i in range(0, len(data), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


def test_chunked_and_compressed_bodies_are_bounded_by_the_body_limit(tmp_path: Path) -> None:
    chunked = b"Transfer-Encoding: chunked\r\n"
    body = rpc_body()

    async def scenario() -> None:
        async with serving(edge_config(tmp_path, _config(tmp_path))) as server:
            port = server.port
            assert port is not None
            # Within the limit, in many small chunks: served.
            answer = await exchange(port, request(_chunks(body, 7), headers=chunked))
            assert answer.status == 200
            assert "result" in answer.json()
            # Over it by one byte, in chunks none of which is over it: 413, closed.
            padded = body + b" " * (BODY_MAX + 1 - len(body))
            answer = await exchange(port, request(_chunks(padded, 1000), headers=chunked))
            assert_rpc_error(answer, 413, INVALID_REQUEST)
            assert answer.headers["connection"] == "close"
            # gzip is undone; a small gzip body that inflates past the limit is 413.
            gz = b"Content-Encoding: gzip\r\n"
            answer = await exchange(port, request(gzip.compress(body), headers=gz))
            assert answer.status == 200
            assert "result" in answer.json()
            bomb = gzip.compress(b"[" + b" " * (BODY_MAX * 100) + b"]")
            assert len(bomb) < BODY_MAX
            answer = await exchange(port, request(bomb, headers=gz))
            assert_rpc_error(answer, 413, INVALID_REQUEST)
            answer = await exchange(port, request(body, headers=b"Content-Encoding: br\r\n"))
            assert_rpc_error(answer, 400, INVALID_REQUEST)

    asyncio.run(scenario())


def test_expect_100_continue_is_answered_or_refused_cleanly(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(edge_config(tmp_path, _config(tmp_path))) as server:
            port = server.port
            assert port is not None
            body = rpc_body()
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            head = request(body, headers=b"Expect: 100-continue\r\n")[: -len(body)]
            writer.write(head)
            async with asyncio.timeout(10.0):
                interim = await reader.readuntil(b"\r\n\r\n")
            assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
            writer.write(body)
            final = parse(await read_until_closed(reader, 10.0))
            writer.close()
            assert final.status == 200
            assert "result" in final.json()

            # A declared body over the limit: 413 at once, no 100, nothing sent.
            over = b"Expect: 100-continue\r\nContent-Length: %d\r\n" % (BODY_MAX + 1)
            answer = await exchange(port, request(headers=over))
            assert_rpc_error(answer, 413, INVALID_REQUEST)
            answer = await exchange(port, request(body, headers=b"Expect: something\r\n"))
            assert_rpc_error(answer, 417, INVALID_REQUEST)

    asyncio.run(scenario())


def test_head_http_1_0_and_methods(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(edge_config(tmp_path, _config(tmp_path))) as server:
            port = server.port
            assert port is not None
            answer = await exchange(port, request(method=b"HEAD", path=b"/healthz"))
            assert answer.status == 200
            assert answer.body == b""
            assert int(answer.headers["content-length"]) > 0
            answer = await exchange(port, request(method=b"HEAD"))
            assert answer.status == 405
            assert answer.body == b""  # never a body to HEAD
            answer = await exchange(port, request(method=b"PUT"))
            assert_rpc_error(answer, 405, INVALID_REQUEST)
            assert answer.headers["allow"] == "POST"
            # HEAD on a kept-alive connection: no body, and the next answer is intact.
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request(method=b"HEAD", path=b"/healthz", close=False))
            writer.write(request(rpc_body(), close=False))
            async with asyncio.timeout(10.0):
                head = parse(await reader.readuntil(b"\r\n\r\n"))
            assert head.status == 200
            second = await read_response(reader)
            assert second.json()["id"] == 1, second
            writer.close()
            # An upgrade (h2c, WebSocket) is refused: HTTP/1.1 only.
            upgrade = b"Connection: Upgrade\r\nUpgrade: h2c\r\n"
            answer = await exchange(port, request(rpc_body(), headers=upgrade, close=False))
            assert_rpc_error(answer, 400, INVALID_REQUEST)
            assert answer.headers["connection"] == "close"
            # HTTP/1.0 without keep-alive: answered, then closed by the server.
            answer = await exchange(port, b"GET /healthz HTTP/1.0\r\n\r\n")
            assert answer.status == 200
            assert answer.json() == {"status": "ok"}

    asyncio.run(scenario())


def test_every_answer_names_the_server_instance_which_a_restart_changes(tmp_path: Path) -> None:
    """``WF-Instance`` is on the fast JSON path, the general path and refusals alike,
    the same for one server's life, and new after a restart on the same port."""

    async def instances(server: WfServer) -> set[str]:
        port = server.port
        assert port is not None
        seen = set()
        for data in (
            request(rpc_body()),
            request(method=b"GET", path=b"/healthz"),
            request(method=b"PUT"),  # a refusal
        ):
            seen.add((await exchange(port, data)).headers[INSTANCE_HEADER.lower()])
        # Kept alive: the fast path of a 200 JSON answer.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request(rpc_body(), close=False))
        async with asyncio.timeout(10.0):
            kept = await read_response(reader)
        writer.close()
        assert kept.status == 200
        seen.add(kept.headers[INSTANCE_HEADER.lower()])
        return seen

    async def scenario() -> None:
        config = edge_config(tmp_path, _config(tmp_path))
        async with serving(config) as first:
            (one,) = await instances(first)
        async with serving(config) as second:
            (other,) = await instances(second)
        assert len(one) == 16
        assert one != other

    asyncio.run(scenario())


def test_pipelined_requests_are_answered_in_order_on_one_connection(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(edge_config(tmp_path, _config(tmp_path))) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            calls = [
                rpc_body("scheduler.queue.stats"),
                rpc_body("rpc.discover"),
                json.dumps({"jsonrpc": "2.0", "id": 3, "method": "no.such"}).encode(),
            ]
            writer.write(b"".join(request(body, close=False) for body in calls))
            answers = [await read_response(reader) for _ in calls]
            assert [a.status for a in answers] == [200, 200, 200]
            documents = [a.json() for a in answers]
            assert "queue" in json.dumps(documents[0]["result"]) or documents[0]["result"]
            assert "methods" in documents[1]["result"]
            assert documents[2]["id"] == 3
            assert documents[2]["error"]["code"] == -32601
            # Still open and usable afterwards.
            writer.write(request(rpc_body(), close=False))
            assert (await read_response(reader)).status == 200
            writer.close()

    asyncio.run(scenario())


def test_a_client_leaving_mid_long_poll_cancels_it_and_frees_the_connection(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with serving(edge_config(tmp_path, _config(tmp_path))) as server:
            port = server.port
            url = f"http://127.0.0.1:{port}"
            async with RpcClient(url, token=TOKEN) as client:
                await client.call("scheduler.workers.register", {"info": {"worker_id": "w1"}})
            poll = rpc_body(
                "scheduler.workers.poll", {"worker_id": "w1", "wait_s": LONG_S, "max_items": 1}
            )
            _reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request(poll, close=False))
            await writer.drain()
            await wait_for(lambda: server.edge.open_connections == 1, "the poll's connection")
            http = server._http
            assert http is not None
            await wait_for(
                lambda: any(c.task is not None for c in http._connections), "the poll running"
            )
            started = time.monotonic()
            writer.close()
            await wait_for(lambda: server.edge.open_connections == 0, "the release", 5.0)
            assert time.monotonic() - started < CLOSE_SLACK_S
            # Work submitted now goes to the worker's next poll, not to the one that left.
            async with RpcClient(url, token=TOKEN) as client:
                activity = {"activity_id": "a1", "activity_type": "X", "tenant": "t1"}
                await client.call("scheduler.activities.submit", {"activities": [activity]})
                answer = await client.call(
                    "scheduler.workers.poll", {"worker_id": "w1", "wait_s": 5.0, "max_items": 1}
                )
            assert len(answer["leases"]) == 1
            assert '"a1"' in json.dumps(answer["leases"])

    asyncio.run(scenario())


def test_stop_drains_closes_idle_connections_and_lets_a_request_in_flight_finish(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        server_cm = serving(edge_config(tmp_path, _config(tmp_path, idle_timeout_s=LONG_S)))
        server = await server_cm.__aenter__()
        stopped = False
        try:
            port = server.port
            assert port is not None
            url = f"http://127.0.0.1:{port}"
            async with RpcClient(url, token=TOKEN) as client:
                await client.call("scheduler.workers.register", {"info": {"worker_id": "w1"}})
            idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", port)
            busy_reader, busy_writer = await asyncio.open_connection("127.0.0.1", port)
            poll = rpc_body("scheduler.workers.poll", {"worker_id": "w1", "wait_s": LONG_S})
            busy_writer.write(request(poll, close=False))
            await busy_writer.drain()
            await wait_for(lambda: server.edge.open_connections == 2, "both connections")
            http = server._http
            assert http is not None
            await wait_for(
                lambda: any(c.task is not None for c in http._connections), "the poll running"
            )
            stopping = asyncio.ensure_future(server_cm.__aexit__(None, None, None))
            stopped = True
            # The poll in flight is answered (released at stop), then its connection closed.
            answer = parse(await read_until_closed(busy_reader, 10.0))
            assert answer.status == 200
            assert answer.json()["result"]["leases"] == []
            assert answer.headers["connection"] == "close"
            # The idle one is closed without an answer.
            assert await read_until_closed(idle_reader, 10.0) == b""
            await asyncio.wait_for(stopping, 15.0)
            idle_writer.close()
            busy_writer.close()
            # Nothing listens any more.
            try:
                _, late = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                pass
            else:
                late.close()
                raise AssertionError("the listener was still open after stop")
        finally:
            if not stopped:
                await server_cm.__aexit__(None, None, None)

    asyncio.run(scenario())


def test_a_client_hanging_up_cancels_only_a_handler_that_asked_for_it() -> None:
    """A hang-up never cuts a change in half: a handler runs to its end unless it
    asked (as a long poll does) to be cancelled when its client goes away."""

    async def scenario() -> None:
        release = asyncio.Event()
        entered: dict[str, asyncio.Event] = {"/plain": asyncio.Event(), "/poll": asyncio.Event()}
        ended: dict[str, str] = {}

        def handler(path: str, *, cancellable: bool) -> Handler:
            async def handle(request: Request) -> Response:
                if cancellable:
                    cancel_on_disconnect()
                entered[path].set()
                try:
                    await release.wait()
                except asyncio.CancelledError:
                    ended[path] = "cancelled"
                    raise
                ended[path] = "finished"
                return Response(200, b"{}", content_type="application/json")

            return handle

        router = Router()
        router.add("POST", "/plain", handler("/plain", cancellable=False))
        router.add("POST", "/poll", handler("/poll", cancellable=True))
        server = HttpServer(router, HttpEdge(HttpConfig()))
        listener = await server.listen("127.0.0.1", 0, None)
        port = int(listener.sockets[0].getsockname()[1])
        try:
            for path in ("/plain", "/poll"):
                _reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(
                    f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{{}}".encode()
                )
                await writer.drain()
                await asyncio.wait_for(entered[path].wait(), 5.0)
                writer.close()
                await writer.wait_closed()
            await wait_for(lambda: "/poll" in ended, "the long poll cancelled", 5.0)
            assert "/plain" not in ended  # still running: nobody cancelled it
            release.set()
            await wait_for(lambda: "/plain" in ended, "the plain handler's end", 5.0)
            assert ended == {"/poll": "cancelled", "/plain": "finished"}
        finally:
            listener.close()
            await server.shutdown(1.0)

    asyncio.run(scenario())
