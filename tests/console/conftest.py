"""Fixtures of the console's browser tests (see ``_console``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _console import TOKENS, Browser, World, browser_for, seed, server_config, wait_for

from e2e._servers import processes


@pytest.fixture(scope="session")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """A real server (SQLite, authentication on) with three real workers, seeded."""
    tmp: Path = tmp_path_factory.mktemp("console")
    with processes(tmp) as ps:
        server = ps.server(tmp / "store", config=server_config())
        world = World(server.url, tmp, server.log_path)
        for worker_id in ("console-w1", "console-w2", "console-drainee"):
            ps.worker(
                server.url,
                worker_id,
                "--token",
                TOKENS["workers"],
                app="tests.console.console_app:worker",
            )

        def active() -> int:
            workers = world.call("admin", "scheduler.workers.list", {"limit": 100})["workers"]
            return sum(1 for w in workers if w["status"] == "active")

        wait_for(lambda: active() == 3, "three active workers")
        seed(world)
        yield world


@pytest.fixture(scope="module")
def browser(world: World) -> Iterator[Browser]:
    """Debian's Chromium, driven by Playwright, for one module (Playwright's sync API
    keeps an event loop running while it is open: other modules need none running)."""
    yield from browser_for(world.url)
