"""A TCP proxy that a test switches between passing, black-holing and resetting.

It stands between one wf server and PostgreSQL, so a test can cut that one
node off without firewall rules (issue 15, "How to prove it"):

- ``pass``: bytes flow both ways.
- ``blackhole``: nothing flows any more, in either direction, and nothing is
  closed: what either side sends is read and dropped (so neither side's
  send buffer fills up and tells it something), an end of stream is not
  passed on. Both ends see a peer that went silent, as with a cable pulled
  out. A connection black-holed once stays black-holed: the bytes it lost
  make its stream unusable, so only connections made later pass again.
- ``reset``: every open connection is closed with an RST on both sides
  (``SO_LINGER`` 0) and every new one is accepted and reset at once, until
  the mode is set back to ``pass``.

The proxy runs its own asyncio loop in a daemon thread, so a blocking test
switches modes with :meth:`TcpProxy.set_mode`, which returns once the mode
is applied to every open connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeVar

Mode = Literal["pass", "blackhole", "reset"]
MODES: Final[tuple[Mode, ...]] = ("pass", "blackhole", "reset")
CHUNK: Final = 65_536
"""Bytes read at once from either side."""
CALL_TIMEOUT_S: Final = 10.0
"""Bound on a blocking call into the proxy's loop (start, mode switch, close)."""

_T = TypeVar("_T")


def _rst(writer: asyncio.StreamWriter) -> None:
    """Close with an RST: linger on, timeout 0, then abort."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@dataclass(eq=False)
class _Link:
    """One proxied connection: the client's side and PostgreSQL's side."""

    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    blackholed: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def reset(self) -> None:
        for task in self.tasks:
            task.cancel()
        _rst(self.client)
        _rst(self.upstream)


class TcpProxy:
    """Listens on ``127.0.0.1:<port>`` and forwards to ``target_host:target_port``.

    ``with TcpProxy("127.0.0.1", 5432) as proxy: ... proxy.port ...``
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self._mode: Mode = "pass"
        self._links: set[_Link] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self.port = 0
        """The listening port (set by :meth:`start`)."""
        self.accepted = 0
        """Connections accepted so far (reset ones included)."""

    # -------------------------------------------------------------- lifecycle

    def start(self) -> TcpProxy:
        """Bind a free port and start forwarding (mode ``pass``)."""
        self._thread.start()
        self._server = self._call(
            asyncio.start_server(self._accept, "127.0.0.1", 0, reuse_address=True)
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    def close(self) -> None:
        """Stop listening, reset every connection and stop the loop's thread."""
        if not self._thread.is_alive():
            return
        self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(CALL_TIMEOUT_S)
        self._loop.close()

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ modes

    @property
    def mode(self) -> Mode:
        """The current mode."""
        return self._mode

    @property
    def open_connections(self) -> int:
        """Connections currently proxied (black-holed ones included)."""
        return int(self._call(self._count()))

    def set_mode(self, mode: Mode) -> None:
        """Switch modes; returns once every open connection follows the new mode."""
        if mode not in MODES:
            raise ValueError(f"unknown proxy mode {mode!r}; one of {MODES}")
        self._call(self._apply(mode))

    # ---------------------------------------------------------- on the loop

    def _call(self, coro: Coroutine[Any, Any, _T]) -> _T:
        future: Future[_T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(CALL_TIMEOUT_S)

    async def _count(self) -> int:
        return len(self._links)

    async def _apply(self, mode: Mode) -> None:
        self._mode = mode
        if mode == "blackhole":
            for link in self._links:
                link.blackholed = True
        elif mode == "reset":
            links, self._links = self._links, set()
            for link in links:
                link.reset()

    def _resetting(self) -> bool:
        """Read afresh: the mode may change while a connection is being made."""
        return self._mode == "reset"

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._apply("reset")

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self._mode == "reset":
            _rst(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(self.target_host, self.target_port)
        except OSError:
            _rst(writer)
            return
        link = _Link(client=writer, upstream=up_writer, blackholed=self._mode == "blackhole")
        if self._resetting():  # switched while connecting
            link.reset()
            return
        self._links.add(link)
        link.tasks = [
            asyncio.create_task(self._pump(link, reader, up_writer)),
            asyncio.create_task(self._pump(link, up_reader, writer)),
        ]

    async def _pump(
        self, link: _Link, source: asyncio.StreamReader, sink: asyncio.StreamWriter
    ) -> None:
        """Copy ``source`` to ``sink`` while the link passes; drop bytes once black-holed."""
        try:
            while True:
                data = await source.read(CHUNK)
                if link.blackholed:
                    if not data:
                        # The peer closed: a black hole does not say so. Keep the
                        # other side open and idle until a reset or close.
                        await asyncio.Event().wait()
                    continue
                if not data:
                    break
                sink.write(data)
                await sink.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        # One side ended (or failed) while passing: end both, as a proxy would.
        if link in self._links:
            self._links.discard(link)
            for task in link.tasks:
                if task is not asyncio.current_task():
                    task.cancel()
            link.client.close()
            link.upstream.close()
