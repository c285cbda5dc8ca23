"""Issue 13, item 7: no credential ever appears in any log line.

A battery of requests carrying the one valid token, well-formed and not: a
stray CR, LF or NUL after it (aiohttp's parser refuses those, and on main
its ``aiohttp.server`` logger wrote the offending header line, token
included, at error), a non-ASCII byte, a header injection, the token in an
over-long line, in another header, in a garbled request line, in a body
over the limit, in a header trickled too slowly. Then every log the server
wrote is searched for the token: the standard error of a real
``wf-rpc-server`` process (JSON and text formats, debug level so that every
logger speaks, aiohttp's access log included), and every record captured
in-process. Each search first checks that the battery did produce log lines,
so a silent server cannot pass.

Checked against main at 156d501: the process's log held the token (in
``aiohttp.server``'s "Error handling request" tracebacks).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from pathlib import Path
from typing import Any

import pytest
from _edge import (
    STOP_TIMEOUT_S,
    TOKEN,
    edge_config,
    process_config,
    request,
    rpc_body,
    server_process,
    serving,
)

from wf.server.config import HttpConfig
from wf.server.logs import JsonFormatter, TextFormatter
from wf.server.redaction import REDACTED, RedactCredentials

SECRET = TOKEN.removeprefix("tok-edge-")
"""The random part of the token: no log may hold even this much of it."""
HTTP = {"header_timeout_s": 0.5, "request_bytes_max": 4096}
"""Short header timeout (the slow case), small body limit (the oversize case)."""

T = TOKEN.encode()
BATTERY: list[bytes] = [
    request(rpc_body()),  # a valid call
    request(rpc_body("no.such.method")),  # a valid credential, an error answer
    request(rpc_body(), authorization=b"Bearer " + T + b"\x00"),
    request(rpc_body(), authorization=b"Bearer " + T + b"\r"),
    request(rpc_body(), authorization=b"Bearer " + T + b"\n"),
    request(rpc_body(), authorization=b"Bearer " + T + b"\rX-Injected: 1"),
    request(rpc_body(), authorization=b"Bearer " + T + b"\r\nX-Injected: 1"),
    request(rpc_body(), authorization=b"Bearer " + T + b"\xff"),
    request(rpc_body(), authorization=b"Bearer " + T + "é".encode()),
    request(rpc_body(), authorization=b"Bearer " + T + b"\x7f"),
    request(rpc_body(), authorization=b"Bearer " + T + b" " + b"a" * 9000),
    request(rpc_body(), authorization=b"Basic " + T + b"\x00"),
    request(rpc_body(), authorization=T + b"\x00"),
    request(rpc_body(), authorization=b"bearer\t" + T),
    request(rpc_body(), authorization=None, headers=b"Authorization Bearer " + T + b"\r\n"),
    request(rpc_body(), authorization=None, headers=b"X-Token: " + T + b"\x00\r\n"),
    request(rpc_body(), authorization=None, headers=b"X-Token: " + T + b"a" * 9000 + b"\r\n"),
    request(rpc_body(), headers=b"Authorization: Bearer " + T + b"\r\n"),  # twice
    request(b"x" * 5000),  # over the body limit, with the token
    request(b'{"jsonrpc": "2.0", "id": 1, "method": "rpc.discover", "params": {"t": "\xff"}}'),
    request(b"[" * 1000 + b"]" * 1000),
    request(method=b"GET"),
    request(rpc_body(), path=b"/nowhere"),
    T + b" /rpc HTTP/1.1\r\n\r\n",  # a garbled request line
    b"POST " + T + b" HTTP/1.1\r\n\r\n",
    b"Authorization: Bearer " + T + b"\r\n\r\n",  # the header alone, as a request line
]
SLOW = b"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + T
"""A header that never ends (closed by the header timeout)."""


async def send_battery(port: int) -> None:
    for data in BATTERY:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(data)
        await writer.drain()
        async with asyncio.timeout(10.0):
            with contextlib.suppress(ConnectionResetError):  # a reset answers too
                await reader.read()
        writer.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(SLOW)
    async with asyncio.timeout(10.0):
        assert await reader.read() == b""
    writer.close()


def assert_no_token(text: str, where: str) -> None:
    assert TOKEN not in text, f"the token is in {where}"
    assert SECRET not in text, f"part of the token is in {where}"


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_no_line_a_server_process_logs_holds_the_token(tmp_path: Path, log_format: str) -> None:
    config = process_config(HTTP, observability={"log_level": "debug", "log_format": log_format})
    with server_process(tmp_path, config) as (proc, port, log_path):
        asyncio.run(asyncio.wait_for(send_battery(port), 60.0))
        proc.terminate()
        assert proc.wait(STOP_TIMEOUT_S) == 0
        assert proc.stdout is not None
        stdout = proc.stdout.read()
    log = log_path.read_text()
    # The battery was heard: refusals, timeouts and access lines were all logged.
    for action in ("http.bad_request", "http.header_timeout", "http.access"):
        assert action in log, f"no {action} line: the search would prove nothing"
    assert_no_token(log, "the server's standard error")
    assert_no_token(stdout, "the server's standard output")


def test_no_record_captured_in_process_holds_the_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever handler formats them (here pytest's, not wf's), the records themselves are
    clean; a library logging a header line the way aiohttp's parser errors did on main is
    scrubbed at its own logger."""
    http = HttpConfig(header_timeout_s=0.5, request_bytes_max=4096)

    async def scenario() -> None:
        async with serving(edge_config(tmp_path, http, log_level="debug")) as server:
            assert server.port is not None
            await asyncio.wait_for(send_battery(server.port), 60.0)

    # Every logger at debug, the access log too.
    caplog.set_level(logging.DEBUG, logger="wf.http.access")
    with caplog.at_level(logging.DEBUG):
        asyncio.run(scenario())
        try:
            raise ValueError(f"Invalid header value char: b'Authorization: Bearer {TOKEN}\\x00'")
        except ValueError:
            logging.getLogger("aiohttp.server").exception("Error handling request from 127.0.0.1")
    names = {record.name for record in caplog.records}
    assert {"wf.http", "wf.http.access", "aiohttp.server"} <= names, names
    scrubbed = caplog.records[-1].exc_text
    assert scrubbed is not None
    assert REDACTED in scrubbed
    formatter = logging.Formatter("%(name)s %(message)s")
    for record in caplog.records:
        where = f"a {record.name} record"
        assert_no_token(formatter.format(record), where)
        assert_no_token(repr(_fields(record)), where)


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in record.__dict__.items() if k not in ("exc_info", "args", "msg")}


def test_the_filter_scrubs_message_arguments_tracebacks_and_extra_fields() -> None:
    try:
        raise ValueError(f"bad header: b'Authorization: Bearer {TOKEN}\\x00'")
    except ValueError:
        exc_info = sys.exc_info()
    record = logging.LogRecord(
        "aiohttp.server", logging.ERROR, __file__, 1, "got %s", (f"Bearer {TOKEN}",), exc_info
    )
    record.header = f"authorization: {TOKEN}"
    assert RedactCredentials().filter(record) is True
    for formatter in (JsonFormatter(), TextFormatter(), logging.Formatter()):
        line = formatter.format(record)
        assert_no_token(line, type(formatter).__name__)
        assert REDACTED in line
        assert "ValueError" in line  # the traceback is kept, scrubbed
    assert record.getMessage() == f"got Bearer {REDACTED}"


def test_a_line_without_a_credential_is_left_alone() -> None:
    record = logging.LogRecord("wf.rpc", logging.INFO, __file__, 1, "x %s %d", ("y", 3), None)
    assert RedactCredentials().filter(record) is True
    assert record.getMessage() == "x y 3"
