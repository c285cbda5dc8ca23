"""The PostgreSQL test policy, importable from any test folder (``import _pg``).

See ``tests/conftest.py``: skip locally without a server, fail under ``CI=true``.
"""

from __future__ import annotations

import os
import uuid

import pytest

DSN_ENV = "WF_TEST_POSTGRES_DSN"
CONNECT_TIMEOUT_S = 3
DROP_LOCK_TIMEOUT = "10s"


def postgres_unavailable(reason: str) -> None:
    """Skip locally; fail under ``CI=true``."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"PostgreSQL is required in CI, never skipped: {reason}")
    pytest.skip(f"PostgreSQL not available: {reason}")


def postgres_dsn() -> str:
    """The test server's DSN, checked reachable; skips or fails as above."""
    import psycopg

    dsn = os.environ.get(DSN_ENV, "")
    if not dsn:
        postgres_unavailable(f"{DSN_ENV} is not set")
    try:
        psycopg.connect(dsn, connect_timeout=CONNECT_TIMEOUT_S).close()
    except psycopg.OperationalError as exc:
        postgres_unavailable(f"cannot connect with {DSN_ENV}: {exc}")
    return dsn


def optional_postgres_dsn() -> str | None:
    """The test server's DSN if it answers; ``None`` locally without one (the caller
    runs without PostgreSQL), and a failure under ``CI=true``."""
    dsn = os.environ.get(DSN_ENV, "")
    reason = f"{DSN_ENV} is not set"
    if dsn:
        import psycopg

        try:
            psycopg.connect(dsn, connect_timeout=CONNECT_TIMEOUT_S).close()
        except psycopg.OperationalError as exc:
            reason = f"cannot connect with {DSN_ENV}: {exc}"
        else:
            return dsn
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"PostgreSQL is required in CI, never skipped: {reason}")
    return None


def new_schema_name() -> str:
    """A schema name no other test or run uses."""
    return f"wf_test_{uuid.uuid4().hex}"


def drop_schema(dsn: str, schema: str) -> None:
    """Drop a test schema (waiting a bounded time for sessions still closing)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("SET lock_timeout = {}").format(sql.Literal(DROP_LOCK_TIMEOUT)))
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
