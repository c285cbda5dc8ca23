"""The HTTP/1.1 server of ``wf-rpc-server``: an asyncio protocol on :mod:`httptools`.

Theory of operation
-------------------
Every request the server answers is small and of a few kinds (a JSON-RPC
``POST /rpc``, a health or metrics ``GET``, a console file), and the rules at
the HTTP level (timeouts, limits, JSON-RPC error bodies, redaction) are wf's
own (:mod:`wf.server.http_edge`), so a general web framework's request
machinery (middlewares, multidicts, streaming payloads, access logs) is cost
without use on the path of every dispatch. This module is the rest: bytes in,
:class:`Request`, a handler, :class:`Response`, bytes out.

Each accepted connection is a :class:`_Connection` (an
:class:`asyncio.Protocol`) feeding :class:`httptools.HttpRequestParser`
(llhttp, the C parser of Node.js; strict: a CR, LF or NUL inside a header
value, a bad ``Content-Length``, bad chunk framing, ``Content-Length`` with
``Transfer-Encoding`` are refused). The connection has one timer and three
phases, as :mod:`wf.server.http_edge` describes: **idle** (``idle_timeout_s``),
**header** (``header_timeout_s``, from the first byte of a request to the end
of its header; over TLS the handshake too) and **busy** (a handler runs; no
timer, so a long poll is never taken for an idle connection; its body read is
bounded by ``body_timeout_s``).

Requests are answered one at a time per connection, in order: a request
pipelined behind another waits (the socket stops being read meanwhile, so a
client cannot queue more than one read's worth). Bodies, ``Content-Length`` or
chunked, are kept whole up to ``request_bytes_max`` (one byte more answers
413 and closes); ``Expect: 100-continue`` is answered ``100 Continue`` when
the handler first reads the body (or 413 at once for a declared length over
the limit; another expectation is 417); ``gzip`` and ``deflate`` bodies are
decoded within the same limit. A response whose request body was not read
to its end closes the connection (the rest is never drained). A protocol
upgrade (``Upgrade: h2c``, WebSocket) is refused: HTTP/1.1 only.

Heads are bounded: a request line or header line over :data:`LINE_BYTES_MAX`
or more than :data:`HEADERS_MAX` headers is a 400 (aiohttp's figures, which
the server had before), a head over :data:`HEAD_BYTES_MAX` in all is a 431.
Every refusal is a JSON-RPC error object (:func:`wf.server.http_edge.error_body`).

A client that goes away (reset, or its end of the connection closed) cancels
the handler of its request only if the handler asked for it
(:func:`cancel_on_disconnect`: a long poll stops waiting at once, and what it
had not taken stays for the worker's next poll); any other handler runs to
its end, so a hang-up never leaves a change half made. :meth:`HttpServer.shutdown`
drains: the listener closes first, idle connections are closed, requests in
flight finish within the grace (then are cancelled), and each busy
connection is closed once its answer is written.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import http
import logging
import secrets
import ssl
import zlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Final, Literal, NoReturn
from urllib.parse import unquote

import httptools

from wf.errors import Internal, InvalidArgument, WfError
from wf.server.http_edge import (
    BACKLOG,
    BodyRefused,
    HttpEdge,
    error_body,
    parser_reason,
)
from wf.server.rpc import INTERNAL_ERROR, INVALID_REQUEST
from wf.wire.methods import INSTANCE_HEADER

__all__ = [
    "HEADERS_MAX",
    "HEAD_BYTES_MAX",
    "LINE_BYTES_MAX",
    "Handler",
    "HttpServer",
    "Request",
    "Response",
    "Router",
    "cancel_on_disconnect",
    "rpc_error",
]

log = logging.getLogger("wf.http")
_access = logging.getLogger("wf.http.access")

LINE_BYTES_MAX: Final = 8190
"""Longest request line (its URL) or header line (name and value); longer is a 400."""
HEADERS_MAX: Final = 128
"""Most header lines in one request; more is a 400."""
HEAD_BYTES_MAX: Final = 64 * 1024
"""Largest request head (request line and headers), give or take one read; larger is a
431. A legitimate wf client sends well under 1 KiB."""

Handler = Callable[["Request"], Awaitable["Response"]]
"""What serves one route."""

_Phase = Literal["idle", "header", "busy"]
_ENCODINGS: Final = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS, "x-gzip": 31}
_NO_BODY_STATUSES: Final = frozenset({204, 304})
_REASONS: Final = {s.value: s.phrase for s in http.HTTPStatus}
_LINE_TOO_LONG: Final = "malformed HTTP request: a request or header line is too long"
_HEAD_TOO_LARGE: Final = f"the request header is over {HEAD_BYTES_MAX} bytes"
_CONTINUE: Final = b"HTTP/1.1 100 Continue\r\n\r\n"


class Response:
    """One answer: status, body, content type and extra headers."""

    __slots__ = ("body", "close", "content_type", "headers", "status")

    def __init__(
        self,
        status: int = 200,
        body: bytes = b"",
        *,
        content_type: str | None = None,
        headers: Mapping[str, str] | None = None,
        close: bool = False,
    ) -> None:
        self.status = status
        self.body = body
        self.content_type = content_type
        """``Content-Type``; none for an empty body unless given."""
        self.headers = headers
        """More headers (never ``Content-Length``, ``Connection``: the server's own)."""
        self.close = close
        """Close the connection once this is written."""


def rpc_error(
    status: int,
    error: WfError,
    *,
    rpc_code: int | None = None,
    headers: Mapping[str, str] | None = None,
    close: bool = False,
) -> Response:
    """An HTTP ``status`` answer whose body is a JSON-RPC error object for ``error``."""
    return Response(
        status,
        error_body(error, rpc_code=rpc_code),
        content_type="application/json",
        headers=headers,
        close=close,
    )


_serving: contextvars.ContextVar[_Connection] = contextvars.ContextVar("wf_http_serving")
"""The connection whose request the current task answers."""


def cancel_on_disconnect() -> None:
    """Let the request being answered be cancelled if its client goes away.

    For a handler that only waits (a long poll): cancelled, it stops at once and
    what it had not taken stays for the next call. Other handlers run to their end
    whether or not anyone reads the answer, so that a client that hangs up never
    leaves a change half made. Outside a request served over HTTP (an in-process
    call) it does nothing.
    """
    connection = _serving.get(None)
    if connection is not None:
        connection._cancel_on_loss = True


class Request:
    """One request: its head at once, its body through :meth:`read`."""

    __slots__ = (
        "_body",
        "_complete",
        "_connection",
        "_continue",
        "_error",
        "_read",
        "_size",
        "_waiter",
        "headers",
        "http10",
        "keep_alive",
        "match",
        "method",
        "path",
        "query",
    )

    def __init__(
        self,
        connection: _Connection,
        method: str,
        path: str,
        query: str,
        headers: dict[str, str],
        keep_alive: bool,
        http10: bool,
    ) -> None:
        self._connection = connection
        self.method = method
        """``GET``, ``POST``, ... as sent."""
        self.path = path
        """The path, percent-decoded, without the query."""
        self.query = query
        """The query string as sent (``""`` without one)."""
        self.headers = headers
        """Header names in lower case; a repeated header keeps its first value."""
        self.keep_alive = keep_alive
        """Whether the client keeps the connection open after the answer."""
        self.http10 = http10
        """An HTTP/1.0 request (keep-alive only when it asked for it)."""
        self.match = ""
        """What a prefix route matched after its prefix (:meth:`Router.add_prefix`)."""
        self._body: list[bytes] = []
        self._size = 0
        self._complete = False
        self._read = False
        self._error: BodyRefused | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._continue = headers.get("expect", "").lower() == "100-continue"

    @property
    def peercert(self) -> dict[str, object] | None:
        """The verified TLS client certificate (``SSLSocket.getpeercert()``), if any."""
        transport = self._connection.transport
        cert = transport.get_extra_info("peercert") if transport is not None else None
        return cert or None

    @property
    def remote(self) -> str | None:
        """The client's address."""
        return self._connection.peer

    async def read(self) -> bytes:
        """The whole body, decoded, within ``body_timeout_s``.

        Raises:
            BodyRefused: over ``request_bytes_max`` (413), too slow (408), malformed
                framing or an encoding that does not decode (400).
        """
        self._read = True
        if not self._complete and self._error is None:
            connection = self._connection
            if self._continue:
                self._continue = False
                connection.write_raw(_CONTINUE)
            waiter = connection.loop.create_future()
            self._waiter = waiter
            timeout_s = connection.edge.config.body_timeout_s
            try:
                async with asyncio.timeout(timeout_s):
                    await waiter
            except TimeoutError:
                log.info(
                    "request body not received within %s s",
                    timeout_s,
                    extra={"action": "http.body_timeout", "peer": self.remote},
                )
                message = f"the request body did not arrive within {timeout_s} s"
                raise BodyRefused(408, InvalidArgument(message, http_status=408)) from None
            finally:
                self._waiter = None
        if self._error is not None:
            raise self._error
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        encoding = self.headers.get("content-encoding")
        if encoding is not None and encoding.lower() != "identity":
            body = self._decode(body, encoding.lower())
        return body

    def _decode(self, body: bytes, encoding: str) -> bytes:
        limit = self._connection.edge.config.request_bytes_max
        wbits = _ENCODINGS.get(encoding)
        if wbits is None:
            raise _malformed(self, f"unsupported content encoding {encoding[:40]!r}")
        decoder = zlib.decompressobj(wbits)
        try:
            decoded = decoder.decompress(body, limit + 1)
        except zlib.error:
            raise _malformed(self, f"the body does not decode as {encoding}") from None
        if len(decoded) > limit or decoder.unconsumed_tail:
            raise BodyRefused(413, _too_large(limit))
        if not decoder.eof:
            raise _malformed(self, f"the body does not decode as {encoding}")
        return decoded

    # ------------------------------------------------------------ the parser's side

    def _feed(self, chunk: bytes, limit: int) -> None:
        if self._error is not None:
            return
        self._size += len(chunk)
        if self._size > limit:
            self._body.clear()
            self._fail(BodyRefused(413, _too_large(limit)))
            return
        self._body.append(chunk)

    def _done(self) -> None:
        self._complete = True
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _fail(self, error: BodyRefused) -> None:
        if self._error is None:
            self._error = error
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    @property
    def _settled(self) -> bool:
        """The body is whole or refused: nothing more of it is coming."""
        return self._complete or self._error is not None


def _too_large(limit: int) -> InvalidArgument:
    return InvalidArgument(
        f"the request body is over {limit} bytes", http_status=413, limit_bytes=limit
    )


def _malformed(request: Request, reason: str) -> BodyRefused:
    log.info(
        "malformed request body: %s",
        reason,
        extra={"action": "http.bad_request", "status": 400, "peer": request.remote},
    )
    return BodyRefused(400, InvalidArgument(f"malformed request body: {reason}", http_status=400))


class Router:
    """Routes by exact path, then by the longest path prefix; a ``GET`` route answers
    ``HEAD`` too (without a body)."""

    def __init__(self) -> None:
        self._exact: dict[str, dict[str, Handler]] = {}
        self._prefixes: list[tuple[str, dict[str, Handler]]] = []

    def add(self, method: str, path: str, handler: Handler) -> None:
        """Serve ``method path`` with ``handler``."""
        self._exact.setdefault(path, {})[method] = handler

    def add_prefix(self, method: str, prefix: str, handler: Handler) -> None:
        """Serve ``method`` on every path under ``prefix``; the rest is ``Request.match``."""
        for known, methods in self._prefixes:
            if known == prefix:
                methods[method] = handler
                return
        self._prefixes.append((prefix, {method: handler}))
        self._prefixes.sort(key=lambda entry: -len(entry[0]))

    def resolve(self, request: Request) -> Handler | Response:
        """The handler for ``request``, or the 404 or 405 answer."""
        path = request.path
        methods = self._exact.get(path)
        if methods is None:
            for prefix, candidates in self._prefixes:
                if path.startswith(prefix):
                    request.match = path[len(prefix) :]
                    methods = candidates
                    break
            else:
                return rpc_error(
                    404,
                    InvalidArgument("no such path (JSON-RPC is POST /rpc)", http_status=404),
                    rpc_code=INVALID_REQUEST,
                )
        method = request.method
        handler = methods.get(method)
        if handler is None and method == "HEAD":
            handler = methods.get("GET")
        if handler is not None:
            return handler
        allowed = sorted({*methods, *(("HEAD",) if "GET" in methods else ())})
        return rpc_error(
            405,
            InvalidArgument("method not allowed (JSON-RPC is POST /rpc)", http_status=405),
            rpc_code=INVALID_REQUEST,
            headers={"Allow": ",".join(allowed)},
        )


class HttpServer:
    """Serves a :class:`Router` under an :class:`~wf.server.http_edge.HttpEdge`'s limits."""

    def __init__(self, router: Router, edge: HttpEdge) -> None:
        self.router = router
        self.edge = edge
        self._listener: asyncio.Server | None = None
        self._connections: set[_Connection] = set()
        self._draining = False
        self._all_closed = asyncio.Event()
        self.instance = secrets.token_hex(8)
        """This instance's :data:`~wf.wire.methods.INSTANCE_HEADER` value."""
        self._ok_json = (
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            + f"{INSTANCE_HEADER}: {self.instance}\r\nContent-Length: ".encode("ascii")
        )
        self._instance_line = f"{INSTANCE_HEADER}: {self.instance}\r\n"

    def _closed(self, connection: _Connection) -> None:
        self._connections.discard(connection)
        if not self._connections:
            self._all_closed.set()

    async def listen(
        self, host: str, port: int, ssl_context: ssl.SSLContext | None
    ) -> asyncio.Server:
        """Listen on ``host:port`` (TLS with ``ssl_context``; the handshake bounded by
        ``header_timeout_s``)."""
        self.edge.prepare()
        loop = asyncio.get_running_loop()
        header_s = self.edge.config.header_timeout_s

        def factory() -> _Connection:
            return _Connection(self, loop)

        if ssl_context is None:
            listener = await loop.create_server(factory, host, port, backlog=BACKLOG)
        else:
            listener = await loop.create_server(
                factory,
                host,
                port,
                ssl=ssl_context,
                backlog=BACKLOG,
                ssl_handshake_timeout=header_s,
                ssl_shutdown_timeout=header_s,
            )
        self._listener = listener
        return listener

    async def shutdown(self, grace_s: float) -> None:
        """Drain (see the module docstring): no new connection, idle ones closed, busy
        ones closed once answered; after ``grace_s`` the rest are reset."""
        self._draining = True
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        self.edge.close()
        for connection in list(self._connections):
            connection.drain()
        if self._connections:
            self._all_closed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace_s):
                    await self._all_closed.wait()
        for connection in list(self._connections):
            connection.abort()
        # The aborted connections' handlers were cancelled: let them unwind.
        pending = [c.task for c in self._connections if c.task is not None]
        if pending:
            await asyncio.wait(pending, timeout=1.0)

    async def respond(self, request: Request) -> Response:
        """Route and run ``request``'s handler; every failure becomes a JSON-RPC error."""
        target = self.router.resolve(request)
        if isinstance(target, Response):
            return target
        try:
            return await target(request)
        except BodyRefused as exc:
            return rpc_error(exc.status, exc.error, rpc_code=INVALID_REQUEST, close=True)
        except Exception:
            log.exception(
                "internal error answering an HTTP request",
                extra={"action": "http.internal_error", "status": 500, "peer": request.remote},
            )
            return rpc_error(500, Internal("Internal error"), rpc_code=INTERNAL_ERROR, close=True)


