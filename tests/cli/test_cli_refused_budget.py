"""With no server running, a one-call ``wf`` command fails in seconds.

The client's failover budget (15 s) rides out a takeover; when every attempt
is refused outright nothing listens, so the command line's one-call commands
give up after a short budget instead (``refused_timeout_s``), while a server
that is there but slow, workers and ``App`` keep the full one.
"""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
from _wf_runner import closed_port, wf_process

from wf.client.rpc_client import RpcClient
from wf.errors import RpcUnavailable


def test_runs_list_without_a_server_fails_within_seconds() -> None:
    port = closed_port()
    began = time.monotonic()
    done = wf_process("runs", "list", "--server", f"http://127.0.0.1:{port}")
    elapsed = time.monotonic() - began
    assert done.returncode == 1, done.stderr
    assert "is wf-rpc-server running?" in done.stderr
    assert elapsed < 8.0, elapsed  # not the client's 15 s budget


def test_the_cli_refused_budget_is_the_clients() -> None:
    # wf.cli.connect keeps its own copy so that building the parser loads no client.
    from wf.cli import connect
    from wf.client import rpc_client

    assert connect.REFUSED_TIMEOUT_S == rpc_client.REFUSED_TIMEOUT_S


def test_the_short_budget_applies_only_while_every_attempt_is_refused() -> None:
    refused_port = closed_port()

    async def main() -> tuple[str, str]:
        async with RpcClient(
            f"http://127.0.0.1:{refused_port}", failover_timeout_s=30.0, refused_timeout_s=0.3
        ) as client:
            with pytest.raises(RpcUnavailable) as refused:
                await client.call("rpc.discover")
        # A server that accepts the connection and never answers: not "nothing
        # listens", so the full budget holds.
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        try:
            async with RpcClient(
                f"http://127.0.0.1:{silent.getsockname()[1]}",
                failover_timeout_s=0.8,
                refused_timeout_s=0.1,
                request_timeout_s=0.3,
            ) as client:
                with pytest.raises(RpcUnavailable) as unanswered:
                    await client.call("rpc.discover")
        finally:
            silent.close()
        return refused.value.message, unanswered.value.message

    refused, unanswered = asyncio.run(main())
    assert "is wf-rpc-server running?" in refused
    assert "within the 0.3 s failover budget" in refused
    assert "within the 0.8 s failover budget" in unanswered


def test_an_explicit_failover_timeout_is_kept() -> None:
    port = closed_port()
    done = wf_process(
        "runs", "list", "--server", f"http://127.0.0.1:{port}", "--failover-timeout", "0.5"
    )
    assert done.returncode == 1, done.stderr
    assert "within the 0.5 s failover budget" in done.stderr
