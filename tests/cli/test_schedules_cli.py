"""``wf schedules`` and ``wf runs`` against a real server running in a thread.

The server keeps schedules and runs the admission service (a short poll), on
an interrupt-only deployment, so an admitted run stops ``interrupted``
without any worker. Each command is run through ``wf``'s ``main([...])``:
tables are checked for their columns and alignment, ``--json`` output is
parsed and compared with the client's answer, and refusals exit 1 with
``wf: error: <code>: <message>`` (unusable input of ours exits 2).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import pytest
from _wf_runner import WfRunner, pairs

from wf.cli.main import main
from wf.cli.output import jsonable
from wf.client.app import App
from wf.schedules.config import ScheduleServiceConfig
from wf.schedules.model import schedule_row
from wf.server.app import WfServer
from wf.server.config import ServerConfig, ServerSection, StoreConfig
from wf.server.rpc import ANONYMOUS_ADMIN
from wf.store.protocol import OccurrenceRow

T = TypeVar("T")

PLAN = {
    "nodes": [
        {"kind": "interrupt", "id": "ask", "prompt": "name?", "input_schema": {"type": "string"}}
    ],
    "output": {"name": {"$node": "ask"}},
}
CRON = {"kind": "cron", "expression": "0 9 1 1 *", "timezone": "Europe/Paris"}
"""Once a year, at most a year ahead: nothing fires during a test."""


@dataclass
class Served:
    """A server on its own loop in a thread."""

    url: str
    server: WfServer
    loop: asyncio.AbstractEventLoop

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the server's loop (for arranging what the API cannot)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)


@contextlib.contextmanager
def server_thread(root: Path) -> Iterator[Served]:
    config = ServerConfig(
        server=ServerSection(
            port=0,
            store=StoreConfig(root=str(root), durability="process"),
            scheduler=ScheduleServiceConfig(enabled=True, poll_interval_s=0.05),
        )
    )
    ready = threading.Event()
    found: list[Served] = []
    stop: list[asyncio.Event] = []

    async def run() -> None:
        server = WfServer(config, schedules=True)
        await server.start()
        try:
            stop.append(asyncio.Event())
            found.append(
                Served(f"http://127.0.0.1:{server.port}", server, asyncio.get_running_loop())
            )
            ready.set()
            await stop[0].wait()
        finally:
            await server.stop()

    thread = threading.Thread(target=asyncio.run, args=(run(),), daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield found[0]
    finally:
        found[0].loop.call_soon_threadsafe(stop[0].set)
        thread.join(10)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    with server_thread(tmp_path / "store") as s, App.sync(s.url) as app:
        app.create_artifact_from_plan("ask", 1, PLAN)
        app.save_deployment({"artifact_id": "ask", "artifact_version": 1})
        yield s


class Wf(WfRunner):
    """Runs ``wf`` commands against one server."""

    def __init__(self, served: Served, capsys: pytest.CaptureFixture[str], tmp: Path) -> None:
        super().__init__(served.url, capsys, tmp)
        self.served = served

    def app(self) -> Any:
        return App.sync(self.served.url)


@pytest.fixture
def wf(served: Served, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> Wf:
    return Wf(served, capsys, tmp_path)


def _columns(table: str) -> tuple[list[str], list[dict[str, str]]]:
    """Headers and rows of an aligned table, cut at the header's column starts
    (so a misaligned row reads wrong)."""
    lines = table.rstrip("\n").split("\n")
    header = lines[0]
    names = header.split()
    starts = [header.index(n) for n in names]
    rows = []
    for line in lines[1:]:
        cells = [
            line[s : (starts[i + 1] if i + 1 < len(starts) else None)].strip()
            for i, s in enumerate(starts)
        ]
        # Nothing but the gap may sit right before a column start.
        for s in starts[1:]:
            assert line[s - 1 : s] in ("", " "), (line, s)
        rows.append(dict(zip(names, cells, strict=True)))
    return names, rows


# ------------------------------------------------------------- schedules


def test_schedule_lifecycle(wf: Wf) -> None:
    body = {
        "schedule_id": "nightly",
        "deployment_id": "ask.default",
        "trigger": CRON,
        "note": "yearly report",
        "misfire": "latest",
    }
    out = wf.ok("schedules", "create", "--file", wf.file(body))
    head, _, block = out.partition("\n\n")
    assert head == "created schedule nightly (revision 1)"
    fields = pairs(block)
    assert fields["ID"] == "nightly"
    assert fields["STATUS"] == "active"
    assert fields["DEPLOYMENT"] == "ask.default"
    assert fields["TRIGGER"] == "cron 0 9 1 1 * Europe/Paris"
    assert fields["MISFIRE"] == "latest"
    assert fields["OVERLAP"] == "skip"
    assert fields["MAX STEPS"] == "-"
    assert fields["NOTE"] == "yearly report"
    assert fields["REVISION"] == "1"
    assert fields["SKIPPED"] == "overlap 0, misfire 0"
    assert fields["NEXT"].endswith("-01-01T08:00:00Z")

    # --json: the server's answer, as the client gets it, in the CLI's JSON form (ISO
    # 8601 times, absent optional keys as null: wf.cli.output.jsonable).
    created = wf("schedules", "create", "--json", "--file", wf.file({**body, "schedule_id": "b"}))
    view = created.json()
    assert (view["schedule_id"], view["revision"], view["trigger"]) == ("b", 1, CRON)
    with wf.app() as app:
        expected = jsonable(app.get_schedule("nightly").to_builtins())
    assert wf("schedules", "get", "nightly", "--json").json() == expected
    assert isinstance(expected["created_at"], str)
    assert expected["pending"] is None
    assert pairs(wf.ok("schedules", "get", "nightly")) == fields

    # list: one aligned row per schedule.
    names, rows = _columns(wf.ok("schedules", "list"))
    assert names == [
        "ID",
        "STATUS",
        "DEPLOYMENT",
        "TRIGGER",
        "NEXT",
        "REVISION",
        "SKIPPED(OVERLAP/MISFIRE)",
        "REASON",
    ]
    assert [r["ID"] for r in rows] == ["b", "nightly"]
    nightly = rows[1]
    assert nightly["STATUS"] == "active"
    assert nightly["DEPLOYMENT"] == "ask.default"
    assert nightly["TRIGGER"] == "cron 0 9 1 1 * Europe/Paris"
    assert nightly["NEXT"] == fields["NEXT"]
    assert nightly["REVISION"] == "1"
    assert nightly["SKIPPED(OVERLAP/MISFIRE)"] == "0/0"
    listed = wf("schedules", "list", "--json").json()
    assert [s["schedule_id"] for s in listed] == ["b", "nightly"]

    # update: the file's fields at --expected-revision; a stale one is a conflict.
    change = wf.file({"note": "edited", "overlap": "parallel", "max_active_runs": 2})
    out = wf.ok("schedules", "update", "nightly", "--expected-revision", "1", "--file", change)
    assert out.startswith("updated schedule nightly (revision 2)\n")
    fields = pairs(out.partition("\n\n")[2])
    assert fields["NOTE"] == "edited"
    assert fields["OVERLAP"] == "parallel (max_active_runs 2)"
    err = wf.refused(
        "conflict", "schedules", "update", "nightly", "--expected-revision", "1", "--file", change
    )
    assert "revision" in err
    edited = wf(
        "schedules", "update", "b", "--expected-revision", "1", "--file", change, "--json"
    ).json()
    assert (edited["revision"], edited["note"]) == (2, "edited")

    # pause (with a reason) and resume.
    out = wf.ok("schedules", "pause", "nightly", "--reason", "maintenance window")
    fields = pairs(out.partition("\n\n")[2])
    assert fields["STATUS"] == "paused"
    assert fields["NEXT"] == "-"
    assert fields["PAUSED"].endswith("Z (maintenance window)")
    _, rows = _columns(wf.ok("schedules", "list"))
    assert [(r["ID"], r["STATUS"], r["NEXT"], r["REASON"]) for r in rows][1] == (
        "nightly",
        "paused",
        "-",
        "maintenance window",
    )
    paused = wf("schedules", "pause", "nightly", "--json").json()
    assert (paused["status"], paused["revision"]) == ("paused", 3)
    out = wf.ok("schedules", "resume", "nightly")
    assert out.startswith("resumed schedule nightly (revision 4)\n")
    assert pairs(out.partition("\n\n")[2])["STATUS"] == "active"
    assert wf("schedules", "resume", "nightly", "--json").json()["revision"] == 4

    # preview: instants in UTC and in the schedule's zone.
    names, rows = _columns(wf.ok("schedules", "preview", "nightly", "--count", "3"))
    assert names == ["INSTANT", "LOCAL", "TIMEZONE"]
    assert len(rows) == 3
    for row in rows:
        assert row["INSTANT"].endswith("-01-01T08:00:00Z")
        assert row["LOCAL"].endswith("-01-01T09:00:00+01:00")
        assert row["TIMEZONE"] == "Europe/Paris"
    with wf.app() as app:
        expected = app.preview_schedule("nightly", count=2)
    previewed = wf("schedules", "preview", "nightly", "--count", "2", "--json").json()
    assert previewed == jsonable(expected)
    assert "instant_s" not in previewed[0]  # no epoch twin beside the ISO instant

    # trigger: a manual run through the schedule's bindings (it stops at the interrupt).
    out = wf.ok("schedules", "trigger", "nightly")
    head, _, block = out.partition("\n\n")
    assert head == "triggered run-000001 from schedule nightly (a manual run)"
    run = pairs(block.partition("\n\n")[0])
    assert (run["RUN"], run["STATUS"], run["TRIGGER"]) == (
        "run-000001",
        "interrupted",
        "manual (schedule nightly)",
    )
    assert run["AWAITING"] == "ask: name?"
    triggered = wf("schedules", "trigger", "nightly", "--json").json()
    assert (triggered["run_id"], triggered["triggered_from"]) == ("run-000002", "nightly")

    # delete: gone from the list unless deleted ones are asked for.
    out = wf.ok("schedules", "delete", "b")
    assert out.startswith("deleted schedule b (revision 3)\n")
    fields = pairs(out.partition("\n\n")[2])
    assert fields["STATUS"] == "deleted"
    assert fields["DELETED"].endswith("Z")
    assert wf("schedules", "delete", "b", "--json").json()["status"] == "deleted"
    _, rows = _columns(wf.ok("schedules", "list"))
    assert [r["ID"] for r in rows] == ["nightly"]
    _, rows = _columns(wf.ok("schedules", "list", "--include-deleted"))
    assert [(r["ID"], r["STATUS"]) for r in rows] == [("b", "deleted"), ("nightly", "active")]
    assert len(wf("schedules", "list", "--include-deleted", "--json").json()) == 2
    wf.refused("conflict", "schedules", "pause", "b")
    wf.refused("conflict", "schedules", "trigger", "b")


def test_empty_listings(wf: Wf) -> None:
    assert wf.ok("schedules", "list") == "(no schedules)\n"
    assert wf("schedules", "list", "--json").json() == []
    assert wf.ok("runs", "list") == "(no runs)\n"
    assert wf("runs", "list", "--json").json() == {"runs": [], "next_cursor": None}
    body = {"schedule_id": "quiet", "deployment_id": "ask.default", "trigger": CRON}
    wf.ok("schedules", "create", "--file", wf.file(body))
    assert wf.ok("schedules", "occurrences", "quiet") == "(no occurrences)\n"
    page = wf("schedules", "occurrences", "quiet", "--json").json()
    assert page == {"occurrences": [], "next_cursor": None}


def test_occurrences_and_runs_of_an_admitted_run(wf: Wf) -> None:
    due = datetime.now(UTC) + timedelta(seconds=1.5)
    body = {
        "schedule_id": "once",
        "deployment_id": "ask.default",
        "trigger": {"kind": "oneshot", "at": due.isoformat()},
        "inputs": {},
    }
    wf.ok("schedules", "create", "--file", wf.file(body))
    with wf.app() as app:
        deadline = time.monotonic() + 15
        while not app.list_runs(schedule_id="once")["runs"]:
            assert time.monotonic() < deadline, "the service admitted nothing"
            time.sleep(0.05)
        while app.list_runs(schedule_id="once")["runs"][0]["status"] != "interrupted":
            assert time.monotonic() < deadline, "the admitted run did not start"
            time.sleep(0.05)
        expected = app.list_schedule_occurrences("once")

    names, rows = _columns(wf.ok("schedules", "occurrences", "once"))
    assert names == ["INSTANT", "STATUS", "RUN", "DETAIL"]
    assert rows == [
        {
            "INSTANT": due.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "STATUS": "interrupted",
            "RUN": "run-000001",
            "DETAIL": "-",
        }
    ]
    assert wf("schedules", "occurrences", "once", "--json").json() == jsonable(
        expected.to_builtins()
    )

    names, rows = _columns(wf.ok("runs", "list", "--schedule", "once"))
    assert names == ["RUN", "STATUS", "DEPLOYMENT", "TRIGGER", "CREATED", "FINISHED"]
    assert len(rows) == 1
    row = rows[0]
    assert (row["RUN"], row["STATUS"], row["DEPLOYMENT"]) == (
        "run-000001",
        "interrupted",
        "ask.default",
    )
    assert row["TRIGGER"] == f"schedule once @ {due.strftime('%Y-%m-%dT%H:%M:%SZ')}"
    assert row["FINISHED"] == "-"
    wf.ok("schedules", "trigger", "once")
    wf.ok("schedules", "trigger", "once")
    # Filters: a schedule's runs, the ones it triggered by hand included (issue 17), by
    # status.
    page = wf("runs", "list", "--schedule", "once", "--oldest-first", "--json").json()
    assert [(r["run_id"], r["trigger"]["kind"]) for r in page["runs"]] == [
        ("run-000001", "schedule"),
        ("run-000002", "manual"),
        ("run-000003", "manual"),
    ]
    oldest = ("runs", "list", "--deployment", "ask.default", "--limit", "2", "--oldest-first")
    page = wf(*oldest, "--json").json()
    assert [r["run_id"] for r in page["runs"]] == ["run-000001", "run-000002"]
    out = wf.ok(*oldest)
    assert out.rstrip().endswith(f"more: --cursor {page['next_cursor']}")
    _, rows = _columns(out.partition("\n\n")[0])
    assert [(r["RUN"], r["TRIGGER"]) for r in rows][1] == ("run-000002", "manual (schedule once)")
    _, rows = _columns(wf.ok("runs", "list", "--oldest-first", "--cursor", page["next_cursor"]))
    assert [r["RUN"] for r in rows] == ["run-000003"]
    # Newest first by default.
    _, rows = _columns(wf.ok("runs", "list"))
    assert [r["RUN"] for r in rows] == ["run-000003", "run-000002", "run-000001"]
    page = wf("runs", "list", "--status", "completed", "--json").json()
    assert page["runs"] == []
    wf.refused("invalid_argument", "runs", "list", "--status", "sleeping")

    # inspect: the run's fields and its trace.
    out = wf.ok("runs", "inspect", "run-000001")
    block, _, trace = out.partition("\n\n")
    fields = pairs(block)
    assert fields["RUN"] == "run-000001"
    assert fields["STATUS"] == "interrupted"
    assert fields["DEPLOYMENT"] == "ask.default (revision 1)"
    assert fields["ARTIFACT"] == "ask v1"
    assert fields["TRIGGER"].startswith("schedule once @ ")
    assert fields["OUTPUT"] == "-"
    assert fields["AWAITING"] == "ask: name?"
    names, rows = _columns(trace)
    assert names == ["NODE", "KIND", "STATUS", "STARTED", "FINISHED", "ATTEMPTS", "ERROR"]
    assert [(r["NODE"], r["KIND"], r["FINISHED"]) for r in rows] == [("ask", "interrupt", "-")]
    with wf.app() as app:
        expected = jsonable(app.inspect_run("run-000001").to_builtins())
    assert wf("runs", "inspect", "run-000001", "--json").json() == expected
    wf.refused("not_found", "runs", "inspect", "run-999999")


def test_occurrence_pages(wf: Wf) -> None:
    """Stored history (recorded as the service records missed starts) paged by the CLI."""
    body = {"schedule_id": "paged", "deployment_id": "ask.default", "trigger": CRON}
    wf.ok("schedules", "create", "--file", wf.file(body))
    api = wf.served.server.schedules
    assert api is not None

    async def record() -> float:
        current = await api.load("paged", ANONYMOUS_ADMIN)
        base = current.created_at - 3600 * 3
        bumped = msgspec.structs.replace(current, fence=2, skipped_misfire=3)
        rows = [
            OccurrenceRow(
                schedule_id="paged",
                instant=base + 3600 * k,
                status="skipped-misfire",
                detail=f"late by {k + 1} hours",
                recorded_at=current.created_at,
            )
            for k in range(3)
        ]
        await api.store.record_occurrences(
            schedule_row(bumped), expected_revision=1, occurrences=rows
        )
        return base

    base = wf.served.call(record())
    when = [
        datetime.fromtimestamp(base + 3600 * k, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for k in range(3)
    ]
    out = wf.ok("schedules", "occurrences", "paged", "--limit", "2")
    table, _, more = out.partition("\n\n")
    _, rows = _columns(table)
    assert rows == [
        {"INSTANT": when[0], "STATUS": "skipped-misfire", "RUN": "-", "DETAIL": "late by 1 hours"},
        {"INSTANT": when[1], "STATUS": "skipped-misfire", "RUN": "-", "DETAIL": "late by 2 hours"},
    ]
    assert more.startswith("more: --cursor ")
    cursor = more.split()[2]
    first = wf("schedules", "occurrences", "paged", "--limit", "2", "--json").json()
    assert first["next_cursor"] == cursor
    _, rows = _columns(wf.ok("schedules", "occurrences", "paged", "--cursor", cursor))
    assert [r["INSTANT"] for r in rows] == [when[2]]
    _, rows = _columns(wf.ok("schedules", "occurrences", "paged", "--limit", "1", "--all"))
    assert [r["INSTANT"] for r in rows] == when
    everything = wf("schedules", "occurrences", "paged", "--limit", "1", "--all", "--json").json()
    assert everything["next_cursor"] is None
    assert [o["detail"] for o in everything["occurrences"]] == [
        f"late by {k} hours" for k in (1, 2, 3)
    ]
    _, rows = _columns(wf.ok("schedules", "list"))
    assert rows[0]["SKIPPED(OVERLAP/MISFIRE)"] == "0/3"
    wf.refused("invalid_argument", "schedules", "occurrences", "paged", "--limit", "0")
    wf.refused("invalid_argument", "schedules", "occurrences", "paged", "--cursor", "junk")


# ----------------------------------------------------------------- errors


def test_refusals_exit_1_with_the_error_code(wf: Wf) -> None:
    def create(trigger: dict[str, Any]) -> list[str]:
        body = {"schedule_id": "bad", "deployment_id": "ask.default", "trigger": trigger}
        return ["schedules", "create", "--file", wf.file(body)]

    wf.refused("invalid_cron_expression", *create({**CRON, "expression": "61 * * * *"}))
    wf.refused("invalid_timezone", *create({**CRON, "timezone": "Mars/Olympus_Mons"}))
    wf.refused("naive_datetime", *create({"kind": "oneshot", "at": "2999-01-01T00:00:00"}))
    err = wf.refused("not_found", "schedules", "get", "nope")
    assert "'nope'" in err
    for argv in (
        ("schedules", "pause", "nope"),
        ("schedules", "resume", "nope"),
        ("schedules", "delete", "nope"),
        ("schedules", "occurrences", "nope"),
        ("schedules", "preview", "nope"),
        ("schedules", "trigger", "nope"),
    ):
        wf.refused("not_found", *argv)
    good = {"schedule_id": "good", "deployment_id": "ask.default", "trigger": CRON}
    wf.ok("schedules", "create", "--file", wf.file(good))
    wf.refused("already_exists", "schedules", "create", "--file", wf.file(good))
    wf.refused("invalid_argument", "schedules", "preview", "good", "--count", "0")
    wf.refused(
        "not_found",
        "schedules",
        "update",
        "nope",
        "--expected-revision",
        "1",
        "--file",
        wf.file({"note": "x"}),
    )
    # The list is unchanged by every refusal.
    assert [s["schedule_id"] for s in wf("schedules", "list", "--json").json()] == ["good"]


def test_unusable_input_exits_2(wf: Wf, tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.json")
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    renamed = wf.file({"schedule_id": "y"})
    cases: list[tuple[list[str], str]] = [
        (["schedules", "create", "--file", missing], "cannot read"),
        (["schedules", "create", "--file", str(garbage)], "not valid JSON"),
        (["schedules", "create", "--file", wf.file([1, 2])], "must hold a JSON object"),
        (["schedules", "create", "--file", wf.file({"schedule_id": "x"})], "missing"),
        (
            ["schedules", "create", "--file", wf.file({"schedule_id": "x", "colour": 1})],
            "unknown field(s) colour",
        ),
        (
            ["schedules", "update", "x", "--expected-revision", "1", "--file", renamed],
            "unknown field(s) schedule_id",
        ),
    ]
    for argv, message in cases:
        result = wf(*argv)
        assert result.code == 2, (argv, result.err)
        assert result.err.startswith("wf: error: "), result.err
        assert message in result.err, result.err


def test_unreachable_server_and_token(wf: Wf, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    result = wf("schedules", "list", "--failover-timeout", "0", server=dead)
    assert result.code == 1
    assert result.err.startswith("wf: error: rpc_unavailable: "), result.err
    # A token (flag or $WF_TOKEN) is sent: this server knows none, so it refuses it.
    assert wf("schedules", "list", "--json").json() == []
    wf.refused("unauthorized", "schedules", "list", "--token", "t0ken")
    monkeypatch.setenv("WF_TOKEN", "t0ken")
    wf.refused("unauthorized", "runs", "list")


def test_usage_errors_are_argparse_s(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["schedules", "update", "x", "--file", "f.json"])
    assert exited.value.code == 2
    assert "--expected-revision" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["schedules"])
    assert exited.value.code == 2


def test_finished_one_shots_status_filter_and_misfire_allowance(wf: Wf) -> None:
    """Issue 17: a fired one-shot is ``finished`` in get and list, ``--status`` filters,
    a schedule's own misfire allowance shows in get."""
    due = datetime.now(UTC) + timedelta(seconds=1.5)
    once = {
        "schedule_id": "once",
        "deployment_id": "ask.default",
        "trigger": {"kind": "oneshot", "at": due.isoformat()},
    }
    wf.ok("schedules", "create", "--file", wf.file(once))
    yearly = {**once, "schedule_id": "yearly", "trigger": CRON, "misfire_lateness_s": 900}
    fields = pairs(wf.ok("schedules", "create", "--file", wf.file(yearly)).partition("\n\n")[2])
    assert fields["MISFIRE"] == "skip (allowance 900 s)"
    with wf.app() as app:
        deadline = time.monotonic() + 15
        while app.get_schedule("once")["status"] != "finished":
            assert time.monotonic() < deadline, "the one-shot did not finish"
            time.sleep(0.05)
    fields = pairs(wf.ok("schedules", "get", "once"))
    assert (fields["STATUS"], fields["NEXT"]) == ("finished", "-")
    assert fields["FINISHED"].endswith("Z (no further instant)")
    assert fields["REVISION"] == "1"  # admitting and finishing are no edits
    _, rows = _columns(wf.ok("schedules", "list"))
    assert [(r["ID"], r["STATUS"]) for r in rows] == [("once", "finished"), ("yearly", "active")]
    _, rows = _columns(wf.ok("schedules", "list", "--status", "finished"))
    assert [r["ID"] for r in rows] == ["once"]
    listed = wf("schedules", "list", "--status", "active", "--json").json()
    assert [s["schedule_id"] for s in listed] == ["yearly"]
    wf.ok("schedules", "pause", "yearly", "--reason", "audit")
    _, rows = _columns(wf.ok("schedules", "list", "--status", "paused"))
    assert [(r["ID"], r["REASON"]) for r in rows] == [("yearly", "audit")]
    with pytest.raises(SystemExit) as exited:  # argparse's choices
        wf("schedules", "list", "--status", "done")
    assert exited.value.code == 2