class _Connection(asyncio.Protocol):
    """One client connection (see the module docstring)."""

    def __init__(self, server: HttpServer, loop: asyncio.AbstractEventLoop) -> None:
        self.server = server
        self.edge = server.edge
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.peer: str | None = None
        self.task: asyncio.Task[None] | None = None
        self._cancel_on_loss = False
        """The running handler asked to be cancelled if the client goes away
        (:func:`cancel_on_disconnect`)."""
        self._parser = httptools.HttpRequestParser(self)
        self._phase: _Phase = "idle"
        self._timer: asyncio.TimerHandle | None = None
        self._queue: collections.deque[Request | Response] = collections.deque()
        self._incoming: Request | None = None
        self._in_head = False
        self._in_body = False
        self._head_bytes = 0
        self._url = b""
        self._headers: dict[str, str] = {}
        self._header_count = 0
        self._head_size = 0
        self._refusal: tuple[int, InvalidArgument] | None = None
        self._broken = False
        self._reading_paused = False
        self._writable: asyncio.Future[None] | None = None
        self._closing = False
        self._admitted = False

    # ------------------------------------------------------------ transport events

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's is not an asyncio.Transport subclass).
        stream: asyncio.Transport = transport  # type: ignore[assignment]
        if not self.edge.admit(self):
            self.edge.refuse(stream, self.loop)
            return
        self._admitted = True
        self.transport = stream
        self.server._connections.add(self)
        peer = stream.get_extra_info("peername")
        self.peer = str(peer[0]) if isinstance(peer, tuple) and peer else None
        if self.server._draining:
            self._close()
            return
        self._enter("idle")

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self._admitted:
            return
        self._cancel_timer()
        self.edge.release(self)
        self.server._closed(self)
        self.transport = None
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        if self.task is not None and self._cancel_on_loss:
            # The client is gone: its long poll stops now. Any other handler runs to
            # its end (a write half done is worse than an answer nobody reads).
            self.task.cancel()
        if self._incoming is not None:
            self._incoming._fail(BodyRefused(400, InvalidArgument("connection closed")))

    def pause_writing(self) -> None:
        if self._writable is None or self._writable.done():
            self._writable = self.loop.create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def data_received(self, data: bytes) -> None:
        if self._broken or self._closing or self.transport is None:
            return
        if self._phase == "idle":
            self._enter("header")
        if not self._in_body:
            # A head in progress, or one that may start in this read (the slack of the
            # limit is one read: a read that ends a body and starts a head is not counted).
            self._head_bytes += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:  # refused in on_headers_complete; defensive
            self._reject(400, _malformed_http("protocol upgrades are not supported"))
            return
        except httptools.HttpParserError as exc:
            if self._refusal is not None:
                (status, error), self._refusal = self._refusal, None
                self._reject(status, error)
            else:
                self._reject(400, _malformed_http(parser_reason(exc)))
            return
        if not self._in_body and self._head_bytes > HEAD_BYTES_MAX:
            error = InvalidArgument(_HEAD_TOO_LARGE, http_status=431, limit_bytes=HEAD_BYTES_MAX)
            self._reject(431, error)

    # ------------------------------------------------------------ parser callbacks

    def on_message_begin(self) -> None:
        self._in_head = True
        self._url = b""
        self._headers = {}
        self._header_count = 0
        self._head_size = 0
        if (self.task is not None or self._queue) and not self._reading_paused:
            # Pipelined behind a request in progress: read no further until it is answered.
            assert self.transport is not None
            self.transport.pause_reading()
            self._reading_paused = True

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._head_size += len(url)
        if len(self._url) > LINE_BYTES_MAX:
            self._refuse_head(400, _LINE_TOO_LONG)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > HEADERS_MAX:
            self._refuse_head(400, f"malformed HTTP request: more than {HEADERS_MAX} headers")
        size = len(name) + len(value) + 4
        if size > LINE_BYTES_MAX:
            self._refuse_head(400, _LINE_TOO_LONG)
        self._head_size += size
        if self._head_size > HEAD_BYTES_MAX:
            self._refuse_head(431, _HEAD_TOO_LARGE, limit_bytes=HEAD_BYTES_MAX)
        self._headers.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._in_body = True
        self._head_bytes = 0
        if self._broken:
            return
        expect = self._headers.get("expect")
        if expect is not None and expect.lower() != "100-continue":
            self._refuse_head(417, "unsupported Expect header (only 100-continue)")
        parser = self._parser
        if parser.should_upgrade():
            # llhttp would hand the rest of the stream (a body included) over as another
            # protocol; wf speaks HTTP/1.1 only.
            self._refuse_head(400, "malformed HTTP request: protocol upgrades are not supported")
        url = self._url
        path_bytes, _, query_bytes = url.partition(b"?")
        if not path_bytes.startswith(b"/"):
            try:
                parsed = httptools.parse_url(url)
            except httptools.HttpParserInvalidURLError:
                self._refuse_head(400, "malformed HTTP request: invalid request target")
            path_bytes = parsed.path or b"/"
            query_bytes = parsed.query or b""
        path = path_bytes.decode("latin-1")
        if "%" in path:
            path = unquote(path, errors="surrogateescape")
        request = Request(
            self,
            parser.get_method().decode("ascii", "replace"),
            path,
            query_bytes.decode("latin-1"),
            self._headers,
            parser.should_keep_alive(),
            parser.get_http_version() == "1.0",
        )
        self._incoming = request
        limit = self.edge.config.request_bytes_max
        length = request.headers.get("content-length")
        if length is not None and int(length) > limit:
            # Answered at once, before a byte of it is sent (Expect) or read.
            request._fail(BodyRefused(413, _too_large(limit)))
        self._queue.append(request)
        if self.task is None:
            self._next()

    def on_body(self, body: bytes) -> None:
        request = self._incoming
        if request is not None:
            request._feed(body, self.edge.config.request_bytes_max)
            if request._error is not None:
                # Answered 413 and closed: nothing more is read.
                self._stop_reading()

    def on_message_complete(self) -> None:
        self._in_body = False
        request = self._incoming
        self._incoming = None
        if request is not None:
            request._done()

    # ------------------------------------------------------------ requests

    def _next(self) -> None:
        """Start the next queued request, or set the timer for the wait."""
        if self._queue:
            item = self._queue.popleft()
            self._enter("busy")
            self.task = self.loop.create_task(self._serve(item))
        elif self._closing or self.transport is None:
            return
        elif self._in_head:
            self._enter("header")
        else:
            self._enter("idle")

    async def _serve(self, item: Request | Response) -> None:
        self._cancel_on_loss = False
        _serving.set(self)
        try:
            if isinstance(item, Response):
                self._write(item, None)
            else:
                response = await self.server.respond(item)
                self._write(response, item)
                if _access.isEnabledFor(logging.DEBUG):
                    _access.debug(
                        "%s %s %d",
                        item.method,
                        item.path,
                        response.status,
                        extra={
                            "action": "http.access",
                            "method": item.method,
                            "path": item.path,
                            "status": response.status,
                            "peer": self.peer,
                        },
                    )
            if self._writable is not None:
                await self._writable  # the client reads slowly: no next request meanwhile
        finally:
            self.task = None
        if self._closing or self.transport is None:
            return
        if self._reading_paused and not self._broken:
            self._reading_paused = False
            self.transport.resume_reading()
        self._next()

    def _write(self, response: Response, request: Request | None) -> None:
        transport = self.transport
        if transport is None:
            return
        close = (
            response.close
            or request is None
            or not request.keep_alive
            or not request._settled
            or request._error is not None
            or self.server._draining
            or (self._broken and not self._queue)
        )
        status = response.status
        body = response.body
        if (
            status == 200
            and not close
            and response.headers is None
            and response.content_type == "application/json"
            and request is not None
            and request.method != "HEAD"
        ):
            transport.write(self.server._ok_json + b"%d\r\n\r\n" % len(body) + body)
            return
        head = [
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}\r\n",
            self.server._instance_line,
        ]
        if response.content_type is not None:
            head.append(f"Content-Type: {response.content_type}\r\n")
        if response.headers:
            head.extend(f"{name}: {value}\r\n" for name, value in response.headers.items())
        if status in _NO_BODY_STATUSES:
            body = b""
        else:
            head.append(f"Content-Length: {len(body)}\r\n")
        if close:
            head.append("Connection: close\r\n")
        elif request is not None and request.http10:
            head.append("Connection: keep-alive\r\n")
        head.append("\r\n")
        data = "".join(head).encode("latin-1")
        if request is None or request.method != "HEAD":
            data += body
        transport.write(data)
        if close:
            self._closing = True
            self._close()

    def write_raw(self, data: bytes) -> None:
        """Write ``data`` as it is (an interim ``100 Continue``)."""
        if self.transport is not None:
            self.transport.write(data)

    # ------------------------------------------------------------ refusals

    def _refuse_head(self, status: int, message: str, **details: object) -> NoReturn:
        """Stop the parser (from one of its callbacks) with this refusal."""
        self._refusal = (status, InvalidArgument(message, http_status=status, **details))
        raise _HeadRefused

    def _reject(self, status: int, error: InvalidArgument) -> None:
        """The stream cannot be parsed on: answer after what is in progress, close."""
        self._stop_reading()
        log.info(
            "%s",
            error.message,
            extra={"action": "http.bad_request", "status": status, "peer": self.peer},
        )
        incoming = self._incoming
        if incoming is not None and not incoming._settled:
            # The body of a request whose handler reads it (or will).
            self._incoming = None
            incoming._fail(BodyRefused(status, error))
            return
        self._queue.append(rpc_error(status, error, rpc_code=INVALID_REQUEST, close=True))
        if self.task is None:
            self._next()

    def _stop_reading(self) -> None:
        self._broken = True
        if self.transport is not None and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()

    # ------------------------------------------------------------ phases

    def _enter(self, phase: _Phase) -> None:
        self._cancel_timer()
        self._phase = phase
        config = self.edge.config
        if phase == "idle":
            self._timer = self.loop.call_later(config.idle_timeout_s, self._expire)
        elif phase == "header":
            self._timer = self.loop.call_later(config.header_timeout_s, self._expire)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        self._timer = None
        if self._phase == "header":
            log.info(
                "request header not received within %s s",
                self.edge.config.header_timeout_s,
                extra={"action": "http.header_timeout", "peer": self.peer},
            )
        self._close()

    def drain(self) -> None:
        """The server stops: close now unless a request is in progress (then once
        it is answered)."""
        if self.task is None and not self._queue:
            self._close()

    def _close(self) -> None:
        self._closing = True
        self._cancel_timer()
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Reset the connection now (its handler is cancelled)."""
        if self.transport is not None:
            self.transport.abort()


class _HeadRefused(Exception):
    """Raised from a parser callback to stop parsing (the refusal is kept aside)."""


def _malformed_http(reason: str) -> InvalidArgument:
    return InvalidArgument(f"malformed HTTP request: {reason}", http_status=400)
