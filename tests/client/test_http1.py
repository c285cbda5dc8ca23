"""The lean HTTP/1.1 client (``wf.client.http1``) against scripted loopback servers.

Each server is a plain asyncio server whose handler answers requests as the test
says (keep-alive, chunked, ``close``, garbage, silence), and counts the
connections it accepted, so reuse and replacement are observed, not assumed.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from wf.client.http1 import Http1Pool, HttpError, Origin, Response
from wf.client.rpc_client import RpcClient
from wf.errors import InvalidArgument, RpcUnavailable

Answer = Callable[[int, bytes], Awaitable[bytes | None]]
"""(request number on its connection, request body) -> raw response, or None: hang up."""


def ok(body: bytes, *extra: str) -> bytes:
    head = "\r\n".join(["HTTP/1.1 200 OK", f"Content-Length: {len(body)}", *extra])
    return head.encode() + b"\r\n\r\n" + body


class Scripted:
    """A loopback HTTP server answering with ``answer``; counts its connections."""

    def __init__(self, answer: Answer, *, close_after: int | None = None) -> None:
        self.answer = answer
        self.close_after = close_after
        """Hang up right after answering this many requests on a connection."""
        self.connections = 0
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        n = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length)
                self.requests.append(head + body)
                n += 1
                raw = await self.answer(n, body)
                if raw is None:
                    break
                writer.write(raw)
                await writer.drain()
                if n == self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    @property
    def origin(self) -> Origin:
        assert self.server is not None
        port = self.server.sockets[0].getsockname()[1]
        return Origin.parse(f"http://127.0.0.1:{port}")


@contextlib.asynccontextmanager
async def scripted(answer: Answer) -> AsyncIterator[Scripted]:
    s = Scripted(answer)
    s.server = await asyncio.start_server(s.handle, "127.0.0.1", 0)
    try:
        yield s
    finally:
        s.server.close()
        for w in s.writers:
            w.close()


async def echo(_n: int, body: bytes) -> bytes:
    return ok(body)


def head(origin: Origin) -> bytes:
    return origin.request_head("/rpc", {"Content-Type": "application/json"})


async def until(check: Callable[[], bool], what: str) -> None:
    """Poll ``check`` every 10 ms for at most 5 s."""
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def run(main: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(20):
            await main()

    asyncio.run(bounded())


def test_sequential_posts_reuse_one_keep_alive_connection() -> None:
    async def main() -> None:
        async with scripted(echo) as server:
            pool = Http1Pool()
            for i in range(5):
                response = await pool.post(server.origin, head(server.origin), b"x%d" % i)
                assert response == Response(200, b"x%d" % i)
            assert server.connections == 1
            first = server.requests[0]
            assert first.startswith(b"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1:")
            assert b"Content-Length: 2\r\n\r\nx0" in first
            await pool.close()

    run(main)


def test_concurrent_posts_get_a_connection_each_and_the_limit_bounds_them() -> None:
    gate = asyncio.Event()

    async def slow(_n: int, body: bytes) -> bytes:
        await gate.wait()
        return ok(body)

    async def main() -> None:
        async with scripted(slow) as server:
            pool = Http1Pool(limit=2)
            calls = [
                asyncio.create_task(pool.post(server.origin, head(server.origin), b"%d" % i))
                for i in range(3)
            ]
            await until(lambda: len(server.requests) >= 2, "two requests")
            # The third call ran long ago and waits on the limit: no connection of its own.
            assert len(pool._open) == 2
            assert server.connections == 2
            gate.set()
            bodies = sorted(r.body for r in await asyncio.gather(*calls))
            assert bodies == [b"0", b"1", b"2"]
            assert server.connections == 2
            await pool.close()

    run(main)


def test_a_chunked_response_is_joined() -> None:
    async def chunked(_n: int, _body: bytes) -> bytes:
        return (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
        )

    async def main() -> None:
        async with scripted(chunked) as server:
            pool = Http1Pool()
            for _ in range(2):
                response = await pool.post(server.origin, head(server.origin), b"{}")
                assert response == Response(200, b"hello world")
            assert server.connections == 1
            await pool.close()

    run(main)


def test_a_response_saying_close_is_not_reused() -> None:
    async def closing(_n: int, body: bytes) -> bytes:
        return ok(body, "Connection: close")

    async def main() -> None:
        async with scripted(closing) as server:
            pool = Http1Pool()
            for _ in range(3):
                assert (await pool.post(server.origin, head(server.origin), b"a")).status == 200
            assert server.connections == 3
            await pool.close()

    run(main)


def test_a_connection_the_server_closed_while_idle_is_replaced_even_if_the_loop_slept() -> None:
    # A blocking caller's private loop runs only during calls, so the server's FIN
    # arrives while nothing reads it (this is how SyncApp and the test admins work).
    # The server is a plain thread, so that it hangs up while the client's loop is
    # stopped, and the client cannot have noticed on its own.
    listener = socket.create_server(("127.0.0.1", 0))
    origin = Origin.parse(f"http://127.0.0.1:{listener.getsockname()[1]}")
    may_hang_up, hung_up = threading.Event(), threading.Event()
    accepted: list[int] = []

    def serve() -> None:
        for n in (1, 2):
            conn, _ = listener.accept()
            accepted.append(n)
            with conn:
                data = b""
                while b"\r\n\r\n" not in data or not data.endswith(b"%d" % n):
                    data += conn.recv(4096)
                conn.sendall(ok(b"%d" % n))
                if n == 1:
                    may_hang_up.wait(10)  # once the client's loop has stopped
            if n == 1:
                hung_up.set()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    runner = asyncio.Runner()

    def call(step: Awaitable[Any]) -> Any:
        async def bounded() -> Any:
            async with asyncio.timeout(10):
                return await step

        return runner.run(bounded())

    try:
        pool = Http1Pool()
        assert call(pool.post(origin, head(origin), b"1")).body == b"1"
        (parked,) = pool._idle[origin]
        may_hang_up.set()
        assert hung_up.wait(10)
        sock = parked.transport.get_extra_info("socket") if parked.transport else None
        assert sock is not None
        readable, _, _ = select.select([sock.fileno()], [], [], 5.0)
        assert readable, "the server's hang-up never reached the client socket"
        # The parked connection is dead: the next call notices and takes a new one.
        assert call(pool.post(origin, head(origin), b"2")).body == b"2"
        assert accepted == [1, 2]
        call(pool.close())
    finally:
        runner.close()
        listener.close()
        server.join(5)


def test_a_hang_up_mid_request_is_an_http_error_and_the_connection_is_dropped() -> None:
    async def hang_up_on_second(n: int, body: bytes) -> bytes | None:
        return ok(body) if n != 2 else None

    async def main() -> None:
        async with scripted(hang_up_on_second) as server:
            pool = Http1Pool()
            await pool.post(server.origin, head(server.origin), b"a")
            with pytest.raises(HttpError, match="closed before the response ended"):
                await pool.post(server.origin, head(server.origin), b"b")
            assert (await pool.post(server.origin, head(server.origin), b"c")).body == b"c"
            assert server.connections == 2
            await pool.close()

    run(main)


def test_a_malformed_response_is_an_http_error() -> None:
    async def garbage(_n: int, _body: bytes) -> bytes:
        return b"NOT HTTP AT ALL\r\n\r\n"

    async def main() -> None:
        async with scripted(garbage) as server:
            pool = Http1Pool()
            with pytest.raises(HttpError, match="malformed"):
                await pool.post(server.origin, head(server.origin), b"a")
            await pool.close()

    run(main)


def test_a_cancelled_request_closes_its_connection() -> None:
    release = asyncio.Event()

    async def silent(_n: int, _body: bytes) -> bytes | None:
        await release.wait()
        return None

    async def main() -> None:
        async with scripted(silent) as server:
            pool = Http1Pool()
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.2):
                    await pool.post(server.origin, head(server.origin), b"a")
            assert pool._idle.get(server.origin, []) == []
            # Closed, not parked: gone once its transport says so.
            await until(lambda: not pool._open, "the connection closed")
            release.set()
            await pool.close()

    run(main)


def test_connection_refused_and_closed_pool_are_http_errors() -> None:
    async def main() -> None:
        async with scripted(echo) as server:
            origin = server.origin
        pool = Http1Pool()
        with pytest.raises(HttpError, match="cannot connect"):
            await pool.post(origin, head(origin), b"a")
        await pool.close()
        with pytest.raises(HttpError, match="closed"):
            await pool.post(origin, head(origin), b"a")

    run(main)


def test_origins_parse_ports_prefixes_and_ipv6_hosts() -> None:
    assert Origin.parse("http://h") == Origin("http", "h", 80, "")
    assert Origin.parse("https://h/") == Origin("https", "h", 443, "")
    assert Origin.parse("http://h:8080/wf/") == Origin("http", "h", 8080, "/wf")
    o = Origin.parse("http://[::1]:9000/base")
    assert o.request_head("/rpc", {}).startswith(b"POST /base/rpc HTTP/1.1\r\nHost: [::1]:9000")
    assert Origin.parse("https://h").request_head("/rpc", {}).split(b"\r\n")[1] == b"Host: h"
    for bad in ("ftp://h", "h:80", "http://", ""):
        with pytest.raises(ValueError, match="http"):
            Origin.parse(bad)
    with pytest.raises(InvalidArgument) as err:
        RpcClient("not a url")
    assert err.value.details["field"] == "urls"


def test_header_values_with_line_breaks_are_refused() -> None:
    origin = Origin.parse("http://h")
    for bad in ({"Authorization": "Bearer x\r\nX-Evil: 1"}, {"X\nY": "v"}, {"A": "b\0"}):
        with pytest.raises(ValueError, match="line break"):
            origin.request_head("/rpc", bad)
    with pytest.raises(InvalidArgument) as err:
        RpcClient("http://h", token="tok\r\nX-Forged: yes")
    assert err.value.details["field"] == "token"


def test_rpc_client_fails_over_and_reports_unreachable_servers() -> None:
    async def rpc(_n: int, _body: bytes) -> bytes:
        return ok(b'[{"jsonrpc":"2.0","id":1,"result":{"pong":true}}]')

    async def main() -> None:
        async with scripted(echo) as dead:
            dead_url = f"http://127.0.0.1:{dead.origin.port}"
        async with scripted(rpc) as live:
            client = RpcClient([dead_url, f"http://127.0.0.1:{live.origin.port}"])
            assert await client.call("x.ping") == {"pong": True}
            assert client.url.endswith(str(live.origin.port))
            await client.close()
        client = RpcClient(dead_url, failover_timeout_s=0)  # no budget: one try
        with pytest.raises(RpcUnavailable):
            await client.call("x.ping")
        await client.close()

    run(main)
