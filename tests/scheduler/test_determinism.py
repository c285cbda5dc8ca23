"""Deterministic scheduling (WF-005 §2, §28): the same input log gives the same decisions.

The input logs come from the simulation: thousands of commands from
random workers, faults and stale actors, so the streams cover grants,
revocations, steals, retries, expiries and refusals.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from wf.cli.main import main
from wf.scheduler import commands as cmd
from wf.scheduler.dispatcher import SchedulerCore
from wf.scheduler.recovery import CoreSnapshot, restore, snapshot
from wf.scheduler.replay import LogHeader, decode_log, encode_log, replay, start_core
from wf.testing.simulation import SimulationResult, simulate

LONG_STEPS = 4000
"""A long log: thousands of commands."""


@pytest.fixture(scope="module")
def long_run() -> SimulationResult:
    # Seed 23 draws two policy groups (deadline_first, weighted_fair), global, partition
    # and activity-type rate limits, a concurrency cap and work stealing; it restarts 7 times.
    result = simulate(23, steps=LONG_STEPS)
    assert result.counts.steals > 0
    assert result.counts.restarts > 0
    return result


def _stream(result: SimulationResult, commands: list[cmd.Command]) -> list[bytes]:
    return list(replay(SchedulerCore(result.config), commands))


def _without_index(line: bytes) -> bytes:
    """A replay line minus its leading ``{"i":N,`` (indices restart after a restore)."""
    assert line.startswith(b'{"i":'), line
    return line.split(b",", 1)[1]


def test_a_long_log_replays_byte_identically_twice(long_run: SimulationResult) -> None:
    commands = long_run.commands
    assert len(commands) >= 3000
    first = _stream(long_run, commands)
    second = _stream(long_run, commands)
    assert first == second
    assert len(first) == len(commands)
    kinds = b"".join(first)
    for kind in (b"lease_granted", b"lease_revoked", b"activity_completed", b"stale_lease"):
        assert kind in kinds


def test_restore_at_halfway_continues_byte_identically(long_run: SimulationResult) -> None:
    commands = long_run.commands
    half = len(commands) // 2
    uninterrupted = _stream(long_run, commands)
    core = SchedulerCore(long_run.config)
    assert list(replay(core, commands[:half])) == uninterrupted[:half]
    durable = msgspec.json.decode(msgspec.json.encode(snapshot(core)), type=CoreSnapshot)
    resumed = list(replay(restore(durable), commands[half:]))
    assert [_without_index(x) for x in resumed] == [_without_index(x) for x in uninterrupted[half:]]


def test_simulated_segments_replay_to_what_the_simulation_saw(long_run: SimulationResult) -> None:
    assert long_run.counts.restarts >= 1
    for segment in long_run.segments:
        core = start_core(LogHeader(config=long_run.config, snapshot=segment.start))
        assert list(replay(core, segment.commands)) == list(segment.lines)


def test_encode_decode_log_round_trip(long_run: SimulationResult) -> None:
    commands = long_run.commands
    header = LogHeader(config=long_run.config)
    assert decode_log(encode_log(header, commands)) == (header, commands)
    last = long_run.segments[-1]
    with_snapshot = LogHeader(config=long_run.config, snapshot=last.start)
    assert decode_log(encode_log(with_snapshot, last.commands)) == (
        with_snapshot,
        list(last.commands),
    )


def test_wf_replay_prints_the_recorded_stream(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "run.log"
    assert main(["simulate", "--seed", "8", "--steps", "1500", "--record", str(log)]) == 0
    capsys.readouterr()
    header, commands = decode_log(log.read_bytes())
    expected = [line.decode() for line in replay(start_core(header), commands)]
    assert main(["replay", str(log)]) == 0
    assert capsys.readouterr().out.splitlines() == expected
    result = simulate(8, steps=1500)
    assert expected == [line.decode() for line in result.segments[-1].lines]


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"not json\n",
        b'{"wf_log": 1}\n',
        b'{"wf_log": 99, "config": {}}\n',
        b'{"wf_log": 1, "config": {}}\n{"cmd": "teleport", "now": 1}\n',
        b'{"wf_log": 1, "config": {}}\n{"cmd": "tick"}\n',
    ],
    ids=["empty", "not-json", "no-config", "version", "unknown-command", "missing-now"],
)
def test_wf_replay_rejects_a_malformed_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes
) -> None:
    log = tmp_path / "bad.log"
    log.write_bytes(content)
    assert main(["replay", str(log)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("wf: error: ")
    assert captured.err.count("\n") == 1


def test_wf_replay_rejects_a_missing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", str(tmp_path / "absent.log")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("wf: error: cannot read")
    assert err.count("\n") == 1
