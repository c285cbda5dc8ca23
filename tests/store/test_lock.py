"""The embedded store's ownership lock (``<store_root>/scheduler.lock``, flock)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from wf.errors import OwnershipConflict
from wf.store.lock import FileOwnershipLock
from wf.store.protocol import OwnerInfo

CHILD_START_TIMEOUT_S = 30
CHILD_EXIT_TIMEOUT_S = 10


def owner(pid: int = 101, host: str = "node-a") -> OwnerInfo:
    return OwnerInfo(host=host, pid=pid, since="2026-01-01T00:00:00Z")


def test_acquire_writes_the_owner_and_release_clears_it(tmp_path: Path) -> None:
    lock = FileOwnershipLock(tmp_path / "scheduler.lock")
    assert lock.holder() is None
    lock.acquire(owner())
    assert lock.held
    assert json.loads((tmp_path / "scheduler.lock").read_text()) == {
        "host": "node-a",
        "pid": 101,
        "since": "2026-01-01T00:00:00Z",
    }
    assert lock.holder() == owner()
    lock.release()
    lock.release()  # idempotent
    assert not lock.held
    assert lock.holder() is None
    assert (tmp_path / "scheduler.lock").read_text() == ""


def test_a_second_lock_in_the_same_process_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "scheduler.lock"
    first, second = FileOwnershipLock(path), FileOwnershipLock(path)
    first.acquire(owner())
    with pytest.raises(OwnershipConflict) as refused:
        second.acquire(owner(pid=202, host="node-b"))
    assert "node-a" in str(refused.value)
    assert "101" in str(refused.value)
    assert refused.value.details["host"] == "node-a"
    assert refused.value.details["pid"] == 101
    assert refused.value.details["since"] == "2026-01-01T00:00:00Z"
    assert second.holder() == owner()
    # The refusal changed nothing: the holder's record is intact.
    assert first.holder() == owner()
    first.release()
    second.acquire(owner(pid=202, host="node-b"))
    assert first.holder() == owner(pid=202, host="node-b")
    second.release()


def test_reacquiring_a_held_lock_rewrites_the_owner(tmp_path: Path) -> None:
    lock = FileOwnershipLock(tmp_path / "scheduler.lock")
    lock.acquire(owner())
    lock.acquire(owner(pid=303))
    assert FileOwnershipLock(tmp_path / "scheduler.lock").holder() == owner(pid=303)
    lock.release()


def test_a_stale_owner_record_without_a_holder_means_free(tmp_path: Path) -> None:
    path = tmp_path / "scheduler.lock"
    path.write_text('{"host": "ghost", "pid": 1, "since": "2020-01-01T00:00:00Z"}')
    lock = FileOwnershipLock(path)
    assert lock.holder() is None
    lock.acquire(owner())
    assert lock.holder() == owner()
    lock.release()


def test_a_sigkilled_owner_never_blocks_the_next(tmp_path: Path) -> None:
    path = tmp_path / "scheduler.lock"
    child_code = textwrap.dedent(
        f"""
        import os, sys, time
        from pathlib import Path
        from wf.store.lock import FileOwnershipLock
        from wf.store.protocol import OwnerInfo
        lock = FileOwnershipLock(Path({str(path)!r}))
        lock.acquire(OwnerInfo(host="child-host", pid=os.getpid(), since="2026-01-01T00:00:00Z"))
        print("locked", flush=True)
        time.sleep(120)
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", child_code], stdout=subprocess.PIPE, text=True, env=os.environ
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "locked"
        lock = FileOwnershipLock(path)
        with pytest.raises(OwnershipConflict) as refused:
            lock.acquire(owner())
        assert refused.value.details["pid"] == child.pid
        assert refused.value.details["host"] == "child-host"
        assert f"pid {child.pid}" in str(refused.value)
        assert lock.holder() == OwnerInfo(
            host="child-host", pid=child.pid, since="2026-01-01T00:00:00Z"
        )
        child.send_signal(signal.SIGKILL)
        assert child.wait(CHILD_EXIT_TIMEOUT_S) == -signal.SIGKILL
        # The kernel dropped the flock with the process; its stale record means nothing.
        assert lock.holder() is None
        lock.acquire(owner())
        assert lock.holder() == owner()
        lock.release()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(CHILD_EXIT_TIMEOUT_S)
        if child.stdout is not None:
            child.stdout.close()
