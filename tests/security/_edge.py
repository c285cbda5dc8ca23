"""Raw HTTP over loopback for the HTTP-edge tests (issue 13, items 6 and 7).

The edge is about bytes on a socket (a header that never ends, a NUL after a
token), which no HTTP client will send, so these helpers speak HTTP/1.1 by
hand over asyncio streams. Every wait is bounded: a read that does not see
the server close the connection in time fails the test.
"""

from __future__ import annotations

import asyncio
import json
import selectors
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from wf.server.app import WfServer
from wf.server.auth import CredentialConfig, hash_token
from wf.server.config import (
    HttpConfig,
    ObservabilityConfig,
    SecurityConfig,
    ServerConfig,
    ServerSection,
    StoreConfig,
    TlsConfig,
)

TOKEN = "tok-edge-Zq7x3VhB9kLm"
"""The one valid admin token of these servers."""
CLOSE_SLACK_S = 2.0
"""How much later than its timeout a connection may be seen closed (a loaded 2-core box)."""


def edge_config(
    root: Path,
    http: HttpConfig,
    *,
    tls: TlsConfig | None = None,
    log_level: Literal["debug", "info", "warning", "error"] = "info",
) -> ServerConfig:
    """A loopback server on port 0 requiring :data:`TOKEN`."""
    credential = CredentialConfig(name="admin", role="admin", token_sha256=hash_token(TOKEN))
    return ServerConfig(
        server=ServerSection(
            port=0,
            store=StoreConfig(root=str(root), durability="process"),
            security=SecurityConfig(credentials=[credential], tls=tls),
            observability=ObservabilityConfig(log_level=log_level),
            http=http,
        )
    )


@asynccontextmanager
async def serving(config: ServerConfig) -> AsyncIterator[WfServer]:
    """A started in-process server, stopped afterwards."""
    server = WfServer(config)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def rpc_body(method: str = "rpc.discover", params: dict[str, Any] | None = None) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
    ).encode()


def request(
    body: bytes = b"",
    *,
    method: bytes = b"POST",
    path: bytes = b"/rpc",
    authorization: bytes | None = b"Bearer " + TOKEN.encode(),
    headers: bytes = b"",
    close: bool = True,
) -> bytes:
    """One HTTP/1.1 request, byte for byte as given (nothing is escaped or checked)."""
    head = b"%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n" % (method, path)
    if authorization is not None:
        head += b"Authorization: " + authorization + b"\r\n"
    if close:
        head += b"Connection: close\r\n"
    head += headers
    if b"content-length" not in headers.lower() and b"transfer-encoding" not in headers.lower():
        head += b"Content-Length: %d\r\n" % len(body)
    return head + b"\r\n" + body


@dataclass(frozen=True)
class Answer:
    """A parsed HTTP response."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def parse(raw: bytes) -> Answer:
    head, sep, body = raw.partition(b"\r\n\r\n")
    assert sep, f"no complete HTTP response: {raw[:200]!r}"
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Answer(status=status, headers=headers, body=body)


async def read_until_closed(reader: asyncio.StreamReader, timeout_s: float) -> bytes:
    """Everything the server sends until it closes; fails if it does not within ``timeout_s``."""
    chunks = []
    try:
        async with asyncio.timeout(timeout_s):
            while chunk := await reader.read(65536):
                chunks.append(chunk)
    except TimeoutError:
        raise AssertionError(f"the server did not close the connection in {timeout_s} s") from None
    except ConnectionResetError:
        pass  # a reset closes too
    return b"".join(chunks)


async def exchange(port: int, data: bytes, *, timeout_s: float = 10.0, **connect: Any) -> Answer:
    """Send ``data`` on a new connection; the response, once the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, **connect)
    try:
        writer.write(data)
        await writer.drain()
        return parse(await read_until_closed(reader, timeout_s))
    finally:
        writer.close()


