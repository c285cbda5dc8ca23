"""The two stores' schemas, after every migration, describe the same tables.

Both backends run the same named queries (``sql/queries.sql``) over schemas
that two folders of migrations build separately, so the folders can drift: a
column added to one only, a key one side enforces and the other does not. This
test builds a real store of each kind, reads back every table's columns
(name, type mapped between the dialects, nullability), primary key and unique
keys, and fails on any difference that :data:`DELIBERATE` does not name with
its reason. A deliberate difference that no longer exists fails too, so the
list stays true.
"""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest

from wf.store.postgres import PostgresStore
from wf.store.sqlite import DB_NAME, SQLiteStore

SQLITE_TYPES = {"INTEGER": "integer", "TEXT": "text", "REAL": "real", "BLOB": "blob"}
"""Declared SQLite column types, by the class both dialects share."""
POSTGRES_TYPES = {
    "bigint": "integer",
    "integer": "integer",
    "smallint": "integer",
    "text": "text",
    "double precision": "real",
    "bytea": "blob",
}
"""PostgreSQL column types, by the same classes (64-bit SQLite integers: bigint)."""

DELIBERATE: dict[str, str] = {
    "table owner: postgres only": (
        "PostgreSQL labels its advisory-lock owner in a row; SQLite's lock file holds it"
    ),
    "table fence: postgres only": (
        "the write fence (ownership epoch, commit sequence) is PostgreSQL's; SQLite's one "
        "writing connection lives and dies with its file lock"
    ),
    "table cluster_nodes: postgres only": (
        "the nodes of a cluster on one PostgreSQL store report there (docs/ha.md); an "
        "SQLite store has one server"
    ),
    "table change_log: postgres only": (
        "the log a PostgreSQL standby follows to keep its copy warm (docs/ha.md)"
    ),
    "table change_log_meta: postgres only": "how far the active pruned that log",
    "activities: primary key (seq) vs (activity_id)": (
        "SQLite keys activities by seq (the rowid) so that rows lie in creation order for "
        "recovery's scan; PostgreSQL keys them by id. Both keep the other column unique"
    ),
    "activities: unique (activity_id) vs (seq)": "the other half of the key swap above",
    "schema_migrations.applied_at: type text vs timestamp with time zone": (
        "SQLite has no timestamp type; the store writes ISO-8601 text there"
    ),
    "runs.run_id: nullable vs not null": (
        "a TEXT PRIMARY KEY of an SQLite rowid table accepts NULL (a documented SQLite "
        "quirk); the store always writes a run id"
    ),
    "schedules.schedule_id: nullable vs not null": (
        "the same SQLite quirk; the store always writes a schedule id"
    ),
}
"""Known differences, ``<what>: <sqlite> vs <postgres>``, and why each is so."""


@dataclass
class Table:
    """What the parity compares of one table."""

    columns: dict[str, tuple[str, bool]] = field(default_factory=dict)
    """Column -> (type class, NOT NULL)."""
    primary_key: tuple[str, ...] = ()
    unique: set[tuple[str, ...]] = field(default_factory=set)
    """Column lists of the unique constraints and unique indexes (partial ones too)."""


def sqlite_schema(db: Path) -> dict[str, Table]:
    conn = sqlite3.connect(db)
    try:
        tables: dict[str, Table] = {}
        names = conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'table' "
            "AND name NOT LIKE 'sqlite_%' ORDER BY name"
        ).fetchall()
        for name, ddl in names:
            table = tables[name] = Table()
            without_rowid = "WITHOUT ROWID" in ddl.upper()
            keyed: list[tuple[int, str]] = []
            for _cid, column, declared, notnull, _default, pk in conn.execute(
                f"PRAGMA table_info({name})"
            ):
                kind = SQLITE_TYPES.get(declared.upper(), declared.lower())
                # SQLite enforces NOT NULL on a primary key only for an INTEGER PRIMARY
                # KEY (the rowid) and in WITHOUT ROWID tables.
                rowid = pk and kind == "integer" and not without_rowid
                enforced = bool(notnull) or bool(pk and (without_rowid or rowid))
                table.columns[column] = (kind, enforced)
                if pk:
                    keyed.append((pk, column))
            table.primary_key = tuple(column for _, column in sorted(keyed))
            for _seq, index, unique, origin, _partial in conn.execute(f"PRAGMA index_list({name})"):
                if not unique or origin == "pk":
                    continue
                info = conn.execute(f"PRAGMA index_info({index})").fetchall()
                table.unique.add(tuple(column for _, _, column in sorted(info)))
        return tables
    finally:
        conn.close()


