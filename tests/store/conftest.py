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

from collections.abc import Iterator
from pathlib import Path

import pytest
from _store_backends import Backend, postgres_backend, sqlite_backend

from _pg import drop_schema, new_schema_name


@pytest.fixture(params=["sqlite", "postgres"])
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A :class:`Backend` over a fresh, test-private location."""
    if request.param == "sqlite":
        yield sqlite_backend(tmp_path / "store")
        return
    dsn: str = request.getfixturevalue("pg_dsn")
    schema = new_schema_name()
    try:
        yield postgres_backend(dsn, schema)
    finally:
        drop_schema(dsn, schema)