async def read_response(reader: asyncio.StreamReader, timeout_s: float = 10.0) -> Answer:
    """One ``Content-Length`` response off a kept-alive connection."""
    async with asyncio.timeout(timeout_s):
        head = await reader.readuntil(b"\r\n\r\n")
        answer = parse(head)
        body = await reader.readexactly(int(answer.headers["content-length"]))
    return Answer(status=answer.status, headers=answer.headers, body=body)


async def closed_after(
    reader: asyncio.StreamReader, timeout_s: float, *, since: float | None = None
) -> float:
    """Seconds from ``since`` (default now) until the server closed the connection;
    it must send nothing, and close within ``timeout_s``."""
    started = time.monotonic() if since is None else since
    data = await read_until_closed(reader, timeout_s)
    assert data == b"", data[:200]
    return time.monotonic() - started


async def wait_for(check: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    """Poll ``check`` on the loop until it holds; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.01)


def assert_rpc_error(answer: Answer, status: int, rpc_code: int | None = None) -> dict[str, Any]:
    """The answer is HTTP ``status`` with a JSON-RPC 2.0 error object; that error."""
    assert answer.status == status, (answer.status, answer.body[:300])
    assert answer.headers.get("content-type", "").startswith("application/json"), answer.headers
    document = answer.json()
    assert document["jsonrpc"] == "2.0"
    assert document["id"] is None
    error = document["error"]
    assert isinstance(error["code"], int)
    assert isinstance(error["message"], str)
    assert error["message"]
    if rpc_code is not None:
        assert error["code"] == rpc_code, error
    assert isinstance(error, dict)
    return error


# ------------------------------------------------------------ real processes

BIN = Path(sys.executable).parent
START_TIMEOUT_S = 20.0
"""Bound for a ``wf-rpc-server`` to print its ``listening`` line."""
STOP_TIMEOUT_S = 15.0
"""Bound for it to exit."""


def process_config(http: dict[str, Any], **server: Any) -> dict[str, Any]:
    """A ``wf-rpc-server`` configuration document requiring :data:`TOKEN`."""
    credential = {"name": "admin", "role": "admin", "token_sha256": hash_token(TOKEN)}
    return {"server": {"security": {"credentials": [credential]}, "http": http, **server}}


@contextmanager
def server_process(
    tmp_path: Path, config: dict[str, Any], *, ulimit: tuple[int, int] | None = None
) -> Iterator[tuple[subprocess.Popen[str], int, Path]]:
    """``wf-rpc-server`` (under an open-file limit (soft, hard) if given), its port and
    the file its standard error goes to; killed afterwards if still running."""
    config_path = tmp_path / "server.json"
    config_path.write_text(json.dumps(config))
    log_path = tmp_path / "server.log"
    command = [
        str(BIN / "wf-rpc-server"),
        *("--store-root", str(tmp_path / "store"), "--port", "0"),
        *("--config", str(config_path)),
    ]
    if ulimit is not None:
        shell = f'ulimit -Sn {ulimit[0]} && ulimit -Hn {ulimit[1]} && exec "$@"'
        command = ["/bin/sh", "-c", shell, "sh", *command]
    with log_path.open("w") as log_file:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log_file, text=True)
    try:
        assert proc.stdout is not None
        port = None
        deadline = time.monotonic() + START_TIMEOUT_S
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdout, selectors.EVENT_READ)
            while port is None:
                remaining = deadline - time.monotonic()
                assert remaining > 0, log_path.read_text()[-2000:]
                assert proc.poll() is None, log_path.read_text()[-2000:]
                if selector.select(min(remaining, 0.5)):
                    event = json.loads(proc.stdout.readline() or "{}")
                    if event.get("event") == "listening":
                        port = int(event["port"])
        yield proc, port, log_path
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(STOP_TIMEOUT_S)
        if proc.stdout is not None:
            proc.stdout.close()


def log_lines(log_path: Path) -> list[dict[str, Any]]:
    """Every JSON line of a server's log."""
    lines = []
    for raw in log_path.read_text().splitlines():
        try:
            lines.append(json.loads(raw))
        except json.JSONDecodeError:
            continue
    return lines
