"""Fixtures shared by every test folder; the PostgreSQL policy lives in ``_pg``, once.

PostgreSQL's DSN comes from ``WF_TEST_POSTGRES_DSN`` (``.ci/run`` sets it).
Without it, or without a reachable server, PostgreSQL tests are skipped
locally and FAIL when ``CI=true``: CI never skips them. Each test that needs
a database works in a schema of its own (``pg_schema``), dropped afterwards,
because the server keeps whatever earlier runs left in it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from _pg import drop_schema, new_schema_name, postgres_dsn


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    """The test server's DSN, checked reachable."""
    return postgres_dsn()


@pytest.fixture
def pg_schema(pg_dsn: str) -> Iterator[str]:
    """A unique schema name for this test; the schema is dropped afterwards."""
    schema = new_schema_name()
    yield schema
    drop_schema(pg_dsn, schema)
