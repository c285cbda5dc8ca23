"""Tests of ``wf cron next``: in-process through ``main`` and once as a real process."""

from __future__ import annotations

import json
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


def utc_column(out: str) -> list[str]:
    """The INSTANT column of the table ``wf cron next`` prints."""
    header, *rows = out.splitlines()
    assert header.split() == ["INSTANT", "LOCAL", "TIMEZONE"]
    return [row.split()[0] for row in rows]


def test_prints_the_next_instants_as_utc_and_wall_time_in_the_zone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 17: the zone's wall time beside each UTC instant, as in schedules preview."""
    assert main(BERLIN_ARGS) == 0
    out, err = capsys.readouterr()
    assert out == (
        "INSTANT               LOCAL                      TIMEZONE\n"
        "2026-03-28T05:00:00Z  2026-03-28T06:00:00+01:00  Europe/Berlin\n"
        "2026-03-28T11:00:00Z  2026-03-28T12:00:00+01:00  Europe/Berlin\n"
        "2026-03-28T17:00:00Z  2026-03-28T18:00:00+01:00  Europe/Berlin\n"
    )
    assert err == ""


def test_json_lists_preview_s_objects(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*BERLIN_ARGS, "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found[0] == {
        "instant": "2026-03-28T05:00:00+00:00",
        "local": "2026-03-28T06:00:00+01:00",
        "timezone": "Europe/Berlin",
    }
    assert [i["local"] for i in found[1:]] == [
        "2026-03-28T12:00:00+01:00",
        "2026-03-28T18:00:00+01:00",
    ]


def test_crosses_the_spring_gap_in_the_zone(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["cron", "next", "30 2 * * *", "--tz", "America/New_York"]
    assert main([*args, "--after", "2026-03-07T12:00:00Z", "--count", "2"]) == 0
    out = capsys.readouterr().out
    assert utc_column(out) == ["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"]
    # 02:30 does not exist on the 8th: the gap's instant is 03:00 EDT.
    assert [row.split()[1] for row in out.splitlines()[1:]] == [
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:30:00-04:00",
    ]


def test_defaults_are_one_instant_in_utc(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cron", "next", "30 7 * * *", "--after", "2026-03-08T00:00:00+00:00"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split() == [
        "2026-03-08T07:30:00Z",
        "2026-03-08T07:30:00+00:00",
        "UTC",
    ]


def test_after_defaults_to_now(capsys: pytest.CaptureFixture[str]) -> None:
    before = datetime.now(UTC)
    assert main(["cron", "next", "* * * * *"]) == 0
    (line,) = utc_column(capsys.readouterr().out)
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


def test_invalid_input_with_json_prints_a_json_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cron", "next", "61 * * * *", "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert json.loads(err)["error"]["code"] == "invalid_cron_expression"


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
    assert utc_column(done.stdout) == [
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
