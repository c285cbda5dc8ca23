"""The SQLite store's folder and files are the owner's only, whatever the umask.

A store holds every run's inputs and results: a new store folder is 0700 and
``scheduler.db``, its ``-wal`` and ``-shm`` files and ``scheduler.lock`` are
0600, even under a permissive umask. A folder that already exists (a service
manager's state directory) keeps the mode its owner gave it. ``wf store check``
on a path that holds no store refuses (exit 3) and creates nothing.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from wf.cli.main import main
from wf.clock import SystemClock
from wf.node import default_owner
from wf.store import make_store


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    """umask 000: anything not set explicitly would come out world-writable."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _open_and_own(root: Path) -> dict[str, int]:
    """Open a store (created if need be) and take its lock; the modes of its files."""

    async def run() -> dict[str, int]:
        store = make_store(store_root=root)
        await store.open()
        try:
            await store.acquire_ownership(default_owner(SystemClock()))
            return {name: _mode(root / name) for name in os.listdir(root)}
        finally:
            await store.close()

    return asyncio.run(run())


@pytest.mark.usefixtures("permissive_umask")
def test_a_new_store_is_owner_only_under_any_umask(tmp_path: Path) -> None:
    root = tmp_path / "state" / "store"
    modes = _open_and_own(root)
    assert _mode(root) == 0o700
    assert _mode(root.parent) == 0o700  # a missing parent wf made too
    assert set(modes) >= {"scheduler.db", "scheduler.db-wal", "scheduler.db-shm", "scheduler.lock"}
    assert modes == dict.fromkeys(modes, 0o600)


@pytest.mark.usefixtures("permissive_umask")
def test_wf_store_migrate_creates_an_owner_only_store(tmp_path: Path) -> None:
    root = tmp_path / "store"
    assert main(["store", "migrate", "--store-root", str(root)]) == 0
    assert _mode(root) == 0o700
    assert _mode(root / "scheduler.db") == 0o600


def test_an_existing_folder_keeps_its_mode(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir(mode=0o750)
    os.chmod(root, 0o750)
    modes = _open_and_own(root)
    assert _mode(root) == 0o750
    assert modes["scheduler.db"] == 0o600


def test_check_on_a_missing_store_refuses_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for root in (tmp_path / "absent", tmp_path / "empty"):
        if root.name == "empty":
            root.mkdir()
        assert main(["store", "check", "--store-root", str(root)]) == 3
        err = capsys.readouterr().err
        assert err.startswith("wf: error: store unreadable: no store at"), err
        assert err.count("\n") == 1
    assert not (tmp_path / "absent").exists()
    assert list((tmp_path / "empty").iterdir()) == []
