"""``wf store migrate`` and ``wf store check`` on SQLite and PostgreSQL.

PostgreSQL's DSN comes from ``WF_TEST_POSTGRES_DSN``; without a reachable
server those cases are skipped locally and FAIL when ``CI=true``.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from _local_servers import plant_occurrences
from _pg import drop_schema, new_schema_name, postgres_dsn
from wf.cli.main import main
from wf.errors import CorruptRecord
from wf.node import SchedulerNode
from wf.scheduler import commands as cmd
from wf.scheduler.model import Activity, WorkerInfo
from wf.server.config import ServerConfig, ServerSection, StoreConfig
from wf.server.local import LocalStaticServer
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

    def populate(self, activities: int = 2) -> None:
        """``activities`` activities, one of them leased, through a real node; then stop it."""

        async def run() -> None:
            store = make_store(
                store_root=self.root, postgres_dsn=self.dsn, postgres_schema=self.schema or "wf"
            )
            node = SchedulerNode(store, clock=VirtualClock())
            await node.start(background=False)
            info = WorkerInfo(worker_id="w1", max_concurrency=1, heartbeat_interval_s=3600.0)
            await node.execute(lambda t: cmd.RegisterWorker(now=t, info=info))
            batch = tuple(
                Activity(activity_id=f"a{i}", activity_type="t") for i in range(1, activities + 1)
            )
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


# ------------------------------------------------- every record, every kind (issue 13)

GREET_PLAN: dict[str, Any] = {
    "input_schema": {
        "type": "object",
        "properties": {"greeting": {"type": "string"}},
        "required": ["greeting"],
        "additionalProperties": False,
    },
    "nodes": [{"kind": "interrupt", "id": "ask", "prompt": "Send {greeting}?"}],
    "output": {"answer": {"$node": "ask"}},
}
"""A run of it waits for an answer at once: no worker is needed to finish it."""
START = datetime(2026, 3, 27, 12, 0, 0, tzinfo=UTC)


def _local_server(where: Where) -> LocalStaticServer:
    """An in-process server with schedules on ``where``'s store and a virtual clock."""
    store = (
        StoreConfig(root=str(where.root))
        if where.root is not None
        else StoreConfig(postgres_dsn=where.dsn, postgres_schema=where.schema)
    )
    config = ServerConfig(server=ServerSection(host="127.0.0.1", port=0, store=store))
    return LocalStaticServer(
        config, [], workers=0, max_concurrency=1, schedules=True, clock=VirtualClock(START)
    )


def populate_catalog(where: Where) -> None:
    """Through a real server: an artifact, a deployment, a finished run, a schedule and
    one occurrence of it (recorded as the admission service records one)."""

    async def run() -> None:
        async with _local_server(where) as server:
            await server.api.create_artifact_from_plan("greet", 1, GREET_PLAN)
            await server.api.save_deployment(
                {
                    "artifact_id": "greet",
                    "artifact_version": 1,
                    "default_inputs": {"greeting": "hello"},
                }
            )
            started = await server.api.start_run("greet.default")
            await server.api.resume_run(started["run_id"], {"approved": True})
            await server.api.schedules.create_schedule(
                schedule_id="hourly",
                deployment_id="greet.default",
                trigger={"kind": "cron", "expression": "0 * * * *", "timezone": "UTC"},
            )
            await plant_occurrences(server, "hourly", [START.timestamp()])

    asyncio.run(run())


def test_check_is_clean_on_every_kind_of_record_the_server_writes(
    where: Where, capsys: pytest.CaptureFixture[str]
) -> None:
    where.populate()
    populate_catalog(where)
    capsys.readouterr()
    assert main(["store", "check", *where.args]) == 0
    assert capsys.readouterr().out == "store is consistent: no contradictions found\n"


