"""``wf cluster status`` against a real SQLite server running in a thread.

A SQLite server is a cluster of one: always active, epoch 0, itself the only
node. The table and ``--json`` forms are read back through ``wf``'s own
``main([...])``; an unreachable server exits 1 with ``wf: error: <code>: ...``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from wf.cli.main import main
from wf.client.app import App
from wf.server.app import WfServer
from wf.server.config import ClusterConfig, ServerConfig, ServerSection, StoreConfig
from wf.wire.cluster_methods import ClusterStatus

NODE_ID = "node-one"


@contextlib.contextmanager
def server_thread(root: Path) -> Iterator[str]:
    """A SQLite server on its own loop in a thread; yields its URL."""
    ready = threading.Event()
    urls: list[str] = []
    stop: list[asyncio.Event] = []
    loops: list[asyncio.AbstractEventLoop] = []

    async def run() -> None:
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        config = ServerConfig(
            server=ServerSection(
                port=port,
                store=StoreConfig(root=str(root), durability="process"),
                cluster=ClusterConfig(node_id=NODE_ID, advertise_url=url),
            )
        )
        server = WfServer(config)
        await server.start()
        try:
            stop.append(asyncio.Event())
            loops.append(asyncio.get_running_loop())
            urls.append(url)
            ready.set()
            await stop[0].wait()
        finally:
            await server.stop()

    thread = threading.Thread(target=asyncio.run, args=(run(),), daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield urls[0]
    finally:
        loops[0].call_soon_threadsafe(stop[0].set)
        thread.join(10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_cluster_status_prints_the_answering_node_and_a_table_of_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with server_thread(tmp_path / "store") as url:
        code = main(["cluster", "status", "--server", url])
    out = capsys.readouterr().out
    assert code == 0
    head, table = out.split("\n\n")
    fields = dict(line.split(None, 1) for line in head.splitlines())
    assert fields == {
        "node": NODE_ID,
        "role": "active",
        "epoch": "0",
        "commit_seq": "0",
        "leader_url": url,
    }
    header, *rows = table.splitlines()
    assert header.split() == ["NODE", "ROLE", "URL", "EPOCH", "SEEN_S_AGO", "LAG"]
    assert [row.split() for row in rows] == [[NODE_ID, "active", url, "0", "0.0", "0"]]
    # Columns are aligned: every cell starts where its header does.
    for name in ("ROLE", "URL", "EPOCH", "SEEN_S_AGO", "LAG"):
        column = header.index(name)
        assert rows[0][column - 1] == " "
        assert rows[0][column] != " "


def test_cluster_status_json_is_the_cluster_status_itself(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with server_thread(tmp_path / "store") as url:
        # Several URLs, comma-separated and repeated: the first is down, the next answers.
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            dead = f"http://127.0.0.1:{s.getsockname()[1]}"
        code = main(["cluster", "status", "--server", f"{dead},{url}", "--json"])
        out = capsys.readouterr().out
        with App.sync(url) as app:
            direct = app.cluster_status()
    assert code == 0
    status = msgspec.convert(json.loads(out), ClusterStatus)
    assert status.node_id == NODE_ID
    assert status.role == "active"
    assert status.leader_url == url
    assert [n.node_id for n in status.nodes] == [NODE_ID]
    assert msgspec.structs.replace(status, nodes=[]) == msgspec.structs.replace(direct, nodes=[])


def test_cluster_status_of_an_unreachable_server_prints_the_error_and_exits_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    # A failover budget of 0: every configured URL is tried once, then the error.
    code = main(["cluster", "status", "--server", dead, "--failover-timeout", "0"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith("wf: error: rpc_unavailable: ")
    assert err.count("\n") == 1
