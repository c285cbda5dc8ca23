"""Store locations for the node and crash tests (a module of its own, not ``conftest``,
so that tests import it by a name no other test folder uses).

A :class:`Location` makes stores over a fresh, test-private location (a
temporary store root for SQLite, a unique schema for PostgreSQL) and names it as
command-line arguments (for ``wf store`` and the crash target).

PostgreSQL's DSN comes from ``WF_TEST_POSTGRES_DSN``. Without it, or without a
reachable server, the PostgreSQL cases are skipped locally and FAIL when
``CI=true``: CI never skips them (the same rule as ``tests/store``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from wf.store import make_store
from wf.store.protocol import Store

DSN_ENV = "WF_TEST_POSTGRES_DSN"
CONNECT_TIMEOUT_S = 3
DROP_LOCK_TIMEOUT = "10s"


@dataclass(frozen=True)
class Location:
    """One test-private store location."""

    name: str
    """``sqlite`` or ``postgres``."""
    store_root: Path | None = None
    dsn: str | None = None
    schema: str = "wf"

    def make(self) -> Store:
        """A new, unopened store over this location."""
        return make_store(
            store_root=self.store_root, postgres_dsn=self.dsn, postgres_schema=self.schema
        )

    @property
    def args(self) -> list[str]:
        """The location as ``wf store`` / crash-target arguments."""
        if self.dsn is not None:
            return ["--postgres", self.dsn, "--schema", self.schema]
        return ["--store-root", str(self.store_root)]


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"PostgreSQL is required in CI, never skipped: {reason}")
    pytest.skip(f"PostgreSQL not available: {reason}")


def postgres_dsn() -> str:
    """The test server's DSN; skips (or fails in CI) when it is missing or unreachable."""
    import psycopg

    dsn = os.environ.get(DSN_ENV, "")
    if not dsn:
        _unavailable(f"{DSN_ENV} is not set")
    try:
        psycopg.connect(dsn, connect_timeout=CONNECT_TIMEOUT_S).close()
    except psycopg.OperationalError as exc:
        _unavailable(f"cannot connect with {DSN_ENV}: {exc}")
    return dsn


def drop_schema(dsn: str, schema: str) -> None:
    """Drop a test schema (waiting a bounded time for sessions still closing)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("SET lock_timeout = {}").format(sql.Literal(DROP_LOCK_TIMEOUT)))
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
