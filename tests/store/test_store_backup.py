"""``wf store backup``: an online copy of a SQLite store, taken beside a running server.

The copy is taken while a real local server holds the store and writes to it;
restored as ``scheduler.db`` of a new folder it is a consistent store (``wf
store check``), a new server recovers it, and its runs are there. The copy is
owner-only, and an existing target is never overwritten.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from wf.activities import BUILTIN_ACTIVITIES
from wf.cli.main import main
from wf.server.config import ServerConfig, ServerSection, StoreConfig
from wf.server.local import LocalStaticServer

PLAN: dict[str, Any] = {
    "nodes": [
        {
            "kind": "activity",
            "id": "hello",
            "activity_type": "format_text",
            "args": {"template": "hello"},
            "idempotent": True,
        }
    ],
    "output": {"result": {"$node": "hello", "path": "text"}},
}
DEADLINE_S = 20.0


def _server(root: Path) -> LocalStaticServer:
    store = StoreConfig(root=str(root))
    config = ServerConfig(server=ServerSection(host="127.0.0.1", port=0, store=store))
    return LocalStaticServer(config, BUILTIN_ACTIVITIES, workers=1, max_concurrency=2)


async def _completed(server: LocalStaticServer, run_id: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while (await server.api.inspect_run(run_id))["status"] != "completed":
        assert time.monotonic() < deadline, f"{run_id} did not complete"
        await asyncio.sleep(0.02)


def test_a_backup_taken_beside_a_running_server_restores_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, copy = tmp_path / "store", tmp_path / "backup.db"

    async def run() -> str:
        async with _server(root) as server:
            await server.api.create_artifact_from_plan("hello", 1, PLAN)
            await server.api.save_deployment({"artifact_id": "hello", "artifact_version": 1})
            run_id = str((await server.api.start_run("hello.default"))["run_id"])
            await _completed(server, run_id)
            # The server still holds the store (its lock, its open WAL) meanwhile.
            code = await asyncio.to_thread(
                main, ["store", "backup", "--store-root", str(root), "--to", str(copy), "--json"]
            )
            assert code == 0
            return run_id

    run_id = asyncio.run(run())
    answer = json.loads(capsys.readouterr().out)
    assert answer == {"backup": str(copy), "bytes": copy.stat().st_size}
    assert stat.S_IMODE(copy.stat().st_mode) == 0o600
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".backup.db")]

    restored = tmp_path / "restored"
    restored.mkdir(mode=0o700)
    shutil.copy2(copy, restored / "scheduler.db")
    assert main(["store", "check", "--store-root", str(restored)]) == 0

    async def reopen() -> None:
        async with _server(restored) as server:
            assert (await server.api.inspect_run(run_id))["output"] == {"result": "hello"}

    asyncio.run(reopen())


def test_a_backup_never_overwrites_and_needs_a_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "store"
    assert main(["store", "migrate", "--store-root", str(root)]) == 0
    taken = tmp_path / "taken.db"
    taken.write_bytes(b"keep me")
    capsys.readouterr()
    assert main(["store", "backup", "--store-root", str(root), "--to", str(taken)]) == 2
    assert "never overwrites" in capsys.readouterr().err
    assert taken.read_bytes() == b"keep me"
    missing = tmp_path / "none"
    assert main(["store", "backup", "--store-root", str(missing), "--to", str(tmp_path / "x")]) == 3
    assert "no store at" in capsys.readouterr().err
    assert not os.path.lexists(missing)
    assert not os.path.lexists(tmp_path / "x")
