"""Store backends for the tests: a :class:`Backend` makes stores over one
test-private location and runs raw SQL there (to plant corrupt rows).

A module of its own (not ``conftest``) so that tests can import it by a name no
other test folder uses.
"""

from __future__ import annotations

import importlib
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from wf.store.protocol import Store


class Backend:
    """Makes stores over one test-private location and runs raw SQL there."""

    def __init__(
        self,
        name: str,
        make: Callable[[], Store],
        execute: Callable[[str, Sequence[Any]], list[tuple[Any, ...]]],
    ) -> None:
        self.name = name
        self._make = make
        self._execute = execute

    def make(self) -> Store:
        """A new, unopened store over this backend's location."""
        return self._make()

    def sql(self, statement: str, *params: Any) -> list[tuple[Any, ...]]:
        """Run one statement (``?`` placeholders) outside any store; rows if it returns any."""
        return self._execute(statement, params)


def sqlite_backend(root: Path) -> Backend:
    from wf.store.sqlite import SQLiteStore

    def execute(statement: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        conn = sqlite3.connect(root / "scheduler.db", isolation_level=None)
        try:
            return conn.execute(statement, tuple(params)).fetchall()
        finally:
            conn.close()

    return Backend("sqlite", lambda: SQLiteStore(root), execute)


def postgres_backend(dsn: str, schema: str) -> Backend:
    import psycopg
    from psycopg import sql

    def make() -> Store:
        module = importlib.import_module("wf.store.postgres")
        store: Store = module.PostgresStore(dsn, schema=schema)
        return store

    def execute(statement: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
            cur = conn.execute(statement.replace("?", "%s"), tuple(params))
            return cur.fetchall() if cur.description is not None else []

    return Backend("postgres", make, execute)
