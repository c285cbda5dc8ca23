"""PostgreSQL fixtures: the DSN from ``WF_TEST_POSTGRES_DSN`` and one fresh schema per test.

Without a reachable server the PostgreSQL tests are skipped locally, but fail
when ``CI=true``: CI must never skip them silently.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

DSN_ENV = "WF_TEST_POSTGRES_DSN"
CONNECT_TIMEOUT_S = 3
DROP_LOCK_TIMEOUT = "10s"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"PostgreSQL is required in CI: {reason}")
    pytest.skip(f"PostgreSQL not available: {reason}")


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    """The test server's DSN; skips (or fails in CI) when it is missing or unreachable."""
    dsn = os.environ.get(DSN_ENV, "")
    if not dsn:
        _unavailable(f"{DSN_ENV} is not set")
    try:
        psycopg.connect(dsn, connect_timeout=CONNECT_TIMEOUT_S).close()
    except psycopg.OperationalError as exc:
        _unavailable(f"cannot connect with {DSN_ENV}: {exc}")
    return dsn


@pytest.fixture
def pg_schema(pg_dsn: str) -> Iterator[str]:
    """A unique schema name for this test; the schema is dropped afterwards."""
    schema = f"wf_test_{secrets.token_hex(6)}"
    yield schema
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("SET lock_timeout = {}").format(sql.Literal(DROP_LOCK_TIMEOUT)))
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
