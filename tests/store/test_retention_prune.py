"""Retention on SQLite and PostgreSQL: ``wf store prune``, the server's periodic pass,
and what neither may ever remove (a live run, unfinished activities, a schedule's
latest occurrence).

Every store is filled by a real local server (JSON-RPC plus an in-process worker
over loopback), then pruned with the server stopped (the CLI takes the store's
ownership) and opened again by a new server: recovery must load it cleanly and
``wf store check`` must call it consistent. PostgreSQL's DSN comes from
``WF_TEST_POSTGRES_DSN`` (a schema of the test's own; skipped locally without a
server, failing under ``CI=true``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from _local_servers import plant_occurrences
from _pg import drop_schema, new_schema_name, postgres_dsn
from wf.activities import BUILTIN_ACTIVITIES
from wf.cli.main import main
from wf.cli.store_cmd import EXIT_BUSY, parse_duration
from wf.errors import InvalidArgument, NotFound
from wf.runtime.runs import FINAL_STATUSES
from wf.scheduler.model import Activity
from wf.server.config import RetentionConfig, ServerConfig, ServerSection, StoreConfig
from wf.server.local import LocalStaticServer
from wf.server.retention import RuntimeLinks
from wf.server.rpc import ANONYMOUS_ADMIN
from wf.store import make_store, retention
from wf.store.driven_catalog import DrivenCatalog
from wf.store.query import Query, Result, run_scripted

CHAIN_PLAN: dict[str, Any] = {
    "nodes": [
        {
            "kind": "activity",
            "id": "first",
            "activity_type": "format_text",
            "args": {"template": "one"},
            "idempotent": True,
        },
        {
            "kind": "activity",
            "id": "second",
            "activity_type": "upper",
            "needs": ["first"],
            "args": {"text": {"$node": "first", "path": "text"}},
            "idempotent": True,
        },
    ],
    "output": {"result": {"$node": "second", "path": "text"}},
}
"""Two activities, served by the built-in worker."""
ASK_PLAN: dict[str, Any] = {
    "nodes": [{"kind": "interrupt", "id": "ask", "prompt": "Go on?"}],
    "output": {"answer": {"$node": "ask"}},
}
"""A run of it stays ``interrupted`` (live) until answered."""
DEADLINE_S = 20.0


@dataclass
class Where:
    """A test-private store and its ``wf store`` arguments."""

    kind: str
    args: list[str]
    store: StoreConfig


@pytest.fixture(params=["sqlite", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Where]:
    if request.param == "sqlite":
        root = tmp_path / "store"
        yield Where("sqlite", ["--store-root", str(root)], StoreConfig(root=str(root)))
        return
    dsn = postgres_dsn()
    schema = new_schema_name()
    try:
        yield Where(
            "postgres",
            ["--postgres", dsn, "--schema", schema],
            StoreConfig(postgres_dsn=dsn, postgres_schema=schema),
        )
    finally:
        drop_schema(dsn, schema)


def _sql(where: Where, statement: str, *params: Any) -> None:
    """Run one statement (``?`` placeholders) on the store behind the server's back."""
    if where.kind == "sqlite":
        conn = sqlite3.connect(Path(where.store.root) / "scheduler.db", isolation_level=None)
        try:
            conn.execute("PRAGMA busy_timeout=5000")
            conn.execute(statement, params)
        finally:
            conn.close()
        return
    import psycopg
    from psycopg import sql

    assert where.store.postgres_dsn is not None
    with psycopg.connect(where.store.postgres_dsn, autocommit=True) as conn:
        schema = sql.Identifier(where.store.postgres_schema)
        conn.execute(sql.SQL("SET search_path TO {}").format(schema))
        conn.execute(statement.replace("?", "%s").encode(), params)


def _server(store: StoreConfig, *, workers: int = 1) -> LocalStaticServer:
    config = ServerConfig(server=ServerSection(host="127.0.0.1", port=0, store=store))
    return LocalStaticServer(
        config, BUILTIN_ACTIVITIES, workers=workers, max_concurrency=2, schedules=True
    )


