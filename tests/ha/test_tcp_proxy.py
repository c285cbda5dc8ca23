"""The fault proxy itself: pass, black hole and reset, on real loopback sockets.

The upstream is a small echo server on a thread; every wait is a socket
timeout, never a sleep.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from .tcp_proxy import TcpProxy

SILENCE_S = 0.3
"""How long a test listens to conclude that nothing arrives (a black hole's answer)."""
ANSWER_S = 5.0
"""Bound for an answer that must arrive."""


class EchoServer:
    """Echoes every byte back; counts the connections it saw close."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.closed_by_peer = 0
        self.lock = threading.Lock()
        self.received = bytearray()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        with conn:
            while True:
                try:
                    data = conn.recv(4096)
                except OSError:
                    data = b""
                if not data:
                    with self.lock:
                        self.closed_by_peer += 1
                    return
                with self.lock:
                    self.received += data
                conn.sendall(data)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.close()


@pytest.fixture
def proxy(echo: EchoServer) -> Iterator[TcpProxy]:
    with TcpProxy("127.0.0.1", echo.port) as p:
        yield p


def connect(proxy: TcpProxy) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=ANSWER_S)
    return sock


def exchange(proxy: TcpProxy) -> None:
    """Connect, send a byte, read: the RST may come at connect() or at the read."""
    with connect(proxy) as sock:
        sock.settimeout(ANSWER_S)
        sock.sendall(b"x")
        sock.recv(4096)


def echoed(sock: socket.socket, payload: bytes) -> bytes:
    sock.settimeout(ANSWER_S)
    sock.sendall(payload)
    got = b""
    while len(got) < len(payload):
        chunk = sock.recv(4096)
        if not chunk:
            break
        got += chunk
    return got


def test_pass_mode_forwards_bytes_both_ways(proxy: TcpProxy) -> None:
    with connect(proxy) as sock:
        assert echoed(sock, b"hello") == b"hello"
        assert echoed(sock, b"x" * 100_000) == b"x" * 100_000


def test_blackhole_swallows_bytes_both_ways_and_keeps_the_connection_open(
    proxy: TcpProxy, echo: EchoServer
) -> None:
    with connect(proxy) as sock:
        assert echoed(sock, b"before") == b"before"
        proxy.set_mode("blackhole")
        sock.sendall(b"lost")
        sock.settimeout(SILENCE_S)
        # Neither an answer nor an end of stream: recv times out.
        with pytest.raises(TimeoutError):
            sock.recv(4096)
        assert bytes(echo.received) == b"before"
        assert proxy.open_connections == 1


def test_blackhole_hides_the_upstream_closing_from_the_client(proxy: TcpProxy) -> None:
    with connect(proxy) as sock:
        assert echoed(sock, b"ping") == b"ping"
        proxy.set_mode("blackhole")
        proxy.set_mode("pass")
        # The black-holed connection stays black-holed after the mode returns to pass.
        sock.sendall(b"still lost")
        sock.settimeout(SILENCE_S)
        with pytest.raises(TimeoutError):
            sock.recv(4096)


def test_connections_made_after_a_blackhole_ends_pass_again(proxy: TcpProxy) -> None:
    proxy.set_mode("blackhole")
    proxy.set_mode("pass")
    with connect(proxy) as sock:
        assert echoed(sock, b"fresh") == b"fresh"


def test_reset_closes_open_connections_with_an_rst(proxy: TcpProxy) -> None:
    with connect(proxy) as sock:
        assert echoed(sock, b"ping") == b"ping"
        proxy.set_mode("reset")
        sock.settimeout(ANSWER_S)
        with pytest.raises(ConnectionResetError):
            sock.recv(4096)


def test_reset_also_ends_black_holed_connections(proxy: TcpProxy) -> None:
    with connect(proxy) as sock:
        assert echoed(sock, b"ping") == b"ping"
        proxy.set_mode("blackhole")
        proxy.set_mode("reset")
        sock.settimeout(ANSWER_S)
        with pytest.raises(ConnectionResetError):
            sock.recv(4096)
        assert proxy.open_connections == 0


def test_new_connections_are_reset_until_the_mode_is_pass_again(proxy: TcpProxy) -> None:
    proxy.set_mode("reset")
    with pytest.raises(ConnectionResetError):
        exchange(proxy)
    proxy.set_mode("pass")
    with connect(proxy) as sock:
        assert echoed(sock, b"back") == b"back"


def test_an_upstream_refusing_connections_resets_the_client() -> None:
    free = socket.create_server(("127.0.0.1", 0))
    port = int(free.getsockname()[1])
    free.close()  # nobody listens there now
    with TcpProxy("127.0.0.1", port) as proxy, pytest.raises(ConnectionResetError):
        exchange(proxy)


def test_an_unknown_mode_is_refused(proxy: TcpProxy) -> None:
    with pytest.raises(ValueError, match="unknown proxy mode"):
        proxy.set_mode("drop")  # type: ignore[arg-type]
