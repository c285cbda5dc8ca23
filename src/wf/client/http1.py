"""A lean HTTP/1.1 client for wf's JSON-RPC POSTs: keep-alive connections and TLS.

Theory of operation
-------------------
Every call a wf client makes is one ``POST`` with a JSON body, answered with a
JSON body, and a worker makes three of them per activity (the poll that
brings it, the result, the next poll), so the client's own cost per call lies
on the path of every dispatch. aiohttp's client serves the general case
(cookies, redirects, proxies, tracing hooks, streaming) and spends about
175 µs of CPU per such call on the 2-core reference machine; this client
spends about 90, half (``uv run python bench/wire.py``). The server parses
requests with the same parser (:mod:`wf.server.http_server`).

:class:`Http1Pool` keeps idle keep-alive connections per :class:`Origin` and
opens another when none is idle, so concurrent calls (a long poll, the
outbox, a heartbeat) each have a connection of their own; one request at a
time per connection, never pipelined, at most ``limit`` connections at once.
Each connection is an :class:`asyncio.Protocol` feeding :mod:`httptools`'
C parser (uvicorn's, by uvloop's authors): ``Content-Length`` and chunked
bodies, keep-alive as the server says. A connection the server closes while
idle leaves the pool at once; one whose response says ``close``, fails to
parse, or whose request is cancelled (a timeout) is closed, since its state
is unknown. Failures raise :class:`HttpError`; nothing is retried here, as
with any POST that may have been applied.

Dead peers are found by bounds, not by waiting: connecting gives up after
``connect_timeout_s`` (:data:`CONNECT_TIMEOUT_S`), and every socket has TCP
keepalive probes and, where the platform has it, ``TCP_USER_TIMEOUT``
(:data:`KEEPALIVE_IDLE_S` and its siblings), so a server that froze or whose
host vanished (no FIN, no RST) is noticed by the kernel within seconds
instead of the system default of two hours. The caller bounds each request
itself (``RpcClient``'s per-call timeouts); these bounds catch what a
request timeout cannot see, such as an idle pooled connection to a host that
is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import ssl
from typing import Final, NamedTuple, cast
from urllib.parse import urlsplit

import httptools

from wf.wire.methods import INSTANCE_HEADER

__all__ = [
    "CONNECTIONS_MAX",
    "CONNECT_TIMEOUT_S",
    "Http1Pool",
    "HttpConnectError",
    "HttpError",
    "HttpTlsConnectError",
    "HttpTlsError",
    "Origin",
    "Response",
]

CONNECTIONS_MAX: Final = 100
"""Most connections one pool has open at once (aiohttp's default limit too)."""
IDLE_MAX: Final = 16
"""Most idle connections kept per origin."""
CONNECT_TIMEOUT_S: Final = 2.0
"""Longest a TCP (and TLS) connect may take. A live server on a LAN accepts in
milliseconds; a black-holed address would otherwise hold the caller for the
kernel's SYN retries (over two minutes on Linux)."""
KEEPALIVE_IDLE_S: Final = 5
"""Seconds a connection may be silent before the kernel sends keepalive probes."""
KEEPALIVE_INTERVAL_S: Final = 2
"""Seconds between keepalive probes."""
KEEPALIVE_PROBES: Final = 3
"""Unanswered probes after which the kernel drops the connection (so a silent dead
peer is found within ``KEEPALIVE_IDLE_S + KEEPALIVE_PROBES * KEEPALIVE_INTERVAL_S``,
11 s)."""
USER_TIMEOUT_MS: Final = 10_000
"""``TCP_USER_TIMEOUT`` where the platform has it (Linux): sent data that stays
unacknowledged this long drops the connection, which keepalive alone does not
cover (probes are only sent while nothing is in flight)."""


class HttpError(Exception):
    """The request got no complete HTTP response (connect, reset, malformed answer)."""


class HttpConnectError(HttpError):
    """No connection could be opened: the request was certainly not sent."""


class HttpTlsError(HttpError):
    """TLS refused the connection (certificate, protocol version, an alert from the
    server): configuration, not a passing failure."""


class HttpTlsConnectError(HttpTlsError, HttpConnectError):
    """TLS refused the connection during the handshake: the request was not sent."""


_INSTANCE_HEADER_LOWER: Final = INSTANCE_HEADER.lower().encode("ascii")
_INSTANCE_HEADER_LEN: Final = len(INSTANCE_HEADER)


class Response(NamedTuple):
    """A complete HTTP response."""

    status: int
    body: bytes
    instance: bytes | None = None
    """The wf server's :data:`~wf.wire.methods.INSTANCE_HEADER`, if it sent one."""


class Origin(NamedTuple):
    """Where requests go: scheme, host, port, and the path prefix of the URL."""

    scheme: str
    host: str
    port: int
    path: str

    @classmethod
    def parse(cls, url: str) -> Origin:
        """``http[s]://host[:port][/prefix]``; raises ValueError otherwise."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL with a host: {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme, parts.hostname, port, parts.path.rstrip("/"))

    def request_head(self, path: str, headers: dict[str, str]) -> bytes:
        """The request line and fixed headers of a POST to ``path`` (below the prefix),
        up to ``Content-Length``'s value, which the caller appends with the body."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        authority = host if self.port == default else f"{host}:{self.port}"
        for text in (path, *headers, *headers.values()):
            if any(c in text for c in "\r\n\0"):
                # A line break in a header would let its value forge more headers.
                raise ValueError(f"line break or NUL in an HTTP header or path: {text!r}")
        lines = [f"POST {self.path}{path} HTTP/1.1", f"Host: {authority}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        lines.append("Content-Length: ")
        return "\r\n".join(lines).encode("latin-1")


def _tune_socket(sock: socket.socket) -> None:
    """No Nagle delay; keepalive and user timeout (see the module docstring)."""
    options = [
        # One write per request: no reason to let Nagle hold it back.
        (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1),
        (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1),
    ]
    for name, value in (
        ("TCP_KEEPIDLE", KEEPALIVE_IDLE_S),
        ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL_S),
        ("TCP_KEEPCNT", KEEPALIVE_PROBES),
        ("TCP_USER_TIMEOUT", USER_TIMEOUT_MS),
    ):
        option = getattr(socket, name, None)
        if option is not None:  # absent on some platforms: the defaults stay
            options.append((socket.IPPROTO_TCP, option, value))
    for level, option, value in options:
        with contextlib.suppress(OSError):
            sock.setsockopt(level, option, value)


class _Connection(asyncio.Protocol):
    """One keep-alive connection: a request at a time, its response parsed as it comes."""

    def __init__(self, pool: Http1Pool, origin: Origin) -> None:
        self.pool = pool
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.reusable = True
        self._parser = httptools.HttpResponseParser(self)
        self._body: list[bytes] = []
        self._instance: bytes | None = None
        self._waiter: asyncio.Future[Response] | None = None

    # -------------------------------------------------------- asyncio protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, only alike.
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            _tune_socket(sock)

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(HttpError(f"malformed HTTP response: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.reusable = False
        self.pool._forget(self)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            kind = HttpTlsError if isinstance(exc, ssl.SSLError) else HttpError
            waiter.set_exception(kind(f"connection closed before the response ended: {exc}"))

    # --------------------------------------------------------- parser callbacks

    def on_message_begin(self) -> None:
        self._body = []
        self._instance = None

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(name) == _INSTANCE_HEADER_LEN and name.lower() == _INSTANCE_HEADER_LOWER:
            self._instance = value

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is None or waiter.done():
            # A response nobody asked for: the connection is out of step.
            self._fail(HttpError("unsolicited HTTP response"))
            return
        if not self._parser.should_keep_alive():
            self.reusable = False
        waiter.set_result(
            Response(self._parser.get_status_code(), b"".join(self._body), self._instance)
        )

    # ------------------------------------------------------------------ use

    def _fail(self, exc: HttpError) -> None:
        self.reusable = False
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self.close()

    def stale(self) -> bool:
        """Whether the idle connection has something to read: the server closed it (or
        sent what nobody asked for). The event loop may not have run since (a blocking
        caller's private loop runs only during calls), so the socket itself is asked."""
        sock = self.transport.get_extra_info("socket") if self.transport is not None else None
        if sock is None:
            return False
        try:
            readable, _, _ = select.select([sock.fileno()], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(readable)

    def close(self) -> None:
        """Close the connection (idempotent)."""
        self.reusable = False
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    async def request(self, data: bytes) -> Response:
        """Send one whole request and wait for its response."""
        assert self.transport is not None
        assert self._waiter is None
        waiter: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._waiter = waiter
        self.transport.write(data)
        return await waiter


class Http1Pool:
    """Keep-alive HTTP/1.1 connections per origin (see the module docstring)."""

    def __init__(
        self,
        ssl_context: ssl.SSLContext | None = None,
        *,
        limit: int = CONNECTIONS_MAX,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
    ):
        self._ssl = ssl_context
        self._connect_timeout_s = connect_timeout_s
        self._idle: dict[Origin, list[_Connection]] = {}
        self._open: set[_Connection] = set()
        self._slots = asyncio.Semaphore(limit)
        self._closed = False

    async def post(self, origin: Origin, head: bytes, body: bytes) -> Response:
        """POST ``body`` with ``head`` (from :meth:`Origin.request_head`); the response.

        Raises:
            HttpError: no complete response (the request may or may not have been
                applied); :class:`HttpConnectError` when no connection could be
                opened (OSError, ssl.SSLError or the connect timeout): the request
                was not sent.
        """
        if self._closed:
            raise HttpError("the HTTP client is closed")
        data = b"%s%d\r\n\r\n%s" % (head, len(body), body)
        async with self._slots:
            conn = self._idle_connection(origin) or await self._connect(origin)
            try:
                response = await conn.request(data)
            except BaseException:
                conn.close()  # cancelled or failed mid-request: its state is unknown
                raise
            if conn.reusable and not self._closed:
                idle = self._idle.setdefault(origin, [])
                if len(idle) < IDLE_MAX:
                    idle.append(conn)
                else:
                    conn.close()
            else:
                conn.close()
            return response

    def _idle_connection(self, origin: Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            if conn.reusable and not conn.stale():
                return conn
            conn.close()
        return None

    async def _connect(self, origin: Origin) -> _Connection:
        loop = asyncio.get_running_loop()
        secure = origin.scheme == "https"
        context: ssl.SSLContext | None = None
        if secure:
            if self._ssl is None:
                # The system's trust store, loaded once per pool, not per connection.
                self._ssl = ssl.create_default_context()
            context = self._ssl
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                _transport, conn = await loop.create_connection(
                    lambda: _Connection(self, origin),
                    origin.host,
                    origin.port,
                    ssl=context,
                    server_hostname=origin.host if secure else None,
                    ssl_handshake_timeout=self._connect_timeout_s if secure else None,
                )
        except (OSError, ssl.SSLError, TimeoutError) as exc:
            kind = HttpTlsConnectError if isinstance(exc, ssl.SSLError) else HttpConnectError
            raise kind(f"cannot connect to {origin.host}:{origin.port}: {exc!r}") from exc
        self._open.add(conn)
        return conn

    def _forget(self, conn: _Connection) -> None:
        self._open.discard(conn)
        idle = self._idle.get(conn.origin)
        if idle and conn in idle:
            idle.remove(conn)

    async def close(self) -> None:
        """Close every connection; later posts fail with :class:`HttpError`."""
        self._closed = True
        self._idle.clear()
        for conn in list(self._open):
            conn.close()
        # One turn, so the transports' connection_lost callbacks run before we return.
        await asyncio.sleep(0)