def postgres_schema(dsn: str, schema: str) -> dict[str, Table]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        tables: dict[str, Table] = {}
        for name, column, kind, nullable in conn.execute(
            "SELECT table_name, column_name, data_type, is_nullable "
            "FROM information_schema.columns WHERE table_schema = %s "
            "ORDER BY table_name, ordinal_position",
            [schema],
        ):
            kind_class = POSTGRES_TYPES.get(kind, kind)
            tables.setdefault(name, Table()).columns[column] = (kind_class, nullable == "NO")
        keys = conn.execute(
            "SELECT t.relname, i.indisprimary, "
            "  ARRAY(SELECT a.attname FROM unnest(i.indkey) WITH ORDINALITY k(attnum, n) "
            "        JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum "
            "        ORDER BY k.n) "
            "FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid "
            "JOIN pg_namespace s ON s.oid = t.relnamespace "
            "WHERE s.nspname = %s AND i.indisunique",
            [schema],
        ).fetchall()
        for name, primary, columns in keys:
            if primary:
                tables[name].primary_key = tuple(columns)
            else:
                tables[name].unique.add(tuple(columns))
        return tables


def differences(sqlite: dict[str, Table], postgres: dict[str, Table]) -> list[str]:
    """Every difference, ``<what>: <sqlite> vs <postgres>`` (see :data:`DELIBERATE`)."""
    found: list[str] = []
    for name in sorted(sqlite.keys() - postgres.keys()):
        found.append(f"table {name}: sqlite only")
    for name in sorted(postgres.keys() - sqlite.keys()):
        found.append(f"table {name}: postgres only")
    for name in sorted(sqlite.keys() & postgres.keys()):
        lite, pg = sqlite[name], postgres[name]
        for column in sorted(lite.columns.keys() | pg.columns.keys()):
            if column not in pg.columns:
                found.append(f"{name}.{column}: column sqlite only")
                continue
            if column not in lite.columns:
                found.append(f"{name}.{column}: column postgres only")
                continue
            lite_type, lite_notnull = lite.columns[column]
            pg_type, pg_notnull = pg.columns[column]
            if lite_type != pg_type:
                found.append(f"{name}.{column}: type {lite_type} vs {pg_type}")
            if lite_notnull != pg_notnull:
                found.append(f"{name}.{column}: {_null(lite_notnull)} vs {_null(pg_notnull)}")
        if lite.primary_key != pg.primary_key:
            found.append(
                f"{name}: primary key ({', '.join(lite.primary_key)}) vs "
                f"({', '.join(pg.primary_key)})"
            )
        if lite.unique != pg.unique:
            only_lite = sorted(lite.unique - pg.unique)
            only_pg = sorted(pg.unique - lite.unique)
            found.append(
                f"{name}: unique {' '.join('(' + ', '.join(u) + ')' for u in only_lite)} vs "
                f"{' '.join('(' + ', '.join(u) + ')' for u in only_pg)}"
            )
    return found


def _null(notnull: bool) -> str:
    return "not null" if notnull else "nullable"


def build_both(root: Path, dsn: str, schema: str) -> Path:
    """A new store of each kind (every migration applied); the SQLite database's path."""

    async def main() -> None:
        for store in (SQLiteStore(root), PostgresStore(dsn, schema=schema)):
            await store.open()
            await store.close()

    asyncio.run(main())
    return root / DB_NAME


def test_both_stores_build_the_same_tables_but_for_the_deliberate_differences(
    tmp_path: Path, pg_dsn: str, pg_schema: str
) -> None:
    db = build_both(tmp_path / "store", pg_dsn, pg_schema)
    found = differences(sqlite_schema(db), postgres_schema(pg_dsn, pg_schema))
    unexplained = [d for d in found if d not in DELIBERATE]
    assert unexplained == [], "schemas drifted apart (fix a migration or explain it)"
    stale = sorted(DELIBERATE.keys() - set(found))
    assert stale == [], "a deliberate difference is gone: take it off the list"


def test_the_comparison_sees_a_column_type_nullability_and_key_that_differ(
    tmp_path: Path,
) -> None:
    """The checker itself: every kind of drift it claims to catch, it reports."""
    lite = Table(
        columns={"a": ("text", True), "b": ("integer", False), "c": ("blob", False)},
        primary_key=("a",),
        unique={("b",)},
    )
    pg = Table(columns={"a": ("text", True), "b": ("real", True)}, primary_key=("b",))
    assert differences({"t": lite, "x": Table()}, {"t": pg}) == [
        "table x: sqlite only",
        "t.b: type integer vs real",
        "t.b: nullable vs not null",
        "t.c: column sqlite only",
        "t: primary key (a) vs (b)",
        "t: unique (b) vs ",
    ]


@pytest.mark.parametrize("declared", ["INTEGER", "TEXT", "REAL", "BLOB"])
def test_every_sqlite_type_the_migrations_use_has_a_postgres_class(declared: str) -> None:
    assert SQLITE_TYPES[declared] in POSTGRES_TYPES.values()
