"""``wf demo``: an hour of the real server on a virtual clock, in a store folder of its own."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from wf.cli.main import main


def _summary(capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    out = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(out[-1])
    assert isinstance(summary, dict)
    return summary


def test_demo_persists_each_hour_into_its_store_folder_and_it_checks_clean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "demo"
    assert main(["demo", "--store-root", str(root), "--json"]) == 0
    first = _summary(capsys)
    assert (root / "scheduler.db").exists()
    assert first["store"] == {"root": str(root.resolve())}
    # Ten runs started by hand (one fails closed), three by the quarter-hour schedule.
    assert first["runs"] == {"completed": 11, "failed": 1}
    assert first["scheduled_runs"] == 3
    assert first["failed"] == {"run-000009": "may_have_executed"}
    assert first["workers_lost"] == 1

    # A second demo recovers the first one's store and plays the next hour: the
    # schedule paused in between replays nothing, and run ids go on.
    assert main(["demo", "--store-root", str(root), "--json"]) == 0
    second = _summary(capsys)
    assert second["runs"] == first["runs"]
    assert second["scheduled_runs"] == 3
    assert second["failed"] == {"run-000021": "may_have_executed"}
    first_start = datetime.fromisoformat(str(first["virtual_start"]))
    second_start = datetime.fromisoformat(str(second["virtual_start"]))
    assert (second_start - first_start).total_seconds() == 3600
    assert main(["store", "check", "--store-root", str(root)]) == 0


def test_demo_uses_its_own_folder_never_the_servers_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--json"]) == 0
    assert _summary(capsys)["store"] == {"root": str((tmp_path / ".wf_demo").resolve())}
    assert sorted(p.name for p in tmp_path.iterdir()) == [".wf_demo"]


def test_demo_in_memory_prints_a_timeline_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--in-memory"]) == 0
    out = capsys.readouterr().out
    assert "declared lost (infrastructure_failure)" in out
    assert "failed for good (may_have_executed)" in out
    assert "started by schedule quarter-hour-report" in out
    assert "[sync.default] completed" in out
    assert "store" not in json.loads(out.strip().splitlines()[-1])
    assert list(tmp_path.iterdir()) == []


def test_demo_refuses_a_store_folder_owned_by_another_scheduler(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from wf.store.lock import FileOwnershipLock
    from wf.store.protocol import OwnerInfo

    root = tmp_path / "store"
    root.mkdir()
    lock = FileOwnershipLock(root / "scheduler.lock")
    lock.acquire(OwnerInfo(host="elsewhere", pid=4242, since="2026-11-29T00:00:00+00:00"))
    try:
        assert main(["demo", "--store-root", str(root)]) == 2
    finally:
        lock.release()
    err = capsys.readouterr().err
    assert err.startswith("wf: error:")
    assert "4242" in err
