"""The PostgreSQL store's schema: created and migrated, or verified, at open.

Theory of operation
-------------------
Everything of one store lives in one PostgreSQL schema. :func:`migrate`
creates the schema and applies the files of ``sql/postgres/`` in one
transaction that first takes ``pg_advisory_xact_lock`` on a key derived from
the schema name (:func:`migration_lock_key`): two nodes starting at once
serialize, and the second finds nothing left to do. A schema newer than this
code, or one that holds tables but no ``schema_migrations`` (another
application's), is refused with :class:`~wf.errors.CorruptRecord`.
:func:`verify` is the ``create=False`` path (``wf store check``): nothing is
created or migrated, and a schema without a store is
:class:`~wf.errors.NotFound`.
"""

from __future__ import annotations

import hashlib
from typing import Final

from psycopg import sql

from wf.errors import CorruptRecord, NotFound
from wf.store import check as checks
from wf.store import codec
from wf.store.postgres_load import Conn

_BOOTSTRAP: Final = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
)"""
_SELECT_MIGRATIONS: Final = "SELECT version, name FROM schema_migrations ORDER BY version"
_INSERT_MIGRATION: Final = "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)"
_SELECT_TABLES: Final = (
    "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = %s AND c.relkind IN ('r', 'p') ORDER BY c.relname"
)


def lock_key(purpose: str, schema: str) -> int:
    """A 64-bit advisory-lock key for ``purpose`` on ``schema``'s store."""
    digest = hashlib.blake2b(f"wf:{purpose}:{schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def migration_lock_key(schema: str) -> int:
    """The transaction advisory-lock key that serializes migrations of ``schema``."""
    return lock_key("migrate", schema)


def where(schema: str) -> str:
    """How diagnostics and errors name the store in ``schema``."""
    return f"PostgreSQL schema {schema!r}"


async def migrate(conn: Conn, schema: str) -> None:
    """Create ``schema`` if needed and apply every pending migration, in one transaction
    under the migration lock."""
    known = codec.migrations("postgres")
    newest = known[-1][0]
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s::bigint)", [migration_lock_key(schema)])
        tables = await _tables(conn, schema)
        if tables and "schema_migrations" not in tables:
            raise _foreign(tables, schema)
        await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        await conn.execute(_BOOTSTRAP)
        cur = await conn.execute(_SELECT_MIGRATIONS)
        applied: dict[int, str] = {int(v): str(n) for v, n in await cur.fetchall()}
        checks.verify_migrations(applied, known, where(schema), pending_ok=True)
        if applied and max(applied) > newest:
            raise CorruptRecord(
                f"schema {schema!r} is at version {max(applied)}, newer than this "
                f"wf understands ({newest}); upgrade wf",
                schema=schema,
                version=max(applied),
                known=newest,
            )
        for version, name, text in known:
            if version in applied:
                continue
            await conn.execute(text)
            await conn.execute(_INSERT_MIGRATION, [version, name])


async def verify(conn: Conn, schema: str) -> None:
    """``create=False``: the schema must hold a wf store at this code's version;
    nothing is created or migrated (NotFound if there is no store at all)."""
    tables = await _tables(conn, schema)
    if not tables:
        raise NotFound(
            f"no store in {where(schema)}: the schema does not exist or is empty",
            schema=schema,
        )
    if "schema_migrations" not in tables:
        raise _foreign(tables, schema)
    cur = await conn.execute(_SELECT_MIGRATIONS)
    applied = {int(v): str(n) for v, n in await cur.fetchall()}
    known = codec.migrations("postgres")
    checks.verify_migrations(applied, known, where(schema), pending_ok=False)


async def _tables(conn: Conn, schema: str) -> list[str]:
    """The tables of the store's schema (none: the schema is empty or missing)."""
    cur = await conn.execute(_SELECT_TABLES, [schema])
    return [str(name) for (name,) in await cur.fetchall()]


def _foreign(tables: list[str], schema: str) -> CorruptRecord:
    held = ", ".join(tables[:5])
    return CorruptRecord(
        f"store {where(schema)} holds tables but no wf store (no schema_migrations "
        f"table; it holds {held})",
        schema=schema,
    )
