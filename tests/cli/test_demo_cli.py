"""``wf demo``: the scheduler core simulated over a day, persisted in a store folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wf.cli.main import main


def _summary(capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    out = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(out[-1])
    assert isinstance(summary, dict)
    return summary


def test_demo_persists_each_run_into_the_store_folder_and_it_checks_clean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "store"
    assert main(["demo", "--store-root", str(root), "--json"]) == 0
    first = _summary(capsys)
    assert (root / "scheduler.db").exists()
    assert first["store"] == {
        "root": str(root.resolve()),
        "diagnostics": 0,
        "unfinished_in_store": 0,
    }
    assert first["failed"] == {"charge-card-42": "may_have_executed"}

    # A second run recovers the first run's state and adds to it under new ids.
    assert main(["demo", "--store-root", str(root), "--json"]) == 0
    second = _summary(capsys)
    failed = second["failed"]
    assert isinstance(failed, dict)
    ((failed_id, reason),) = failed.items()
    assert failed_id.endswith("-charge-card-42")
    assert failed_id != "charge-card-42"
    assert reason == "may_have_executed"
    assert main(["store", "check", "--store-root", str(root)]) == 0


def test_demo_in_memory_prints_a_timeline_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--in-memory"]) == 0
    out = capsys.readouterr().out
    assert "declared lost (missed_heartbeats)" in out
    assert "cron quarter-hour-report fired" in out
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