async def _until(status: set[str], server: LocalStaticServer, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        view = await server.api.inspect_run(run_id)
        if view["status"] in status:
            return view
        assert time.monotonic() < deadline, f"{run_id} never reached {status}: {view}"
        await asyncio.sleep(0.02)


async def _past(instant: float) -> None:
    """Return once the wall clock is strictly past ``instant`` (polls; never guesses)."""
    while time.time() <= instant:  # noqa: ASYNC110 - the wall clock sets no event
        await asyncio.sleep(0.005)


@dataclass
class Filled:
    old_run: str
    old_activities: list[str]
    live_run: str
    new_run: str
    new_activities: list[str]
    old_standalone: str
    queued_standalone: str
    occurrences: list[float]
    mark: float
    """Everything above finished before it, except ``new_run`` (after it)."""


def fill(where: Where) -> Filled:
    """Through a real server: an old finished run, an old live (interrupted) run, an old
    cancelled and an old queued standalone activity, three old occurrences of a
    schedule; then, after ``mark``, one new finished run."""

    async def run() -> Filled:
        async with _server(where.store) as server:
            api = server.api
            await api.create_artifact_from_plan("chain", 1, CHAIN_PLAN)
            await api.save_deployment({"artifact_id": "chain", "artifact_version": 1})
            await api.create_artifact_from_plan("ask", 1, ASK_PLAN)
            await api.save_deployment({"artifact_id": "ask", "artifact_version": 1})
            old = (await api.start_run("chain.default"))["run_id"]
            await _until({"completed"}, server, old)
            live = (await api.start_run("ask.default"))["run_id"]
            await _until({"interrupted"}, server, live)
            scheduler = server.server.scheduler
            await scheduler.submit_activities(
                [
                    Activity(activity_id="lone-done", activity_type="nobody-serves-it"),
                    Activity(activity_id="lone-queued", activity_type="nobody-serves-it"),
                ],
                ANONYMOUS_ADMIN,
            )
            await scheduler.cancel_activity("lone-done", "test", ANONYMOUS_ADMIN)
            await api.schedules.create_schedule(
                schedule_id="hourly",
                deployment_id="chain.default",
                trigger={"kind": "cron", "expression": "0 * * * *", "timezone": "UTC"},
            )
            at = time.time() - 3 * 3600.0
            instants = [at, at + 3600.0, at + 7200.0]
            await plant_occurrences(server, "hourly", instants)
            # The occurrence that admitted the old run (as the admission service records
            # one): it goes with its run.
            _sql(
                where,
                "INSERT INTO occurrences (schedule_id, instant, status, run_id, detail, "
                "recorded_at) VALUES (?, ?, 'admitted', ?, NULL, ?)",
                "hourly",
                at - 3600.0,
                old,
                at - 3600.0,
            )
            mark = time.time()
            await _past(mark)
            new = (await api.start_run("chain.default"))["run_id"]
            await _until({"completed"}, server, new)
            return Filled(
                old_run=old,
                old_activities=[f"{old}.first", f"{old}.second"],
                live_run=live,
                new_run=new,
                new_activities=[f"{new}.first", f"{new}.second"],
                old_standalone="lone-done",
                queued_standalone="lone-queued",
                occurrences=instants,
                mark=mark,
            )

    return asyncio.run(run())


async def _prune(where: Where, cutoff: float, *, dry_run: bool = False) -> dict[str, int]:
    store = make_store(
        store_root=where.store.root if where.kind == "sqlite" else None,
        postgres_dsn=where.store.postgres_dsn,
        postgres_schema=where.store.postgres_schema,
        create=False,
    )
    await store.open()
    try:
        assert isinstance(store, DrivenCatalog)
        counts = await store.prune(RuntimeLinks(), cutoff=cutoff, batch=1, dry_run=dry_run)
        return counts.as_dict()
    finally:
        await store.close()


def test_prune_removes_what_finished_before_the_cutoff_and_nothing_live(where: Where) -> None:
    filled = fill(where)
    # batch=1: every kind takes several batches, so the cursors are exercised too.
    would = asyncio.run(_prune(where, filled.mark, dry_run=True))
    removed = asyncio.run(_prune(where, filled.mark))
    assert would == removed
    assert removed["runs"] == 1
    assert removed["activities"] == 3  # the old run's two, the cancelled standalone one
    assert removed["transitions"] > 3
    # Two skipped ones and the old run's admitting one; the schedule's latest stays.
    assert removed["occurrences"] == 3
    assert asyncio.run(_prune(where, filled.mark)) == retention.PruneCounts().as_dict()

    async def after() -> None:
        # Recovery loads the pruned store cleanly, and the live run goes on.
        async with _server(where.store) as server:
            report = server.server.recovery
            assert report is not None
            assert report.diagnostics == []
            api = server.api
            with pytest.raises(NotFound):
                await api.inspect_run(filled.old_run)
            assert (await api.inspect_run(filled.new_run))["status"] == "completed"
            scheduler = server.server.scheduler
            store = server.server.node.store
            gone = [*filled.old_activities, filled.old_standalone]
            assert await store.existing_activity_ids(gone) == set()
            for activity_id in gone:
                assert await store.history(activity_id) == []
            kept = [*filled.new_activities, filled.queued_standalone]
            assert await store.existing_activity_ids(kept) == set(kept)
            assert await store.history(filled.new_activities[0]) != []
            view = await scheduler.get_activity(filled.queued_standalone, ANONYMOUS_ADMIN)
            assert view.activity.state == "queued"
            occurrences = await store.list_occurrences("hourly", after_instant=0.0, limit=10)
            assert [o.instant for o in occurrences] == filled.occurrences[-1:]
            await api.resume_run(filled.live_run, {"go": True})
            assert (await _until({"completed"}, server, filled.live_run))["output"] == {
                "answer": {"go": True}
            }
            # Run numbers are never reused, pruned ones included.
            again = (await api.start_run("chain.default"))["run_id"]
            assert again > filled.new_run
            await _until({"completed"}, server, again)

    asyncio.run(after())
    assert main(["store", "check", *where.args]) == 0


def test_wf_store_prune_command_counts_then_prunes(
    where: Where, capsys: pytest.CaptureFixture[str]
) -> None:
    filled = fill(where)
    capsys.readouterr()
    # An age that reaches back past everything: all that finished goes.
    args = ["store", "prune", "--older-than", "0.001s", *where.args, "--json"]
    assert main([*args, "--dry-run"]) == 0
    would = json.loads(capsys.readouterr().out)
    assert would["dry_run"] is True
    assert would["cutoff"].endswith("+00:00")
    assert main(args) == 0
    done = json.loads(capsys.readouterr().out)
    counts = {k: done[k] for k in ("runs", "activities", "transitions", "occurrences")}
    assert counts == {k: would[k] for k in counts}
    assert counts["runs"] == 2  # both finished runs; the interrupted one is live
    assert counts["occurrences"] == 3
    assert main(["store", "prune", "--older-than", "1s", *where.args]) == 0
    assert capsys.readouterr().out == (
        "removed 0 runs, 0 activities, 0 transitions, 0 occurrences\n"
    )
    assert main(["store", "check", *where.args]) == 0

    async def restart() -> None:
        # The command held the store's ownership (on PostgreSQL: an epoch of its own);
        # a server takes it back and recovers cleanly, the live run intact.
        async with _server(where.store, workers=0) as server:
            report = server.server.recovery
            assert report is not None
            assert report.diagnostics == []
            assert (await server.api.inspect_run(filled.live_run))["status"] == "interrupted"

    asyncio.run(restart())


def test_prune_refuses_a_store_a_running_server_owns(where: Where) -> None:
    async def run() -> subprocess.CompletedProcess[str]:
        async with _server(where.store):
            command = [sys.executable, "-m", "wf.cli.main", "store", "prune"]
            process = await asyncio.create_subprocess_exec(
                *command,
                "--older-than",
                "30d",
                *where.args,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            out, err = await process.communicate()
            assert process.returncode is not None
            return subprocess.CompletedProcess(
                command, process.returncode, out.decode(), err.decode()
            )

    done = asyncio.run(run())
    assert done.returncode == EXIT_BUSY, done.stderr
    assert "server.store.retention" in done.stderr
    assert done.stderr.count("\n") == 1  # one line, no traceback


def test_the_server_prunes_periodically_when_retention_is_set(
    where: Where, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="wf.server.retention")
    store = StoreConfig(
        root=where.store.root,
        postgres_dsn=where.store.postgres_dsn,
        postgres_schema=where.store.postgres_schema,
        retention=RetentionConfig(older_than_s=0.2, interval_s=0.1, batch=10),
    )

    async def run() -> None:
        async with _server(store) as server:
            api = server.api
            await api.create_artifact_from_plan("chain", 1, CHAIN_PLAN)
            await api.save_deployment({"artifact_id": "chain", "artifact_version": 1})
            await api.create_artifact_from_plan("ask", 1, ASK_PLAN)
            await api.save_deployment({"artifact_id": "ask", "artifact_version": 1})
            live = (await api.start_run("ask.default"))["run_id"]
            done = (await api.start_run("chain.default"))["run_id"]
            await _until({"completed"}, server, done)
            task = server.server.retention
            deadline = time.monotonic() + DEADLINE_S
            # Until a pass that pruned the run is over (its counts and log line come
            # at the end of the pass, after the run's own batch).
            while task.pruned.runs < 1:
                assert time.monotonic() < deadline, "no pass ever pruned the finished run"
                await asyncio.sleep(0.05)
            with pytest.raises(NotFound):
                await api.inspect_run(done)
            assert (await api.inspect_run(live))["status"] == "interrupted"

    asyncio.run(run())
    pruned = [r for r in caplog.records if getattr(r, "action", None) == "store.pruned"]
    assert pruned
    assert sum(getattr(r, "runs", 0) for r in pruned) >= 1
    assert main(["store", "check", *where.args]) == 0


def test_retention_is_off_by_default() -> None:
    assert RetentionConfig().older_than_s == 0
    assert StoreConfig().retention == RetentionConfig()


def test_the_final_run_statuses_are_the_runtimes() -> None:
    assert set(retention.RUN_FINAL_STATUSES) == {str(s) for s in FINAL_STATUSES}


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30d", 30 * 86_400.0),
        ("12h", 43_200.0),
        ("90m", 5_400.0),
        ("45", 45.0),
        ("2w", 1_209_600.0),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "5y", "-1d", "1.5.2h", "d"])
