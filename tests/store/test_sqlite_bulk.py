"""The SQLite writer's multi-row statements (``wf.store.sqlite_bulk``) leave exactly
what running the same rows one by one through ``executemany`` leaves."""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from wf.store import codec, sqlite_bulk
from wf.store import sqlite_files as files
from wf.store.sqlite_files import DB_NAME

IDS = [f"act-{i}" for i in range(6)]


def fresh_db(root: Path) -> sqlite3.Connection:
    files.make_root(root)
    files.create(root)
    return sqlite3.connect(root / DB_NAME, isolation_level=None)


def activity_rows() -> list[dict[str, Any]]:
    return [
        {
            "activity_id": aid,
            "seq": i + 1,
            "spec": b"\x80",
            "state": "queued",
            "not_before": None if i % 2 else 5.0,
            "at": 1.0 + i,
        }
        for i, aid in enumerate(IDS)
    ]


maybe_float = st.one_of(st.none(), st.floats(0, 1e6, allow_nan=False))
update_row = st.fixed_dictionaries(
    {
        "activity_id": st.sampled_from(IDS),
        "to_state": st.sampled_from(["queued", "leased", "executing", "completed"]),
        "attempt": st.integers(0, 5),
        "failures": st.integers(0, 5),
        "infra_requeues": st.integers(0, 5),
        "steals": st.integers(0, 5),
        "token": st.integers(0, 2**40),
        "held_worker_id": st.one_of(st.none(), st.sampled_from(["w1", "w2"])),
        "held_expires_at": st.floats(0, 1e6, allow_nan=False),
        "not_before": maybe_float,
        "queued_at": maybe_float,
        "error": st.one_of(st.none(), st.text(max_size=5)),
        "at": st.floats(0, 1e6, allow_nan=False),
        # What insert_transition reads besides (the same dict serves both queries).
        "from_state": st.just("queued"),
        "reason": st.just("granted"),
        "worker_id": st.one_of(st.none(), st.just("w1")),
        "lease_expires_at": st.floats(0, 1e6, allow_nan=False),
        "result": st.one_of(st.none(), st.binary(max_size=4)),
        "stack_trace": st.none(),
    }
)


def dump(conn: sqlite3.Connection) -> tuple[list[Any], list[Any]]:
    return (
        conn.execute("SELECT * FROM activities ORDER BY seq").fetchall(),
        conn.execute("SELECT * FROM transitions ORDER BY id").fetchall(),
    )


def apply_both(rows: list[dict[str, Any]]) -> Iterator[tuple[Any, Any]]:
    q = codec.queries()
    with tempfile.TemporaryDirectory() as tmp:
        one_by_one = fresh_db(Path(tmp) / "a")
        bulk = fresh_db(Path(tmp) / "b")
        try:
            for conn, run in (
                (one_by_one, lambda c, name, p: c.executemany(q[name], p)),
                (bulk, sqlite_bulk.execute_group),
            ):
                conn.execute("BEGIN IMMEDIATE")
                run(conn, "insert_activity", activity_rows())
                run(conn, "apply_transition", rows)
                run(conn, "insert_transition", rows)
                conn.execute("COMMIT")
            yield dump(one_by_one), dump(bulk)
        finally:
            one_by_one.close()
            bulk.close()


@settings(max_examples=60, deadline=None)
@given(st.lists(update_row, min_size=0, max_size=150))
def test_multi_row_statements_leave_what_one_row_at_a_time_leaves(
    rows: list[dict[str, Any]],
) -> None:
    """Repeated activity ids (several updates of one row in one group, which must land
    in order), NULLs the update keeps the old value for, and groups longer than one
    chunk."""
    for n, row in enumerate(rows):
        # A lease is unique per (activity, token) in the history: one token per row.
        row["token"] = row["token"] * 1_000 + n
    for expected, got in apply_both(rows):
        assert got == expected


@given(st.lists(st.sampled_from(IDS), max_size=300))
def test_chunks_keep_the_order_never_repeat_a_key_and_are_powers_of_two(ids: list[str]) -> None:
    rows = [{"activity_id": aid, "n": n} for n, aid in enumerate(ids)]
    chunks = list(sqlite_bulk._chunks(rows, "activity_id"))
    assert [r for chunk in chunks for r in chunk] == rows
    for chunk in chunks:
        keys = [r["activity_id"] for r in chunk]
        assert len(keys) == len(set(keys))
        assert 1 <= len(chunk) <= sqlite_bulk.CHUNK_ROWS_MAX
        assert len(chunk) & (len(chunk) - 1) == 0


def test_a_long_insert_group_runs_as_full_chunks() -> None:
    sizes = [len(c) for c in sqlite_bulk._chunks([{}] * 200, None)]
    assert sizes == [64, 64, 64, 8]


def test_the_multi_row_update_probes_the_activity_id_index(tmp_path: Path) -> None:
    """A plan that scanned the activities table per commit would grow with the store."""
    conn = fresh_db(tmp_path / "s")
    try:
        form = sqlite_bulk.bulk_queries()["apply_transition"]
        plan = conn.execute(
            "EXPLAIN QUERY PLAN " + form.text(4), [None] * (4 * len(form.names))
        ).fetchall()
        details = [row[-1] for row in plan]
        assert any(d.startswith("SEARCH activities USING INDEX") for d in details), details
        assert not any(d.startswith("SCAN activities") for d in details), details
    finally:
        conn.close()


def test_a_group_of_one_row_and_other_queries_keep_executemany() -> None:
    calls: list[tuple[str, int]] = []

    class Recording:
        def executemany(self, sql: str, params: list[dict[str, Any]]) -> None:
            calls.append((sql, len(params)))

        def execute(self, sql: str, params: list[Any]) -> None:
            raise AssertionError("no multi-row statement expected")

    q = codec.queries()
    conn: Any = Recording()
    sqlite_bulk.execute_group(conn, "insert_transition", [{}])
    sqlite_bulk.execute_group(conn, "renew_lease", [{}, {}])
    assert calls == [(q["insert_transition"], 1), (q["renew_lease"], 2)]
