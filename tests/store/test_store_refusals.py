"""Opening a store refuses what is not one, and recovery refuses rewound counters
(issue 13, item 10), on SQLite and PostgreSQL.

A store is new only where there is none: a missing folder or a folder without
``scheduler.db`` (SQLite), an empty or missing schema (PostgreSQL). Anything
else must already be a wf store: a zero-byte file, a file that is not SQLite,
another application's SQLite database or PostgreSQL tables are refused, and
the real ``wf-rpc-server`` says so in one line on standard error (beside its
structured log records) and exits non-zero, leaving the file as it was. A
counter rewound below the data it numbers is refused by recovery, before
anything is written.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _store_backends import Backend

from _pg import drop_schema, new_schema_name
from wf.errors import CorruptRecord, NotFound
from wf.node import SchedulerNode
from wf.scheduler import commands as cmd
from wf.scheduler.model import Activity, WorkerInfo
from wf.store import codec
from wf.store.protocol import RunRow
from wf.store.sqlite import DB_NAME, SQLiteStore
from wf.testing.clock import VirtualClock

REFUSAL_TIMEOUT_S = 60.0
"""Bound for a refusing server process to exit (imports on a loaded machine); a
server that starts instead of refusing runs into it and fails the test."""


def run(main: Callable[[], Any]) -> Any:
    return asyncio.run(main())


# ------------------------------------------------------------------ new stores


def test_a_new_store_is_created_whole_and_leaves_nothing_else(tmp_path: Path) -> None:
    root = tmp_path / "new" / "store"

    async def main() -> None:
        store = SQLiteStore(root)
        await store.open()
        try:
            assert await store.schema_version() == codec.migrations("sqlite")[-1][0]
        finally:
            await store.close()

    run(main)
    # The database was built under a private name and linked into place.
    assert not [p.name for p in root.iterdir() if p.name.endswith(".new")]
    assert (root / DB_NAME).stat().st_size > 0
    # And it opens again as the store it is.
    run(main)


@pytest.mark.parametrize("make", ["no-folder", "no-db"])
def test_a_store_that_must_exist_is_not_created(tmp_path: Path, make: str) -> None:
    root = tmp_path / "store"
    if make == "no-db":
        root.mkdir()

    async def main() -> None:
        store = SQLiteStore(root, create=False)
        with pytest.raises(NotFound, match=str(root)):
            await store.open()
        await store.close()

    run(main)
    assert sorted(tmp_path.rglob("*")) == ([root] if make == "no-db" else [])


def test_a_postgres_store_that_must_exist_is_not_created(pg_dsn: str) -> None:
    import psycopg

    from wf.store.postgres import PostgresStore

    schema = new_schema_name()

    async def main() -> None:
        store = PostgresStore(pg_dsn, schema=schema, create=False)
        with pytest.raises(NotFound, match=schema):
            await store.open()
        await store.close()

    try:
        run(main)
        with psycopg.connect(pg_dsn) as conn:
            cur = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [schema])
            assert cur.fetchone() is None
    finally:
        drop_schema(pg_dsn, schema)


# ------------------------------------------------------------- rewound counters


def _run_row(n: int) -> RunRow:
    return RunRow(
        run_id="",
        seq=0,
        deployment_id="hello.default",
        tenant="acme",
        status="admitted",
        schedule_id=None,
        body=b'{"n": %d}' % n,
        revision=1,
        created_at=1.0,
        updated_at=1.0,
    )


def test_recovery_refuses_a_rewound_run_counter_before_writing(store_factory: Backend) -> None:
    async def main() -> None:
        store = store_factory.make()
        node = SchedulerNode(store, clock=VirtualClock())
        await node.start(background=False)
        info = WorkerInfo(worker_id="w1", max_concurrency=1, heartbeat_interval_s=3600.0)
        await node.execute(lambda t: cmd.RegisterWorker(now=t, info=info))
        batch = (Activity(activity_id="a1", activity_type="t"),)
        await node.execute(lambda t: cmd.Submit(now=t, activities=batch))
        await node.execute(lambda t: cmd.Poll(now=t, worker_id="w1", max_items=1))
        await store.insert_run(_run_row(1))
        await store.insert_run(_run_row(2))
        await node.stop()

    run(main)
    store_factory.sql("UPDATE counters SET value = 1 WHERE name = ?", "run_seq")
    history = store_factory.sql("SELECT COUNT(*) FROM transitions")

    async def restart() -> None:
        node = SchedulerNode(store_factory.make(), clock=VirtualClock())
        await node.start(background=False)
        await node.stop()

    with pytest.raises(CorruptRecord, match="counter 'run_seq' is 1, below 2") as refused:
        run(restart)
    assert "refusing to start" in refused.value.message
    # Refused before recovery wrote anything (its lease would have expired by now).
    assert store_factory.sql("SELECT COUNT(*) FROM transitions") == history


# ------------------------------------------------------- the real server process


def _server(*args: str) -> subprocess.CompletedProcess[str]:
    """``wf-rpc-server`` with ``args`` until it exits (it must: it refuses)."""
    return subprocess.run(
        [sys.executable, "-m", "wf.server.main", "--port", "0", *args],
        capture_output=True,
        text=True,
        timeout=REFUSAL_TIMEOUT_S,
        check=False,
    )


def _is_log_record(line: str) -> bool:
    """A structured log line (the server logs JSON objects at start, e.g. its
    open-file limit): not part of the refusal."""
    try:
        record = json.loads(line)
    except ValueError:
        return False
    return isinstance(record, dict) and "level" in record


def _assert_refused_in_one_line(done: subprocess.CompletedProcess[str], *names: str) -> str:
    assert done.returncode != 0
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if not _is_log_record(line)]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("wf-rpc-server: error: ")
    for name in names:
        assert name in lines[0]
    return lines[0]


def _foreign_sqlite(db: Path) -> None:
    conn = sqlite3.connect(db)
    try:
        conn.execute("CREATE TABLE recipes (name TEXT PRIMARY KEY, steps TEXT)")
        conn.execute("INSERT INTO recipes VALUES ('bread', 'knead')")
        conn.commit()
    finally:
        conn.close()


FILES: dict[str, tuple[Callable[[Path], None], str]] = {
    "zero-byte": (lambda db: db.touch(), "is empty (0 bytes)"),
    "text-file": (lambda db: db.write_text("my notes\n" * 500), "is not an SQLite database"),
    "foreign-sqlite": (_foreign_sqlite, "is an SQLite database but not a wf store"),
}


@pytest.mark.parametrize("case", sorted(FILES))
def test_the_server_refuses_a_file_that_is_not_a_store(tmp_path: Path, case: str) -> None:
    make, problem = FILES[case]
    root = tmp_path / "store"
    root.mkdir()
    db = root / DB_NAME
    make(db)
    before = db.read_bytes()
    done = _server("--store-root", str(root))
    _assert_refused_in_one_line(done, str(db), problem)
    assert db.read_bytes() == before
    assert sorted(p.name for p in root.iterdir()) == [DB_NAME]


def _populate_and_rewind(make_store: Callable[[], Any], rewind: Callable[[], None]) -> None:
    async def main() -> None:
        node = SchedulerNode(make_store(), clock=VirtualClock())
        await node.start(background=False)
        batch = tuple(Activity(activity_id=f"a{i}", activity_type="t") for i in range(3))
        await node.execute(lambda t: cmd.Submit(now=t, activities=batch))
        await node.stop()

    run(main)
    rewind()


def test_the_server_refuses_a_rewound_counter(tmp_path: Path) -> None:
    root = tmp_path / "store"
    db = root / DB_NAME

    def rewind() -> None:
        conn = sqlite3.connect(db, isolation_level=None)
        try:
            conn.execute("UPDATE counters SET value = 1 WHERE name = 'seq'")
        finally:
            conn.close()

    _populate_and_rewind(lambda: SQLiteStore(root), rewind)
    done = _server("--store-root", str(root))
    _assert_refused_in_one_line(done, str(db), "counter 'seq' is 1, below 3")


def test_the_server_refuses_a_rewound_counter_on_postgres(pg_dsn: str, pg_schema: str) -> None:
    import psycopg
    from psycopg import sql

    from wf.store.postgres import PostgresStore

    def rewind() -> None:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            statement = sql.SQL("UPDATE {}.counters SET value = 1 WHERE name = 'seq'")
            conn.execute(statement.format(sql.Identifier(pg_schema)))

    _populate_and_rewind(lambda: PostgresStore(pg_dsn, schema=pg_schema), rewind)
    done = _server("--postgres", pg_dsn, "--postgres-schema", pg_schema)
    _assert_refused_in_one_line(done, pg_schema, "counter 'seq' is 1, below 3")


def test_the_server_refuses_a_postgres_schema_holding_other_tables(
    pg_dsn: str, pg_schema: str
) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(pg_schema)))
        table = sql.SQL("CREATE TABLE {}.recipes (name TEXT)")
        conn.execute(table.format(sql.Identifier(pg_schema)))
    done = _server("--postgres", pg_dsn, "--postgres-schema", pg_schema)
    _assert_refused_in_one_line(done, pg_schema, "holds tables but no wf store")
    with psycopg.connect(pg_dsn) as conn:
        cur = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            [pg_schema],
        )
        assert cur.fetchall() == [("recipes",)]