def test_bad_durations_are_refused(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(InvalidArgument):
        parse_duration(text)
    assert main(["store", "prune", f"--older-than={text}", "--store-root", "x"]) == 2
    assert "--older-than" in capsys.readouterr().err


def test_prune_on_a_missing_store_refuses_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "nothing-here"
    assert main(["store", "prune", "--older-than", "1d", "--store-root", str(root)]) == 3
    assert not os.path.lexists(root)
    assert "no store at" in capsys.readouterr().err


def test_a_final_run_with_an_unfinished_activity_is_kept() -> None:
    """A cancelled run whose activity a worker still holds: the core holds that
    activity too, so neither it nor its run may go (checked in the deleting
    transaction, with a scripted driver)."""
    asked: list[str] = []

    def execute(query: Query) -> Result:
        asked.append(query.name)
        if query.name == "prune_confirm_runs":
            return Result(rows=[("run-000001",)])
        if query.name == "prune_live_activities":
            return Result(rows=[("run-000001.a",)])
        raise AssertionError(f"unexpected {query.name}")

    body = retention._delete_runs(1.0, [("run-000001", ["run-000001.a", "run-000001.b"])])
    counts = run_scripted(body, execute)
    assert counts == retention.PruneCounts()
    assert asked == ["prune_confirm_runs", "prune_live_activities"]


def test_a_run_goes_with_its_activities_transitions_and_occurrence_in_one_transaction() -> None:
    asked: list[str] = []

    def execute(query: Query) -> Result:
        asked.append(query.name)
        if query.name == "prune_confirm_runs":
            return Result(rows=[("run-000001",)])
        return Result(rowcount=2 if query.name.startswith("prune_delete") else 0)

    body = retention._delete_runs(1.0, [("run-000001", ["run-000001.a", "run-000001.b"])])
    counts = run_scripted(body, execute)
    assert asked == [
        "prune_confirm_runs",
        "prune_live_activities",
        "prune_delete_transitions",
        "prune_delete_activities",
        "prune_delete_run_occurrences",  # before the run: occurrences reference it
        "prune_delete_runs",
    ]
    assert counts == retention.PruneCounts(runs=2, activities=2, transitions=2, occurrences=2)
