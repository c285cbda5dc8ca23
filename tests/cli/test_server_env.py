"""``$WF_SERVER`` names the server when ``--server`` does not (issue 17).

The same precedence as ``$WF_TOKEN``: the flag beats the variable, which beats
the default ``http://127.0.0.1:8765``. Client commands run through ``wf``'s own
``main([...])`` (with no ``--server``) against a real SQLite server in a thread;
``wf worker`` is checked on the worker it builds.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from _wf_runner import closed_port

from wf.cli.connect import DEFAULT_SERVER, SERVER_ENV, server_urls
from wf.cli.main import build_parser, main
from wf.cli.worker_cmd import build_worker
from wf.server.app import WfServer
from wf.server.config import ServerConfig, ServerSection, StoreConfig


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    """A SQLite server on its own loop in a thread; its URL."""
    ready = threading.Event()
    found: list[tuple[str, asyncio.AbstractEventLoop, asyncio.Event]] = []

    async def serve() -> None:
        config = ServerConfig(
            server=ServerSection(
                port=0, store=StoreConfig(root=str(tmp_path / "store"), durability="process")
            )
        )
        server = WfServer(config)
        await server.start()
        try:
            stop = asyncio.Event()
            found.append((f"http://127.0.0.1:{server.port}", asyncio.get_running_loop(), stop))
            ready.set()
            await stop.wait()
        finally:
            await server.stop()

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    assert ready.wait(10)
    address, loop, stop = found[0]
    try:
        yield address
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)


def dead() -> str:
    return f"http://127.0.0.1:{closed_port()}"


def test_client_commands_reach_the_server_named_by_wf_server(
    url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(SERVER_ENV, url)
    capsys.readouterr()
    assert main(["runs", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == []
    assert main(["queue", "stats", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["depth"] == 0
    assert main(["cluster", "status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["role"] == "active"


def test_the_flag_beats_wf_server(
    url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The variable names nothing that listens: the flag's server answers.
    monkeypatch.setenv(SERVER_ENV, dead())
    assert main(["runs", "list", "--json", "--server", url]) == 0
    assert main(["cluster", "status", "--json", "--server", url]) == 0
    # And the other way round: the variable's server is not asked.
    monkeypatch.setenv(SERVER_ENV, url)
    capsys.readouterr()
    assert main(["runs", "list", "--failover-timeout", "0", "--server", dead()]) == 1
    assert "rpc_unavailable" in capsys.readouterr().err
    assert main(["cluster", "status", "--failover-timeout", "0", "--server", dead()]) == 1
    assert "rpc_unavailable" in capsys.readouterr().err


def test_the_default_applies_without_flag_or_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SERVER_ENV, raising=False)
    assert server_urls(None) == [DEFAULT_SERVER] == ["http://127.0.0.1:8765"]
    monkeypatch.setenv(SERVER_ENV, "  ")  # empty counts as unset
    assert server_urls(None) == [DEFAULT_SERVER]
    monkeypatch.setenv(SERVER_ENV, "http://a:1,http://b:2")  # a cluster, as the flag takes
    assert server_urls(None) == ["http://a:1,http://b:2"]
    assert server_urls(["http://c:3"]) == ["http://c:3"]


def test_wf_worker_takes_wf_server_after_the_flag_and_before_the_apps_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parser = build_parser()
    activities = ["worker", "--app", "wf.activities:BUILTIN_ACTIVITIES"]
    app_worker = ["worker", "--app", "tests.e2e.sample_app:worker"]
    monkeypatch.delenv(SERVER_ENV, raising=False)
    assert build_worker(parser.parse_args(activities)).servers == [DEFAULT_SERVER]
    own = build_worker(parser.parse_args(app_worker)).servers
    monkeypatch.setenv(SERVER_ENV, "http://10.0.0.1:1,http://10.0.0.2:2")
    cluster = ["http://10.0.0.1:1", "http://10.0.0.2:2"]
    assert build_worker(parser.parse_args(activities)).servers == cluster
    assert own != cluster
    assert build_worker(parser.parse_args(app_worker)).servers == cluster
    flagged = parser.parse_args([*activities, "--server", "http://10.0.0.3:3"])
    assert build_worker(flagged).servers == ["http://10.0.0.3:3"]
