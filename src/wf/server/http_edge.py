"""The HTTP edge of ``wf-rpc-server``: connection limit, timeouts, JSON-RPC error bodies.

Theory of operation
-------------------
:mod:`wf.server.http_server` parses HTTP (httptools); this module holds the
rules it serves under: how long and how many (settings in ``server.http``,
:class:`~wf.server.config.HttpConfig`), and what a refusal looks like. Every
accepted connection has one timer and three phases:

* **idle**: no request in progress (just accepted, or between two requests);
  closed after ``idle_timeout_s``.
* **header**: the first byte of a request arrived and its header is not
  complete; closed after ``header_timeout_s``. This is what ends a slowloris
  client (a header trickled byte by byte, or never finished). Over TLS the
  handshake is bounded by the same figure.
* **busy**: a handler is running; no timer, so a long poll waiting for work
  is never taken for an idle connection. Reading the body is bounded by
  ``body_timeout_s``: a body trickled slower is answered 408 and the
  connection closed.

Connections are counted from ``connection_made`` to ``connection_lost``
(over TLS, once the handshake is done: a handshake in progress is bounded by
time, not counted). One over the limit is refused before anything is read:
an HTTP 503 whose body is a JSON-RPC ``overloaded`` error, the write side
shut, whatever the client sends drained for :data:`REFUSAL_LINGER_S` so that
it reads the answer rather than a reset, then closed. At most
:data:`REFUSALS_LINGERING_MAX` refusals linger at once; beyond that a refused
connection is reset at once. Refusals are logged at warning, at most one line
per :data:`REFUSAL_LOG_INTERVAL_S`, with the count.

The limit must fit the process's open-file limit, or ``accept()`` fails
(``EMFILE``) and every client suffers, the store too: at start
:func:`raise_open_files_limit` raises the soft limit to the hard one where
allowed, and :func:`connections_allowed` lowers the configured limit so that
:data:`FDS_RESERVED` descriptors stay free for the store, logs and refusals.

Every refusal at this level is a JSON-RPC error object (``id`` null, HTTP
status kept; :func:`error_body`): a request the parser refuses (400; the
log line and the answer name the fault, never quote the request: a header
line may hold a token, see :func:`parser_reason`), a head over the limits
(400, 431), an unknown path or method (404, 405), a body too large (413) or
too slow (408), too many connections (503). ``error.data`` carries the wf
error (``invalid_argument``, ``overloaded``, ``internal``) so that typed
clients map it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import sys
from typing import Final

import httptools
import msgspec

from wf.errors import InvalidArgument, Overloaded, Unauthorized, WfError
from wf.server.config import HttpConfig
from wf.server.redaction import redact

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
"""Listen backlog (asyncio's and aiohttp's default)."""
REASON_CHARS_MAX: Final = 120
"""Longest parser reason quoted in an answer or a log line."""
OPEN_FILES_FALLBACK: Final = 10_240
"""Soft open-file limit tried when the hard limit is unlimited or refused (macOS)."""

_encoder = msgspec.json.Encoder()
_NAMED_ERRORS: Final[tuple[tuple[type[BaseException], str], ...]] = (
    # httptools' errors by what they mean; a subclass comes before its base.
    (httptools.HttpParserInvalidMethodError, "invalid method"),
    (httptools.HttpParserInvalidURLError, "invalid request target"),
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

    Raises :class:`Unauthorized` for a token that is not printable ASCII (header
    bytes above 127 arrive as Latin-1 letters): no token wf issues holds such
    characters. The value is never quoted.
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
        """The limit in force (lowered by :meth:`prepare` to fit the open-file limit)."""
        self.refused_total = 0
        """Connections refused for the limit since start."""
        self._open: set[object] = set()
        self._lingering: set[_Refusal] = set()
        self._refusal = b""
        self._refusals_unlogged = 0
        self._refusal_logged_at = -math.inf

    @property
    def open_connections(self) -> int:
        """Connections being served now (refused ones excluded)."""
        return len(self._open)

    def prepare(self) -> None:
        """Fit the limit to the open-file limit (logged when lowered); before listening."""
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

    def close(self) -> None:
        """Reset the refusals still lingering (the server is stopping)."""
        for refusal in list(self._lingering):
            refusal.abort()

    # ------------------------------------------------------------ connections

    def admit(self, connection: object) -> bool:
        """Count ``connection`` in, unless the limit is reached (then refuse it)."""
        if len(self._open) >= self.connections_max:
            return False
        self._open.add(connection)
        return True

    def release(self, connection: object) -> None:
        """``connection`` closed."""
        self._open.discard(connection)

    def refuse(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        """Answer a connection over the limit 503 (lingering), or reset it."""
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


def parser_reason(exc: BaseException) -> str:
    """What the parser refused, without a byte of the request: llhttp's messages name
    the fault only, but the first line before any colon is all that is kept, bounded
    and redacted, should one ever quote."""
    for kind, reason in _NAMED_ERRORS:
        if isinstance(exc, kind):
            return reason
    text = str(exc).strip()
    first = text.split("\n", 1)[0].split(":", 1)[0].strip()
    if len(first) > REASON_CHARS_MAX:
        first = first[:REASON_CHARS_MAX] + "..."
    return redact(first) or "malformed request"


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
