"""Multi-row statements for the SQLite writer's group commit.

Theory of operation
-------------------
A group commit runs a handful of ``executemany`` groups
(:func:`~wf.store.codec.group_steps`): the history rows, the activity row
updates, the counters. Python's ``sqlite3`` releases the GIL around each
``sqlite3_step``, once per *row*, and takes it back before binding the next
row. While the event-loop thread is busy (parsing the next request, granting
the next lease), each retake waits for the loop to let go, so a commit of
twenty rows paid twenty GIL hand-offs between two threads. On the stock W1 of
``bench/stock_w1.py`` that made the SQL part of a commit take about 0.55 ms,
more than its fsync.

So the writer runs the hot queries as *one statement per chunk of rows*:

* an ``INSERT ... VALUES (...)`` becomes ``INSERT ... VALUES (...), (...), ...``;
* an ``UPDATE t SET ... WHERE key = :key`` becomes
  ``WITH u(p_a, p_b, ...) AS (VALUES (...), (...)) UPDATE t SET ... FROM u WHERE
  key = u.p_key``, each ``:name`` read from ``u.p_name`` (the prefix keeps
  them apart from the table's own columns of the same name). SQLite plans it
  as a scan of ``u`` and a unique-index probe of ``t`` per row.

All of a chunk's parameters are bound under the GIL in one call and the whole
chunk runs in one step without it. Chunks are powers of two up to
:data:`CHUNK_ROWS_MAX` rows, so each query has at most seven statement texts
and they stay in the connection's statement cache.

The effect is the same as running the rows one by one, in order: the rows of
one insert are independent, and ``UPDATE ... FROM`` applies one row of ``u``
per target row, so a chunk of updates never names one key twice (a repeated
key starts a new chunk, after the one holding the earlier row).

Only queries listed in :data:`BULK_KEYS` take this path; every other step,
and a group of one row, still runs through ``executemany``. The named query
text stays the one source of truth: the multi-row forms are derived from it.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Final

from wf.errors import Internal
from wf.store import codec

CHUNK_ROWS_MAX: Final = 64
"""Most rows in one multi-row statement (64 history rows bind about 1,000 values,
far under SQLite's 32,766)."""

BULK_KEYS: Final[dict[str, str | None]] = {
    "insert_activity": None,
    "insert_transition": None,
    "apply_transition": "activity_id",
}
"""Query -> the parameter no chunk may repeat (``None``: rows are independent)."""

_PARAM: Final = re.compile(r":(\w+)")
_INSERT: Final = re.compile(r"^\s*(INSERT INTO .*?\bVALUES)\s*(\(.*\))\s*;?\s*$", re.DOTALL)
_UPDATE: Final = re.compile(r"^\s*UPDATE\s+(\w+)\s+SET\s+(.*)\bWHERE\b(.*?);?\s*$", re.DOTALL)


@dataclass(frozen=True)
class BulkQuery:
    """A named query's multi-row form (see the module docstring)."""

    names: tuple[str, ...]
    """Parameter names in placeholder order, per row."""
    key: str | None
    head: str
    row: str
    tail: str
    _texts: dict[int, str] = field(default_factory=dict, compare=False)

    def text(self, rows: int) -> str:
        """The statement for ``rows`` rows."""
        found = self._texts.get(rows)
        if found is None:
            found = self._texts[rows] = self.head + ", ".join([self.row] * rows) + self.tail
        return found

    def execute(self, conn: sqlite3.Connection, params: Sequence[dict[str, Any]]) -> None:
        """Run ``params`` (one dict per row, in order) as few statements."""
        names = self.names
        for chunk in _chunks(params, self.key):
            values = [row[name] for row in chunk for name in names]
            conn.execute(self.text(len(chunk)), values)


def _insert_form(text: str) -> BulkQuery:
    match = _INSERT.match(_strip_comments(text))
    if match is None:
        raise Internal("not an INSERT ... VALUES (...) query")
    head, row = match.groups()
    names = tuple(_PARAM.findall(row))
    return BulkQuery(names, None, head + " ", _PARAM.sub("?", row), "")


def _update_form(text: str, key: str) -> BulkQuery:
    match = _UPDATE.match(_strip_comments(text))
    if match is None:
        raise Internal("not an UPDATE ... SET ... WHERE ... query")
    table, assignments, where = match.groups()
    names = tuple(dict.fromkeys(_PARAM.findall(assignments + where)))
    if key not in names:
        raise Internal(f"the key {key!r} is not a parameter of the query")
    columns = ", ".join(f"p_{name}" for name in names)
    assignments = _PARAM.sub(r"u.p_\1", assignments).strip()
    where = _PARAM.sub(r"u.p_\1", where).strip()
    row = "(" + ", ".join("?" * len(names)) + ")"
    head = f"WITH u({columns}) AS (VALUES "
    tail = f") UPDATE {table} SET {assignments} FROM u WHERE {where}"
    return BulkQuery(names, key, head, row, tail)


def _strip_comments(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))


@cache
def bulk_queries() -> dict[str, BulkQuery]:
    """The multi-row forms of :data:`BULK_KEYS`' queries (from ``sql/queries.sql``)."""
    q = codec.queries()
    forms: dict[str, BulkQuery] = {}
    for name, key in BULK_KEYS.items():
        text = q[name]
        forms[name] = _update_form(text, key) if key is not None else _insert_form(text)
    return forms


def _chunks(
    params: Sequence[dict[str, Any]], key: str | None
) -> Iterator[Sequence[dict[str, Any]]]:
    """``params`` cut into runs with no repeated ``key``, each cut into power-of-two
    chunks of at most :data:`CHUNK_ROWS_MAX` rows, in order."""
    if key is None:
        yield from _sized(params)
        return
    start = 0
    seen: set[Any] = set()
    for i, row in enumerate(params):
        value = row[key]
        if value in seen:
            yield from _sized(params[start:i])
            start = i
            seen = set()
        seen.add(value)
    yield from _sized(params[start:])


def _sized(rows: Sequence[dict[str, Any]]) -> Iterator[Sequence[dict[str, Any]]]:
    at = 0
    left = len(rows)
    while left:
        size = min(CHUNK_ROWS_MAX, 1 << (left.bit_length() - 1))
        yield rows[at : at + size]
        at += size
        left -= size


def execute_group(conn: sqlite3.Connection, name: str, params: list[dict[str, Any]]) -> None:
    """Run one ``executemany`` group of a commit, as multi-row statements where
    :data:`BULK_KEYS` has a form for it (see the module docstring)."""
    form = bulk_queries().get(name) if len(params) > 1 else None
    if form is None:
        conn.executemany(codec.queries()[name], params)
    else:
        form.execute(conn, params)
