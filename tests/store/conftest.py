"""Store fixtures: one ``store_factory`` parametrized over every backend.

Each test gets a fresh location (a temporary store root for SQLite, a unique
schema for PostgreSQL, dropped afterwards) and a
:class:`~_store_backends.Backend` that makes stores over it and runs raw SQL
against it (to plant corrupt rows).

PostgreSQL's DSN comes from ``WF_TEST_POSTGRES_DSN``. Without it, or without a
reachable server, the PostgreSQL cases are skipped locally and FAIL when
``CI=true``: CI never skips them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from _store_backends import Backend, postgres_backend, sqlite_backend

DSN_ENV = "WF_TEST_POSTGRES_DSN"
CONNECT_TIMEOUT_S = 3


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"PostgreSQL is required in CI, never skipped: {reason}")
    pytest.skip(f"PostgreSQL not available: {reason}")


@pytest.fixture(params=["sqlite", "postgres"])
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A :class:`Backend` over a fresh, test-private location."""
    if request.param == "sqlite":
        yield sqlite_backend(tmp_path / "store")
        return
    import psycopg
    from psycopg import sql

    dsn = os.environ.get(DSN_ENV, "")
    if not dsn:
        _unavailable(f"{DSN_ENV} is not set")
    try:
        psycopg.connect(dsn, connect_timeout=CONNECT_TIMEOUT_S).close()
    except psycopg.OperationalError as exc:
        _unavailable(f"cannot connect with {DSN_ENV}: {exc}")
    schema = f"wf_test_{uuid.uuid4().hex}"
    try:
        yield postgres_backend(dsn, schema)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
