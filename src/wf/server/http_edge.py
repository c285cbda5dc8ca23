"""The HTTP edge of ``wf-rpc-server``: connection limit, timeouts, JSON-RPC error bodies.

Theory of operation
-------------------
aiohttp parses HTTP; this module bounds how long and how many (settings in
``server.http``, :class:`~wf.server.config.HttpConfig`). Every accepted
connection is served by an :class:`EdgeHandler`, aiohttp's per-connection
``RequestHandler`` with one timer and three phases:

* **idle**: no request in progress (just accepted, or between two requests);
  closed after ``idle_timeout_s``.
* **header**: the first byte of a request arrived and its handler has not
  started; closed after ``header_timeout_s``. This is what ends a slowloris
  client (a header trickled byte by byte, or never finished). Over TLS the
  handshake is bounded by the same figure.
* **busy**: a handler is running (the edge's middleware marks the start and
  the end); no timer, so a long poll waiting for work is never taken for an
  idle connection. Reading the body is bounded by ``body_timeout_s``
  (:meth:`HttpEdge.read_body`): a body trickled slower is answered 408 and the
  connection closed.

Connections are counted from aiohttp's ``connection_made`` to
``connection_lost`` (over TLS, once the handshake is done: a handshake in
progress is bounded by time, not counted). One over the limit is refused
before anything is read: an HTTP 503 whose body is a JSON-RPC ``overloaded``
error, the write side shut, whatever the client sends drained for
:data:`REFUSAL_LINGER_S` so that it reads the answer rather than a reset, then
closed. At most :data:`REFUSALS_LINGERING_MAX` refusals linger at once;
beyond that a refused connection is reset at once. Refusals are logged at
warning, at most one line per :data:`REFUSAL_LOG_INTERVAL_S`, with the count.

The limit must fit the process's open-file limit, or ``accept()`` fails
(``EMFILE``) and every client suffers, the store too: at start
:func:`raise_open_files_limit` raises the soft limit to the hard one where
allowed, and :func:`connections_allowed` lowers the configured limit so that
:data:`FDS_RESERVED` descriptors stay free for the store, logs and refusals.

Every refusal at this level is a JSON-RPC error object (``id`` null, HTTP
status kept): a request aiohttp's parser refuses (400, through
:meth:`EdgeHandler.handle_error`, which also never logs the parser's message:
it quotes the offending header line, a token included), an unknown path or
method (404, 405), a body too large (413) or too slow (408), too many
connections (503). ``error.data`` carries the wf error (``invalid_argument``,
``overloaded``, ``internal``) so that typed clients map it.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
import re
import ssl
import sys
from typing import Any, Final, cast

import msgspec
from aiohttp import http_exceptions, web
from aiohttp.typedefs import Handler, Middleware

from wf.errors import Internal, InvalidArgument, Overloaded, Unauthorized, WfError
from wf.server.config import HttpConfig
from wf.server.redaction import redact
from wf.server.rpc import INTERNAL_ERROR, INVALID_REQUEST

log = logging.getLogger("wf.http")

FDS_RESERVED: Final = 256
"""Descriptors kept out of the connection limit: store files and connections, logs,
the listening socket, lingering refusals."""
REFUSALS_LINGERING_MAX: Final = 128
"""Most refused connections drained at once; more are reset without an answer."""
REFUSAL_LINGER_S: Final = 1.0
"""How long a refused connection is drained before it is reset."""
REFUSAL_LOG_INTERVAL_S: Final = 10.0
"""At most one refusal warning per this many seconds (each counts those since the last)."""
REFUSAL_RETRY_AFTER_S: Final = 1.0
"""``Retry-After`` of a refusal, and ``retry_after_s`` of its ``overloaded`` error."""
BACKLOG: Final = 128
"""Listen backlog (aiohttp's default)."""
REASON_CHARS_MAX: Final = 120
"""Longest parser reason quoted in an answer or a log line."""
OPEN_FILES_FALLBACK: Final = 10_240
"""Soft open-file limit tried when the hard limit is unlimited or refused (macOS)."""

_encoder = msgspec.json.Encoder()
_STATUS_PREFIX: Final = re.compile(r"^\d{3}, message:\s*")
_QUOTING_ERRORS: Final[tuple[tuple[type[BaseException], str], ...]] = (
    # aiohttp's errors whose message quotes request bytes on its first line; a subclass
    # comes before its base.
    (http_exceptions.LineTooLong, "a request or header line is too long"),
    (http_exceptions.InvalidHeader, "invalid header"),
    (http_exceptions.BadHttpMethod, "invalid method"),
    (http_exceptions.BadStatusLine, "invalid request line"),
)


def rpc_error(
    status: int,
    error: WfError,
    *,
    rpc_code: int | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    """An HTTP ``status`` answer whose body is a JSON-RPC error object for ``error``."""
    return web.Response(
        status=status,
        body=error_body(error, rpc_code=rpc_code),
        content_type="application/json",
        headers=headers,
    )


def error_body(error: WfError, *, rpc_code: int | None = None) -> bytes:
    """A JSON-RPC error object (``id`` null) for ``error``; ``rpc_code`` overrides its
    JSON-RPC number (``error.data.code`` stays the wf code)."""
    code = error.rpc_code if rpc_code is None else rpc_code
    return _encoder.encode(
        {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": code, "message": error.message, "data": error.to_dict()},
        }
    )


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer ...`` header; ``None`` without one.

    Raises :class:`Unauthorized` for a token that is not printable ASCII: aiohttp
    hands undecodable header bytes on as surrogates, which cannot even be hashed,
    and no token wf issues holds such characters. The value is never quoted.
    """
    if header is None or header[:7].lower() != "bearer ":
        return None
    token = header[7:].strip()
    if not (token.isascii() and token.isprintable()):
        raise Unauthorized(
            "the Authorization header holds characters no token has (printable ASCII only)",
            credential="token",
        )
    return token


def open_files_limit() -> tuple[int, int] | None:
    """The process's (soft, hard) open-file limit; ``None`` where there is none (Windows)."""
    if sys.platform == "win32":
        return None
    import resource

    return resource.getrlimit(resource.RLIMIT_NOFILE)


def raise_open_files_limit() -> tuple[int, int] | None:
    """Raise the soft open-file limit to the hard one where allowed, and log the result.

    Returns (soft, hard) afterwards; ``None`` on a platform without the limit.
    """
    if sys.platform == "win32":
        return None
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    before = soft
    unlimited = resource.RLIM_INFINITY
    targets = [hard] if hard != unlimited else []
    targets.append(OPEN_FILES_FALLBACK)
    for target in targets:
        if soft == unlimited or target <= soft:
            break
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            continue  # e.g. macOS refuses a hard limit above its kernel's
        soft = target
        break
    log.info(
        "open-file limit %s (was %s, hard limit %s)",
        _shown(soft),
        _shown(before),
        _shown(hard),
        extra={
            "action": "process.open_files",
            "soft": _shown(soft),
            "before": _shown(before),
            "hard": _shown(hard),
        },
    )
    return soft, hard


def _shown(limit: int) -> int | str:
    if sys.platform != "win32":
        import resource

        if limit == resource.RLIM_INFINITY:
            return "unlimited"
    return limit


def connections_allowed(configured: int, limits: tuple[int, int] | None) -> int:
    """``configured``, lowered to leave :data:`FDS_RESERVED` descriptors of the soft limit
    free (half of it, for a very small limit)."""
    if limits is None:
        return configured
    soft = limits[0]
    if sys.platform != "win32":
        import resource

        if soft == resource.RLIM_INFINITY:
            return configured
    return max(1, min(configured, max(soft - FDS_RESERVED, soft // 2)))


class _Phase(enum.Enum):
    IDLE = "idle"
    HEADER = "header"
    BUSY = "busy"


class BodyRefused(Exception):
    """A request body could not be read: answered ``status`` and the connection closed."""

    def __init__(self, status: int, error: InvalidArgument) -> None:
        super().__init__(error.message)
        self.status = status
        self.error = error


class HttpEdge:
    """The connection limit, timers and error bodies of one server (module docstring)."""

    def __init__(self, config: HttpConfig) -> None:
        self.config = config
        self.connections_max = config.connections_max
        """The limit in force (lowered by :meth:`listen` to fit the open-file limit)."""
        self.refused_total = 0
        """Connections refused for the limit since start."""
        self._open: set[EdgeHandler] = set()
        self._lingering: set[_Refusal] = set()
        self._refusal = b""
        self._refusals_unlogged = 0
        self._refusal_logged_at = -math.inf
        self.middleware = self._make_middleware()
        """The aiohttp middleware to install (phases, JSON-RPC bodies for HTTP errors)."""

    @property
    def open_connections(self) -> int:
        """Connections being served now (refused ones excluded)."""
        return len(self._open)

    async def listen(
        self, server: web.Server, host: str, port: int, ssl_context: ssl.SSLContext | None
    ) -> asyncio.Server:
        """Listen on ``host:port``, serving ``server`` (an ``AppRunner``'s) through the edge."""
        self.connections_max = connections_allowed(self.config.connections_max, open_files_limit())
        if self.connections_max < self.config.connections_max:
            log.warning(
                "connections_max lowered from %d to %d to fit the open-file limit",
                self.config.connections_max,
                self.connections_max,
                extra={
                    "action": "http.connections_max_lowered",
                    "configured": self.config.connections_max,
                    "connections_max": self.connections_max,
                },
            )
        self._refusal = self._refusal_answer()
        loop = asyncio.get_running_loop()
        idle_s = self.config.idle_timeout_s

        def handler() -> EdgeHandler:
            return EdgeHandler(server, self, loop=loop, keepalive_timeout=idle_s)

        tls: dict[str, Any] = {}
        if ssl_context is not None:
            tls = {
                "ssl_handshake_timeout": self.config.header_timeout_s,
                "ssl_shutdown_timeout": self.config.header_timeout_s,
            }
        return await loop.create_server(
            handler, host, port, ssl=ssl_context, backlog=BACKLOG, **tls
        )

    def close(self) -> None:
        """Reset the refusals still lingering (the server is stopping)."""
        for refusal in list(self._lingering):
            refusal.abort()

    async def read_body(self, request: web.BaseRequest) -> bytes:
        """The whole body, read within ``body_timeout_s``.

        Raises:
            web.HTTPRequestEntityTooLarge: over ``request_bytes_max`` (413).
            BodyRefused: too slow (408), or a body aiohttp cannot decode (400: bad
                chunked framing or content encoding).
        """
        limit = self.config.request_bytes_max
        length = request.content_length
        if length is not None and length > limit:
            raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=length)
        timeout_s = self.config.body_timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                return await request.read()
        except TimeoutError:
            log.info(
                "request body not received within %s s",
                timeout_s,
                extra={"action": "http.body_timeout", "peer": request.remote},
            )
            message = f"the request body did not arrive within {timeout_s} s"
            raise BodyRefused(408, InvalidArgument(message, http_status=408)) from None
        except web.RequestPayloadError as exc:
            reason = _reason(None, exc)
            log.info(
                "malformed request body: %s",
                reason,
                extra={"action": "http.bad_request", "status": 400, "peer": request.remote},
            )
            message = f"malformed request body: {reason}"
            raise BodyRefused(400, InvalidArgument(message, http_status=400)) from None

    # ------------------------------------------------------------ connections

    def _admit(self, connection: EdgeHandler) -> bool:
        if len(self._open) >= self.connections_max:
            return False
        self._open.add(connection)
        return True

    def _release(self, connection: EdgeHandler) -> None:
        self._open.discard(connection)

    def _refuse(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.refused_total += 1
        self._refusals_unlogged += 1
        now = loop.time()
        if now - self._refusal_logged_at >= REFUSAL_LOG_INTERVAL_S:
            log.warning(
                "refused %d connection(s): %d open, limit %d",
                self._refusals_unlogged,
                len(self._open),
                self.connections_max,
                extra={
                    "action": "http.connections_refused",
                    "refused": self._refusals_unlogged,
                    "connections_max": self.connections_max,
                },
            )
            self._refusal_logged_at = now
            self._refusals_unlogged = 0
        if len(self._lingering) >= REFUSALS_LINGERING_MAX:
            transport.abort()
            return
        self._lingering.add(_Refusal(self._lingering, transport, self._refusal, loop))

    def _refusal_answer(self) -> bytes:
        error = Overloaded(
            f"too many connections (limit {self.connections_max}); retry later",
            retry_after_s=REFUSAL_RETRY_AFTER_S,
            connections_max=self.connections_max,
        )
        body = error_body(error)
        head = (
            "HTTP/1.1 503 Service Unavailable\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n"
            f"Retry-After: {math.ceil(REFUSAL_RETRY_AFTER_S)}\r\n"
            "Connection: close\r\n\r\n"
        )
        return head.encode() + body

    # ------------------------------------------------------------ requests

    def _make_middleware(self) -> Middleware:
        @web.middleware
        async def edge(request: web.Request, handler: Handler) -> web.StreamResponse:
            protocol = request.protocol
            connection = protocol if isinstance(protocol, EdgeHandler) else None
            if connection is not None:
                connection.request_started()
            try:
                return await handler(request)
            except BodyRefused as exc:
                return await self._refuse_body(request, connection, exc)
            except web.HTTPException as exc:
                if exc.status < 400:
                    raise
                return self._http_error(exc)
            finally:
                if connection is not None:
                    connection.request_finished()

        return edge

    async def _refuse_body(
        self, request: web.Request, connection: EdgeHandler | None, refused: BodyRefused
    ) -> web.StreamResponse:
        response = rpc_error(refused.status, refused.error, rpc_code=INVALID_REQUEST)
        response.force_close()
        # Answered and closed now: aiohttp would otherwise go on draining the rest
        # of the body ("lingering") for up to ten more seconds, or fail on it again.
        await response.prepare(request)
        await response.write_eof()
        if connection is not None:
            connection.force_close()
        return response

    def _http_error(self, exc: web.HTTPException) -> web.Response:
        status = exc.status
        details: dict[str, Any] = {"http_status": status}
        headers: dict[str, str] = {}
        if status == 413:
            message = f"the request body is over {self.config.request_bytes_max} bytes"
            details["limit_bytes"] = self.config.request_bytes_max
        elif status == 404:
            message = "no such path (JSON-RPC is POST /rpc)"
        elif status == 405:
            message = "method not allowed (JSON-RPC is POST /rpc)"
            allow = exc.headers.get("Allow")
            if allow is not None:
                headers["Allow"] = allow
        else:
            message = exc.reason
        response = rpc_error(
            status, InvalidArgument(message, **details), rpc_code=INVALID_REQUEST, headers=headers
        )
        if status == 413:
            response.force_close()  # the rest of the body is not read
        return response


def _reason(message: str | None, exc: BaseException | None) -> str:
    """What a parser refused, without a byte of the request: its messages quote the
    offending line (a token included), after a colon or on the next lines, or whole
    for the errors named in :data:`_QUOTING_ERRORS`."""
    for kind, reason in _QUOTING_ERRORS:
        if isinstance(exc, kind):
            return reason
    text = message if message else str(exc) if exc is not None else ""
    text = _STATUS_PREFIX.sub("", text.strip())  # aiohttp's "400, message:" framing
    first = text.split("\n", 1)[0].split(":", 1)[0].strip()
    if len(first) > REASON_CHARS_MAX:
        first = first[:REASON_CHARS_MAX] + "..."
    return redact(first) or "malformed request"


class EdgeHandler(web.RequestHandler):
    """aiohttp's per-connection protocol with the edge's phases and refusal."""

    __slots__ = ("_edge", "_edge_loop", "_phase", "_timer")

    def __init__(
        self,
        manager: web.Server,
        edge: HttpEdge,
        *,
        loop: asyncio.AbstractEventLoop,
        keepalive_timeout: float,
    ) -> None:
        super().__init__(manager, loop=loop, keepalive_timeout=keepalive_timeout)
        self._edge = edge
        self._edge_loop = loop
        self._phase = _Phase.IDLE
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not self._edge._admit(self):
            # A stream transport (uvloop's is not an asyncio.Transport subclass).
            self._edge._refuse(cast(asyncio.Transport, transport), self._edge_loop)
            return
        super().connection_made(transport)
        self._enter(_Phase.IDLE)

    def data_received(self, data: bytes) -> None:
        if self._phase is _Phase.IDLE and data:
            self._enter(_Phase.HEADER)
        super().data_received(data)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._cancel_timer()
        self._edge._release(self)
        super().connection_lost(exc)

    def request_started(self) -> None:
        """A handler runs: the connection is busy, whatever it waits for."""
        self._enter(_Phase.BUSY)

    def request_finished(self) -> None:
        """The handler returned: idle again, unless the connection is gone."""
        if self.transport is not None:
            self._enter(_Phase.IDLE)

    def _enter(self, phase: _Phase) -> None:
        self._cancel_timer()
        self._phase = phase
        config = self._edge.config
        if phase is _Phase.IDLE:
            self._timer = self._edge_loop.call_later(config.idle_timeout_s, self._expire)
        elif phase is _Phase.HEADER:
            self._timer = self._edge_loop.call_later(config.header_timeout_s, self._expire)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        self._timer = None
        if self._phase is _Phase.HEADER:
            log.info(
                "request header not received within %s s",
                self._edge.config.header_timeout_s,
                extra={"action": "http.header_timeout", "peer": _peer(self.transport)},
            )
        self.force_close()

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """The answer to a request aiohttp could not parse (400) or whose handler raised
        (500, 504): a JSON-RPC error. The parser's message is not logged whole: it
        quotes the offending line, which may hold a credential."""
        if status >= 500:
            log.error(
                "internal error answering an HTTP request",
                exc_info=exc,
                extra={"action": "http.internal_error", "status": status, "peer": request.remote},
            )
            error: WfError = Internal("Internal error")
            rpc_code = INTERNAL_ERROR
        else:
            reason = _reason(message, exc)
            log.info(
                "malformed HTTP request: %s",
                reason,
                extra={"action": "http.bad_request", "status": status, "peer": request.remote},
            )
            error = InvalidArgument(f"malformed HTTP request: {reason}", http_status=status)
            rpc_code = INVALID_REQUEST
        if request.writer.output_size > 0:
            # Part of an answer went out already: another one cannot follow.
            raise ConnectionError("a response was partly sent; closing the connection")
        response = rpc_error(status, error, rpc_code=rpc_code)
        response.force_close()
        return response


class _Refusal(asyncio.Protocol):
    """A connection over the limit: the 503 is written, the rest drained, then closed."""

    def __init__(
        self,
        lingering: set[_Refusal],
        transport: asyncio.Transport,
        answer: bytes,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._lingering = lingering
        self._transport = transport
        transport.set_protocol(self)
        transport.write(answer)
        if transport.can_write_eof():
            transport.write_eof()
        self._timer = loop.call_later(REFUSAL_LINGER_S, transport.abort)

    def data_received(self, data: bytes) -> None:
        """Discarded: the answer is already written."""

    def eof_received(self) -> bool:
        return False  # the client is done: close

    def connection_lost(self, exc: Exception | None) -> None:
        self._timer.cancel()
        self._lingering.discard(self)

    def abort(self) -> None:
        """Reset the connection now."""
        self._transport.abort()


def _peer(transport: asyncio.BaseTransport | None) -> str | None:
    if transport is None:
        return None
    peer = transport.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else None
