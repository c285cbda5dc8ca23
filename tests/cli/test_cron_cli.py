"""Tests of ``wf cron next``: in-process through ``main`` and once as a real process."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from wf.cli.main import main

BERLIN_ARGS = [
    "cron",
    "next",
    "0 */6 * * *",
    "--tz",
    "Europe/Berlin",
    "--after",
    "2026-03-28T00:00:00+01:00",
    "--count",
    "3",
]


def test_prints_the_next_instants_as_utc_with_z(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(BERLIN_ARGS) == 0
    out, err = capsys.readouterr()
    assert out == "2026-03-28T05:00:00Z\n2026-03-28T11:00:00Z\n2026-03-28T17:00:00Z\n"
    assert err == ""


def test_crosses_the_spring_gap_in_the_zone(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["cron", "next", "30 2 * * *", "--tz", "America/New_York"]
    assert main([*args, "--after", "2026-03-07T12:00:00Z", "--count", "2"]) == 0
    assert capsys.readouterr().out == "2026-03-08T07:00:00Z\n2026-03-09T06:30:00Z\n"


def test_defaults_are_one_instant_in_utc(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cron", "next", "30 7 * * *", "--after", "2026-03-08T00:00:00+00:00"]) == 0
    assert capsys.readouterr().out == "2026-03-08T07:30:00Z\n"


def test_after_defaults_to_now(capsys: pytest.CaptureFixture[str]) -> None:
    before = datetime.now(UTC)
    assert main(["cron", "next", "* * * * *"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    instant = datetime.strptime(line, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert before < instant <= datetime.now(UTC) + timedelta(minutes=1)


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        (["0 0 * * * *"], "6 fields"),
        (["@reboot"], "@-nicknames"),
        (["* * * * *", "--tz", "Mars/Olympus"], "unknown time zone"),
        (["* * * * *", "--tz", "../etc"], "not an IANA time zone name"),
        (["* * * * *", "--after", "2026-03-08T00:00:00"], "no UTC offset"),
        (["* * * * *", "--after", "yesterday"], "not an ISO-8601"),
        (["* * * * *", "--count", "0"], "count must be an integer in 1..10000"),
        (["* * * * *", "--count", "10001"], "count must be an integer in 1..10000"),
        (["* * * * *", "--count", "many"], "--count must be an integer"),
    ],
)
def test_invalid_input_prints_one_error_line_and_exits_2(
    capsys: pytest.CaptureFixture[str], extra: list[str], reason: str
) -> None:
    assert main(["cron", "next", *extra]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("wf: error: ")
    assert reason in err


def run_wf(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wf.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_entry_point_runs_as_a_real_process() -> None:
    done = run_wf(*BERLIN_ARGS)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "2026-03-28T05:00:00Z",
        "2026-03-28T11:00:00Z",
        "2026-03-28T17:00:00Z",
    ]


def test_entry_point_exits_2_on_invalid_input() -> None:
    done = run_wf("cron", "next", "61 * * * *")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("wf: error: invalid cron expression '61 * * * *'")
    assert done.stderr.count("\n") == 1
