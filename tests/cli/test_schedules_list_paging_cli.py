"""``wf schedules list`` follows the server's pages, or shows one page when asked.

The server (a thread of its own, SQLite) holds seven schedules;
``workflow.schedules.list`` answers at most ``--limit`` a call, so listing
them all takes several calls: the CLI makes them and prints every schedule
once, in order. ``--page`` and ``--cursor`` print one page and the cursor of
the next; a bad ``--limit`` is the server's ``invalid_argument``.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from wf.cli.main import main
from wf.server.app import WfServer
from wf.server.config import ServerConfig, ServerSection, StoreConfig
from wf.server.rpc import ANONYMOUS_ADMIN

PLAN = {
    "nodes": [
        {"kind": "interrupt", "id": "ask", "prompt": "name?", "input_schema": {"type": "string"}}
    ],
    "output": {"name": {"$node": "ask"}},
}
IDS = [f"s{i}" for i in range(7)]


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    """A server with seven schedules, on its own loop in a thread."""
    config = ServerConfig(
        server=ServerSection(
            port=0, store=StoreConfig(root=str(tmp_path / "store"), durability="process")
        )
    )
    ready = threading.Event()
    found: list[Any] = []

    async def run() -> None:
        server = WfServer(config, schedules=True)
        await server.start()
        try:
            assert server.schedules is not None
            await server.workflow.create_artifact_from_plan("ask", 1, PLAN, caller=ANONYMOUS_ADMIN)
            body = {"artifact_id": "ask", "artifact_version": 1}
            await server.workflow.save_deployment(body, caller=ANONYMOUS_ADMIN)
            for schedule_id in reversed(IDS):
                await server.schedules.create_schedule(
                    schedule_id,
                    "ask.default",
                    {"kind": "cron", "expression": "0 9 1 1 *", "timezone": "UTC"},
                    caller=ANONYMOUS_ADMIN,
                )
            stop = asyncio.Event()
            found.extend([f"http://127.0.0.1:{server.port}", asyncio.get_running_loop(), stop])
            ready.set()
            await stop.wait()
        finally:
            await server.stop()

    thread = threading.Thread(target=asyncio.run, args=(run(),), daemon=True)
    thread.start()
    assert ready.wait(20)
    try:
        yield found[0]
    finally:
        found[1].call_soon_threadsafe(found[2].set)
        thread.join(10)


def wf(capsys: pytest.CaptureFixture[str], url: str, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["schedules", "list", *argv, "--server", url])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_list_follows_every_page(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = wf(capsys, url, "--limit", "2", "--json")
    assert (code, err) == (0, "")
    assert [s["schedule_id"] for s in json.loads(out)] == IDS  # four calls, every one once
    code, out, _ = wf(capsys, url, "--limit", "3")
    assert code == 0
    rows = out.strip().splitlines()[1:]
    assert [row.split()[0] for row in rows] == IDS


def test_page_and_cursor_show_one_page(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = wf(capsys, url, "--limit", "3", "--page", "--json")
    assert code == 0
    first = json.loads(out)
    assert [s["schedule_id"] for s in first["schedules"]] == IDS[:3]
    assert first["next_cursor"] is not None
    code, out, _ = wf(capsys, url, "--limit", "3", "--cursor", first["next_cursor"], "--json")
    second = json.loads(out)
    assert [s["schedule_id"] for s in second["schedules"]] == IDS[3:6]
    code, out, _ = wf(capsys, url, "--limit", "3", "--cursor", second["next_cursor"])
    assert code == 0
    assert "s6" in out
    assert "more: --cursor" not in out  # the last page
    code, out, _ = wf(capsys, url, "--limit", "3", "--page")
    assert f"more: --cursor {first['next_cursor']}" in out


def test_a_bad_limit_is_the_servers_refusal(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = wf(capsys, url, "--limit", "101")
    assert (code, out) == (1, "")
    assert err.startswith("wf: error: invalid_argument: limit must be")