@pytest.mark.parametrize(
    ("table", "key", "statement", "params"),
    [
        ("schedules", "hourly", "UPDATE schedules SET body = ?", (b'{"schedule_id": 7}',)),
        ("runs", "run-000001", "UPDATE runs SET body = ?", (b"\xff not json",)),
        ("runs", "run-000001", "DELETE FROM artifacts", ()),
        ("artifacts", "greet@1", "UPDATE artifacts SET plan = ?", (b'{"nodes": []}',)),
        ("deployments", "greet.default", "UPDATE deployments SET revision = 9", ()),
    ],
    ids=["schedule-body", "run-body", "run-without-its-artifact", "artifact-plan", "deployment"],
)
def test_check_names_every_catalog_record_the_server_cannot_read(
    where: Where,
    capsys: pytest.CaptureFixture[str],
    table: str,
    key: str,
    statement: str,
    params: tuple[Any, ...],
) -> None:
    populate_catalog(where)
    where.sql(statement, *params)
    capsys.readouterr()
    assert main(["store", "check", *where.args]) == 1
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert ["corrupt_record", table, key] in [line[:3] for line in lines], lines


def test_a_schedule_the_server_answers_corrupt_record_for_is_what_check_reports(
    where: Where, capsys: pytest.CaptureFixture[str]
) -> None:
    populate_catalog(where)
    where.sql("UPDATE schedules SET body = ? WHERE schedule_id = ?", b"[1, 2]", "hourly")

    async def read() -> None:
        async with _local_server(where) as server:
            await server.api.schedules.get_schedule(schedule_id="hourly")

    with pytest.raises(CorruptRecord):
        asyncio.run(read())
    capsys.readouterr()
    assert main(["store", "check", *where.args, "--json"]) == 1
    found = json.loads(capsys.readouterr().out)
    assert [(d["kind"], d["table"], d["key"]) for d in found] == [
        ("corrupt_record", "schedules", "hourly")
    ]


def test_check_decodes_every_transition(where: Where, capsys: pytest.CaptureFixture[str]) -> None:
    where.populate()
    where.sql("UPDATE transitions SET to_state = 'bogus' WHERE to_state = 'leased'")
    capsys.readouterr()
    assert main(["store", "check", *where.args]) == 1
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert ["corrupt_record", "transitions"] in [line[:2] for line in lines], lines


def test_check_decodes_every_occurrence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # SQLite only: PostgreSQL's column types keep a mistyped value out altogether.
    where = Where("sqlite", ["--store-root", str(tmp_path)], tmp_path, None)
    populate_catalog(where)
    where.sql("UPDATE occurrences SET recorded_at = 'yesterday'")
    capsys.readouterr()
    assert main(["store", "check", *where.args]) == 1
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [line[:2] for line in lines] == [["corrupt_record", "occurrences"]], lines


@pytest.mark.parametrize("counter", ["seq", "token", "worker_seq"])
def test_check_reports_a_rewound_counter_and_the_server_refuses_to_start(
    where: Where, capsys: pytest.CaptureFixture[str], counter: str
) -> None:
    where.populate()
    where.sql("UPDATE counters SET value = 0 WHERE name = ?", counter)
    capsys.readouterr()
    assert main(["store", "check", *where.args]) == 1
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [line[:3] for line in lines] == [["counter_behind", "counters", counter]]

    async def start() -> None:
        store = make_store(
            store_root=where.root, postgres_dsn=where.dsn, postgres_schema=where.schema or "wf"
        )
        node = SchedulerNode(store, clock=VirtualClock())
        await node.start(background=False)
        await node.stop()

    with pytest.raises(CorruptRecord) as refused:
        asyncio.run(start())
    message = refused.value.message
    assert "\n" not in message
    assert f"counter {counter!r} is 0" in message
    assert (str(where.root / "scheduler.db") if where.root else where.schema) in message


