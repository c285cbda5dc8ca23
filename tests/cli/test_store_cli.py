"""``wf store migrate`` and ``wf store check`` on SQLite and PostgreSQL.

PostgreSQL's DSN comes from ``WF_TEST_POSTGRES_DSN``; without a reachable
server those cases are skipped locally and FAIL when ``CI=true``.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _pg import drop_schema, new_schema_name, postgres_dsn
from wf.cli.main import main
from wf.node import SchedulerNode
from wf.scheduler import commands as cmd
from wf.scheduler.model import Activity, WorkerInfo
from wf.store import codec, make_store
from wf.testing.clock import VirtualClock


class Where:
    """A test-private store location, its ``wf store`` arguments and raw SQL on it."""

    def __init__(self, kind: str, args: list[str], root: Path | None, dsn: str | None) -> None:
        self.kind = kind
        self.args = args
        self.root = root
        self.dsn = dsn
        self.schema = args[-1] if dsn else ""

    def sql(self, statement: str, *params: Any) -> None:
        """Run one statement (``?`` placeholders) behind the store's back."""
        if self.root is not None:
            conn = sqlite3.connect(self.root / "scheduler.db", isolation_level=None)
            try:
                conn.execute(statement, params)
            finally:
                conn.close()
            return
        import psycopg
        from psycopg import sql

        assert self.dsn is not None
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))
            conn.execute(statement.replace("?", "%s"), params)

    def populate(self) -> None:
        """Two activities, one of them leased, through a real node; then stop it."""

        async def run() -> None:
            store = make_store(
                store_root=self.root, postgres_dsn=self.dsn, postgres_schema=self.schema or "wf"
            )
            node = SchedulerNode(store, clock=VirtualClock())
            await node.start(background=False)
            info = WorkerInfo(worker_id="w1", max_concurrency=1, heartbeat_interval_s=3600.0)
            await node.execute(lambda t: cmd.RegisterWorker(now=t, info=info))
            batch = tuple(Activity(activity_id=f"a{i}", activity_type="t") for i in (1, 2))
            await node.execute(lambda t: cmd.Submit(now=t, activities=batch))
            await node.execute(lambda t: cmd.Poll(now=t, worker_id="w1", max_items=1))
            await node.stop()

        asyncio.run(run())


@pytest.fixture(params=["sqlite", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Where]:
    if request.param == "sqlite":
        root = tmp_path / "store"
        yield Where("sqlite", ["--store-root", str(root)], root, None)
        return
    dsn = postgres_dsn()
    schema = new_schema_name()
    try:
        yield Where("postgres", ["--postgres", dsn, "--schema", schema], None, dsn)
    finally:
        drop_schema(dsn, schema)


def test_migrate_prints_the_schema_version(
    where: Where, capsys: pytest.CaptureFixture[str]
) -> None:
    newest = codec.migrations(where.kind)[-1][0]
    assert main(["store", "migrate", *where.args]) == 0
    assert capsys.readouterr().out == f"schema version {newest}\n"
    # Idempotent, and machine-readable on request.
    assert main(["store", "migrate", *where.args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"schema_version": newest}


def test_check_is_clean_on_a_fresh_and_on_a_used_store(
    where: Where, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["store", "migrate", *where.args]) == 0
    assert main(["store", "check", *where.args]) == 0
    where.populate()
    capsys.readouterr()
    assert main(["store", "check", *where.args]) == 0
    captured = capsys.readouterr()
    assert captured.out == "store is consistent: no contradictions found\n"
    assert captured.err == ""
    assert main(["store", "check", *where.args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


@pytest.mark.parametrize(
    ("statement", "params", "kind"),
    [
        (
            "UPDATE activities SET spec = ? WHERE activity_id = ?",
            (b"\xc1garbage", "a2"),
            "malformed_row",
        ),
        (
            "UPDATE activities SET worker_id = ? WHERE activity_id = ?",
            ("ghost", "a1"),
            "unknown_worker",
        ),
    ],
    ids=["malformed-spec", "unknown-lease-holder"],
)
def test_check_names_the_corrupt_record_and_exits_1(
    where: Where,
    capsys: pytest.CaptureFixture[str],
    statement: str,
    params: tuple[Any, ...],
    kind: str,
) -> None:
    where.populate()
    where.sql(statement, *params)
    capsys.readouterr()
    assert main(["store", "check", *where.args]) == 1
    lines = capsys.readouterr().out.splitlines()
    key = params[-1]
    named = [
        line.split("\t") for line in lines if line.split("\t")[:3] == [kind, "activities", key]
    ]
    assert named, lines
    assert key in named[0][3]
    assert main(["store", "check", *where.args, "--json"]) == 1
    found = json.loads(capsys.readouterr().out)
    assert {(d["kind"], d["table"], d["key"], d["activity_id"]) for d in found} >= {
        (kind, "activities", key, key)
    }


@pytest.mark.parametrize("command", ["migrate", "check"])
def test_no_store_given_is_a_usage_error(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["store", command]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.splitlines()) == 1
    assert captured.err.startswith("wf: error: ")
    assert "--store-root" in captured.err