# -------------------------------------------------------- damaged and foreign files


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` (``root`` itself included) with its bytes (``None``:
    a folder): what a command must leave exactly as it found it."""
    if not root.exists():
        return {}
    found: dict[str, bytes | None] = {str(root): None if root.is_dir() else root.read_bytes()}
    for path in sorted(root.rglob("*")):
        found[str(path)] = None if path.is_dir() else path.read_bytes()
    return found


def _flip_ascii_tail(db: Path, count: int) -> None:
    """Change the last ``count`` bytes of the last page that are ASCII letters or
    digits to a neighbouring character: the b-tree stays well formed, the data not."""
    page = 4096
    data = bytearray(db.read_bytes())
    assert len(data) % page == 0
    for i in range(len(data) - count, len(data)):
        if 0x30 <= data[i] <= 0x7A:
            data[i] ^= 0x01
    db.write_bytes(bytes(data))


def _populated(tmp_path: Path, activities: int) -> Path:
    """A SQLite store with ``activities`` activities (one leased), stopped cleanly."""
    root = tmp_path / "store"
    where = Where("sqlite", ["--store-root", str(root)], root, None)
    where.populate(activities)
    return root


def test_check_runs_sqlites_integrity_check_on_a_damaged_last_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _populated(tmp_path, 200)
    db = root / "scheduler.db"
    _flip_ascii_tail(db, 40)
    conn = sqlite3.connect(db)
    try:
        # The damage this test is about: quick_check misses it, integrity_check does not.
        assert conn.execute("PRAGMA quick_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA integrity_check").fetchall() != [("ok",)]
    finally:
        conn.close()
    capsys.readouterr()
    assert main(["store", "check", "--store-root", str(root)]) == 1
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert ["damaged", "database", "integrity_check:1"] in [line[:3] for line in lines], lines
    assert any(str(db) in line[3] and "index" in line[3] for line in lines), lines


def test_check_reports_a_last_page_full_of_garbage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _populated(tmp_path, 200)
    db = root / "scheduler.db"
    with db.open("r+b") as file:
        file.seek(db.stat().st_size - 4096)
        file.write(bytes(range(256)) * 16)
    capsys.readouterr()
    assert main(["store", "check", "--store-root", str(root)]) == 1
    captured = capsys.readouterr()
    lines = [line.split("\t") for line in captured.out.splitlines()]
    assert lines
    assert all(line[0] == "damaged" for line in lines), lines
    assert captured.err == ""


def _zero_bytes(root: Path) -> None:
    root.mkdir()
    (root / "scheduler.db").touch()


def _text_file(root: Path) -> None:
    root.mkdir()
    (root / "scheduler.db").write_text("these are my notes, not a database\n" * 200)


def _foreign_sqlite(root: Path) -> None:
    root.mkdir()
    conn = sqlite3.connect(root / "scheduler.db")
    try:
        conn.execute("CREATE TABLE recipes (name TEXT PRIMARY KEY, steps TEXT)")
        conn.execute("INSERT INTO recipes VALUES ('bread', 'knead')")
        conn.commit()
    finally:
        conn.close()


def _empty_folder(root: Path) -> None:
    root.mkdir()


def _nothing(root: Path) -> None:
    pass


UNREADABLE = {
    "zero-byte": (_zero_bytes, "is empty (0 bytes)"),
    "text-file": (_text_file, "is not an SQLite database"),
    "foreign-sqlite": (_foreign_sqlite, "not a wf store (no schema_migrations table"),
    "folder-without-db": (_empty_folder, "holds no scheduler.db"),
    "mistyped-path": (_nothing, "the folder does not exist"),
}


@pytest.mark.parametrize("case", sorted(UNREADABLE))
def test_check_refuses_what_is_not_a_store_with_exit_3_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    make, problem = UNREADABLE[case]
    root = tmp_path / "store"
    make(root)
    before = _tree(tmp_path)
    assert main(["store", "check", "--store-root", str(root)]) == 3
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.splitlines()) == 1, captured.err
    assert captured.err.startswith("wf: error: store unreadable: ")
    assert problem in captured.err
    assert str(root) in captured.err
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("case", ["zero-byte", "text-file", "foreign-sqlite"])
def test_migrate_refuses_a_file_that_is_not_a_store_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    make, problem = UNREADABLE[case]
    root = tmp_path / "store"
    make(root)
    before = _tree(tmp_path)
    assert main(["store", "migrate", "--store-root", str(root)]) == 3
    captured = capsys.readouterr()
    assert len(captured.err.splitlines()) == 1, captured.err
    assert problem in captured.err
    assert _tree(tmp_path) == before


def test_check_on_a_store_of_an_older_schema_refuses_instead_of_migrating(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "store"
    assert main(["store", "migrate", "--store-root", str(root)]) == 0
    conn = sqlite3.connect(root / "scheduler.db", isolation_level=None)
    try:
        newest = conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0]
        conn.execute("DELETE FROM schema_migrations WHERE version = ?", (newest,))
    finally:
        conn.close()
    capsys.readouterr()
    assert main(["store", "check", "--store-root", str(root)]) == 3
    err = capsys.readouterr().err
    assert "run `wf store migrate` first" in err
    assert len(err.splitlines()) == 1


def test_check_refuses_a_missing_postgres_schema_and_creates_nothing(
    pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import psycopg

    schema = new_schema_name()
    try:
        assert main(["store", "check", "--postgres", pg_dsn, "--schema", schema]) == 3
        captured = capsys.readouterr()
        assert len(captured.err.splitlines()) == 1, captured.err
        assert f"no store in PostgreSQL schema {schema!r}" in captured.err
        with psycopg.connect(pg_dsn) as conn:
            found = conn.execute(
                "SELECT 1 FROM pg_namespace WHERE nspname = %s", [schema]
            ).fetchone()
        assert found is None
    finally:
        drop_schema(pg_dsn, schema)


def test_a_postgres_schema_holding_other_tables_is_refused(
    pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import psycopg
    from psycopg import sql

    schema = new_schema_name()
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
            conn.execute(
                sql.SQL("CREATE TABLE {}.recipes (name TEXT)").format(sql.Identifier(schema))
            )
        for command in ("check", "migrate"):
            assert main(["store", command, "--postgres", pg_dsn, "--schema", schema]) == 3
            captured = capsys.readouterr()
            assert len(captured.err.splitlines()) == 1, captured.err
            assert "holds tables but no wf store" in captured.err
        with psycopg.connect(pg_dsn) as conn:
            tables = conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                [schema],
            ).fetchall()
        assert tables == [("recipes",)]
    finally:
        drop_schema(pg_dsn, schema)


def _raw_spec(where: Where, activity_id: str) -> bytes:
    """An activity's stored spec blob, read behind the store's back."""
    if where.root is not None:
        conn = sqlite3.connect(where.root / "scheduler.db")
        try:
            found = conn.execute(
                "SELECT spec FROM activities WHERE activity_id = ?", (activity_id,)
            ).fetchone()
        finally:
            conn.close()
        return bytes(found[0])
    import psycopg
    from psycopg import sql

    assert where.dsn is not None
    with psycopg.connect(where.dsn) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(where.schema)))
        row = conn.execute(
            "SELECT spec FROM activities WHERE activity_id = %s", [activity_id]
        ).fetchone()
    assert row is not None
    return bytes(row[0])


def test_a_spec_holding_text_that_is_not_utf8_fails_closed(
    where: Where, capsys: pytest.CaptureFixture[str]
) -> None:
    # msgspec reports such a string as UnicodeDecodeError, not as a DecodeError.
    where.populate()
    spec = _raw_spec(where, "a2")
    field = b"\xadactivity_type\xa1t"
    assert spec.count(field) == 1
    where.sql(
        "UPDATE activities SET spec = ? WHERE activity_id = ?",
        spec.replace(field, b"\xadactivity_type\xa1\xff"),
        "a2",
    )
    capsys.readouterr()
    assert main(["store", "check", *where.args]) == 1
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert ["malformed_row", "activities", "a2"] in [line[:3] for line in lines], lines

    async def start() -> list[str]:
        store = make_store(
            store_root=where.root, postgres_dsn=where.dsn, postgres_schema=where.schema or "wf"
        )
        node = SchedulerNode(store, clock=VirtualClock())
        report = await node.start(background=False)
        await node.stop()
        return [d.key for d in report.diagnostics]

    # The server starts; the activity is left out and reported.
    assert "a2" in asyncio.run(start())


def test_the_servers_postgres_schema_spelling_names_the_same_schema(
    capsys: pytest.CaptureFixture[str],
) -> None:
    dsn = postgres_dsn()
    schema = new_schema_name()
    try:
        assert main(["store", "migrate", "--postgres", dsn, "--postgres-schema", schema]) == 0
        capsys.readouterr()
        # The store made under --postgres-schema is the one --schema checks.
        assert main(["store", "check", "--postgres", dsn, "--schema", schema, "--json"]) == 0
        assert json.loads(capsys.readouterr().out) == []  # no diagnostics
    finally:
        drop_schema(dsn, schema)
